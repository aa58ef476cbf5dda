//! config-reloader on the Rust SDK, a port of the Go guest `guests/go/config-reloader` with the
//! same behaviour (docs/examples/config-reloader.md; `tests/tests/config_reloader.rs` runs both
//! live). A Deployment lists `ConfigMaps` of its namespace in the annotation
//! `reloader.example/configmaps: "a,b"`; the guest keeps `reloader.example/config-hash` on its
//! Pod template equal to a hash of those `ConfigMaps`' `data` and `binaryData`, so a change to one
//! rolls the Pods.
//!
//! - Its grant writes Deployments with `writeVerbs: {apps/v1/Deployment: [patch]}`, and it
//!   applies a partial object (name, namespace, the hash annotation) without `force`
//!   ([`cluster::apply_with`]), so every other field stays its owner's; if another manager owns
//!   the annotation itself, the condition turns False (`HashConflict`, naming it) and the
//!   reconcile is retried with backoff.
//! - A `ConfigMap` change reconciles the Deployments whose annotation lists it: a computed index
//!   ([`INDEX`], [`index_values`]) the host keeps over the Deployments, so a `ConfigMap` event is
//!   a lookup in the host's memory, not a guest call.
//! - A malformed list or a missing `ConfigMap` keeps the last hash and says so: condition
//!   `reloader.example/ConfigHashed` False (`InvalidAnnotation`, `ConfigMapNotFound`) and a
//!   Warning event. Without the annotation, the hash and the condition are removed.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, ComputedIndex, Guest, Gvk, HostError, Indexes, Json, Manifest, ObjectRef,
    ReconcileError, Request, cluster, event, gvk, lister, transient,
};
use sha2::{Digest, Sha256};

/// The list a user writes on the Deployment.
pub const LIST_ANNOTATION: &str = "reloader.example/configmaps";
/// The hash the guest writes on the Pod template.
pub const HASH_ANNOTATION: &str = "reloader.example/config-hash";
/// The condition it keeps among the Deployment's.
pub const CONDITION_TYPE: &str = "reloader.example/ConfigHashed";

fn deployment_kind() -> Gvk {
    gvk!("apps", "v1", "Deployment")
}

fn config_map_kind() -> Gvk {
    gvk!("", "v1", "ConfigMap")
}

struct Reloader;

impl Guest for Reloader {
    fn manifest() -> Manifest {
        Manifest::new("config-reloader", deployment_kind())
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(deployment) = req.object_value()? else {
            return Ok(Action::await_change());
        };
        let conditions = deployment["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let current = deployment["spec"]["template"]["metadata"]["annotations"][HASH_ANNOTATION]
            .as_str()
            .map(str::to_owned);
        let Some(list) = deployment["metadata"]["annotations"][LIST_ANNOTATION].as_str() else {
            // Not (or no longer) ours: drop the hash and the condition if they are there.
            if current.is_some() {
                apply_hash(&req.ref_, None)
                    .map_err(|e| transient(format!("removing the hash: {}", e.describe())))?;
            }
            write_condition(&req.ref_, &conditions, None)?;
            return Ok(Action::await_change());
        };
        let namespace = req.ref_.namespace.clone().unwrap_or_default();
        let outcome = desired(&namespace, list)?;
        if let Some(hash) = &outcome.hash
            && current.as_deref() != Some(hash.as_str())
        {
            match apply_hash(&req.ref_, Some(hash)) {
                Ok(()) => {}
                Err(HostError::Conflict(why)) => {
                    // Another field manager owns the annotation: say who, and retry with backoff.
                    let message = format!("the hash annotation is another field manager's: {why}");
                    event::warning(&req.ref_, "HashConflict", message.clone());
                    let condition = json!({"type": CONDITION_TYPE, "status": "False",
                        "reason": "HashConflict", "message": message});
                    write_condition(&req.ref_, &conditions, Some(condition))?;
                    return Err(transient(message));
                }
                Err(e) => return Err(transient(format!("applying the hash: {}", e.describe()))),
            }
        }
        if !outcome.ok {
            event::warning(&req.ref_, outcome.reason, outcome.message.clone());
        }
        let condition = json!({
            "type": CONDITION_TYPE,
            "status": if outcome.ok { "True" } else { "False" },
            "reason": outcome.reason,
            "message": outcome.message,
        });
        write_condition(&req.ref_, &conditions, Some(condition))?;
        Ok(Action::await_change())
    }
}

/// The index of the `ConfigMaps` each Deployment lists: a `ConfigMap` event is looked up in it
/// by name, among the Deployments of its namespace.
pub const INDEX: &str = "configmaps";

impl Indexes for Reloader {
    fn indexes() -> Vec<ComputedIndex> {
        vec![ComputedIndex::new(INDEX, config_map_kind())]
    }

