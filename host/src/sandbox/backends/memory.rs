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
    pub(crate) fn with_state_file(path: impl Into<PathBuf>) -> Result<Self> {
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
    pub(crate) fn with_policy(mut self, policy: Policy) -> Self {
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
    use crate::sandbox::backends::conformance::spec;

    /// The suite every provider runs, each test on a fresh provider.
    mod conformance {
        use super::*;
        use crate::config::BackendConfig;
        use crate::sandbox::backends::conformance as scenario;
        use crate::sandbox::backends::from_config;

        #[tokio::test]
        async fn ensure_reports_the_network_and_get_and_list_agree() {
            scenario::ensure_reports_the_network_and_get_and_list_agree(&MemoryBackend::new())
                .await;
        }

        #[tokio::test]
        async fn ensure_again_changes_nothing() {
            scenario::ensure_again_changes_nothing(&MemoryBackend::new()).await;
        }

        #[tokio::test]
        async fn a_changed_gateway_or_prefix_is_applied_in_place() {
            scenario::a_changed_gateway_or_prefix_is_applied_in_place(&MemoryBackend::new()).await;
        }

        #[tokio::test]
        async fn delete_reports_whether_something_was_removed() {
            scenario::delete_reports_whether_something_was_removed(&MemoryBackend::new()).await;
        }

        #[tokio::test]
        async fn an_overlap_is_refused_naming_the_other_network() {
            scenario::an_overlap_is_refused_naming_the_other_network(&MemoryBackend::new()).await;
        }

        #[tokio::test]
        async fn an_invalid_spec_is_refused_and_changes_nothing() {
            scenario::an_invalid_spec_is_refused_and_changes_nothing(&MemoryBackend::new()).await;
        }

        #[tokio::test]
        async fn another_guests_network_appears_in_no_refusal_a_guest_sees() {
            scenario::another_guests_network_appears_in_no_refusal_a_guest_sees(
                &MemoryBackend::new(),
            )
            .await;
        }

        #[tokio::test]
        async fn each_policy_rule_refuses_with_its_own_words() {
            scenario::each_policy_rule_refuses_with_its_own_words(|allowed, api_server| {
                let config = BackendConfig::Memory {
                    state_file: None,
                    allowed_cidrs: Some(allowed),
                };
                from_config(&config, api_server).unwrap()
            })
            .await;
        }

        /// Over a state file, what memory keeps across processes.
        #[tokio::test]
        async fn a_new_instance_finds_the_networks_of_the_last() {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.json");
            scenario::a_new_instance_finds_the_networks_of_the_last(|| {
                MemoryBackend::with_state_file(&path).unwrap()
            })
            .await;
        }
    }

    #[tokio::test]
    async fn the_state_file_is_written_on_change_and_read_back() {
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
        first
            .ensure(&spec("ns/b", "fd00:1::/64", "fd00:1::1"))
            .await
            .unwrap();
        drop(first);

        let second = MemoryBackend::with_state_file(&path).unwrap();
        assert!(second.delete("ns/b").await.unwrap());
        drop(second);

        let third = MemoryBackend::with_state_file(&path).unwrap();
        assert_eq!(third.list().await.unwrap(), vec![a]);
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
