//! `cluster`: writes to the API server as the guest (field manager = guest name), and events.

use serde_json::{Value, json};
use wasmtime::component::{HasSelf, Linker};

use super::capability::{Capability, LoadCheck};
use super::context::{CallContext, Scope, as_json, embed};
use super::error::HostError;
use super::replay;
pub(crate) use super::seams::EventType;
pub use super::seams::{Cluster, EventRecord};
use crate::cluster::objects::{Gvk, ObjectRef};
use crate::cluster::validation;
use crate::config::Verb;
use crate::sandbox::wit::reconciler::api::cluster as wit;
use crate::sandbox::wit::types;

pub(super) const CAPABILITY: Capability = Capability {
    interface: "cluster",
    requirement,
};

/// A declared finalizer is written by the host on the primary kind: the guest needs that write
/// (`patch`, where `writeVerbs` names the kind).
fn requirement(check: &LoadCheck<'_>) -> Vec<String> {
    let manifest = check.manifest;
    let guest = &manifest.name;
    if manifest.finalizer.is_none() {
        return Vec::new();
    }
    match check
        .grant
        .may_write(guest, &manifest.primary, None, Verb::Patch)
    {
        Ok(()) => Vec::new(),
        Err(denied) if denied.field == "writeVerbs" => vec![format!(
            "patch {} (to add and remove its finalizer; add patch to {})",
            manifest.primary,
            check.grant.place(guest, "writeVerbs")
        )],
        Err(_) => vec![format!(
            "write {} (to add and remove its finalizer; add it to {})",
            manifest.primary,
            check.grant.place(guest, "write")
        )],
    }
}

pub(super) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<CallContext>>(linker, get)
}

/// The object a body names, checked: apiVersion, kind and metadata.name present and valid,
/// metadata.namespace valid when present, and no finalizer but the guest's declared one.
fn applied_ref(body: &Value, scope: &Scope) -> Result<ObjectRef, HostError> {
    let declared_finalizer = scope.finalizer.as_deref();
    if !body.is_object() {
        return Err(HostError::Invalid("object: must be a JSON object".into()));
    }
    for field in ["apiVersion", "kind"] {
        if !body.get(field).is_some_and(Value::is_string) {
            return Err(HostError::Invalid(format!(
                "object.{field}: must be a string"
            )));
        }
    }
    let metadata = body
        .get("metadata")
        .filter(|m| m.is_object())
        .ok_or_else(|| HostError::Invalid("object.metadata: must be an object".into()))?;
    if !metadata.get("name").is_some_and(Value::is_string) {
        return Err(HostError::Invalid(
            "object.metadata.name: must be a string (generateName is not supported by apply)"
                .into(),
        ));
    }
    if metadata.get("namespace").is_some_and(|n| !n.is_string()) {
        return Err(HostError::Invalid(
            "object.metadata.namespace: must be a string".into(),
        ));
    }
    let api_version = body["apiVersion"].as_str().unwrap_or_default();
    if api_version.matches('/').count() > 1 || api_version.starts_with('/') {
        return Err(HostError::Invalid(format!(
            "object.apiVersion: {} is not group/version or version",
            validation::shown(api_version)
        )));
    }
    let target = ObjectRef::of_object(body).ok_or_else(|| {
        HostError::Invalid("object: needs apiVersion, kind and metadata.name".into())
    })?;
    validation::object_ref("object", &target)?;
    if let Some(finalizers) = metadata.get("finalizers") {
        let list = finalizers.as_array().ok_or_else(|| {
            HostError::Invalid("object.metadata.finalizers: must be a list".into())
        })?;
        for f in list {
            let name = f.as_str().unwrap_or_default();
            if Some(name) != declared_finalizer {
                return Err(HostError::Invalid(format!(
                    "object.metadata.finalizers: {} is not the finalizer this guest declares in its manifest ({})",
                    validation::shown(name),
                    declared_finalizer.unwrap_or("none")
                )));
            }
            // The host removes it from objects of the primary kind alone (on deletion, and
            // when the guest is unloaded): on another kind it would hold up deletion for good.
            if let Some(primary) = &scope.primary
                && *primary != target.kind
            {
                return Err(HostError::Invalid(format!(
                    "object.metadata.finalizers: {} goes only on the guest's primary kind {primary}, which the host removes it from; on {} nothing would",
                    validation::shown(name),
                    target.kind
                )));
            }
        }
    }
    Ok(target)
}

/// The test-only switch (debug builds only): `RECONCILER_HOST_TEST_SKIP_WRITE_GRANT=1` lets the
/// writes of a guest with its own ServiceAccount past the host's grant check, so that a test can
/// show the API server refusing them as that account. Release builds do not read it.
pub(crate) const SKIP_WRITE_GRANT_ENV: &str = "RECONCILER_HOST_TEST_SKIP_WRITE_GRANT";

