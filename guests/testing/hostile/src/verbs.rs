//! Attacks on a grant that names verbs: the tests grant `v1/PodTemplate` with `writeVerbs:
//! {v1/PodTemplate: [patch]}` (and read it), create `PodTemplate` `existing` in the guest's own
//! namespace, and check on the API server what changed (`tests/tests/hostile.rs`,
//! `write_verbs_…`).
//!
//! | `data.attack` | what it does | what the host must answer |
//! |---|---|---|
//! | `verbs-create` | apply PodTemplate `fresh`, which does not exist | `denied` (patch, not create): nothing is created |
//! | `verbs-create-uid` | the same for `fresh-uid`, carrying a made-up `metadata.uid` | `conflict` from the API server, which refuses to create an object an apply names by uid |
//! | `verbs-create-empty-uid` | the same for `fresh-empty`, carrying `metadata.uid: ""` (no precondition to the API server) | `invalid`, `object.metadata.uid:` |
//! | `verbs-owner-new` | apply `existing` with an owner reference to the attack's own `ConfigMap` (a deferred delete of `existing`) | `denied` |
//! | `verbs-patch` | apply only a label to PodTemplate `existing` | `ok` |
//! | `verbs-delete` | delete PodTemplate `existing` | `denied` |

use reconciler_guest::bindings::reconciler::api::cluster;
use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{Gvk, ObjectRef};

use super::{Attack, Target, answer, apply_value};

fn pod_template(t: &Target, name: &str, metadata: &Value) -> Value {
    let mut body = json!({
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": t.own},
    });
    if let (Some(into), Some(extra)) = (body["metadata"].as_object_mut(), metadata.as_object()) {
        into.extend(extra.clone());
    }
    body
}

/// A whole `PodTemplate`, as creating one needs.
fn new_pod_template(t: &Target, name: &str, metadata: &Value) -> Value {
    let mut body = pod_template(t, name, metadata);
    body["template"] =
        json!({"spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}});
    body
}

pub const ATTACKS: &[(&str, Attack)] = &[
    ("verbs-create", |t| {
        apply_value(&new_pod_template(t, "fresh", &json!({})))
    }),
    ("verbs-create-uid", |t| {
        let uid = json!({"uid": "00000000-0000-4000-8000-000000000009"});
        apply_value(&new_pod_template(t, "fresh-uid", &uid))
    }),
    ("verbs-create-empty-uid", |t| {
        apply_value(&new_pod_template(t, "fresh-empty", &json!({"uid": ""})))
    }),
    ("verbs-owner-new", |t| {
        let owner = json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
            "name": t.me.name, "uid": super::boundary::own_uid(t)}]});
        apply_value(&pod_template(t, "existing", &owner))
    }),
    ("verbs-patch", |t| {
        apply_value(&pod_template(
            t,
            "existing",
            &json!({"labels": {"patched": "yes"}}),
        ))
    }),
    ("verbs-delete", |t| {
        let existing =
            ObjectRef::namespaced(Gvk::new("", "v1", "PodTemplate"), t.own.clone(), "existing");
        answer(cluster::delete(&existing), |d| format!("deleted={d}"))
    }),
];
