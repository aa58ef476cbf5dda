//! Attacks through the API server's own semantics: metadata carried by a status patch, owner
//! references the garbage collector acts on, Kubernetes' reserved label and annotation keys,
//! and writes that would hand back an object the guest may not read. The tests grant the guest
//! more for some of them (`tests/tests/hostile.rs`, `a_status_grant_…`; `tests/tests/gc.rs`).
//!
//! | `data.attack` | what it does | what the host must answer |
//! |---|---|---|
//! | `status-crd-labels`, `status-crd-annotations`, `status-crd-finalizer`, `status-crd-owner` | `patch-status` of CRD `victims.hostile.reconciler.dev` carrying `metadata.labels` / `annotations` / `finalizers` / a dangling `ownerReferences` entry (grant: CRD `/status`) | `invalid`, `patch.metadata.…:` |
//! | `status-crd-spec` | `patch-status` of that CRD carrying `spec` | `invalid`, `patch.spec:` |
//! | `status-namespace-psa` | `patch-status` of the victim Namespace labelling it `pod-security.kubernetes.io/enforce: privileged` (grant: Namespace `/status`) | `invalid`, `patch.metadata.labels:` |
//! | `status-crd-stale` | `patch-status` of the CRD with `metadata.resourceVersion: "1"` and an empty status | `conflict`: the precondition still reaches the server; its text withheld (CRDs are not readable) |
//! | `readback-apply-secret` | a no-op apply of Secret `readback` in its own namespace (grant: write Secret, no read) | `ok`; `detail` is the object handed back, which must hold no data |
//! | `readback-patch-pod` | an empty status patch of Pod `readback` (grant: Pod `/status`, no read) | `ok`; `detail` is the object handed back, which must hold no spec |
//! | `readback-error-secret` | apply Secret `readback` with another `type` (immutable) | `invalid`, the server's text withheld |
//! | `readback-guess-secret` | `apply-with` Secret `readback` without force, guessing its `data` (a conflict would say the guess is wrong) | `denied`: an unforced apply needs a read grant |
//! | `apply-owner-dangling` | apply `ConfigMap owned` owned by a `ConfigMap` that does not exist | `invalid`, `object.metadata.ownerReferences[0]:` |
//! | `apply-owner-stale-uid` | … owned by its own `ConfigMap keep` under another uid | `invalid`, `object.metadata.ownerReferences[0].uid:` |
//! | `apply-owner-unreadable` | … owned by a `Secret` | `denied` |
//! | `apply-owner-ok` | … owned by the attack's own `ConfigMap`, as the cache holds it | `ok` (a well-formed owner reference still works) |
//! | `apply-label-psa` | apply a `ConfigMap` labelled `pod-security.kubernetes.io/enforce` | `denied` |
//! | `apply-annotation-sa-token` | apply a `ConfigMap` annotated `kubernetes.io/service-account.name` | `denied` |
//! | `apply-metadata-deletion` | apply a `ConfigMap` with `metadata.deletionTimestamp` | `invalid`, `object.metadata.deletionTimestamp:` |

use reconciler_guest::bindings::reconciler::api::cluster;
use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{Gvk, ObjectRef};

use super::{Answer, Attack, Target, answer, apply_value};

/// The cluster-scoped victim the status attacks aim at; the tests create it.
pub const VICTIM_CRD: &str = "victims.hostile.reconciler.dev";

fn crd() -> ObjectRef {
    ObjectRef {
        kind: Gvk::new("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        namespace: None,
        name: VICTIM_CRD.to_owned(),
    }
}

fn patch_status(target: &ObjectRef, patch: &Value) -> Answer {
    answer(cluster::patch_status(target, &patch.to_string()), |o| o)
}

/// A `ConfigMap owned` in the guest's own namespace with `metadata` added.
fn apply_owned(t: &Target, metadata: &Value) -> Answer {
    let mut body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "owned", "namespace": t.own},
        "data": {"owned": "yes"},
    });
    if let (Some(into), Some(extra)) = (body["metadata"].as_object_mut(), metadata.as_object()) {
        into.extend(extra.clone());
    }
    apply_value(&body)
}

