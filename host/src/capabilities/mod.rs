//! The host side of every imported WIT interface, one module each: [`lister`], [`cluster`],
//! [`queue`], [`log`], [`network`] ([`bodies`]: what a write may carry and hand back). A
//! capability is one self-contained unit (Spin's factor shape): its provider trait, its input
//! validation, its grant check, its load-time requirement and its `Host` implementation, with
//! unit tests that call the `Host` functions with no wasm at all.
//!
//! Data path of one import call:
//!
//! ```text
//! guest ──call──▶ CallContext (per reconcile)
//!                   1. validate  every string the guest handed over   → `invalid`
//!                   2. grant     the guest's grant and scope           → `denied`
//!                   3. budget    per-guest rates and quotas            → `unavailable`
//!                   4. provider  informer caches / API server / backend (providers/)
//!                   5. finish    metric per call, optional recording for the offline runner
//! ```
//!
//! Steps 1-3 live here, never in a provider, so `run` and the offline runner enforce exactly
//! the same rules: only the providers differ ([`crate::providers`]).
//!
//! The `Host` traits are implemented on [`CallContext`], which knows nothing of wasmtime: the
//! runtime links the capabilities (through [`add_to_linker`]) and the capabilities never import
//! the runtime. Imports are `async` on the host side: a call waiting on the API server, a rate
//! limiter or a WASI clock yields, and the runtime's deadline (a timeout around the whole
//! guest call) cancels it wherever it waits.
//!
//! ## Adding a capability
//!
//! 1. Declare the interface in `wit/reconciler.wit` and import it in a world.
//! 2. Add one module here with: its provider trait (if it reaches outside the host), its
//!    validation and grant check, `impl <interface>::Host for CallContext`, a `requirement`
//!    function (what a guest importing it needs in its grant), its `add_to_linker`, and its
//!    unit tests.
//! 3. Register it in this file: its `mod` line, one line in [`add_to_linker`] and one entry
//!    in [`CAPABILITIES`] (which runs its load-time requirement).
//! 4. If it has a provider, add its field to [`Providers`] and build it in
//!    [`crate::providers`] (`kube` for `run`, `offline` for the offline runner).
//! 5. Wrap it in the Rust SDK (`guests/sdk`).
//!
//! A capability without a provider (a toy `clock` returning the host's time, tried when this
//! recipe was written) touches three files: the WIT, its module, and this one.

mod bodies;
pub mod cluster;
pub mod lister;
pub mod log;
pub mod network;
#[cfg(test)]
mod properties;
pub mod queue;
pub mod replay;

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota};
use serde::Serialize;
use serde_json::Value;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime::component::{HasSelf, Linker};

use crate::config::{Denied, Grant, HostConfig, Rates};
use crate::manifest::Manifest;
use crate::metrics::{HostCallOutcome, Metrics};
use crate::validation::Invalid;
use crate::wit::types;

pub use bodies::reserved_key;
pub use cluster::{Cluster, EventRecord, EventType, SKIP_WRITE_GRANT_ENV, skip_write_grant};
pub use lister::Lister;
pub use network::NETWORK_BACKEND;
pub use queue::Enqueuer;

/// Why a host call failed; mirrors the WIT `error` variant (plus `Limited`, which the guest
/// sees as `unavailable`: a rate or quota, worth retrying later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("denied: {0}")]
    Denied(String),
    /// The API server refused a write sent as the guest's ServiceAccount (`403`): the guest
    /// sees `denied`, the metrics tell it from the host's own denial.
    #[error("denied: {0}")]
    Forbidden(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("limited: {0}")]
    Limited(String),
    #[error("{0}")]
    Other(String),
}

impl From<Denied> for HostError {
    fn from(d: Denied) -> Self {
        HostError::Denied(d.to_string())
    }
}

impl From<Invalid> for HostError {
    fn from(e: Invalid) -> Self {
        HostError::Invalid(e.to_string())
    }
}

impl From<HostError> for types::Error {
    fn from(e: HostError) -> Self {
        match e {
            HostError::Denied(m) | HostError::Forbidden(m) => types::Error::Denied(m),
            HostError::NotFound(m) => types::Error::NotFound(m),
            HostError::Conflict(m) => types::Error::Conflict(m),
            HostError::Invalid(m) => types::Error::Invalid(m),
            HostError::Unavailable(m) | HostError::Limited(m) => types::Error::Unavailable(m),
            HostError::Other(m) => types::Error::Other(m),
        }
    }
}

