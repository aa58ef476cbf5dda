//! What this replica may reconcile, and when that changes: one concept for the three ways a
//! host runs.
//!
//! | mode                     | owns                                   | writes while                |
//! |--------------------------|----------------------------------------|-----------------------------|
//! | alone (default)          | everything, from the start             | always                      |
//! | `--leader-elect`         | everything while it holds the lease    | it holds the lease          |
//! | `--shards auto`          | the slots the ring gives it            | its member lease is renewed |
//!
//! The [`WriteFence`] belongs here: it is closed whenever this replica may not write (a lost
//! lease, a fenced ring member, shutdown) before its controllers stop, so a reconcile still
//! running writes nothing more. [`Owned`] is what the manager runs controllers with; a
//! [`Change`] is the one event it follows, whichever mode produced it.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::watch;

use super::{Lease, Replicas, Settings, Standby};
use crate::cluster::shard_ranges::SlotSet;
use crate::metrics::Metrics;
use crate::replicas::fence::WriteFence;
use crate::replicas::leader::{Election, LeaderOptions};
use crate::replicas::shards::{FenceProbe, Ring, RingOptions, ShardState, ShardStatus};

/// What this replica's controllers may reconcile now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Owned {
    Nothing,
    Everything,
    /// Sharded: the keys whose uid hashes into these slots (never empty: that is `Nothing`).
    Slots(SlotSet),
}

impl Owned {
    pub(super) fn anything(self) -> bool {
        self != Self::Nothing
    }

    /// Sharded mode's slots; empty for a replica that owns nothing.
    pub(super) fn slots(self) -> SlotSet {
        match self {
            Self::Slots(slots) => slots,
            Self::Nothing | Self::Everything => SlotSet::empty(),
        }
    }

    fn of_slots(slots: SlotSet) -> Self {
        if slots.is_empty() {
            Self::Nothing
        } else {
            Self::Slots(slots)
        }
    }
}

/// A change the manager acts on.
#[derive(Debug)]
pub(super) enum Change {
    /// Leader election: the lease was won (`true`) or lost.
    Lease(bool),
    /// Sharded: the member lease was not renewed in time (or was taken). The fence is closed
    /// already; every controller must stop now.
    Fenced,
    /// Sharded: the slots controllers may run with changed.
    Slots(ShardState),
}

/// This replica's part in the work, in one of the three modes.
pub(super) struct Ownership {
    fence: WriteFence,
    mode: Mode,
    /// `--standby`: whether a leader-elected replica runs its controllers while standing by.
    standby: Standby,
}

enum Mode {
    Alone,
    Elected(Election),
    Sharded(Box<Sharding>),
}

/// Sharded mode: the ring membership and what the manager follows of it.
struct Sharding {
    ring: Ring,
    probe: FenceProbe,
    state: watch::Receiver<ShardState>,
    fences: watch::Receiver<u64>,
    /// The slots the controllers run with now: the ring releases a slot only once it is out.
    running: watch::Sender<SlotSet>,
    status: Arc<ShardStatus>,
    /// How long a handover lets running reconciles finish before cancelling them.
    grace: Duration,
}

impl Ownership {
    /// Joins the leader election or the shard ring, as `settings` say. The ring starts fenced:
    /// nothing is written until it says which slots are ours.
    pub(super) fn join(settings: &Settings, metrics: &Metrics) -> anyhow::Result<Self> {
        let fence = WriteFence::default();
        if crate::replicas::fence::disabled_for_tests() {
            tracing::warn!(
                "{} is set: the write fence never closes and a lost lease is ignored (a deliberately broken build for the robustness checker)",
                crate::replicas::fence::BREAK_FENCE_ENV
            );
        }
        let (lease, identity, kube) = (&settings.lease, &settings.identity, &settings.kube);
        let (mode, standby) = match settings.replicas {
            Replicas::Sharded => (
                Mode::Sharded(Box::new(join_ring(lease, identity, kube, &fence, metrics)?)),
                Standby::Warm,
            ),
            Replicas::Elected { standby } => (
                Mode::Elected(join_election(lease, identity, kube, &fence, metrics)?),
                standby,
            ),
            Replicas::Alone => (Mode::Alone, Standby::Warm),
        };
        Ok(Self {
            fence,
            mode,
            standby,
        })
    }

    /// Whether this replica, when it owns nothing, runs its controllers standing by: caches
    /// synced, queues filled, no workers (leader election with `--standby warm`).
    pub(super) fn warm_standby(&self) -> bool {
        matches!(self.mode, Mode::Elected(_)) && self.standby == Standby::Warm
    }

    /// What the replica owns before the first [`Change`].
    pub(super) fn initially(&self) -> Owned {
        match self.mode {
            Mode::Alone => Owned::Everything,
            Mode::Elected(_) | Mode::Sharded(_) => Owned::Nothing,
        }
    }

    pub(super) fn fence(&self) -> &WriteFence {
        &self.fence
    }

    pub(super) fn is_sharded(&self) -> bool {
        matches!(self.mode, Mode::Sharded(_))
    }

    /// `/shards`, when sharded.
    pub(super) fn status(&self) -> Option<Arc<ShardStatus>> {
        match &self.mode {
            Mode::Sharded(s) => Some(s.status.clone()),
            Mode::Alone | Mode::Elected(_) => None,
        }
    }

