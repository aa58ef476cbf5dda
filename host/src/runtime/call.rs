//! One reconcile: a fresh store and instance of a loaded guest, one call of its `reconcile`
//! export under the deadline, and what came of it, timed by phase.

use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::{Engine, Store};

use super::load::LoadedGuest;
use super::store::{FailureKind, HostState, describe_failure, new_store};
use crate::capabilities::{Call, CallContext};
use crate::objects::ObjectRef;
use crate::wit::guest;

/// Input of one reconcile.
#[derive(Debug, Clone, Serialize)]
pub struct Request {
    #[serde(rename = "ref")]
    pub object_ref: ObjectRef,
    /// The cached object as JSON text, or none when it is gone.
    #[serde(skip)]
    pub object: Option<String>,
    pub deleting: bool,
    pub attempt: u32,
}

/// How a reconcile ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// The guest returned an action.
    Ok {
        #[serde(rename = "requeueAfterMs")]
        requeue_after_ms: Option<u64>,
    },
    /// The guest asked for a retry with backoff.
    Transient(String),
    /// The guest said retrying will not help.
    Permanent(String),
    /// The guest trapped (a panic, an abort, a bug); the text carries its message and stderr.
    Trap(String),
    /// The guest ran past its deadline and was interrupted.
    Deadline(String),
    /// The guest tried to grow its memory past its cap.
    MemoryLimit(String),
}

impl Outcome {
    /// The `result` label of `reconciler_reconcile_total`.
    pub fn result(&self) -> crate::metrics::ReconcileResult {
        use crate::metrics::ReconcileResult as R;
        match self {
            Outcome::Ok {
                requeue_after_ms: None,
            } => R::Success,
            Outcome::Ok { .. } => R::Requeue,
            Outcome::Transient(_) => R::Error,
            Outcome::Permanent(_) => R::PermanentError,
            Outcome::Trap(_) => R::Trap,
            Outcome::Deadline(_) => R::Deadline,
            Outcome::MemoryLimit(_) => R::MemoryLimit,
        }
    }
}

/// Result of one reconcile run, with what the host observed.
#[derive(Debug)]
pub struct Run {
    pub outcome: Outcome,
    /// Some write hit a 409 conflict: retry with backoff whatever the guest returned.
    pub conflicted: bool,
    /// Every import call, when recording was asked for.
    pub calls: Option<Vec<Call>>,
    /// Shadow mode: the intended changes that would have changed something.
    pub shadow_differences: Vec<crate::shadow::Difference>,
    /// Where the time went: store creation, instantiation, the guest call (including its host
    /// calls), and teardown (dropping the store returns the slot to the pool and resets its
    /// memory). [`Run::total_time`] is their sum.
    pub store_time: Duration,
    pub instantiate_time: Duration,
    pub call_time: Duration,
    pub teardown_time: Duration,
}

impl Run {
    pub fn total_time(&self) -> Duration {
        self.store_time + self.instantiate_time + self.call_time + self.teardown_time
    }
}

/// What the guest's `reconcile` returned, or why it did not; `Err` when the deadline's timeout
/// dropped the call.
type CallResult = Result<
    wasmtime::Result<Result<guest::Action, crate::wit::types::ReconcileError>>,
    tokio::time::error::Elapsed,
>;

/// Runs one reconcile of `guest` in a fresh instance, the whole call, imports included, under
/// a timeout at the deadline its grant sets. `slots` is the pool's size, for the outcome when
/// every slot is busy.
pub(super) async fn reconcile(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    mut call: CallContext,
    request: Request,
) -> Run {
    let started = Instant::now();
    let limits = &call.guest.grant.limits;
    let memory_bytes = limits.memory_bytes();
    call.deadline = started + limits.deadline();
    let deadline = call.deadline;
    let mut store = new_store(engine, call, memory_bytes);
    let stored = Instant::now();
    // Moved, not copied: the object is the largest value a reconcile passes in.
    let wit_request = guest::Request {
        ref_: request.object_ref.into(),
        object: request.object,
        deleting: request.deleting,
        attempt: request.attempt,
    };
    let mut instantiated = None;
    let result = tokio::time::timeout_at(deadline.into(), async {
        let instance = guest.instance_pre().instantiate_async(&mut store).await;
        instantiated = Some(Instant::now());
        let instance = instance?;
        let (result,) = guest
            .reconcile_func(&instance, &mut store)?
            .call_async(&mut store, (&wit_request,))
            .await?;
        Ok::<_, wasmtime::Error>(result)
    })
    .await;
    let instantiated = instantiated.unwrap_or(stored);
    let called = Instant::now();
    let outcome = outcome(result, &store, slots);
    let state = store.into_data();
    let finished = Instant::now();
    let state = state.into_call();
    Run {
        outcome,
        conflicted: state.conflicted,
        calls: state.calls,
        shadow_differences: state.shadow_differences,
        store_time: stored - started,
        instantiate_time: instantiated - stored,
        call_time: called - instantiated,
        teardown_time: finished - called,
    }
}

/// Classifies how the call ended: the guest's own answer, the host's slot limit, or a failure
/// described from what the store saw.
fn outcome(result: CallResult, store: &Store<HostState>, slots: u32) -> Outcome {
    match result {
        Ok(Ok(Ok(action))) => Outcome::Ok {
            requeue_after_ms: action
                .requeue_after_ms
                .map(|ms| ms.min(crate::capabilities::queue::MAX_DELAY_MS)),
        },
        Ok(Ok(Err(crate::wit::types::ReconcileError::Transient(m)))) => {
            Outcome::Transient(crate::validation::message(&m))
        }
        Ok(Ok(Err(crate::wit::types::ReconcileError::Permanent(m)))) => {
            Outcome::Permanent(crate::validation::message(&m))
        }
        // Every pool slot busy: the host's limit, not the guest's fault; retry later.
        Ok(Err(e)) if e.is::<wasmtime::PoolConcurrencyLimitError>() => Outcome::Transient(format!(
            "no free instance slot: {e:#}; the host runs at most {slots} guest instances at once"
        )),
        Ok(Err(e)) => {
            let (kind, message) = describe_failure(&e, store);
            match kind {
                FailureKind::Deadline => Outcome::Deadline(message),
                FailureKind::MemoryLimit => Outcome::MemoryLimit(message),
                FailureKind::Trap => Outcome::Trap(message),
            }
        }
        // The guest was waiting in an import (a host call, a WASI sleep or poll) when the
        // deadline passed: the wait was dropped with the call.
        Err(_) => Outcome::Deadline(format!(
            "guest ran past its deadline of {:?} while waiting in a host or WASI call, and was cancelled",
            store.data().call().guest.grant.limits.deadline()
        )),
    }
}