impl HostError {
    /// The WIT variant's name, as recordings print it.
    fn kind(&self) -> &'static str {
        match self {
            HostError::Denied(_) | HostError::Forbidden(_) => "denied",
            HostError::NotFound(_) => "not-found",
            HostError::Conflict(_) => "conflict",
            HostError::Invalid(_) => "invalid",
            HostError::Unavailable(_) | HostError::Limited(_) => "unavailable",
            HostError::Other(_) => "other",
        }
    }

    fn message(&self) -> &str {
        match self {
            HostError::Denied(m)
            | HostError::Forbidden(m)
            | HostError::NotFound(m)
            | HostError::Conflict(m)
            | HostError::Invalid(m)
            | HostError::Unavailable(m)
            | HostError::Limited(m)
            | HostError::Other(m) => m,
        }
    }

    fn outcome(&self) -> HostCallOutcome {
        match self {
            HostError::Denied(_) => HostCallOutcome::Denied,
            HostError::Forbidden(_) => HostCallOutcome::DeniedByApiServer,
            HostError::Invalid(_) => HostCallOutcome::Invalid,
            HostError::Limited(_) => HostCallOutcome::Limited,
            _ => HostCallOutcome::Error,
        }
    }
}

/// The providers behind the capabilities, chosen by the host: built by
/// [`crate::providers::kube`] in `run` and [`crate::providers::offline`] in the offline runner.
#[derive(Clone)]
pub struct Providers {
    pub lister: Arc<dyn Lister>,
    pub cluster: Arc<dyn Cluster>,
    pub queue: Arc<dyn Enqueuer>,
    /// The `network` backend, when the host configures one.
    pub network: Option<Arc<dyn crate::backends::NetworkBackend>>,
}

/// Where a guest may act, beyond its grant's kinds.
#[derive(Debug, Clone, Default)]
pub struct Scope {
    /// `run --watch-namespace`: namespaced writes and events stay inside it.
    pub namespace: Option<String>,
    /// The namespace of the guest's primary watch (its manifest's, else the host's): the
    /// namespace of every key it may enqueue.
    pub primary_namespace: Option<String>,
    /// The finalizer the guest's manifest declares: the only one its applied objects may carry.
    pub finalizer: Option<String>,
}

impl Scope {
    /// The scope a manifest asks for inside the host's `--watch-namespace`.
    pub fn of(manifest: &Manifest, watch_namespace: Option<&str>) -> Self {
        Self {
            namespace: watch_namespace.map(str::to_owned),
            primary_namespace: manifest
                .namespace
                .clone()
                .or_else(|| watch_namespace.map(str::to_owned)),
            finalizer: manifest.finalizer.clone(),
        }
    }

    /// Denies a namespaced object outside `--watch-namespace`.
    fn check(&self, guest: &str, namespace: Option<&str>, what: &str) -> Result<(), HostError> {
        match (&self.namespace, namespace) {
            (Some(allowed), Some(ns)) if allowed != ns => Err(HostError::Denied(format!(
                "guest `{guest}` may not {what} in namespace {ns}: the host runs with --watch-namespace {allowed}"
            ))),
            _ => Ok(()),
        }
    }
}

/// Per-guest rates that outlive one reconcile (and one guest version: a hot swap keeps them).
/// Each is a token bucket (governor's GCRA), separate from the host's own client budget.
///
/// What the host spends on a guest's behalf counts against that guest ("host cost"):
/// - memory: bodies being parsed and sent and list results being copied hold permits of
///   `host_memory`, one per KiB, as many as the guest's memory cap (`memoryMiB`) over all its
///   reconciles at once; a request larger than the whole cap is refused, a smaller one waits
///   for permits (within the reconcile's deadline). So the host holds at most one memory cap
///   per guest for it, beside the instances' own memories (concurrency x cap);
/// - CPU: synchronous host work (a list's selector over a cache, parsing a body) is timed and
///   owed to `cpu`, the guest's share; the debt is paid at the guest's next costed call
///   ([`Budget::settle_cpu`]) or epoch tick ([`Budget::cpu_pause`]), by waiting for the share
///   to refill, so a guest that keeps the host busy runs no faster than its share;
/// - parsing: body bytes at `bodyBytesPerSecond`, a body waiting for its bytes.
pub struct Budget {
    /// API writes (status patches, applies, deletes): a call waits for a token, bounded by the
    /// reconcile's deadline, like client-go's client-side rate limiter.
    writes: DefaultDirectRateLimiter,
    /// Events: refused when the bucket is empty (an event is not worth waiting for).
    events: DefaultDirectRateLimiter,
    /// Log lines: dropped (and counted) when the bucket is empty.
    logs: DefaultDirectRateLimiter,
    /// CPU, in epoch ticks of guest execution: an instance over the guest's share is paused
    /// at its next tick until the bucket refills (see [`Budget::cpu_pause`]).
    cpu: Option<DefaultDirectRateLimiter>,
    /// The most ticks `cpu` hands out at once (its burst).
    cpu_burst: u32,
    /// Host work done for the guest and not yet taken from `cpu`, in nanoseconds: governor's
    /// buckets cannot go into debt, and the work's cost is known only once it is done.
    cpu_owed_ns: AtomicU64,
    /// JSON body bytes, in KiB cells; the burst holds at least one largest body.
    body_kib: DefaultDirectRateLimiter,
    /// Host memory held for the guest, one permit per KiB (see [`HostBytes`]).
    host_memory: Arc<Semaphore>,
    host_memory_kib: usize,
}

