//! What a write may carry, and what it hands back: the rules that keep a write grant from
//! reaching past what it names through the API server's own semantics.
//!
//! - **A status patch changes status.** For several kinds (`CustomResourceDefinition`, `Namespace`
//!   among them) the API server applies `metadata` in a patch of the `status` subresource:
//!   labels, annotations, finalizers and owner references all stick. A guest granted only
//!   `…/status` could block a deletion with a finalizer, relabel an object into another
//!   selector, set a Namespace's `pod-security.kubernetes.io/enforce`, or name a missing owner
//!   so that the garbage collector deletes the object. So a status patch may carry `status`
//!   and nothing else but `metadata.resourceVersion` (optimistic concurrency), whatever the
//!   kind, and the rule is the host's, not the API server's version-dependent behaviour.
//! - **An apply's metadata is what the guest may set.** Name, namespace, labels, annotations,
//!   owner references, its declared finalizer, and `resourceVersion`/`uid` as preconditions;
//!   nothing the API server owns. Label and annotation keys under `kubernetes.io` and `k8s.io`
//!   (and their subdomains) are Kubernetes' own and act cluster-wide (Pod Security admission,
//!   service-account tokens, node roles): a guest sets them only where its grant lists them
//!   (`guests.<name>.labels` / `.annotations`; a list there is the complete set of keys it may
//!   set). An owner reference names an object the guest may read, in the dependent's namespace
//!   (or cluster-scoped), with the uid the guest's cache holds: never dangling, so the garbage
//!   collector never deletes an object on a guest's word. A new owner is a deferred delete of
//!   the dependent (it goes when the owner does), so it needs `delete` on the dependent's kind;
//!   without it, only the owners the cached object carries may be applied (the API server's
//!   `OwnerReferencesPermissionEnforcement` admission likewise asks `delete` on the dependent).
//!   `blockOwnerDeletion` holds up the owner's deletion, so it needs `patch` on the owner's kind
//!   (the host's rule; the admission asks `update` on the owner's `finalizers`).
//! - **An apply under `patch` without `create` never creates**: `metadata.uid` and
//!   `resourceVersion` must be non-empty when set (an empty uid is no precondition to the API
//!   server), and the host adds the cached object's uid (`cluster::existing_only`).
//! - **The declared finalizer goes only on the primary kind**, the one the host removes it from.
//! - **A write returns only what the guest may read.** The object the API server returns is
//!   handed back whole for a kind in the grant's `read`; for a kind the guest may only write,
//!   it gets the object's identity and concurrency fields (no labels, annotations, spec, data,
//!   status), and the server's error texts are withheld (they can quote the stored object).

use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::context::CallContext;
use super::error::HostError;
use crate::cluster::objects::{Gvk, ObjectRef};
use crate::cluster::validation;
use crate::config::Verb;

/// The metadata an applied object may carry; anything else is the API server's to set.
const APPLY_METADATA: &[&str] = &[
    "name",
    "namespace",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    // Preconditions only: a mismatch is a conflict.
    "resourceVersion",
    "uid",
];

/// The fields of an owner reference (`metav1.OwnerReference`).
const OWNER_REFERENCE_FIELDS: &[&str] = &[
    "apiVersion",
    "kind",
    "name",
    "uid",
    "controller",
    "blockOwnerDeletion",
];

/// What a guest sees of an object it may write but not read: who it is and where it stands.
const IDENTITY_FIELDS: &[&str] = &[
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
];

/// A guest's JSON key as a step of a field path: plain when it is a plain word, else quoted
/// and escaped.
fn path_step(key: &str) -> String {
    if !key.is_empty() && key.len() <= 64 && key.chars().all(|c| c.is_ascii_alphanumeric()) {
        key.to_owned()
    } else {
        validation::shown(key)
    }
}