/// Whether the test-only switch is on; read once.
pub(crate) fn skip_write_grant() -> bool {
    #[cfg(debug_assertions)]
    {
        static SKIP: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *SKIP.get_or_init(|| std::env::var_os(SKIP_WRITE_GRANT_ENV).is_some_and(|v| v == "1"))
    }
    #[cfg(not(debug_assertions))]
    false
}

impl CallContext {
    /// The grant and scope checks every write shares, once its arguments are valid.
    fn may_write(
        &self,
        object: &ObjectRef,
        subresource: Option<&str>,
        verb: Verb,
    ) -> Result<(), HostError> {
        let grant = &self.guest.grant;
        if !(grant.service_account.is_some() && skip_write_grant()) {
            grant.may_write(self.name(), &object.kind, subresource, verb)?;
        }
        self.guest
            .scope
            .check(self.name(), object.namespace.as_deref(), "write")
    }

    /// `body` to apply, made unable to create its object when the grant gives `patch` on the
    /// kind but not `create`: with `metadata.uid` set the API server refuses to create
    /// (409, "uid mismatch") instead of creating. A uid the guest wrote stays (the API server
    /// checks it); otherwise the cached object's is added, so an object the cache does not
    /// hold is refused here.
    fn existing_only(&self, mut body: Value, target: &ObjectRef) -> Result<Value, HostError> {
        let grant = &self.guest.grant;
        let named = body["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty());
        if grant.may_create(&target.kind) || named {
            return Ok(body);
        }
        let refused = |why: String| {
            HostError::Denied(format!(
                "guest `{}` may patch {} but not create it ({}): {why}",
                self.name(),
                target.kind,
                grant.place(self.name(), "writeVerbs")
            ))
        };
        if grant.may_read(self.name(), &target.kind).is_err() {
            return Err(refused(format!(
                "the host cannot tell whether {target} exists, since the guest does not read {}; set metadata.uid to the object's",
                target.kind
            )));
        }
        let Some(cached) = self.guest.providers.lister.get(target)? else {
            return Err(refused(format!(
                "{target} is not in the guest's cache, so the apply would create it"
            )));
        };
        let Some(uid) = super::bodies::uid_of(&cached) else {
            return Err(refused(format!(
                "{target} is cached without metadata.uid (an offline fixture written without one?), so the apply could not be kept from creating it"
            )));
        };
        body["metadata"]["uid"] = Value::String(uid);
        Ok(body)
    }

    /// Why shadow mode may not read `kind` live for a comparison, if it may not: the guest's
    /// grant (checked against its account's access review at load) does not let it read the
    /// kind, and the host's own identity must not read on its behalf what it could not.
    fn unreadable(&self, kind: &Gvk) -> Option<String> {
        let denied = self.guest.grant.may_read(self.name(), kind).is_err();
        denied.then(|| format!("guest `{}` may not read {kind}", self.name()))
    }

    async fn cluster_patch_status(
        &mut self,
        object: &ObjectRef,
        patch: &str,
    ) -> Result<Value, HostError> {
        validation::object_ref("ref", object)?;
        let (patch, _body) = self.parse_body("patch", patch).await?;
        super::bodies::status_patch(&patch)?;
        self.may_write(object, Some("status"), Verb::Patch)?;
        let provider = self.guest.providers.cluster.clone();
        // A patch that would change nothing costs the API server as much as one that does (and
        // every controller's status write comes back as an event, reconciled once more): not
        // sent, and no write token taken. Checked on the cache, charged to the guest's CPU.
        if !self.shadow()
            && let Some(current) =
                self.host_work(1, || provider.unchanged_by_status_patch(object, &patch))
        {
            if let Some(metrics) = &self.guest.metrics {
                metrics.write_unchanged(self.name());
            }
            return Ok(self.returned(&object.kind, current));
        }
        self.write_token().await;
        let what = format!("status patch of {object}");
        if self.shadow() {
            if let Some(why) = self.unreadable(&object.kind) {
                self.differs(crate::sandbox::shadow::blind(what, &patch, &why));
                return Ok(self.returned(&object.kind, object.identity()));
            }
            // Compared, not sent; the guest reads back what the write would have returned.
            let live = provider
                .get(object)
                .await
                .map_err(|e| self.withheld(&what, &object.kind, e))?
                .ok_or_else(|| HostError::NotFound(format!("{object} does not exist")))?;
            let (patched, difference) = crate::sandbox::shadow::status_patch(what, &live, &patch);
            self.differs(difference);
            return Ok(self.returned(&object.kind, patched));
        }
        match provider.patch_status(self.name(), object, &patch).await {
            Ok(written) => Ok(self.returned(&object.kind, written)),
            Err(e) => Err(self.withheld(&what, &object.kind, e)),
        }
    }

    async fn cluster_apply(&mut self, body: &str, force: bool) -> Result<Value, HostError> {
        let (value, _body) = self.parse_body("object", body).await?;
        let target = applied_ref(&value, &self.guest.scope)?;
        self.may_write(&target, None, Verb::Patch)?;
        // Without force, the API server answers `conflict` exactly when a field the guest sets
        // holds another manager's different value: on a kind it may not read, an oracle.
        if !force && let Err(denied) = self.guest.grant.may_read(self.name(), &target.kind) {
            return Err(HostError::Denied(format!(
                "an unforced apply of {} would tell by its conflicts whether the stored values are the ones it guesses, and {denied}; apply with force, or grant read",
                target.kind
            )));
        }
        self.apply_metadata(&value, &target)?;
        let value = self.existing_only(value, &target)?;
        self.write_token().await;
        let provider = self.guest.providers.cluster.clone();
        let what = format!("apply of {target}");
        if self.shadow() {
            if let Some(why) = self.unreadable(&target.kind) {
                self.differs(crate::sandbox::shadow::blind(what, &value, &why));
                return Ok(self.returned(&target.kind, value));
            }
            let live = provider
                .get(&target)
                .await
                .map_err(|e| self.withheld(&what, &target.kind, e))?;
            self.differs(crate::sandbox::shadow::apply(what, live.as_ref(), &value));
            return Ok(self.returned(&target.kind, live.unwrap_or(value)));
        }
        match provider.apply(self.name(), &value, force).await {
            Ok(written) => Ok(self.returned(&target.kind, written)),
            Err(e) => Err(self.withheld(&what, &target.kind, e)),
        }
    }

    async fn cluster_delete(&mut self, object: &ObjectRef) -> Result<bool, HostError> {
        validation::object_ref("ref", object)?;
        self.may_write(object, None, Verb::Delete)?;
        self.write_token().await;
        let provider = self.guest.providers.cluster.clone();
        let what = format!("delete of {object}");
        if self.shadow() {
            if let Some(why) = self.unreadable(&object.kind) {
                let line = format!("not compared ({why}); it would be deleted if it exists");
                self.differs(crate::sandbox::shadow::single(what, true, line));
                return Ok(true);
            }
            let exists = provider
                .get(object)
                .await
                .map_err(|e| self.withheld(&what, &object.kind, e))?
                .is_some();
            let difference =
                crate::sandbox::shadow::single(what, exists, "object exists: it would be deleted");
            self.differs(difference);
            return Ok(exists);
        }
        provider
            .delete(self.name(), object)
            .await
            .map_err(|e| self.withheld(&what, &object.kind, e))
    }

    async fn cluster_record_event(&self, record: &EventRecord) -> Result<(), HostError> {
        validation::object_ref("event.regarding", &record.regarding)?;
        validation::event_reason("event.reason", &record.reason)?;
        // Events are allowed about anything the guest may read.
        self.guest
            .grant
            .may_read(self.name(), &record.regarding.kind)?;
        self.guest.scope.check(
            self.name(),
            record.regarding.namespace.as_deref(),
            "record events",
        )?;
        if self.guest.budget.events.check().is_err() {
            return Err(HostError::Limited(format!(
                "guest `{}` records events faster than its event rate ({}/s); this one was dropped",
                self.name(),
                self.guest.grant.limits.rates().events.per_second
            )));
        }
        if self.shadow() {
            tracing::debug!(guest = %self.name(), key = %self.key, reason = %record.reason, "shadow: event not sent");
            return Ok(());
        }
        self.guest
            .providers
            .cluster
            .record_event(self.name(), record)
            .await
    }
}

impl wit::Host for CallContext {
    async fn patch_status(
        &mut self,
        r: types::ObjectRef,
        patch: String,
    ) -> Result<String, types::Error> {
        let object: ObjectRef = r.into();
        self.recorded(
            ("cluster", "patch-status"),
            || json!({ "ref": object, "patch": embed(&patch) }),
            Ok,
            async |this| this.cluster_patch_status(&object, &patch).await,
            Value::clone,
        )
        .await
        .map(|v| v.to_string())
        .map_err(Into::into)
    }

