//! Shadow mode: a guest runs on live events with its real grant, but nothing it would change is
//! changed. Each write it intends is compared with the object as the API server has it (each
//! backend change with the backend's actual state) instead of being made, and every reconcile
//! ends in a verdict: it *agrees* when none of its intended changes would change anything, it
//! *differs* otherwise, with a compact diff per change.
//!
//! That is how a guest is checked against a controller already running (the naming guest
//! against the API server's own naming controller) and how an operator trials a new version of
//! a guest beside the running one before promoting it (`mode: shadow` in its grant; switching to
//! `active` reloads it without a restart).
//!
//! What counts as a change, per intended call:
//! - status merge patch: the live object with the patch merged in (RFC 7386) differs from the
//!   live object anywhere (its `status`, or anything else the patch would touch; only
//!   `metadata.resourceVersion`, a precondition, is left out);
//! - apply: a field the applied object sets differs from the live one (lists of objects with a
//!   `name` or `type` are matched by it, as server-side apply merges them), or the object does
//!   not exist;
//! - delete: the object exists;
//! - any write of a kind the guest may not read: nothing is read (the host would otherwise read
//!   with its own identity what the guest's grant and account keep from it); the difference
//!   lists the paths the write sets, without values, and says it was not compared;
//! - finalizer add/remove by the host: the object lacks / carries it;
//! - network backend `ensure`: the network is missing or its CIDR, gateway or state differ;
//!   `delete`: the network exists.
//!
//! Events are not sent and count neither way.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use crate::metrics::Metrics;

/// At most this many lines per difference; the rest is summarised.
const MAX_LINES: usize = 16;
/// A value in a diff line is cut to this many characters.
const MAX_VALUE_CHARS: usize = 120;
/// A key in a diff line's path is cut to this many characters, the path to about this many bytes.
const MAX_KEY_CHARS: usize = 64;
const MAX_PATH_BYTES: usize = 256;
/// Verdicts kept per guest for `/guests`.
const RECENT: usize = 20;

/// One intended change that would have changed something.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// What was intended, e.g. `status patch of apiextensions.k8s.io/v1/CustomResourceDefinition a.b.c`.
    pub(crate) intended: String,
    /// `path: live → intended`, one line per field.
    pub(crate) changes: Vec<String>,
}

impl std::fmt::Display for Difference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.intended, self.changes.join("; "))
    }
}

impl Difference {
    /// The paths `differences` would change (what was intended, for a difference without
    /// lines), each once, in order: a rollout's evidence.
    pub(crate) fn paths_of(differences: &[Difference]) -> Vec<String> {
        let mut paths: Vec<String> = Vec::new();
        for difference in differences {
            let lines = difference.changes.iter().map(|line| {
                line.split_once(": ")
                    .map_or(line.as_str(), |(path, _)| path)
            });
            let named: Vec<&str> = if difference.changes.is_empty() {
                vec![difference.intended.as_str()]
            } else {
                lines.collect()
            };
            for path in named {
                if !paths.iter().any(|p| p == path) {
                    paths.push(path.to_owned());
                }
            }
        }
        paths
    }
}

/// The differences of a status merge patch: `live` with `patch` merged in, compared whole
/// (every field the patch would change, not only `status`: the verdict must see all of a
/// write), except `metadata.resourceVersion`, which a patch carries as a precondition. Returns
/// the object as it would be, for the guest to read back.
pub(crate) fn status_patch(
    intended: String,
    live: &Value,
    patch: &Value,
) -> (Value, Option<Difference>) {
    let mut patched = live.clone();
    json_patch::merge(&mut patched, patch);
    if let Some(version) = live.pointer("/metadata/resourceVersion")
        && let Some(metadata) = patched.get_mut("metadata").and_then(Value::as_object_mut)
    {
        metadata.insert("resourceVersion".to_owned(), version.clone());
    }
    let mut changes = Lines::default();
    if let (Some(before), Some(after)) = (live.as_object(), patched.as_object()) {
        let keys: BTreeSet<&String> = before.keys().chain(after.keys()).collect();
        for key in keys {
            compare(
                key,
                before.get(key).unwrap_or(&Value::Null),
                after.get(key).unwrap_or(&Value::Null),
                &mut changes,
            );
        }
    } else {
        compare("", live, &patched, &mut changes);
    }
    let difference = finish(intended, changes);
    (patched, difference)
}