/// Checks a status merge patch: `status`, and `metadata.resourceVersion`, only.
pub(super) fn status_patch(patch: &Value) -> Result<(), HostError> {
    let Some(fields) = patch.as_object() else {
        return Err(HostError::Invalid("patch: must be a JSON object".into()));
    };
    for (key, value) in fields {
        match key.as_str() {
            "status" => {}
            "metadata" => {
                let Some(metadata) = value.as_object() else {
                    return Err(HostError::Invalid(
                        "patch.metadata: must be an object holding only resourceVersion".into(),
                    ));
                };
                for (field, value) in metadata {
                    if field != "resourceVersion" {
                        return Err(HostError::Invalid(format!(
                            "patch.metadata.{}: a status patch changes status only (and may carry metadata.resourceVersion); the API server would apply metadata in a status patch of some kinds, which a grant for …/status does not cover — write metadata with apply under a write grant for the kind",
                            path_step(field)
                        )));
                    }
                    if !value.is_string() {
                        return Err(HostError::Invalid(
                            "patch.metadata.resourceVersion: must be a string".into(),
                        ));
                    }
                }
            }
            other => {
                return Err(HostError::Invalid(format!(
                    "patch.{}: a status patch changes status only (and may carry metadata.resourceVersion)",
                    path_step(other)
                )));
            }
        }
    }
    Ok(())
}

/// Whether a label or annotation key belongs to Kubernetes itself (`kubernetes.io`, `k8s.io`
/// and their subdomains), where keys act cluster-wide.
pub(crate) fn reserved_key(key: &str) -> bool {
    let Some((prefix, _)) = key.rsplit_once('/') else {
        return false;
    };
    // Compared as bytes, without allocating: this runs for every key of every apply.
    let prefix = prefix.as_bytes();
    [b"kubernetes.io".as_slice(), b"k8s.io"]
        .iter()
        .any(|domain| {
            let Some(head_len) = prefix.len().checked_sub(domain.len()) else {
                return false;
            };
            let (head, tail) = prefix.split_at(head_len);
            tail.eq_ignore_ascii_case(domain) && (head.is_empty() || head.ends_with(b"."))
        })
}

/// Whether `key` matches one of a grant's key patterns: the key itself, or a prefix ending in
/// `*` (`example.com/*`, `*`).
fn key_granted(patterns: &[String], key: &str) -> bool {
    patterns.iter().any(|p| match p.strip_suffix('*') {
        Some(prefix) => key.starts_with(prefix),
        None => p == key,
    })
}

/// Checks the keys of `labels` or `annotations` against the grant.
fn metadata_keys(
    guest: &str,
    grant: &crate::config::Grant,
    field: &'static str,
    patterns: Option<&[String]>,
    value: &Value,
) -> Result<(), HostError> {
    let Some(map) = value.as_object() else {
        return Err(HostError::Invalid(format!(
            "object.metadata.{field}: must be an object of strings"
        )));
    };
    for (key, value) in map {
        if !value.is_string() {
            return Err(HostError::Invalid(format!(
                "object.metadata.{field}.{}: must be a string",
                path_step(key)
            )));
        }
        if grant.unrestricted {
            continue;
        }
        let allowed = match patterns {
            Some(patterns) => key_granted(patterns, key),
            None => !reserved_key(key),
        };
        if !allowed {
            let why = if reserved_key(key) {
                " (kubernetes.io and k8s.io keys belong to Kubernetes and act cluster-wide)"
            } else {
                ""
            };
            let singular = field.trim_end_matches('s');
            return Err(HostError::Denied(format!(
                "guest `{guest}` may not set {singular} {}{why}: add it to {}",
                validation::shown(key),
                grant.place_in_full(guest, field)
            )));
        }
    }
    Ok(())
}

