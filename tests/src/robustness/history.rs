//! What a robustness run records, and how it is read back from the raw files: the API server's
//! audit log (every write as the server saw it, with resourceVersions and who sent it), each
//! replica incarnation's JSON log (the guest's journal), the fault schedule as carried out, and
//! the objects' final state. [`History`] is saved as `history.json` beside the raw files, so the
//! checker runs offline on it (`robustness --check DIR`).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::SystemTime;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How the replicas share the work.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Two replicas, one leader (`--leader-elect`).
    Leader,
    /// Three replicas on the shard ring (`--shards auto`).
    Sharded,
}

impl Mode {
    pub fn parse(text: &str) -> Result<Self> {
        match text {
            "leader" => Ok(Self::Leader),
            "sharded" => Ok(Self::Sharded),
            other => anyhow::bail!("--mode {other:?}: use leader or sharded"),
        }
    }
}

/// One run, everything the checker reads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct History {
    pub meta: Meta,
    pub faults: Vec<FaultRecord>,
    pub incarnations: Vec<Incarnation>,
    pub reconciles: Vec<Reconcile>,
    pub writes: Vec<Write>,
    /// The Widgets at the end, after the harness waited for convergence.
    pub final_objects: Vec<FinalObject>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub seed: u64,
    pub mode: Mode,
    pub namespace: String,
    /// The election lease, or the ring's name (its leases are `<name>-member-<id>` and
    /// `<name>-shards`).
    pub lease_name: String,
    pub lease_duration_secs: u64,
    pub objects: usize,
    pub started: SystemTime,
    /// When the workload and the faults began (the initial objects had converged).
    pub faults_from: SystemTime,
    /// When the last fault ended (everything healed, every replica running).
    pub faults_over: SystemTime,
    /// When every object had converged, if it did within `convergence_bound_secs` of
    /// `faults_over`.
    pub converged_at: Option<SystemTime>,
    pub convergence_bound_secs: u64,
}

/// A fault as carried out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FaultRecord {
    /// Its place in the schedule.
    pub index: usize,
    pub kind: String,
    /// The replica it hit, if it hit one.
    pub target: Option<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    pub detail: String,
}

/// One life of one replica process: a restart is a new incarnation with the same identity.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Incarnation {
    pub replica: String,
    pub index: u32,
    /// Its log file, relative to the run directory.
    pub log: String,
    pub started: SystemTime,
    /// When SIGKILL returned, or when the harness stopped it at the end.
    pub ended: Option<SystemTime>,
    /// `SIGSTOP` to `SIGCONT`.
    pub pauses: Vec<(SystemTime, SystemTime)>,
    /// Resident memory when the faults began and at the end (bytes), when it lived that long.
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    /// How many times its informers relisted after a 410 Gone (a compaction's work).
    #[serde(default)]
    pub relists: u32,
}

impl Incarnation {
    /// An incarnation starting now, logging to `log`.
    pub fn new(replica: &str, index: u32, log: String) -> Self {
        Self {
            replica: replica.to_owned(),
            index,
            log,
            started: SystemTime::now(),
            ended: None,
            pauses: Vec::new(),
            rss_before: None,
            rss_after: None,
            relists: 0,
        }
    }

    /// The name the checker uses: `replica#index`.
    pub fn label(&self) -> String {
        format!("{}#{}", self.replica, self.index)
    }
}

/// One reconcile from a replica's journal.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Reconcile {
    /// `replica#incarnation`.
    pub by: String,
    pub key: String,
    pub begin: SystemTime,
    /// The journal's `end`, or the host's line saying the attempt failed (a trap, a deadline);
    /// `None`: neither came (killed, or cancelled at a handover).
    pub end: Option<SystemTime>,
    pub generation: Option<i64>,
    pub version: Option<String>,
    /// `ok`, `failed: …` (the guest's error), `trap: …` (the host's line), or `unfinished`.
    pub outcome: String,
    /// Where: `log file:line` of the begin.
    pub place: String,
}

/// Who sent a write, from its user agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Writer {
    /// `reconciler-host/VERSION (IDENTITY)`.
    Replica(String),
    /// The harness's workload (`robustness-workload`).
    Workload,
    /// The competing writer (`robustness-competitor`).
    Competitor,
    Other(String),
}

/// The user agents the harness's own clients send.
pub const WORKLOAD_AGENT: &str = "robustness-workload";
pub const COMPETITOR_AGENT: &str = "robustness-competitor";