/// The differences of a server-side apply: every field `applied` sets, compared with `live`
/// (none: the object would be created).
pub(crate) fn apply(intended: String, live: Option<&Value>, applied: &Value) -> Option<Difference> {
    let Some(live) = live else {
        return Some(Difference {
            intended,
            changes: vec!["object does not exist: it would be created".into()],
        });
    };
    let mut changes = Lines::default();
    if let (Some(set), Some(have)) = (applied.as_object(), live.as_object()) {
        for (key, value) in set {
            if matches!(key.as_str(), "apiVersion" | "kind") {
                continue;
            }
            if key == "metadata" {
                // Identity and server-managed fields are not the guest's to set.
                let mut metadata = value.clone();
                if let Some(m) = metadata.as_object_mut() {
                    for field in [
                        "name",
                        "namespace",
                        "resourceVersion",
                        "uid",
                        "managedFields",
                    ] {
                        m.remove(field);
                    }
                }
                subset(
                    "metadata",
                    have.get("metadata").unwrap_or(&Value::Null),
                    &metadata,
                    &mut changes,
                );
                continue;
            }
            subset(
                key,
                have.get(key).unwrap_or(&Value::Null),
                value,
                &mut changes,
            );
        }
    }
    finish(intended, changes)
}

/// An intended write of a kind the guest may not read, never compared: the paths `set` sets
/// (leaves; lists whole), without a value, after a line saying why.
pub(crate) fn blind(intended: String, set: &Value, why: &str) -> Option<Difference> {
    let mut lines = Lines::default();
    lines
        .changes
        .push(format!("not compared ({why}); it would set:"));
    paths("", set, &mut lines);
    finish(intended, lines)
}

/// The leaf paths of `set`, identity fields left out.
fn paths(path: &str, set: &Value, out: &mut Lines) {
    match set {
        Value::Object(fields) if !fields.is_empty() => {
            for (key, value) in fields {
                if matches!(
                    (path, key.as_str()),
                    ("", "apiVersion" | "kind") | ("metadata", "name" | "namespace")
                ) {
                    continue;
                }
                let dot = if path.is_empty() { "" } else { "." };
                paths(&child(path, dot, key, ""), value, out);
            }
        }
        _ => out.push_path(path),
    }
}

/// A difference made of one line, when `changed`.
pub(crate) fn single(
    intended: String,
    changed: bool,
    line: impl Into<String>,
) -> Option<Difference> {
    changed.then(|| Difference {
        intended,
        changes: vec![line.into()],
    })
}

fn finish(intended: String, lines: Lines) -> Option<Difference> {
    let Lines { mut changes, more } = lines;
    if changes.is_empty() {
        return None;
    }
    if more > 0 {
        changes.push(format!("… and {more} more"));
    }
    Some(Difference { intended, changes })
}

/// The lines of one difference: the first [`MAX_LINES`] are kept, the rest only counted, so a
/// large intended change never builds more than that.
#[derive(Default)]
struct Lines {
    changes: Vec<String>,
    more: usize,
}

impl Lines {
    fn push(&mut self, path: &str, before: &Value, after: &Value) {
        if self.changes.len() < MAX_LINES {
            self.changes.push(line(path, before, after));
        } else {
            self.more += 1;
        }
    }

    fn push_path(&mut self, path: &str) {
        if self.changes.len() < MAX_LINES {
            self.changes.push(path.to_owned());
        } else {
            self.more += 1;
        }
    }
}

/// `path` extended by one step. Keys come from the guest: escaped (one log line per difference,
/// no forged lines) and cut, and the whole path bounded, so no key makes a line large.
fn child(path: &str, open: &str, key: &str, close: &str) -> String {
    if path.len() >= MAX_PATH_BYTES {
        return path.to_owned();
    }
    let mut out = String::with_capacity(path.len() + key.len().min(MAX_KEY_CHARS) + 4);
    out.push_str(path);
    out.push_str(open);
    for (i, c) in key.chars().enumerate() {
        if i == MAX_KEY_CHARS {
            out.push('…');
            break;
        }
        out.extend(c.escape_debug());
    }
    out.push_str(close);
    if out.len() >= MAX_PATH_BYTES {
        out.push('…');
    }
    out
}

