//! A call context over offline providers, for the capabilities' unit tests.

use std::sync::Arc;

use super::context::{CallContext, GuestContext, Providers, Scope};
use crate::config::Grant;
use crate::sandbox::providers::offline::{MemoryCache, RecordingCluster, RecordingQueue};

pub(crate) struct Harness {
    pub(crate) cache: Arc<MemoryCache>,
    pub(crate) queue: Arc<RecordingQueue>,
    pub(crate) network: Arc<crate::sandbox::backends::MemoryBackend>,
}

impl Harness {
    pub(crate) fn new() -> Self {
        Self {
            cache: Arc::new(MemoryCache::default()),
            queue: Arc::new(RecordingQueue::default()),
            network: Arc::new(crate::sandbox::backends::MemoryBackend::new()),
        }
    }

    pub(crate) fn providers(&self) -> Providers {
        Providers {
            lister: self.cache.clone(),
            cluster: Arc::new(RecordingCluster::new(self.cache.clone())),
            queue: self.queue.clone(),
            network: Some(self.network.clone()),
            http: None,
        }
    }

    /// A call context for guest `g` with `grant` (YAML of one grant entry) and `scope`.
    pub(crate) fn call(&self, grant: &str, scope: Scope) -> CallContext {
        let grant: Grant = serde_yaml::from_str(grant).expect("test grant");
        let context = GuestContext::new("g", grant, self.providers()).with_scope(scope);
        CallContext::new(Arc::new(context), "ns/k".into(), None).recording()
    }
}
