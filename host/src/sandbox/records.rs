//! Records of live reconciles, for replay offline (`reconciler-host reconcile --replay FILE`).
//!
//! A guest whose grant sets `record` (see [`RecordPolicy`]) has its reconciles recorded: the
//! request, the guest version's digest, the wall clock and random seed it was given, every host
//! call with its arguments and answer, and the result, in the offline runner's JSON shape. A
//! recorded reconcile runs in a fresh instance (a kept one would carry state the record lacks),
//! sees the wall clock stopped at its start and random numbers drawn from the seed. The ones
//! the policy keeps (failures, a sample) are written one file per reconcile into the guest's
//! directory under the host's record directory, oldest dropped beyond `maxBytes`; `/guests`
//! lists them. Objects of sensitive kinds (Secrets by default) are stored with their `data`
//! and `stringData` values redacted unless the grant opts in.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cluster::objects::Gvk;
use crate::config::RecordPolicy;
use crate::sandbox::capabilities::Pinned;
use crate::sandbox::capabilities::replay::RecordedCall;
use crate::sandbox::runtime::{LoadedGuest, Outcome, Request, Run};

/// What replaces each redacted value.
pub(crate) const REDACTED: &str = "<redacted>";

/// One recorded reconcile, as written to its file.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Record {
    pub guest: RecordedGuest,
    /// The primary kind (`group/version/Kind`) and the key (`namespace/name`).
    pub kind: String,
    pub key: String,
    pub request: RecordedRequest,
    /// The wall clock the guest saw (RFC 3339) and the seed of its random sources.
    #[serde(with = "humantime_serde")]
    pub clock: SystemTime,
    pub seed: u64,
    /// How the reconcile ended (the offline runner's `result`), and whether a write conflicted.
    pub result: Value,
    pub conflicted: bool,
    pub calls: Vec<RecordedCall>,
    /// Kinds whose data was redacted in this record, if any was.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub redacted: BTreeSet<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RecordedGuest {
    /// Its manifest name.
    pub name: String,
    /// `sha256:` of the component's bytes.
    pub digest: String,
    /// The file or module it was loaded from.
    pub source: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RecordedRequest {
    /// The object as the guest was given it, or null when it was gone.
    pub object: Value,
    pub deleting: bool,
    pub attempt: u32,
}

impl Record {
    pub(crate) fn read(path: &Path) -> Result<Self, RecordError> {
        let text = std::fs::read_to_string(path).map_err(|source| RecordError::Read {
            path: path.to_owned(),
            source,
        })?;
        serde_json::from_str(&text).map_err(|source| RecordError::NotARecord {
            path: path.to_owned(),
            source,
        })
    }

    /// The clock and seed to give the guest again.
    pub(crate) fn pinned(&self) -> Pinned {
        Pinned {
            clock: self.clock,
            seed: self.seed,
        }
    }
}

/// One guest version's recorder: decides which reconciles to record and writes what it keeps.
pub(crate) struct Recorder {
    policy: RecordPolicy,
    directory: PathBuf,
}

/// A reconcile being recorded: what the guest is given, and whether it is kept whatever its
/// outcome.
pub(crate) struct Plan {
    pub pinned: Pinned,
    sampled: bool,
}

impl Recorder {
    /// A recorder writing into `<root>/<guest name>/`, when the grant sets `record`.
    pub(crate) fn new(
        policy: Option<&RecordPolicy>,
        root: Option<&Path>,
        guest: &str,
    ) -> Option<Self> {
        let policy = policy?.clone();
        let Some(root) = root else {
            tracing::warn!(
                guest,
                "record is set but the host has no record directory (set recordDirectory, HOME or XDG_CACHE_HOME); nothing is recorded"
            );
            return None;
        };
        Some(Self {
            policy,
            directory: root.join(guest),
        })
    }

    /// Whether to record the next reconcile: always when failures are kept (which it is cannot
    /// be known before), else for the sampled fraction.
    pub(crate) fn plan(&self) -> Option<Plan> {
        let draw = u32::try_from(random_u64() >> 32).unwrap_or(u32::MAX);
        let sampled =
            self.policy.sample > 0.0 && f64::from(draw) / f64::from(u32::MAX) <= self.policy.sample;
        (sampled || self.policy.failures).then(|| Plan {
            pinned: Pinned {
                clock: SystemTime::now(),
                seed: random_u64(),
            },
            sampled,
        })
    }

