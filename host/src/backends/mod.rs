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
//! # Which ranges a network may take
//!
//! Guests choose their networks' cidrs, and a bridge's address is a route where it is
//! created, so the providers refuse ranges that would reach beyond the guest's own network
//! ([`policy`]; each refusal is [`BackendError::Invalid`] naming the rule):
//!
//! - deny by default: prefixes broader than /8 (IPv4) or /16 (IPv6): default routes and their
//!   halves; and any overlap with loopback (`127.0.0.0/8`, `::1`), link-local
//!   (`169.254.0.0/16`, `fe80::/10`), multicast (`224.0.0.0/4`, `ff00::/8`), "this network"
//!   and unspecified (`0.0.0.0/8`, `::`), broadcast (`255.255.255.255`) and IPv4-mapped IPv6
//!   (`::ffff:0:0/96`); a gateway that is the network address (or, IPv4, the broadcast one);
//! - `allowed-cidrs` in the configuration: when set, a cidr must lie entirely inside one of
//!   its ranges;
//! - the API server's addresses (from the cluster URL, resolved at start-up) are never
//!   covered;
//! - Linux provider: nor are the addresses (with their subnets) and routes of the namespace
//!   it works in, read at every `ensure`, except those on its own bridges. Without `netns`
//!   that is the host's own namespace, where a network over the host's LAN or a VPN's routes
//!   would capture the host's traffic.

pub mod linux;
pub mod memory;
pub mod policy;

use std::fmt::Write as _;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use async_trait::async_trait;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use linux::LinuxBackend;
pub use memory::MemoryBackend;
pub use policy::{Policy, Reserved, api_server_addresses};

/// What a guest wants: the WIT `network-spec` record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Stable for the object's lifetime, e.g. `namespace/name`.
    pub id: String,
    /// IPv4 or IPv6 prefix in canonical network form, e.g. `10.10.0.0/24`.
    pub cidr: String,
    /// An address inside `cidr`, assigned to the network's interface.
    pub gateway: String,
}

/// What a provider reports, read back from the real system: the WIT `network-status` record.
///
/// `cidr` and `gateway` are in canonical text form (`2001:db8::/64`, not `2001:DB8:0::/64`);
/// compare parsed values, not strings, when the spec might be written differently. The Linux
/// provider reports both as empty strings for a bridge that exists but carries no address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkStatus {
    pub id: String,
    pub cidr: String,
    pub gateway: String,
    /// The provider's name for it (a bridge interface name).
    pub interface_name: String,
    /// Whether the interface is administratively up.
    pub up: bool,
}

/// Why a provider call failed. The capability layer maps each kind onto the WIT `error`
/// variant of the same name, so the guest can tell "fix the object" from "try again".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The spec can never succeed as written: a bad CIDR, a gateway outside it, an overlap
    /// with another network. Not worth retrying until the object changes.
    #[error("invalid network: {0}")]
    Invalid(String),
    /// The system refused or failed for now (a netlink error, a missing namespace, a file
    /// that cannot be written). Worth retrying with backoff.
    #[error("network backend unavailable: {0}")]
    Unavailable(String),
    /// Anything else, e.g. an interface name taken by something that is not ours.
    #[error("network backend: {0}")]
    Other(String),
}

/// `Result` with [`BackendError`] as the error.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// A provider of networks. Object-safe so the host holds an `Arc<dyn NetworkBackend>` chosen
/// at start-up; `Send + Sync` because every worker shares it.
///
/// Providers serialise `ensure` calls internally, so the overlap check and the change it
/// guards are one step: of two overlapping specs ensured concurrently, exactly one wins.
#[async_trait]
pub trait NetworkBackend: Send + Sync {
    /// Short provider name (`memory`, `linux`) for logs and metrics labels.
    fn provider(&self) -> &'static str;

    /// The network as it exists now, or `None`.
    async fn get(&self, id: &str) -> Result<Option<NetworkStatus>>;

    /// Creates the network or corrects it to match `spec`; returns the resulting state.
    /// Idempotent. Fails with [`BackendError::Invalid`] (and changes nothing) when the spec is
    /// malformed or overlaps another id's network.
    async fn ensure(&self, spec: &NetworkSpec) -> Result<NetworkStatus>;

    /// Removes the network. `Ok(false)` when it did not exist.
    async fn delete(&self, id: &str) -> Result<bool>;