/// Every difference between `before` and `after`, as `path: before → after` lines.
fn compare(path: &str, before: &Value, after: &Value, out: &mut Lines) {
    if before == after {
        return;
    }
    match (before, after) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                compare(
                    &child(path, ".", key, ""),
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                    out,
                );
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if let (Some(a_keyed), Some(b_keyed)) = (keyed(a), keyed(b)) {
                let keys: BTreeSet<&String> = a_keyed.keys().chain(b_keyed.keys()).collect();
                for key in keys {
                    compare(
                        &child(path, "[", key, "]"),
                        a_keyed.get(key).copied().unwrap_or(&Value::Null),
                        b_keyed.get(key).copied().unwrap_or(&Value::Null),
                        out,
                    );
                }
            } else if a.len() == b.len() {
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    compare(&child(path, "[", &i.to_string(), "]"), x, y, out);
                }
            } else {
                out.push(path, before, after);
            }
        }
        _ => out.push(path, before, after),
    }
}

/// The differences of the fields `set` sets, against `have`.
fn subset(path: &str, have: &Value, set: &Value, out: &mut Lines) {
    match (have, set) {
        (Value::Object(h), Value::Object(s)) => {
            for (key, value) in s {
                subset(
                    &child(path, ".", key, ""),
                    h.get(key).unwrap_or(&Value::Null),
                    value,
                    out,
                );
            }
        }
        (Value::Array(h), Value::Array(s)) => match (keyed(h), keyed(s)) {
            (Some(h_keyed), Some(s_keyed)) => {
                for (key, value) in s_keyed {
                    subset(
                        &child(path, "[", &key, "]"),
                        h_keyed.get(&key).copied().unwrap_or(&Value::Null),
                        value,
                        out,
                    );
                }
            }
            _ if h.len() == s.len() => {
                for (i, (x, y)) in h.iter().zip(s).enumerate() {
                    subset(&child(path, "[", &i.to_string(), "]"), x, y, out);
                }
            }
            _ => out.push(path, have, set),
        },
        _ if have == set => {}
        _ => out.push(path, have, set),
    }
}

/// A list of objects each carrying a distinct string `type` (conditions) or `name`
/// (containers, ports), by that key; else none.
fn keyed(items: &[Value]) -> Option<BTreeMap<String, &Value>> {
    if items.is_empty() {
        return None;
    }
    for field in ["type", "name"] {
        let map: BTreeMap<String, &Value> = items
            .iter()
            .filter_map(|item| {
                let key = item.get(field)?.as_str()?;
                Some((format!("{field}={key}"), item))
            })
            .collect();
        if map.len() == items.len() {
            return Some(map);
        }
    }
    None
}

fn line(path: &str, before: &Value, after: &Value) -> String {
    format!("{path}: {} → {}", shown(before), shown(after))
}

fn shown(value: &Value) -> String {
    if value.is_null() {
        return "(absent)".into();
    }
    // JSON escapes only U+0000-U+001F; the rest of Unicode's line breaks and the bidi
    // controls would still split or disguise a verdict's log line.
    let text = crate::cluster::validation::message(&value.to_string());
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text;
    }
    let mut cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    let _ = write!(cut, "… ({} bytes)", text.len());
    cut
}

/// How one reconcile in shadow mode ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Verdict {
    pub(crate) key: String,
    /// RFC 3339.
    pub(crate) at: String,
    pub(crate) agreed: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(crate) differences: Vec<Difference>,
}

/// What `/guests` shows of a guest's shadow runs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ShadowReport {
    pub(crate) agreements: u64,
    pub(crate) diffs: u64,
    /// The latest verdicts, newest first.
    pub(crate) recent: VecDeque<Verdict>,
    /// The latest verdicts that differed, newest first (kept apart so agreements do not push
    /// them out).
    pub(crate) recent_diffs: VecDeque<Verdict>,
}

impl ShadowReport {
    /// The counts alone, for a namespaced `Reconciler`'s guest: its verdicts name its keys and
    /// quote its objects' fields, and `/guests` answers anyone who reaches the host's port (the
    /// pod network, another tenant's Pods among it). The host's log keeps every difference.
    #[must_use]
    pub(crate) fn counts_only(self) -> Self {
        Self {
            recent: VecDeque::new(),
            recent_diffs: VecDeque::new(),
            ..self
        }
    }
}

