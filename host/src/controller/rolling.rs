//! A rollout in a running controller: the new version beside the stable one, which of them
//! each key goes to, what each did, and the task that judges the steps and ends the rollout.
//! The decisions themselves (shares, gates, steps) are `crate::supply::rollout`'s; this file
//! applies them to the workers.
//!
//! Why it is safe to move keys between versions at any moment: a key is handed to one worker
//! at a time (the work queue holds a key taken until `done`), and the version is chosen when a
//! key is taken. A share change (or the end of the rollout) thus moves a key only after its
//! reconcile in flight on the other version has ended; no key is reconciled by both at once.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::version::GuestVersion;
use crate::cluster::informers::Informer;
use crate::cluster::objects::ObjectKey;
use crate::config::Rollout;
use crate::controller::queue::{Priority, WorkQueue};
use crate::metrics::Metrics;
use crate::supply::guest_set::ActiveGuest;
use crate::supply::guest_set::Rollouts;
use crate::supply::rollout::{
    Ask, Holds, Measured, Moved, Outcome, Phase, RolloutStatus, RolloutView, Share, Window,
    judge_holding,
};

/// How often the driver judges the current step.
const JUDGE_EVERY: Duration = Duration::from_millis(500);

/// Which version ran a reconcile, as a rollout counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Side {
    /// The stable (old) version, actively.
    Old,
    /// The new version, actively (a canary key).
    New,
    /// The new version, in shadow, after the old one on the same key.
    Shadow,
}

impl Side {
    /// How the reconcile span names it (`rollout = "old"`, `"new"`, `"shadow"`).
    pub(super) fn label(self) -> &'static str {
        match self {
            Self::Old => "old",
            Self::New => "new",
            Self::Shadow => "shadow",
        }
    }
}

/// A rollout in flight in one controller.
pub(super) struct Rolling {
    pub(super) plan: Rollout,
    /// The new version, active on its share of keys.
    pub(super) new: Arc<GuestVersion>,
    /// The new version with its writes compared, not sent (its grant in shadow mode).
    pub(super) shadow: Arc<GuestVersion>,
    guest: String,
    /// The item the new version came from, which people's asks name.
    origin: String,
    /// Keys the new version enqueued: the old version's next reconcile of each is left out
    /// of its window.
    enqueued: super::version::Enqueued,
    metrics: Metrics,
    state: Mutex<State>,
}

struct State {
    status: RolloutStatus,
    share: Share,
    /// Counts the moves: a reconcile taken in one step and ended in the next counts in none.
    epoch: u64,
    /// The step `share` and the windows belong to.
    share_step: usize,
    new: Window,
    old: Window,
}

impl Rolling {
    /// A rollout from `old` (the stable version) to `new`: at the plan's first step from now,
    /// or where `resumed` stands (a rollout of the same versions under the same spec, taken up
    /// after a restart or a failover).
    pub(super) fn begin(
        plan: Rollout,
        old: &ActiveGuest,
        (new, shadow, enqueued): (
            Arc<GuestVersion>,
            Arc<GuestVersion>,
            super::version::Enqueued,
        ),
        resumed: Option<RolloutStatus>,
        metrics: Metrics,
    ) -> Self {
        let status = resumed.unwrap_or_else(|| {
            let mut status = RolloutStatus::begin(
                old.loaded.hash.clone(),
                new.guest.loaded.hash.clone(),
                Timestamp::now(),
            );
            status.generation = new.guest.origin.generation();
            status
        });
        let share = status.share(&plan);
        let share_step = status.step;
        let guest = new.guest.name().to_owned();
        let origin = new.guest.origin.name().to_owned();
        metrics.rollout_stands(&guest, status.step, share.percent(), status.phase.as_str());
        Self {
            plan,
            new,
            shadow,
            guest,
            origin,
            enqueued,
            metrics,
            state: Mutex::new(State {
                status,
                share,
                share_step,
                epoch: 0,
                new: Window::default(),
                old: Window::default(),
            }),
        }
    }

    /// Who reconciles which key now.
    pub(super) fn share(&self) -> Share {
        self.state.lock().share
    }

    /// The version that reconciles `key` actively now, the side it counts on, and the step
    /// (the epoch of moves) it is taken in.
    pub(super) fn side_of(&self, key: &ObjectKey) -> (Side, u64) {
        let state = self.state.lock();
        let side = if state
            .share
            .new_version_holds(key.namespace.as_deref(), &key.name)
        {
            Side::New
        } else {
            Side::Old
        };
        (side, state.epoch)
    }

