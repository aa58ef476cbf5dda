//! Which address ranges a network may take: the deny list every provider applies, the
//! operator's `allowed-cidrs`, and the addresses no network may cover.
//!
//! A bridge with an address is a connected route on the host (or in the namespace the
//! provider works in): the most specific route wins, so a network covering the API server, a
//! host address or a route the host already has would pull that traffic onto the bridge. The
//! guest chooses the range; these rules keep that choice from reaching beyond its own network.
//!
//! Every rule refuses with [`BackendError::Invalid`] and a message that starts with the
//! network and its cidr, names the rule and says what to pick instead. The checks run in this
//! order, so a spec that breaks several rules always gets the same message:
//!
//! 1. [`super::validate`], which includes the fixed rules: a prefix no broader than
//!    [`MAX_BREADTH_V4`] / [`MAX_BREADTH_V6`], and no overlap with [`DENIED`];
//! 2. `allowed-cidrs`, when configured: the cidr lies entirely inside one of them;
//! 3. the reserved addresses given at construction (the API server's, see
//!    [`Reserved::api_server`]);
//! 4. [`super::check_overlap`] with the provider's other networks;
//! 5. (Linux provider) the addresses and routes of the namespace, read at every `ensure`.
//!
//! # The deny list
//!
//! [`DENIED`] is every block of IANA's IPv4 and IPv6 Special-Purpose Address Registries (as of
//! 2026), plus multicast from the two Multicast Address Space registries, except the blocks
//! for numbering private networks ([`PRIVATE`]: Private-Use `10.0.0.0/8`, `172.16.0.0/12` and
//! `192.168.0.0/16`, Shared Address Space `100.64.0.0/10`, Unique-Local `fc00::/7`), which is
//! where bridges belong. The registries' columns say why each other block is refused: one
//! Reserved-by-Protocol has a meaning the host's stack acts on (loopback, link-local, limited
//! broadcast, `240.0.0.0/4`); one not Forwardable is never a route (documentation, dummy
//! prefixes, `192.0.0.0/24`); the rest are assigned to a function other systems act on
//! (anycast services, NAT64, tunnels, benchmarking, segment routing) whose traffic a bridge
//! would take. The columns alone do not tell Benchmarking `198.18.0.0/15` or NAT64's local-use
//! `64:ff9b:1::/48` from the private blocks (all Forwardable, none Globally Reachable); the
//! purpose does, so a block assigned to a function is refused and only the private-numbering
//! blocks are left.
//!
//! Ranges outside both registries (ordinary global unicast, the deprecated site-local
//! `fec0::/10`) are left to `allowed-cidrs`.

use std::net::{IpAddr, ToSocketAddrs};

use ipnet::IpNet;

use super::contract::{BackendError, NetworkSpec, Result};
pub use super::deny_list::{
    Block, DENIED, MAX_BREADTH_V4, MAX_BREADTH_V6, PRIVATE, denied_block, overlaps,
};
use super::spec::{ValidSpec, validate};

/// An address range that no network may overlap, with what it is for the refusal message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub(crate) range: IpNet,
    /// Completes "overlaps …", e.g. "the API server's address 10.96.0.1".
    pub(crate) what: String,
}

impl Reserved {
    /// The API server's address: a network covering it would take the host's (or, in a
    /// namespace pods share, their) traffic to the API server.
    pub(crate) fn api_server(addr: IpAddr) -> Self {
        Reserved {
            range: IpNet::from(addr),
            what: format!("the API server's address {addr}"),
        }
    }
}

/// Refuses `spec` when its cidr overlaps any of `reserved`.
pub(crate) fn check_reserved<'a>(
    spec: &ValidSpec,
    reserved: impl IntoIterator<Item = &'a Reserved>,
) -> Result<()> {
    for r in reserved {
        if overlaps(&r.range, &spec.cidr) {
            return Err(BackendError::Invalid(format!(
                "network `{}`: cidr `{}` overlaps {}; networks must stay clear of the API \
                 server and of the host's own addresses and routes, so pick another range",
                spec.id, spec.cidr, r.what
            )));
        }
    }
    Ok(())
}

/// The addresses of the API server at `host` (a name or an address, as in the cluster URL;
/// IPv6 with or without brackets), resolved once, now.
///
/// Cost: a name is resolved with the system resolver (`getaddrinfo`), which blocks; call it
/// once at start-up. The addresses are not followed afterwards: an API server whose name
/// later resolves elsewhere is not protected at its new address.
pub(crate) fn api_server_addresses(host: &str, port: Option<u16>) -> Result<Vec<IpAddr>> {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(vec![ip]);
    }
    if bare.is_empty() {
        return Err(BackendError::Other(
            "the cluster URL has no host, so the API server's address cannot be kept clear of \
             networks; fix the kubeconfig's `server:`"
                .into(),
        ));
    }
    let mut addresses: Vec<IpAddr> = (bare, port.unwrap_or(443))
        .to_socket_addrs()
        .map_err(|err| {
            BackendError::Unavailable(format!(
                "cannot resolve the API server's host `{bare}` ({err}), whose addresses no \
                 network may cover; check DNS or use an address in the kubeconfig's `server:`"
            ))
        })?
        .map(|socket| socket.ip())
        .collect();
    addresses.sort_unstable();
    addresses.dedup();
    Ok(addresses)
}

