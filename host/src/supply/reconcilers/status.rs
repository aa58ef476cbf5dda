//! A `Reconciler`'s status and events: what the host made of its spec, written where
//! `kubectl get reconcilers` and `kubectl describe` show it.
//!
//! | condition | `True` | `False` (reason) |
//! |---|---|---|
//! | `Pulled` | the module of this spec is pulled (`Pulled`, or `FromCache`) | `PullFailed`, `ModuleNotFound`, `PullDenied`, `PullSecretInvalid`, `RegistryNotAllowed`, `DigestMismatch`, `TooLarge`, `NotAComponent`, `CacheFull`, `SignatureMissing`, `SignatureInvalid` |
//! | `Loaded` | the guest set runs this spec's module with this spec's grant | the refusal's cause: `NotAComponent`, `WrongWorld`, `ManifestRefused`, `BeyondGrant`, `GrantBeyondAllowed`, `NameConflict`, ... |
//! | `Ready` | both | the first that is not; `InvalidSpec` for a spec the host cannot run |
//!
//! `Unknown` (reason `Pending`) while a spec is being pulled or judged. `status.digest`
//! (with `status.module`, the module pinned by it, which a host started after a change of a
//! spec with `spec.rollout` rolls the new module out from),
//! `status.guest`, `status.signedBy` (the trusted key that signed it, when signatures are
//! required) and `status.mode` name the version running now, which after a refusal is the
//! last good one (the `Ready` message says so); `status.observedGeneration` the generation the
//! host has decided on; `status.shadow` a shadow-mode guest's agreement and difference counts;
//! `status.host` the host that wrote it (`NAMESPACE/LEASE-NAME`), so that a host that stops
//! serving a namespace knows which statuses are its to mark `NoTenantRule`, and no host marks one
//! another host wrote. A status is written only onto the `resourceVersion` it was decided from.
//! An event is recorded on the object whenever `Ready` changes status or reason.
//!
//! One replica writes (see `crate::manager`); the others compute the same and stay quiet. A status
//! equal to the object's (transition times aside) is not written again.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::reflector::Store;
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::Shared;
use super::pulls::{Pull, Record};
use super::spec;
use crate::supply::guest_set::{FileStatus, Guests, RECONCILER_PREFIX, Verdict};

/// Shadow counts change without an event of the source: look this often anyway.
const REFRESH: Duration = Duration::from_secs(10);

/// Writes the status of every `ClusterReconciler` and namespaced `Reconciler` object.
pub(crate) struct StatusWriter {
    client: kube::Client,
    store: Store<DynamicObject>,
    shared: Arc<Shared>,
}