impl CallContext {
    /// Checks what an applied object's metadata carries beyond its identity (which
    /// `cluster::applied_ref` checked): see the module docs.
    pub(super) fn apply_metadata(&self, body: &Value, target: &ObjectRef) -> Result<(), HostError> {
        let Some(metadata) = body.get("metadata").and_then(Value::as_object) else {
            return Ok(());
        };
        for (key, value) in metadata {
            match key.as_str() {
                "labels" | "annotations" => {
                    let grant = &self.guest.grant;
                    let (field, patterns) = if key == "labels" {
                        ("labels", &grant.labels)
                    } else {
                        ("annotations", &grant.annotations)
                    };
                    let patterns = patterns.as_deref();
                    metadata_keys(self.name(), grant, field, patterns, value)?;
                }
                "ownerReferences" => self.owner_references(value, target)?,
                // An empty one is no precondition to the API server (an apply naming uid "" still
                // creates), so it would slip an apply past `existing_only`.
                "resourceVersion" | "uid" if value.as_str().is_none_or(str::is_empty) => {
                    return Err(HostError::Invalid(format!(
                        "object.metadata.{key}: must be a non-empty string"
                    )));
                }
                known if APPLY_METADATA.contains(&known) => {}
                other => {
                    return Err(HostError::Invalid(format!(
                        "object.metadata.{}: set by the API server, not by an applied object; an apply may set {}",
                        path_step(other),
                        APPLY_METADATA.join(", ")
                    )));
                }
            }
        }
        Ok(())
    }

    /// Each owner reference names a readable object the guest's cache holds, with its uid.
    fn owner_references(&self, value: &Value, dependent: &ObjectRef) -> Result<(), HostError> {
        let Some(list) = value.as_array() else {
            return Err(HostError::Invalid(
                "object.metadata.ownerReferences: must be a list".into(),
            ));
        };
        // An owner reference is a deferred delete: the garbage collector deletes the dependent
        // once its owners are gone. Without `delete` on the dependent's kind, only the owners
        // the object already carries may be applied (as the API server's
        // OwnerReferencesPermissionEnforcement asks delete on the dependent to change them).
        let may_delete =
            self.guest
                .grant
                .may_write(self.name(), &dependent.kind, None, Verb::Delete);
        let carried = match &may_delete {
            Ok(()) => None,
            Err(_) => Some(self.carried_owners(dependent)?),
        };
        let mut uids = BTreeSet::new();
        for (i, entry) in list.iter().enumerate() {
            let field = format!("object.metadata.ownerReferences[{i}]");
            let owner = owner_reference(&field, entry)?;
            if let (Some(carried), Err(denied)) = (&carried, &may_delete)
                && !carried.contains(&owner.uid)
            {
                return Err(HostError::Denied(format!(
                    "{field} would let the garbage collector delete {dependent} once {} is gone, which only a guest that may delete it may arrange: {denied}",
                    owner.kind
                )));
            }
            self.guest.grant.may_read(self.name(), &owner.kind.kind)?;
            if owner.block_owner_deletion {
                self.guest
                    .grant
                    .may_write(self.name(), &owner.kind.kind, None, Verb::Patch)
                    .map_err(|d| {
                        HostError::Denied(format!(
                            "{field}.blockOwnerDeletion holds up the deletion of {}: {d}",
                            owner.kind
                        ))
                    })?;
            }
            if !uids.insert(owner.uid.clone()) {
                return Err(HostError::Invalid(format!(
                    "{field}.uid: names the same owner twice"
                )));
            }
            self.owner_exists(&field, &owner, dependent)?;
        }
        Ok(())
    }

    /// The owner as the guest's cache holds it: in the dependent's namespace, or cluster-scoped
    /// (the only owner a cluster-scoped dependent may have), with the same uid.
    /// The uids of the owners `dependent` carries as the guest's cache holds it (none when
    /// it is not cached, or its kind not read).
    fn carried_owners(&self, dependent: &ObjectRef) -> Result<BTreeSet<String>, HostError> {
        if self
            .guest
            .grant
            .may_read(self.name(), &dependent.kind)
            .is_err()
        {
            return Ok(BTreeSet::new());
        }
        let Some(text) = self.guest.providers.lister.get(dependent)? else {
            return Ok(BTreeSet::new());
        };
        let object: Value = serde_json::from_str(&text).unwrap_or_default();
        let owners = object["metadata"]["ownerReferences"].as_array();
        Ok(owners
            .into_iter()
            .flatten()
            .filter_map(|o| o["uid"].as_str().map(str::to_owned))
            .collect())
    }