/// The rules a provider applies on top of [`super::validate`]: the configuration's
/// `allowed-cidrs` and the reserved addresses given at construction.
///
/// The default (no `allowed-cidrs`, nothing reserved) leaves only the fixed rules.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    allowed: Option<Vec<IpNet>>,
    reserved: Vec<Reserved>,
}

impl Policy {
    /// Only cidrs lying entirely inside one of `allowed` are accepted (`None`: any range the
    /// fixed rules accept). Refuses a list that is empty or has an entry with host bits set:
    /// both are mistakes in the configuration, better reported at start-up than as every
    /// network being refused.
    pub(crate) fn new(allowed: Option<Vec<IpNet>>) -> Result<Self> {
        if let Some(allowed) = &allowed {
            if allowed.is_empty() {
                return Err(BackendError::Other(
                    "allowed-cidrs is empty, which would refuse every network; list the ranges \
                     networks may use, or omit it to allow any range outside the deny list"
                        .into(),
                ));
            }
            if let Some(bad) = allowed.iter().find(|net| net.addr() != net.network()) {
                return Err(BackendError::Other(format!(
                    "allowed-cidrs entry `{bad}` has host bits set; write `{}`",
                    bad.trunc()
                )));
            }
        }
        Ok(Policy {
            allowed,
            reserved: Vec::new(),
        })
    }

    /// Adds ranges no network may overlap.
    #[must_use]
    pub(crate) fn reserving(mut self, reserved: impl IntoIterator<Item = Reserved>) -> Self {
        self.reserved.extend(reserved);
        self
    }

    /// The configured `allowed-cidrs`, if any.
    pub fn allowed(&self) -> Option<&[IpNet]> {
        self.allowed.as_deref()
    }

    /// The ranges reserved at construction.
    pub fn reserved(&self) -> &[Reserved] {
        &self.reserved
    }