/// Every guest's shadow verdicts: counted in metrics, logged, and kept for `/guests`.
#[derive(Default)]
pub struct Shadows {
    guests: Mutex<BTreeMap<String, ShadowReport>>,
    metrics: Option<Metrics>,
}

impl Shadows {
    pub fn new(metrics: Option<Metrics>) -> Self {
        Self {
            guests: Mutex::default(),
            metrics,
        }
    }

    /// Records the verdict of one reconcile of `key` by `guest`: it agreed when `differences`
    /// is empty.
    pub(crate) fn record(&self, guest: &str, key: &str, differences: Vec<Difference>) {
        let agreed = differences.is_empty();
        if agreed {
            tracing::debug!(guest, key, "shadow: agrees with the live state");
        } else {
            for difference in &differences {
                tracing::warn!(
                    guest,
                    key,
                    "shadow: differs from the live state: {difference}"
                );
            }
        }
        if let Some(metrics) = &self.metrics {
            metrics.shadow_verdict(guest, agreed);
        }
        let verdict = Verdict {
            key: key.to_owned(),
            at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            agreed,
            differences,
        };
        let mut guests = self.guests.lock();
        let report = guests.entry(guest.to_owned()).or_default();
        if agreed {
            report.agreements += 1;
        } else {
            report.diffs += 1;
            push_bounded(&mut report.recent_diffs, verdict.clone());
        }
        push_bounded(&mut report.recent, verdict);
    }

    /// What `/guests` shows for `guest`, if it ever ran in shadow mode.
    pub(crate) fn report(&self, guest: &str) -> Option<ShadowReport> {
        self.guests.lock().get(guest).cloned()
    }
}