impl StatusWriter {
    pub(super) fn new(
        client: kube::Client,
        store: Store<DynamicObject>,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            client,
            store,
            shared,
        }
    }

    /// Keeps every object's status in line with the source and `guests`, while `writes` is
    /// true (this replica is the one that writes). Runs until aborted.
    pub(crate) async fn run(
        self,
        guests: Arc<Guests>,
        identity: String,
        mut writes: watch::Receiver<bool>,
    ) {
        let cluster_api: Api<DynamicObject> =
            Api::all_with(self.client.clone(), &spec::api_resource());
        let recorder = Recorder::new(
            self.client.clone(),
            Reporter {
                controller: "reconciler-host".into(),
                instance: Some(identity),
            },
        );
        let mut refresh = tokio::time::interval(REFRESH);
        loop {
            let rollouts = guests.rollouts();
            tokio::select! {
                () = self.shared.status_changed.notified() => {}
                () = rollouts.moved() => {}
                _ = refresh.tick() => {}
                changed = writes.changed() => if changed.is_err() { return },
            }
            if !*writes.borrow() {
                continue;
            }
            // Decided in one go, before any write is awaited, so that every status of a pass
            // comes from the same moment of the guest set and the records.
            let decided = self.decide(&guests);
            for (name, object, namespace, desired) in decided {
                let api = match &namespace {
                    Some(ns) => {
                        Api::namespaced_with(self.client.clone(), ns, &spec::namespaced_resource())
                    }
                    None => cluster_api.clone(),
                };
                if let Err(e) = write(&api, &recorder, &object, desired).await {
                    tracing::warn!(reconciler = %name, "cannot write the Reconciler's status: {e}");
                }
            }
        }
    }

    /// The status every object should have now, from one moment of `guests` and the
    /// records: `(item name, object, its namespace, status)`.
    fn decide(&self, guests: &Guests) -> Vec<(String, Arc<DynamicObject>, Option<String>, Value)> {
        let statuses = guests.statuses();
        let shadows = guests.shadows();
        let cluster = self.store.state().into_iter().map(|o| (o, None));
        let namespaced = self
            .shared
            .namespaced
            .lock()
            .iter()
            .flat_map(Store::state)
            .collect::<Vec<_>>()
            .into_iter()
            .filter_map(|o| o.metadata.namespace.clone().map(|ns| (o, Some(ns))));
        let mut decided = Vec::new();
        {
            let records = self.shared.records.lock();
            for (object, namespace) in cluster.chain(namespaced) {
                // A namespaced object's record and item are keyed `NAMESPACE.NAME`.
                let name = match &namespace {
                    Some(ns) => format!("{ns}.{}", object.name_any()),
                    None => object.name_any(),
                };
                let Some(record) = records.objects.get(&name) else {
                    continue;
                };
                // Another host's, in a namespace this one does not serve: the record may
                // predate that host's write, which the next listing drops it for.
                if record.unserved() && super::written_by_another(&object, &self.shared.host) {
                    continue;
                }
                let entry = running(&statuses, &name);
                let generation = object.metadata.generation.unwrap_or(0);
                let runs = entry.and_then(|e| e.active_hash.as_deref());
                if !settled(record.verdict.as_ref(), generation, runs) {
                    // Between a load or unload and its verdict: the verdict's own
                    // notification brings the pass that sees both.
                    continue;
                }
                let rollout = entry.and_then(|e| e.rollout.clone());
                // The module serving the keys outside a rollout's share, pinned: what a host
                // that starts after the spec changed rolls the spec's module out from.
                let serving_module = entry
                    .and_then(|s| s.serving_hash.as_deref().or(s.active_hash.as_deref()))
                    .and_then(|h| records.module_of(&name, h));
                let running = entry.map(|s| {
                    // While a rollout is in flight or after it was rolled back, the version
                    // the controller serves the keys outside the share with (the guest set's
                    // item is the new one).
                    let hash = s.serving_hash.as_deref().or(s.active_hash.as_deref());
                    Running {
                        guest: s.guest.clone().unwrap_or_default(),
                        digest: hash
                            .and_then(|h| records.digest_of(&name, h))
                            .map(str::to_owned),
                        signed_by: hash
                            .and_then(|h| records.signer_of(&name, h))
                            .map(str::to_owned),
                        mode: s.mode,
                    }
                });
                let rollout = rollout.map(|mut view| {
                    // The module a restarted host pulls to take the rollout up.
                    if let Some(module) = view["from"]
                        .as_str()
                        .and_then(|h| records.module_of(&name, h))
                    {
                        view["fromModule"] = json!(module);
                    }
                    // Digests, as `status.digest` and `spec.module` name versions.
                    for end in ["from", "to"] {
                        if let Some(digest) =
                            view[end].as_str().and_then(|h| records.digest_of(&name, h))
                        {
                            view[end] = json!(digest);
                        }
                    }
                    view
                });
                let shadow = running
                    .as_ref()
                    .filter(|r| r.mode == Some(crate::config::Mode::Shadow))
                    .and_then(|r| shadows.report(&r.guest));
                if let Some(mut status) =
                    desired(&object, record, running.as_ref(), shadow.as_ref())
                {
                    status["host"] = json!(self.shared.host);
                    status["rollout"] = rollout
                        .or_else(|| kept_rollout(&object))
                        .unwrap_or(Value::Null);
                    // Nothing running here yet (a host starting): the module recorded stays.
                    status["module"] = serving_module
                        .map(Value::from)
                        .or_else(|| object.data.pointer("/status/module").cloned())
                        .unwrap_or(Value::Null);
                    decided.push((name, object, namespace, status));
                }
            }
        }
        decided
    }
}