    /// Writes the record of a finished reconcile if the policy keeps it, off the async
    /// workers; a failure to write is logged, never the reconcile's.
    pub(crate) fn keep(&self, plan: &Plan, guest: &LoadedGuest, request: &Request, run: &Run) {
        let failed = !matches!(run.outcome, Outcome::Ok { .. }) || run.conflicted;
        if !(plan.sampled || (failed && self.policy.failures)) {
            return;
        }
        let mut record = Record {
            guest: RecordedGuest {
                name: guest.manifest.name.clone(),
                digest: format!("sha256:{}", guest.hash),
                source: guest.file.display().to_string(),
            },
            kind: request.object_ref.kind.to_string(),
            key: match &request.object_ref.namespace {
                Some(ns) => format!("{ns}/{}", request.object_ref.name),
                None => request.object_ref.name.clone(),
            },
            request: RecordedRequest {
                object: request.object.as_deref().map_or(Value::Null, |o| {
                    serde_json::from_str(o).unwrap_or(Value::Null)
                }),
                deleting: request.deleting,
                attempt: request.attempt,
            },
            clock: plan.pinned.clock,
            seed: plan.pinned.seed,
            result: serde_json::to_value(&run.outcome).unwrap_or(Value::Null),
            conflicted: run.conflicted,
            calls: run.calls.iter().flatten().map(RecordedCall::from).collect(),
            redacted: BTreeSet::new(),
        };
        if !self.policy.include_sensitive {
            redact(&mut record, &self.policy.sensitive);
        }
        let directory = self.directory.clone();
        let max_bytes = self.policy.max_bytes;
        let outcome = run.outcome.result().as_str();
        tokio::task::spawn_blocking(
            move || match write(&directory, &record, outcome, max_bytes) {
                Ok(path) => {
                    tracing::info!(record = %path.display(), "reconcile recorded (replay it with `reconciler-host reconcile --replay`)");
                }
                Err(e) => {
                    tracing::warn!(directory = %directory.display(), "reconcile not recorded: {e}");
                }
            },
        );
    }
}

fn random_u64() -> u64 {
    let mut bytes = [0u8; 8];
    // The OS source never fails on Linux once booted; a zero seed would still replay.
    let _ = getrandom::fill(&mut bytes);
    u64::from_le_bytes(bytes)
}

/// Replaces the `data` and `stringData` values of every object of a `sensitive` kind in the
/// record (the request, arguments, answers) with [`REDACTED`], keeping the keys.
pub(crate) fn redact(record: &mut Record, sensitive: &BTreeSet<Gvk>) {
    let mut redacted = BTreeSet::new();
    let mut walk = |value: &mut Value| redact_value(value, sensitive, &mut redacted);
    walk(&mut record.request.object);
    for call in &mut record.calls {
        walk(&mut call.args);
        walk(&mut call.returned);
    }
    record.redacted = redacted;
}

/// The fields of a sensitive object whose values a record never keeps.
const SENSITIVE_FIELDS: [&str; 3] = ["data", "stringData", "binaryData"];

/// The annotation `kubectl apply` keeps the whole applied object in, as JSON text.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Whether an annotation's text is a JSON object with one of [`SENSITIVE_FIELDS`].
fn holds_sensitive_fields(value: &Value) -> bool {
    let Value::String(text) = value else {
        return false;
    };
    serde_json::from_str::<serde_json::Map<String, Value>>(text)
        .is_ok_and(|object| SENSITIVE_FIELDS.iter().any(|f| object.contains_key(*f)))
}