    fn index(_name: String, primary: Json) -> Vec<String> {
        index_values(&primary)
    }
}

/// The `ConfigMaps` a Deployment (its JSON) lists; none when its list is missing or malformed
/// (its reconcile says so, and the next change of the Deployment indexes it again).
#[must_use]
pub fn index_values(deployment: &str) -> Vec<String> {
    let Ok(deployment) = reconciler_guest::serde_json::from_str::<Value>(deployment) else {
        return Vec::new();
    };
    deployment["metadata"]["annotations"][LIST_ANNOTATION]
        .as_str()
        .and_then(|list| parse_list(list).ok())
        .map(|names| names.into_iter().collect())
        .unwrap_or_default()
}

/// The `ConfigMap` names of an annotation value (`a, b`), sorted and once each, or why it is
/// malformed: an empty entry or one that is not a `ConfigMap` name.
///
/// # Errors
///
/// The first malformed entry, described.
pub fn parse_list(value: &str) -> Result<BTreeSet<String>, String> {
    let mut names = BTreeSet::new();
    for entry in value.split(',') {
        let name = entry.trim();
        if name.is_empty() {
            return Err(format!("{LIST_ANNOTATION} {value:?} has an empty entry"));
        }
        if !is_subdomain(name) {
            return Err(format!(
                "{LIST_ANNOTATION} lists {name:?}, which is not a ConfigMap name"
            ));
        }
        names.insert(name.to_owned());
    }
    Ok(names)
}

/// A DNS-1123 subdomain, as a `ConfigMap`'s name must be.
fn is_subdomain(name: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.split('.').all(label)
}

/// The hash of `ConfigMaps` (name and contents, in name order): hex of SHA-256's first 16 bytes.
#[must_use]
pub fn hash<'a>(contents: impl IntoIterator<Item = (&'a str, &'a Value)>) -> String {
    let mut digest = Sha256::new();
    for (name, content) in contents {
        digest.update(name.as_bytes());
        digest.update([0]);
        digest.update(content.to_string().as_bytes()); // serde_json's maps keep keys sorted
        digest.update([0]);
    }
    digest.finalize()[..16]
        .iter()
        .fold(String::with_capacity(32), |mut hex, byte| {
            let _ = write!(hex, "{byte:02x}");
            hex
        })
}

/// The condition a reconcile leaves, and the hash to apply (none: keep the last one).
struct Outcome {
    hash: Option<String>,
    ok: bool,
    reason: &'static str,
    message: String,
}

/// What the annotation `list` asks for in `namespace`.
fn desired(namespace: &str, list: &str) -> Result<Outcome, ReconcileError> {
    let names = match parse_list(list) {
        Ok(names) => names,
        Err(why) => {
            return Ok(Outcome {
                hash: None,
                ok: false,
                reason: "InvalidAnnotation",
                message: format!("{why}; the last hash is kept"),
            });
        }
    };
    let mut contents = Vec::new();
    let mut missing = Vec::new();
    for name in &names {
        let at = ObjectRef::namespaced(config_map_kind(), namespace, name.as_str());
        match lister::get(&at).map_err(|e| transient(format!("reading {at}: {}", e.describe())))? {
            Some(config_map) => contents.push((
                name.as_str(),
                json!({"data": config_map["data"], "binaryData": config_map["binaryData"]}),
            )),
            None => missing.push(name.as_str()),
        }
    }
    if !missing.is_empty() {
        return Ok(Outcome {
            hash: None,
            ok: false,
            reason: "ConfigMapNotFound",
            message: format!(
                "ConfigMap {} not found in namespace {namespace}; the last hash is kept",
                missing.join(", ")
            ),
        });
    }
    let listed: Vec<&str> = names.iter().map(String::as_str).collect();
    Ok(Outcome {
        hash: Some(hash(contents.iter().map(|(n, c)| (*n, c)))),
        ok: true,
        reason: "Hashed",
        message: format!("hash of ConfigMap {}", listed.join(", ")),
    })
}

