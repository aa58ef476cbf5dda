//! The offline checker: reads a [`History`] and names every violation and its place in the
//! history. It judges by the API server's record (the audit log, ordered by resourceVersion,
//! which is etcd's one sequence of every write) wherever a property is about what was written,
//! and by the guests' journals where it is about what ran.
//!
//! | check        | the property                                                                |
//! |--------------|-----------------------------------------------------------------------------|
//! | `exclusive`  | no key reconciled by two replica incarnations at once                        |
//! | `fenced`     | no write by a replica after the record says another may do its work          |
//! | `converged`  | after the last fault, every object's status shows its generation, every      |
//! |              | deletion completed, within the stated bound                                  |
//! | `lost`       | every generation an object reached was reconciled, or superseded by a newer  |
//! |              | one that was, or by the object's deletion (which completed)                  |
//! | `memory`     | each replica that lived through the faults ends within a bound of its start  |

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::Serialize;

use super::history::{History, Mode, Reconcile, Write, Writer};
use reconciler_host::cluster::shard_ranges::{SlotSet, slot_of};

/// Memory at the end may be this factor of memory before the faults…
pub const MEMORY_FACTOR: f64 = 1.5;
/// …or this much more, whichever allows more (a small heap grows by fixed amounts).
pub const MEMORY_SLACK: u64 = 48 << 20;

#[derive(Debug, Clone, Serialize)]
pub struct Violation {
    pub check: &'static str,
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{}] {}", self.check, self.message)
    }
}

/// What a run shows, violations and figures.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub seed: u64,
    pub mode: Mode,
    pub faults: usize,
    pub faults_by_kind: BTreeMap<String, usize>,
    pub reconciles: usize,
    pub traps: usize,
    /// Replica writes the API server refused with 409.
    pub conflicts: usize,
    /// Informer relists after a 410 Gone, over every replica.
    pub relists: u32,
    pub writes_by_replicas: usize,
    /// The longest time, after a fault ended, until every change made before its end was
    /// reconciled (milliseconds), and which fault.
    pub longest_convergence_ms: u64,
    pub longest_convergence_after: Option<String>,
    /// The longest any workload change waited until a replica reported its generation or a
    /// newer one (milliseconds), faults or not.
    pub longest_wait_ms: u64,
    /// From the end of the last fault to every object converged (milliseconds).
    pub final_convergence_ms: Option<u64>,
    pub violations: Vec<Violation>,
}

