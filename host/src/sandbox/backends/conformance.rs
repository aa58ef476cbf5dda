//! The behaviour every [`NetworkBackend`] shares, written once and run on each provider.
//!
//! Each scenario is an `async fn` taking a provider that holds no networks yet (or a way to
//! open one) and panicking when the provider breaks the contract. Both providers run every
//! scenario, each test on a fresh provider: the memory provider in its unit tests
//! (`sandbox/backends/memory.rs`), the Linux provider in `host/tests/linux_backend.rs`, one fresh
//! network namespace per test. A scenario added here is wired into both.
//!
//! What only one provider has stays with it: the kernel's view of bridges, drift, aliases and
//! the namespace's own addresses (Linux), the state file (memory). Those tests may look at
//! what a scenario leaves behind; each scenario names the ids it uses.
//!
//! Public, and hidden from the docs, because integration tests reach only the library's `pub`
//! items; it costs the binary nothing, as nothing outside tests calls it. Bridge names are
//! expected under the default prefix, `rh`.

// Every scenario panics when the provider breaks the contract: that is what it is for.
#![allow(clippy::missing_panics_doc)]

use std::net::IpAddr;
use std::sync::Arc;

use ipnet::IpNet;

use super::bridge_names::{DEFAULT_BRIDGE_PREFIX, bridge_name};
use super::contract::{BackendError, NetworkBackend, NetworkSpec};

/// A spec from its three fields.
pub fn spec(id: &str, cidr: &str, gateway: &str) -> NetworkSpec {
    NetworkSpec {
        id: id.into(),
        cidr: cidr.into(),
        gateway: gateway.into(),
    }
}

/// `ensure` reports the network it made, up, under the bridge name its id hashes to, for
/// IPv4 and IPv6, and `get` and `list` (ordered by id) report the same. Ids `ns/a` (IPv6)
/// and `ns/b` (IPv4).
pub async fn ensure_reports_the_network_and_get_and_list_agree(backend: &dyn NetworkBackend) {
    let v4 = backend
        .ensure(&spec("ns/b", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    let v6 = backend
        .ensure(&spec("ns/a", "fd00:10::/64", "fd00:10::1"))
        .await
        .unwrap();
    for (status, id, cidr, gateway) in [
        (&v4, "ns/b", "10.1.0.0/24", "10.1.0.1"),
        (&v6, "ns/a", "fd00:10::/64", "fd00:10::1"),
    ] {
        assert_eq!(status.id, id);
        assert_eq!(status.cidr, cidr);
        assert_eq!(status.gateway, gateway);
        assert!(status.up, "{status:?}");
        assert_eq!(
            status.interface_name,
            bridge_name(DEFAULT_BRIDGE_PREFIX, id)
        );
        assert_eq!(backend.get(id).await.unwrap().as_ref(), Some(status));
    }
    assert_eq!(backend.list().await.unwrap(), vec![v6, v4], "ordered by id");
}

/// A second `ensure` of the same spec reports the same and adds nothing. Id `ns/a`.
pub async fn ensure_again_changes_nothing(backend: &dyn NetworkBackend) {
    let want = spec("ns/a", "10.1.0.0/24", "10.1.0.1");
    let first = backend.ensure(&want).await.unwrap();
    let again = backend.ensure(&want).await.unwrap();
    assert_eq!(again, first, "ensure is idempotent");
    assert_eq!(backend.list().await.unwrap(), vec![first]);
}

/// A changed gateway, then a changed prefix, replace the network's in place. Id `ns/a`,
/// ending as `10.1.0.0/16` with gateway `10.1.0.1`.
pub async fn a_changed_gateway_or_prefix_is_applied_in_place(backend: &dyn NetworkBackend) {
    backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();

    let moved = backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.254"))
        .await
        .unwrap();
    assert_eq!(moved.gateway, "10.1.0.254");
    assert_eq!(moved.cidr, "10.1.0.0/24");
    assert_eq!(backend.get("ns/a").await.unwrap(), Some(moved));

    let widened = backend
        .ensure(&spec("ns/a", "10.1.0.0/16", "10.1.0.1"))
        .await
        .unwrap();
    assert_eq!(widened.cidr, "10.1.0.0/16");
    assert_eq!(widened.gateway, "10.1.0.1");
    assert_eq!(backend.get("ns/a").await.unwrap(), Some(widened.clone()));
    assert_eq!(backend.list().await.unwrap(), vec![widened]);
}

/// `delete` says whether there was something to remove, and what it removed is gone. Id
/// `ns/a`, deleted at the end.
pub async fn delete_reports_whether_something_was_removed(backend: &dyn NetworkBackend) {
    assert!(!backend.delete("ns/a").await.unwrap());
    backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    assert!(backend.delete("ns/a").await.unwrap());
    assert!(!backend.delete("ns/a").await.unwrap());
    assert_eq!(backend.get("ns/a").await.unwrap(), None);
    assert!(backend.list().await.unwrap().is_empty());
}

/// A network overlapping one already held, wider (`10.1.0.0/16`) or much wider (`10.0.0.0/8`),
/// is refused as an overlap naming the held one, and not applied. Ids `ns/a` (held,
/// `10.1.0.0/24`) and `ns/b` (refused).
pub async fn an_overlap_is_refused_naming_the_other_network(backend: &dyn NetworkBackend) {
    let a = backend
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    for (cidr, gateway) in [("10.1.0.0/16", "10.1.0.1"), ("10.0.0.0/8", "10.0.0.1")] {
        let err = backend
            .ensure(&spec("ns/b", cidr, gateway))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            BackendError::Overlap {
                id: "ns/b".into(),
                cidr: cidr.parse().unwrap(),
                other: "ns/a".into(),
                other_cidr: "10.1.0.0/24".parse().unwrap(),
            }
        );
        assert!(
            err.to_string().contains("`ns/a` (cidr `10.1.0.0/24`)"),
            "{err}"
        );
        assert_eq!(backend.get("ns/b").await.unwrap(), None, "not applied");
        assert_eq!(backend.list().await.unwrap(), vec![a.clone()]);
    }
}

/// A malformed spec is refused as invalid with the fix, and changes nothing. Id `ns/c`.
pub async fn an_invalid_spec_is_refused_and_changes_nothing(backend: &dyn NetworkBackend) {
    let err = backend
        .ensure(&spec("ns/c", "10.2.0.5/24", "10.2.0.1"))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, BackendError::Invalid(m) if m.contains("write `10.2.0.0/24`")),
        "{err:?}"
    );
    assert_eq!(backend.get("ns/c").await.unwrap(), None);
    assert!(backend.list().await.unwrap().is_empty());
}