fn redact_value(value: &mut Value, sensitive: &BTreeSet<Gvk>, redacted: &mut BTreeSet<String>) {
    match value {
        Value::Array(items) => {
            for item in items {
                redact_value(item, sensitive, redacted);
            }
        }
        Value::Object(map) => {
            let kind = match (map.get("apiVersion"), map.get("kind")) {
                (Some(Value::String(api_version)), Some(Value::String(kind))) => {
                    let (group, version) =
                        api_version.rsplit_once('/').unwrap_or(("", api_version));
                    Some(Gvk::new(group, version, kind))
                }
                _ => None,
            };
            if let Some(kind) = kind.filter(|k| sensitive.contains(k)) {
                for field in SENSITIVE_FIELDS {
                    if let Some(Value::Object(data)) = map.get_mut(field) {
                        for v in data.values_mut() {
                            *v = Value::String(REDACTED.into());
                        }
                        redacted.insert(kind.to_string());
                    }
                }
                // Copies of the object kept in annotations (kubectl's last-applied
                // configuration, or any annotation holding an object with those fields) carry
                // the same values as text: the whole value goes.
                if let Some(Value::Object(annotations)) = map
                    .get_mut("metadata")
                    .and_then(|m| m.get_mut("annotations"))
                {
                    for (key, v) in annotations.iter_mut() {
                        if key == LAST_APPLIED || holds_sensitive_fields(v) {
                            *v = Value::String(REDACTED.into());
                            redacted.insert(kind.to_string());
                        }
                    }
                }
            }
            for v in map.values_mut() {
                redact_value(v, sensitive, redacted);
            }
        }
        _ => {}
    }
}

/// Writes `record` into `directory` (created) as `<nanoseconds>-<key>-<outcome>.json` through
/// a temporary file, then drops the oldest records until the directory holds at most
/// `max_bytes`. A record larger than that alone is not written.
fn write(
    directory: &Path,
    record: &Record,
    outcome: &str,
    max_bytes: u64,
) -> Result<PathBuf, RecordError> {
    let text = serde_json::to_vec_pretty(record).map_err(RecordError::Encode)?;
    if text.len() as u64 > max_bytes {
        return Err(RecordError::TooLarge {
            bytes: text.len(),
            max_bytes,
        });
    }
    std::fs::create_dir_all(directory)?;
    let nanos = record
        .clock
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let key: String = record
        .key
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let path = directory.join(format!("{nanos:020}-{key}-{outcome}.json"));
    let mut file = tempfile::NamedTempFile::new_in(directory)?;
    std::io::Write::write_all(&mut file, &text)?;
    file.persist(&path).map_err(|e| e.error)?;
    prune(directory, max_bytes)?;
    Ok(path)
}

/// Why a reconcile record was not read or written.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RecordError {
    #[error("cannot read record {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{} is not a reconcile record: {source}", path.display())]
    NotARecord {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot encode the record: {0}")]
    Encode(serde_json::Error),
    #[error("the record takes {bytes} bytes, more than record.maxBytes ({max_bytes})")]
    TooLarge { bytes: usize, max_bytes: u64 },
    #[error(transparent)]
    Write(#[from] std::io::Error),
}

/// Deletes the oldest records (by name, which starts with the time) beyond `max_bytes`.
fn prune(directory: &Path, max_bytes: u64) -> std::io::Result<()> {
    let mut files = listing(directory)?;
    let mut total: u64 = files.iter().map(|(_, bytes)| bytes).sum();
    files.sort();
    for (name, bytes) in files {
        if total <= max_bytes {
            break;
        }
        std::fs::remove_file(directory.join(&name))?;
        total -= bytes;
    }
    Ok(())
}

/// The records in `directory`, by name, with their sizes.
fn listing(directory: &Path) -> std::io::Result<Vec<(String, u64)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(directory)? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let json = Path::new(&name).extension().is_some_and(|e| e == "json");
        if json && !name.starts_with('.') {
            files.push((name, entry.metadata()?.len()));
        }
    }
    Ok(files)
}

/// A guest's records as `/guests` shows them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RecordsSummary {
    pub directory: PathBuf,
    pub count: usize,
    pub bytes: u64,
    /// The newest records' file names, newest first (at most 10).
    pub latest: Vec<String>,
}

