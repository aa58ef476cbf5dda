//! Providers in `run`: the lister over the informer caches and the cluster writer; the guest's
//! work queue is the controller's (`controller/keys.rs`, which keeps a tenant's keys in its
//! namespace).
//!
//! Writes go to the API server with the guest's name as field manager, and every object the
//! server returns is recorded into the informer caches at once (read-your-writes, like the CRD
//! naming controller's mutation cache), so the next reconcile reads what was just written even
//! before the watch delivers it. An object comes back into a cache only if it is the object
//! that was asked for (same kind, namespace and name).
//!
//! URLs are built only from parts the capabilities validated, and names are percent-encoded
//! anyway. The kind's scope is checked against the reference (a namespaced kind needs a
//! namespace, a cluster-scoped kind has none) before anything is sent. Every write first
//! passes the [`WriteFence`](crate::replicas::fence::WriteFence): once the host loses its lease, nothing more is sent.
//!
//! A guest with its own ServiceAccount (`serviceAccount:` in its grant) writes as that account:
//! every write and event here is sent impersonating it ([`crate::sandbox::identity::client_as`]), on the
//! host's connection pool, and a `403` is [`HostError::Forbidden`], naming the account and the
//! verb. The live reads of shadow mode and discovery stay the host's.
//!
//! Events go through kube-runtime's `Recorder`, which aggregates repeats of the same
//! (object, type, reason, action) into one `events.k8s.io/v1` Event with a growing series count
//! instead of one Event per reconcile. The note is not part of that key: a later event of the
//! same reason on the same object counts in the series and keeps the first one's note.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use serde_json::Value;

use crate::cluster::informers::Informer;
use crate::cluster::objects::{Gvk, ObjectRef};
use crate::cluster::validation::path_segment;
use crate::replicas::fence::WriteFence;
use crate::sandbox::capabilities::lister::Listed;
use crate::sandbox::capabilities::{
    Cluster, Enqueuer, EventRecord, EventType as GuestEventType, HostError, Lister, Providers,
};

/// The providers of one guest in `run`; `queue` is its controller's.
pub(crate) fn providers(
    readable: BTreeMap<Gvk, Informer>,
    queue: Arc<dyn Enqueuer>,
    cluster: Arc<KubeCluster>,
    network: Option<Arc<dyn crate::sandbox::backends::NetworkBackend>>,
) -> Providers {
    Providers {
        lister: Arc::new(CacheLister(readable)),
        cluster,
        queue,
        network,
        http: None,
    }
}

/// Every write passes here first.
fn fence_check(fence: &WriteFence) -> Result<(), HostError> {
    if fence.is_open() {
        Ok(())
    } else {
        Err(HostError::Unavailable(
            "this host is no longer the leader (or is shutting down); nothing more is written"
                .into(),
        ))
    }
}

/// Maps an API error to the WIT error the guest sees; 409 marks the reconcile for a retry.
pub(crate) fn map_kube_error(e: kube::Error, what: &str) -> HostError {
    match e {
        kube::Error::Api(status) => {
            let message = format!("{what}: {} ({})", status.message, status.code);
            match status.code {
                409 => HostError::Conflict(message),
                404 => HostError::NotFound(message),
                400 | 422 => HostError::Invalid(message),
                401 | 403 => HostError::Denied(format!(
                    "{message}; the host's own Kubernetes identity lacks RBAC for this"
                )),
                429 | 500..=599 => HostError::Unavailable(message),
                _ => HostError::Other(message),
            }
        }
        other => HostError::Unavailable(format!("{what}: {other}")),
    }
}