    /// Counts one reconcile of `side` taken at `epoch`, if the step has not moved since.
    pub(super) fn record(&self, (side, epoch): (Side, u64), outcome: &Outcome) {
        let new = side != Side::Old;
        if !new && self.enqueued.lock().remove(&outcome.key) {
            // Queued by the new version: not the old version's own doing.
            return;
        }
        self.metrics
            .rollout_reconciled(&self.guest, new, outcome.failed, outcome.took);
        if let Some(differing) = &outcome.differing {
            self.metrics
                .rollout_compared(&self.guest, differing.is_empty());
        }
        let mut state = self.state.lock();
        if state.epoch != epoch {
            return;
        }
        if new {
            state.new.record(outcome);
        } else {
            state.old.record(outcome);
        }
    }

    /// Answers a person's ask, then judges the current step at `now` and applies the verdict;
    /// what moved, if anything. A move starts a new window for both versions.
    fn judge(&self, ask: Option<&Ask>, holds: Holds, now: Timestamp) -> Option<Moved> {
        let mut state = self.state.lock();
        let State {
            status, new, old, ..
        } = &mut *state;
        let answered = ask.and_then(|ask| status.answer(&self.plan, ask, now));
        let moved = if let Some(moved) = answered {
            moved
        } else {
            let elapsed = status.elapsed(now);
            let verdict = judge_holding(&self.plan, status.step, elapsed, (new, old), holds);
            let moved = status.apply(&self.plan, verdict, now);
            let phase = status.phase;
            self.metrics.rollout_stands(
                &self.guest,
                status.step,
                state.share.percent(),
                phase.as_str(),
            );
            moved?
        };
        Self::step(&self.metrics, &self.guest, &self.plan, &mut state);
        Some(moved)
    }

    /// Takes `recorded` (the status the judging replica wrote) as where the rollout stands;
    /// what moved, if anything.
    fn follow(&self, recorded: &RolloutStatus) -> Option<Moved> {
        let mut state = self.state.lock();
        let moved = state.status.follow(&self.plan, recorded);
        if moved.is_some() || state.status.step != state.share_step {
            Self::step(&self.metrics, &self.guest, &self.plan, &mut state);
        }
        moved
    }

    /// After a move: the share of the new step, a new epoch, and fresh windows.
    fn step(metrics: &Metrics, guest: &str, plan: &Rollout, state: &mut State) {
        state.share = state.status.share(plan);
        state.share_step = state.status.step;
        state.epoch += 1;
        if state.status.in_flight() {
            state.new = Window::default();
            state.old = Window::default();
        }
        let (step, phase) = (state.status.step, state.status.phase);
        metrics.rollout_stands(guest, step, state.share.percent(), phase.as_str());
    }

    /// Where the rollout stands, with both versions' windows.
    pub(super) fn view(&self) -> RolloutView {
        let state = self.state.lock();
        RolloutView {
            status: state.status.clone(),
            share: state.share.to_string(),
            gates: Measured {
                new: state.new.view(),
                old: state.old.view(),
            },
        }
    }
}

/// A controller's rollout in flight, as its workers see it (the whole rollout) and as its
/// mappings see it (the new version alone, whose `map` and `index` run beside the stable one's).
#[derive(Clone)]
pub(super) struct InFlight {
    rolling: watch::Sender<Option<Arc<Rolling>>>,
    candidate: watch::Sender<Option<Arc<GuestVersion>>>,
}

impl InFlight {
    pub(super) fn new() -> Self {
        Self {
            rolling: watch::channel(None).0,
            candidate: watch::channel(None).0,
        }
    }

    /// Begins or ends a rollout; the one it replaces.
    pub(super) fn set(&self, rolling: Option<Arc<Rolling>>) -> Option<Arc<Rolling>> {
        self.candidate
            .send_replace(rolling.as_ref().map(|r| r.new.clone()));
        self.rolling.send_replace(rolling)
    }

    pub(super) fn get(&self) -> Option<Arc<Rolling>> {
        self.rolling.borrow().clone()
    }

    pub(super) fn subscribe(&self) -> watch::Receiver<Option<Arc<Rolling>>> {
        self.rolling.subscribe()
    }

    /// The new version of the rollout in flight, if any.
    pub(super) fn candidate(&self) -> watch::Receiver<Option<Arc<GuestVersion>>> {
        self.candidate.subscribe()
    }
}