    /// The next change; never returns alone. Errs when the election or the ring stopped,
    /// which leaves the host unable to tell whether it may write.
    pub(super) async fn changed(&mut self) -> anyhow::Result<Change> {
        match &mut self.mode {
            Mode::Alone => std::future::pending().await,
            Mode::Elected(election) => {
                let rx = &mut election.is_leader;
                rx.changed().await.context("leader election stopped")?;
                Ok(Change::Lease(*rx.borrow()))
            }
            Mode::Sharded(s) => {
                let fenced = tokio::select! {
                    biased;
                    r = s.fences.changed() => r.map(|()| true),
                    r = s.state.changed() => r.map(|()| false),
                };
                if fenced.context("the shard ring stopped")? {
                    Ok(Change::Fenced)
                } else {
                    Ok(Change::Slots(s.state.borrow_and_update().clone()))
                }
            }
        }
    }

    /// What a [`Change`] leaves this replica owning. Opens or closes the fence to match (a
    /// fence the ring raised meanwhile wins: what it closed is never reopened).
    pub(super) fn settle(&self, change: &Change) -> Owned {
        let owned = match change {
            Change::Lease(true) => Owned::Everything,
            Change::Lease(false) | Change::Fenced => Owned::Nothing,
            Change::Slots(state) => Owned::of_slots(state.active),
        };
        if !owned.anything() {
            self.fence.close();
            return owned;
        }
        self.fence.open();
        if let Mode::Sharded(s) = &self.mode
            && s.probe.is_fenced()
        {
            self.fence.close();
            return Owned::Nothing;
        }
        owned
    }

    /// Whether this replica releases orphaned finalizers: one replica does it, the leader or,
    /// sharded, the owner of slot 0.
    pub(super) fn coordinates(&self, owned: Owned) -> bool {
        match &self.mode {
            Mode::Sharded(s) => owned.anything() && s.state.borrow().active.contains(0),
            Mode::Alone | Mode::Elected(_) => owned.anything(),
        }
    }

    /// Sharded: the slots the controllers run with now (the ring releases a slot only once it
    /// is out of them).
    pub(super) fn running(&self) -> SlotSet {
        match &self.mode {
            Mode::Sharded(s) => *s.running.borrow(),
            Mode::Alone | Mode::Elected(_) => SlotSet::empty(),
        }
    }

    pub(super) fn set_running(&self, slots: SlotSet) {
        if let Mode::Sharded(s) = &self.mode {
            s.running.send_replace(slots);
        }
    }

    /// How long a handover lets running reconciles finish.
    pub(super) fn handover_grace(&self) -> Option<Duration> {
        match &self.mode {
            Mode::Sharded(s) => Some(s.grace),
            Mode::Alone | Mode::Elected(_) => None,
        }
    }

    /// After the controllers stopped: releases the lease or leaves the ring, so that another
    /// replica takes over at once.
    pub(super) async fn leave(self) {
        self.fence.close();
        match self.mode {
            Mode::Alone => {}
            Mode::Elected(election) => election.release().await,
            Mode::Sharded(s) => {
                s.running.send_replace(SlotSet::empty());
                s.ring.leave().await;
            }
        }
    }
}

fn join_election(
    lease: &Lease,
    identity: &str,
    kube_config: &kube::Config,
    fence: &WriteFence,
    metrics: &Metrics,
) -> anyhow::Result<Election> {
    let options = LeaderOptions {
        lease_name: lease.name.clone(),
        namespace: lease.namespace.clone(),
        identity: identity.to_owned(),
        duration: lease.duration,
        grace: lease.duration / 3,
    };
    tracing::info!(%identity, lease = %options.lease_name, "joining leader election");
    // Nothing is written before the lease is won.
    fence.close();
    // A client of its own (its own connections): guests' writes, however many, never
    // queue ahead of a lease renewal.
    // Its lease watch retries by itself, honouring `Retry-After` (`crate::cluster::retry_after`).
    let lease_client = crate::cluster::retry_after::client(kube_config)
        .context("cannot build the leader election's Kubernetes client")?;
    Ok(Election::start_counting(
        lease_client,
        &options,
        fence.clone(),
        metrics.watch_throttled("Lease"),
    ))
}

fn join_ring(
    lease: &Lease,
    identity: &str,
    kube_config: &kube::Config,
    fence: &WriteFence,
    metrics: &Metrics,
) -> anyhow::Result<Sharding> {
    let identity = identity.to_lowercase();
    let options = RingOptions::new(&lease.name, &lease.namespace, &identity, lease.duration)?;
    tracing::info!(%identity, ring = %options.name, namespace = %options.namespace, "joining the shard ring");
    // As for the election: renewals never queue behind guests' writes.
    let client = kube::Client::try_from(kube_config.clone())
        .context("cannot build the shard ring's Kubernetes client")?;
    let (running, running_rx) = watch::channel(SlotSet::empty());
    fence.close();
    let grace = options.fence_margin / 2;
    let ring = Ring::join(client, options, running_rx, fence.clone());
    let state = ring.state();
    Ok(Sharding {
        status: ShardStatus::new(identity, state.clone(), metrics),
        fences: ring.fences(),
        probe: ring.fence_probe(),
        state,
        ring,
        running,
        grace,
    })
}
