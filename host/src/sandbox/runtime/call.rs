//! One reconcile: a fresh store and instance of a loaded guest (or, under an opt-in reuse
//! policy, one kept from the same worker's last reconcile of the same guest version), one call
//! of its `reconcile` export under the deadline, and what came of it, timed by phase.

use std::time::{Duration, Instant};

use serde::Serialize;
use wasmtime::component::Instance;
use wasmtime::{Engine, Store};

use super::load::LoadedGuest;
use super::store::{FailureKind, HostState, describe_failure, new_store};
use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use crate::config::Reuse;
use crate::sandbox::capabilities::{Call, CallContext};
use crate::sandbox::wit::guest;

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
    pub(crate) fn result(&self) -> crate::metrics::ReconcileResult {
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
    pub(crate) conflicted: bool,
    /// Every import call, when recording was asked for.
    pub calls: Option<Vec<Call>>,
    /// A replay's state after the call: where the guest diverged from the record, if it did.
    pub(crate) replay: Option<Box<crate::sandbox::capabilities::replay::Replayer>>,
    /// Shadow mode: the intended changes that would have changed something.
    pub shadow_differences: Vec<crate::sandbox::shadow::Difference>,
    /// It ran in an instance kept from an earlier reconcile (`limits.instanceReuse`).
    pub reused: bool,
    /// Where the time went: store creation, instantiation, the guest call (including its host
    /// calls), and teardown (dropping the store returns the slot to the pool and resets its
    /// memory). [`Run::total_time`] is their sum.
    pub store_time: Duration,
    pub instantiate_time: Duration,
    pub call_time: Duration,
    pub teardown_time: Duration,
}

impl Run {
    pub(crate) fn total_time(&self) -> Duration {
        self.store_time + self.instantiate_time + self.call_time + self.teardown_time
    }
}

/// What the guest's `reconcile` returned, or why it did not; `Err` when the deadline's timeout
/// dropped the call.
type CallResult = Result<
    wasmtime::Result<Result<guest::Action, crate::sandbox::wit::types::ReconcileError>>,
    tokio::time::error::Elapsed,
>;

/// An instance kept between reconciles of one guest version on one worker (`limits.instanceReuse`):
/// its store (memory, WASI state, the memory cap counted over its whole life) and instance.
pub struct Warm {
    store: Store<HostState>,
    instance: Instance,
    /// The guest version (content hash) it was made from.
    hash: String,
    uses: u32,
    last_used: Instant,
}

impl Warm {
    /// Whether the next reconcile of `hash` may run in it under `reuse`.
    fn serves(&self, hash: &str, reuse: Reuse, now: Instant) -> bool {
        self.hash == hash
            && self.uses < reuse.uses
            && now.saturating_duration_since(self.last_used) < reuse.idle
    }
}

/// Runs one reconcile of `guest` in a fresh instance, the whole call, imports included, under
/// a timeout at the deadline its grant sets. `slots` is the pool's size, for the outcome when
/// every slot is busy.
pub(super) async fn reconcile(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    call: CallContext,
    request: Request,
) -> Run {
    reconcile_reusing(engine, slots, guest, call, request, &mut None, None).await
}