fn push_bounded(list: &mut VecDeque<Verdict>, verdict: Verdict) {
    list.push_front(verdict);
    list.truncate(RECENT);
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn crd() -> Value {
        json!({
            "metadata": {"name": "a.b.c", "resourceVersion": "7"},
            "status": {
                "acceptedNames": {"plural": "a", "kind": "A", "shortNames": ["x"]},
                "conditions": [
                    {"type": "NamesAccepted", "status": "True", "reason": "NoConflicts"},
                    {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                ],
            },
        })
    }

    #[test]
    fn a_status_patch_that_changes_nothing_agrees() {
        let live = crd();
        let patch = json!({
            "metadata": {"resourceVersion": "7"},
            "status": {"acceptedNames": {"plural": "a", "kind": "A", "singular": null, "shortNames": ["x"]}},
        });
        let (patched, difference) = status_patch("patch".into(), &live, &patch);
        assert_eq!(difference, None);
        assert_eq!(patched, live);
    }

    #[test]
    fn a_status_patch_difference_names_each_field_with_conditions_by_type() {
        let live = crd();
        let patch = json!({"status": {
            "acceptedNames": {"shortNames": null},
            "conditions": [
                {"type": "Established", "status": "True", "reason": "InitialNamesAccepted"},
                {"type": "NamesAccepted", "status": "False", "reason": "KindConflict"},
            ],
        }});
        let (patched, difference) = status_patch("status patch of a.b.c".into(), &live, &patch);
        assert_eq!(patched["status"]["conditions"][1]["reason"], "KindConflict");
        let difference = difference.expect("a difference");
        assert_eq!(difference.intended, "status patch of a.b.c");
        assert_eq!(
            difference.changes,
            vec![
                r#"status.acceptedNames.shortNames: ["x"] → (absent)"#,
                r#"status.conditions[type=NamesAccepted].reason: "NoConflicts" → "KindConflict""#,
                r#"status.conditions[type=NamesAccepted].status: "True" → "False""#,
            ]
        );
    }

    #[test]
    fn a_status_patch_that_would_change_metadata_differs() {
        // The capabilities refuse such a patch before it gets here; the verdict must not
        // depend on that: it compares everything the patch would change.
        let live = crd();
        let patch = json!({
            "metadata": {"finalizers": ["example.com/block"], "labels": {"a": "b"}},
            "status": {"acceptedNames": {"plural": "a", "kind": "A", "singular": null, "shortNames": ["x"]}},
        });
        let (_, difference) = status_patch("p".into(), &live, &patch);
        let changes = difference.expect("a difference").changes;
        assert_eq!(
            changes,
            vec![
                r#"metadata.finalizers: (absent) → ["example.com/block"]"#,
                r#"metadata.labels: (absent) → {"a":"b"}"#,
            ]
        );
    }

    #[test]
    fn an_apply_compares_only_the_fields_it_sets() {
        let live = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "resourceVersion": "9", "labels": {"a": "1", "b": "2"}},
            "data": {"k": "v", "other": "x"},
        });
        let same = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n", "labels": {"a": "1"}}, "data": {"k": "v"}});
        assert_eq!(apply("apply".into(), Some(&live), &same), None);
        let changed = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "namespace": "n"}, "data": {"k": "w"}});
        let difference = apply("apply".into(), Some(&live), &changed).unwrap();
        assert_eq!(difference.changes, vec![r#"data.k: "v" → "w""#]);
        let created = apply("apply".into(), None, &same).unwrap();
        assert!(created.changes[0].contains("would be created"));
    }

    #[test]
    fn an_apply_matches_named_list_items_and_ignores_defaulted_fields() {
        let live = json!({"spec": {"containers": [
            {"name": "a", "image": "x:1", "imagePullPolicy": "IfNotPresent"},
            {"name": "b", "image": "y:1"},
        ]}});
        let applied = json!({"spec": {"containers": [{"name": "b", "image": "y:1"}, {"name": "a", "image": "x:2"}]}});
        let difference = apply("apply".into(), Some(&live), &applied).unwrap();
        assert_eq!(
            difference.changes,
            vec![r#"spec.containers[name=a].image: "x:1" → "x:2""#]
        );
    }

    #[test]
    fn a_blind_difference_names_paths_and_never_a_value() {
        let applied = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "labels": {"app": "x"}},
            "data": {"password": "c2VjcmV0"}});
        let difference = blind("apply".into(), &applied, "may not read v1/Secret").unwrap();
        assert_eq!(
            difference.changes,
            [
                "not compared (may not read v1/Secret); it would set:",
                "data.password",
                "metadata.labels.app"
            ]
        );
        assert!(!difference.to_string().contains("c2VjcmV0"));
    }

    #[test]
    fn long_diffs_are_cut() {
        let live = json!({"status": {}});
        let many: serde_json::Map<String, Value> = (0..40)
            .map(|i| (format!("f{i:02}"), Value::from("x".repeat(300))))
            .collect();
        let (_, difference) =
            status_patch("p".into(), &live, &json!({"status": Value::Object(many)}));
        let changes = difference.unwrap().changes;
        assert_eq!(changes.len(), MAX_LINES + 1);
        assert_eq!(changes[MAX_LINES], "… and 24 more");
        assert!(changes[0].len() < 200, "{}", changes[0]);
    }

    #[test]
    fn verdicts_are_counted_and_the_latest_kept() {
        let shadows = Shadows::new(None);
        assert!(shadows.report("g").is_none());
        for i in 0..25 {
            shadows.record("g", &format!("k{i}"), Vec::new());
        }
        shadows.record(
            "g",
            "bad",
            vec![Difference {
                intended: "p".into(),
                changes: vec!["x".into()],
            }],
        );
        let report = shadows.report("g").unwrap();
        assert_eq!((report.agreements, report.diffs), (25, 1));
        assert_eq!(report.recent.len(), RECENT);
        assert_eq!(report.recent[0].key, "bad");
        assert!(!report.recent[0].agreed);
        assert_eq!(report.recent_diffs.len(), 1);
        assert_eq!(report.recent[1].key, "k24");
        let counts = report.counts_only();
        assert_eq!((counts.agreements, counts.diffs), (25, 1));
        assert!(counts.recent.is_empty() && counts.recent_diffs.is_empty());
    }

    #[test]
    fn guest_keys_in_a_diff_are_escaped_and_bounded() {
        let live = json!({"status": {}});
        let key = format!("a\nFORGED{}", "k".repeat(1_000_000));
        let (_, difference) = status_patch(
            "p".into(),
            &live,
            &json!({"status": {key: {"deeper": {"and": 1}}}}),
        );
        let changes = difference.unwrap().changes;
        assert_eq!(changes.len(), 1);
        assert!(!changes[0].contains('\n'), "{}", changes[0]);
        assert!(
            changes[0].starts_with("status.a\\nFORGED"),
            "{}",
            changes[0]
        );
        assert!(changes[0].len() < 600, "{} bytes", changes[0].len());
    }
}
