//! What every provider checks before it acts: a spec's shape ([`validate`]) and its overlap
//! with the networks that exist ([`check_overlap`]), in the same words for both providers.

use std::net::IpAddr;

use ipnet::IpNet;

use super::contract::{BackendError, NetworkSpec, NetworkStatus, Result};
use super::deny_list as policy;

/// The kernel stores at most 255 bytes of interface alias (`IFALIASZ` 256 with the NUL), and
/// the Linux provider keeps the id there. The limit is shared so offline runs refuse the same
/// ids production would.
pub const MAX_ID_LEN: usize = 255;

/// A spec that passed [`validate`]: parsed, canonical, safe to apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidSpec {
    pub(crate) id: String,
    pub(crate) cidr: IpNet,
    pub(crate) gateway: IpAddr,
}

impl ValidSpec {
    /// The status a provider that applied this spec exactly would report.
    pub(crate) fn status(&self, interface_name: String, up: bool) -> NetworkStatus {
        NetworkStatus {
            id: self.id.clone(),
            cidr: self.cidr.to_string(),
            gateway: self.gateway.to_string(),
            interface_name,
            up,
        }
    }
}

/// Checks a spec on its own, with the fixed rules only (the configured ones:
/// [`Policy::validate`]; overlap needs the other networks: [`check_overlap`]).
///
/// Rules, each with its own message naming the network and the fix:
/// - the id is 1..=255 bytes without control characters, line breaks or bidirectional
///   formatting characters (it reaches log lines and, Linux, `ip link` output);
/// - `cidr` parses and is the network address itself (`10.1.0.0/24`, not `10.1.0.5/24`):
///   a host address there is almost always a gateway typed into the wrong field, and
///   silently truncating would hide that;
/// - `cidr` is no broader than /8 (IPv4) or /16 (IPv6) and overlaps nothing in
///   [`policy::DENIED`] (the IANA special-purpose blocks other than private ones, multicast);
/// - `gateway` parses, has the cidr's family, lies inside it, and is not the network address
///   (IPv4 prefixes shorter than /31, IPv6 shorter than /127: RFC 3021 and RFC 6164 make
///   every address of those point-to-point prefixes usable) nor, IPv4, the broadcast address.
pub fn validate(spec: &NetworkSpec) -> Result<ValidSpec> {
    let id = &spec.id;
    if id.is_empty() {
        return Err(BackendError::Invalid(
            "network id is empty; use the object's `namespace/name`".into(),
        ));
    }
    if id.len() > MAX_ID_LEN {
        return Err(BackendError::Invalid(format!(
            "network id `{}…` is {} bytes; at most {MAX_ID_LEN} fit (the Linux provider keeps \
             it in the interface alias); use a shorter id, e.g. the object's UID",
            truncate(id, 40),
            id.len()
        )));
    }
    if id
        .chars()
        .any(crate::cluster::validation::escaped_in_messages)
    {
        return Err(BackendError::Invalid(format!(
            "network id {id:?} contains control characters, line breaks or bidirectional \
             formatting characters; use the object's `namespace/name`"
        )));
    }

    let cidr: IpNet = spec.cidr.parse().map_err(|_| {
        BackendError::Invalid(format!(
            "network `{id}`: cidr `{}` is not an IP prefix; write e.g. `10.10.0.0/24` or \
             `fd00:10::/64`",
            spec.cidr
        ))
    })?;
    if cidr.addr() != cidr.network() {
        return Err(BackendError::Invalid(format!(
            "network `{id}`: cidr `{}` has host bits set; write `{}` (the gateway goes in \
             `gateway`)",
            spec.cidr,
            cidr.trunc()
        )));
    }
    policy::check_fixed(id, &cidr)?;

    let gateway: IpAddr = spec.gateway.parse().map_err(|_| {
        BackendError::Invalid(format!(
            "network `{id}`: gateway `{}` is not an IP address; write one address inside \
             `{cidr}`, e.g. `{}`",
            spec.gateway,
            first_host(cidr)
        ))
    })?;
    if !cidr.contains(&gateway) {
        return Err(BackendError::Invalid(format!(
            "network `{id}`: gateway `{gateway}` is outside cidr `{cidr}`; pick an address \
             inside it, e.g. `{}`",
            first_host(cidr)
        )));
    }
    let point_to_point = match cidr {
        IpNet::V4(v4) => v4.prefix_len() >= 31,
        IpNet::V6(v6) => v6.prefix_len() >= 127,
    };
    if !point_to_point {
        let reserved = if cidr.network() == gateway {
            Some("network")
        } else if matches!(cidr, IpNet::V4(_)) && cidr.broadcast() == gateway {
            Some("broadcast")
        } else {
            None
        };
        if let Some(what) = reserved {
            return Err(BackendError::Invalid(format!(
                "network `{id}`: gateway `{gateway}` is the {what} address of `{cidr}`; pick a \
                 host address, e.g. `{}`",
                first_host(cidr)
            )));
        }
    }

    Ok(ValidSpec {
        id: id.clone(),
        cidr,
        gateway,
    })
}

/// Refuses `spec` with [`BackendError::Overlap`] when its cidr overlaps the cidr of any *other*
/// id in `existing`.
///
/// The later network (the one being ensured) is the one refused; the existing one is left
/// alone. Different address families never overlap. Entries whose cidr is empty or
/// unparsable (a Linux bridge stripped of its address by hand) claim no range.
pub fn check_overlap<'a>(
    spec: &ValidSpec,
    existing: impl IntoIterator<Item = &'a NetworkStatus>,
) -> Result<()> {
    for other in existing {
        if other.id == spec.id {
            continue;
        }
        let Ok(other_cidr) = other.cidr.parse::<IpNet>() else {
            continue;
        };
        if policy::overlaps(&other_cidr, &spec.cidr) {
            return Err(BackendError::Overlap {
                id: spec.id.clone(),
                cidr: spec.cidr,
                other: other.id.clone(),
                other_cidr,
            });
        }
    }
    Ok(())
}

pub(super) fn first_host(cidr: IpNet) -> IpAddr {
    match cidr {
        IpNet::V4(v4) if v4.prefix_len() < 31 => IpAddr::V4((u32::from(v4.network()) + 1).into()),
        IpNet::V6(v6) if v6.prefix_len() < 128 => IpAddr::V6((u128::from(v6.network()) + 1).into()),
        other => other.network(),
    }
}

fn truncate(s: &str, max_chars: usize) -> &str {
    s.char_indices().nth(max_chars).map_or(s, |(i, _)| &s[..i])
}