/// Applies the Deployment with only the Pod template's hash annotation (none: server-side apply
/// then removes the one it set before), never taking a field from another manager.
fn apply_hash(deployment: &ObjectRef, hash: Option<&str>) -> Result<(), HostError> {
    let mut body = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment.name, "namespace": deployment.namespace},
    });
    if let Some(hash) = hash {
        body["spec"] = json!({"template": {"metadata": {"annotations": {HASH_ANNOTATION: hash}}}});
    }
    cluster::apply_with(&body, cluster::ApplyOptions { force: false }).map(drop)
}

/// Sets (none: removes) the guest's condition among the Deployment's, keeping the others as
/// written and the transition time while the status holds; writes nothing when nothing
/// changes. The list is written whole (a merge patch replaces lists).
fn write_condition(
    deployment: &ObjectRef,
    conditions: &[Value],
    condition: Option<Value>,
) -> Result<(), ReconcileError> {
    let previous = conditions.iter().find(|c| c["type"] == CONDITION_TYPE);
    let mut kept: Vec<Value> = conditions
        .iter()
        .filter(|c| c["type"] != CONDITION_TYPE)
        .cloned()
        .collect();
    match (condition, previous) {
        (None, None) => return Ok(()),
        (None, Some(_)) => {}
        (Some(mut condition), previous) => {
            // A DeploymentCondition's two times: the last change of status, and the last write.
            let now = json!(reconciler_guest::conditions::now());
            condition["lastTransitionTime"] = now.clone();
            condition["lastUpdateTime"] = now;
            if let Some(previous) = previous
                && previous["status"] == condition["status"]
            {
                condition["lastTransitionTime"] = previous["lastTransitionTime"].clone();
                if previous["reason"] == condition["reason"]
                    && previous["message"] == condition["message"]
                {
                    return Ok(());
                }
            }
            kept.push(condition);
        }
    }
    cluster::patch_status(deployment, &json!({ "conditions": kept }))
        .map(drop)
        .map_err(|e| {
            transient(format!(
                "status write of {deployment} failed: {}",
                e.describe()
            ))
        })
}

reconciler_guest::export_indexing!(Reloader);

