//! The host side of every imported WIT interface, one module each: [`lister`], [`cluster`],
//! [`queue`], [`log`], [`network`]. A capability is one self-contained unit (Spin's factor
//! shape): its provider trait, its input validation, its grant check, its load-time
//! requirement and its `Host` implementation, with unit tests that call the `Host` functions
//! with no wasm at all.
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

pub mod cluster;
pub mod lister;
pub mod log;
pub mod network;
#[cfg(test)]
mod properties;
pub mod queue;

use std::collections::BTreeSet;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, Instant};

use governor::{DefaultDirectRateLimiter, Quota};
use serde::Serialize;
use serde_json::Value;
use wasmtime::component::{HasSelf, Linker};

use crate::config::{Denied, Grant, HostConfig, Rates};
use crate::manifest::Manifest;
use crate::metrics::{HostCallOutcome, Metrics};
use crate::validation::Invalid;
use crate::wit::types;

pub use cluster::{Cluster, EventRecord, EventType};
pub use lister::Lister;
pub use network::NETWORK_BACKEND;
pub use queue::WorkQueue;

/// Why a host call failed; mirrors the WIT `error` variant (plus `Limited`, which the guest
/// sees as `unavailable`: a rate or quota, worth retrying later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("denied: {0}")]
    Denied(String),
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
            HostError::Denied(m) => types::Error::Denied(m),
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
            HostError::Denied(_) => "denied",
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
    pub queue: Arc<dyn WorkQueue>,
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
        let cpu = rates
            .cpu_millicores
            .map(|millicores| quota(millicores.div_ceil(tick_ms), 100 / tick_ms));
        Self {
            writes: quota(rates.writes_per_second, rates.write_burst),
            events: quota(rates.events_per_second, rates.event_burst),
            logs: quota(rates.log_lines_per_second, rates.log_burst),
            cpu,
        }
    }

    /// How long a running instance of the guest should pause before it runs on: none while
    /// the guest is within its CPU share. Called by the runtime at every epoch tick.
    pub fn cpu_pause(&self) -> Option<Duration> {
        let cpu = self.cpu.as_ref()?;
        cpu.check().err().map(|not_until| {
            not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ))
        })
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
}

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
        }
    }

    /// Records every call of this reconcile (see [`Call`]).
    #[must_use]
    pub fn recording(mut self) -> Self {
        self.calls = Some(Vec::new());
        self
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
    ) -> Result<Vec<String>, HostError> {
        Err(HostError::Denied(LOADING.into()))
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

impl WorkQueue for DenyAll {
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
