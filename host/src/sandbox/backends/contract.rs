//! The contract every provider keeps: what a guest asks for and gets back, how a provider
//! refuses, and the provider trait itself.

use async_trait::async_trait;
use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// What a guest wants: the WIT `network-spec` record.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkSpec {
    /// Stable for the object's lifetime, e.g. `namespace/name`.
    pub(crate) id: String,
    /// IPv4 or IPv6 prefix in canonical network form, e.g. `10.10.0.0/24`.
    pub(crate) cidr: String,
    /// An address inside `cidr`, assigned to the network's interface.
    pub(crate) gateway: String,
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
pub(crate) type Result<T, E = BackendError> = std::result::Result<T, E>;

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
