//! What a sharded replica reports: `/shards`, `/readyz`'s ring condition, and the
//! `reconciler_shard_*` gauges (set at scrape time from the ring state and the caches).

use std::collections::BTreeMap;
use std::sync::Arc;

use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::watch;

use super::ShardState;
use crate::cluster::informers::Share;
use crate::metrics::{Metrics, ScrapeHook};

/// The ring state plus each running guest's primary informer (its share of the keys).
pub(crate) struct ShardStatus {
    identity: String,
    state: watch::Receiver<ShardState>,
    primaries: Mutex<BTreeMap<String, Arc<dyn Share>>>,
    metrics: Metrics,
}

impl ShardStatus {
    /// Registers itself as a scrape hook of `metrics`.
    pub(crate) fn new(
        identity: String,
        state: watch::Receiver<ShardState>,
        metrics: &Metrics,
    ) -> Arc<Self> {
        let status = Arc::new(Self {
            identity,
            state,
            primaries: Mutex::new(BTreeMap::new()),
            metrics: metrics.clone(),
        });
        let hook: std::sync::Weak<dyn ScrapeHook> = Arc::downgrade(&status) as _;
        metrics.register_scrape_hook(hook);
        status
    }

    /// The guests' primary informers, after controllers (re)started.
    pub(crate) fn set_primaries(&self, primaries: BTreeMap<String, Arc<dyn Share>>) {
        *self.primaries.lock() = primaries;
    }

    /// Keys per guest: the objects in each primary cache.
    fn keys(&self) -> BTreeMap<String, usize> {
        self.primaries
            .lock()
            .iter()
            .map(|(guest, share)| (guest.clone(), share.keys()))
            .collect()
    }

    /// `/readyz`: a replica is ready once it is a member and not fenced. A member that owns
    /// nothing yet (waiting for another to hand over) is ready: it serves its share, empty.
    ///
    /// # Errors
    ///
    /// Why it is not ready.
    pub(crate) fn ready(&self) -> Result<(), NotReady> {
        if self.state.borrow().fenced {
            return Err(NotReady);
        }
        Ok(())
    }

    /// `/shards`.
    pub(crate) fn report(&self) -> Value {
        let state = self.state.borrow().clone();
        let primaries = self.primaries.lock().clone();
        let filter: BTreeMap<String, Value> = primaries
            .iter()
            .map(|(guest, share)| (guest.clone(), json!(share.filter())))
            .collect();
        json!({
            "identity": self.identity,
            "members": state.members,
            "owned": state.owned.to_text(),
            "active": state.active.to_text(),
            "target": state.target.to_text(),
            "ranges": state.active.hash_ranges().iter().map(|(a, b)| format!("[{a}, {b})")).collect::<Vec<_>>(),
            "selector": state.active.selector(),
            "fraction": state.active.fraction(),
            "fenced": state.fenced,
            "keys": self.keys(),
            "filter": filter,
        })
    }
}

impl ScrapeHook for ShardStatus {
    fn before_scrape(&self) {
        let state = self.state.borrow().clone();
        self.metrics.shard_ring(
            state.members.len(),
            state.active.len(),
            state.active.fraction(),
        );
        for (guest, keys) in self.keys() {
            self.metrics.shard_keys(&guest, keys);
        }
    }
}

/// Why a sharded replica is not ready: it is not a ring member, or not one it can act as.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("sharding: not a ring member (joining, or member lease not renewed)")]
pub(crate) struct NotReady;