fn owned_by(kind: &str, name: &str, uid: &str) -> Value {
    json!({"ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}]})
}

/// The uid of the guest's own attack `ConfigMap`, from the object the reconcile was handed: the
/// lister's cache of every `ConfigMap` is another watch than the primary's (label-selected),
/// and may not hold it yet.
pub(super) fn own_uid(t: &Target) -> String {
    t.uid.clone()
}

fn readback_secret(t: &Target, extra: &Value) -> Answer {
    let mut body = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "readback", "namespace": t.own},
    });
    if let (Some(into), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        into.extend(extra.clone());
    }
    answer(cluster::apply(&body.to_string()), |o| o)
}

pub const ATTACKS: &[(&str, Attack)] = &[
    ("status-crd-labels", |_| {
        patch_status(
            &crd(),
            &json!({"metadata": {"labels": {"hijacked": "yes"}}}),
        )
    }),
    ("status-crd-annotations", |_| {
        patch_status(
            &crd(),
            &json!({"metadata": {"annotations": {"hijacked": "yes"}}}),
        )
    }),
    ("status-crd-finalizer", |_| {
        patch_status(
            &crd(),
            &json!({"metadata": {"finalizers": ["hostile.reconciler.dev/block"]}}),
        )
    }),
    ("status-crd-owner", |_| {
        patch_status(
            &crd(),
            &json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": "nobody", "uid": "00000000-0000-4000-8000-000000000000"}]}}),
        )
    }),
    ("status-crd-spec", |_| {
        patch_status(&crd(), &json!({"spec": {"scope": "Namespaced"}}))
    }),
    ("status-namespace-psa", |t| {
        let namespace = ObjectRef {
            kind: Gvk::new("", "v1", "Namespace"),
            namespace: None,
            name: t.victim.clone(),
        };
        patch_status(
            &namespace,
            &json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
        )
    }),
    ("status-crd-stale", |_| {
        patch_status(
            &crd(),
            &json!({"metadata": {"resourceVersion": "1"}, "status": {}}),
        )
    }),
    ("readback-apply-secret", |t| readback_secret(t, &json!({}))),
    ("readback-patch-pod", |t| {
        let pod = ObjectRef::namespaced(Gvk::new("", "v1", "Pod"), t.own.clone(), "readback");
        patch_status(&pod, &json!({"status": {}}))
    }),
    ("readback-guess-secret", |t| {
        let body = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "readback", "namespace": t.own},
            "data": {"password": "Z3Vlc3M="},
        });
        let unforced = cluster::ApplyOptions { force: false };
        answer(cluster::apply_with(&body.to_string(), unforced), |o| o)
    }),
    ("readback-error-secret", |t| {
        readback_secret(t, &json!({"type": "kubernetes.io/tls"}))
    }),
    ("apply-owner-dangling", |t| {
        apply_owned(
            t,
            &owned_by(
                "ConfigMap",
                "nobody",
                "00000000-0000-4000-8000-000000000000",
            ),
        )
    }),
    ("apply-owner-stale-uid", |t| {
        apply_owned(
            t,
            &owned_by("ConfigMap", "keep", "00000000-0000-4000-8000-000000000001"),
        )
    }),
    ("apply-owner-unreadable", |t| {
        apply_owned(
            t,
            &owned_by("Secret", "readback", "00000000-0000-4000-8000-000000000002"),
        )
    }),
    ("apply-owner-ok", |t| {
        let uid = own_uid(t);
        apply_owned(t, &owned_by("ConfigMap", &t.me.name, &uid))
    }),
    ("apply-label-psa", |t| {
        apply_owned(
            t,
            &json!({"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}),
        )
    }),
    ("apply-annotation-sa-token", |t| {
        apply_owned(
            t,
            &json!({"annotations": {"kubernetes.io/service-account.name": "default"}}),
        )
    }),
    ("apply-metadata-deletion", |t| {
        apply_owned(t, &json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}))
    }),
];
