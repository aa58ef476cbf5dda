//! Scrape hooks: gauges computed when scraped instead of kept current. Its own file because
//! both [`super::Metrics`] and the work-queue handles register hooks, and the handles must not
//! import `Metrics` back.

use std::sync::{Arc, Weak};

use parking_lot::Mutex;

/// Something whose gauges are cheaper to compute when scraped than to keep current, such
/// as a work queue's in-flight durations. [`super::Metrics::render`] calls every live hook first.
pub(crate) trait ScrapeHook: Send + Sync {
    /// Bring this source's gauges up to date. Runs on the scraping task: keep it short.
    fn before_scrape(&self);
}

/// The hooks of one registry, shared with the work-queue handles that register into it.
pub(super) type ScrapeHooks = Arc<Mutex<Vec<Weak<dyn ScrapeHook>>>>;

/// Runs every live hook and prunes the dead ones.
pub(super) fn run(hooks: &ScrapeHooks) {
    // Upgrade under the lock, call outside it, so a hook may register another one.
    let live: Vec<Arc<dyn ScrapeHook>> = {
        let mut hooks = hooks.lock();
        hooks.retain(|hook| hook.strong_count() > 0);
        hooks.iter().filter_map(Weak::upgrade).collect()
    };
    for hook in live {
        hook.before_scrape();
    }
}