    /// Every network this provider holds, ordered by id.
    async fn list(&self) -> Result<Vec<NetworkStatus>>;
}

/// The bridge-name prefix used when the configuration names none.
pub const DEFAULT_BRIDGE_PREFIX: &str = "rh";

/// Interface names are at most 15 bytes (`IFNAMSIZ` 16 with the NUL).
const IFNAME_MAX: usize = 15;

/// Fewer hash bits than this makes collisions likely at a few thousand networks (see
/// [`bridge_name`]); it caps the prefix at 6 characters.
const MIN_HASH_HEX: usize = 8;

/// The kernel stores at most 255 bytes of interface alias (`IFALIASZ` 256 with the NUL), and
/// the Linux provider keeps the id there. The limit is shared so offline runs refuse the same
/// ids production would.
pub const MAX_ID_LEN: usize = 255;

/// Which provider the host uses, from the host configuration (YAML):
///
/// ```yaml
/// backend:
///   provider: linux
///   netns: rh-demo        # a name under /var/run/netns; omit for the host's own netns
///   bridge-prefix: rh     # optional, 1-6 of [A-Za-z0-9_], default `rh`
///   allowed-cidrs: [10.100.0.0/16, fd00:100::/48]   # optional, see the policy module
/// ```
///
/// or `provider: memory` with an optional `state-file: <path>` (loaded if present, rewritten
/// after every change) and the same optional `allowed-cidrs`. The camelCase spellings
/// `bridgePrefix`, `stateFile` and `allowedCidrs` are accepted too, matching the rest of the
/// host configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// Unknown keys are errors: a misspelt `bridge_prefix:` must not silently mean the default.
#[serde(tag = "provider", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    Memory {
        #[serde(
            default,
            rename = "state-file",
            alias = "stateFile",
            skip_serializing_if = "Option::is_none"
        )]
        state_file: Option<PathBuf>,
        #[serde(
            default,
            rename = "allowed-cidrs",
            alias = "allowedCidrs",
            skip_serializing_if = "Option::is_none"
        )]
        allowed_cidrs: Option<Vec<IpNet>>,
    },
    Linux {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        netns: Option<String>,
        #[serde(
            default = "default_bridge_prefix",
            rename = "bridge-prefix",
            alias = "bridgePrefix"
        )]
        bridge_prefix: String,
        #[serde(
            default,
            rename = "allowed-cidrs",
            alias = "allowedCidrs",
            skip_serializing_if = "Option::is_none"
        )]
        allowed_cidrs: Option<Vec<IpNet>>,
    },
}

impl BackendConfig {
    /// The configured `allowed-cidrs`, whichever the provider.
    pub fn allowed_cidrs(&self) -> Option<&[IpNet]> {
        match self {
            BackendConfig::Memory { allowed_cidrs, .. }
            | BackendConfig::Linux { allowed_cidrs, .. } => allowed_cidrs.as_deref(),
        }
    }
}

fn default_bridge_prefix() -> String {
    DEFAULT_BRIDGE_PREFIX.to_owned()
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig::Memory {
            state_file: None,
            allowed_cidrs: None,
        }
    }
}

/// Builds the configured provider. No network it accepts may cover any of `api_server`
/// (the API server's addresses, see [`api_server_addresses`]).
///
/// Cost: `memory` reads its state file if one is named; `linux` starts one OS thread that
/// enters the namespace and opens a netlink socket there (see [`linux`]), and fails here,
/// not on the first reconcile, when the namespace or the prefix is wrong. A bad
/// `allowed-cidrs` fails here too.
pub fn from_config(
    config: &BackendConfig,
    api_server: &[IpAddr],
) -> Result<Arc<dyn NetworkBackend>> {
    let policy = Policy::new(config.allowed_cidrs().map(<[IpNet]>::to_vec))?
        .reserving(api_server.iter().copied().map(Reserved::api_server));
    Ok(match config {
        BackendConfig::Memory {
            state_file: None, ..
        } => Arc::new(MemoryBackend::new().with_policy(policy)),
        BackendConfig::Memory {
            state_file: Some(path),
            ..
        } => Arc::new(MemoryBackend::with_state_file(path)?.with_policy(policy)),
        BackendConfig::Linux {
            netns,
            bridge_prefix,
            ..
        } => Arc::new(LinuxBackend::new(netns.as_deref(), bridge_prefix)?.with_policy(policy)),
    })
}