/// Writes for one guest. Holds that guest's informers to record its writes into.
pub(crate) struct KubeCluster {
    /// The host's client: discovery and shadow mode's live reads.
    client: kube::Client,
    /// What writes are sent with: the host's client, or the guest's ServiceAccount on it.
    writer: kube::Client,
    account: Option<crate::config::ServiceAccountRef>,
    /// Informers of the kinds the guest may read, for read-your-writes and API resources.
    informers: BTreeMap<Gvk, Informer>,
    /// Kinds found by discovery: the resource and whether it is namespaced.
    /// Kinds it writes without reading them: resolved through the run's one discovery cache.
    discovery: crate::cluster::discovery::Resolver,
    recorder: Recorder,
    /// Held while an event is published. kube's recorder finds a repeat by its cache, filled
    /// only once the create returns, so two repeats at once (a trap retried within the create's
    /// round trip) made two events where one series belongs.
    publishing: tokio::sync::Mutex<()>,
    fence: WriteFence,
}

impl KubeCluster {
    pub(crate) fn new(
        client: kube::Client,
        informers: BTreeMap<Gvk, Informer>,
        discovery: crate::cluster::discovery::Resolver,
        reporter: &str,
        fence: WriteFence,
        account: Option<&crate::config::ServiceAccountRef>,
    ) -> Self {
        let writer = account.map_or_else(
            || client.clone(),
            |account| crate::sandbox::identity::client_as(&client, account),
        );
        let recorder = Recorder::new(
            writer.clone(),
            Reporter {
                // A second version's `name@stem` is no qualified name; RBAC spells it the same way.
                controller: reporter.replace('@', "-at-"),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            client,
            writer,
            account: account.cloned(),
            informers,
            discovery,
            recorder,
            publishing: tokio::sync::Mutex::new(()),
            fence,
        }
    }

    /// An API error of a write (`verb`) made as the guest: a `403` for a guest with an
    /// identity is the API server refusing its ServiceAccount, said so.
    fn write_error(&self, e: kube::Error, what: &str, verb: &str) -> HostError {
        match (&self.account, e) {
            (Some(account), kube::Error::Api(status)) if status.code == 403 => {
                HostError::Forbidden(format!(
                    "{what}: the API server refused `{verb}` to ServiceAccount {account}: {}",
                    status.message
                ))
            }
            (_, e) => map_kube_error(e, what),
        }
    }

    /// The API of the object's kind, scoped as the reference says, once the reference's scope
    /// matches the kind's. Every write passes here, so every write passes the fence.
    async fn api(&self, object: &ObjectRef) -> Result<Api<DynamicObject>, HostError> {
        fence_check(&self.fence)?;
        self.api_with(&self.writer, object).await
    }

    /// The API of the object's kind on `client` (the writer, or the host's for a live read).
    async fn api_with(
        &self,
        client: &kube::Client,
        object: &ObjectRef,
    ) -> Result<Api<DynamicObject>, HostError> {
        let kind = &object.kind;
        let (resource, namespaced) = if let Some(informer) = self.informers.get(kind) {
            (informer.api_resource().clone(), informer.namespaced())
        } else {
            let resolved = self
                .discovery
                .resolve(&self.client, &GroupVersionKind::from(kind))
                .await
                .map_err(|e| map_kube_error(e, &format!("discovery of {kind}")))?;
            (resolved.resource, resolved.namespaced)
        };
        match (namespaced, object.namespace.as_deref()) {
            (true, Some(ns)) => Ok(Api::namespaced_with(
                client.clone(),
                &path_segment(ns),
                &resource,
            )),
            (false, None) => Ok(Api::all_with(client.clone(), &resource)),
            (true, None) => Err(HostError::Invalid(format!(
                "ref.namespace: {kind} is namespaced, so {object} needs a namespace"
            ))),
            (false, Some(_)) => Err(HostError::Invalid(format!(
                "ref.namespace: {kind} is cluster-scoped, so {object} has no namespace"
            ))),
        }
    }

    /// Records an object the server returned into the cache of its kind, if it is the object
    /// that was asked for; anything else is an error, never a cache entry. `own`: the write's
    /// hold on the object's events ([`Informer::expect_write`]), released here.
    fn remember(
        &self,
        asked: &ObjectRef,
        object: &DynamicObject,
        own: Option<crate::cluster::informers::OwnWrite>,
    ) -> Result<(), HostError> {
        let types = object.types.as_ref();
        let same = types.is_some_and(|t| {
            t.api_version == asked.kind.api_version() && t.kind == asked.kind.kind
        }) && object.metadata.name.as_deref() == Some(asked.name.as_str())
            && object.metadata.namespace.as_deref() == asked.namespace.as_deref();
        if !same {
            return Err(HostError::Other(format!(
                "the API server answered a write of {asked} with another object ({:?} {:?}/{:?}); it was not cached",
                types.map(|t| format!("{}/{}", t.api_version, t.kind)),
                object.metadata.namespace,
                object.metadata.name
            )));
        }
        match own {
            Some(own) => {
                own.answered(object.clone());
            }
            None => {
                if let Some(informer) = self.informers.get(&asked.kind) {
                    informer.record_write(object.clone());
                }
            }
        }
        Ok(())
    }

    /// Sends one write of `object` (the request `send` makes when awaited) the way every write
    /// but a delete goes: the object's watch events are held while it is out, and the answer
    /// is recorded into the cache (`remember`), so that the watch's event carrying its
    /// resourceVersion counts as the host's own echo (low priority to the controller) even
    /// when it arrives before the answer. Without the hold that event would be a change, and
    /// the key, still in its reconcile, would be reconciled again at once, ahead of the
    /// backlog (issue 42: about two in three writes on a loaded machine).
    async fn write(
        &self,
        object: &ObjectRef,
        send: impl Future<Output = Result<DynamicObject, HostError>>,
    ) -> Result<Value, HostError> {
        let own = self
            .informers
            .get(&object.kind)
            .map(|i| i.expect_write(object.namespace.as_deref(), &object.name));
        let written = send.await?;
        self.remember(object, &written, own)?;
        serde_json::to_value(&written).map_err(|e| HostError::Other(e.to_string()))
    }

    /// Adds `finalizer` to the cached object unless present; returns the object as written,
    /// or none when it already had it.
    pub(crate) async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<Option<Value>, HostError> {
        let Some(ops) = crate::cluster::finalizer::add_ops(current, finalizer) else {
            return Ok(None);
        };
        self.json_patch(object, ops, "adding the finalizer")
            .await
            .map(Some)
    }

    /// Removes `finalizer` if the cached object has it. Returns whether it was there.
    pub(crate) async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<bool, HostError> {
        let Some(ops) = crate::cluster::finalizer::remove_ops(current, finalizer) else {
            return Ok(false);
        };
        match self.json_patch(object, ops, "removing the finalizer").await {
            Ok(_) | Err(HostError::NotFound(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// A JSON patch of `object` made by the host itself (finalizers).
    async fn json_patch(
        &self,
        object: &ObjectRef,
        ops: Vec<Value>,
        what: &str,
    ) -> Result<Value, HostError> {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| HostError::Other(format!("building the patch for {what}: {e}")))?;
        let api = self.api(object).await?;
        let send = async {
            api.patch(
                &path_segment(&object.name),
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            // A failed `test` op is a 422: the object changed under us, which is a conflict.
            .map_err(|e| {
                match self.write_error(e, &format!("{what} on {object}"), "patch") {
                    HostError::Invalid(m) if m.contains("test") => HostError::Conflict(m),
                    other => other,
                }
            })
        };
        self.write(object, send).await
    }
}

#[async_trait]
impl Cluster for KubeCluster {
    async fn patch_status(
        &self,
        manager: &str,
        object: &ObjectRef,
        patch: &Value,
    ) -> Result<Value, HostError> {
        let api = self.api(object).await?;
        let params = PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        };
        let send = async {
            api.patch_status(&path_segment(&object.name), &params, &Patch::Merge(patch))
                .await
                .map_err(|e| self.write_error(e, &format!("status patch of {object}"), "patch"))
        };
        self.write(object, send).await
    }

    /// Only for writes made as the host: a guest with its own identity has every write judged
    /// by the API server (its RBAC is the server's to apply, even to a write that changes
    /// nothing). Only a patch of `status` alone (one that carries `metadata`, a resourceVersion
    /// precondition say, is sent), only against a cache of whole objects, and never once the
    /// fence is closed (the write then fails as every write does). The cache may trail the
    /// server: a change it has not seen yet arrives as an event, and its reconcile writes again,
    /// against that change.
    fn unchanged_by_status_patch(&self, object: &ObjectRef, patch: &Value) -> Option<Value> {
        /// Only the status of a cached object: the rest of the text is skipped, not built.
        #[derive(serde::Deserialize)]
        struct StatusOf {
            status: Option<Value>,
        }
        if self.account.is_some() || !self.fence.is_open() {
            return None;
        }
        let wanted = patch.as_object().filter(|p| p.len() == 1)?.get("status")?;
        let informer = self.informers.get(&object.kind)?;
        let cached = informer.get_cached(object.namespace.as_deref(), &object.name)?;
        if cached.is_partial() {
            return None;
        }
        let status = serde_json::from_str::<StatusOf>(cached.json())
            .ok()?
            .status?;
        let mut patched = status.clone();
        json_patch::merge(&mut patched, wanted);
        if patched != status {
            return None;
        }
        serde_json::from_str(cached.json()).ok()
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, HostError> {
        fence_check(&self.fence)?;
        let api = self.api_with(&self.client, object).await?;
        let found = api
            .get_opt(&path_segment(&object.name))
            .await
            .map_err(|e| map_kube_error(e, &format!("read of {object}")))?;
        found
            .map(|o| serde_json::to_value(&o).map_err(|e| HostError::Other(e.to_string())))
            .transpose()
    }

    async fn apply(&self, manager: &str, object: &Value, force: bool) -> Result<Value, HostError> {
        let target = ObjectRef::of_object(object).ok_or_else(|| {
            HostError::Invalid("the applied object needs apiVersion, kind and metadata.name".into())
        })?;
        let api = self.api(&target).await?;
        let params = PatchParams {
            force,
            ..PatchParams::apply(manager)
        };
        let send = async {
            api.patch(&path_segment(&target.name), &params, &Patch::Apply(object))
                .await
                .map_err(|e| {
                    // Fields another manager owns (the apiserver's fieldmanager words it so):
                    // not a stale object, so not the reconcile-wide retry a 409 brings.
                    let owned = matches!(&e, kube::Error::Api(s)
                        if s.code == 409 && s.message.starts_with("Apply failed with"));
                    match self.write_error(e, &format!("apply of {target}"), "patch") {
                        HostError::Conflict(m) if owned => HostError::FieldConflict(m),
                        other => other,
                    }
                })
        };
        self.write(&target, send).await
    }

    async fn delete(&self, _manager: &str, object: &ObjectRef) -> Result<bool, HostError> {
        let api = self.api(object).await?;
        match api
            .delete(&path_segment(&object.name), &DeleteParams::default())
            .await
        {
            Ok(either) => {
                match either.left() {
                    // Still there with a deletionTimestamp (finalizers): show that state.
                    Some(marked) => self.remember(object, &marked, None)?,
                    None => {
                        if let Some(informer) = self.informers.get(&object.kind) {
                            informer.record_delete(object.namespace.as_deref(), &object.name);
                        }
                    }
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(self.write_error(e, &format!("delete of {object}"), "delete")),
        }
    }

    async fn record_event(&self, manager: &str, event: &EventRecord) -> Result<(), HostError> {
        fence_check(&self.fence)?;
        let regarding = &event.regarding;
        let cached = self
            .informers
            .get(&regarding.kind)
            .and_then(|i| i.get(regarding.namespace.as_deref(), &regarding.name));
        let reference = ObjectReference {
            api_version: Some(regarding.kind.api_version()),
            kind: Some(regarding.kind.kind.clone()),
            namespace: regarding.namespace.clone(),
            name: Some(regarding.name.clone()),
            uid: cached.as_ref().and_then(|o| o.metadata.uid.clone()),
            resource_version: cached
                .as_ref()
                .and_then(|o| o.metadata.resource_version.clone()),
            ..ObjectReference::default()
        };
        let published = Event {
            type_: match event.event_type {
                GuestEventType::Warning => EventType::Warning,
                GuestEventType::Normal => EventType::Normal,
            },
            reason: truncate(&event.reason, 128),
            note: Some(truncate(&event.message, 1024)),
            action: truncate(manager, 128),
            secondary: None,
        };
        let _one_at_a_time = self.publishing.lock().await;
        self.recorder
            .publish(&published, &reference)
            .await
            .map_err(|e| self.write_error(e, &format!("event about {regarding}"), "create"))
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The lister over one guest's informers (every kind its grant lets it read). Hands out the
/// cache's JSON text as it is: a `get` costs a copy of the text, no serialisation; a `list`
/// shares the cached objects (the capability sizes and copies them).
///
/// A list takes the cache's read lock only to snapshot the namespace's objects (one pointer
/// each) and evaluates the selector after releasing it: the lock is fair, so a watch update
/// waiting behind a long scan would hold up every other reader of the kind (other guests'
/// reconciles among them).
struct CacheLister(BTreeMap<Gvk, Informer>);

impl CacheLister {
    fn informer(&self, kind: &Gvk) -> Result<&Informer, HostError> {
        self.0.get(kind).ok_or_else(|| {
            HostError::Unavailable(format!(
                "{kind} is granted but not cached: the API server did not serve it when the guest started"
            ))
        })
    }
}

impl Lister for CacheLister {
    fn ready(&self, kind: &Gvk) -> Option<futures::future::BoxFuture<'static, ()>> {
        use futures::FutureExt as _;
        Some(self.0.get(kind)?.until_full()?.boxed())
    }

    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError> {
        let informer = self.informer(&object.kind)?;
        Ok(informer
            .get_cached(object.namespace.as_deref(), &object.name)
            .map(|o| o.json().to_owned()))
    }

    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        selector: Option<&kube::core::Selector>,
    ) -> Result<Vec<Arc<dyn Listed>>, HostError> {
        let informer = self.informer(kind)?;
        let matcher = selector.map(crate::cluster::informers::SelectorMatcher::new);
        Ok(informer
            .list_cached(namespace, None)
            .into_iter()
            .filter(|o| matcher.as_ref().is_none_or(|m| m.matches(o)))
            .map(|o| o as Arc<dyn Listed>)
            .collect())
    }

    fn visits(&self, kind: &Gvk, _namespace: Option<&str>) -> usize {
        // Every cached object of the kind: an upper bound for one namespace, counted without
        // a scan.
        self.0.get(kind).map_or(0, Informer::len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::EventType as GuestEventType;

    /// A writer whose client points at a port nothing listens on: any request it sent would
    /// fail as `unavailable` with a connection error, not with the fence's words.
    fn cluster(fence: WriteFence) -> KubeCluster {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        let client = kube::Client::try_from(config).expect("client");
        KubeCluster::new(
            client,
            BTreeMap::new(),
            crate::cluster::discovery::Resolver::default(),
            "g",
            fence,
            None,
        )
    }

    /// A writer whose cache of `ConfigMap`s holds `ns/a` with a status, listed whole or as
    /// metadata only; `account`: the guest writes as its own ServiceAccount.
    fn cached(
        fence: WriteFence,
        metadata_only: bool,
        account: Option<&crate::config::ServiceAccountRef>,
    ) -> KubeCluster {
        let object = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": "ns", "name": "a", "resourceVersion": "7"},
            "status": {"phase": "Ready", "count": 2, "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .expect("object");
        let kind = Gvk::new("", "v1", "ConfigMap");
        let informer = Informer::listed((&kind).into(), vec![object], metadata_only);
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("url"));
        KubeCluster::new(
            kube::Client::try_from(config).expect("client"),
            BTreeMap::from([(kind, informer)]),
            crate::cluster::discovery::Resolver::default(),
            "g",
            fence,
            account,
        )
    }

    #[tokio::test]
    async fn a_status_patch_that_changes_nothing_in_the_cache_is_not_sent() {
        let cluster = cached(WriteFence::default(), false, None);
        let unchanged = |patch: Value| cluster.unchanged_by_status_patch(&cm(), &patch);
        for same in [
            serde_json::json!({"status": {"phase": "Ready"}}),
            serde_json::json!({"status": {"phase": "Ready", "count": 2}}),
            serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            serde_json::json!({"status": {"absent": null}}),
            serde_json::json!({"status": {}}),
        ] {
            let current = unchanged(same.clone()).unwrap_or_else(|| panic!("{same} sent"));
            assert_eq!(current["metadata"]["resourceVersion"], "7", "{current}");
            assert_eq!(current["status"]["count"], 2, "{current}");
        }
        for different in [
            serde_json::json!({"status": {"phase": "Failed"}}),
            serde_json::json!({"status": {"count": "2"}}),
            serde_json::json!({"status": {"reason": "new"}}),
            serde_json::json!({"status": {"count": null}}),
            serde_json::json!({"status": {"conditions": []}}),
            serde_json::json!({"status": null}),
            serde_json::json!({"status": {"phase": "Ready"}, "metadata": {"resourceVersion": "7"}}),
            serde_json::json!({"status": "Ready"}),
        ] {
            assert!(
                unchanged(different.clone()).is_none(),
                "{different} not sent"
            );
        }
        let missing = ObjectRef {
            name: "b".into(),
            ..cm()
        };
        let patch = serde_json::json!({"status": {"phase": "Ready"}});
        assert!(
            cluster
                .unchanged_by_status_patch(&missing, &patch)
                .is_none()
        );
    }

    #[tokio::test]
    async fn a_status_patch_is_sent_whenever_the_cache_cannot_speak_for_the_server() {
        let patch = serde_json::json!({"status": {"phase": "Ready"}});
        let sent =
            |cluster: &KubeCluster| cluster.unchanged_by_status_patch(&cm(), &patch).is_none();
        // Metadata only: the cache never saw the status.
        assert!(sent(&cached(WriteFence::default(), true, None)));
        // A guest with its own identity: the API server judges its every write.
        let account = crate::config::ServiceAccountRef {
            namespace: "ns".into(),
            name: "guest".into(),
        };
        assert!(sent(&cached(WriteFence::default(), false, Some(&account))));
        // Fenced: the write fails as every write does.
        let fence = WriteFence::default();
        let cluster = cached(fence.clone(), false, None);
        assert!(!sent(&cluster));
        fence.close();
        assert!(sent(&cluster));
    }

    fn cm() -> ObjectRef {
        ObjectRef {
            kind: Gvk::new("", "v1", "ConfigMap"),
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    fn fenced<T>(result: Result<T, HostError>) -> bool {
        matches!(result, Err(HostError::Unavailable(m)) if m.contains("no longer the leader"))
    }

    #[tokio::test]
    async fn nothing_is_written_once_the_fence_is_closed() {
        let fence = WriteFence::default();
        let cluster = cluster(fence.clone());
        fence.close();
        let status = serde_json::json!({"status": {}});
        assert!(fenced(cluster.patch_status("g", &cm(), &status).await));
        let body = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}});
        assert!(fenced(cluster.apply("g", &body, true).await));
        assert!(fenced(cluster.delete("g", &cm()).await));
        let event = EventRecord {
            regarding: cm(),
            event_type: GuestEventType::Normal,
            reason: "Synced".into(),
            message: String::new(),
        };
        assert!(fenced(cluster.record_event("g", &event).await));

        // Open again (leadership regained): the request goes out, and here fails to connect.
        fence.open();
        let sent = cluster.delete("g", &cm()).await;
        assert!(matches!(&sent, Err(HostError::Unavailable(_))), "{sent:?}");
        assert!(!fenced(sent), "sent once the fence is open");
    }
}