/// The rollout `object`'s status records, while this host has none in view for it (a host
/// started afresh pulling the version it rolls out from, a guest stopped and loaded again): kept
/// as it is while it runs under the object's generation and was not promoted, so what a
/// restarted host takes up is never erased on the way.
fn kept_rollout(object: &DynamicObject) -> Option<Value> {
    let recorded = object.data.pointer("/status/rollout")?;
    let current = recorded["generation"].as_i64().is_some()
        && recorded["generation"].as_i64() == object.metadata.generation;
    (current && recorded["phase"] != "Promoted").then(|| recorded.clone())
}

/// Whether the guest set (`runs`: the content hash its item for the object runs) and the
/// records' last verdict on `generation` agree on what runs. A pass reads the guest set's items
/// first and the records after, each under its own lock, so a load or unload in between shows
/// its verdict beside the item as it was: a guest loaded but not yet listed, or one unloaded and
/// still listed.
fn settled(verdict: Option<&(i64, Verdict)>, generation: i64, runs: Option<&str>) -> bool {
    let Some((judged, verdict)) = verdict else {
        return true;
    };
    if *judged != generation {
        return true;
    }
    let verdict_runs = match verdict {
        Verdict::Loaded { hash, .. } => Some(hash.as_str()),
        Verdict::Refused { kept, .. } => kept.as_ref().map(|(_, hash)| hash.as_str()),
        Verdict::Unloaded => None,
    };
    verdict_runs == runs
}

/// The `/guests` entry of object `name`, if a version of it runs.
fn running<'a>(statuses: &'a [FileStatus], name: &str) -> Option<&'a FileStatus> {
    statuses.iter().find(|s| {
        s.active_hash.is_some()
            && s.file
                .to_str()
                .and_then(|f| f.strip_prefix(RECONCILER_PREFIX))
                == Some(name)
    })
}

/// The version of an object's guest running now.
struct Running {
    guest: String,
    digest: Option<String>,
    signed_by: Option<String>,
    mode: Option<crate::config::Mode>,
}

/// One condition as decided now: status, reason, message.
struct Decided {
    status: &'static str,
    reason: String,
    message: String,
}

impl Decided {
    fn new(status: &'static str, reason: &str, message: impl Into<String>) -> Self {
        Self {
            status,
            reason: reason.to_owned(),
            message: message.into(),
        }
    }
}