/// Host memory held on a guest's behalf, from its budget (see [`Budget::hold`]): given back
/// when dropped.
#[must_use = "the memory is counted only while the guard lives"]
#[derive(Debug)]
pub struct HostBytes {
    _permits: OwnedSemaphorePermit,
    bytes: usize,
}

impl HostBytes {
    /// What is held, in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

/// Nanoseconds in one epoch tick, the unit of the CPU share.
fn tick_ns() -> u64 {
    u64::try_from(crate::config::EPOCH_TICK.as_nanos()).unwrap_or(5_000_000)
}

impl Budget {
    pub fn new(rates: Rates) -> Self {
        // A rate of 0 would refuse everything for ever; the least is one per second.
        let quota = |per_second: u32, burst: u32| {
            let at_least_one = |n| NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
            let quota = Quota::per_second(at_least_one(per_second));
            DefaultDirectRateLimiter::direct(quota.allow_burst(at_least_one(burst)))
        };
        // One cell is one epoch tick of guest execution; a tick's worth of wall time counts
        // as CPU. Burst: 100 ms of CPU, so a short reconcile never waits.
        let tick_ms = u32::try_from(crate::config::EPOCH_TICK.as_millis()).unwrap_or(5);
        let cpu_burst = 100 / tick_ms;
        let cpu = rates
            .cpu_millicores
            .map(|millicores| quota(millicores.div_ceil(tick_ms), cpu_burst));
        let body_kib = rates.body_bytes_per_second.div_ceil(1024);
        let largest_body_kib =
            u32::try_from(crate::validation::MAX_BODY_BYTES.div_ceil(1024)).unwrap_or(u32::MAX);
        // `acquire_many` takes a u32, and a semaphore holds at most MAX_PERMITS.
        let host_memory_kib = (rates.host_memory_bytes / 1024)
            .clamp(1, Semaphore::MAX_PERMITS.min(u32::MAX as usize));
        Self {
            writes: quota(rates.writes_per_second, rates.write_burst),
            events: quota(rates.events_per_second, rates.event_burst),
            logs: quota(rates.log_lines_per_second, rates.log_burst),
            cpu,
            cpu_burst,
            cpu_owed_ns: AtomicU64::new(0),
            body_kib: quota(body_kib, body_kib.max(largest_body_kib)),
            host_memory: Arc::new(Semaphore::new(host_memory_kib)),
            host_memory_kib,
        }
    }

    /// How long a running instance of the guest should pause before it runs on: none while
    /// the guest is within its CPU share, host work done for it included. Called by the
    /// runtime at every epoch tick.
    pub fn cpu_pause(&self) -> Option<Duration> {
        let cpu = self.cpu.as_ref()?;
        let wait = |not_until: governor::NotUntil<_>| {
            not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ))
        };
        let claimed = self.claim_owed();
        if let Some(ticks) = NonZeroU32::new(claimed) {
            match cpu.check_n(ticks) {
                Ok(Ok(())) => {}
                Ok(Err(not_until)) => {
                    self.give_back(claimed);
                    return Some(wait(not_until));
                }
                // Never: a claim is at most a burst.
                Err(_) => self.give_back(claimed),
            }
        }
        cpu.check().err().map(wait)
    }

    /// Counts host work done for the guest against its CPU share (paid later, see
    /// [`Budget::settle_cpu`]). Free without a share.
    pub fn charge_cpu(&self, spent: Duration) {
        if self.cpu.is_some() {
            let ns = u64::try_from(spent.as_nanos()).unwrap_or(u64::MAX);
            self.cpu_owed_ns.fetch_add(ns, Ordering::Relaxed);
        }
    }

    /// Times what runs until the meter is dropped, as host work for the guest.
    fn meter(&self) -> CpuMeter<'_> {
        CpuMeter {
            budget: self,
            started: Instant::now(),
        }
    }

    /// Waits until the host work owed by the guest has been taken from its CPU share: called
    /// before the host works for it again. A wait cut short (the reconcile's deadline) leaves
    /// the rest owed.
    pub async fn settle_cpu(&self) {
        let Some(cpu) = &self.cpu else { return };
        loop {
            let claimed = self.claim_owed();
            let Some(ticks) = NonZeroU32::new(claimed) else {
                return;
            };
            let mut unpaid = Unpaid {
                budget: self,
                ticks: claimed,
            };
            if cpu.until_n_ready(ticks).await.is_err() {
                return; // never: a claim is at most a burst (given back on drop)
            }
            unpaid.ticks = 0;
        }
    }

    /// Takes whole owed ticks off the debt, at most a burst: the caller pays them to `cpu`
    /// or gives them back.
    fn claim_owed(&self) -> u32 {
        let tick = tick_ns();
        let mut claimed = 0;
        let _ = self
            .cpu_owed_ns
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |owed| {
                claimed = u32::try_from(owed / tick)
                    .unwrap_or(u32::MAX)
                    .min(self.cpu_burst);
                (claimed > 0).then(|| owed - u64::from(claimed) * tick)
            });
        claimed
    }

    fn give_back(&self, ticks: u32) {
        self.cpu_owed_ns
            .fetch_add(u64::from(ticks) * tick_ns(), Ordering::Relaxed);
    }

    /// Waits until `bytes` of body may be parsed at the guest's body rate. Errs only for a body
    /// above the bucket, which the size cap prevents.
    async fn body_bytes(&self, bytes: usize) -> Result<(), governor::InsufficientCapacity> {
        let kib = u32::try_from(bytes.div_ceil(1024)).unwrap_or(u32::MAX);
        self.body_kib
            .until_n_ready(NonZeroU32::new(kib).unwrap_or(NonZeroU32::MIN))
            .await
    }

    /// Holds `bytes` of the guest's host-memory budget until the guard is dropped, waiting while
    /// its other reconciles hold the rest. `None` when `bytes` is more than the whole budget:
    /// it could never be held.
    pub async fn hold(&self, bytes: usize) -> Option<HostBytes> {
        let kib = bytes.div_ceil(1024);
        if kib > self.host_memory_kib {
            return None;
        }
        let permits = self
            .host_memory
            .clone()
            .acquire_many_owned(u32::try_from(kib).ok()?)
            .await
            .ok()?;
        Some(HostBytes {
            _permits: permits,
            bytes,
        })
    }

    /// The host-memory budget, in bytes: the guest's memory cap.
    pub fn host_memory_bytes(&self) -> usize {
        self.host_memory_kib * 1024
    }
}

