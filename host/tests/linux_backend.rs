//! The Linux provider against the real kernel.
//!
//! Two parts: the suite every provider runs (`backends::conformance`, in `mod conformance`
//! below), and what only this provider has: bridges, addresses and aliases as the kernel
//! shows them, drift, the namespace's own addresses and routes.
//!
//! Each test makes its own network namespace with `ip netns add` (removed by a drop guard,
//! which also removes every bridge in it) and checks what the provider did with `ip -j`,
//! independently of the provider's own reads.
//!
//! Needs `CAP_NET_ADMIN` and `CAP_SYS_ADMIN` (root) and iproute2. Without them each test prints
//! `SKIP` with the reason and passes, unless `RECONCILER_HOST_REQUIRE_LINUX_TESTS=1` is set,
//! which turns the skip into a failure (for machines where these tests must run).

use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use reconciler_host::config::BackendConfig;
use reconciler_host::sandbox::backends::conformance::spec;
use reconciler_host::sandbox::backends::{
    BackendError, LinuxBackend, NetworkBackend, bridge_name, from_config,
};
use serde_json::Value;

/// A network namespace that exists for one test.
struct Netns {
    name: String,
}

impl Netns {
    fn create(tag: &str) -> Self {
        static SEQ: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "rht-{}-{}-{tag}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let out = run("ip", &["netns", "add", &name]);
        assert!(
            out.status.success(),
            "ip netns add {name}: {}",
            stderr(&out)
        );
        Netns { name }
    }

    /// `ip -n <ns> <args>`, which must succeed.
    fn ip(&self, args: &[&str]) {
        let out = self.ip_raw(args);
        assert!(
            out.status.success(),
            "ip -n {} {}: {}",
            self.name,
            args.join(" "),
            stderr(&out)
        );
    }

    fn ip_raw(&self, args: &[&str]) -> Output {
        let mut full = vec!["-n", &self.name];
        full.extend_from_slice(args);
        run("ip", &full)
    }

    /// The link as `ip -j -d link show` reports it, or `None` when it does not exist.
    fn link(&self, ifname: &str) -> Option<Value> {
        let out = self.ip_raw(&["-j", "-d", "link", "show", "dev", ifname]);
        if !out.status.success() {
            return None;
        }
        let mut links: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(links.len(), 1);
        links.pop()
    }

    /// Non-link-local addresses of `ifname` as `address/prefixlen`, from `ip -j addr show`.
    fn addrs(&self, ifname: &str) -> Vec<String> {
        let out = self.ip_raw(&["-j", "addr", "show", "dev", ifname]);
        assert!(
            out.status.success(),
            "ip addr show {ifname}: {}",
            stderr(&out)
        );
        let links: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        links[0]["addr_info"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|a| a["scope"] != "link")
            .map(|a| format!("{}/{}", a["local"].as_str().unwrap(), a["prefixlen"]))
            .collect()
    }

    fn backend(&self) -> LinuxBackend {
        LinuxBackend::new(Some(&self.name), "rh").unwrap()
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let out = run("ip", &["netns", "del", &self.name]);
        if !out.status.success() {
            eprintln!("cleanup: ip netns del {}: {}", self.name, stderr(&out));
        }
    }
}

fn run(program: &str, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|err| panic!("cannot run {program}: {err}"))
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_owned()
}

/// Why these tests cannot run here, if they cannot.
fn skip_reason() -> Option<String> {
    const CAP_NET_ADMIN: u64 = 12;
    const CAP_SYS_ADMIN: u64 = 21;
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let cap_eff = status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .unwrap_or(0);
    for (bit, name) in [
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
    ] {
        if cap_eff & (1 << bit) == 0 {
            return Some(format!(
                "the test process lacks {name} (run as root) to create namespaces and bridges"
            ));
        }
    }
    match Command::new("ip").arg("-V").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("iproute2 (`ip`) is not installed".into()),
    }
}