/// What the driver of a rollout acts on when it ends.
pub(super) struct Driver {
    pub(super) stable: watch::Sender<Arc<GuestVersion>>,
    pub(super) rolling: InFlight,
    pub(super) rollouts: Arc<Rollouts>,
    pub(super) queue: WorkQueue<ObjectKey>,
    pub(super) primary: Informer,
    /// Whether the controller's workers run (not a warm standby's).
    pub(super) leading: watch::Receiver<bool>,
}

impl Driver {
    /// Judges `rolling` every [`JUDGE_EVERY`] (or follows the replica that judges) until it
    /// is promoted or rolled back.
    pub(super) async fn drive(self, rolling: Arc<Rolling>) {
        let guest = rolling.guest.clone();
        let object = rolling.new.guest.origin.generation().is_some();
        loop {
            tokio::time::sleep(JUDGE_EVERY).await;
            // A Reconciler's rollout is judged by the replica that writes its status, which
            // every other replica (a standby, another shard) follows; a directory guest's has
            // no object to share it through, so each replica that reconciles judges its own.
            let judges = if object {
                self.rollouts.judging()
            } else {
                *self.leading.borrow()
            };
            let moved = if judges {
                let ask = self.rollouts.asked(&rolling.origin);
                let holds = holds(&self.primary, rolling.share());
                rolling.judge(ask.as_ref(), holds, Timestamp::now())
            } else {
                self.rollouts
                    .recorded(&rolling.origin)
                    .and_then(|recorded| rolling.follow(&recorded))
            };
            self.rollouts.publish(&rolling.new.guest, rolling.view());
            let Some(moved) = moved else {
                continue;
            };
            match moved.phase {
                Phase::Progressing | Phase::Paused => {
                    tracing::info!(guest = %guest, from = %moved.from, to = %moved.to, judged = judges, "rollout: next step");
                }
                Phase::Promoted => {
                    self.rollouts.set_stable(&rolling.new.guest);
                    self.stable.send_replace(rolling.new.clone());
                    self.rolling.set(None);
                    tracing::info!(guest = %guest, hash = %rolling.new.guest.loaded.hash, judged = judges, "rollout: promoted; the new version reconciles every key");
                    return;
                }
                Phase::RolledBack | Phase::Aborted => {
                    self.roll_back(&rolling, &moved);
                    return;
                }
            }
        }
    }

    /// The old version takes every key back: the new one's keys are reconciled again by it,
    /// and the new version's content is not taken again under the same grant.
    fn roll_back(&self, rolling: &Rolling, moved: &Moved) {
        let view = rolling.view();
        self.rolling.set(None);
        let gate = moved.gate.unwrap_or("abort");
        rolling.metrics.rollout_rolled_back(&rolling.guest, gate);
        self.rollouts.fail(&rolling.new.guest);
        let again = requeue(&self.queue, &self.primary, moved.from);
        tracing::warn!(
            guest = %rolling.guest,
            hash = %rolling.new.guest.loaded.hash,
            keys = again,
            "rollout: rolled back ({}); the old version reconciles every key again",
            view.status.message
        );
    }
}

/// Queues again every cached key the new version held at `share`, for the stable version to
/// reconcile: what the new version wrote (or failed to) is looked at again. How many.
pub(super) fn requeue(queue: &WorkQueue<ObjectKey>, primary: &Informer, share: Share) -> usize {
    let mut again = 0;
    for object in primary.list(None, None) {
        let key = ObjectKey {
            namespace: object.metadata.namespace.clone(),
            name: object.metadata.name.clone().unwrap_or_default(),
        };
        if share.new_version_holds(key.namespace.as_deref(), &key.name) {
            queue.add_with(key, Priority::Normal);
            again += 1;
        }
    }
    again
}

/// Which sides of `share` hold a cached object now (in shadow, both sides are every key).
fn holds(primary: &Informer, share: Share) -> Holds {
    let mut holds = Holds {
        new: false,
        old: false,
    };
    for object in primary.list(None, None) {
        let (namespace, name) = (
            object.metadata.namespace.as_deref(),
            object.metadata.name.as_deref().unwrap_or_default(),
        );
        if share == Share::Shadow {
            return Holds::BOTH;
        }
        if share.new_version_holds(namespace, name) {
            holds.new = true;
        } else {
            holds.old = true;
        }
        if holds == Holds::BOTH {
            break;
        }
    }
    holds
}