/// What the capability layer does for two guests (`a/…` and `b/…` ids on one provider): the
/// operator's refusal names guest a's network, the one guest b sees names nothing of it, and
/// b's calls never reach it. Ids `a/ns/net` (held) and `b/ns/mine`, `b/ns/net` (refused).
pub async fn another_guests_network_appears_in_no_refusal_a_guest_sees(
    backend: &dyn NetworkBackend,
) {
    let held = backend
        .ensure(&spec("a/ns/net", "10.1.0.0/24", "10.1.0.77"))
        .await
        .unwrap();
    let secrets = [
        "a/ns/net",
        "ns/net",
        "10.1.0.0/24",
        "10.1.0.77",
        held.interface_name.as_str(),
    ];
    for (cidr, gateway) in [("10.0.0.0/8", "10.0.0.1"), ("10.1.0.64/26", "10.1.0.65")] {
        let err = backend
            .ensure(&spec("b/ns/mine", cidr, gateway))
            .await
            .unwrap_err();
        assert!(
            err.to_string().contains("a/ns/net"),
            "the operator's view names it: {err}"
        );
        let seen = err.seen_by("b/");
        assert_eq!(
            seen,
            BackendError::Invalid(format!(
                "network `ns/mine`: cidr `{cidr}` overlaps a network held by another guest; \
                 pick a disjoint range"
            ))
        );
        for secret in secrets {
            assert!(!seen.to_string().contains(secret), "{secret} in {seen}");
        }
    }
    assert!(backend.get("b/ns/net").await.unwrap().is_none());
    assert!(!backend.delete("b/ns/net").await.unwrap());
    assert_eq!(backend.get("a/ns/net").await.unwrap(), Some(held));
}

/// The allowed ranges [`each_policy_rule_refuses_with_its_own_words`] configures.
pub(crate) const ALLOWED_CIDRS: [&str; 2] = ["10.0.0.0/8", "fd00::/16"];
/// The API server's address it configures.
pub(crate) const API_SERVER: &str = "10.96.0.1";

