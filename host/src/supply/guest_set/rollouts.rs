//! Where each guest's rollout stands (`crate::supply::rollout`), as its controller publishes
//! it for `/guests`, and the versions rolled back, so the controller set does not take a failed
//! version again.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::Grant;
use crate::supply::rollout::{Ask, Measured, Phase, RolloutStatus, RolloutView, Share};

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

/// Versions rolled back per guest, kept (the most recent) so none of them is taken again.
const FAILED: usize = 16;

/// What "the same spec" means for a rolled-back version.
#[derive(Debug, Clone, PartialEq)]
enum Spec {
    /// A Reconciler's `metadata.generation`.
    Generation(i64),
    /// A file's grant in `host.yaml`.
    Grant(Box<Grant>),
}

impl Spec {
    fn of(version: &ActiveGuest) -> Self {
        match version.origin.generation() {
            Some(generation) => Self::Generation(generation),
            None => Self::Grant(Box::new(version.grant.clone())),
        }
    }
}

#[derive(Default)]
struct Tracked {
    view: Option<RolloutView>,
    /// The versions rolled back, and the spec they were rolled back under: a Reconciler's
    /// generation, or a file's grant (another spec rolls the version out again; a change of the
    /// host's bounds alone does not).
    failed: Vec<(String, Spec)>,
    /// The version that reconciles every key outside a rollout's share: what a controller
    /// started again (a new grant, a lease regained) starts with before it rolls a newer one
    /// out.
    stable: Option<Arc<ActiveGuest>>,
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

    /// `version` was rolled back (or refused): not taken again under its spec.
    pub(crate) fn fail(&self, version: &ActiveGuest) {
        let mut guests = self.guests.lock();
        let failed = &mut guests.entry(version.name().to_owned()).or_default().failed;
        if failed.len() == FAILED {
            failed.remove(0);
        }
        failed.push((version.loaded.hash.clone(), Spec::of(version)));
    }

    /// The stable version, when `new` is one rolled back under the same spec: what runs
    /// instead (the caller judges it under `new`'s grant).
    pub(crate) fn instead_of(&self, new: &ActiveGuest) -> Option<Arc<ActiveGuest>> {
        let guests = self.guests.lock();
        let tracked = guests.get(new.name())?;
        let spec = Spec::of(new);
        tracked
            .failed
            .iter()
            .any(|(hash, failed)| *hash == new.loaded.hash && *failed == spec)
            .then(|| tracked.stable.clone())
            .flatten()
    }

    /// `version` reconciles every key outside a rollout's share from now on; a content
    /// rolled back before and now promoted (under another spec) is no longer held back.
    pub(crate) fn set_stable(&self, version: &Arc<ActiveGuest>) {
        let mut guests = self.guests.lock();
        let tracked = guests.entry(version.name().to_owned()).or_default();
        tracked
            .failed
            .retain(|(hash, _)| *hash != version.loaded.hash);
        tracked.stable = Some(version.clone());
    }

    /// Drops the view of `guest`'s last rollout: a controller started without one runs a
    /// single version, and an old view's `from` or share would say otherwise.
    pub(crate) fn drop_view(&self, guest: &str) {
        if let Some(tracked) = self.guests.lock().get_mut(guest) {
            tracked.view = None;
        }
    }

    /// The version that reconciled every key outside a rollout's share last.
    pub(crate) fn stable(&self, guest: &str) -> Option<Arc<ActiveGuest>> {
        self.guests.lock().get(guest)?.stable.clone()
    }

    /// A view of `new` refused outright in favour of `stable`, with the reason.
    pub(crate) fn refused(&self, new: &ActiveGuest, stable: &ActiveGuest, why: &str) {
        let mut status = RolloutStatus::begin(
            stable.loaded.hash.clone(),
            new.loaded.hash.clone(),
            k8s_openapi::jiff::Timestamp::now(),
        );
        status.phase = Phase::RolledBack;
        status.message = format!(
            "not rolled out: {why}; a rollout runs both versions on one controller, so their watches must match (remove rollout from the grant to switch at once)"
        );
        self.publish(
            new.name(),
            RolloutView {
                status,
                share: Share::Old.to_string(),
                gates: Measured::default(),
            },
        );
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
