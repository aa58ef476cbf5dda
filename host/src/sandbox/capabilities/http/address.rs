//! Which addresses an outbound request may connect to. The host resolves a name itself and
//! connects to an address it checked here (a name that resolves to an internal address, or
//! that a second lookup would resolve elsewhere, cannot reach past this check): loopback,
//! private, link-local (the cloud metadata service at 169.254.169.254 among them), shared,
//! multicast, documentation and the other special-purpose ranges of the IANA registries are
//! refused, unless the grant's prefix names that very address literally.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::{Ipv4Net, Ipv6Net};

/// IPv4 special-purpose ranges (RFC 6890 and successors), with the name a refusal gives.
const V4: &[(&str, &str)] = &[
    ("0.0.0.0/8", "a \"this network\" address"),
    ("10.0.0.0/8", "a private address"),
    ("100.64.0.0/10", "a shared (carrier-grade NAT) address"),
    ("127.0.0.0/8", "a loopback address"),
    (
        "169.254.0.0/16",
        "a link-local address (the cloud metadata service lives there)",
    ),
    ("172.16.0.0/12", "a private address"),
    ("192.0.0.0/24", "an IETF protocol address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay address"),
    ("192.168.0.0/16", "a private address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved address"),
];

/// IPv6 special-purpose ranges; IPv4-mapped addresses are judged as the IPv4 address they carry.
const V6: &[(&str, &str)] = &[
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("64:ff9b::/96", "a NAT64 address"),
    ("64:ff9b:1::/48", "a NAT64 address"),
    ("100::/64", "a discard address"),
    ("2001::/23", "an IETF protocol address (Teredo among them)"),
    ("2001:db8::/32", "a documentation address"),
    ("2002::/16", "a 6to4 address"),
    ("fc00::/7", "a unique local (private) address"),
    ("fe80::/10", "a link-local address"),
    ("ff00::/8", "a multicast address"),
];

/// What a request may connect to: any public address, and the one address its prefix names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddressPolicy {
    /// The IP the grant's prefix names literally, if it does.
    pub(crate) literal: Option<IpAddr>,
}

impl AddressPolicy {
    /// Ok for an address the request may connect to; otherwise what the address is.
    pub(crate) fn check(&self, ip: IpAddr) -> Result<(), &'static str> {
        if self.literal == Some(ip) {
            return Ok(());
        }
        match special(ip) {
            Some(what) => Err(what),
            None => Ok(()),
        }
    }
}

/// What special-purpose range `ip` is in, if any.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => special_v4(v4),
            None => special_v6(v6),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_broadcast() {
        return Some("the broadcast address");
    }
    V4.iter().find_map(|(net, what)| {
        let net: Ipv4Net = net.parse().expect("a listed range parses");
        net.contains(&ip).then_some(*what)
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    V6.iter().find_map(|(net, what)| {
        let net: Ipv6Net = net.parse().expect("a listed range parses");
        net.contains(&ip).then_some(*what)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn internal_addresses_are_refused_and_public_ones_pass() {
        let anywhere = AddressPolicy { literal: None };
        for internal in [
            "127.0.0.1",
            "127.8.9.10",
            "10.1.2.3",
            "172.31.255.255",
            "192.168.0.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fd00::1",
            "fe80::1",
            "64:ff9b::7f00:1",
            "2002:7f00:1::",
            "2001::1",
        ] {
            assert!(anywhere.check(ip(internal)).is_err(), "{internal} passed");
        }
        for public in [
            "93.184.215.14",
            "1.1.1.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
        ] {
            assert_eq!(anywhere.check(ip(public)), Ok(()), "{public}");
        }
        assert_eq!(
            anywhere.check(ip("169.254.169.254")),
            Err("a link-local address (the cloud metadata service lives there)")
        );
    }

    #[test]
    fn only_the_address_a_prefix_names_literally_is_let_through() {
        let pdns = AddressPolicy {
            literal: Some(ip("127.0.0.1")),
        };
        assert_eq!(pdns.check(ip("127.0.0.1")), Ok(()));
        assert!(pdns.check(ip("127.0.0.2")).is_err());
        assert!(pdns.check(ip("::1")).is_err());
        assert!(pdns.check(ip("169.254.169.254")).is_err());
    }
}
