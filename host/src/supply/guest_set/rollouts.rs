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
pub(crate) struct Rollouts {
    guests: parking_lot::Mutex<BTreeMap<String, Tracked>>,
    /// Told when a rollout moves (a step, a promotion, a rollback), so a Reconciler's status
    /// shows each step, not only what a periodic refresh samples.
    moved: tokio::sync::Notify,
    /// People's asks (`crate::supply::rollout::ASK_ANNOTATION`), by the item (`Origin` name)
    /// whose rollout they are about, with the version named by its content hash.
    asks: parking_lot::Mutex<BTreeMap<String, Ask>>,
    /// The rollouts as the objects' statuses record them, by item, versions named by their
    /// content hashes: what a controller that does not judge follows, and what a controller
    /// started afresh (a restart, a failover) resumes.
    recorded: parking_lot::Mutex<BTreeMap<String, RolloutStatus>>,
    /// Whether this replica judges the rollouts of `Reconciler` objects (the one that writes
    /// their status); the others follow what it wrote.
    judging: std::sync::atomic::AtomicBool,
}

impl Default for Rollouts {
    fn default() -> Self {
        Self {
            guests: parking_lot::Mutex::default(),
            moved: tokio::sync::Notify::new(),
            asks: parking_lot::Mutex::default(),
            recorded: parking_lot::Mutex::default(),
            judging: std::sync::atomic::AtomicBool::new(true),
        }
    }
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
    /// The spec `view`'s new version runs under: a controller started again under the same
    /// spec resumes the rollout where `view` stands.
    view_spec: Option<Spec>,
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
    /// Where the rollout of `new` stands now.
    pub(crate) fn publish(&self, new: &ActiveGuest, view: RolloutView) {
        let mut guests = self.guests.lock();
        let tracked = guests.entry(new.name().to_owned()).or_default();
        tracked.view_spec = Some(Spec::of(new));
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

    /// Drops the view of `guest`'s last rollout, now that a controller started without one
    /// runs the single version `running`: an old view's `from` or share would say otherwise.
    /// A rollback back to `running` stays in view while its version is held back, so the
    /// status keeps saying so (and a restarted host keeps it rolled back).
    pub(crate) fn drop_view(&self, guest: &str, running: &ActiveGuest) {
        if let Some(tracked) = self.guests.lock().get_mut(guest) {
            let rolled_back_to_it = tracked.view.as_ref().is_some_and(|v| {
                matches!(v.status.phase, Phase::RolledBack | Phase::Aborted)
                    && v.status.from == running.loaded.hash
                    && tracked.failed.iter().any(|(hash, _)| *hash == v.status.to)
            });
            if !rolled_back_to_it {
                tracked.view = None;
            }
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
            new,
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

    /// Every rollout the objects' statuses record now, by item.
    pub(crate) fn set_recorded(&self, recorded: BTreeMap<String, RolloutStatus>) {
        *self.recorded.lock() = recorded;
    }

    /// The rollout item `origin`'s status records, if any.
    pub(crate) fn recorded(&self, origin: &str) -> Option<RolloutStatus> {
        self.recorded.lock().get(origin).cloned()
    }

    /// Whether this replica judges the rollouts of `Reconciler` objects.
    pub(crate) fn set_judging(&self, judging: bool) {
        self.judging
            .store(judging, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn judging(&self) -> bool {
        self.judging.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Where a rollout from `stable` to `new` under `plan` resumes, if one of the same versions
    /// under the same spec was in flight: the last this process saw (a controller restarted by
    /// a reshard or a regained lease), else the object's status (a restarted host, a failover).
    pub(crate) fn resumable(
        &self,
        stable: &ActiveGuest,
        new: &ActiveGuest,
        plan: &crate::config::Rollout,
    ) -> Option<RolloutStatus> {
        self.about(stable, new, |status| status.resumable_under(plan))
    }

    /// How a rollout from `stable` to `new` under `new`'s spec ended, if it did, as this
    /// process saw it or the object's status records it (a replica that took over, or that ran
    /// no controller while another judged): promoted, or rolled back.
    pub(crate) fn ended(&self, stable: &ActiveGuest, new: &ActiveGuest) -> Option<RolloutStatus> {
        self.about(stable, new, |status| !status.in_flight())
    }

    /// The rollout from `stable` to `new` under `new`'s spec that `wanted` accepts: as this
    /// process last saw it, else as the object's status records it.
    fn about(
        &self,
        stable: &ActiveGuest,
        new: &ActiveGuest,
        wanted: impl Fn(&RolloutStatus) -> bool,
    ) -> Option<RolloutStatus> {
        let ours = |status: &RolloutStatus| {
            status.from == stable.loaded.hash && status.to == new.loaded.hash && wanted(status)
        };
        let spec = Spec::of(new);
        let seen = self.guests.lock().get(new.name()).and_then(|t| {
            let view = t.view.as_ref()?;
            (t.view_spec.as_ref() == Some(&spec) && ours(&view.status)).then(|| view.status.clone())
        });
        seen.or_else(|| {
            let recorded = self.recorded(new.origin.name())?;
            (recorded.generation.is_some()
                && recorded.generation == new.origin.generation()
                && ours(&recorded))
            .then_some(recorded)
        })
    }

    /// A host started afresh takes up `status`, a rollout from `from` to `new` that its object
    /// records: `from` reconciles the keys outside the share, and a rollout rolled back stays
    /// rolled back (`new` is not taken again under this spec) and keeps saying so.
    /// Until its controller starts it, the rollout is in view as recorded, so the status
    /// keeps saying where it stands.
    pub(crate) fn resume(
        &self,
        from: &Arc<ActiveGuest>,
        new: &ActiveGuest,
        status: Option<RolloutStatus>,
    ) {
        self.set_stable(from);
        // Not begun yet: it begins from `from`.
        let Some(status) = status else {
            return;
        };
        let share = match &new.grant.rollout {
            Some(plan) if status.in_flight() => status.share(plan),
            _ => Share::Old,
        };
        if !status.in_flight() {
            self.fail(new);
        }
        self.publish(
            new,
            RolloutView {
                status,
                share: share.to_string(),
                gates: Measured::default(),
            },
        );
    }

    /// Forgets `guest` (unloaded): a version loaded again later starts afresh.
    pub(crate) fn forget(&self, guest: &str) {
        self.guests.lock().remove(guest);
    }
}
