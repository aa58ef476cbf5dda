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
}

impl ControllerSet {
    pub(super) fn new(readiness: Arc<Readiness>, shards: Option<Arc<ShardStatus>>) -> Self {
        Self {
            controllers: BTreeMap::new(),
            pending: BTreeMap::new(),
            readiness,
            shards,
            leading: true,
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
    /// under the same grant is not taken again: the version that replaced it runs instead.
    pub(super) async fn apply(&mut self, shared: &Shared, guest: Arc<ActiveGuest>) {
        let name = guest.name().to_owned();
        let guest = match shared.rollouts.instead_of(&guest) {
            Some(old) => old,
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
        match Controller::start(shared, guest.clone(), self.leading).await {
            Ok(controller) => {
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