/// A fresh namespace for the test, or `None` after printing why the test is skipped.
fn netns_or_skip(test: &str) -> Option<Netns> {
    if let Some(reason) = skip_reason() {
        assert!(
            std::env::var_os("RECONCILER_HOST_REQUIRE_LINUX_TESTS").is_none_or(|v| v != "1"),
            "{test}: cannot run: {reason}"
        );
        eprintln!("SKIP linux_backend::{test}: {reason}");
        return None;
    }
    Some(Netns::create(&test[..test.len().min(6)]))
}

#[tokio::test]
async fn ensure_creates_an_up_bridge_with_the_gateway_inside_the_namespace_only() {
    let Some(ns) = netns_or_skip("create") else {
        return;
    };
    let backend = from_config(
        &BackendConfig::Linux {
            netns: Some(ns.name.clone()),
            bridge_prefix: "rh".into(),
            allowed_cidrs: None,
        },
        &[],
    )
    .unwrap();
    assert_eq!(backend.provider(), "linux");

    // What the status reports is the suite's to check; here, what the kernel shows.
    backend
        .ensure(&spec("default/net-a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    let ifname = bridge_name("rh", "default/net-a");
    let link = ns.link(&ifname).expect("bridge exists in the namespace");
    assert_eq!(link["linkinfo"]["info_kind"], "bridge");
    assert_eq!(link["ifalias"], "default/net-a");
    assert!(
        link["flags"].as_array().unwrap().contains(&"UP".into()),
        "{link}"
    );
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/24"]);

    // Proof that the thread entered the namespace: the host's own netns has no such link.
    let host = run("ip", &["link", "show", "dev", &ifname]);
    assert!(!host.status.success(), "bridge leaked into the host netns");

    // Ensuring it again leaves the kernel as it was.
    backend
        .ensure(&spec("default/net-a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/24"]);
}

#[tokio::test]
async fn changing_gateway_or_prefix_replaces_the_address() {
    let Some(ns) = netns_or_skip("update") else {
        return;
    };
    let backend = ns.backend();
    let ifname = bridge_name("rh", "ns/a");
    backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();

    backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.254"))
        .await
        .unwrap();
    assert_eq!(ns.addrs(&ifname), ["10.1.0.254/24"]);

    backend
        .ensure(&spec("ns/a", "10.1.0.0/16", "10.1.0.1"))
        .await
        .unwrap();
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/16"]);

    // A stray address added by hand is removed.
    ns.ip(&["addr", "add", "192.168.77.1/24", "dev", &ifname]);
    backend
        .ensure(&spec("ns/a", "10.1.0.0/16", "10.1.0.1"))
        .await
        .unwrap();
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/16"]);

    // The wanted address as an IPv4 *secondary* of a stray primary in the same subnet:
    // removing the primary takes the secondary with it, and ensure must put it back.
    ns.ip(&["addr", "flush", "dev", &ifname]);
    ns.ip(&["addr", "add", "10.1.0.2/16", "dev", &ifname]);
    ns.ip(&["addr", "add", "10.1.0.1/16", "dev", &ifname]);
    let fixed = backend
        .ensure(&spec("ns/a", "10.1.0.0/16", "10.1.0.1"))
        .await
        .unwrap();
    assert_eq!(fixed.gateway, "10.1.0.1");
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/16"]);
}

#[tokio::test]
async fn drift_made_by_hand_is_visible_and_repaired() {
    let Some(ns) = netns_or_skip("drift") else {
        return;
    };
    let backend = ns.backend();
    let ifname = bridge_name("rh", "ns/a");
    let want = spec("ns/a", "10.1.0.0/24", "10.1.0.1");
    let good = backend.ensure(&want).await.unwrap();

    ns.ip(&["link", "del", "dev", &ifname]);
    assert_eq!(backend.get("ns/a").await.unwrap(), None);
    assert!(backend.list().await.unwrap().is_empty());
    assert_eq!(backend.ensure(&want).await.unwrap(), good);
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/24"]);

    ns.ip(&["addr", "flush", "dev", &ifname]);
    ns.ip(&["addr", "add", "10.1.0.99/25", "dev", &ifname]);
    ns.ip(&["link", "set", "dev", &ifname, "down"]);
    let drifted = backend.get("ns/a").await.unwrap().unwrap();
    assert_eq!(drifted.gateway, "10.1.0.99");
    assert_eq!(drifted.cidr, "10.1.0.0/25");
    assert!(!drifted.up);

    ns.ip(&["addr", "flush", "dev", &ifname]);
    let bare = backend.get("ns/a").await.unwrap().unwrap();
    assert_eq!((bare.cidr.as_str(), bare.gateway.as_str()), ("", ""));

    assert_eq!(backend.ensure(&want).await.unwrap(), good);
    assert_eq!(ns.addrs(&ifname), ["10.1.0.1/24"]);
    assert_eq!(backend.get("ns/a").await.unwrap(), Some(good));
}

#[tokio::test]
async fn ipv6_networks_leave_link_local_alone() {
    let Some(ns) = netns_or_skip("ipv6") else {
        return;
    };
    let backend = ns.backend();
    let ifname = bridge_name("rh", "ns/v6");
    let want = spec("ns/v6", "fd00:10::/64", "fd00:10::1");
    let status = backend.ensure(&want).await.unwrap();
    assert_eq!(status.gateway, "fd00:10::1");
    assert_eq!(ns.addrs(&ifname), ["fd00:10::1/64"]);

    // The kernel's own link-local address is neither reported nor removed.
    ns.ip(&["addr", "add", "fe80::99/64", "dev", &ifname]);
    assert_eq!(backend.get("ns/v6").await.unwrap(), Some(status.clone()));
    assert_eq!(backend.ensure(&want).await.unwrap(), status);
    let out = ns.ip_raw(&["-j", "addr", "show", "dev", &ifname]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("fe80::99"), "{text}");
}

#[tokio::test]
async fn interfaces_that_are_not_ours_are_never_taken_over() {
    let Some(ns) = netns_or_skip("foreign") else {
        return;
    };
    let backend = ns.backend();

    // A bridge under ns/x's name whose alias says it belongs to someone else (what a hash
    // collision looks like): refused, and delete leaves it.
    let x = bridge_name("rh", "ns/x");
    ns.ip(&["link", "add", &x, "type", "bridge"]);
    ns.ip(&["link", "set", "dev", &x, "alias", "ns/other"]);
    let err = backend
        .ensure(&spec("ns/x", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::NameTaken { owner, .. } if owner == "ns/other"),
        "{err:?}"
    );
    assert!(
        err.to_string().contains("belongs to network `ns/other`"),
        "{err}"
    );
    assert!(!backend.delete("ns/x").await.unwrap());
    assert!(ns.link(&x).is_some());
    assert_eq!(ns.addrs(&x), Vec::<String>::new());

    // Not a bridge at all.
    let y = bridge_name("rh", "ns/y");
    ns.ip(&[
        "link", "add", &y, "type", "veth", "peer", "name", "rht-peer",
    ]);
    let err = backend
        .ensure(&spec("ns/y", "10.2.0.0/24", "10.2.0.1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Other(m) if m.contains("is a veth, not a bridge")),
        "{err:?}"
    );
    assert!(!backend.delete("ns/y").await.unwrap());

    // An alias-less bridge under ns/z's exact name (an interrupted ensure) is invisible to
    // list and adopted by ensure.
    let z = bridge_name("rh", "ns/z");
    ns.ip(&["link", "add", &z, "type", "bridge"]);
    let listed: Vec<String> = backend
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(
        listed,
        ["ns/other"],
        "only bridges with an alias are listed"
    );
    let adopted = backend
        .ensure(&spec("ns/z", "10.3.0.0/24", "10.3.0.1"))
        .await
        .unwrap();
    assert_eq!(adopted.interface_name, z);
    assert_eq!(ns.link(&z).unwrap()["ifalias"], "ns/z");

    // Another prefix in the same namespace sees none of these as its networks, but keeps
    // clear of their addresses as of any other interface's.
    let other = LinuxBackend::new(Some(&ns.name), "xo").unwrap();
    assert!(other.list().await.unwrap().is_empty());
    other
        .ensure(&spec("ns/x", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    let err = other
        .ensure(&spec("ns/w", "10.3.0.0/16", "10.3.0.1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Invalid(m) if m.contains(&format!("address 10.3.0.1/24 on interface `{z}`"))),
        "{err:?}"
    );
}

#[tokio::test]
async fn addresses_and_routes_of_the_namespace_are_never_covered() {
    let Some(ns) = netns_or_skip("host") else {
        return;
    };
    // A stand-in for the host's uplink: addresses, their connected routes, a route and a
    // default route through it, and a route in another table.
    ns.ip(&[
        "link", "add", "uplink0", "type", "veth", "peer", "name", "uplink1",
    ]);
    ns.ip(&["link", "set", "dev", "uplink1", "up"]);
    ns.ip(&["addr", "add", "192.168.50.10/24", "dev", "uplink0"]);
    ns.ip(&["addr", "add", "fd00:50::10/64", "dev", "uplink0", "nodad"]);
    ns.ip(&["addr", "add", "172.16.9.9/32", "dev", "uplink0"]);
    ns.ip(&["link", "set", "dev", "uplink0", "up"]);
    ns.ip(&["route", "add", "10.20.0.0/16", "via", "192.168.50.1"]);
    ns.ip(&["route", "add", "default", "via", "192.168.50.1"]);
    ns.ip(&["route", "add", "blackhole", "10.30.0.0/16", "table", "100"]);
    let backend = ns.backend();
    let place = format!("netns `{}`", ns.name);

    let refusal = |cidr: &'static str, gateway: &'static str| {
        let backend = &backend;
        async move {
            match backend.ensure(&spec("ns/a", cidr, gateway)).await {
                Err(BackendError::Invalid(msg)) => msg,
                other => panic!("expected Invalid for {cidr}, got {other:?}"),
            }
        }
    };
    let clear = "networks must stay clear of the API server and of the host's own addresses and \
                 routes, so pick another range";
    assert_eq!(
        refusal("192.168.50.0/24", "192.168.50.1").await,
        format!(
            "network `ns/a`: cidr `192.168.50.0/24` overlaps 192.168.50.0/24, the subnet of \
             address 192.168.50.10/24 on interface `uplink0` in {place}; {clear}"
        )
    );
    assert!(
        refusal("192.168.0.0/16", "192.168.0.1")
            .await
            .contains("the subnet of address 192.168.50.10/24 on interface `uplink0`")
    );
    assert!(
        refusal("192.168.50.128/25", "192.168.50.129")
            .await
            .contains("the subnet of address 192.168.50.10/24")
    );
    assert_eq!(
        refusal("172.16.0.0/12", "172.16.0.1").await,
        format!(
            "network `ns/a`: cidr `172.16.0.0/12` overlaps address 172.16.9.9 of interface \
             `uplink0` in {place}; {clear}"
        )
    );
    assert!(
        refusal("fd00:50::/48", "fd00:50::1")
            .await
            .contains("the subnet of address fd00:50::10/64 on interface `uplink0`")
    );
    assert_eq!(
        refusal("10.20.1.0/24", "10.20.1.1").await,
        format!(
            "network `ns/a`: cidr `10.20.1.0/24` overlaps route `10.20.0.0/16 dev uplink0` in \
             {place}; {clear}"
        )
    );
    assert!(
        refusal("10.30.0.0/24", "10.30.0.1")
            .await
            .contains("route `blackhole 10.30.0.0/16 table 100`")
    );
    assert!(backend.list().await.unwrap().is_empty(), "nothing created");
    assert!(ns.link(&bridge_name("rh", "ns/a")).is_none());

    // The default route does not count (every range overlaps it), and a network's own address
    // and connected route do not stand in the way of changing it.
    backend
        .ensure(&spec("ns/b", "10.40.0.0/24", "10.40.0.1"))
        .await
        .unwrap();
    let widened = backend
        .ensure(&spec("ns/b", "10.40.0.0/23", "10.40.1.254"))
        .await
        .unwrap();
    assert_eq!(widened.cidr, "10.40.0.0/23");
    assert_eq!(ns.addrs(&bridge_name("rh", "ns/b")), ["10.40.1.254/23"]);
}

/// The suite every provider runs (`backends::conformance`), each test in a namespace of its
/// own, followed by what the kernel shows of it where the scenario cannot see that.
mod conformance {
    use super::*;
    use reconciler_host::sandbox::backends::conformance as scenario;

    #[tokio::test]
    async fn ensure_reports_the_network_and_get_and_list_agree() {
        let Some(ns) = netns_or_skip("report") else {
            return;
        };
        scenario::ensure_reports_the_network_and_get_and_list_agree(&ns.backend()).await;
    }

    #[tokio::test]
    async fn ensure_again_changes_nothing() {
        let Some(ns) = netns_or_skip("again") else {
            return;
        };
        scenario::ensure_again_changes_nothing(&ns.backend()).await;
    }

    #[tokio::test]
    async fn a_changed_gateway_or_prefix_is_applied_in_place() {
        let Some(ns) = netns_or_skip("change") else {
            return;
        };
        scenario::a_changed_gateway_or_prefix_is_applied_in_place(&ns.backend()).await;
    }

    #[tokio::test]
    async fn delete_reports_whether_something_was_removed() {
        let Some(ns) = netns_or_skip("delete") else {
            return;
        };
        let backend = ns.backend();
        scenario::delete_reports_whether_something_was_removed(&backend).await;

        // What the kernel shows: the bridge comes and goes with the network.
        let ifname = bridge_name("rh", "ns/a");
        backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert!(ns.link(&ifname).is_some());
        assert!(backend.delete("ns/a").await.unwrap());
        assert!(ns.link(&ifname).is_none());
    }

    #[tokio::test]
    async fn an_overlap_is_refused_naming_the_other_network() {
        let Some(ns) = netns_or_skip("overlap") else {
            return;
        };
        scenario::an_overlap_is_refused_naming_the_other_network(&ns.backend()).await;
        assert!(ns.link(&bridge_name("rh", "ns/b")).is_none(), "not applied");
    }

    #[tokio::test]
    async fn an_invalid_spec_is_refused_and_changes_nothing() {
        let Some(ns) = netns_or_skip("invalid") else {
            return;
        };
        scenario::an_invalid_spec_is_refused_and_changes_nothing(&ns.backend()).await;
        assert!(ns.link(&bridge_name("rh", "ns/c")).is_none(), "not applied");
    }

    #[tokio::test]
    async fn another_guests_network_appears_in_no_refusal_a_guest_sees() {
        let Some(ns) = netns_or_skip("guests") else {
            return;
        };
        let backend = ns.backend();
        scenario::another_guests_network_appears_in_no_refusal_a_guest_sees(&backend).await;

        // A bridge under b's name that a's id claims (what a hash collision looks like) is
        // refused without naming a's id.
        let x = bridge_name("rh", "b/ns/x");
        ns.ip(&["link", "add", &x, "type", "bridge"]);
        ns.ip(&["link", "set", "dev", &x, "alias", "a/ns/y"]);
        let err = backend
            .ensure(&spec("b/ns/x", "10.5.0.0/24", "10.5.0.1"))
            .await
            .unwrap_err();
        let seen = err.seen_by("b/").to_string();
        assert!(!seen.contains("ns/y"), "{seen}");
        assert!(seen.contains("belongs to another network"), "{seen}");
    }

    #[tokio::test]
    async fn each_policy_rule_refuses_with_its_own_words() {
        let Some(ns) = netns_or_skip("policy") else {
            return;
        };
        scenario::each_policy_rule_refuses_with_its_own_words(|allowed, api_server| {
            let config = BackendConfig::Linux {
                netns: Some(ns.name.clone()),
                bridge_prefix: "rh".into(),
                allowed_cidrs: Some(allowed),
            };
            from_config(&config, api_server).unwrap()
        })
        .await;
        assert!(
            ns.link(&bridge_name("rh", "ns/a")).is_none(),
            "nothing created"
        );
    }

    /// State lives in the kernel: a new provider over the namespace finds it.
    #[tokio::test]
    async fn a_new_instance_finds_the_networks_of_the_last() {
        let Some(ns) = netns_or_skip("restart") else {
            return;
        };
        scenario::a_new_instance_finds_the_networks_of_the_last(|| ns.backend()).await;
    }
}