/// The status `object` should have: `None` when the source has not seen it yet.
fn desired(
    object: &DynamicObject,
    record: &Record,
    running: Option<&Running>,
    shadow: Option<&crate::sandbox::shadow::ShadowReport>,
) -> Option<Value> {
    let generation = object.metadata.generation.unwrap_or(0);
    if record.generation != generation {
        return None;
    }
    let pulled = pulled_condition(record);
    let loaded = loaded_condition(record, generation, pulled.status);
    let mut ready = match (pulled.status, loaded.status) {
        ("True", "True") => Decided::new(
            "True",
            "Ready",
            format!(
                "{} runs as guest {}",
                running
                    .and_then(|r| r.digest.as_deref())
                    .unwrap_or("the module"),
                running.map_or("?", |r| r.guest.as_str())
            ),
        ),
        _ if record.spec.is_err() => Decided::new("False", &pulled.reason, pulled.message.clone()),
        ("False", _) => Decided::new("False", &pulled.reason, pulled.message.clone()),
        (_, "False") => Decided::new("False", &loaded.reason, loaded.message.clone()),
        _ => Decided::new("Unknown", "Pending", "pulling and loading the module"),
    };
    if ready.status == "False"
        && let Some(running) = running
    {
        ready.message = format!(
            "{}; the last good version keeps running: {} as guest {}",
            ready.message,
            running.digest.as_deref().unwrap_or("a module"),
            running.guest
        );
    }
    let decided = ready.status != "Unknown";
    let observed = if decided {
        Some(generation)
    } else {
        object
            .data
            .pointer("/status/observedGeneration")
            .and_then(Value::as_i64)
    };
    let before = object.data.pointer("/status/conditions");
    let conditions: Vec<Value> = [("Ready", ready), ("Pulled", pulled), ("Loaded", loaded)]
        .into_iter()
        .map(|(kind, d)| condition(before, kind, d, generation))
        .collect();
    Some(json!({
        "observedGeneration": observed,
        "digest": running.and_then(|r| r.digest.clone()),
        "signedBy": running.and_then(|r| r.signed_by.clone()),
        "guest": running.map(|r| r.guest.clone()),
        "mode": running.and_then(|r| r.mode),
        "shadow": shadow.map(|s| json!({"agreements": s.agreements, "differences": s.diffs})),
        "conditions": conditions,
    }))
}

/// The `Pulled` condition: the spec's validity and the last pull.
fn pulled_condition(record: &Record) -> Decided {
    match (&record.spec, record.current_pull()) {
        (Err(_), _) if let Some((reason, message)) = &record.held => {
            Decided::new("False", reason, message.clone())
        }
        (Err(why), _) => Decided::new("Unknown", "InvalidSpec", why.to_string()),
        (
            Ok(_),
            Some(Pull::Pulled {
                digest,
                from_cache,
                signed_by,
                ..
            }),
        ) => {
            let (reason, how) = if *from_cache {
                ("FromCache", "from the module cache")
            } else {
                ("Pulled", "from the registry")
            };
            let signed = signed_by
                .as_ref()
                .map(|key| format!(", signed by {key}"))
                .unwrap_or_default();
            Decided::new("True", reason, format!("{digest}, {how}{signed}"))
        }
        (Ok(_), Some(Pull::Failed { cause, message, .. })) => {
            Decided::new("False", cause, message.clone())
        }
        (Ok(_), _) => Decided::new("Unknown", "Pending", "pulling the module"),
    }
}

/// The `Loaded` condition at `generation`: the guest set's verdict, once the module was
/// `pulled` (that condition's status).
fn loaded_condition(record: &Record, generation: i64, pulled: &str) -> Decided {
    match &record.verdict {
        Some((g, Verdict::Loaded { guest, .. })) if *g == generation && pulled == "True" => {
            Decided::new("True", "Loaded", format!("runs as guest {guest}"))
        }
        Some((g, Verdict::Refused { cause, message, .. })) if *g == generation => {
            Decided::new("False", cause, message.clone())
        }
        Some((g, Verdict::Unloaded)) if *g == generation => {
            Decided::new("False", "Unloaded", "the guest was unloaded")
        }
        _ => Decided::new("Unknown", "Pending", "waiting for the module"),
    }
}