/// Owed ticks claimed for payment; given back if the wait is dropped before it is paid.
struct Unpaid<'a> {
    budget: &'a Budget,
    ticks: u32,
}

impl Drop for Unpaid<'_> {
    fn drop(&mut self) {
        if self.ticks > 0 {
            self.budget.give_back(self.ticks);
        }
    }
}

/// Charges the time from its creation to its drop to the guest's CPU share.
struct CpuMeter<'a> {
    budget: &'a Budget,
    started: Instant,
}

impl Drop for CpuMeter<'_> {
    fn drop(&mut self) {
        self.budget.charge_cpu(self.started.elapsed());
    }
}

/// Everything a guest's imports need that lives as long as the guest version is loaded.
pub struct GuestContext {
    /// The guest's manifest name: grant key, field manager, metric label.
    pub name: String,
    pub grant: Grant,
    pub scope: Scope,
    pub providers: Providers,
    pub budget: Arc<Budget>,
    pub metrics: Option<Metrics>,
    /// A fixed wall-clock time for the guest (offline runs that must be reproducible).
    pub fixed_clock: Option<std::time::SystemTime>,
}

impl GuestContext {
    /// A context with the given grant and providers, default scope and rates, no metrics.
    pub fn new(name: impl Into<String>, grant: Grant, providers: Providers) -> Self {
        let rates = if grant.unrestricted {
            Rates::unlimited()
        } else {
            grant.limits.rates()
        };
        let budget = Arc::new(Budget::new(rates));
        Self {
            name: name.into(),
            grant,
            scope: Scope::default(),
            providers,
            budget,
            metrics: None,
            fixed_clock: None,
        }
    }

    #[must_use]
    pub fn with_scope(mut self, scope: Scope) -> Self {
        self.scope = scope;
        self
    }

    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    #[must_use]
    pub fn with_clock(mut self, at: Option<std::time::SystemTime>) -> Self {
        self.fixed_clock = at;
        self
    }

    /// Shares another version's budget (a hot swap keeps the guest's rates).
    #[must_use]
    pub fn with_budget(mut self, budget: Arc<Budget>) -> Self {
        self.budget = budget;
        self
    }

    /// A context whose every call is denied: used while a guest describes itself.
    pub fn loading(file: &str) -> Self {
        Self::new(file, Grant::default(), Providers::deny_all())
    }
}

/// One import call, as the offline runner prints it: JSON payloads embedded as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub interface: &'static str,
    pub function: &'static str,
    pub args: Value,
    pub returned: Value,
}

