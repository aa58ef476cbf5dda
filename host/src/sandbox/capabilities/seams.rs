//! The provider traits: the seams between a capability and whoever serves it (the informer
//! caches and the API server in `run`, the loaded objects in the offline runner; see
//! [`crate::sandbox::providers`]). Apart from the capabilities that call them, so that the contexts
//! holding the providers and the capabilities implemented on those contexts do not import each
//! other.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use super::error::HostError;
use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};

/// The two kinds of Kubernetes event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub(crate) enum EventType {
    Normal,
    Warning,
}

/// An event as a guest asks for it, validated; the provider aggregates repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    pub(crate) regarding: ObjectRef,
    #[serde(rename = "type")]
    pub(crate) event_type: EventType,
    pub(crate) reason: String,
    pub(crate) message: String,
}

/// Writes to the API server. `manager` is the guest's name (field manager, event reporter).
/// Arguments arrive validated and within the guest's grant and scope.
#[async_trait]
pub trait Cluster: Send + Sync {
    async fn patch_status(
        &self,
        manager: &str,
        object: &ObjectRef,
        patch: &Value,
    ) -> Result<Value, HostError>;
    /// The object as the cache holds it, when `patch` (a merge patch of its status) would
    /// change nothing there, so the write need not be sent; none: send it.
    fn unchanged_by_status_patch(&self, _object: &ObjectRef, _patch: &Value) -> Option<Value> {
        None
    }
    /// Server-side apply of `object` with `manager` as field manager; `force` takes fields
    /// another manager owns, else such a field is a conflict naming it and its manager.
    async fn apply(&self, manager: &str, object: &Value, force: bool) -> Result<Value, HostError>;
    async fn delete(&self, manager: &str, object: &ObjectRef) -> Result<bool, HostError>;
    async fn record_event(&self, manager: &str, event: &EventRecord) -> Result<(), HostError>;
    /// The object as the API server has it now (not the cache), or none: what shadow mode
    /// compares an intended write with.
    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, HostError>;
}

/// Reads of cached objects, as JSON text. Arguments arrive validated.
pub trait Lister: Send + Sync {
    /// What a read of `kind` waits for first, if anything: a cache that holds only metadata
    /// fetches whole objects at the kind's first read (`Informer::until_full`). None: ready.
    fn ready(&self, _kind: &Gvk) -> Option<futures::future::BoxFuture<'static, ()>> {
        None
    }
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError>;
    /// The matching objects as the provider keeps them, shared (no copy): the capability sizes
    /// the result before it copies anything for the guest.
    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        selector: Option<&kube::core::Selector>,
    ) -> Result<Vec<Arc<dyn Listed>>, HostError>;
    /// At most how many objects a list of `kind` in `namespace` visits, known without visiting
    /// them: it decides whether the list runs on the async worker.
    fn visits(&self, kind: &Gvk, namespace: Option<&str>) -> usize;
}

/// One listed object, as its provider keeps it.
pub trait Listed: Send + Sync {
    /// The object's JSON text, exactly what the guest receives.
    fn json(&self) -> &str;
}

impl Listed for crate::cluster::informers::CachedObject {
    fn json(&self) -> &str {
        crate::cluster::informers::CachedObject::json(self)
    }
}

impl Listed for String {
    fn json(&self) -> &str {
        self
    }
}

/// The calling guest's own work queue. Keys arrive validated and in scope.
pub trait Enqueuer: Send + Sync {
    fn enqueue(&self, key: ObjectKey, after: Option<Duration>) -> Result<(), HostError>;
    /// Keys waiting now, ready or delayed.
    fn pending(&self) -> usize;
}
