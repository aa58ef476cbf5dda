//! What the in-process benches share (`mod common;` in `reconcile.rs` and `languages.rs`).

use async_trait::async_trait;
use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::sandbox::capabilities::{Cluster, EventRecord, HostError};
use serde_json::Value;

/// Answers every write with a small fixed object: the API round trip is not the guest's cost.
pub struct NullCluster(pub Value);

#[async_trait]
impl Cluster for NullCluster {
    async fn patch_status(&self, _: &str, _: &ObjectRef, _: &Value) -> Result<Value, HostError> {
        Ok(self.0.clone())
    }
    async fn apply(&self, _: &str, _: &Value, _: bool) -> Result<Value, HostError> {
        Ok(self.0.clone())
    }
    async fn delete(&self, _: &str, _: &ObjectRef) -> Result<bool, HostError> {
        Ok(true)
    }
    async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
        Ok(())
    }
    async fn get(&self, _: &ObjectRef) -> Result<Option<Value>, HostError> {
        Ok(Some(self.0.clone()))
    }
}