    fn owner_exists(
        &self,
        field: &str,
        owner: &OwnerReference,
        dependent: &ObjectRef,
    ) -> Result<(), HostError> {
        let lister = &self.guest.providers.lister;
        // The dependent's namespace first, then cluster-scoped.
        let scopes = dependent.namespace.iter().cloned().map(Some).chain([None]);
        for namespace in scopes {
            let at = ObjectRef {
                namespace,
                ..owner.kind.clone()
            };
            let Some(text) = lister.get(&at)? else {
                continue;
            };
            if uid_of(&text).as_deref() == Some(owner.uid.as_str()) {
                return Ok(());
            }
            return Err(HostError::Invalid(format!(
                "{field}.uid: {at} has another uid now; an owner reference must name the owner as it is (a stale uid dangles, and the garbage collector deletes dangling dependents)"
            )));
        }
        let place = dependent.namespace.as_deref().map_or_else(
            || "cluster-scoped".to_owned(),
            |ns| format!("in namespace {ns} or cluster-scoped"),
        );
        Err(HostError::Invalid(format!(
            "{field}: no {} named {} {place} in the guest's cache; an owner reference must name an existing object the guest reads (a dangling one lets the garbage collector delete the dependent)",
            owner.kind.kind,
            validation::shown(&owner.kind.name)
        )))
    }

    /// What a write hands back: the whole object for a readable kind, else its identity.
    pub(super) fn returned(&self, kind: &Gvk, object: Value) -> Value {
        if self.guest.grant.may_read(self.name(), kind).is_ok() {
            return object;
        }
        identity(&object)
    }

    /// The API server's answer to a write of a kind the guest may not read: the error's kind
    /// stays (a conflict is still retried), its text is withheld, since messages can quote the
    /// stored object.
    pub(super) fn withheld(&self, what: &str, kind: &Gvk, error: HostError) -> HostError {
        // A refusal by the API server's authorizer quotes the request, never the stored object.
        if matches!(error, HostError::Forbidden(_))
            || self.guest.grant.may_read(self.name(), kind).is_ok()
        {
            return error;
        }
        let text = format!(
            "{what} failed ({}); the API server's message is withheld because guest `{}` may not read {kind}",
            error.kind(),
            self.name()
        );
        match error {
            HostError::Denied(_) => HostError::Denied(text),
            HostError::Forbidden(_) => HostError::Forbidden(text),
            HostError::NotFound(_) => HostError::NotFound(text),
            HostError::Conflict(_) => HostError::Conflict(text),
            HostError::FieldConflict(_) => HostError::FieldConflict(text),
            HostError::Invalid(_) => HostError::Invalid(text),
            HostError::Unavailable(_) => HostError::Unavailable(text),
            HostError::Limited(_) => HostError::Limited(text),
            HostError::Other(_) => HostError::Other(text),
        }
    }
}

/// An owner reference, checked for shape.
struct OwnerReference {
    /// The owner, with no namespace yet (an owner reference names none).
    kind: ObjectRef,
    uid: String,
    block_owner_deletion: bool,
}

fn owner_reference(field: &str, entry: &Value) -> Result<OwnerReference, HostError> {
    let Some(map) = entry.as_object() else {
        return Err(HostError::Invalid(format!("{field}: must be an object")));
    };
    if let Some(other) = map
        .keys()
        .find(|k| !OWNER_REFERENCE_FIELDS.contains(&k.as_str()))
    {
        return Err(HostError::Invalid(format!(
            "{field}.{}: not a field of an owner reference",
            path_step(other)
        )));
    }
    let text = |name: &str| {
        map.get(name)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .ok_or_else(|| {
                HostError::Invalid(format!("{field}.{name}: must be a non-empty string"))
            })
    };
    let flag = |name: &str| match map.get(name) {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(HostError::Invalid(format!(
            "{field}.{name}: must be a boolean"
        ))),
    };
    let api_version = text("apiVersion")?;
    if api_version.matches('/').count() > 1 || api_version.starts_with('/') {
        return Err(HostError::Invalid(format!(
            "{field}.apiVersion: {} is not group/version or version",
            validation::shown(api_version)
        )));
    }
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let owner = ObjectRef {
        kind: Gvk::new(group, version, text("kind")?),
        namespace: None,
        name: text("name")?.to_owned(),
    };
    validation::object_ref(field, &owner)?;
    flag("controller")?;
    Ok(OwnerReference {
        kind: owner,
        uid: text("uid")?.to_owned(),
        block_owner_deletion: flag("blockOwnerDeletion")?,
    })
}