/// Runs every check.
pub fn check(history: &History) -> Report {
    let mut violations = Vec::new();
    violations.extend(exclusive(history));
    violations.extend(fenced(history));
    violations.extend(converged(history));
    violations.extend(lost(history));
    violations.extend(memory(history));
    let (longest, after) = longest_convergence(history);
    let mut faults_by_kind = BTreeMap::new();
    for f in &history.faults {
        *faults_by_kind.entry(f.kind.clone()).or_insert(0) += 1;
    }
    let replica_writes = || {
        history
            .writes
            .iter()
            .filter(|w| w.resource == "widgets" && matches!(w.writer, Writer::Replica(_)))
    };
    Report {
        seed: history.meta.seed,
        mode: history.meta.mode,
        faults: history.faults.len(),
        faults_by_kind,
        reconciles: history.reconciles.len(),
        traps: history
            .reconciles
            .iter()
            .filter(|r| r.outcome.starts_with("trap"))
            .count(),
        conflicts: replica_writes().filter(|w| w.code == 409).count(),
        relists: history.incarnations.iter().map(|i| i.relists).sum(),
        writes_by_replicas: replica_writes().filter(|w| w.succeeded()).count(),
        longest_convergence_ms: millis(longest),
        longest_wait_ms: millis(longest_wait(history)),
        longest_convergence_after: after,
        final_convergence_ms: history.meta.converged_at.map(|at| {
            millis(
                at.duration_since(history.meta.faults_over)
                    .unwrap_or_default(),
            )
        }),
        violations,
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// The successful writes in the order the API server completed them (its audit log's order).
fn succeeded(history: &History) -> impl Iterator<Item = &Write> {
    history.writes.iter().filter(|w| w.succeeded())
}

// ---------------------------------------------------------------------------------------------
// exclusive

/// The time a reconcile could act: from its begin to its end (or its incarnation's end), cut at
/// the first pause of its incarnation when that incarnation wrote nothing to the key after the
/// pause until the reconcile ended — a stopped process does nothing, and one resumed after its
/// lease ran out is fenced (the `fenced` check judges its writes). The harness notes a pause
/// once `kill -STOP` returned, and a loaded machine delivers SIGSTOP to every thread a little
/// later: a reconcile that began within [`STOP_DELIVERY`] after the noted stop began before the
/// process stopped (seed 1326 logged one 1.5 ms after) and is cut at its begin.
fn active_span(history: &History, r: &Reconcile) -> (SystemTime, SystemTime) {
    let incarnation = history.incarnations.iter().find(|i| i.label() == r.by);
    let end = r
        .end
        .or_else(|| incarnation.and_then(|i| i.ended))
        .unwrap_or(SystemTime::UNIX_EPOCH + Duration::from_secs(u64::MAX / 4));
    let Some(incarnation) = incarnation else {
        return (r.begin, end);
    };
    let replica = &incarnation.replica;
    let name = r.key.rsplit('/').next().unwrap_or_default();
    for (stopped, resumed) in &incarnation.pauses {
        if *stopped + STOP_DELIVERY < r.begin || *stopped >= end {
            continue;
        }
        let wrote_after = history.writes.iter().any(|w| {
            w.succeeded()
                && w.resource == "widgets"
                && w.name == name
                && w.writer == Writer::Replica(replica.clone())
                && w.received >= *resumed
                && w.received <= end
        });
        if !wrote_after {
            return (r.begin, (*stopped).max(r.begin));
        }
    }
    (r.begin, end)
}

/// How long after `kill -STOP` returns a stopped process may still be seen acting.
const STOP_DELIVERY: Duration = Duration::from_millis(100);

pub fn exclusive(history: &History) -> Vec<Violation> {
    let mut by_key: BTreeMap<&str, Vec<(&Reconcile, SystemTime, SystemTime)>> = BTreeMap::new();
    for r in &history.reconciles {
        let (from, to) = active_span(history, r);
        by_key.entry(&r.key).or_default().push((r, from, to));
    }
    let mut found = Vec::new();
    for (key, spans) in by_key {
        for (i, (a, a_from, a_to)) in spans.iter().enumerate() {
            for (b, b_from, b_to) in &spans[i + 1..] {
                // Two replicas, or two versions of the guest in one (a rollout's old and new).
                let two = a.by != b.by || a.version != b.version;
                if two && a_from < b_to && b_from < a_to {
                    found.push(Violation {
                        check: "exclusive",
                        message: format!(
                            "{key} reconciled by {} ({} from {}, {}) and {} ({} from {}, {}) at once",
                            a.by,
                            a.place,
                            time(*a_from),
                            a.outcome,
                            b.by,
                            b.place,
                            time(*b_from),
                            b.outcome
                        ),
                    });
                }
            }
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// fenced

/// Who may write, as the leases written so far say.
#[derive(Default)]
struct Entitlement {
    /// Leader mode: the election lease's holder.
    holder: Option<String>,
    holder_since: Option<usize>,
    /// Sharded: member identity → its member lease's uid (absent once deleted).
    members: HashMap<String, String>,
    /// Sharded: member lease uid → (identity, slots), from the assignment lease.
    slots: HashMap<String, (String, SlotSet)>,
    assignment_line: Option<usize>,
}

impl Entitlement {
    fn apply(&mut self, w: &Write, mode: Mode, lease_name: &str) {
        let spec = w.object.as_ref().map(|o| &o["spec"]);
        match mode {
            Mode::Leader if w.name == lease_name => {
                self.holder = spec
                    .and_then(|s| s["holderIdentity"].as_str())
                    .filter(|h| !h.is_empty())
                    .map(str::to_owned);
                self.holder_since = Some(w.line);
            }
            Mode::Sharded => {
                let member_prefix = format!("{lease_name}-member-");
                if let Some(identity) = w.name.strip_prefix(&member_prefix) {
                    if w.verb == "delete" {
                        self.members.remove(identity);
                    } else if let Some(uid) = w.uid() {
                        self.members.insert(identity.to_owned(), uid.to_owned());
                    }
                } else if w.name == format!("{lease_name}-shards") {
                    let text = w.object.as_ref().and_then(|o| {
                        o["metadata"]["annotations"]["reconciler.dev/slots"].as_str()
                    });
                    self.slots.clear();
                    if let Some(holders) = text
                        .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
                        .and_then(|v| v["holders"].as_array().cloned())
                    {
                        for h in holders {
                            let (Some(identity), Some(lease), Some(slots)) = (
                                h["identity"].as_str(),
                                h["lease"].as_str(),
                                h["slots"].as_str(),
                            ) else {
                                continue;
                            };
                            if let Ok(slots) = SlotSet::from_text(slots) {
                                self.slots
                                    .insert(lease.to_owned(), (identity.to_owned(), slots));
                            }
                        }
                    }
                    self.assignment_line = Some(w.line);
                }
            }
            Mode::Leader => {}
        }
    }

    /// Why `replica` may not write an object with this uid now, if it may not.
    fn refuses(&self, mode: Mode, replica: &str, uid: Option<&str>) -> Option<String> {
        match mode {
            Mode::Leader => match &self.holder {
                Some(h) if h == replica => None,
                Some(h) => Some(format!(
                    "the lease was held by {h} (since audit line {})",
                    self.holder_since.unwrap_or_default()
                )),
                None => Some("the lease was held by nobody".into()),
            },
            Mode::Sharded => {
                let Some(lease) = self.members.get(replica) else {
                    return Some(format!("{replica} had no member lease (deleted as stale)"));
                };
                let uid = uid?;
                let slot = slot_of(uid);
                match self.slots.get(lease) {
                    Some((_, slots)) if slots.contains(slot) => None,
                    _ => Some(format!(
                        "the assignment (audit line {}) did not give slot {slot} to {replica}'s member lease {lease}",
                        self.assignment_line.unwrap_or_default()
                    )),
                }
            }
        }
    }
}

/// Judges each replica write by the leases as they stood when the API server *received* it:
/// every lease write *completed* before that moment counts. A takeover completed before a write
/// was received certainly came first; one still in flight when the write arrived is given the
/// benefit of the doubt. (A write's answer carries no revision of its own when it changed
/// nothing, so resourceVersions cannot order every write.)
pub fn fenced(history: &History) -> Vec<Violation> {
    let mode = history.meta.mode;
    let mut leases: Vec<&Write> = succeeded(history)
        .filter(|w| w.resource == "leases")
        .collect();
    leases.sort_by_key(|w| w.completed);
    let mut writes: Vec<(&str, &Write)> = succeeded(history)
        .filter(|w| w.resource == "widgets")
        .filter_map(|w| match &w.writer {
            Writer::Replica(r) => Some((r.as_str(), w)),
            _ => None,
        })
        .collect();
    writes.sort_by_key(|(_, w)| w.received);
    let mut entitled = Entitlement::default();
    let mut next = leases.iter().peekable();
    let mut found = Vec::new();
    for (replica, w) in writes {
        while let Some(lease) = next.next_if(|l| l.completed < w.received) {
            entitled.apply(lease, mode, &history.meta.lease_name);
        }
        if let Some(why) = entitled.refuses(mode, replica, w.uid()) {
            found.push(Violation {
                check: "fenced",
                message: format!(
                    "{} was received at {} although {why}",
                    w.describe(),
                    time(w.received)
                ),
            });
        }
    }
    found
}

// ---------------------------------------------------------------------------------------------
// converged, lost

pub fn converged(history: &History) -> Vec<Violation> {
    let mut found = Vec::new();
    if history.meta.converged_at.is_none() {
        found.push(Violation {
            check: "converged",
            message: format!(
                "the objects had not converged {} s after the last fault ended ({})",
                history.meta.convergence_bound_secs,
                time(history.meta.faults_over)
            ),
        });
    }
    for o in &history.final_objects {
        if o.deleting {
            found.push(Violation {
                check: "converged",
                message: format!(
                    "Widget {} (uid {}) is still being deleted at the end: its finalizer was never released",
                    o.name, o.uid
                ),
            });
        } else if o.observed_generation != Some(o.generation) {
            found.push(Violation {
                check: "converged",
                message: format!(
                    "Widget {} (uid {}) ends at generation {} with status.observedGeneration {:?}",
                    o.name, o.uid, o.generation, o.observed_generation
                ),
            });
        }
    }
    found
}

/// Per uid, in etcd order: the generations the workload made, the generations replicas
/// reported, and when the object was deleted and when it went.
#[derive(Default)]
struct Life<'a> {
    name: String,
    /// The generations the workload's writes made.
    changes: Vec<(i64, &'a Write)>,
    /// The generations replicas reported in `status.observedGeneration`, and when.
    observed: Vec<(i64, SystemTime)>,
    deleted: Option<&'a Write>,
    /// A replica's write after the delete that released the last finalizer.
    gone: Option<SystemTime>,
}

/// The server answered `w` with an object whose deletion was requested.
fn deletion_requested(w: &Write) -> bool {
    w.object
        .as_ref()
        .is_some_and(|o| !o["metadata"]["deletionTimestamp"].is_null())
}

fn lives(history: &History) -> BTreeMap<String, Life<'_>> {
    let mut lives: BTreeMap<String, Life<'_>> = BTreeMap::new();
    for w in succeeded(history) {
        if w.resource != "widgets" {
            continue;
        }
        let Some(uid) = w.uid() else { continue };
        let life = lives.entry(uid.to_owned()).or_default();
        life.name.clone_from(&w.name);
        // Only the workload deletes Widgets. Its delete's own audit event can be missing (a
        // kube-apiserver SIGKILLed after committing the write and before logging it), but the
        // server's later answers then show `deletionTimestamp`: the first such answer stands
        // for the delete, which supersedes every change before it. Seed 1010 of the sharded
        // campaign named a false loss before this.
        if life.deleted.is_none() && w.verb != "delete" && deletion_requested(w) {
            life.deleted = Some(w);
        }
        match (&w.writer, w.subresource.as_deref(), w.verb.as_str()) {
            (Writer::Workload, None, "delete") => life.deleted = Some(w),
            (Writer::Workload, None, _) => {
                if let Some(g) = w.generation() {
                    life.changes.push((g, w));
                }
            }
            (Writer::Replica(_), Some("status"), _) => {
                if let Some(g) = w.observed_generation() {
                    life.observed.push((g, w.completed));
                }
            }
            (Writer::Replica(_), None, _) => {
                let finalizers = w.object.as_ref().and_then(|o| {
                    o["metadata"]["finalizers"]
                        .as_array()
                        .map(std::vec::Vec::len)
                });
                if life.deleted.is_some() && finalizers.unwrap_or(0) == 0 {
                    life.gone = Some(w.completed);
                }
            }
            _ => {}
        }
    }
    lives
}

pub fn lost(history: &History) -> Vec<Violation> {
    let finals: BTreeSet<&str> = history
        .final_objects
        .iter()
        .map(|o| o.uid.as_str())
        .collect();
    let mut found = Vec::new();
    for (uid, life) in lives(history) {
        if let Some(deletion) = life.deleted {
            if finals.contains(uid.as_str()) {
                found.push(Violation {
                    check: "lost",
                    message: format!(
                        "Widget {} (uid {uid}) was deleted ({}) and is still there at the end",
                        life.name,
                        deletion.describe()
                    ),
                });
            }
            // Every change before the delete is superseded by it.
            continue;
        }
        // A status reporting generation g or newer was written by a reconcile that read the
        // object at g or newer: no ordering of the writes is needed.
        for (generation, change) in &life.changes {
            let seen = life.observed.iter().any(|(og, _)| og >= generation);
            if !seen {
                found.push(Violation {
                    check: "lost",
                    message: format!(
                        "Widget {} (uid {uid}) reached generation {generation} ({}) and no replica reported it or a newer one",
                        life.name,
                        change.describe()
                    ),
                });
            }
        }
    }
    found
}

/// For each fault: how long after it ended until every change made before its end was
/// reconciled (or the deleted object gone). The longest, and after which fault.
fn longest_convergence(history: &History) -> (Duration, Option<String>) {
    let lives = lives(history);
    let mut longest = (Duration::ZERO, None);
    for fault in &history.faults {
        let mut worst = Duration::ZERO;
        for life in lives.values() {
            let done_at = if let Some(deletion) = life.deleted {
                if deletion.completed > fault.end {
                    continue;
                }
                life.gone
            } else {
                let Some((generation, _)) = life
                    .changes
                    .iter()
                    .rev()
                    .find(|(_, c)| c.completed <= fault.end)
                else {
                    continue;
                };
                life.observed
                    .iter()
                    .find(|(og, _)| og >= generation)
                    .map(|(_, at)| *at)
            };
            if let Some(at) = done_at
                && let Ok(after) = at.duration_since(fault.end)
            {
                worst = worst.max(after);
            }
        }
        if worst > longest.0 {
            longest = (
                worst,
                Some(format!(
                    "fault {} ({}{})",
                    fault.index,
                    fault.kind,
                    fault
                        .target
                        .as_deref()
                        .map(|t| format!(" on {t}"))
                        .unwrap_or_default()
                )),
            );
        }
    }
    longest
}

/// The longest a change waited for a replica to report it (or a newer generation); changes of
/// objects deleted before any report are left out (the deletion superseded them).
fn longest_wait(history: &History) -> Duration {
    let mut longest = Duration::ZERO;
    for life in lives(history).values() {
        for (generation, change) in &life.changes {
            if let Some((_, at)) = life.observed.iter().find(|(og, _)| og >= generation)
                && let Ok(waited) = at.duration_since(change.completed)
            {
                longest = longest.max(waited);
            }
        }
    }
    longest
}

// ---------------------------------------------------------------------------------------------
// memory

/// Per replica: its resident memory when the faults began (first incarnation) and at the end
/// (last incarnation; a replica restarted meanwhile is a new process, whose memory must still be
/// within the bound of the one it replaced).
pub fn memory(history: &History) -> Vec<Violation> {
    let mut by_replica: BTreeMap<&str, (Option<u64>, Option<u64>)> = BTreeMap::new();
    for i in &history.incarnations {
        let entry = by_replica.entry(&i.replica).or_default();
        entry.0 = entry.0.or(i.rss_before);
        entry.1 = i.rss_after.or(entry.1);
    }
    let mut found = Vec::new();
    for (replica, (before, after)) in by_replica {
        let (Some(before), Some(after)) = (before, after) else {
            continue;
        };
        if after > memory_bound(before) {
            found.push(Violation {
                check: "memory",
                message: format!(
                    "replica {replica} used {} MiB before the faults and {} MiB at the end (bound {} MiB)",
                    before >> 20,
                    after >> 20,
                    memory_bound(before) >> 20
                ),
            });
        }
    }
    found
}

/// The most memory a replica may end with: [`MEMORY_FACTOR`] times, or [`MEMORY_SLACK`] more
/// than, what it used before the faults.
pub fn memory_bound(before: u64) -> u64 {
    // f64 is exact for any resident set below 2^53 bytes.
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let scaled = (before as f64 * MEMORY_FACTOR) as u64;
    scaled.max(before + MEMORY_SLACK)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::robustness::history::{FaultRecord, FinalObject, Incarnation, Meta};

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn history(mode: Mode) -> History {
        History {
            meta: Meta {
                seed: 1,
                mode,
                namespace: "robustness".into(),
                lease_name: "robustness".into(),
                lease_duration_secs: 6,
                objects: 1,
                started: at(0),
                faults_from: at(1),
                faults_over: at(50),
                converged_at: Some(at(55)),
                convergence_bound_secs: 120,
            },
            faults: Vec::new(),
            incarnations: ["a", "b"]
                .map(|r| Incarnation {
                    replica: r.into(),
                    index: 0,
                    log: format!("replica-{r}.0.log"),
                    started: at(0),
                    ended: Some(at(100)),
                    pauses: Vec::new(),
                    rss_before: Some(40 << 20),
                    rss_after: Some(42 << 20),
                    relists: 0,
                })
                .to_vec(),
            reconciles: Vec::new(),
            writes: Vec::new(),
            final_objects: Vec::new(),
        }
    }

    fn reconcile(by: &str, key: &str, from: u64, to: u64) -> Reconcile {
        Reconcile {
            by: by.into(),
            key: key.into(),
            begin: at(from),
            end: Some(at(to)),
            generation: Some(1),
            version: Some("1".into()),
            outcome: "ok".into(),
            place: format!("{by}.log:1"),
        }
    }

    /// A write received at `secs` and completed a moment later.
    fn write(
        writer: Writer,
        verb: &str,
        resource: &str,
        name: &str,
        secs: u64,
        object: Value,
    ) -> Write {
        Write {
            line: usize::try_from(secs).unwrap(),
            received: at(secs),
            completed: at(secs) + Duration::from_millis(5),
            writer,
            verb: verb.into(),
            resource: resource.into(),
            subresource: None,
            name: name.into(),
            code: 200,
            object: Some(object),
        }
    }

    fn lease(holder: &str, secs: u64) -> Write {
        write(
            Writer::Replica(holder.into()),
            "update",
            "leases",
            "robustness",
            secs,
            json!({"metadata": {"uid": "lease"}, "spec": {"holderIdentity": holder}}),
        )
    }

    fn status(by: &str, uid: &str, observed: i64, secs: u64) -> Write {
        Write {
            subresource: Some("status".into()),
            ..write(
                Writer::Replica(by.into()),
                "patch",
                "widgets",
                "w-1",
                secs,
                json!({"metadata": {"uid": uid, "generation": observed}, "status": {"observedGeneration": observed}}),
            )
        }
    }

    fn spec_change(uid: &str, generation: i64, secs: u64) -> Write {
        write(
            Writer::Workload,
            "patch",
            "widgets",
            "w-1",
            secs,
            json!({"metadata": {"uid": uid, "generation": generation}}),
        )
    }

    fn checks(violations: &[Violation]) -> Vec<&'static str> {
        violations.iter().map(|v| v.check).collect()
    }

    #[test]
    fn overlapping_reconciles_of_one_key_on_two_replicas_are_named() {
        let mut h = history(Mode::Leader);
        h.reconciles = vec![
            reconcile("a#0", "ns/w-1", 10, 12),
            reconcile("b#0", "ns/w-1", 11, 13),
            // Back to back is no overlap; another key is no overlap.
            reconcile("b#0", "ns/w-2", 10, 12),
            reconcile("a#0", "ns/w-3", 10, 12),
            reconcile("b#0", "ns/w-3", 12, 14),
        ];
        let found = exclusive(&h);
        assert_eq!(checks(&found), ["exclusive"]);
        assert!(found[0].message.contains("ns/w-1"), "{}", found[0]);
        assert!(found[0].message.contains("a#0") && found[0].message.contains("b#0"));
    }

    /// A rollout's two versions on one key in one replica: a violation when they overlap,
    /// none when one follows the other.
    #[test]
    fn two_versions_reconciling_one_key_at_once_in_one_replica_are_named() {
        let mut h = history(Mode::Leader);
        let by_v2 = |key: &str, from, to| Reconcile {
            version: Some("2".into()),
            ..reconcile("a#0", key, from, to)
        };
        h.reconciles = vec![
            reconcile("a#0", "ns/w-1", 10, 12),
            by_v2("ns/w-1", 11, 13),
            reconcile("a#0", "ns/w-2", 10, 12),
            by_v2("ns/w-2", 12, 14),
        ];
        let found = exclusive(&h);
        assert_eq!(checks(&found), ["exclusive"]);
        assert!(found[0].message.contains("ns/w-1"), "{}", found[0]);
    }

    #[test]
    fn a_reconcile_cut_by_a_pause_counts_until_the_pause_unless_it_wrote_after_it() {
        let mut h = history(Mode::Leader);
        h.incarnations[0].pauses = vec![(at(11), at(30))];
        h.reconciles = vec![
            reconcile("a#0", "ns/w-1", 10, 31),
            reconcile("b#0", "ns/w-1", 20, 21),
        ];
        assert!(exclusive(&h).is_empty(), "stopped, a did nothing");
        // One that a began just after the stop was noted (the signal still on its way) is cut
        // at its begin; one begun later than the signal's delivery is not.
        let stopped = at(11);
        h.reconciles[0] = reconcile("a#0", "ns/w-1", 10, 31);
        h.reconciles[0].begin = stopped + Duration::from_millis(2);
        assert!(exclusive(&h).is_empty(), "began as the stop was delivered");
        h.reconciles[0].begin = stopped + Duration::from_secs(1);
        assert_eq!(checks(&exclusive(&h)), ["exclusive"], "began while it ran");
        h.reconciles[0] = reconcile("a#0", "ns/w-1", 10, 31);
        // But a write from a after it resumed means it acted during b's time.
        h.writes.push(status("a", "u1", 1, 30));
        assert_eq!(checks(&exclusive(&h)), ["exclusive"]);
    }

    #[test]
    fn a_write_after_another_replica_took_the_lease_is_caught_by_the_servers_record() {
        let mut h = history(Mode::Leader);
        h.writes = vec![
            lease("a", 1),
            status("a", "u1", 1, 2),
            lease("b", 10),
            status("b", "u1", 1, 11),
            status("a", "u1", 1, 12),
        ];
        let found = fenced(&h);
        assert_eq!(checks(&found), ["fenced"]);
        assert!(
            found[0].message.contains("held by b") && found[0].message.contains("Replica(\"a\")"),
            "{}",
            found[0]
        );
        // A write received while the takeover was still in flight gets the benefit of the doubt.
        h.writes.pop();
        let mut racing = status("a", "u1", 1, 10);
        racing.received = at(10) + Duration::from_millis(1);
        h.writes.push(racing);
        assert!(fenced(&h).is_empty());
    }

    #[test]
    fn sharded_writes_need_the_member_lease_and_the_slot() {
        let mut h = history(Mode::Sharded);
        let uid = "u1";
        let slot = slot_of(uid);
        let mut slots = SlotSet::empty();
        slots.insert(slot);
        let member = |who: &str, secs| {
            write(
                Writer::Replica(who.into()),
                "update",
                "leases",
                &format!("robustness-member-{who}"),
                secs,
                json!({"metadata": {"uid": format!("lease-{who}")}, "spec": {"holderIdentity": who}}),
            )
        };
        let assignment = |who: &str, secs| {
            let text = json!({"holders": [{"identity": who, "lease": format!("lease-{who}"), "slots": slots.to_text()}]}).to_string();
            write(
                Writer::Replica(who.into()),
                "update",
                "leases",
                "robustness-shards",
                secs,
                json!({"metadata": {"uid": "shards", "annotations": {"reconciler.dev/slots": text}}}),
            )
        };
        h.writes = vec![
            member("a", 1),
            member("b", 1),
            assignment("a", 2),
            status("a", uid, 1, 3),
            status("b", uid, 1, 4),
        ];
        let found = fenced(&h);
        assert_eq!(checks(&found), ["fenced"], "b does not hold the slot");
        assert!(
            found[0].message.contains(&format!("slot {slot}")),
            "{}",
            found[0]
        );
        // a's member lease deleted as stale: a may write nothing more.
        h.writes.truncate(4);
        h.writes.push(Write {
            verb: "delete".into(),
            ..member("a", 5)
        });
        h.writes.push(status("a", uid, 1, 6));
        let found = fenced(&h);
        assert_eq!(checks(&found), ["fenced"]);
        assert!(found[0].message.contains("no member lease"), "{}", found[0]);
    }

    #[test]
    fn a_generation_nobody_reported_is_lost_unless_a_newer_one_or_a_deletion_supersedes_it() {
        let mut h = history(Mode::Leader);
        h.writes = vec![spec_change("u1", 1, 1), spec_change("u1", 2, 2)];
        assert_eq!(checks(&lost(&h)), ["lost", "lost"]);
        h.writes.push(status("a", "u1", 2, 3));
        assert!(lost(&h).is_empty(), "generation 2 reported covers 1");
        // A deleted object whose delete answered with a Status naming its uid.
        h.writes.push(spec_change("u2", 1, 4));
        h.writes.push(write(
            Writer::Workload,
            "delete",
            "widgets",
            "w-2",
            5,
            json!({"kind": "Status", "metadata": {}, "details": {"uid": "u2"}}),
        ));
        assert!(lost(&h).is_empty(), "the deletion supersedes generation 1");
        h.final_objects.push(FinalObject {
            name: "w-2".into(),
            uid: "u2".into(),
            generation: 1,
            observed_generation: None,
            deleting: true,
        });
        let found = lost(&h);
        assert_eq!(checks(&found), ["lost"], "deleted, yet still there");
    }

    /// The workload's delete committed, and kube-apiserver was killed before it logged it:
    /// the replica's finalizer release, answered with `deletionTimestamp` set, is the
    /// server's record of the deletion.
    #[test]
    fn a_deletion_whose_audit_event_was_lost_is_known_from_the_servers_later_answers() {
        let mut h = history(Mode::Sharded);
        h.writes = vec![spec_change("u3", 1, 1), status("a", "u3", 1, 2)];
        h.writes.push(spec_change("u3", 2, 3));
        let released = |finalizers: Value| {
            write(
                Writer::Replica("a".into()),
                "patch",
                "widgets",
                "w-1",
                5,
                json!({"metadata": {"uid": "u3", "generation": 3,
                    "deletionTimestamp": "2026-11-27T12:52:55Z", "finalizers": finalizers}}),
            )
        };
        h.writes.push(released(json!([])));
        assert!(lost(&h).is_empty(), "{:?}", lost(&h));
        let mut life = lives(&h);
        let life = life.remove("u3").unwrap();
        assert!(life.deleted.is_some() && life.gone.is_some());
        // Without any sign of a deletion, generation 2 is still lost.
        h.writes.pop();
        assert_eq!(checks(&lost(&h)), ["lost"]);
        // Deleting but never released, and still there: still named.
        h.writes
            .push(released(json!(["test.reconciler.dev/cleanup"])));
        h.final_objects.push(FinalObject {
            name: "w-1".into(),
            uid: "u3".into(),
            generation: 3,
            observed_generation: Some(1),
            deleting: true,
        });
        assert_eq!(checks(&lost(&h)), ["lost"]);
    }

    #[test]
    fn objects_behind_or_stuck_deleting_at_the_end_are_not_converged() {
        let mut h = history(Mode::Leader);
        h.final_objects = vec![
            FinalObject {
                name: "w-1".into(),
                uid: "u1".into(),
                generation: 3,
                observed_generation: Some(2),
                deleting: false,
            },
            FinalObject {
                name: "w-2".into(),
                uid: "u2".into(),
                generation: 1,
                observed_generation: Some(1),
                deleting: true,
            },
            FinalObject {
                name: "w-3".into(),
                uid: "u3".into(),
                generation: 1,
                observed_generation: Some(1),
                deleting: false,
            },
        ];
        assert_eq!(checks(&converged(&h)), ["converged", "converged"]);
        h.meta.converged_at = None;
        assert_eq!(checks(&converged(&h)).len(), 3);
    }

    #[test]
    fn memory_is_judged_per_replica_across_restarts() {
        let mut h = history(Mode::Leader);
        assert!(memory(&h).is_empty());
        // a restarted: its second incarnation ends at 200 MiB against 40 MiB before.
        let mut second = h.incarnations[0].clone();
        second.index = 1;
        second.rss_before = None;
        second.rss_after = Some(200 << 20);
        h.incarnations[0].rss_after = None;
        h.incarnations.push(second);
        let found = memory(&h);
        assert_eq!(checks(&found), ["memory"]);
        assert!(found[0].message.contains("replica a"), "{}", found[0]);
        assert_eq!(memory_bound(40 << 20), 88 << 20);
        assert_eq!(memory_bound(200 << 20), 300 << 20);
    }

    #[test]
    fn convergence_after_a_fault_is_measured_from_its_end() {
        let mut h = history(Mode::Leader);
        h.faults.push(FaultRecord {
            index: 0,
            kind: "replica-pause".into(),
            target: Some("a".into()),
            start: at(5),
            end: at(10),
            detail: String::new(),
        });
        h.writes = vec![spec_change("u1", 1, 6), status("b", "u1", 1, 13)];
        let report = check(&h);
        assert_eq!(report.longest_convergence_ms, 3005);
        assert_eq!(
            report.longest_convergence_after.as_deref(),
            Some("fault 0 (replica-pause on a)")
        );
    }
}
