//! Providers of a network's *actual* state: the far side of the `network-backend` import.
//!
//! The `network-backend` interface in `wit/reconciler.wit` is the contract; [`NetworkBackend`]
//! mirrors it one call for one call (plus [`NetworkBackend::list`], which the host uses for
//! overlap checks, state dumps and demo output). The capability layer checks a guest's grant
//! and then calls whichever provider the host configuration chose:
//!
//! - [`memory::MemoryBackend`]: a map in the process, optionally loaded from and saved to a
//!   JSON file. For the offline runner (`reconciler-host reconcile --backend-state`) and tests.
//! - [`linux::LinuxBackend`]: one Linux bridge per network inside a chosen network namespace,
//!   driven over netlink. Every read comes back from the kernel, so drift is visible.
//!
//! Both providers share [`validate`] and [`check_overlap`], so a spec the offline runner
//! accepts is a spec the Linux provider accepts, and both refuse the same specs with the same
//! words.
//!
//! Files: `contract` (spec, status, errors, the trait), `spec` (validation and overlap),
//! `bridge_names`, [`policy`] (which ranges), the two providers, `conformance` (the tests both
//! providers run); this one chooses a provider from the configuration ([`from_config`]).
//!
//! # Which ranges a network may take
//!
//! Guests choose their networks' cidrs, and a bridge's address is a route where it is
//! created, so the providers refuse ranges that would reach beyond the guest's own network
//! ([`policy`]; each refusal is [`BackendError::Invalid`] naming the rule):
//!
//! - deny by default: prefixes broader than /8 (IPv4) or /16 (IPv6): default routes and their
//!   halves; any overlap with a block of IANA's special-purpose registries other than the
//!   private-numbering ones ([`policy::DENIED`]: loopback, link-local, "this network",
//!   broadcast, documentation, benchmarking, anycast services, NAT64's `64:ff9b::/96` and
//!   `64:ff9b:1::/48`, 6to4, Teredo, segment routing, IPv4-mapped IPv6, ...) or with
//!   multicast; a gateway that is the network address (or, IPv4, the broadcast one);
//! - `allowed-cidrs` in the configuration: when set, a cidr must lie entirely inside one of
//!   its ranges;
//! - the API server's addresses (from the cluster URL, resolved at start-up) are never
//!   covered;
//! - Linux provider: nor are the addresses (with their subnets) and routes of the namespace
//!   it works in, read at every `ensure`, except those on its own bridges. Without `netns`
//!   that is the host's own namespace, where a network over the host's LAN or a VPN's routes
//!   would capture the host's traffic.
//!
//! # What a refusal says about other networks
//!
//! A provider serves every guest, and its refusals are for the operator: an overlap names the
//! other network ([`BackendError::Overlap`]), a taken bridge name its owner
//! ([`BackendError::NameTaken`]). A guest sees them through [`BackendError::seen_by`], which
//! names only the guest's own networks: another guest's id, range, gateway or bridge never
//! reaches it (the contract says other guests' networks are invisible).

mod bridge_names;
// Test support: the shared suite both providers run; `pub` so host/tests/ can reach it.
#[doc(hidden)]
pub mod conformance;
mod contract;
mod deny_list;
pub(crate) mod linux;
pub(crate) mod memory;
pub mod policy;
mod spec;

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

pub use bridge_names::{
    DEFAULT_BRIDGE_PREFIX, bridge_name, is_bridge_name, validate_bridge_prefix,
};
pub use contract::{BackendError, NetworkBackend};
pub(crate) use contract::{NetworkSpec, NetworkStatus, Result};
pub use linux::LinuxBackend;
pub use memory::MemoryBackend;
pub(crate) use policy::{Policy, Reserved, api_server_addresses};
pub use spec::{MAX_ID_LEN, ValidSpec, check_overlap, validate};

