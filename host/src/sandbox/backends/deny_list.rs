//! The ranges no network may take, whatever the configuration: IANA's special-purpose and
//! multicast registries, and prefixes broad enough to be default routes (see [`super::policy`]
//! for why and for the rules the configuration adds).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::contract::{BackendError, Result};

/// The broadest IPv4 prefix a network may have. Anything broader is a default route
/// (`0.0.0.0/0`), one of its halves (`0.0.0.0/1`, `128.0.0.0/1`, what VPN clients install to
/// take over the default route), or a large share of the address space.
pub const MAX_BREADTH_V4: u8 = 8;
/// The broadest IPv6 prefix a network may have (`::/0` and its halves, for the same reason).
pub const MAX_BREADTH_V6: u8 = 16;

/// One block of an IANA address registry, with what a refusal says about it.
#[derive(Debug)]
pub struct Block {
    pub(crate) range: IpNet,
    /// The block's name in its registry, as the registry spells it.
    pub(crate) name: &'static str,
    /// The RFC the registry cites for the block.
    pub(crate) rfc: &'static str,
    /// The registry the block comes from.
    pub(crate) registry: &'static str,
    /// What the block is for: why no network may use it, or why networks belong there.
    pub(crate) why: &'static str,
}

const IPV4_SPECIAL: &str = "IANA IPv4 Special-Purpose Address Registry";
const IPV6_SPECIAL: &str = "IANA IPv6 Special-Purpose Address Registry";
const IPV4_MULTICAST: &str = "IANA IPv4 Multicast Address Space Registry";
const IPV6_MULTICAST: &str = "IANA IPv6 Multicast Address Space Registry";

const fn v4(a: u8, b: u8, c: u8, d: u8, len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V4(Ipv4Addr::new(a, b, c, d)), len)
}

const fn v6(segments: [u16; 8], len: u8) -> IpNet {
    IpNet::new_assert(IpAddr::V6(Ipv6Addr::from_segments(segments)), len)
}

const fn block(
    range: IpNet,
    name: &'static str,
    rfc: &'static str,
    registry: &'static str,
    why: &'static str,
) -> Block {
    Block {
        range,
        name,
        rfc,
        registry,
        why,
    }
}

const NEVER_ROUTED: &str = "it is for examples only and never routed";