/// Per-reconcile state of the capabilities: who is calling, about which key, until when. The
/// `Host` traits of every interface are implemented on it.
pub struct CallContext {
    pub guest: Arc<GuestContext>,
    /// Display form of the key being reconciled, for log lines.
    pub key: String,
    pub deadline: Instant,
    /// The runtime whose reactor serves the providers and WASI; the guest call runs on it.
    pub runtime: Option<tokio::runtime::Handle>,
    /// Set when any write hit a 409: the host retries the reconcile whatever the guest returns.
    pub conflicted: bool,
    /// When set, every call is appended here (offline runner, conformance tests).
    pub calls: Option<Vec<Call>>,
    /// The last line the guest logged at error level (the Rust SDK logs its panics there).
    pub last_error: Option<String>,
    /// Log lines dropped by the guest's log rate in this reconcile.
    pub logs_dropped: u64,
    /// Shadow mode: the changes this reconcile intended that would have changed something.
    pub shadow_differences: Vec<crate::shadow::Difference>,
    /// Host memory held for the last list's result until the guest's next list or body, or the
    /// reconcile's end: the copy lives on in wasmtime until it is lowered into the guest's
    /// memory, after the import returns.
    held: Option<HostBytes>,
    /// The wall clock and random seed this reconcile's guest is given, instead of live ones
    /// (a recorded or replayed reconcile).
    pub pinned: Option<Pinned>,
    /// Replaying a record: every call is answered from it, no provider is called.
    pub replay: Option<Box<replay::Replayer>>,
}

/// What a recorded reconcile's guest sees of time and chance, so a replay can give it the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pinned {
    /// The wall clock, stopped at this instant for the whole reconcile.
    pub clock: std::time::SystemTime,
    /// Seeds every WASI random source.
    pub seed: u64,
}

/// Host work units (objects visited times selector terms) done on the calling async worker:
/// ~5-10 µs of label checks. Above it the work moves off the worker with `block_in_place`,
/// which costs ~1 µs (median; 4 µs p99) where `spawn_blocking` costs ~5 µs (10 µs p99),
/// both measured on the 2-core dev machine; below it moving would cost more than it saves.
const INLINE_WORK: usize = 1024;

impl CallContext {
    /// A context for reconciling `key`; the deadline is reset when the reconcile starts.
    pub fn new(
        guest: Arc<GuestContext>,
        key: String,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        let deadline = Instant::now() + guest.grant.limits.deadline();
        Self {
            guest,
            key,
            deadline,
            runtime,
            conflicted: false,
            calls: None,
            last_error: None,
            logs_dropped: 0,
            shadow_differences: Vec::new(),
            held: None,
            pinned: None,
            replay: None,
        }
    }

    /// The context an instance kept between reconciles holds while idle: its guest, no key.
    #[must_use]
    pub fn idle(&self) -> Self {
        Self::new(self.guest.clone(), String::new(), self.runtime.clone())
    }

