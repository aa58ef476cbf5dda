//! The write fence: whether this replica may still write. Closed when the host loses its lease,
//! is fenced out of the shard ring or shuts down, before its controllers are stopped, so a
//! reconcile still running cannot write after that. Opened by `run`'s ownership
//! (`crate::run`), checked by the cluster provider before every write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Open by default: a host running alone always writes.
#[derive(Clone, Debug)]
pub struct WriteFence(Arc<AtomicBool>);

impl Default for WriteFence {
    fn default() -> Self {
        Self(Arc::new(AtomicBool::new(true)))
    }
}

impl WriteFence {
    pub fn close(&self) {
        self.0.store(false, Ordering::SeqCst);
    }

    pub fn open(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}