/// Ranges no network may overlap, in any namespace, whatever the configuration says: every
/// block of the two special-purpose registries except [`PRIVATE`], and multicast. Ordered by
/// address, a block before the blocks inside it. See the module docs for the rule.
#[rustfmt::skip] // a table, laid out as the registries list it
pub const DENIED: &[Block] = &[
    // IPv4, from the IPv4 Special-Purpose Address Registry unless said otherwise.
    block(v4(0, 0, 0, 0, 8), "This network", "RFC 791 §3.2", IPV4_SPECIAL,
        "it is a source for hosts that have no address yet, never a destination"),
    block(v4(0, 0, 0, 0, 32), "This host on this network", "RFC 1122 §3.2.1.3", IPV4_SPECIAL,
        "it is the unspecified address: a socket bound to it listens on every address of the host"),
    block(v4(127, 0, 0, 0, 8), "Loopback", "RFC 1122 §3.2.1.3", IPV4_SPECIAL,
        "the host's own services listen there"),
    block(v4(169, 254, 0, 0, 16), "Link Local", "RFC 3927", IPV4_SPECIAL,
        "it is never forwarded, and cloud metadata services answer at 169.254.169.254"),
    block(v4(192, 0, 0, 0, 24), "IETF Protocol Assignments", "RFC 6890 §2.1", IPV4_SPECIAL,
        "it is never forwarded; its addresses are assigned to protocols one by one"),
    block(v4(192, 0, 0, 0, 29), "IPv4 Service Continuity Prefix", "RFC 7335", IPV4_SPECIAL,
        "DS-Lite's tunnel endpoints use it"),
    block(v4(192, 0, 0, 8, 32), "IPv4 dummy address", "RFC 7600", IPV4_SPECIAL,
        "it is a source for hosts without an IPv4 address, never a destination"),
    block(v4(192, 0, 0, 9, 32), "Port Control Protocol Anycast", "RFC 7723", IPV4_SPECIAL,
        "PCP servers answer at it, and a bridge there would answer for them"),
    block(v4(192, 0, 0, 10, 32), "Traversal Using Relays around NAT Anycast", "RFC 8155",
        IPV4_SPECIAL, "TURN servers answer at it, and a bridge there would answer for them"),
    block(v4(192, 0, 0, 170, 32), "NAT64/DNS64 Discovery", "RFC 8880 §7.1", IPV4_SPECIAL,
        "it is the well-known address of ipv4only.arpa, by which hosts discover NAT64"),
    block(v4(192, 0, 0, 171, 32), "NAT64/DNS64 Discovery", "RFC 8880 §7.1", IPV4_SPECIAL,
        "it is the well-known address of ipv4only.arpa, by which hosts discover NAT64"),
    block(v4(192, 0, 2, 0, 24), "Documentation (TEST-NET-1)", "RFC 5737", IPV4_SPECIAL,
        NEVER_ROUTED),
    block(v4(192, 31, 196, 0, 24), "AS112-v4", "RFC 7535", IPV4_SPECIAL,
        "AS112 anycast servers answer reverse DNS for private addresses there"),
    block(v4(192, 52, 193, 0, 24), "AMT", "RFC 7450", IPV4_SPECIAL,
        "Automatic Multicast Tunneling relays answer there by anycast"),
    block(v4(192, 88, 99, 0, 24), "Deprecated (6to4 Relay Anycast)", "RFC 7526", IPV4_SPECIAL,
        "6to4 relays answered there by anycast, and old hosts still send to it"),
    block(v4(192, 88, 99, 2, 32), "6a44-relay anycast address", "RFC 6751", IPV4_SPECIAL,
        "6a44 relays answer at it by anycast"),
    block(v4(192, 175, 48, 0, 24), "Direct Delegation AS112 Service", "RFC 7534", IPV4_SPECIAL,
        "AS112 anycast name servers answer there"),
    block(v4(198, 18, 0, 0, 15), "Benchmarking", "RFC 2544", IPV4_SPECIAL,
        "it is for benchmarking devices, not for production networks (RFC 6815), and DNS \
         proxies hand out fake addresses from it"),
    block(v4(198, 51, 100, 0, 24), "Documentation (TEST-NET-2)", "RFC 5737", IPV4_SPECIAL,
        NEVER_ROUTED),
    block(v4(203, 0, 113, 0, 24), "Documentation (TEST-NET-3)", "RFC 5737", IPV4_SPECIAL,
        NEVER_ROUTED),
    block(v4(224, 0, 0, 0, 4), "Multicast", "RFC 5771", IPV4_MULTICAST,
        "its addresses are multicast groups, not hosts"),
    block(v4(240, 0, 0, 0, 4), "Reserved", "RFC 1112 §4", IPV4_SPECIAL,
        "it is reserved by protocol for future use, and most stacks refuse to route it"),
    block(v4(255, 255, 255, 255, 32), "Limited Broadcast", "RFC 919 §7, RFC 8190", IPV4_SPECIAL,
        "it reaches every host on the link and is never forwarded"),
    // IPv6, from the IPv6 Special-Purpose Address Registry unless said otherwise.
    block(v6([0; 8], 128), "Unspecified Address", "RFC 4291", IPV6_SPECIAL,
        "it is the unspecified address: a socket bound to it listens on every address of the host"),
    block(v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "Loopback Address", "RFC 4291", IPV6_SPECIAL,
        "the host's own services listen there"),
    block(v6([0, 0, 0, 0, 0, 0xffff, 0, 0], 96), "IPv4-mapped Address", "RFC 4291",
        IPV6_SPECIAL,
        "it stands for IPv4 addresses (loopback and the API server among them) on dual-stack \
         sockets"),
    block(v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "IPv4-IPv6 Translat.", "RFC 6052",
        IPV6_SPECIAL,
        "it is NAT64's well-known prefix, through which IPv6-only hosts reach the IPv4 internet"),
    block(v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "IPv4-IPv6 Translat.", "RFC 8215",
        IPV6_SPECIAL,
        "it is NAT64's local-use prefix, through which IPv6-only hosts reach IPv4 destinations"),
    block(v6([0x100, 0, 0, 0, 0, 0, 0, 0], 64), "Discard-Only Address Block", "RFC 6666",
        IPV6_SPECIAL, "black-hole routes send the traffic they drop there"),
    block(v6([0x100, 0, 0, 1, 0, 0, 0, 0], 64), "Dummy IPv6 Prefix", "RFC 9780", IPV6_SPECIAL,
        "it is a source for management packets, never a destination"),
    block(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 23), "IETF Protocol Assignments", "RFC 2928",
        IPV6_SPECIAL,
        "it is not forwarded as a whole; its blocks are assigned to protocols one by one"),
    block(v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "TEREDO", "RFC 4380, RFC 8190", IPV6_SPECIAL,
        "Teredo tunnels number their ends from it, and a bridge there would take their traffic"),
    block(v6([0x2001, 1, 0, 0, 0, 0, 0, 1], 128), "Port Control Protocol Anycast", "RFC 7723",
        IPV6_SPECIAL, "PCP servers answer at it, and a bridge there would answer for them"),
    block(v6([0x2001, 1, 0, 0, 0, 0, 0, 2], 128), "Traversal Using Relays around NAT Anycast",
        "RFC 8155", IPV6_SPECIAL,
        "TURN servers answer at it, and a bridge there would answer for them"),
    block(v6([0x2001, 1, 0, 0, 0, 0, 0, 3], 128), "DNS-SD Service Registration Protocol Anycast",
        "RFC 9665", IPV6_SPECIAL,
        "DNS-SD registration servers answer at it, and a bridge there would answer for them"),
    block(v6([0x2001, 2, 0, 0, 0, 0, 0, 0], 48), "Benchmarking", "RFC 5180", IPV6_SPECIAL,
        "it is for benchmarking devices, not for production networks"),
    block(v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32), "AMT", "RFC 7450", IPV6_SPECIAL,
        "Automatic Multicast Tunneling relays answer there by anycast"),
    block(v6([0x2001, 4, 0x112, 0, 0, 0, 0, 0], 48), "AS112-v6", "RFC 7535", IPV6_SPECIAL,
        "AS112 anycast servers answer reverse DNS for private addresses there"),
    block(v6([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28), "Deprecated (previously ORCHID)",
        "RFC 4843", IPV6_SPECIAL,
        "its addresses were identifiers of an overlay, not of hosts on a network"),
    block(v6([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28), "ORCHIDv2", "RFC 7343", IPV6_SPECIAL,
        "its addresses are cryptographic identifiers of an overlay, not hosts on a network"),
    block(v6([0x2001, 0x30, 0, 0, 0, 0, 0, 0], 28),
        "Drone Remote ID Protocol Entity Tags (DETs) Prefix", "RFC 9374", IPV6_SPECIAL,
        "its addresses identify unmanned aircraft, not hosts on a network"),
    block(v6([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32), "Documentation", "RFC 3849", IPV6_SPECIAL,
        NEVER_ROUTED),
    block(v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4", "RFC 3056", IPV6_SPECIAL,
        "each of its addresses stands for an IPv4 address reached through a 6to4 tunnel"),
    block(v6([0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0], 48), "Direct Delegation AS112 Service",
        "RFC 7534", IPV6_SPECIAL, "AS112 anycast name servers answer there"),
    block(v6([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20), "Documentation", "RFC 9637", IPV6_SPECIAL,
        NEVER_ROUTED),
    block(v6([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16), "Segment Routing (SRv6) SIDs", "RFC 9602",
        IPV6_SPECIAL, "its addresses are segment identifiers that SRv6 routers act on"),
    block(v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "Link-Local Unicast", "RFC 4291",
        IPV6_SPECIAL, "it is never forwarded, and the kernel assigns it to every interface"),
    block(v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "Multicast", "RFC 4291 §2.7", IPV6_MULTICAST,
        "its addresses are multicast groups, not hosts"),
];

/// The registries' blocks for numbering private networks, which [`DENIED`] leaves alone: this
/// is where bridges belong (narrow them further with `allowed-cidrs`).
#[rustfmt::skip] // a table, like DENIED
pub const PRIVATE: &[Block] = &[
    block(v4(10, 0, 0, 0, 8), "Private-Use", "RFC 1918", IPV4_SPECIAL,
        "a site numbers its own networks from it"),
    block(v4(100, 64, 0, 0, 10), "Shared Address Space", "RFC 6598", IPV4_SPECIAL,
        "a provider numbers its customers' networks behind NAT from it"),
    block(v4(172, 16, 0, 0, 12), "Private-Use", "RFC 1918", IPV4_SPECIAL,
        "a site numbers its own networks from it"),
    block(v4(192, 168, 0, 0, 16), "Private-Use", "RFC 1918", IPV4_SPECIAL,
        "a site numbers its own networks from it"),
    block(v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7), "Unique-Local", "RFC 4193, RFC 8190",
        IPV6_SPECIAL, "a site numbers its own networks from it"),
];

/// Whether two prefixes share any address (never across families).
pub fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

/// The block of [`DENIED`] a refusal of `cidr` names: the narrowest one holding all of `cidr`
/// (so `64:ff9b:1::/64` is refused as NAT64's, not as a neighbour's), else the first it
/// overlaps.
pub fn denied_block(cidr: &IpNet) -> Option<&'static Block> {
    let overlapping = || DENIED.iter().filter(|d| overlaps(&d.range, cidr));
    overlapping()
        .filter(|d| d.range.contains(cidr))
        .max_by_key(|d| d.range.prefix_len())
        .or_else(|| overlapping().next())
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
    if let Some(denied) = denied_block(cidr) {
        return Err(BackendError::Invalid(format!(
            "network `{id}`: cidr `{cidr}` overlaps {} \"{}\" ({}, {}), which no network may \
             use: {}; pick a private range such as `{example}`",
            denied.range, denied.name, denied.rfc, denied.registry, denied.why
        )));
    }
    Ok(())
}
