//! Where each guest's rollout stands (`crate::supply::rollout`), as its controller publishes
//! it for `/guests`, and the versions rolled back, so the controller set does not take a failed
//! version again.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::Grant;
use crate::supply::rollout::{Ask, RolloutView};

use super::grants::ActiveGuest;

/// Where each guest's rollout stands, written by its controller and read by `/guests`, the
/// Reconcilers' status and the controller set; and the versions rolled back, so a failed one
/// is not taken again until its grant (a Reconciler's spec) changes.
#[derive(Default)]
pub(crate) struct Rollouts {
    guests: parking_lot::Mutex<BTreeMap<String, Tracked>>,
    /// Told when a rollout moves (a step, a promotion, a rollback), so a Reconciler's status
    /// shows each step, not only what a periodic refresh samples.
    moved: tokio::sync::Notify,
    /// People's asks (`crate::supply::rollout::ASK_ANNOTATION`), by the item (`Origin` name)
    /// whose rollout they are about, with the version named by its content hash.
    asks: parking_lot::Mutex<BTreeMap<String, Ask>>,
}

#[derive(Default)]
struct Tracked {
    view: Option<RolloutView>,
    failed: Option<Failed>,
}

/// A version rolled back, and the one that took its keys back.
#[derive(Clone)]
pub(crate) struct Failed {
    /// The content hash of the version that failed.
    pub hash: String,
    /// The grant it was judged under: another grant is another spec, tried again.
    pub grant: Grant,
    /// The version that runs instead.
    pub old: Arc<ActiveGuest>,
}

impl Rollouts {
    pub(crate) fn publish(&self, guest: &str, view: RolloutView) {
        let mut guests = self.guests.lock();
        let tracked = guests.entry(guest.to_owned()).or_default();
        let moved = tracked.view.as_ref().is_none_or(|before| {
            (before.status.step, before.status.phase, &before.status.to)
                != (view.status.step, view.status.phase, &view.status.to)
        });
        tracked.view = Some(view);
        drop(guests);
        if moved {
            self.moved.notify_one();
        }
    }

    /// Completes at the next move of any rollout.
    pub(crate) async fn moved(&self) {
        self.moved.notified().await;
    }

    pub(crate) fn view(&self, guest: &str) -> Option<RolloutView> {
        self.guests.lock().get(guest).and_then(|t| t.view.clone())
    }

    pub(crate) fn fail(&self, guest: &str, failed: Failed) {
        self.guests
            .lock()
            .entry(guest.to_owned())
            .or_default()
            .failed = Some(failed);
    }

    /// The version to run instead of `new`, when `new` is one that was rolled back under the
    /// same grant.
    pub(crate) fn instead_of(&self, new: &ActiveGuest) -> Option<Arc<ActiveGuest>> {
        let guests = self.guests.lock();
        let failed = guests.get(new.name())?.failed.as_ref()?;
        (failed.hash == new.loaded.hash && failed.grant == new.grant).then(|| failed.old.clone())
    }

    /// Every ask standing now, by item: those of items not named are gone.
    pub(crate) fn set_asks(&self, asks: BTreeMap<String, Ask>) {
        *self.asks.lock() = asks;
    }

    /// The ask standing about item `origin`'s rollout, if any.
    pub(crate) fn asked(&self, origin: &str) -> Option<Ask> {
        self.asks.lock().get(origin).cloned()
    }

    /// Forgets `guest` (unloaded): a version loaded again later starts afresh.
    pub(crate) fn forget(&self, guest: &str) {
        self.guests.lock().remove(guest);
    }
}
