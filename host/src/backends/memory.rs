//! The in-process provider: networks are entries in a map, optionally mirrored to a JSON file.
//!
//! It exists so a guest can be run and tested without root, a kernel or a cluster
//! (`reconciler-host reconcile --backend-state state.json`), with the same validation, policy
//! and overlap rules as the Linux provider and the interface names that provider would choose.
//! It has no host addresses or routes of its own to keep clear of: what the Linux provider
//! reads from its namespace is the one rule it cannot apply.

use std::collections::BTreeMap;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use async_trait::async_trait;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::bridge_names::{DEFAULT_BRIDGE_PREFIX, bridge_name};
use super::contract::{BackendError, NetworkBackend, NetworkSpec, NetworkStatus, Result};
use super::policy::Policy;
use super::spec::check_overlap;

/// Networks held in memory, keyed by id.
///
/// Every call takes one short lock, which is also what serialises `ensure` (overlap check and
/// insert happen under the same lock). With a state file, each change rewrites the file
/// while the lock is held, so the file always matches the map; that is synchronous I/O on a
/// small file, acceptable for the offline runner this mode serves.
#[derive(Debug, Default)]
pub struct MemoryBackend {
    networks: Mutex<BTreeMap<String, NetworkStatus>>,
    state_file: Option<PathBuf>,
    policy: Policy,
}

/// On-disk shape of the state file. An object rather than a bare list, so fields can be added
/// later without breaking old files.
#[derive(Serialize, Deserialize)]
struct StateFile {
    networks: Vec<NetworkStatus>,
}

impl MemoryBackend {
    /// An empty provider that keeps nothing after the process ends.
    pub fn new() -> Self {
        Self::default()
    }

    /// A provider mirrored to `path`: loads it if it exists (a missing file is an empty
    /// state), and rewrites it after every successful `ensure` or `delete`.
    pub fn with_state_file(path: impl Into<PathBuf>) -> Result<Self> {
        let path = path.into();
        let networks = match std::fs::read(&path) {
            Ok(bytes) => parse_state(&path, &bytes)?,
            Err(err) if err.kind() == ErrorKind::NotFound => BTreeMap::new(),
            Err(err) => {
                return Err(BackendError::Unavailable(format!(
                    "cannot read backend state file {}: {err}",
                    path.display()
                )));
            }
        };
        Ok(Self {
            networks: Mutex::new(networks),
            state_file: Some(path),
            policy: Policy::default(),
        })
    }

    /// The same provider with `policy` (`allowed-cidrs`, reserved ranges) on top of the fixed
    /// rules. Networks already held (from a state file) are kept; the policy applies to
    /// every `ensure` from now on.
    #[must_use]
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// The state file, if this provider has one.
    pub fn state_file(&self) -> Option<&Path> {
        self.state_file.as_deref()
    }

    /// Writes the current state to the state file now (a no-op without one). Changes are
    /// already saved as they happen; this is for callers that want an explicit checkpoint.
    pub fn save(&self) -> Result<()> {
        let networks = self.networks.lock();
        self.persist(&networks)
    }

    fn persist(&self, networks: &BTreeMap<String, NetworkStatus>) -> Result<()> {
        let Some(path) = &self.state_file else {
            return Ok(());
        };
        let state = StateFile {
            networks: networks.values().cloned().collect(),
        };
        let mut json = serde_json::to_vec_pretty(&state)
            .map_err(|err| BackendError::Other(format!("cannot encode backend state: {err}")))?;
        json.push(b'\n');
        // Write beside the target and rename, so a crash mid-write never leaves a truncated
        // file that the next run would refuse to load.
        let mut tmp = path.clone().into_os_string();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        std::fs::write(&tmp, &json)
            .and_then(|()| std::fs::rename(&tmp, path))
            .map_err(|err| {
                BackendError::Unavailable(format!(
                    "cannot write backend state file {}: {err}",
                    path.display()
                ))
            })
    }
}

fn parse_state(path: &Path, bytes: &[u8]) -> Result<BTreeMap<String, NetworkStatus>> {
    let state: StateFile = serde_json::from_slice(bytes).map_err(|err| {
        BackendError::Other(format!(
            "backend state file {} is not valid ({err}); fix it or delete it to start empty",
            path.display()
        ))
    })?;
    Ok(state
        .networks
        .into_iter()
        .map(|status| (status.id.clone(), status))
        .collect())
}