/// A spec that passed [`validate`]: parsed, canonical, safe to apply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ValidSpec {
    pub id: String,
    pub cidr: IpNet,
    pub gateway: IpAddr,
}

impl ValidSpec {
    /// The status a provider that applied this spec exactly would report.
    pub fn status(&self, interface_name: String, up: bool) -> NetworkStatus {
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
/// - the id is 1..=255 bytes without control characters;
/// - `cidr` parses and is the network address itself (`10.1.0.0/24`, not `10.1.0.5/24`):
///   a host address there is almost always a gateway typed into the wrong field, and
///   silently truncating would hide that;
/// - `cidr` is no broader than /8 (IPv4) or /16 (IPv6) and overlaps nothing in
///   [`policy::DENIED`] (loopback, link-local, multicast, unspecified, broadcast);
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
    if id.chars().any(char::is_control) {
        return Err(BackendError::Invalid(format!(
            "network id {id:?} contains control characters; use the object's `namespace/name`"
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

/// Refuses `spec` when its cidr overlaps the cidr of any *other* id in `existing`.
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
        if other_cidr.contains(&spec.cidr.network()) || spec.cidr.contains(&other_cidr.network()) {
            return Err(BackendError::Invalid(format!(
                "network `{}`: cidr `{}` overlaps network `{}` (cidr `{other_cidr}`); pick a \
                 disjoint range or delete `{}` first",
                spec.id, spec.cidr, other.id, other.id
            )));
        }
    }
    Ok(())
}

/// The interface name for `id`: `<prefix>-` and as many hex digits of SHA-256(id) as fit in
/// 15 bytes (12 digits = 48 bits with the default prefix `rh`; never fewer than 8 = 32 bits).
///
/// Collision odds follow the birthday bound, about n² / 2^(bits+1) for n networks: with 48
/// bits, 10 000 networks collide with probability ~2·10⁻⁷; with a 6-character prefix
/// (32 bits), ~1 %. A collision is never silent: the Linux provider stores the owning id in
/// the interface alias and refuses to adopt a bridge whose alias names another id.
pub fn bridge_name(prefix: &str, id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let hex_len = IFNAME_MAX.saturating_sub(prefix.len() + 1);
    let mut name = String::with_capacity(IFNAME_MAX);
    name.push_str(prefix);
    name.push('-');
    for byte in &digest {
        let _ = write!(name, "{byte:02x}");
    }
    name.truncate(prefix.len() + 1 + hex_len);
    name
}

/// Whether `name` is one [`bridge_name`] could have produced with `prefix`.
pub fn is_bridge_name(prefix: &str, name: &str) -> bool {
    let Some(hex) = name
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
    else {
        return false;
    };
    hex.len() == IFNAME_MAX - prefix.len() - 1
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a configured bridge prefix: 1 to 6 of `[A-Za-z0-9_]`. No `-`, so the separator in
/// `<prefix>-<hex>` is unambiguous and one prefix never matches another's bridges.
pub fn validate_bridge_prefix(prefix: &str) -> Result<()> {
    let max = IFNAME_MAX - 1 - MIN_HASH_HEX;
    if prefix.is_empty()
        || prefix.len() > max
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(BackendError::Other(format!(
            "bridge-prefix `{prefix}` is invalid: use 1 to {max} characters of [A-Za-z0-9_] \
             (interface names hold 15 bytes and at least {MIN_HASH_HEX} are needed for the \
             id's hash), e.g. `{DEFAULT_BRIDGE_PREFIX}`"
        )));
    }
    Ok(())
}

fn first_host(cidr: IpNet) -> IpAddr {
    match cidr {
        IpNet::V4(v4) if v4.prefix_len() < 31 => IpAddr::V4((u32::from(v4.network()) + 1).into()),
        IpNet::V6(v6) if v6.prefix_len() < 128 => IpAddr::V6((u128::from(v6.network()) + 1).into()),
        other => other.network(),
    }
}

fn truncate(s: &str, max_chars: usize) -> &str {
    s.char_indices().nth(max_chars).map_or(s, |(i, _)| &s[..i])
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

    #[test]
    fn the_deny_list_refuses_each_range_by_name() {
        let refused = |cidr: &str, gateway: &str, what: &str| {
            let v6 = cidr.contains(':');
            let example = if v6 { "fd00:10::/64" } else { "10.10.0.0/24" };
            assert_eq!(
                invalid(&spec("ns/a", cidr, gateway)),
                format!(
                    "network `ns/a`: cidr `{cidr}` overlaps {what}, which no network may use; \
                     pick a private range such as `{example}`"
                ),
            );
        };
        let this_network = "\"this network\" 0.0.0.0/8 (unspecified source addresses, RFC 1122)";
        refused("0.0.0.0/8", "0.0.0.1", this_network);
        refused("0.0.0.0/32", "0.0.0.0", this_network);
        let loopback = "loopback 127.0.0.0/8 (the host's own services)";
        refused("127.0.0.0/8", "127.0.0.1", loopback);
        refused("127.0.0.1/32", "127.0.0.1", loopback);
        let link_local =
            "link-local 169.254.0.0/16 (cloud metadata services live at 169.254.169.254)";
        refused("169.254.169.254/32", "169.254.169.254", link_local);
        refused("169.0.0.0/8", "169.0.0.1", link_local);
        let multicast = "multicast 224.0.0.0/4";
        refused("224.0.0.0/24", "224.0.0.1", multicast);
        refused("239.255.0.0/16", "239.255.0.1", multicast);
        let broadcast = "the broadcast address 255.255.255.255";
        refused("255.255.255.255/32", "255.255.255.255", broadcast);
        refused("255.0.0.0/8", "255.0.0.1", broadcast);
        refused("::/128", "::", "the unspecified address ::");
        refused("::1/128", "::1", "loopback ::1");
        refused("::/16", "::2", "the unspecified address ::");
        refused(
            "::ffff:10.96.0.0/120",
            "::ffff:10.96.0.1",
            "IPv4-mapped ::ffff:0.0.0.0/96 (IPv4 addresses as IPv6 sockets see them)",
        );
        let v6_link_local = "link-local fe80::/10 (the kernel assigns it to every interface)";
        refused("fe80::/64", "fe80::1", v6_link_local);
        refused("febf:ffff::/32", "febf:ffff::1", v6_link_local);
        refused("ff02::/16", "ff02::1", "multicast ff00::/8");

        // Ranges beside the deny list are fine.
        validate(&spec("ns/a", "1.0.0.0/8", "1.0.0.1")).unwrap();
        validate(&spec("ns/a", "126.0.0.0/8", "126.0.0.1")).unwrap();
        validate(&spec("ns/a", "128.0.0.0/8", "128.0.0.1")).unwrap();
        validate(&spec("ns/a", "169.253.0.0/16", "169.253.0.1")).unwrap();
        validate(&spec("ns/a", "223.255.255.0/24", "223.255.255.1")).unwrap();
        validate(&spec("ns/a", "254.0.0.0/8", "254.0.0.1")).unwrap();
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
        assert!(msg.contains("overlaps loopback"), "{msg}");
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
        match check_overlap(&wider, &existing) {
            Err(BackendError::Invalid(msg)) => {
                assert!(msg.contains("`ns/a` (cidr `10.1.0.0/24`)"), "{msg}");
                assert!(msg.starts_with("network `ns/b`"), "{msg}");
            }
            other => panic!("expected overlap, got {other:?}"),
        }
        let narrower = validate(&spec("ns/c", "10.1.0.128/25", "10.1.0.129")).unwrap();
        assert!(check_overlap(&narrower, &existing).is_err());
        let disjoint = validate(&spec("ns/d", "10.2.0.0/24", "10.2.0.1")).unwrap();
        check_overlap(&disjoint, &existing).unwrap();
        // Re-ensuring the same id with a new range is an update, not an overlap.
        let same_id = validate(&spec("ns/a", "10.1.0.0/16", "10.1.0.1")).unwrap();
        check_overlap(&same_id, &existing).unwrap();
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
            BackendConfig::Linux {
                netns: Some("rh-demo".into()),
                bridge_prefix: "net".into(),
                allowed_cidrs: None,
            }
        );
        let host_ns: BackendConfig = serde_yaml::from_str("provider: linux\n").unwrap();
        assert_eq!(
            host_ns,
            BackendConfig::Linux {
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
            BackendConfig::Memory {
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