    /// Records every call of this reconcile (see [`Call`]).
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.calls = Some(Vec::new());
        self
    }

    /// Gives the guest this clock and random seed (see [`Pinned`]).
    #[must_use]
    pub fn pinned(mut self, pinned: Pinned) -> Self {
        self.pinned = Some(pinned);
        self
    }

    /// Answers every call from `replay` (see [`replay::Replayer`]).
    #[must_use]
    pub fn replaying(mut self, replay: replay::Replayer) -> Self {
        self.replay = Some(Box::new(replay));
        self
    }

    /// In a replay, the recorded answer to this call (its `ok` value or error); otherwise
    /// none, and the call goes to its provider.
    fn replayed(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: impl FnOnce() -> Value,
    ) -> Option<Result<Value, HostError>> {
        let replay = self.replay.as_mut()?;
        Some(replay.answer(interface, function, &args()))
    }

    /// The context of `manifest()`: a guest that calls the host while describing itself is
    /// refused (no grant is known yet).
    pub fn loading(file: &str, deadline: Duration) -> Self {
        let mut call = Self::new(Arc::new(GuestContext::loading(file)), String::new(), None);
        call.deadline = Instant::now() + deadline;
        call
    }

    fn name(&self) -> &str {
        &self.guest.name
    }

    /// Whether this guest runs in shadow mode: nothing it would change is changed.
    fn shadow(&self) -> bool {
        self.guest.grant.mode == crate::shadow::Mode::Shadow
    }

    fn differs(&mut self, difference: Option<crate::shadow::Difference>) {
        self.shadow_differences.extend(difference);
    }

    /// Waits for a write token, bounded by the deadline (the runtime's timeout cancels the
    /// wait, and with it the guest, when the deadline passes first).
    async fn write_token(&self) {
        self.guest.budget.writes.until_ready().await;
    }

    /// Parses a JSON body the guest handed over (`field` names it in refusals), charging what
    /// that costs the host to the guest, in this order:
    /// 1. more than 3 MiB: `invalid` (free);
    /// 2. the body rate: waits for the body's bytes (`bodyBytesPerSecond`);
    /// 3. host CPU the guest still owes: waits for its share to refill;
    /// 4. a pre-pass without allocation ([`crate::validation::json_shape`]): bad JSON, too
    ///    deep or more than 262,144 values is `invalid`, and no tree is built;
    /// 5. the tree's estimated bytes plus a copy of the text (what the provider sends) held
    ///    from the guest's host-memory budget: more than its whole memory cap is `invalid`,
    ///    otherwise this waits while the guest's other reconciles hold the rest;
    /// 6. the parse.
    ///
    /// The time of 4 and 6 is taken from the guest's CPU share. Waits end at the deadline.
    /// Keep the returned guard until the provider call returns: the memory is counted while it
    /// lives. The API server's answer is not counted: it is bounded by the server's own object
    /// size limit (etcd's 1.5 MiB by default).
    async fn parse_body(
        &mut self,
        field: &str,
        text: &str,
    ) -> Result<(Value, HostBytes), HostError> {
        use crate::validation::{Invalid, json_shape};
        // A list's copy is in the guest's memory by now; held on, it could block this body.
        self.held = None;
        let budget = &self.guest.budget;
        crate::validation::body_size(field, text)?;
        budget.body_bytes(text.len()).await.map_err(|_| {
            HostError::Limited(format!(
                "{field}: {} bytes exceed guest `{}`'s body rate bucket",
                text.len(),
                self.name()
            ))
        })?;
        budget.settle_cpu().await;
        let shape = {
            let _meter = budget.meter();
            json_shape(field, text)?
        };
        let needed = shape.tree_bytes(text.len()).saturating_add(text.len());
        let Some(held) = budget.hold(needed).await else {
            return Err(Invalid::new(
                field,
                format!(
                    "parsing this body ({} bytes, {} values) would hold ~{} MiB of host memory, more than guest `{}`'s memory cap of {} MiB (limits.memoryMiB), which bounds what the host holds for it; send a smaller body",
                    text.len(),
                    shape.values,
                    needed.div_ceil(1 << 20),
                    self.name(),
                    budget.host_memory_bytes() >> 20
                ),
            )
            .into());
        };
        let value = {
            let _meter = budget.meter();
            serde_json::from_str(text)
                .map_err(|e| Invalid::new(field, format!("is not valid JSON: {e}")))?
        };
        Ok((value, held))
    }

    /// Runs synchronous host work for the guest (`units`: objects visited times selector terms)
    /// and takes its time from the guest's CPU share. Work above [`INLINE_WORK`] moves off the
    /// async worker, so the other guests' reconciles on it go on (on a current-thread runtime,
    /// the offline runner's and tests', it runs in place). Not cancellable once started: its
    /// cost is bounded by the cache it reads and the 4 KiB selector cap.
    fn host_work<T>(&self, units: usize, work: impl FnOnce() -> T) -> T {
        let _meter = self.guest.budget.meter();
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if units <= INLINE_WORK || !multi_thread {
            work()
        } else {
            tokio::task::block_in_place(work)
        }
    }

    /// Counts (and, when recording, records) one finished call. `args` and `returned` build
    /// the recorded JSON only when recording, so the hot path pays nothing for them.
    fn finish<T>(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: impl FnOnce() -> Value,
        result: &Result<T, HostError>,
        returned: impl FnOnce(&T) -> Value,
    ) {
        if let Some(metrics) = &self.guest.metrics {
            let outcome = match result {
                Ok(_) => HostCallOutcome::Ok,
                Err(e) => e.outcome(),
            };
            metrics.host_call(&self.guest.name, interface, function, outcome);
        }
        if matches!(result, Err(HostError::Conflict(_))) {
            self.conflicted = true;
        }
        if let Some(calls) = &mut self.calls {
            let returned = match result {
                Ok(v) => serde_json::json!({ "ok": returned(v) }),
                Err(e) => serde_json::json!({ "error": { e.kind(): e.message() } }),
            };
            calls.push(Call {
                interface,
                function,
                args: args(),
                returned,
            });
        }
    }
}

impl types::Host for CallContext {}

/// Records a returned value as it is.
fn as_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// Embeds JSON text as JSON in recorded calls (falls back to the string if it does not parse).
fn embed(text: &str) -> Value {
    if text.len() > crate::validation::MAX_BODY_BYTES {
        return Value::String(format!("<{} bytes>", text.len()));
    }
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

/// What a guest being loaded imports and asks for, for the capabilities' load-time checks.
pub struct LoadCheck<'a> {
    pub manifest: &'a Manifest,
    /// The WIT interfaces (without version) the component imports, e.g. `network-backend`.
    pub imports: &'a BTreeSet<String>,
    pub grant: &'a Grant,
    pub config: &'a HostConfig,
}

