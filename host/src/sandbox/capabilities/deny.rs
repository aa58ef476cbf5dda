//! Providers that refuse: a guest may not call the host while it describes itself, and may
//! only read while it maps an object to keys (`map`).

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use super::context::Providers;
use super::error::HostError;
use super::seams::Enqueuer;
use super::seams::{Cluster, EventRecord};
use super::seams::{Listed, Lister};

impl Providers {
    /// Providers that refuse everything: a guest may not call the host while loading.
    pub(crate) fn deny_all() -> Self {
        Self::refusing(LOADING)
    }

    /// Providers that refuse everything: what a guest's `index` may call (its values come from
    /// the primary object alone, or the host could not know when they change).
    pub(crate) fn deny_indexing() -> Self {
        Self::refusing(INDEXING)
    }

    fn refusing(why: &'static str) -> Self {
        let deny = Arc::new(DenyAll(why));
        Self {
            lister: deny.clone(),
            cluster: deny.clone(),
            queue: deny,
            network: None,
            http: None,
        }
    }

    /// These providers' lister, and refusals for everything else: what a guest's `map` may
    /// call (it names keys; the reconcile that follows acts).
    pub(crate) fn read_only(&self) -> Self {
        let deny = Arc::new(DenyAll(MAPPING));
        Self {
            lister: self.lister.clone(),
            cluster: deny.clone(),
            queue: deny,
            network: None,
            http: None,
        }
    }
}

/// Providers that refuse every call, saying why.
struct DenyAll(&'static str);

const LOADING: &str = "host calls are not available while the guest is being loaded (manifest)";
const INDEXING: &str =
    "host calls are not available in index(): its values come from the primary object alone";
const MAPPING: &str =
    "only the lister is available in map(): it names keys, and their reconciles write";

impl Lister for DenyAll {
    fn get(&self, _: &crate::cluster::objects::ObjectRef) -> Result<Option<String>, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    fn list(
        &self,
        _: &crate::cluster::objects::Gvk,
        _: Option<&str>,
        _: Option<&kube::core::Selector>,
    ) -> Result<Vec<Arc<dyn Listed>>, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    fn visits(&self, _: &crate::cluster::objects::Gvk, _: Option<&str>) -> usize {
        0
    }
}

#[async_trait::async_trait]
impl Cluster for DenyAll {
    async fn patch_status(
        &self,
        _: &str,
        _: &crate::cluster::objects::ObjectRef,
        _: &Value,
    ) -> Result<Value, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    async fn apply(&self, _: &str, _: &Value, _: bool) -> Result<Value, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    async fn delete(
        &self,
        _: &str,
        _: &crate::cluster::objects::ObjectRef,
    ) -> Result<bool, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    async fn get(
        &self,
        _: &crate::cluster::objects::ObjectRef,
    ) -> Result<Option<Value>, HostError> {
        Err(HostError::Denied(self.0.into()))
    }
}

impl Enqueuer for DenyAll {
    fn enqueue(
        &self,
        _: crate::cluster::objects::ObjectKey,
        _: Option<Duration>,
    ) -> Result<(), HostError> {
        Err(HostError::Denied(self.0.into()))
    }
    fn pending(&self) -> usize {
        0
    }
}