/// [`reconcile`], in `warm`'s instance when `reuse` allows it (same guest version, fewer than
/// `reuse.uses` reconciles, used within `reuse.idle`), else in a fresh one. Afterwards `warm`
/// holds the instance again if the reconcile returned `Ok` and reuse allows another; after a
/// trap, a deadline, a memory-cap hit or any error it is dropped (and a cancelled reconcile
/// drops it with the future).
pub(super) async fn reconcile_reusing(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    mut call: CallContext,
    request: Request,
    warm: &mut Option<Warm>,
    reuse: Option<Reuse>,
) -> Run {
    let started = Instant::now();
    let limits = &call.guest.grant.limits;
    let memory_bytes = limits.memory_bytes();
    call.deadline = started + limits.deadline();
    let deadline = call.deadline;
    let kept = warm
        .take()
        .filter(|w| reuse.is_some_and(|r| w.serves(&guest.hash, r, started)));
    let (mut store, kept_instance, uses) = match kept {
        Some(mut w) => {
            w.store.data_mut().next_call(call);
            w.store.set_epoch_deadline(1);
            (w.store, Some(w.instance), w.uses)
        }
        None => (new_store(engine, call, memory_bytes), None, 0),
    };
    let reused = kept_instance.is_some();
    let stored = Instant::now();
    // Moved, not copied: the object is the largest value a reconcile passes in.
    let wit_request = guest::Request {
        ref_: request.object_ref.into(),
        object: request.object,
        deleting: request.deleting,
        attempt: request.attempt,
    };
    let mut instantiated = None;
    let mut instance = None;
    let result = tokio::time::timeout_at(deadline.into(), async {
        let ready = match kept_instance {
            Some(ready) => ready,
            None => guest.instance_pre().instantiate_async(&mut store).await?,
        };
        instantiated = Some(Instant::now());
        instance = Some(ready);
        let (result,) = guest
            .reconcile_func(&ready, &mut store)?
            .call_async(&mut store, (&wit_request,))
            .await?;
        Ok::<_, wasmtime::Error>(result)
    })
    .await;
    let instantiated = instantiated.unwrap_or(stored);
    let called = Instant::now();
    let outcome = outcome(result, &store, slots);
    let keep = reuse.filter(|r| {
        matches!(outcome, Outcome::Ok { .. })
            && uses + 1 < r.uses
            // A chatty guest's captured stderr would fill up: start afresh before it does.
            && store.data().stderr_len() < super::store::STDERR_CAPTURE / 2
    });
    let state = if let (Some(_), Some(instance)) = (keep, instance) {
        let idle = store.data().call().idle();
        let state = store.data_mut().next_call(idle);
        *warm = Some(Warm {
            store,
            instance,
            hash: guest.hash.clone(),
            uses: uses + 1,
            last_used: Instant::now(),
        });
        state
    } else {
        store.into_data().into_call()
    };
    let finished = Instant::now();
    Run {
        outcome,
        conflicted: state.conflicted,
        calls: state.calls,
        replay: state.replay,
        shadow_differences: state.shadow_differences,
        reused,
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
                .map(|ms| ms.min(crate::sandbox::capabilities::queue::MAX_DELAY_MS)),
        },
        Ok(Ok(Err(crate::sandbox::wit::types::ReconcileError::Transient(m)))) => {
            Outcome::Transient(crate::cluster::validation::message(&m))
        }
        Ok(Ok(Err(crate::sandbox::wit::types::ReconcileError::Permanent(m)))) => {
            Outcome::Permanent(crate::cluster::validation::message(&m))
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

/// At most this many keys are taken from one `map` call.
pub const MAX_MAPPED_KEYS: usize = 1000;

/// How a call of the guest's `map` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mapped {
    /// The keys it returned (at most [`MAX_MAPPED_KEYS`]; `cut` says it returned more).
    Keys { keys: Vec<ObjectKey>, cut: bool },
    /// It trapped, ran past its deadline or its memory cap; the text says which and how.
    Failed {
        result: crate::metrics::ReconcileResult,
        message: String,
    },
}

/// Calls the guest's `map` export on one object of `kind`, in a fresh instance under the
/// guest's deadline and memory cap (the same limits as a reconcile). `call` decides what its
/// imports answer.
pub(super) async fn map(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    call: CallContext,
    kind: &Gvk,
    object: String,
) -> Mapped {
    let kind = crate::sandbox::wit::types::Gvk::from(kind.clone());
    let called = call_export(
        engine,
        slots,
        guest,
        call,
        "map",
        async |store, instance| {
            let Some(export) = guest.watches_export(instance, store) else {
                wasmtime::bail!("the guest does not export reconciler:api/watches");
            };
            export?.call_map(store, &kind, &object).await
        },
    )
    .await;
    match called {
        Ok(keys) => {
            let cut = keys.len() > MAX_MAPPED_KEYS;
            let keys = keys
                .into_iter()
                .take(MAX_MAPPED_KEYS)
                .map(|k| ObjectKey {
                    namespace: k.namespace,
                    name: k.name,
                })
                .collect();
            Mapped::Keys { keys, cut }
        }
        Err((result, message)) => Mapped::Failed { result, message },
    }
}

/// At most this many values are taken from one `index` call.
pub const MAX_INDEX_VALUES: usize = 100;

/// The longest value an index keeps: `namespace/name`, the longest thing a lookup compares.
pub const MAX_INDEX_VALUE_BYTES: usize = 317;

/// How a call of the guest's `index` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Indexed {
    /// The values it returned, at most [`MAX_INDEX_VALUES`] of at most
    /// [`MAX_INDEX_VALUE_BYTES`] each; `dropped` counts those left out.
    Values { values: Vec<String>, dropped: usize },
    /// It trapped, ran past its deadline or its memory cap; the text says which and how.
    Failed {
        result: crate::metrics::ReconcileResult,
        message: String,
    },
}

