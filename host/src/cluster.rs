//! The `cluster` capability's provider in `run`: writes go to the API server with the guest's
//! name as field manager, and every object the server returns is recorded into the informer
//! caches at once (read-your-writes, like the CRD naming controller's mutation cache), so the
//! next reconcile reads what was just written even before the watch delivers it.
//!
//! Events go through kube-runtime's `Recorder`, which aggregates repeats of the same
//! (object, type, reason, note) into one `events.k8s.io/v1` Event with a growing series count
//! instead of one Event per reconcile.
//!
//! Finalizer patches live here too: they are writes the host makes for a guest.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::capabilities::{Cluster, EventRecord, HostError};
use crate::informers::Informer;
use crate::objects::{Gvk, ObjectRef};

pub fn to_kube_gvk(g: &Gvk) -> GroupVersionKind {
    GroupVersionKind::gvk(&g.group, &g.version, &g.kind)
}

/// Maps an API error to the WIT error the guest sees; 409 marks the reconcile for a retry.
pub fn map_kube_error(e: kube::Error, what: &str) -> HostError {
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
pub struct KubeCluster {
    client: kube::Client,
    /// Informers of the kinds the guest may read, for read-your-writes and API resources.
    informers: BTreeMap<Gvk, Informer>,
    discovered: Mutex<BTreeMap<Gvk, ApiResource>>,
    recorder: Recorder,
}

impl KubeCluster {
    pub fn new(client: kube::Client, informers: BTreeMap<Gvk, Informer>, reporter: &str) -> Self {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: reporter.to_owned(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Self {
            client,
            informers,
            discovered: Mutex::new(BTreeMap::new()),
            recorder,
        }
    }

    async fn api(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
    ) -> Result<Api<DynamicObject>, HostError> {
        let resource = match self.informers.get(kind) {
            Some(informer) => informer.api_resource().clone(),
            None => {
                let cached = self.discovered.lock().get(kind).cloned();
                match cached {
                    Some(resource) => resource,
                    None => {
                        let (resource, _) =
                            kube::discovery::pinned_kind(&self.client, &to_kube_gvk(kind))
                                .await
                                .map_err(|e| map_kube_error(e, &format!("discovery of {kind}")))?;
                        self.discovered
                            .lock()
                            .insert(kind.clone(), resource.clone());
                        resource
                    }
                }
            }
        };
        Ok(match namespace {
            Some(ns) => Api::namespaced_with(self.client.clone(), ns, &resource),
            None => Api::all_with(self.client.clone(), &resource),
        })
    }

    fn remember(&self, kind: &Gvk, object: &DynamicObject) {
        if let Some(informer) = self.informers.get(kind) {
            informer.record_write(object.clone());
        }
    }

    /// Adds `finalizer` to the cached object unless present; returns the object as written, or
    /// none when it already had it. The JSON patch tests the resourceVersion, so it never races
    /// a concurrent change.
    pub async fn add_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<Option<Value>, HostError> {
        let finalizers = current.metadata.finalizers.as_ref();
        if finalizers.is_some_and(|list| list.iter().any(|f| f == finalizer)) {
            return Ok(None);
        }
        let add = match finalizers {
            None => json!({ "op": "add", "path": "/metadata/finalizers", "value": [finalizer] }),
            Some(_) => json!({ "op": "add", "path": "/metadata/finalizers/-", "value": finalizer }),
        };
        let ops = vec![
            json!({ "op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version }),
            add,
        ];
        self.json_patch(object, ops, "adding the finalizer")
            .await
            .map(Some)
    }

    /// Removes `finalizer` if the cached object has it; a test op guards the index against
    /// concurrent edits. Returns whether it was there.
    pub async fn remove_finalizer(
        &self,
        object: &ObjectRef,
        current: &DynamicObject,
        finalizer: &str,
    ) -> Result<bool, HostError> {
        let Some(index) = current
            .metadata
            .finalizers
            .iter()
            .flatten()
            .position(|f| f == finalizer)
        else {
            return Ok(false);
        };
        let path = format!("/metadata/finalizers/{index}");
        let ops = vec![
            json!({ "op": "test", "path": path, "value": finalizer }),
            json!({ "op": "remove", "path": path }),
        ];
        match self.json_patch(object, ops, "removing the finalizer").await {
            Ok(_) | Err(HostError::NotFound(_)) => Ok(true),
            Err(e) => Err(e),
        }
    }

    async fn json_patch(
        &self,
        object: &ObjectRef,
        ops: Vec<Value>,
        what: &str,
    ) -> Result<Value, HostError> {
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| HostError::Other(format!("building the patch for {what}: {e}")))?;
        let api = self.api(&object.kind, object.namespace.as_deref()).await?;
        let written = api
            .patch(
                &object.name,
                &PatchParams::default(),
                &Patch::<()>::Json(patch),
            )
            .await
            // A failed `test` op is a 422: the object changed under us, which is a conflict.
            .map_err(
                |e| match map_kube_error(e, &format!("{what} on {object}")) {
                    HostError::Invalid(m) if m.contains("test") => HostError::Conflict(m),
                    other => other,
                },
            )?;
        self.remember(&object.kind, &written);
        serde_json::to_value(&written).map_err(|e| HostError::Other(e.to_string()))
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
        let api = self.api(&object.kind, object.namespace.as_deref()).await?;
        let params = PatchParams {
            field_manager: Some(manager.to_owned()),
            ..PatchParams::default()
        };
        let written = api
            .patch_status(&object.name, &params, &Patch::Merge(patch))
            .await
            .map_err(|e| map_kube_error(e, &format!("status patch of {object}")))?;
        self.remember(&object.kind, &written);
        serde_json::to_value(&written).map_err(|e| HostError::Other(e.to_string()))
    }

    async fn apply(&self, manager: &str, object: &Value) -> Result<Value, HostError> {
        let target = ObjectRef::of_object(object).ok_or_else(|| {
            HostError::Invalid("the applied object needs apiVersion, kind and metadata.name".into())
        })?;
        let api = self.api(&target.kind, target.namespace.as_deref()).await?;
        let written = api
            .patch(
                &target.name,
                &PatchParams::apply(manager).force(),
                &Patch::Apply(object),
            )
            .await
            .map_err(|e| map_kube_error(e, &format!("apply of {target}")))?;
        self.remember(&target.kind, &written);
        serde_json::to_value(&written).map_err(|e| HostError::Other(e.to_string()))
    }

    async fn delete(&self, _manager: &str, object: &ObjectRef) -> Result<bool, HostError> {
        let api = self.api(&object.kind, object.namespace.as_deref()).await?;
        match api.delete(&object.name, &DeleteParams::default()).await {
            Ok(either) => {
                match either.left() {
                    // Still there with a deletionTimestamp (finalizers): show that state.
                    Some(marked) => self.remember(&object.kind, &marked),
                    None => {
                        if let Some(informer) = self.informers.get(&object.kind) {
                            informer.record_delete(object.namespace.as_deref(), &object.name);
                        }
                    }
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(map_kube_error(e, &format!("delete of {object}"))),
        }
    }

    async fn record_event(&self, manager: &str, event: &EventRecord) -> Result<(), HostError> {
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
            type_: if event.event_type == "Warning" {
                EventType::Warning
            } else {
                EventType::Normal
            },
            reason: truncate(&event.reason, 128),
            note: Some(truncate(&event.message, 1024)),
            action: truncate(manager, 128),
            secondary: None,
        };
        self.recorder
            .publish(&published, &reference)
            .await
            .map_err(|e| map_kube_error(e, &format!("event about {regarding}")))
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

/// Lets a shared `KubeCluster` serve as a capability provider.
pub type SharedCluster = Arc<KubeCluster>;
