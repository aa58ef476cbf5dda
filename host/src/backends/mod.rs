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
/// `cidr` and `gateway` are in canonical text form (`fd00:10::/64`, not `FD00:10:0::/64`);
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
/// variant of the same name (through [`BackendError::seen_by`]), so the guest can tell "fix
/// the object" from "try again".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The spec can never succeed as written: a bad CIDR, a gateway outside it, a range the
    /// policy refuses. Not worth retrying until the object changes.
    #[error("invalid network: {0}")]
    Invalid(String),
    /// The cidr overlaps network `other`: invalid, like [`BackendError::Invalid`]. Kept apart
    /// so that only a caller who may see `other` is told its id and range.
    #[error("invalid network: {}", overlap(.id, .cidr, Some((.other, .other_cidr))))]
    Overlap {
        id: String,
        cidr: IpNet,
        other: String,
        other_cidr: IpNet,
    },
    /// (Linux) the bridge name `id` hashes to is held by network `owner` (its alias): the two
    /// ids collide in the name hash. Kept apart for the same reason as `Overlap`.
    #[error("network backend: {}", name_taken(.id, .bridge, .place, Some(.owner)))]
    NameTaken {
        id: String,
        bridge: String,
        /// The namespace, as messages name it.
        place: String,
        owner: String,
    },
    /// The system refused or failed for now (a netlink error, a missing namespace, a file
    /// that cannot be written). Worth retrying with backoff.
    #[error("network backend unavailable: {0}")]
    Unavailable(String),
    /// Anything else, e.g. an interface name taken by something that is not ours.
    #[error("network backend: {0}")]
    Other(String),
}

impl BackendError {
    /// The error as a caller sees it who owns only the ids starting with `prefix` and knows
    /// them without it: a guest, whose ids the capability layer stores as `<guest>/<id>`.
    /// Another owner's network is never named: an overlap with it reads as an overlap with a
    /// network held by another guest, a bridge it holds as taken. What remains is `Invalid`,
    /// `Unavailable` or `Other`, with the caller's own ids written as it wrote them.
    #[must_use]
    pub fn seen_by(self, prefix: &str) -> BackendError {
        let own = |id: &str| id.strip_prefix(prefix).map(str::to_owned);
        let shown = |id: String| own(&id).unwrap_or(id);
        // Every message names ids in backticks.
        let unprefixed = |m: String| m.replace(&format!("`{prefix}"), "`");
        match self {
            BackendError::Overlap {
                id,
                cidr,
                other,
                other_cidr,
            } => {
                let other = own(&other);
                BackendError::Invalid(overlap(
                    &shown(id),
                    &cidr,
                    other.as_ref().map(|other| (other, &other_cidr)),
                ))
            }
            BackendError::NameTaken {
                id,
                bridge,
                place,
                owner,
            } => BackendError::Other(name_taken(
                &shown(id),
                &bridge,
                &place,
                own(&owner).as_ref(),
            )),
            BackendError::Invalid(m) => BackendError::Invalid(unprefixed(m)),
            BackendError::Unavailable(m) => BackendError::Unavailable(unprefixed(m)),
            BackendError::Other(m) => BackendError::Other(unprefixed(m)),
        }
    }
}

/// The words of [`BackendError::Overlap`]; `other` is `None` when the caller may not see it.
fn overlap(id: &str, cidr: &IpNet, other: Option<(&String, &IpNet)>) -> String {
    match other {
        Some((other, other_cidr)) => format!(
            "network `{id}`: cidr `{cidr}` overlaps network `{other}` (cidr `{other_cidr}`); \
             pick a disjoint range or delete `{other}` first"
        ),
        None => format!(
            "network `{id}`: cidr `{cidr}` overlaps a network held by another guest; pick a \
             disjoint range"
        ),
    }
}

/// The words of [`BackendError::NameTaken`]; `owner` is `None` when the caller may not see it.
fn name_taken(id: &str, bridge: &str, place: &str, owner: Option<&String>) -> String {
    let owner = owner.map_or_else(
        || "another network".to_owned(),
        |owner| format!("network `{owner}` (its alias)"),
    );
    format!(
        "network `{id}`: bridge `{bridge}` in {place} belongs to {owner}; the two ids collide \
         in the name hash, so rename one object or use a shorter bridge-prefix"
    )
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
    if id.chars().any(crate::validation::escaped_in_messages) {
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