/// Builds the configured provider. No network it accepts may cover any of `api_server`
/// (the API server's addresses, see [`api_server_addresses`]).
///
/// Cost: `memory` reads its state file if one is named; `linux` starts one OS thread that
/// enters the namespace and opens a netlink socket there (see [`linux`]), and fails here,
/// not on the first reconcile, when the namespace or the prefix is wrong. A bad
/// `allowed-cidrs` fails here too.
pub fn from_config(
    config: &crate::config::BackendConfig,
    api_server: &[IpAddr],
) -> Result<Arc<dyn NetworkBackend>> {
    let policy = Policy::new(config.allowed_cidrs().map(<[IpNet]>::to_vec))?
        .reserving(api_server.iter().copied().map(Reserved::api_server));
    Ok(match config {
        crate::config::BackendConfig::Memory {
            state_file: None, ..
        } => Arc::new(MemoryBackend::new().with_policy(policy)),
        crate::config::BackendConfig::Memory {
            state_file: Some(path),
            ..
        } => Arc::new(MemoryBackend::with_state_file(path)?.with_policy(policy)),
        crate::config::BackendConfig::Linux {
            netns,
            bridge_prefix,
            ..
        } => Arc::new(LinuxBackend::new(netns.as_deref(), bridge_prefix)?.with_policy(policy)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::BackendConfig;

    fn spec(id: &str, cidr: &str, gateway: &str) -> NetworkSpec {
        NetworkSpec {
            id: id.into(),
            cidr: cidr.into(),
            gateway: gateway.into(),
        }
    }

    fn invalid(spec: &NetworkSpec) -> String {
        match validate(spec) {
            Err(BackendError::Invalid(msg)) => msg,
            other => panic!("expected Invalid for {spec:?}, got {other:?}"),
        }
    }

    #[test]
    fn accepts_canonical_ipv4_and_ipv6() {
        let v4 = validate(&spec("ns/a", "10.1.0.0/24", "10.1.0.1")).unwrap();
        assert_eq!(v4.cidr.to_string(), "10.1.0.0/24");
        assert_eq!(v4.gateway.to_string(), "10.1.0.1");
        let v6 = validate(&spec("ns/b", "FD00:10:0::/64", "fd00:10::1")).unwrap();
        assert_eq!(
            v6.cidr.to_string(),
            "fd00:10::/64",
            "status text is canonical"
        );
    }

    #[test]
    fn host_bits_in_cidr_are_refused_with_the_fix() {
        let msg = invalid(&spec("ns/a", "10.1.0.5/24", "10.1.0.1"));
        assert!(msg.contains("ns/a"), "{msg}");
        assert!(msg.contains("write `10.1.0.0/24`"), "{msg}");
    }

    #[test]
    fn unparsable_values_are_refused() {
        assert!(invalid(&spec("ns/a", "10.1.0.0", "10.1.0.1")).contains("not an IP prefix"));
        assert!(invalid(&spec("ns/a", "10.1.0.0/33", "10.1.0.1")).contains("not an IP prefix"));
        assert!(invalid(&spec("ns/a", "10.1.0.0/24", "gw")).contains("not an IP address"));
    }

    #[test]
    fn gateway_must_be_inside_and_a_host_address() {
        let msg = invalid(&spec("ns/a", "10.1.0.0/24", "10.2.0.1"));
        assert!(msg.contains("outside cidr `10.1.0.0/24`"), "{msg}");
        assert!(msg.contains("10.1.0.1"), "suggests a host: {msg}");
        assert!(invalid(&spec("ns/a", "10.1.0.0/24", "10.1.0.0")).contains("network address"));
        assert!(invalid(&spec("ns/a", "10.1.0.0/24", "10.1.0.255")).contains("broadcast"));
        assert!(invalid(&spec("ns/a", "10.1.0.0/24", "fd00::1")).contains("outside"));
        // RFC 3021 /31 and /32: every address is a host.
        validate(&spec("ns/a", "10.1.0.0/31", "10.1.0.0")).unwrap();
        validate(&spec("ns/a", "10.1.0.0/31", "10.1.0.1")).unwrap();
        validate(&spec("ns/a", "10.1.0.7/32", "10.1.0.7")).unwrap();
    }

    #[test]
    fn ipv6_gateway_is_not_the_subnet_router_anycast_address() {
        let msg = invalid(&spec("ns/a", "fd00:10::/64", "fd00:10::"));
        assert_eq!(
            msg,
            "network `ns/a`: gateway `fd00:10::` is the network address of `fd00:10::/64`; \
             pick a host address, e.g. `fd00:10::1`"
        );
        // RFC 6164: both addresses of a /127 are usable.
        validate(&spec("ns/a", "fd00:10::/127", "fd00:10::")).unwrap();
        validate(&spec("ns/a", "fd00:10::1/128", "fd00:10::1")).unwrap();
    }

    /// The exact words of the fixed rules, so offline runs and the Linux provider can be held
    /// to them.
    #[test]
    fn prefixes_broader_than_a_slash_8_or_slash_16_are_refused() {
        assert_eq!(
            invalid(&spec("ns/a", "128.0.0.0/1", "128.0.0.1")),
            "network `ns/a`: cidr `128.0.0.0/1` is broader than /8, the broadest prefix a \
             network may have (broader ones are default routes and their halves); use /8 or \
             narrower, e.g. `10.10.0.0/24`"
        );
        assert_eq!(
            invalid(&spec("ns/a", "::/0", "::1")),
            "network `ns/a`: cidr `::/0` is broader than /16, the broadest prefix a network \
             may have (broader ones are default routes and their halves); use /16 or narrower, \
             e.g. `fd00:10::/64`"
        );
        for (cidr, gateway) in [
            ("0.0.0.0/0", "10.0.0.1"),
            ("0.0.0.0/1", "10.0.0.1"),
            ("10.0.0.0/7", "10.0.0.1"),
            ("fd00::/15", "fd00::1"),
            ("2000::/3", "2001:db8::1"),
        ] {
            let msg = invalid(&spec("ns/a", cidr, gateway));
            assert!(msg.contains("is broader than /"), "{cidr}: {msg}");
        }
        validate(&spec("ns/a", "10.0.0.0/8", "10.0.0.1")).unwrap();
        validate(&spec("ns/a", "fd00::/16", "fd00::1")).unwrap();
    }

    /// The words of a deny-list refusal, held here for the common ranges; every entry is
    /// checked against its own fields in `policy`'s tests.
    #[test]
    fn the_deny_list_refuses_each_range_by_name() {
        let refused = |cidr: &str, gateway: &str, block: &str| {
            let v6 = cidr.contains(':');
            let (example, registry) = if v6 {
                ("fd00:10::/64", "IPv6")
            } else {
                ("10.10.0.0/24", "IPv4")
            };
            let registry = if block.contains("\"Multicast\"") {
                format!("IANA {registry} Multicast Address Space Registry")
            } else {
                format!("IANA {registry} Special-Purpose Address Registry")
            };
            let (block, rest) = block.split_once(" (").unwrap();
            let (rfc, why) = rest.split_once("): ").unwrap();
            assert_eq!(
                invalid(&spec("ns/a", cidr, gateway)),
                format!(
                    "network `ns/a`: cidr `{cidr}` overlaps {block} ({rfc}, {registry}), which \
                     no network may use: {why}; pick a private range such as `{example}`"
                ),
            );
        };
        let this_network = "0.0.0.0/8 \"This network\" (RFC 791 §3.2): it is a source for \
                            hosts that have no address yet, never a destination";
        refused("0.0.0.0/8", "0.0.0.1", this_network);
        refused("0.0.0.0/24", "0.0.0.1", this_network);
        refused(
            "0.0.0.0/32",
            "0.0.0.0",
            "0.0.0.0/32 \"This host on this network\" (RFC 1122 §3.2.1.3): it is the \
             unspecified address: a socket bound to it listens on every address of the host",
        );
        let loopback =
            "127.0.0.0/8 \"Loopback\" (RFC 1122 §3.2.1.3): the host's own services listen there";
        refused("127.0.0.0/8", "127.0.0.1", loopback);
        refused("127.0.0.1/32", "127.0.0.1", loopback);
        let link_local = "169.254.0.0/16 \"Link Local\" (RFC 3927): it is never forwarded, and \
                          cloud metadata services answer at 169.254.169.254";
        refused("169.254.169.254/32", "169.254.169.254", link_local);
        refused("169.254.0.0/16", "169.254.0.1", link_local);
        let multicast =
            "224.0.0.0/4 \"Multicast\" (RFC 5771): its addresses are multicast groups, not hosts";
        refused("224.0.0.0/24", "224.0.0.1", multicast);
        refused("239.255.0.0/16", "239.255.0.1", multicast);
        refused(
            "255.255.255.255/32",
            "255.255.255.255",
            "255.255.255.255/32 \"Limited Broadcast\" (RFC 919 §7, RFC 8190): it reaches every \
             host on the link and is never forwarded",
        );
        let reserved = "240.0.0.0/4 \"Reserved\" (RFC 1112 §4): it is reserved by protocol for \
                        future use, and most stacks refuse to route it";
        refused("255.0.0.0/8", "255.0.0.1", reserved);
        refused("254.0.0.0/8", "254.0.0.1", reserved);
        refused(
            "198.18.0.0/24",
            "198.18.0.1",
            "198.18.0.0/15 \"Benchmarking\" (RFC 2544): it is for benchmarking devices, not for \
             production networks (RFC 6815), and DNS proxies hand out fake addresses from it",
        );
        let unspecified = "::/128 \"Unspecified Address\" (RFC 4291): it is the unspecified \
                           address: a socket bound to it listens on every address of the host";
        refused("::/128", "::", unspecified);
        refused("::/16", "::2", unspecified);
        refused(
            "::1/128",
            "::1",
            "::1/128 \"Loopback Address\" (RFC 4291): the host's own services listen there",
        );
        refused(
            "::ffff:10.96.0.0/120",
            "::ffff:10.96.0.1",
            "::ffff:0.0.0.0/96 \"IPv4-mapped Address\" (RFC 4291): it stands for IPv4 addresses \
             (loopback and the API server among them) on dual-stack sockets",
        );
        let v6_link_local = "fe80::/10 \"Link-Local Unicast\" (RFC 4291): it is never \
                             forwarded, and the kernel assigns it to every interface";
        refused("fe80::/64", "fe80::1", v6_link_local);
        refused("febf:ffff::/32", "febf:ffff::1", v6_link_local);
        refused(
            "ff02::/16",
            "ff02::1",
            "ff00::/8 \"Multicast\" (RFC 4291 §2.7): its addresses are multicast groups, not \
             hosts",
        );
        refused(
            "2001:db8:1::/48",
            "2001:db8:1::1",
            "2001:db8::/32 \"Documentation\" (RFC 3849): it is for examples only and never routed",
        );

        // Ranges beside the deny list are fine.
        validate(&spec("ns/a", "1.0.0.0/8", "1.0.0.1")).unwrap();
        validate(&spec("ns/a", "126.0.0.0/8", "126.0.0.1")).unwrap();
        validate(&spec("ns/a", "128.0.0.0/8", "128.0.0.1")).unwrap();
        validate(&spec("ns/a", "169.253.0.0/16", "169.253.0.1")).unwrap();
        validate(&spec("ns/a", "198.20.0.0/16", "198.20.0.1")).unwrap();
        validate(&spec("ns/a", "223.255.255.0/24", "223.255.255.1")).unwrap();
        validate(&spec("ns/a", "2001:200::/23", "2001:200::1")).unwrap();
        validate(&spec("ns/a", "fec0::/16", "fec0::1")).unwrap();
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn allowed_cidrs_confine_networks_to_their_ranges() {
        let policy = Policy::new(Some(nets(&["10.100.0.0/16", "fd00:100::/48"]))).unwrap();
        policy
            .validate(&spec("ns/a", "10.100.7.0/24", "10.100.7.1"))
            .unwrap();
        policy
            .validate(&spec("ns/a", "10.100.0.0/16", "10.100.0.1"))
            .unwrap();
        policy
            .validate(&spec("ns/a", "fd00:100:0:1::/64", "fd00:100:0:1::1"))
            .unwrap();
        let outside =
            |cidr: &str, gateway: &str| match policy.validate(&spec("ns/a", cidr, gateway)) {
                Err(BackendError::Invalid(msg)) => msg,
                other => panic!("expected Invalid for {cidr}, got {other:?}"),
            };
        assert_eq!(
            outside("10.101.0.0/24", "10.101.0.1"),
            "network `ns/a`: cidr `10.101.0.0/24` is outside allowed-cidrs (10.100.0.0/16, \
             fd00:100::/48); pick a range inside one of them"
        );
        // Overlapping an allowed range is not enough: the whole cidr must lie inside one.
        assert!(outside("10.100.0.0/15", "10.100.0.1").contains("outside allowed-cidrs"));
        assert!(outside("fd00:10::/64", "fd00:10::1").contains("outside allowed-cidrs"));
        // The fixed rules come first and cannot be allowed away.
        let lenient = Policy::new(Some(nets(&["0.0.0.0/0"]))).unwrap();
        let msg = match lenient.validate(&spec("ns/a", "127.0.0.0/8", "127.0.0.1")) {
            Err(BackendError::Invalid(msg)) => msg,
            other => panic!("expected Invalid, got {other:?}"),
        };
        assert!(msg.contains("\"Loopback\""), "{msg}");
    }

    #[test]
    fn reserved_addresses_are_never_covered() {
        let policy = Policy::new(None).unwrap().reserving([
            Reserved::api_server("10.96.0.1".parse().unwrap()),
            Reserved::api_server("fd00:96::1".parse().unwrap()),
        ]);
        let refusal =
            |cidr: &str, gateway: &str| match policy.validate(&spec("ns/a", cidr, gateway)) {
                Err(BackendError::Invalid(msg)) => msg,
                other => panic!("expected Invalid for {cidr}, got {other:?}"),
            };
        assert_eq!(
            refusal("10.96.0.1/32", "10.96.0.1"),
            "network `ns/a`: cidr `10.96.0.1/32` overlaps the API server's address 10.96.0.1; \
             networks must stay clear of the API server and of the host's own addresses and \
             routes, so pick another range"
        );
        assert!(refusal("10.0.0.0/8", "10.0.0.1").contains("API server's address 10.96.0.1"));
        assert!(refusal("fd00::/16", "fd00::1").contains("API server's address fd00:96::1"));
        policy
            .validate(&spec("ns/a", "10.96.1.0/24", "10.96.1.1"))
            .unwrap();
        policy
            .validate(&spec("ns/a", "10.96.0.2/31", "10.96.0.2"))
            .unwrap();
    }

    #[test]
    fn ids_are_bounded_by_the_interface_alias() {
        assert!(invalid(&spec("", "10.1.0.0/24", "10.1.0.1")).contains("empty"));
        let long = "x".repeat(MAX_ID_LEN + 1);
        assert!(invalid(&spec(&long, "10.1.0.0/24", "10.1.0.1")).contains("256 bytes"));
        validate(&spec(&"x".repeat(MAX_ID_LEN), "10.1.0.0/24", "10.1.0.1")).unwrap();
        assert!(invalid(&spec("a\nb", "10.1.0.0/24", "10.1.0.1")).contains("control"));
    }

    #[test]
    fn overlap_names_the_other_network_and_skips_self_and_other_families() {
        let existing = vec![
            validate(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
                .unwrap()
                .status("rh-a".into(), true),
            validate(&spec("ns/v6", "fd00::/64", "fd00::1"))
                .unwrap()
                .status("rh-b".into(), true),
        ];
        let wider = validate(&spec("ns/b", "10.0.0.0/8", "10.0.0.1")).unwrap();
        let err = check_overlap(&wider, &existing).unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid network: network `ns/b`: cidr `10.0.0.0/8` overlaps network `ns/a` (cidr \
             `10.1.0.0/24`); pick a disjoint range or delete `ns/a` first"
        );
        let narrower = validate(&spec("ns/c", "10.1.0.128/25", "10.1.0.129")).unwrap();
        assert!(check_overlap(&narrower, &existing).is_err());
        let disjoint = validate(&spec("ns/d", "10.2.0.0/24", "10.2.0.1")).unwrap();
        check_overlap(&disjoint, &existing).unwrap();
        // Re-ensuring the same id with a new range is an update, not an overlap.
        let same_id = validate(&spec("ns/a", "10.1.0.0/16", "10.1.0.1")).unwrap();
        check_overlap(&same_id, &existing).unwrap();
    }

    #[test]
    fn an_owner_sees_its_own_networks_by_name_and_no_one_elses() {
        let existing = [
            validate(&spec("a/ns/net", "10.1.0.0/24", "10.1.0.77"))
                .unwrap()
                .status(bridge_name("rh", "a/ns/net"), true),
            validate(&spec("b/ns/old", "10.2.0.0/24", "10.2.0.1"))
                .unwrap()
                .status(bridge_name("rh", "b/ns/old"), true),
        ];
        let wide = validate(&spec("b/ns/wide", "10.0.0.0/8", "10.0.0.1")).unwrap();
        let err = check_overlap(&wide, &existing).unwrap_err();
        assert!(
            err.to_string().contains("`a/ns/net`"),
            "the operator sees it: {err}"
        );
        assert_eq!(
            err.seen_by("b/"),
            BackendError::Invalid(
                "network `ns/wide`: cidr `10.0.0.0/8` overlaps a network held by another guest; \
                 pick a disjoint range"
                    .into()
            )
        );
        let own = check_overlap(&wide, &existing[1..]).unwrap_err();
        assert_eq!(
            own.seen_by("b/"),
            BackendError::Invalid(
                "network `ns/wide`: cidr `10.0.0.0/8` overlaps network `ns/old` (cidr \
                 `10.2.0.0/24`); pick a disjoint range or delete `ns/old` first"
                    .into()
            )
        );

        let taken = BackendError::NameTaken {
            id: "b/ns/x".into(),
            bridge: "rh-0123456789ab".into(),
            place: "the host's netns".into(),
            owner: "a/ns/y".into(),
        };
        assert!(
            taken.to_string().contains("belongs to network `a/ns/y`"),
            "{taken}"
        );
        let seen = taken.seen_by("b/").to_string();
        assert!(!seen.contains("a/ns/y") && !seen.contains("ns/y"), "{seen}");
        assert!(
            seen.contains("network `ns/x`: bridge `rh-0123456789ab`"),
            "{seen}"
        );
        assert!(seen.contains("belongs to another network"), "{seen}");

        // Plain messages keep their words, with the caller's own ids as it wrote them.
        let plain = BackendError::Unavailable("netlink: network `b/ns/x` failed".into());
        assert_eq!(
            plain.seen_by("b/"),
            BackendError::Unavailable("netlink: network `ns/x` failed".into())
        );
    }

    #[test]
    fn ids_that_would_forge_log_lines_are_refused() {
        for id in ["a\u{2028}b", "a\u{202E}b", "a\u{85}b", "a\tb"] {
            assert!(
                invalid(&spec(id, "10.1.0.0/24", "10.1.0.1")).contains("line breaks"),
                "{id:?}"
            );
        }
    }

    #[test]
    fn bridge_names_fit_ifnamsiz_and_are_stable() {
        let name = bridge_name("rh", "default/net-a");
        assert_eq!(name.len(), 15);
        assert!(name.starts_with("rh-"));
        assert_eq!(name, bridge_name("rh", "default/net-a"));
        assert_ne!(name, bridge_name("rh", "default/net-b"));
        assert!(is_bridge_name("rh", &name));
        assert!(!is_bridge_name("rh", "rh-xyz"));
        assert!(!is_bridge_name("r", &name), "another prefix never matches");
        let long_prefix = bridge_name("abcdef", "x");
        assert_eq!(long_prefix.len(), 15);
        assert!(is_bridge_name("abcdef", &long_prefix));
    }

    #[test]
    fn bridge_prefix_rules() {
        validate_bridge_prefix("rh").unwrap();
        validate_bridge_prefix("abc_12").unwrap();
        for bad in ["", "abcdefg", "r-h", "r h", "rh/"] {
            assert!(validate_bridge_prefix(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn config_yaml_shapes() {
        let linux: BackendConfig =
            serde_yaml::from_str("provider: linux\nnetns: rh-demo\nbridge-prefix: net\n").unwrap();
        assert_eq!(
            linux,
            crate::config::BackendConfig::Linux {
                netns: Some("rh-demo".into()),
                bridge_prefix: "net".into(),
                allowed_cidrs: None,
            }
        );
        let host_ns: BackendConfig = serde_yaml::from_str("provider: linux\n").unwrap();
        assert_eq!(
            host_ns,
            crate::config::BackendConfig::Linux {
                netns: None,
                bridge_prefix: "rh".into(),
                allowed_cidrs: None,
            }
        );
        let allowed: BackendConfig =
            serde_yaml::from_str("provider: linux\nallowed-cidrs: [10.100.0.0/16, fd00::/48]\n")
                .unwrap();
        assert_eq!(
            allowed.allowed_cidrs(),
            Some(nets(&["10.100.0.0/16", "fd00::/48"]).as_slice())
        );
        let camel_allowed: BackendConfig =
            serde_yaml::from_str("provider: memory\nallowedCidrs: [10.100.0.0/16]\n").unwrap();
        assert_eq!(
            camel_allowed.allowed_cidrs(),
            Some(nets(&["10.100.0.0/16"]).as_slice())
        );
        assert!(
            serde_yaml::from_str::<BackendConfig>("provider: memory\nallowedCidrs: [10.1]\n")
                .is_err()
        );
        let memory: BackendConfig = serde_yaml::from_str("provider: memory\n").unwrap();
        assert_eq!(memory, BackendConfig::default());
        let with_file: BackendConfig =
            serde_yaml::from_str("provider: memory\nstate-file: /tmp/x.json\n").unwrap();
        assert_eq!(
            with_file,
            crate::config::BackendConfig::Memory {
                state_file: Some("/tmp/x.json".into()),
                allowed_cidrs: None,
            }
        );
        assert!(serde_yaml::from_str::<BackendConfig>("provider: ovs\n").is_err());
        let camel: BackendConfig =
            serde_yaml::from_str("provider: linux\nbridgePrefix: net\n").unwrap();
        assert!(
            matches!(camel, BackendConfig::Linux { bridge_prefix, .. } if bridge_prefix == "net")
        );
        let typo = serde_yaml::from_str::<BackendConfig>("provider: linux\nbridge_prefix: x\n");
        assert!(typo.unwrap_err().to_string().contains("bridge_prefix"));
    }

    #[tokio::test]
    async fn from_config_builds_the_memory_provider() {
        let backend = from_config(&BackendConfig::default(), &[]).unwrap();
        assert_eq!(backend.provider(), "memory");
        assert!(backend.list().await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn from_config_applies_allowed_cidrs_and_the_api_server() {
        let config = BackendConfig::Memory {
            state_file: None,
            allowed_cidrs: Some(nets(&["10.96.0.0/12"])),
        };
        let backend = from_config(&config, &["10.96.0.1".parse().unwrap()]).unwrap();
        backend
            .ensure(&spec("ns/a", "10.100.0.0/24", "10.100.0.1"))
            .await
            .unwrap();
        let err = backend
            .ensure(&spec("ns/b", "10.96.0.0/24", "10.96.0.2"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("API server's address"), "{err}");
        let err = backend
            .ensure(&spec("ns/c", "10.200.0.0/24", "10.200.0.1"))
            .await
            .unwrap_err();
        assert!(err.to_string().contains("outside allowed-cidrs"), "{err}");

        let empty = BackendConfig::Memory {
            state_file: None,
            allowed_cidrs: Some(Vec::new()),
        };
        let err = from_config(&empty, &[]).err().expect("refused");
        assert!(err.to_string().contains("allowed-cidrs is empty"), "{err}");
    }
}