impl Writer {
    pub fn from_user_agent(agent: &str) -> Self {
        if let Some(rest) = agent.strip_prefix("reconciler-host/")
            && let Some((_, identity)) = rest.split_once(" (")
            && let Some(identity) = identity.strip_suffix(')')
        {
            return Self::Replica(identity.to_owned());
        }
        match agent {
            WORKLOAD_AGENT => Self::Workload,
            COMPETITOR_AGENT => Self::Competitor,
            other => Self::Other(other.to_owned()),
        }
    }
}

/// One write as the API server recorded it (an audit event at stage `ResponseComplete`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Write {
    /// Line in `audit.log` (1-based).
    pub line: usize,
    pub received: SystemTime,
    pub completed: SystemTime,
    pub writer: Writer,
    pub verb: String,
    /// `widgets` or `leases`.
    pub resource: String,
    pub subresource: Option<String>,
    pub name: String,
    pub code: u16,
    /// The object the server answered with (successful writes), whose resourceVersion orders
    /// every write in etcd's one sequence.
    pub object: Option<Value>,
}

impl Write {
    pub fn succeeded(&self) -> bool {
        (200..300).contains(&self.code)
    }

    /// The response object's resourceVersion (etcd's revision of this write).
    pub fn revision(&self) -> Option<u64> {
        self.object.as_ref()?["metadata"]["resourceVersion"]
            .as_str()?
            .parse()
            .ok()
    }

    /// The object's uid; a delete that removed the object at once answers with a `Status`
    /// naming it in `details`.
    pub fn uid(&self) -> Option<&str> {
        let object = self.object.as_ref()?;
        object["metadata"]["uid"]
            .as_str()
            .or_else(|| object["details"]["uid"].as_str())
    }

    pub fn generation(&self) -> Option<i64> {
        self.object.as_ref()?["metadata"]["generation"].as_i64()
    }

    pub fn observed_generation(&self) -> Option<i64> {
        self.object.as_ref()?["status"]["observedGeneration"].as_i64()
    }

    /// `ns/name` of the object written.
    pub fn describe(&self) -> String {
        format!(
            "{} {}{} {} by {:?} (audit line {}, rv {}, code {})",
            self.verb,
            self.resource,
            self.subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            self.name,
            self.writer,
            self.line,
            self.revision()
                .map_or_else(|| "-".to_owned(), |r| r.to_string()),
            self.code,
        )
    }
}

/// A Widget at the end of the run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FinalObject {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    pub observed_generation: Option<i64>,
    pub deleting: bool,
}

/// Reads the audit log's write events for `namespace` (others are ignored).
pub fn read_audit(path: &Path, namespace: &str) -> Result<Vec<Write>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut writes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // A kube-apiserver killed mid-line leaves a torn last line: skipped, as it answered
        // nobody.
        let Ok(event) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        if event["stage"] != "ResponseComplete" {
            continue;
        }
        let object_ref = &event["objectRef"];
        if object_ref["namespace"] != namespace {
            continue;
        }
        let time = |field: &str| {
            event[field]
                .as_str()
                .and_then(|t| humantime::parse_rfc3339(t).ok())
        };
        let (Some(received), Some(completed)) =
            (time("requestReceivedTimestamp"), time("stageTimestamp"))
        else {
            continue;
        };
        let code = event["responseStatus"]["code"]
            .as_u64()
            .and_then(|c| u16::try_from(c).ok())
            .unwrap_or(0);
        let object = event
            .get("responseObject")
            .filter(|o| o.get("metadata").is_some())
            .cloned();
        writes.push(Write {
            line: i + 1,
            received,
            completed,
            writer: Writer::from_user_agent(event["userAgent"].as_str().unwrap_or_default()),
            verb: event["verb"].as_str().unwrap_or_default().to_owned(),
            resource: object_ref["resource"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            subresource: object_ref["subresource"].as_str().map(str::to_owned),
            name: object_ref["name"].as_str().unwrap_or_default().to_owned(),
            code,
            object,
        });
    }
    Ok(writes)
}