// Natively only (`cargo test --target x86_64-unknown-linux-gnu`), where the SDK's fake host is.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use reconciler_guest::event::EventType;
    use reconciler_guest::testing::{Call, FakeHost};

    #[test]
    fn a_list_is_names_sorted_once_each_and_a_malformed_one_says_where() {
        let names: Vec<String> = parse_list(" b,a , b").unwrap().into_iter().collect();
        assert_eq!(names, ["a", "b"]);
        assert!(parse_list("a,,b").unwrap_err().contains("empty entry"));
        assert!(parse_list("a,B_c").unwrap_err().contains("\"B_c\""));
        assert!(parse_list("").unwrap_err().contains("empty entry"));
        assert!(parse_list("a.b-c,x").is_ok());
        assert!(parse_list("-a").is_err());
    }

    #[test]
    fn a_deployment_is_indexed_by_the_configmaps_it_lists_and_a_bad_list_by_none() {
        let deployment = |annotations: Value| {
            json!({"metadata": {"name": "web", "namespace": "apps", "annotations": annotations}})
                .to_string()
        };
        assert_eq!(
            index_values(&deployment(json!({LIST_ANNOTATION: "b, a"}))),
            ["a", "b"]
        );
        assert!(index_values(&deployment(json!({LIST_ANNOTATION: "a,,b"}))).is_empty());
        assert!(index_values(&deployment(json!({"other": "a"}))).is_empty());
        assert!(index_values("not json").is_empty());
    }

    #[test]
    fn the_hash_follows_every_name_and_byte_of_the_contents() {
        let one = json!({"data": {"k": "v"}, "binaryData": null});
        let other = json!({"data": {"k": "w"}, "binaryData": null});
        let h = hash([("a", &one)]);
        assert_eq!(h.len(), 32);
        assert_eq!(h, hash([("a", &one)]));
        assert_ne!(h, hash([("a", &other)]));
        assert_ne!(h, hash([("b", &one)]));
        assert_ne!(h, hash([("a", &one), ("b", &one)]));
    }

    fn web() -> ObjectRef {
        ObjectRef::namespaced(deployment_kind(), "apps", "web")
    }

    /// The Deployment `apps/web` listing `list`, and the `ConfigMaps` `a` and `b` of its namespace
    /// (and an `a` elsewhere, which it must not read).
    fn cluster(list: &str) -> FakeHost {
        let config_map = |namespace: &str, name: &str, value: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"namespace": namespace, "name": name}, "data": {"k": value}})
        };
        FakeHost::new().with_objects([
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"namespace": "apps", "name": "web",
                                "annotations": {LIST_ANNOTATION: list}},
                   "spec": {"replicas": 2}}),
            config_map("apps", "a", "1"),
            config_map("apps", "b", "2"),
            config_map("other", "a", "elsewhere"),
        ])
    }

    /// The guest's condition in a status patch, as `status reason: message`.
    fn condition(call: &Call) -> String {
        let Call::PatchStatus { target, patch } = call else {
            panic!("not a status patch: {call:?}");
        };
        assert_eq!(*target, web());
        let [condition] = patch["status"]["conditions"].as_array().unwrap().as_slice() else {
            panic!("not one condition: {patch}");
        };
        assert_eq!(condition["type"], CONDITION_TYPE);
        let text = |field: &str| condition[field].as_str().unwrap_or_default().to_owned();
        format!("{} {}: {}", text("status"), text("reason"), text("message"))
    }

    #[test]
    fn a_reconcile_applies_the_hash_of_the_listed_configmaps_and_says_so() {
        let host = cluster("b, a").install();
        Reloader::reconcile(host.request(&web())).unwrap();

        let expected = hash([
            ("a", &json!({"data": {"k": "1"}, "binaryData": null})),
            ("b", &json!({"data": {"k": "2"}, "binaryData": null})),
        ]);
        let writes = host.writes();
        assert_eq!(writes.len(), 2, "{writes:?}");
        assert_eq!(
            writes[0],
            Call::ApplyWith {
                object: json!({"apiVersion": "apps/v1", "kind": "Deployment",
                               "metadata": {"name": "web", "namespace": "apps"},
                               "spec": {"template": {"metadata": {"annotations": {HASH_ANNOTATION: expected}}}}}),
                force: false,
            }
        );
        assert_eq!(condition(&writes[1]), "True Hashed: hash of ConfigMap a, b");
        // The apply merged into the Deployment: the next reconcile finds the hash and the
        // condition in place and writes nothing.
        let deployment = host.object(&web()).unwrap();
        assert_eq!(deployment["spec"]["replicas"], 2);
        Reloader::reconcile(host.request(&web())).unwrap();
        assert_eq!(host.writes().len(), 2, "{:?}", host.writes());
    }

    #[test]
    fn a_missing_configmap_keeps_the_hash_and_warns() {
        let host = cluster("a,missing").install();
        Reloader::reconcile(host.request(&web())).unwrap();
        let writes = host.writes();
        let message = "ConfigMap missing not found in namespace apps; the last hash is kept";
        assert!(
            matches!(&writes[0], Call::RecordEvent(e) if e.event_type == EventType::Warning
                && e.reason == "ConfigMapNotFound" && e.message == message),
            "{writes:?}"
        );
        assert_eq!(
            condition(&writes[1]),
            format!("False ConfigMapNotFound: {message}")
        );
        assert_eq!(writes.len(), 2, "no apply: {writes:?}");
    }

    #[test]
    fn a_hash_annotation_another_manager_owns_is_a_retried_conflict_that_names_it() {
        let host = cluster("a").install();
        host.fail(
            &["apply-with"],
            HostError::Conflict("conflict with \"kubectl\"".into()),
        );
        let Err(ReconcileError::Transient(why)) = Reloader::reconcile(host.request(&web())) else {
            panic!("a conflict must be retried");
        };
        assert!(why.contains("kubectl"), "{why}");
        let writes = host.writes();
        assert!(
            matches!(&writes[0], Call::ApplyWith { force: false, .. }),
            "{writes:?}"
        );
        assert!(
            matches!(&writes[1], Call::RecordEvent(e) if e.reason == "HashConflict"),
            "{writes:?}"
        );
        assert!(
            condition(&writes[2]).starts_with("False HashConflict: "),
            "{writes:?}"
        );
    }
}