    async fn apply(&mut self, object: String) -> Result<String, types::Error> {
        self.recorded(
            ("cluster", "apply"),
            || json!({ "object": embed(&object) }),
            Ok,
            async |this| this.cluster_apply(&object, true).await,
            Value::clone,
        )
        .await
        .map(|v| v.to_string())
        .map_err(Into::into)
    }

    async fn apply_with(
        &mut self,
        object: String,
        options: wit::ApplyOptions,
    ) -> Result<String, types::Error> {
        let force = options.force;
        self.recorded(
            ("cluster", "apply-with"),
            || json!({ "object": embed(&object), "force": force }),
            Ok,
            async |this| this.cluster_apply(&object, force).await,
            Value::clone,
        )
        .await
        .map(|v| v.to_string())
        .map_err(Into::into)
    }

    async fn delete(&mut self, r: types::ObjectRef) -> Result<bool, types::Error> {
        let object: ObjectRef = r.into();
        self.recorded(
            ("cluster", "delete"),
            || json!({ "ref": object }),
            |v| v.as_bool().ok_or_else(|| replay::malformed("a boolean")),
            async |this| this.cluster_delete(&object).await,
            as_json,
        )
        .await
        .map_err(Into::into)
    }

    async fn record_event(&mut self, event: wit::Event) -> Result<(), types::Error> {
        let record = EventRecord {
            regarding: event.regarding.into(),
            event_type: match event.event_type {
                wit::EventType::Normal => EventType::Normal,
                wit::EventType::Warning => EventType::Warning,
            },
            reason: event.reason,
            message: validation::message(&event.message),
        };
        self.recorded(
            ("cluster", "record-event"),
            || as_json(&record),
            |_| Ok(()),
            async |this| this.cluster_record_event(&record).await,
            as_json,
        )
        .await
        .map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::cluster::objects::Gvk;
    use crate::sandbox::capabilities::EventRecord;
    use crate::sandbox::capabilities::context::{GuestContext, Providers, Scope};
    use crate::sandbox::capabilities::testing::Harness;
    use wit::Host as _;

    const GRANT: &str = "{read: [v1/ConfigMap], write: [v1/ConfigMap, v1/ConfigMap/status]}";

    fn cm(namespace: Option<&str>, name: &str) -> types::ObjectRef {
        types::ObjectRef {
            kind: Gvk::new("", "v1", "ConfigMap").into(),
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    fn seed(h: &Harness) {
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
    }

    #[tokio::test]
    async fn a_namespace_that_smuggles_a_path_is_invalid_and_nothing_is_written() {
        let h = Harness::new();
        seed(&h);
        let mut call = h.call(GRANT, Scope::default());
        let err = call
            .delete(cm(Some("victim/secrets/topsecret?x="), "a"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("ref.namespace:")),
            "{err:?}"
        );
        let err = call
            .patch_status(cm(Some("ns"), "a/../b"), "{}".into())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("ref.name:")),
            "{err:?}"
        );
        assert!(
            h.cache.get(&cm(Some("ns"), "a").into()).is_some(),
            "the object is still there"
        );
    }

    #[tokio::test]
    async fn apply_bodies_are_checked_like_refs() {
        let h = Harness::new();
        let mut call = h.call(
            GRANT,
            Scope {
                finalizer: Some("example.com/mine".into()),
                ..Scope::default()
            },
        );
        for (body, field) in [
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "a/b"}}),
                "object.namespace",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x?y"}}),
                "object.name",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "x"}}),
                "object.metadata.name",
            ),
            (
                json!({"apiVersion": "a/b/c", "kind": "ConfigMap", "metadata": {"name": "x"}}),
                "object.apiVersion",
            ),
            (
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "finalizers": ["orphan"]}}),
                "object.metadata.finalizers",
            ),
            (json!([1, 2]), "object"),
        ] {
            let err = call.apply(body.to_string()).await.unwrap_err();
            assert!(
                matches!(&err, types::Error::Invalid(m) if m.starts_with(field)),
                "{field}: {err:?}"
            );
        }
        let ok = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", "finalizers": ["example.com/mine"]}});
        call.apply(ok.to_string()).await.unwrap();
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "x", "namespace": "ns"}});
        assert!(matches!(
            call.apply(secret.to_string()).await,
            Err(types::Error::Denied(_))
        ));
    }

    #[tokio::test]
    async fn the_declared_finalizer_goes_on_the_primary_kind_alone_and_preconditions_are_not_empty()
    {
        let h = Harness::new();
        let mut call = h.call(
            GRANT,
            Scope {
                finalizer: Some("example.com/mine".into()),
                primary: Some(Gvk::new("samplecrd.k8s.io", "v1", "Network")),
                ..Scope::default()
            },
        );
        let held = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", "finalizers": ["example.com/mine"]}});
        let err = call.apply(held.to_string()).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.contains("goes only on the guest's primary kind samplecrd.k8s.io/v1/Network")),
            "{err:?}"
        );
        for field in ["uid", "resourceVersion"] {
            let body = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x", "namespace": "ns", field: ""}});
            let err = call.apply(body.to_string()).await.unwrap_err();
            assert!(
                matches!(&err, types::Error::Invalid(m) if m.starts_with(&format!("object.metadata.{field}: must be a non-empty string"))),
                "{err:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_patch_only_grant_neither_creates_deletes_nor_adds_owners() {
        let h = Harness::new();
        for (name, uid) in [("a", "uid-a"), ("b", "uid-b")] {
            h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "ns", "uid": uid}}));
        }
        let patch_only =
            "{read: [v1/ConfigMap], write: [v1/ConfigMap], writeVerbs: {v1/ConfigMap: [patch]}}";
        let mut call = h.call(patch_only, Scope::default());
        let ghost = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "namespace": "ns"}});
        let err = call.apply(ghost.to_string()).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Denied(m) if m.contains("may patch v1/ConfigMap but not create it") && m.contains("not in the guest's cache")),
            "{err:?}"
        );
        assert!(h.cache.get(&cm(Some("ns"), "ghost").into()).is_none());
        // A uid the guest names itself reaches the server, which refuses to create (offline too).
        let named = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ghost", "namespace": "ns", "uid": "made-up"}});
        let err = call.apply(named.to_string()).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Conflict(m) if m.contains("uid mismatch")),
            "{err:?}"
        );
        // An existing object: patched, under the uid the cache holds.
        let existing = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}});
        let applied: Value =
            serde_json::from_str(&call.apply(existing.to_string()).await.unwrap()).unwrap();
        assert_eq!(applied["metadata"]["uid"], "uid-a");
        assert_eq!(applied["data"]["k"], "v");
        let err = call.delete(cm(Some("ns"), "a")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Denied(m) if m.contains("may not delete v1/ConfigMap")),
            "{err:?}"
        );
        // A new owner is a deferred delete.
        let owned = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns",
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "b", "uid": "uid-b"}]}});
        let err = call.apply(owned.to_string()).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Denied(m) if m.contains("would let the garbage collector delete")),
            "{err:?}"
        );
        // ... which a grant with delete may arrange.
        let mut call = h.call(GRANT, Scope::default());
        call.apply(owned.to_string()).await.unwrap();
    }

    #[tokio::test]
    async fn writes_and_events_stay_inside_the_watch_namespace() {
        let h = Harness::new();
        seed(&h);
        let scope = Scope {
            namespace: Some("ns".into()),
            ..Scope::default()
        };
        let mut call = h.call(GRANT, scope);
        let err = call.delete(cm(Some("other"), "a")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Denied(m) if m.contains("--watch-namespace ns")),
            "{err:?}"
        );
        let event = wit::Event {
            regarding: cm(Some("other"), "a"),
            event_type: wit::EventType::Normal,
            reason: "Synced".into(),
            message: "m".into(),
        };
        assert!(matches!(
            call.record_event(event).await,
            Err(types::Error::Denied(_))
        ));
        assert!(
            call.patch_status(cm(Some("ns"), "a"), r#"{"status":{"x":1}}"#.into())
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn events_are_validated_and_rate_limited() {
        let h = Harness::new();
        seed(&h);
        let mut call = h.call(
            "{read: [v1/ConfigMap], limits: {eventsPerSecond: 1, eventBurst: 2}}",
            Scope::default(),
        );
        let event = |reason: &str| wit::Event {
            regarding: cm(Some("ns"), "a"),
            event_type: wit::EventType::Warning,
            reason: reason.into(),
            message: "line one\nline two".into(),
        };
        let err = call.record_event(event("bad reason")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("event.reason:")),
            "{err:?}"
        );
        call.record_event(event("Synced")).await.unwrap();
        call.record_event(event("Synced")).await.unwrap();
        let err = call.record_event(event("Synced")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Unavailable(m) if m.contains("event rate")),
            "{err:?}"
        );
        let recorded = &call.calls.as_ref().unwrap()[1].args;
        assert_eq!(
            recorded["message"], "line one\\nline two",
            "messages cannot forge lines"
        );
    }

    #[tokio::test]
    async fn oversized_and_malformed_patches_are_invalid() {
        let h = Harness::new();
        seed(&h);
        // Validation comes before the grant: even without a status write grant, a malformed
        // body is `invalid`.
        let mut call = h.call("{read: [v1/ConfigMap]}", Scope::default());
        let big = format!(
            r#"{{"status":{{"x":"{}"}}}}"#,
            "a".repeat(validation::MAX_BODY_BYTES)
        );
        let err = call
            .patch_status(cm(Some("ns"), "a"), big)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("patch:")),
            "{err:?}"
        );
        let err = call
            .patch_status(cm(Some("ns"), "a"), "[]".into())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("patch:")),
            "{err:?}"
        );
    }

    /// A guest that writes more kinds than it reads: Secrets and Pod status, write only.
    const WRITE_ONLY: &str = "{read: [v1/ConfigMap], write: [v1/ConfigMap, v1/ConfigMap/status, v1/Secret, v1/Pod/status, v1/Namespace/status]}";

    fn refused(result: Result<String, types::Error>) -> String {
        match result {
            Ok(v) => panic!("let through: {v}"),
            Err(types::Error::Invalid(m)) => format!("invalid: {m}"),
            Err(types::Error::Denied(m)) => format!("denied: {m}"),
            Err(other) => format!("{other:?}"),
        }
    }

    #[tokio::test]
    async fn a_status_patch_carries_status_only_whatever_the_kind() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team", "uid": "n1"}}));
        let before = h.cache.get(&ObjectRef {
            kind: Gvk::new("", "v1", "Namespace"),
            namespace: None,
            name: "team".into(),
        });
        let mut call = h.call(WRITE_ONLY, Scope::default());
        let namespace = types::ObjectRef {
            kind: Gvk::new("", "v1", "Namespace").into(),
            namespace: None,
            name: "team".into(),
        };
        for patch in [
            json!({"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}}),
            json!({"metadata": {"finalizers": ["example.com/block"]}, "status": {}}),
            json!({"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "gone", "uid": "x"}]}}),
            json!({"metadata": {"annotations": {"a": "b"}}}),
            json!({"spec": {"finalizers": []}}),
        ] {
            let answer = refused(
                call.patch_status(namespace.clone(), patch.to_string())
                    .await,
            );
            assert!(answer.starts_with("invalid: patch."), "{patch}: {answer}");
        }
        let ok = json!({"metadata": {"resourceVersion": "1"}, "status": {"phase": "Active"}});
        call.patch_status(namespace.clone(), ok.to_string())
            .await
            .expect("status with a resourceVersion passes");
        let after = h.cache.get(&ObjectRef::from(namespace));
        assert_eq!(
            after
                .as_ref()
                .and_then(|o| o.pointer("/metadata/labels").cloned()),
            before.and_then(|o| o.pointer("/metadata/labels").cloned()),
        );
    }

    #[tokio::test]
    async fn an_apply_sets_only_the_metadata_its_grant_allows() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "owner", "namespace": "ns", "uid": "u-owner"}}));
        h.cache.put(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u-secret"}}));
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "elsewhere", "namespace": "other", "uid": "u-else"}}));
        let mut call = h.call(GRANT, Scope::default());
        let cm = |metadata: Value| {
            let mut m = json!({"name": "x", "namespace": "ns"});
            json_patch::merge(&mut m, &metadata);
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": m}).to_string()
        };
        let owner = |kind: &str, name: &str, uid: &str| json!({"ownerReferences": [{"apiVersion": "v1", "kind": kind, "name": name, "uid": uid}]});
        for (metadata, expected) in [
            (
                json!({"labels": {"pod-security.kubernetes.io/enforce": "privileged"}}),
                "denied: guest `g` may not set label",
            ),
            (
                json!({"annotations": {"kubernetes.io/service-account.name": "default"}}),
                "denied: guest `g` may not set annotation",
            ),
            (
                owner("ConfigMap", "gone", "u-gone"),
                "invalid: object.metadata.ownerReferences[0]: no v1/ConfigMap named",
            ),
            (
                owner("ConfigMap", "owner", "u-stale"),
                "invalid: object.metadata.ownerReferences[0].uid:",
            ),
            (
                owner("ConfigMap", "elsewhere", "u-else"),
                "invalid: object.metadata.ownerReferences[0]: no v1/ConfigMap",
            ),
            (
                owner("Secret", "s", "u-secret"),
                "denied: guest `g` may not read v1/Secret",
            ),
            (
                json!({"ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "u-owner", "blockOwnerDeletion": true, "x": 1}]}),
                "invalid: object.metadata.ownerReferences[0].x:",
            ),
            (
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
                "invalid: object.metadata.deletionTimestamp:",
            ),
            (
                json!({"managedFields": []}),
                "invalid: object.metadata.managedFields:",
            ),
            (
                json!({"labels": {"a": 1}}),
                "invalid: object.metadata.labels.a:",
            ),
        ] {
            let answer = refused(call.apply(cm(metadata.clone())).await);
            assert!(answer.starts_with(expected), "{metadata}: {answer}");
        }
        assert!(
            h.cache.get(&cm_ref("x")).is_none(),
            "nothing refused was written"
        );
        let good = json!({"labels": {"app": "web", "example.com/tier": "a"}, "annotations": {"note": "n"}});
        let mut metadata = good;
        json_patch::merge(&mut metadata, &owner("ConfigMap", "owner", "u-owner"));
        call.apply(cm(metadata))
            .await
            .expect("an owner the guest reads, as it is");

        let listed = h.call(
            "{read: [v1/ConfigMap], write: [v1/ConfigMap], labels: [pod-security.kubernetes.io/*]}",
            Scope::default(),
        );
        let mut listed = listed;
        listed
            .apply(cm(
                json!({"labels": {"pod-security.kubernetes.io/warn": "baseline"}}),
            ))
            .await
            .expect("a reserved key the grant lists");
        let answer = refused(listed.apply(cm(json!({"labels": {"app": "web"}}))).await);
        assert!(
            answer.starts_with("denied:"),
            "a listed grant is the complete set: {answer}"
        );
    }

    fn cm_ref(name: &str) -> ObjectRef {
        ObjectRef {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("ns".into()),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn a_write_hands_back_only_what_the_guest_may_read() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "uid": "u", "resourceVersion": "3",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"data\":{\"password\":\"aHVudGVyMg==\"}}"}},
            "data": {"password": "aHVudGVyMg=="}}));
        h.cache.put(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "p"},
            "spec": {"containers": [{"name": "c", "env": [{"name": "TOKEN", "value": "hunter2"}]}]}}));
        let mut call = h.call(WRITE_ONLY, Scope::default());
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}});
        let returned = call.apply(secret.to_string()).await.unwrap();
        assert!(!returned.contains("aHVudGVyMg"), "{returned}");
        let mut returned: Value = serde_json::from_str(&returned).unwrap();
        assert!(returned["metadata"]["resourceVersion"].is_string());
        returned["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        assert_eq!(
            returned,
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "ns", "uid": "u"}})
        );
        let pod = types::ObjectRef {
            kind: Gvk::new("", "v1", "Pod").into(),
            namespace: Some("ns".into()),
            name: "p".into(),
        };
        let returned = call
            .patch_status(pod.clone(), r#"{"status":{}}"#.into())
            .await
            .unwrap();
        assert!(
            !returned.contains("hunter2") && !returned.contains("spec"),
            "{returned}"
        );
        let missing = types::ObjectRef {
            name: "missing".into(),
            ..pod
        };
        let err = call
            .patch_status(missing, r#"{"status":{}}"#.into())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::NotFound(m) if m.contains("withheld")),
            "{err:?}"
        );
        let readable = call
            .patch_status(cm(Some("ns"), "a"), r#"{"status":{}}"#.into())
            .await;
        assert!(
            readable.is_err(),
            "nothing seeded: the kind's own error passes as it is"
        );
        let recorded = serde_json::to_string(call.calls.as_ref().unwrap()).unwrap();
        assert!(!recorded.contains("hunter2") && !recorded.contains("aHVudGVyMg"));
    }

    const SHADOW: &str =
        "{mode: shadow, read: [v1/ConfigMap], write: [v1/ConfigMap, v1/ConfigMap/status]}";

    /// A write-only kind in shadow mode: the host reads nothing live on the guest's behalf, so
    /// neither the verdict nor what the guest reads back carries a stored value, and a delete
    /// cannot tell whether the object exists.
    #[tokio::test]
    async fn in_shadow_mode_a_kind_the_guest_may_not_read_is_never_read() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns", "labels": {"app": "hunter2"}},
            "data": {"password": "aHVudGVyMg=="}, "status": {"note": "hunter2"}}));
        let mut call = h.call(
            "{mode: shadow, write: [v1/Secret, v1/Secret/status]}",
            Scope::default(),
        );
        let secret = |name: &str| types::ObjectRef {
            kind: Gvk::new("", "v1", "Secret").into(),
            namespace: Some("ns".into()),
            name: name.into(),
        };
        let applied = json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "namespace": "ns"}, "data": {"password": "bmV3"}});
        let answer = call.apply(applied.to_string()).await.unwrap();
        let patched = call
            .patch_status(secret("s"), r#"{"status":{"note":"mine"}}"#.into())
            .await
            .unwrap();
        assert!(
            call.delete(secret("absent")).await.unwrap(),
            "not read: the answer cannot depend on whether it exists"
        );
        let shown: Vec<String> = call
            .shadow_differences
            .iter()
            .map(ToString::to_string)
            .collect();
        let why = "not compared (guest `g` may not read v1/Secret)";
        assert_eq!(
            shown,
            vec![
                format!("apply of v1/Secret ns/s: {why}; it would set:; data.password"),
                format!("status patch of v1/Secret ns/s: {why}; it would set:; status.note"),
                format!("delete of v1/Secret ns/absent: {why}; it would be deleted if it exists"),
            ]
        );
        for text in [answer, patched, shown.join("\n")] {
            assert!(
                !text.contains("hunter2") && !text.contains("aHVudGVyMg") && !text.contains("bmV3"),
                "{text}"
            );
        }
    }

    /// A cluster whose cache already shows whatever status patch comes: one sent is an error.
    struct AlreadySo(Value);

    #[async_trait::async_trait]
    impl crate::sandbox::capabilities::Cluster for AlreadySo {
        async fn patch_status(
            &self,
            _: &str,
            o: &ObjectRef,
            _: &Value,
        ) -> Result<Value, HostError> {
            Err(HostError::Other(format!(
                "the status patch of {o} was sent"
            )))
        }
        fn unchanged_by_status_patch(&self, _: &ObjectRef, _: &Value) -> Option<Value> {
            Some(self.0.clone())
        }
        async fn apply(&self, _: &str, _: &Value, _: bool) -> Result<Value, HostError> {
            Err(HostError::Other("sent".into()))
        }
        async fn delete(&self, _: &str, _: &ObjectRef) -> Result<bool, HostError> {
            Err(HostError::Other("sent".into()))
        }
        async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
            Ok(())
        }
        async fn get(&self, _: &ObjectRef) -> Result<Option<Value>, HostError> {
            Ok(Some(self.0.clone()))
        }
    }

    #[tokio::test]
    async fn a_status_patch_the_cache_already_shows_is_answered_from_it_after_every_check() {
        let h = Harness::new();
        let object = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "status": {"phase": "Ready"}});
        let metrics = crate::metrics::Metrics::new();
        let call = |grant: &str| {
            let providers = Providers {
                cluster: Arc::new(AlreadySo(object.clone())),
                ..h.providers()
            };
            let grant = serde_yaml::from_str(grant).expect("grant");
            let context = GuestContext::new("g", grant, providers).with_metrics(metrics.clone());
            CallContext::new(Arc::new(context), "ns/k".into(), None)
        };
        let patch = r#"{"status":{"phase":"Ready"}}"#;
        let returned = call(GRANT)
            .patch_status(cm(Some("ns"), "a"), patch.into())
            .await
            .expect("answered from the cache");
        let returned: Value = serde_json::from_str(&returned).unwrap();
        assert_eq!(returned["status"]["phase"], "Ready", "{returned}");
        let counted = |metrics: &crate::metrics::Metrics| {
            crate::metrics::sample(
                &metrics.render(),
                r#"reconciler_writes_unchanged_total{guest="g"}"#,
            )
        };
        assert_eq!(counted(&metrics), Some(1.0));

        // The grant, the scope and the body are checked first, as for a patch that is sent.
        let denied = call("{read: [v1/ConfigMap], write: [v1/ConfigMap]}")
            .patch_status(cm(Some("ns"), "a"), patch.into())
            .await;
        assert!(matches!(denied, Err(types::Error::Denied(_))), "{denied:?}");
        let invalid = call(GRANT)
            .patch_status(
                cm(Some("ns"), "a"),
                r#"{"status":{},"metadata":{"labels":{"x":"y"}}}"#.into(),
            )
            .await;
        assert!(
            matches!(invalid, Err(types::Error::Invalid(_))),
            "{invalid:?}"
        );
        assert_eq!(
            counted(&metrics),
            Some(1.0),
            "refused calls are not counted"
        );

        // Shadow mode compares with the live object, as before.
        call(SHADOW)
            .patch_status(cm(Some("ns"), "a"), patch.into())
            .await
            .expect("compared");
        assert_eq!(counted(&metrics), Some(1.0), "shadow mode compares instead");
    }

    #[tokio::test]
    async fn in_shadow_mode_writes_are_compared_not_made() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "v"}, "status": {"phase": "Ready"}}));
        let before = h.cache.get(&cm(Some("ns"), "a").into());
        let mut call = h.call(SHADOW, Scope::default());

        let same = call
            .patch_status(
                cm(Some("ns"), "a"),
                r#"{"status":{"phase":"Ready"}}"#.into(),
            )
            .await
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&same).unwrap()["status"]["phase"],
            "Ready"
        );
        assert!(
            call.shadow_differences.is_empty(),
            "an unchanged status agrees"
        );

        let changed = call
            .patch_status(
                cm(Some("ns"), "a"),
                r#"{"status":{"phase":"Failed"}}"#.into(),
            )
            .await
            .unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&changed).unwrap()["status"]["phase"],
            "Failed",
            "the guest reads back what the write would have returned"
        );
        let applied = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}, "data": {"k": "w"}});
        call.apply(applied.to_string()).await.unwrap();
        assert!(call.delete(cm(Some("ns"), "a")).await.unwrap(), "it exists");
        assert!(!call.delete(cm(Some("ns"), "gone")).await.unwrap());
        call.record_event(wit::Event {
            regarding: cm(Some("ns"), "a"),
            event_type: wit::EventType::Normal,
            reason: "Synced".into(),
            message: "m".into(),
        })
        .await
        .unwrap();

        let shown: Vec<String> = call
            .shadow_differences
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            vec![
                r#"status patch of v1/ConfigMap ns/a: status.phase: "Ready" → "Failed""#,
                r#"apply of v1/ConfigMap ns/a: data.k: "v" → "w""#,
                "delete of v1/ConfigMap ns/a: object exists: it would be deleted",
            ]
        );
        assert_eq!(
            h.cache.get(&cm(Some("ns"), "a").into()),
            before,
            "nothing was written"
        );
    }

    #[tokio::test]
    async fn shadow_mode_keeps_the_grant_and_the_checks() {
        let h = Harness::new();
        seed(&h);
        let mut call = h.call(SHADOW, Scope::default());
        let err = call
            .patch_status(cm(Some("ns"), "a/../b"), "{}".into())
            .await
            .unwrap_err();
        assert!(matches!(&err, types::Error::Invalid(_)), "{err:?}");
        let secret = types::ObjectRef {
            kind: Gvk::new("", "v1", "Secret").into(),
            namespace: Some("ns".into()),
            name: "s".into(),
        };
        let err = call.delete(secret).await.unwrap_err();
        assert!(matches!(&err, types::Error::Denied(_)), "{err:?}");
        let err = call
            .patch_status(cm(Some("ns"), "missing"), r#"{"status":{}}"#.into())
            .await
            .unwrap_err();
        assert!(matches!(&err, types::Error::NotFound(_)), "{err:?}");
        assert!(call.shadow_differences.is_empty());
    }
}
