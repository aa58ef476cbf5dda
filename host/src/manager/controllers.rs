//! The set of running controllers, one per active guest: started, swapped to a new version,
//! retried when they cannot start (e.g. their CRD is not installed yet), stopped (drained, then
//! aborted after a grace) or aborted at once.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster::informers::Informer;
use crate::controller::{Controller, Shared};
use crate::manager::server::Readiness;
use crate::replicas::shards::ShardStatus;
use crate::supply::guest_set::ActiveGuest;

/// How often a guest whose controller could not start is retried.
pub(super) const START_RETRY: Duration = Duration::from_secs(5);

pub(super) struct ControllerSet {
    controllers: BTreeMap<String, Controller>,
    /// Guests whose controller failed to start, retried every [`START_RETRY`].
    pending: BTreeMap<String, Arc<ActiveGuest>>,
    readiness: Arc<Readiness>,
    /// Sharded: `/shards` and the keys gauge read each guest's primary cache from here.
    shards: Option<Arc<ShardStatus>>,
    /// Whether controllers start their workers: false while a warm standby waits for the lease.
    leading: bool,
    /// The guest set, whose configuration judges a stable version again under a new grant.
    guests: Arc<crate::supply::guest_set::Guests>,
}

impl ControllerSet {
    pub(super) fn new(
        readiness: Arc<Readiness>,
        shards: Option<Arc<ShardStatus>>,
        guests: Arc<crate::supply::guest_set::Guests>,
    ) -> Self {
        Self {
            controllers: BTreeMap::new(),
            pending: BTreeMap::new(),
            readiness,
            shards,
            leading: true,
            guests,
        }
    }

    /// Whether controllers started from now on start their workers (see [`Self::lead_all`]).
    pub(super) fn set_leading(&mut self, leading: bool) {
        self.leading = leading;
    }

    /// Starts the workers of every controller started standing by.
    pub(super) fn lead_all(&self) {
        for controller in self.controllers.values() {
            controller.lead();
        }
    }

    /// Every informer the controllers hold, to keep warm across a restart.
    pub(super) fn informers(&self) -> Vec<Informer> {
        self.controllers
            .values()
            .flat_map(Controller::informers)
            .collect()
    }

    /// Starts, swaps, rolls out or restarts the controller of `guest`. A version rolled back
    /// under the same spec is not taken again: the stable version runs instead, under the
    /// grant the guest has now.
    pub(super) async fn apply(&mut self, shared: &Shared, guest: Arc<ActiveGuest>) {
        let name = guest.name().to_owned();
        let guest = match shared.rollouts.instead_of(&guest) {
            // The stable version, under the grant the guest has now (a grant narrowed while
            // a rolled-back version waits must take effect).
            Some(stable) if stable.grant == guest.grant => stable,
            Some(stable) => match stable.regrant(&guest.origin, &self.guests.config()) {
                Ok(regranted) => Arc::new(regranted),
                Err(e) => {
                    tracing::error!(guest = %name, "the stable version cannot run under the new grant ({e}) and the new one was rolled back under this spec: the guest stops");
                    // Stopped, not forgotten: the rollback stays remembered.
                    self.pending.remove(&name);
                    self.stop(&name).await;
                    return;
                }
            },
            None => guest,
        };
        if let Some(controller) = self.controllers.get(&name)
            && controller.runs(&guest)
        {
            return;
        }
        if let Some(controller) = self.controllers.get_mut(&name)
            && controller.can_swap_to(&guest)
        {
            if controller.stable_is(&guest) {
                // The content the rollout started from, back (a directory guest's old file put
                // back): the rollout ends and the stable version goes on.
                controller.swap(shared, guest);
            } else if let Some(plan) = guest.grant.rollout.clone() {
                controller.roll(shared, &guest, plan);
            } else {
                shared.rollouts.set_stable(&guest);
                controller.swap(shared, guest);
                tracing::info!(guest = %name, "new guest version swapped in");
            }
            return;
        }
        self.stop(&name).await;
        self.start(shared, guest).await;
    }

    /// Applies every guest, then tells `/shards` which caches hold their shares.
    pub(super) async fn apply_all(&mut self, shared: &Shared, guests: Vec<Arc<ActiveGuest>>) {
        for guest in guests {
            self.apply(shared, guest).await;
        }
        self.report_primaries();
    }

    async fn start(&mut self, shared: &Shared, guest: Arc<ActiveGuest>) {
        let name = guest.name().to_owned();
        let (first, then) = self.first_version(shared, &guest);
        // A rollout is in place before the workers start: no key of the new version's share
        // is taken by the stable one first.
        let leading = self.leading && then.is_none();
        match Controller::start(shared, first.clone(), leading).await {
            Ok(mut controller) => {
                shared.rollouts.set_stable(&first);
                match then {
                    Some(plan) => {
                        controller.roll(shared, &guest, plan);
                        if self.leading {
                            controller.lead();
                        }
                    }
                    // One version, the one asked for: no rollout view says otherwise. (A
                    // version refused for its watches keeps the view that says why.)
                    None if Arc::ptr_eq(&first, &guest) => shared.rollouts.drop_view(&name, &first),
                    None => {}
                }
                self.pending.remove(&name);
                self.readiness
                    .controllers
                    .lock()
                    .insert(name.clone(), controller.synced());
                self.controllers.insert(name, controller);
                self.report_primaries();
            }
            Err(e) => {
                tracing::error!(guest = %name, "controller cannot start, retrying every {START_RETRY:?}: {e:#}");
                self.pending.insert(name, guest);
            }
        }
    }