/// One case per rule of the policy: cidr, gateway, and the exact words of the refusal.
const POLICY_REFUSALS: &[(&str, &str, &str)] = &[
    (
        "0.0.0.0/0",
        "10.0.0.1",
        "cidr `0.0.0.0/0` is broader than /8, the broadest prefix a network may have \
         (broader ones are default routes and their halves); use /8 or narrower, e.g. \
         `10.10.0.0/24`",
    ),
    (
        "128.0.0.0/1",
        "128.0.0.1",
        "cidr `128.0.0.0/1` is broader than /8, the broadest prefix a network may have \
         (broader ones are default routes and their halves); use /8 or narrower, e.g. \
         `10.10.0.0/24`",
    ),
    (
        "fd00::/8",
        "fd00::1",
        "cidr `fd00::/8` is broader than /16, the broadest prefix a network may have \
         (broader ones are default routes and their halves); use /16 or narrower, e.g. \
         `fd00:10::/64`",
    ),
    (
        "127.0.0.0/8",
        "127.0.0.1",
        "cidr `127.0.0.0/8` overlaps 127.0.0.0/8 \"Loopback\" (RFC 1122 §3.2.1.3, IANA \
         IPv4 Special-Purpose Address Registry), which no network may use: the host's own \
         services listen there; pick a private range such as `10.10.0.0/24`",
    ),
    (
        "::1/128",
        "::1",
        "cidr `::1/128` overlaps ::1/128 \"Loopback Address\" (RFC 4291, IANA IPv6 \
         Special-Purpose Address Registry), which no network may use: the host's own \
         services listen there; pick a private range such as `fd00:10::/64`",
    ),
    (
        "169.254.0.0/24",
        "169.254.0.1",
        "cidr `169.254.0.0/24` overlaps 169.254.0.0/16 \"Link Local\" (RFC 3927, IANA \
         IPv4 Special-Purpose Address Registry), which no network may use: it is never \
         forwarded, and cloud metadata services answer at 169.254.169.254; pick a private \
         range such as `10.10.0.0/24`",
    ),
    (
        "169.254.169.254/32",
        "169.254.169.254",
        "cidr `169.254.169.254/32` overlaps 169.254.0.0/16 \"Link Local\" (RFC 3927, IANA \
         IPv4 Special-Purpose Address Registry), which no network may use: it is never \
         forwarded, and cloud metadata services answer at 169.254.169.254; pick a private \
         range such as `10.10.0.0/24`",
    ),
    (
        "fe80::/64",
        "fe80::1",
        "cidr `fe80::/64` overlaps fe80::/10 \"Link-Local Unicast\" (RFC 4291, IANA IPv6 \
         Special-Purpose Address Registry), which no network may use: it is never \
         forwarded, and the kernel assigns it to every interface; pick a private range \
         such as `fd00:10::/64`",
    ),
    (
        "224.0.0.0/8",
        "224.0.0.1",
        "cidr `224.0.0.0/8` overlaps 224.0.0.0/4 \"Multicast\" (RFC 5771, IANA IPv4 \
         Multicast Address Space Registry), which no network may use: its addresses are \
         multicast groups, not hosts; pick a private range such as `10.10.0.0/24`",
    ),
    (
        "224.0.0.0/24",
        "224.0.0.1",
        "cidr `224.0.0.0/24` overlaps 224.0.0.0/4 \"Multicast\" (RFC 5771, IANA IPv4 \
         Multicast Address Space Registry), which no network may use: its addresses are \
         multicast groups, not hosts; pick a private range such as `10.10.0.0/24`",
    ),
    (
        "ff02::/16",
        "ff02::1",
        "cidr `ff02::/16` overlaps ff00::/8 \"Multicast\" (RFC 4291 §2.7, IANA IPv6 \
         Multicast Address Space Registry), which no network may use: its addresses are \
         multicast groups, not hosts; pick a private range such as `fd00:10::/64`",
    ),
    (
        "64:ff9b::/96",
        "64:ff9b::1",
        "cidr `64:ff9b::/96` overlaps 64:ff9b::/96 \"IPv4-IPv6 Translat.\" (RFC 6052, IANA \
         IPv6 Special-Purpose Address Registry), which no network may use: it is NAT64's \
         well-known prefix, through which IPv6-only hosts reach the IPv4 internet; pick a \
         private range such as `fd00:10::/64`",
    ),
    (
        "198.18.0.0/24",
        "198.18.0.1",
        "cidr `198.18.0.0/24` overlaps 198.18.0.0/15 \"Benchmarking\" (RFC 2544, IANA IPv4 \
         Special-Purpose Address Registry), which no network may use: it is for benchmarking \
         devices, not for production networks (RFC 6815), and DNS proxies hand out fake \
         addresses from it; pick a private range such as `10.10.0.0/24`",
    ),
    (
        "0.0.0.0/8",
        "0.0.0.1",
        "cidr `0.0.0.0/8` overlaps 0.0.0.0/8 \"This network\" (RFC 791 §3.2, IANA IPv4 \
         Special-Purpose Address Registry), which no network may use: it is a source for \
         hosts that have no address yet, never a destination; pick a private range such \
         as `10.10.0.0/24`",
    ),
    (
        "::/128",
        "::",
        "cidr `::/128` overlaps ::/128 \"Unspecified Address\" (RFC 4291, IANA IPv6 \
         Special-Purpose Address Registry), which no network may use: it is the \
         unspecified address: a socket bound to it listens on every address of the host; \
         pick a private range such as `fd00:10::/64`",
    ),
    (
        "255.255.255.255/32",
        "255.255.255.255",
        "cidr `255.255.255.255/32` overlaps 255.255.255.255/32 \"Limited Broadcast\" \
         (RFC 919 §7, RFC 8190, IANA IPv4 Special-Purpose Address Registry), which no \
         network may use: it reaches every host on the link and is never forwarded; pick \
         a private range such as `10.10.0.0/24`",
    ),
    (
        "10.1.0.0/24",
        "10.1.0.0",
        "gateway `10.1.0.0` is the network address of `10.1.0.0/24`; pick a host \
         address, e.g. `10.1.0.1`",
    ),
    (
        "10.1.0.0/24",
        "10.1.0.255",
        "gateway `10.1.0.255` is the broadcast address of `10.1.0.0/24`; pick a host \
         address, e.g. `10.1.0.1`",
    ),
    (
        "192.168.1.0/24",
        "192.168.1.1",
        "cidr `192.168.1.0/24` is outside allowed-cidrs (10.0.0.0/8, fd00::/16); pick \
         a range inside one of them",
    ),
    (
        "10.96.0.0/16",
        "10.96.0.2",
        "cidr `10.96.0.0/16` overlaps the API server's address 10.96.0.1; networks \
         must stay clear of the API server and of the host's own addresses and routes, \
         so pick another range",
    ),
    (
        "10.96.0.0/12",
        "10.96.0.2",
        "cidr `10.96.0.0/12` overlaps the API server's address 10.96.0.1; networks \
         must stay clear of the API server and of the host's own addresses and routes, \
         so pick another range",
    ),
];