/// `metadata.uid` of a cached object's JSON text, reading nothing else into memory.
pub(super) fn uid_of(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Object {
        metadata: Metadata,
    }
    #[derive(serde::Deserialize)]
    struct Metadata {
        uid: Option<String>,
    }
    serde_json::from_str::<Object>(text).ok()?.metadata.uid
}

/// An object's `apiVersion`, `kind` and identity metadata, nothing else.
fn identity(object: &Value) -> Value {
    let mut out = Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(v) = object.get(field) {
            out.insert(field.to_owned(), v.clone());
        }
    }
    let mut metadata = Map::new();
    if let Some(m) = object.get("metadata").and_then(Value::as_object) {
        for field in IDENTITY_FIELDS {
            if let Some(v) = m.get(*field) {
                metadata.insert((*field).to_owned(), v.clone());
            }
        }
    }
    out.insert("metadata".to_owned(), Value::Object(metadata));
    Value::Object(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_status_patch_may_carry_status_and_a_resource_version_only() {
        assert!(status_patch(&json!({"status": {"phase": "Ready"}})).is_ok());
        assert!(status_patch(&json!({"status": null})).is_ok());
        assert!(status_patch(&json!({"metadata": {"resourceVersion": "7"}, "status": {}})).is_ok());
        for (patch, field) in [
            (
                json!({"metadata": {"labels": {"a": "b"}}}),
                "patch.metadata.labels:",
            ),
            (
                json!({"metadata": {"finalizers": ["x/y"]}}),
                "patch.metadata.finalizers:",
            ),
            (
                json!({"metadata": {"ownerReferences": []}}),
                "patch.metadata.ownerReferences:",
            ),
            (
                json!({"metadata": {"annotations": {}}}),
                "patch.metadata.annotations:",
            ),
            (
                json!({"metadata": {"resourceVersion": 7}}),
                "patch.metadata.resourceVersion:",
            ),
            (json!({"metadata": null}), "patch.metadata:"),
            (json!({"spec": {}}), "patch.spec:"),
            (json!({"apiVersion": "v1"}), "patch.apiVersion:"),
            (json!([]), "patch:"),
        ] {
            let err = status_patch(&patch).unwrap_err();
            assert!(
                matches!(&err, HostError::Invalid(m) if m.starts_with(field)),
                "{patch}: {err:?}"
            );
        }
    }

    #[test]
    fn kubernetes_keys_are_reserved_and_others_are_not() {
        for key in [
            "pod-security.kubernetes.io/enforce",
            "kubernetes.io/service-account.name",
            "node-role.kubernetes.io/control-plane",
            "k8s.io/x",
            "a.b.K8S.io/x",
        ] {
            assert!(reserved_key(key), "{key}");
        }
        for key in [
            "app",
            "example.com/x",
            "notkubernetes.io/x",
            "kubernetes.io.evil/x",
        ] {
            assert!(!reserved_key(key), "{key}");
        }
        let patterns = vec![
            "example.com/*".to_owned(),
            "pod-security.kubernetes.io/warn".to_owned(),
        ];
        assert!(key_granted(&patterns, "example.com/a"));
        assert!(key_granted(&patterns, "pod-security.kubernetes.io/warn"));
        assert!(!key_granted(
            &patterns,
            "pod-security.kubernetes.io/enforce"
        ));
        assert!(!key_granted(&patterns, "app"));
    }

    #[test]
    fn the_identity_of_an_object_is_all_a_write_only_grant_sees() {
        let secret = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "9",
                "labels": {"a": "b"}, "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{}}"},
                "managedFields": []},
            "data": {"password": "aHVudGVyMg=="},
        });
        assert_eq!(
            identity(&secret),
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "9"}})
        );
    }
}