/// A condition, keeping its transition time when its status did not change.
fn condition(before: Option<&Value>, kind: &str, d: Decided, generation: i64) -> Value {
    let previous = before
        .and_then(Value::as_array)
        .and_then(|all| all.iter().find(|c| c["type"] == kind));
    let since = previous
        .filter(|c| c["status"] == d.status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(k8s_openapi::jiff::Timestamp::now);
    let condition = Condition {
        type_: kind.to_owned(),
        status: d.status.to_owned(),
        reason: d.reason,
        // Spec errors and a registry's error text: bounded and escaped as guest text is.
        message: crate::cluster::validation::message(&d.message),
        last_transition_time: Time(since),
        observed_generation: Some(generation),
    };
    serde_json::to_value(condition).unwrap_or(Value::Null)
}

/// `text` cut to `max` bytes on a character boundary: an event's note holds at most 1 kB.
fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Writes `desired` if it differs from the object's status (transition times aside), and an
/// event if `Ready` changed.
async fn write(
    api: &Api<DynamicObject>,
    recorder: &Recorder,
    object: &DynamicObject,
    desired: Value,
) -> Result<(), kube::Error> {
    let current = object.data.get("status").cloned().unwrap_or(Value::Null);
    if comparable(&current) == comparable(&desired) {
        return Ok(());
    }
    let name = object.name_any();
    // Only onto the version the status was decided from: a status another host wrote since,
    // or a new spec, is not overwritten by a decision about what was there before. Its watch
    // event brings the next pass, which decides again.
    let patch = json!({
        "metadata": {"resourceVersion": object.metadata.resource_version},
        "status": desired,
    });
    match api
        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Err(kube::Error::Api(refused)) if refused.code == 409 => {
            tracing::debug!(reconciler = %name, "changed since this status was decided; deciding again");
            return Ok(());
        }
        written => written?,
    };
    let ready = |status: &Value| {
        status["conditions"]
            .as_array()
            .and_then(|all| all.iter().find(|c| c["type"] == "Ready"))
            .map(|c| {
                (
                    c["status"].clone(),
                    c["reason"].clone(),
                    c["message"].clone(),
                )
            })
    };
    rollout_event(recorder, object, &current, &desired).await;
    let (before, after) = (ready(&current), ready(&desired));
    if let Some((status, reason, message)) = after
        && before.as_ref().map(|b| (&b.0, &b.1)) != Some((&status, &reason))
        && status != "Unknown"
    {
        let event = Event {
            type_: if status == "True" {
                EventType::Normal
            } else {
                EventType::Warning
            },
            reason: reason.as_str().unwrap_or("Ready").to_owned(),
            note: message.as_str().map(|m| truncate(m, 1000)),
            action: "Load".into(),
            secondary: None,
        };
        if let Err(e) = recorder
            .publish(&event, &object.object_ref(&spec::api_resource()))
            .await
        {
            tracing::warn!(reconciler = %name, "cannot record an event: {e}");
        }
    }
    Ok(())
}

/// The event a rollout's move leaves on the object: `RolloutStep` (Normal) when the share
/// changes, `RolloutPromoted` (Normal), `RolloutRolledBack` or `RolloutAborted` (Warning, with
/// the failed gate and its numbers) when it ends.
async fn rollout_event(
    recorder: &Recorder,
    object: &DynamicObject,
    current: &Value,
    desired: &Value,
) {
    let at = |status: &Value| {
        let rollout = &status["rollout"];
        (
            rollout["to"].clone(),
            rollout["phase"].clone(),
            rollout["share"].clone(),
        )
    };
    let (before, after) = (at(current), at(desired));
    if after.0.is_null() || before == after {
        return;
    }
    let same_rollout = before.0 == after.0;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    let (to, phase, share) = (text(&after.0), text(&after.1), text(&after.2));
    let (type_, reason, note) = match phase.as_str() {
        "Progressing" | "Paused" if same_rollout && before.2 == after.2 => return,
        "Progressing" | "Paused" => (
            EventType::Normal,
            "RolloutStep",
            format!("rolling {to} out: it reconciles {share} of the keys"),
        ),
        "Promoted" => (
            EventType::Normal,
            "RolloutPromoted",
            format!("{to} reconciles every key"),
        ),
        ended @ ("RolledBack" | "Aborted") => (
            EventType::Warning,
            if ended == "Aborted" {
                "RolloutAborted"
            } else {
                "RolloutRolledBack"
            },
            format!(
                "{to} rolled back, the old version reconciles every key: {}",
                desired["rollout"]["message"].as_str().unwrap_or_default()
            ),
        ),
        _ => return,
    };
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(truncate(&note, 1000)),
        // The recorder folds events of one reason and action into a series that keeps its
        // first note: each share of each rollout is an action of its own, so each step's
        // event is seen.
        action: truncate(&format!("Rollout {share} {to}"), 128),
        secondary: None,
    };
    if let Err(e) = recorder
        .publish(&event, &object.object_ref(&spec::api_resource()))
        .await
    {
        tracing::warn!(reconciler = %object.name_any(), "cannot record an event: {e}");
    }
}