    /// The version a controller for `guest` starts with, and the plan to roll `guest` out by
    /// once it runs. Under a plan, a controller started again (a new grant, a lease regained)
    /// for a version other than the last stable one starts with the stable one, judged again
    /// under the new grant, and rolls the new one out: no restart skips a rollout. A version
    /// whose watches differ from the stable one's cannot share its controller: it is refused
    /// (as rolled back) and the stable one runs; without the plan it would switch at once.
    fn first_version(
        &self,
        shared: &Shared,
        guest: &Arc<ActiveGuest>,
    ) -> (Arc<ActiveGuest>, Option<crate::config::Rollout>) {
        let (Some(plan), Some(stable)) = (
            guest.grant.rollout.clone(),
            shared.rollouts.stable(guest.name()),
        ) else {
            return (guest.clone(), None);
        };
        if stable.loaded.hash == guest.loaded.hash {
            return (guest.clone(), None);
        }
        let stable = match stable.regrant(&guest.origin, &self.guests.config()) {
            Ok(stable) => Arc::new(stable),
            Err(e) => {
                tracing::warn!(guest = %guest.name(), "the stable version cannot run under the new grant ({e}); the new version starts without a rollout");
                return (guest.clone(), None);
            }
        };
        // Ended where another replica judged it (this one ran no controller meanwhile, or
        // followed from a standby): promoted, the new version runs alone; rolled back, the
        // stable one does, and the rollback stays in view.
        if let Some(ended) = shared.rollouts.ended(&stable, guest) {
            if ended.phase == crate::supply::rollout::Phase::Promoted {
                return (guest.clone(), None);
            }
            shared.rollouts.resume(&stable, guest, Some(ended));
            return (stable, None);
        }
        if !crate::controller::same_watches(&stable, guest) {
            tracing::warn!(guest = %guest.name(), hash = %guest.loaded.hash, "not rolled out: the new version watches other kinds, selectors or a finalizer than the stable one, and a rollout runs both on one controller; the stable version runs (remove rollout from the grant to switch at once)");
            shared.rollouts.fail(guest);
            shared.rollouts.refused(
                guest,
                &stable,
                "the new version changes what the guest watches",
            );
            return (stable, None);
        }
        (stable, Some(plan))
    }

    pub(super) async fn retry_pending(&mut self, shared: &Shared) {
        let pending: Vec<_> = self.pending.values().cloned().collect();
        for guest in pending {
            self.start(shared, guest).await;
        }
    }

    /// Stops the controller of an unloaded guest and forgets its retry.
    pub(super) async fn remove(&mut self, shared: &Shared, name: &str) {
        self.pending.remove(name);
        // A version loaded again later starts afresh, its rollbacks forgotten.
        shared.rollouts.forget(name);
        self.stop(name).await;
    }

    async fn stop(&mut self, name: &str) {
        self.readiness.controllers.lock().remove(name);
        if let Some(controller) = self.controllers.remove(name) {
            controller.stop().await;
            self.report_primaries();
        }
    }

    /// Brings the set in line with `active` after missed guest events.
    pub(super) async fn resync(&mut self, shared: &Shared, active: Vec<Arc<ActiveGuest>>) {
        let names: Vec<String> = self.controllers.keys().cloned().collect();
        for name in names {
            if !active.iter().any(|g| g.name() == name) {
                self.stop(&name).await;
            }
        }
        for guest in active {
            self.apply(shared, guest).await;
        }
    }

    /// Objects in `guest`'s primary cache that carry `finalizer`, if it runs here.
    pub(super) fn carrying(&self, guest: &str, finalizer: &str) -> Option<usize> {
        self.controllers.get(guest).map(|c| c.carrying(finalizer))
    }

    pub(super) fn is_empty(&self) -> bool {
        self.controllers.is_empty()
    }

    /// The informers other than the primary ones, to keep warm across a restart.
    pub(super) fn other_informers(&self) -> Vec<Informer> {
        self.controllers
            .values()
            .flat_map(Controller::other_informers)
            .collect()
    }

    /// Aborts every controller now: running reconciles are cancelled where they are.
    pub(super) async fn abort_all(&mut self) {
        self.readiness.controllers.lock().clear();
        for (_, controller) in std::mem::take(&mut self.controllers) {
            controller.abort().await;
        }
        self.report_primaries();
    }

    /// Stops every controller: running reconciles get `grace` to finish, then the fence
    /// closes and they are cancelled (a guest waiting in a WASI sleep included), so nothing
    /// more is written.
    pub(super) async fn stop_all_within(
        &mut self,
        grace: Duration,
        fence: &crate::replicas::fence::WriteFence,
    ) {
        self.readiness.controllers.lock().clear();
        let controllers = std::mem::take(&mut self.controllers);
        let drain = futures::future::join_all(controllers.values().map(Controller::drain));
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!("reconciles still running after {grace:?}; cancelling them");
        }
        fence.close();
        for (_, controller) in controllers {
            controller.abort().await;
        }
        self.report_primaries();
    }

    /// Tells `/shards` and the keys gauge which caches hold each guest's share.
    fn report_primaries(&self) {
        if let Some(status) = &self.shards {
            status.set_primaries(
                self.controllers
                    .iter()
                    .map(|(name, c)| {
                        let share: Arc<dyn crate::cluster::informers::Share> =
                            Arc::new(c.primary().clone());
                        (name.clone(), share)
                    })
                    .collect(),
            );
        }
    }
}