/// Calls the guest's `index` export for index `name` on one primary object, in a fresh
/// instance under the guest's deadline and memory cap. `call` decides what its imports answer
/// (for an index, nothing: its values come from the object alone).
pub(super) async fn index(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    call: CallContext,
    name: &str,
    object: String,
) -> Indexed {
    let called = call_export(
        engine,
        slots,
        guest,
        call,
        "index",
        async |store, instance| {
            let Some(export) = guest.indexes_export(instance, store) else {
                wasmtime::bail!("the guest does not export reconciler:api/indexes");
            };
            export?.call_index(store, name, &object).await
        },
    )
    .await;
    match called {
        Ok(values) => {
            let total = values.len();
            let values: Vec<String> = values
                .into_iter()
                .filter(|v| !v.is_empty() && v.len() <= MAX_INDEX_VALUE_BYTES)
                .take(MAX_INDEX_VALUES)
                .collect();
            Indexed::Values {
                dropped: total - values.len(),
                values,
            }
        }
        Err((result, message)) => Indexed::Failed { result, message },
    }
}

/// How a call of an optional export failed, and what the store saw.
type CallFailure = (crate::metrics::ReconcileResult, String);

/// Calls one function of an optional export (`what` names it in the deadline's message) in a
/// fresh instance of `guest` under its deadline and memory cap. `slots` is the pool's size, for
/// the failure when every slot is busy.
async fn call_export<T>(
    engine: &Engine,
    slots: u32,
    guest: &LoadedGuest,
    mut call: CallContext,
    what: &str,
    run: impl AsyncFnOnce(&mut Store<HostState>, &Instance) -> wasmtime::Result<T>,
) -> Result<T, CallFailure> {
    let limits = &call.guest.grant.limits;
    let memory_bytes = limits.memory_bytes();
    call.deadline = Instant::now() + limits.deadline();
    let deadline = call.deadline;
    let mut store = new_store(engine, call, memory_bytes);
    let result = tokio::time::timeout_at(deadline.into(), async {
        let instance = guest.instance_pre().instantiate_async(&mut store).await?;
        run(&mut store, &instance).await
    })
    .await;
    match result {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) if e.is::<wasmtime::PoolConcurrencyLimitError>() => Err((
            crate::metrics::ReconcileResult::Error,
            format!("no free instance slot (the host runs at most {slots} at once)"),
        )),
        Ok(Err(e)) => {
            let (kind, message) = describe_failure(&e, &store);
            let result = match kind {
                FailureKind::Deadline => crate::metrics::ReconcileResult::Deadline,
                FailureKind::MemoryLimit => crate::metrics::ReconcileResult::MemoryLimit,
                FailureKind::Trap => crate::metrics::ReconcileResult::Trap,
            };
            Err((result, message))
        }
        Err(_) => Err((
            crate::metrics::ReconcileResult::Deadline,
            format!(
                "{what} ran past its deadline of {:?} while waiting in a host or WASI call, and was cancelled",
                store.data().call().guest.grant.limits.deadline()
            ),
        )),
    }
}