/// Reads one incarnation's JSON log into its reconciles: the guest's `journal begin`/`end`
/// lines (not a rollout's shadow runs, which change nothing), closed by the host's `reconcile failed` line when the guest trapped or ran out of
/// time (its journal then has no `end`), or by the host's `controller stopped` line (cancelled).
/// A begin with none of these is `unfinished` until the incarnation ended.
pub fn read_journal(path: &Path, incarnation: &Incarnation) -> Result<Vec<Reconcile>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let by = incarnation.label();
    let mut open: BTreeMap<String, Reconcile> = BTreeMap::new();
    let mut done = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let Ok(value) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let Some(at) = value["timestamp"]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
        else {
            continue;
        };
        let message = value["fields"]["message"].as_str().unwrap_or_default();
        // A rollout's shadow run writes nothing: its journal lines are no reconcile.
        if value["span"]["rollout"] == "shadow" {
            continue;
        }
        if value["target"] == "guest" {
            let mut words = message.split_whitespace();
            let (Some("journal"), Some(what), Some(key)) =
                (words.next(), words.next(), words.next())
            else {
                continue;
            };
            let field = |name: &str| {
                message
                    .split_whitespace()
                    .find_map(|w| w.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_owned)
            };
            match what {
                "begin" => {
                    let begun = Reconcile {
                        by: by.clone(),
                        key: key.to_owned(),
                        begin: at,
                        end: None,
                        generation: field("generation").and_then(|g| g.parse().ok()),
                        version: field("version"),
                        outcome: "unfinished".into(),
                        place: format!("{}:{}", incarnation.log, i + 1),
                    };
                    // A second begin of a key: the first was cancelled (one worker per key), no
                    // later than this; unless the other version began it, which a rollout must
                    // never let happen: left running, the `exclusive` check sees both at once.
                    let version = begun.version.clone();
                    if let Some(mut previous) = open.insert(key.to_owned(), begun) {
                        if previous.version == version {
                            previous.end = Some(at);
                            previous.outcome = "cancelled".into();
                        } else {
                            previous.outcome = format!(
                                "still running when version {} began",
                                version.as_deref().unwrap_or("?")
                            );
                        }
                        done.push(previous);
                    }
                }
                "end" => {
                    if let Some(mut r) = open.remove(key) {
                        r.end = Some(at);
                        r.outcome = message
                            .split_once(" failed: ")
                            .map_or_else(|| "ok".to_owned(), |(_, why)| format!("failed: {why}"));
                        done.push(r);
                    }
                }
                _ => {}
            }
        } else if message.starts_with("controller stopped") {
            // The host's controller ended (stopped, or aborted on a lost lease or a fence):
            // whatever it was running had ended by this line.
            for (_, mut r) in std::mem::take(&mut open) {
                r.end = Some(at);
                r.outcome = "cancelled".into();
                done.push(r);
            }
        } else if message.starts_with("reconcile failed") {
            // The host's line for an attempt that ended without the guest's `end`.
            let key = value["span"]["key"]
                .as_str()
                .or_else(|| {
                    value["spans"]
                        .as_array()?
                        .iter()
                        .rev()
                        .find_map(|s| s["key"].as_str())
                })
                .unwrap_or_default();
            if let Some(mut r) = open.remove(key) {
                r.end = Some(at);
                r.outcome = format!("trap: {message}");
                done.push(r);
            }
        }
    }
    done.extend(open.into_values());
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A rollout's shadow run logs the guest's journal too, inside a span that says so: its
    /// lines are no reconcile, while the same lines of the active version are.
    #[test]
    fn a_rollouts_shadow_runs_are_not_read_as_reconciles() {
        let line = |rollout: &str, what: &str, at: &str| {
            serde_json::json!({
                "timestamp": format!("2026-12-07T20:00:{at}Z"),
                "target": "guest",
                "fields": {"message": format!("journal {what} ns/w-1 generation=3 version=2")},
                "span": {"name": "reconcile", "key": "ns/w-1", "rollout": rollout},
            })
            .to_string()
        };
        let log = [
            line("old", "begin", "01"),
            line("old", "end", "02"),
            line("shadow", "begin", "03"),
            line("shadow", "end", "04"),
        ]
        .join("\n");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("replica-a.0.log");
        std::fs::write(&path, log).unwrap();
        let incarnation = Incarnation {
            replica: "a".into(),
            index: 0,
            log: "replica-a.0.log".into(),
            started: SystemTime::UNIX_EPOCH,
            ended: None,
            pauses: Vec::new(),
            rss_before: None,
            rss_after: None,
            relists: 0,
        };
        let reconciles = read_journal(&path, &incarnation).unwrap();
        assert_eq!(reconciles.len(), 1, "{reconciles:?}");
        assert_eq!(reconciles[0].outcome, "ok");

        // Version 1 still open when version 2 begins the same key: left running, not read as
        // cancelled, so the `exclusive` check sees both at once.
        let mut v1 = line("old", "begin", "05");
        v1 = v1.replace("version=2", "version=1");
        let log = [v1, line("new", "begin", "06"), line("new", "end", "07")].join("\n");
        std::fs::write(&path, log).unwrap();
        let reconciles = read_journal(&path, &incarnation).unwrap();
        let first = reconciles
            .iter()
            .find(|r| r.version.as_deref() == Some("1"))
            .unwrap();
        assert_eq!(
            (first.end, first.outcome.as_str()),
            (None, "still running when version 2 began")
        );
    }
}