/// A status without transition times, for "has it changed".
fn comparable(status: &Value) -> Value {
    let mut status = status.clone();
    if let Some(conditions) = status.get_mut("conditions").and_then(Value::as_array_mut) {
        for c in conditions {
            if let Some(c) = c.as_object_mut() {
                c.remove("lastTransitionTime");
            }
        }
    }
    if let Some(map) = status.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_rollout_is_kept_only_under_the_objects_generation_and_until_promoted() {
        let object = |generation: i64, rollout: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "reconciler.dev/v1alpha1", "kind": "ClusterReconciler",
                "metadata": {"name": "g", "generation": generation},
                "status": {"rollout": rollout},
            }))
            .expect("an object")
        };
        let rollout = |generation: i64, phase: &str| {
            json!({"from": "sha256:a", "to": "sha256:b", "step": 1, "phase": phase,
                   "generation": generation, "began": "2026-12-07T22:00:00Z"})
        };
        for phase in ["Progressing", "Paused", "RolledBack", "Aborted"] {
            let kept = kept_rollout(&object(3, rollout(3, phase)));
            assert_eq!(
                kept,
                Some(rollout(3, phase)),
                "{phase} under the generation"
            );
        }
        assert_eq!(kept_rollout(&object(4, rollout(3, "Progressing"))), None);
        assert_eq!(kept_rollout(&object(3, rollout(3, "Promoted"))), None);
        assert_eq!(
            kept_rollout(&object(3, json!({"phase": "Progressing"}))),
            None,
            "no generation: a status of no known spec"
        );
    }

    fn loaded(hash: &str) -> Verdict {
        Verdict::Loaded {
            guest: "g".into(),
            hash: hash.into(),
        }
    }

    fn refused(kept: Option<&str>) -> Verdict {
        Verdict::Refused {
            cause: "SignatureInvalid",
            message: "m".into(),
            kept: kept.map(|h| ("g".to_owned(), h.to_owned())),
        }
    }

    #[test]
    fn a_verdict_and_the_guest_set_settle_when_they_name_the_same_running_version() {
        // Agreeing: written.
        assert!(settled(Some(&(2, loaded("a"))), 2, Some("a")));
        assert!(settled(Some(&(2, refused(Some("a")))), 2, Some("a")));
        assert!(settled(Some(&(2, refused(None))), 2, None));
        assert!(settled(Some(&(2, Verdict::Unloaded)), 2, None));
        // Loaded, its verdict not heard yet (the race CI met: `Ready=True`, "runs as guest ?").
        assert!(!settled(Some(&(2, loaded("a"))), 2, None));
        assert!(!settled(Some(&(2, loaded("b"))), 2, Some("a")));
        // Unloaded or refused without a kept version while the item still runs.
        assert!(!settled(Some(&(2, refused(None))), 2, Some("a")));
        assert!(!settled(Some(&(2, Verdict::Unloaded)), 2, Some("a")));
        assert!(!settled(Some(&(2, refused(Some("a")))), 2, None));
        // No verdict on this generation yet: nothing to disagree with.
        assert!(settled(None, 2, Some("a")));
        assert!(settled(Some(&(1, refused(None))), 2, Some("a")));
    }
}