    /// [`super::validate`], then `allowed-cidrs`, then the reserved ranges. What the providers
    /// call first in every `ensure`.
    pub(crate) fn validate(&self, spec: &NetworkSpec) -> Result<ValidSpec> {
        let spec = validate(spec)?;
        if let Some(allowed) = &self.allowed
            && !allowed.iter().any(|range| range.contains(&spec.cidr))
        {
            let list = allowed
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ");
            return Err(BackendError::Invalid(format!(
                "network `{}`: cidr `{}` is outside allowed-cidrs ({list}); pick a range \
                 inside one of them",
                spec.id, spec.cidr
            )));
        }
        check_reserved(&spec, &self.reserved)?;
        Ok(spec)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(id: &str, cidr: &str, gateway: &str) -> NetworkSpec {
        NetworkSpec {
            id: id.into(),
            cidr: cidr.into(),
            gateway: gateway.into(),
        }
    }

    fn refusal(cidr: &str, gateway: &str) -> String {
        match validate(&spec("ns/a", cidr, gateway)) {
            Err(BackendError::Invalid(msg)) => msg,
            other => panic!("expected Invalid for {cidr}, got {other:?}"),
        }
    }

    /// `block` as a network could ask for it: no broader than the breadth cap allows, with a
    /// gateway inside.
    fn asked_for(block: &IpNet) -> (IpNet, IpAddr) {
        let breadth = match block {
            IpNet::V4(_) => MAX_BREADTH_V4,
            IpNet::V6(_) => MAX_BREADTH_V6,
        };
        let cidr = IpNet::new(block.network(), block.prefix_len().max(breadth)).unwrap();
        (cidr, crate::sandbox::backends::spec::first_host(cidr))
    }

    #[test]
    fn the_deny_list_is_well_formed_and_ordered_by_address() {
        for (i, denied) in DENIED.iter().enumerate() {
            assert_eq!(denied.range, denied.range.trunc(), "{}", denied.name);
            assert!(denied.rfc.starts_with("RFC "), "{}", denied.name);
            assert!(denied.registry.starts_with("IANA "), "{}", denied.name);
            if let Some(next) = DENIED.get(i + 1) {
                let key = |b: &Block| (b.range.network(), b.range.prefix_len());
                assert!(
                    key(denied) < key(next),
                    "{} before {}",
                    denied.range,
                    next.range
                );
            }
        }
    }

    #[test]
    fn every_registry_entry_is_refused_naming_its_range_and_why() {
        for denied in DENIED {
            let (cidr, gateway) = asked_for(&denied.range);
            let example = if cidr.addr().is_ipv4() {
                "10.10.0.0/24"
            } else {
                "fd00:10::/64"
            };
            assert_eq!(
                refusal(&cidr.to_string(), &gateway.to_string()),
                format!(
                    "network `ns/a`: cidr `{cidr}` overlaps {} \"{}\" ({}, {}), which no network \
                     may use: {}; pick a private range such as `{example}`",
                    denied.range, denied.name, denied.rfc, denied.registry, denied.why
                )
            );
        }
    }

    #[test]
    fn nat64_prefixes_are_refused() {
        assert_eq!(
            refusal("64:ff9b::/96", "64:ff9b::1"),
            "network `ns/a`: cidr `64:ff9b::/96` overlaps 64:ff9b::/96 \"IPv4-IPv6 Translat.\" \
             (RFC 6052, IANA IPv6 Special-Purpose Address Registry), which no network may use: \
             it is NAT64's well-known prefix, through which IPv6-only hosts reach the IPv4 \
             internet; pick a private range such as `fd00:10::/64`"
        );
        assert!(refusal("64:ff9b::a00:0/120", "64:ff9b::a00:1").contains("RFC 6052"));
        assert!(refusal("64:ff9b:1::/48", "64:ff9b:1::1").contains("RFC 8215"));
        assert!(refusal("64:ff9b:1:2::/64", "64:ff9b:1:2::1").contains("NAT64's local-use"));
        assert!(refusal("64::/16", "64::1").contains("64:ff9b::/96"));
    }

    #[test]
    fn the_private_ranges_bridges_belong_in_still_pass() {
        for private in PRIVATE {
            assert!(
                !DENIED.iter().any(|d| overlaps(&d.range, &private.range)),
                "{} is denied",
                private.range
            );
            let (cidr, gateway) = asked_for(&private.range);
            validate(&spec("ns/a", &cidr.to_string(), &gateway.to_string()))
                .unwrap_or_else(|e| panic!("{cidr}: {e}"));
        }
        for (cidr, gateway) in [
            ("10.10.0.0/24", "10.10.0.1"),
            ("100.64.0.0/10", "100.64.0.1"),
            ("172.31.255.0/24", "172.31.255.1"),
            ("192.168.1.0/24", "192.168.1.1"),
            ("fd00:10::/64", "fd00:10::1"),
            ("fc00:1::/64", "fc00:1::1"),
        ] {
            validate(&spec("ns/a", cidr, gateway)).unwrap_or_else(|e| panic!("{cidr}: {e}"));
        }
    }

    #[test]
    fn a_network_over_several_blocks_is_refused_by_the_narrowest_that_holds_it() {
        assert!(refusal("192.0.0.9/32", "192.0.0.9").contains("\"Port Control Protocol Anycast\""));
        assert!(refusal("192.0.0.0/26", "192.0.0.1").contains("\"IETF Protocol Assignments\""));
        assert!(refusal("255.255.255.255/32", "255.255.255.255").contains("\"Limited Broadcast\""));
        assert!(refusal("255.0.0.0/8", "255.0.0.1").contains("240.0.0.0/4 \"Reserved\""));
        // Held by none: the first block it overlaps, in address order.
        assert!(refusal("192.0.0.0/16", "192.0.0.1").contains("192.0.0.0/24"));
    }

    #[test]
    fn api_server_hosts_resolve_addresses_and_names() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(
            api_server_addresses("10.96.0.1", Some(443)).unwrap(),
            [ip("10.96.0.1")]
        );
        assert_eq!(
            api_server_addresses("[fd00::1]", None).unwrap(),
            [ip("fd00::1")]
        );
        let local = api_server_addresses("localhost", Some(6443)).unwrap();
        assert!(local.iter().all(IpAddr::is_loopback), "{local:?}");
        assert!(api_server_addresses("", None).is_err());
    }

    #[test]
    fn allowed_cidrs_must_be_a_non_empty_list_of_networks() {
        let nets =
            |list: &[&str]| -> Vec<IpNet> { list.iter().map(|s| s.parse().unwrap()).collect() };
        Policy::new(None).unwrap();
        Policy::new(Some(nets(&["10.100.0.0/16", "fd00:100::/48"]))).unwrap();
        let empty = Policy::new(Some(Vec::new())).unwrap_err().to_string();
        assert!(empty.contains("allowed-cidrs is empty"), "{empty}");
        let bits = Policy::new(Some(nets(&["10.100.0.1/16"])))
            .unwrap_err()
            .to_string();
        assert!(bits.contains("write `10.100.0.0/16`"), "{bits}");
    }
}