#[async_trait]
impl NetworkBackend for MemoryBackend {
    fn provider(&self) -> &'static str {
        "memory"
    }

    async fn get(&self, id: &str) -> Result<Option<NetworkStatus>> {
        Ok(self.networks.lock().get(id).cloned())
    }

    async fn ensure(&self, spec: &NetworkSpec) -> Result<NetworkStatus> {
        let spec = self.policy.validate(spec)?;
        let mut networks = self.networks.lock();
        check_overlap(&spec, networks.values())?;
        let status = spec.status(bridge_name(DEFAULT_BRIDGE_PREFIX, &spec.id), true);
        if networks.get(&spec.id) != Some(&status) {
            let previous = networks.insert(spec.id.clone(), status.clone());
            if let Err(err) = self.persist(&networks) {
                // Keep memory and file in step: a change that could not be saved is undone.
                match previous {
                    Some(previous) => networks.insert(spec.id.clone(), previous),
                    None => networks.remove(&spec.id),
                };
                return Err(err);
            }
        }
        Ok(status)
    }

    async fn delete(&self, id: &str) -> Result<bool> {
        let mut networks = self.networks.lock();
        let Some(previous) = networks.remove(id) else {
            return Ok(false);
        };
        if let Err(err) = self.persist(&networks) {
            networks.insert(id.to_owned(), previous);
            return Err(err);
        }
        Ok(true)
    }

    async fn list(&self) -> Result<Vec<NetworkStatus>> {
        Ok(self.networks.lock().values().cloned().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::Reserved;

    fn spec(id: &str, cidr: &str, gateway: &str) -> NetworkSpec {
        NetworkSpec {
            id: id.into(),
            cidr: cidr.into(),
            gateway: gateway.into(),
        }
    }

    #[tokio::test]
    async fn ensure_is_idempotent_and_updates_in_place() {
        let backend = MemoryBackend::new();
        let first = backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert_eq!(first.cidr, "10.1.0.0/24");
        assert_eq!(first.gateway, "10.1.0.1");
        assert!(first.up);
        assert_eq!(first.interface_name, bridge_name("rh", "ns/a"));
        let again = backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert_eq!(first, again);
        assert_eq!(backend.list().await.unwrap(), vec![first]);

        let moved = backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.254"))
            .await
            .unwrap();
        assert_eq!(moved.gateway, "10.1.0.254");
        assert_eq!(backend.get("ns/a").await.unwrap(), Some(moved));
    }

    #[tokio::test]
    async fn overlap_refuses_the_later_network_and_keeps_the_earlier() {
        let backend = MemoryBackend::new();
        let a = backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        let err = backend
            .ensure(&spec("ns/b", "10.1.0.0/16", "10.1.0.1"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, BackendError::Overlap { other, other_cidr, .. }
                if other == "ns/a" && other_cidr.to_string() == "10.1.0.0/24"),
            "{err:?}"
        );
        assert_eq!(backend.get("ns/b").await.unwrap(), None, "not applied");
        assert_eq!(backend.list().await.unwrap(), vec![a]);
    }

    #[tokio::test]
    async fn invalid_spec_changes_nothing() {
        let backend = MemoryBackend::new();
        let err = backend
            .ensure(&spec("ns/a", "10.1.0.5/24", "10.1.0.1"))
            .await
            .unwrap_err();
        assert!(matches!(err, BackendError::Invalid(_)), "{err:?}");
        assert!(backend.list().await.unwrap().is_empty());
    }

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
    ];

    /// One spec per rule of the policy, refused through `ensure` with these exact words (the
    /// guest sees them as the `invalid` error), and nothing stored.
    #[tokio::test]
    async fn each_policy_rule_refuses_with_its_own_words() {
        let allowed = ["10.0.0.0/8", "fd00::/16"].map(|s| s.parse().unwrap());
        let policy = Policy::new(Some(allowed.to_vec()))
            .unwrap()
            .reserving([Reserved::api_server("10.96.0.1".parse().unwrap())]);
        let backend = MemoryBackend::new().with_policy(policy);
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
        backend
            .ensure(&spec("ns/a", "10.97.0.0/16", "10.97.0.1"))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn delete_reports_whether_something_was_removed() {
        let backend = MemoryBackend::new();
        assert!(!backend.delete("ns/a").await.unwrap());
        backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert!(backend.delete("ns/a").await.unwrap());
        assert!(!backend.delete("ns/a").await.unwrap());
        assert_eq!(backend.get("ns/a").await.unwrap(), None);
    }

    #[tokio::test]
    async fn state_file_round_trips_across_instances() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");

        let first = MemoryBackend::with_state_file(&path).unwrap();
        assert!(
            first.list().await.unwrap().is_empty(),
            "missing file = empty"
        );
        assert!(!path.exists(), "nothing written before a change");
        let a = first
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        let b = first
            .ensure(&spec("ns/b", "fd00:1::/64", "fd00:1::1"))
            .await
            .unwrap();
        drop(first);

        let second = MemoryBackend::with_state_file(&path).unwrap();
        assert_eq!(second.list().await.unwrap(), vec![a.clone(), b]);
        assert!(second.delete("ns/b").await.unwrap());
        drop(second);

        let third = MemoryBackend::with_state_file(&path).unwrap();
        assert_eq!(third.list().await.unwrap(), vec![a]);
        // Overlap is checked against loaded state too.
        assert!(
            third
                .ensure(&spec("ns/c", "10.0.0.0/8", "10.0.0.1"))
                .await
                .is_err()
        );
        third.save().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let json: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(json["networks"][0]["id"], "ns/a");
        assert_eq!(
            json["networks"][0]["interface_name"],
            bridge_name("rh", "ns/a")
        );
    }

    #[test]
    fn corrupt_state_file_is_refused_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        std::fs::write(&path, "{not json").unwrap();
        let err = MemoryBackend::with_state_file(&path).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("state.json") && msg.contains("delete it"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn unwritable_state_file_fails_the_change_and_rolls_it_back() {
        let dir = tempfile::tempdir().unwrap();
        // A directory where the file should be: the rename fails.
        let path = dir.path().join("state.json");
        std::fs::create_dir(&path).unwrap();
        let backend = MemoryBackend::with_state_file(&path);
        // Reading a directory fails on Linux with EISDIR: reported as Unavailable.
        let err = backend.unwrap_err();
        assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");

        let missing_dir = dir.path().join("no-such-dir").join("state.json");
        let backend = MemoryBackend::with_state_file(&missing_dir).unwrap();
        let err = backend
            .ensure(&spec("ns/a", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap_err();
        assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
        assert!(backend.list().await.unwrap().is_empty(), "rolled back");
    }
}