/// One registered capability: its WIT interface and its load-time requirement.
pub struct Capability {
    pub interface: &'static str,
    /// What the guest's grant lacks for what its manifest and imports ask; empty when nothing.
    pub requirement: fn(&LoadCheck<'_>) -> Vec<String>,
}

/// Every capability, in WIT order. The guest directory runs each one's requirement at load.
pub const CAPABILITIES: &[Capability] = &[
    lister::CAPABILITY,
    cluster::CAPABILITY,
    queue::CAPABILITY,
    log::CAPABILITY,
    network::CAPABILITY,
];

/// Checks a guest against its grant at load: everything every capability finds missing, at
/// once.
pub fn check_grant(check: &LoadCheck<'_>) -> Result<(), String> {
    let missing: Vec<String> = CAPABILITIES
        .iter()
        .flat_map(|c| (c.requirement)(check))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

/// Links every capability into `linker`; `get` finds the call context in the store's data.
pub fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    crate::wit::reconciler::api::types::add_to_linker::<T, HasSelf<CallContext>>(linker, get)?;
    lister::add_to_linker(linker, get)?;
    cluster::add_to_linker(linker, get)?;
    queue::add_to_linker(linker, get)?;
    log::add_to_linker(linker, get)?;
    network::add_to_linker(linker, get)?;
    Ok(())
}

impl Providers {
    /// Providers that refuse everything: a guest may not call the host while loading.
    pub fn deny_all() -> Self {
        let deny = Arc::new(DenyAll);
        Self {
            lister: deny.clone(),
            cluster: deny.clone(),
            queue: deny,
            network: None,
        }
    }
}

/// Providers for a guest that may not call anything yet.
struct DenyAll;

const LOADING: &str = "host calls are not available while the guest is being loaded (manifest)";

impl Lister for DenyAll {
    fn get(&self, _: &crate::objects::ObjectRef) -> Result<Option<String>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn list(
        &self,
        _: &crate::objects::Gvk,
        _: Option<&str>,
        _: Option<&kube::core::Selector>,
    ) -> Result<Vec<Arc<dyn lister::Listed>>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn visits(&self, _: &crate::objects::Gvk, _: Option<&str>) -> usize {
        0
    }
}

#[async_trait::async_trait]
impl Cluster for DenyAll {
    async fn patch_status(
        &self,
        _: &str,
        _: &crate::objects::ObjectRef,
        _: &Value,
    ) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn apply(&self, _: &str, _: &Value) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn delete(&self, _: &str, _: &crate::objects::ObjectRef) -> Result<bool, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn get(&self, _: &crate::objects::ObjectRef) -> Result<Option<Value>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
}

impl Enqueuer for DenyAll {
    fn enqueue(&self, _: crate::objects::ObjectKey, _: Option<Duration>) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn pending(&self) -> usize {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_over_its_cpu_share_is_told_to_pause() {
        let rates = Rates {
            cpu_millicores: Some(100),
            ..Rates::default()
        };
        let budget = Budget::new(rates);
        // A burst of 100 ms of CPU (20 ticks) passes; then 0.1 core is 20 ticks a second.
        let paused = (0..40).filter_map(|_| budget.cpu_pause()).count();
        assert!(paused >= 19, "{paused}");
        let pause = budget.cpu_pause().expect("over its share");
        assert!(pause <= Duration::from_millis(60), "{pause:?}");
        let unlimited = Budget::new(Rates::unlimited());
        assert!((0..1000).all(|_| unlimited.cpu_pause().is_none()));
    }

    fn owed_ticks(budget: &Budget) -> u64 {
        budget.cpu_owed_ns.load(Ordering::Relaxed) / tick_ns()
    }

    #[test]
    fn host_work_done_for_a_guest_is_taken_from_its_cpu_share() {
        let budget = Budget::new(Rates {
            cpu_millicores: Some(100),
            ..Rates::default()
        });
        assert!(budget.cpu_pause().is_none(), "within its share");
        // A second of host work at 0.1 core: 200 ticks owed, 20 a second.
        budget.charge_cpu(Duration::from_secs(1));
        let pause = budget.cpu_pause().expect("the guest owes host work");
        assert!(pause > Duration::ZERO);
        assert!(owed_ticks(&budget) >= 180, "{}", owed_ticks(&budget));
        let unlimited = Budget::new(Rates::unlimited());
        unlimited.charge_cpu(Duration::from_secs(10));
        assert!(unlimited.cpu_pause().is_none(), "no share, nothing owed");
    }

    #[tokio::test]
    async fn a_guest_that_owes_host_work_waits_for_its_share_and_a_cut_wait_stays_owed() {
        let budget = Budget::new(Rates {
            cpu_millicores: Some(1000),
            ..Rates::default()
        });
        // 60 ticks: 20 at once (the burst), 40 more at 200 a second.
        budget.charge_cpu(Duration::from_millis(300));
        let started = Instant::now();
        budget.settle_cpu().await;
        assert!(
            started.elapsed() >= Duration::from_millis(150),
            "paid 300 ms of host work in {:?}",
            started.elapsed()
        );
        assert_eq!(owed_ticks(&budget), 0);
        // The reconcile's deadline cuts the wait: what is not paid stays owed.
        budget.charge_cpu(Duration::from_secs(2));
        let cut = tokio::time::timeout(Duration::from_millis(50), budget.settle_cpu()).await;
        assert!(cut.is_err(), "2 s of host work paid within 50 ms");
        assert!(owed_ticks(&budget) >= 350, "{}", owed_ticks(&budget));
    }

    #[tokio::test]
    async fn host_memory_held_for_a_guest_never_exceeds_its_memory_cap() {
        let budget = Budget::new(Rates {
            host_memory_bytes: 1 << 20,
            ..Rates::default()
        });
        assert_eq!(budget.host_memory_bytes(), 1 << 20);
        assert!(
            budget.hold(2 << 20).await.is_none(),
            "more than the whole cap"
        );
        let first = budget.hold(600 << 10).await.expect("fits");
        assert_eq!(first.bytes(), 600 << 10);
        let waited = tokio::time::timeout(Duration::from_millis(100), budget.hold(600 << 10)).await;
        assert!(waited.is_err(), "held beside the first, over the cap");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), budget.hold(600 << 10)).await;
        assert!(
            second.is_ok_and(|held| held.is_some()),
            "once the first is given back"
        );
    }

