//! Providers that refuse everything: a guest may not call the host while it describes itself.

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
        let deny = Arc::new(DenyAll);
        Self {
            lister: deny.clone(),
            cluster: deny.clone(),
            queue: deny,
            network: None,
            http: None,
        }
    }
}

/// Providers for a guest that may not call anything yet.
struct DenyAll;

const LOADING: &str = "host calls are not available while the guest is being loaded (manifest)";

impl Lister for DenyAll {
    fn get(&self, _: &crate::objects::ObjectRef) -> Result<Option<String>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn list(
        &self,
        _: &crate::objects::Gvk,
        _: Option<&str>,
        _: Option<&kube::core::Selector>,
    ) -> Result<Vec<Arc<dyn Listed>>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn visits(&self, _: &crate::objects::Gvk, _: Option<&str>) -> usize {
        0
    }
}

#[async_trait::async_trait]
impl Cluster for DenyAll {
    async fn patch_status(
        &self,
        _: &str,
        _: &crate::objects::ObjectRef,
        _: &Value,
    ) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn apply(&self, _: &str, _: &Value) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn delete(&self, _: &str, _: &crate::objects::ObjectRef) -> Result<bool, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn get(&self, _: &crate::objects::ObjectRef) -> Result<Option<Value>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
}

impl Enqueuer for DenyAll {
    fn enqueue(&self, _: crate::objects::ObjectKey, _: Option<Duration>) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn pending(&self) -> usize {
        0
    }
}