/// The summary of `<root>/<guest>/` (empty when nothing was recorded yet).
pub(crate) fn summary(root: &Path, guest: &str) -> RecordsSummary {
    let directory = root.join(guest);
    let mut files = listing(&directory).unwrap_or_default();
    files.sort();
    RecordsSummary {
        count: files.len(),
        bytes: files.iter().map(|(_, bytes)| bytes).sum(),
        latest: files
            .iter()
            .rev()
            .take(10)
            .map(|(name, _)| name.clone())
            .collect(),
        directory,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn record(calls: Vec<RecordedCall>, object: Value) -> Record {
        Record {
            guest: RecordedGuest {
                name: "g".into(),
                digest: "sha256:00".into(),
                source: "g.wasm".into(),
            },
            kind: "test.reconciler.dev/v1/Widget".into(),
            key: "ns/w1".into(),
            request: RecordedRequest {
                object,
                deleting: false,
                attempt: 0,
            },
            clock: SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_234),
            seed: 7,
            result: json!({"ok": {"requeueAfterMs": null}}),
            conflicted: false,
            calls,
            redacted: BTreeSet::new(),
        }
    }

    fn secret() -> Value {
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
               "data": {"password": "aHVudGVyMg=="}, "stringData": {"token": "t"}})
    }

    #[test]
    fn secrets_are_redacted_wherever_they_appear_and_other_kinds_are_not() {
        let read = RecordedCall {
            interface: "lister".into(),
            function: "list".into(),
            args: json!({"kind": "v1/Secret"}),
            returned: json!({"ok": [secret(), {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}]}),
        };
        let mut r = record(vec![read], secret());
        redact(&mut r, &BTreeSet::from([Gvk::new("", "v1", "Secret")]));
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("aHVudGVyMg=="), "{text}");
        assert!(!text.contains("\"t\""), "{text}");
        assert_eq!(r.request.object["data"]["password"], REDACTED);
        assert_eq!(
            r.calls[0].returned["ok"][0]["stringData"]["token"],
            REDACTED
        );
        assert_eq!(r.calls[0].returned["ok"][1]["data"]["a"], "b");
        assert_eq!(r.redacted, BTreeSet::from(["v1/Secret".to_owned()]));
    }

    #[test]
    fn copies_in_annotations_are_redacted_too() {
        let applied = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"password": "aHVudGVyMg=="}});
        let mut live = secret();
        live["metadata"]["annotations"] = json!({
            LAST_APPLIED: applied.to_string(),
            "example.com/copy": json!({"stringData": {"token": "t0ps3cret"}}).to_string(),
            "example.com/owner": "team-a",
        });
        live["binaryData"] = json!({"key": "YmluYXJ5LXNlY3JldA=="});
        let mut r = record(Vec::new(), live);
        redact(&mut r, &BTreeSet::from([Gvk::new("", "v1", "Secret")]));
        let text = serde_json::to_string(&r).unwrap();
        for secret in ["aHVudGVyMg==", "t0ps3cret", "YmluYXJ5LXNlY3JldA=="] {
            assert!(!text.contains(secret), "{secret} left in {text}");
        }
        let annotations = &r.request.object["metadata"]["annotations"];
        assert_eq!(annotations[LAST_APPLIED], REDACTED);
        assert_eq!(
            annotations["example.com/owner"], "team-a",
            "others are kept"
        );
    }

    #[test]
    fn the_directory_keeps_the_newest_records_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let mut names = Vec::new();
        for i in 0..5u64 {
            let mut r = record(Vec::new(), json!({"i": i}));
            r.clock = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(i + 1);
            let size = serde_json::to_vec_pretty(&r).unwrap().len() as u64;
            // Room for three records.
            names.push(write(dir.path(), &r, "error", size * 3 + size / 2).unwrap());
        }
        let kept = summary(
            dir.path().parent().unwrap(),
            &dir.path().file_name().unwrap().to_string_lossy(),
        );
        assert_eq!(kept.count, 3, "{kept:?}");
        for (i, name) in names.iter().enumerate() {
            assert_eq!(name.exists(), i >= 2, "{}", name.display());
        }
        assert_eq!(
            kept.latest[0],
            names[4].file_name().unwrap().to_string_lossy()
        );
        let back = Record::read(&names[4]).unwrap();
        assert_eq!(back.request.object, json!({"i": 4}));
        assert_eq!(back.seed, 7);

        let too_large = write(dir.path(), &record(Vec::new(), json!({})), "error", 10);
        assert!(
            too_large
                .unwrap_err()
                .to_string()
                .contains("more than record.maxBytes")
        );
    }
}