    const STATUS_GRANT: &str =
        "{read: [v1/ConfigMap], write: [v1/ConfigMap/status], limits: {memoryMiB: 1}}";

    fn cm() -> types::ObjectRef {
        types::ObjectRef {
            kind: crate::objects::Gvk::new("", "v1", "ConfigMap").into(),
            namespace: Some("ns".into()),
            name: "a".into(),
        }
    }

    fn status_of_zeros(n: usize) -> String {
        format!(r#"{{"status":{{"x":[{}0]}}}}"#, "0,".repeat(n))
    }

    #[tokio::test]
    async fn a_body_is_charged_to_the_guest_before_it_is_parsed() {
        use crate::wit::reconciler::api::cluster::Host as _;
        let h = testing::Harness::new();
        h.cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(STATUS_GRANT, Scope::default());
        let refused = |result: Result<String, types::Error>| match result {
            Err(types::Error::Invalid(m)) => m,
            other => panic!("not refused as invalid: {other:?}"),
        };
        // Too many values: refused by the pre-pass, whatever the cap.
        let m = refused(call.patch_status(cm(), status_of_zeros(300_000)).await);
        assert!(
            m.starts_with("patch: holds more than 262144 JSON values"),
            "{m}"
        );
        // A tree of ~2.2 MiB against a cap of 1 MiB: refused, naming both, before parsing.
        let m = refused(call.patch_status(cm(), status_of_zeros(20_000)).await);
        assert!(
            m.starts_with("patch: parsing this body (40020 bytes, 20004 values) would hold ~3 MiB")
                && m.contains("guest `g`'s memory cap of 1 MiB"),
            "{m}"
        );
        // Within the cap: parsed and sent.
        call.patch_status(cm(), status_of_zeros(100)).await.unwrap();
    }

    #[tokio::test]
    async fn bodies_beyond_the_guests_body_rate_wait_for_it() {
        use crate::wit::reconciler::api::cluster::Host as _;
        let h = testing::Harness::new();
        h.cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(
            "{read: [v1/ConfigMap], write: [v1/ConfigMap/status], limits: {bodyBytesPerSecond: 1024}}",
            Scope::default(),
        );
        // The bucket holds one largest body (3 MiB); the second 2 MiB waits ~1,000 s at 1 KiB/s.
        let body = format!(r#"{{"status":{{"x":"{}"}}}}"#, "a".repeat(2 << 20));
        call.patch_status(cm(), body.clone()).await.unwrap();
        let second =
            tokio::time::timeout(Duration::from_millis(300), call.patch_status(cm(), body)).await;
        assert!(second.is_err(), "a body beyond the rate was parsed at once");
    }
}

#[cfg(test)]
pub(crate) mod testing {
    //! A call context over offline providers, for the capabilities' unit tests.
    use super::*;
    use crate::providers::offline::{MemoryCache, RecordingCluster, RecordingQueue};

    pub struct Harness {
        pub cache: Arc<MemoryCache>,
        pub queue: Arc<RecordingQueue>,
        pub network: Arc<crate::backends::MemoryBackend>,
    }

    impl Harness {
        pub fn new() -> Self {
            Self {
                cache: Arc::new(MemoryCache::default()),
                queue: Arc::new(RecordingQueue::default()),
                network: Arc::new(crate::backends::MemoryBackend::new()),
            }
        }

        pub fn providers(&self) -> Providers {
            Providers {
                lister: self.cache.clone(),
                cluster: Arc::new(RecordingCluster::new(self.cache.clone())),
                queue: self.queue.clone(),
                network: Some(self.network.clone()),
            }
        }

        /// A call context for guest `g` with `grant` (YAML of one grant entry) and `scope`.
        pub fn call(&self, grant: &str, scope: Scope) -> CallContext {
            let grant: Grant = serde_yaml::from_str(grant).expect("test grant");
            let context = GuestContext::new("g", grant, self.providers()).with_scope(scope);
            CallContext::new(Arc::new(context), "ns/k".into(), None).recording()
        }
    }
}