/// One spec per rule of the policy, refused through `ensure` with these exact words (the
/// guest sees them as the `invalid` error), and nothing stored; a spec the policy allows is
/// then applied. `configured` builds the provider with [`ALLOWED_CIDRS`] and [`API_SERVER`]
/// as the host does (through [`super::from_config`]). Ids `ns/a` (refused) and `ns/b`
/// (applied).
pub async fn each_policy_rule_refuses_with_its_own_words(
    configured: impl FnOnce(Vec<IpNet>, &[IpAddr]) -> Arc<dyn NetworkBackend>,
) {
    let allowed = ALLOWED_CIDRS.map(|cidr| cidr.parse().unwrap()).to_vec();
    let backend = configured(allowed, &[API_SERVER.parse().unwrap()]);
    for &(cidr, gateway, words) in POLICY_REFUSALS {
        let err = backend
            .ensure(&spec("ns/a", cidr, gateway))
            .await
            .unwrap_err();
        assert_eq!(
            err,
            BackendError::Invalid(format!("network `ns/a`: {words}")),
            "{cidr}"
        );
    }
    assert!(backend.list().await.unwrap().is_empty(), "nothing stored");
    let allowed = backend
        .ensure(&spec("ns/b", "10.97.0.0/16", "10.97.0.1"))
        .await
        .unwrap();
    assert_eq!(allowed.cidr, "10.97.0.0/16");
}

/// What one instance made, the next one opened over the same state (the same namespace, the
/// same state file) finds, and checks overlaps against. `open` opens an instance; the
/// first is dropped before the second is opened. Ids `ns/a` (IPv4) and `ns/b` (IPv6), both
/// left in place, and `ns/c` (refused).
pub async fn a_new_instance_finds_the_networks_of_the_last<B: NetworkBackend>(
    open: impl Fn() -> B,
) {
    let first = open();
    let a = first
        .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
        .await
        .unwrap();
    let b = first
        .ensure(&spec("ns/b", "fd00:10::/64", "fd00:10::1"))
        .await
        .unwrap();
    drop(first);

    let second = open();
    assert_eq!(second.list().await.unwrap(), vec![a.clone(), b]);
    assert_eq!(second.get("ns/a").await.unwrap(), Some(a));
    let err = second
        .ensure(&spec("ns/c", "10.1.0.0/16", "10.1.0.1"))
        .await
        .unwrap_err();
    assert!(matches!(err, BackendError::Overlap { .. }), "{err:?}");
}
