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

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, ToSocketAddrs};

use ipnet::IpNet;

use super::{BackendError, NetworkSpec, Result, ValidSpec, validate};

/// The broadest IPv4 prefix a network may have. Anything broader is a default route
/// (`0.0.0.0/0`), one of its halves (`0.0.0.0/1`, `128.0.0.0/1`, what VPN clients install to
/// take over the default route), or a large share of the address space.
pub const MAX_BREADTH_V4: u8 = 8;
/// The broadest IPv6 prefix a network may have (`::/0` and its halves, for the same reason).
pub const MAX_BREADTH_V6: u8 = 16;

/// One entry of the fixed deny list: a range and what it is.
pub struct Denied {
    pub range: IpNet,
    /// Names the range and says why no network may use it.
    pub what: &'static str,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), len)
}

const fn v6(segments: [u16; 8], len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V6(Ipv6Addr::from_segments(segments)), len)
}

/// Ranges no network may overlap, in any namespace, whatever the configuration says.
pub const DENIED: &[Denied] = &[
    Denied {
        range: v4(0, 0, 0, 0, 8),
        what: "\"this network\" 0.0.0.0/8 (unspecified source addresses, RFC 1122)",
    },
    Denied {
        range: v4(127, 0, 0, 0, 8),
        what: "loopback 127.0.0.0/8 (the host's own services)",
    },
    Denied {
        range: v4(169, 254, 0, 0, 16),
        what: "link-local 169.254.0.0/16 (cloud metadata services live at 169.254.169.254)",
    },
    Denied {
        range: v4(224, 0, 0, 0, 4),
        what: "multicast 224.0.0.0/4",
    },
    Denied {
        range: v4(255, 255, 255, 255, 32),
        what: "the broadcast address 255.255.255.255",
    },
    Denied {
        range: v6([0; 8], 128),
        what: "the unspecified address ::",
    },
    Denied {
        range: v6([0, 0, 0, 0, 0, 0, 0, 1], 128),
        what: "loopback ::1",
    },
    // Not in RFC 6890's "forwardable" sense a network at all: these stand for IPv4 addresses
    // (loopback and the API server among them) on dual-stack sockets.
    Denied {
        range: v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
        what: "IPv4-mapped ::ffff:0.0.0.0/96 (IPv4 addresses as IPv6 sockets see them)",
    },
    Denied {
        range: v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        what: "link-local fe80::/10 (the kernel assigns it to every interface)",
    },
    Denied {
        range: v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        what: "multicast ff00::/8",
    },
];

/// Whether two prefixes share any address (never across families).
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The fixed rules on a parsed cidr: breadth, then the deny list. Called by
/// [`super::validate`]; `id` only names the network in the message.
pub(super) fn check_fixed(id: &str, cidr: &IpNet) -> Result<()> {
    let (breadth, example) = match cidr {
        IpNet::V4(_) => (MAX_BREADTH_V4, "10.10.0.0/24"),
        IpNet::V6(_) => (MAX_BREADTH_V6, "fd00:10::/64"),
    };
    if cidr.prefix_len() < breadth {
        return Err(BackendError::Invalid(format!(
            "network `{id}`: cidr `{cidr}` is broader than /{breadth}, the broadest prefix a \
             network may have (broader ones are default routes and their halves); use /{breadth} \
             or narrower, e.g. `{example}`"
        )));
    }
    if let Some(denied) = DENIED.iter().find(|d| overlaps(&d.range, cidr)) {
        return Err(BackendError::Invalid(format!(
            "network `{id}`: cidr `{cidr}` overlaps {}, which no network may use; pick a \
             private range such as `{example}`",
            denied.what
        )));
    }
    Ok(())
}

/// An address range that no network may overlap, with what it is for the refusal message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reserved {
    pub range: IpNet,
    /// Completes "overlaps …", e.g. "the API server's address 10.96.0.1".
    pub what: String,
}

impl Reserved {
    /// The API server's address: a network covering it would take the host's (or, in a
    /// namespace pods share, their) traffic to the API server.
    pub fn api_server(addr: IpAddr) -> Self {
        Reserved {
            range: IpNet::from(addr),
            what: format!("the API server's address {addr}"),
        }
    }
}

/// Refuses `spec` when its cidr overlaps any of `reserved`.
pub fn check_reserved<'a>(
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
pub fn api_server_addresses(host: &str, port: Option<u16>) -> Result<Vec<IpAddr>> {
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
    pub fn new(allowed: Option<Vec<IpNet>>) -> Result<Self> {
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
    pub fn reserving(mut self, reserved: impl IntoIterator<Item = Reserved>) -> Self {
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
    pub fn validate(&self, spec: &NetworkSpec) -> Result<ValidSpec> {
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

    #[test]
    fn the_deny_list_is_well_formed() {
        for denied in DENIED {
            assert_eq!(denied.range, denied.range.trunc(), "{}", denied.what);
            let text = denied.range.to_string();
            let shown = text.strip_suffix("/32").or(text.strip_suffix("/128"));
            assert!(
                denied.what.contains(shown.unwrap_or(&text)),
                "`{}` names its range {text}",
                denied.what
            );
        }
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
