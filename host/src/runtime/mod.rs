//! The wasmtime engine: compiling guests (with an on-disk cache), and running one reconcile in a
//! fresh instance under a deadline and a memory cap.
//!
//! Cost model, per guest version:
//! - compile: once per content hash; the artefact is cached on disk keyed by the content's
//!   SHA-256 and the engine's compatibility hash, so a restart or a re-added file only loads
//!   and verifies it (`compile_cache`).
//! - `InstancePre`: once; it resolves every import against the host's linker up front, and the
//!   exports' types are checked once (by instantiating it for `manifest()`), not per instance.
//!
//! Per reconcile: a new `Store` (guest state, limits; the empty WASI context is built only if
//! the guest makes a WASI call), instantiation from the pooling allocator (slots are reused,
//! linear memory is copy-on-write from the compiled image; on return only the pages the
//! instance dirtied are restored), one call, and drop. Nothing survives between keys.
//! `benches/reconcile.rs` measures each phase.
//!
//! Isolation: a guest sees no files, sockets, environment or arguments (WASI is linked because
//! language toolchains import it, but the context is empty unless its grant sets `env`);
//! clocks and random numbers are available.
//!
//! The deadline covers everything a guest can do, in two ways that together leave no gap:
//! - guest code: epoch interruption (a ticker thread advances the epoch every `EPOCH_TICK`)
//!   traps a guest that computes past its deadline;
//! - every import, WASI's included: the engine runs with async support, so a guest waiting in
//!   a host call (the API server, a rate limiter) or a WASI call (a `sleep`, a `poll` on a
//!   clock) is a pending future, and a timeout around the whole call drops it at the deadline.
//!   The same holds for `manifest()` at load. Blocking WASI calls cannot hold a thread: the
//!   async WASI implementation waits on tokio timers.
//!
//! Memory is capped per instance across all of a component's memories (one budget, not one per
//! memory), with a resource limiter.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};
use wasmtime::component::{
    Component, ComponentExportIndex, Instance, Linker, ResourceTable, TypedFunc,
    types::ComponentItem,
};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::capabilities::{Call, CallContext};
pub use crate::config::EPOCH_TICK;
use crate::manifest::Manifest;
use crate::objects::ObjectRef;
use crate::wit::{NetworkControllerPre, guest};

/// Dirty bytes of a pool slot reset in place (kept resident) when an instance is dropped; a
/// slot keeps at most this much memory resident between reconciles. A Rust guest dirties well
/// under 1 MiB; a Python guest's fresh CPython heap several MiB, and restoring those in place
/// instead of faulting them in again made its reconciles 2.3x faster.
const KEEP_RESIDENT: usize = 16 << 20;
/// Bytes of guest stderr kept per reconcile (a panic message fits; a flood does not grow memory).
const STDERR_CAPTURE: usize = 16 * 1024;
const RECONCILER_EXPORT: &str = "reconciler:api/reconciler@0.1.0";
/// Interfaces of the contract, as a component's imports name them.
const API_PACKAGE: &str = "reconciler:api/";
/// How long `manifest()` may take at load.
pub const MANIFEST_DEADLINE: Duration = Duration::from_secs(5);

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(
        "{file}: not a WebAssembly component ({reason}); build the guest for wasm32-wasip2 or with a component toolchain"
    )]
    Compile { file: String, reason: String },
    #[error(
        "{file}: targets another world: {reason}; a guest must export {RECONCILER_EXPORT} and import only the reconciler:api interfaces and WASI"
    )]
    WrongWorld { file: String, reason: String },
    #[error("{file}: manifest() failed: {reason}")]
    Manifest { file: String, reason: String },
    #[error(
        "{file}: manifest() did not return within {MANIFEST_DEADLINE:?} and was cancelled; a guest must describe itself without waiting"
    )]
    ManifestDeadline { file: String },
    #[error("{file}: manifest is invalid: {reason}")]
    InvalidManifest { file: String, reason: String },
    /// Every instance slot was busy: the host's limit, not the guest's fault. Retried.
    #[error(
        "{file}: no free instance slot to load it in (the host runs at most {slots} guest instances at once); retrying"
    )]
    Busy { file: String, slots: u32 },
}

impl LoadError {
    /// Whether loading the same bytes again later may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, LoadError::Busy { .. })
    }
}

/// One compiled, validated guest version, ready to instantiate. Cloning shares the compiled
/// code (a new grant for the same version clones it).
#[derive(Clone)]
pub struct LoadedGuest {
    pre: NetworkControllerPre<HostState>,
    /// Where the `reconcile` function is among the component's exports (found at load).
    reconcile: ComponentExportIndex,
    /// SHA-256 of the component bytes, hex.
    pub hash: String,
    pub manifest: Manifest,
    /// The contract's interfaces the component imports (`lister`, `network-backend`, ...).
    pub imports: BTreeSet<String>,
    pub file: PathBuf,
}

impl std::fmt::Debug for LoadedGuest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedGuest")
            .field("file", &self.file)
            .field("hash", &self.hash)
            .field("manifest", &self.manifest)
            .finish_non_exhaustive()
    }
}

/// The guest's `reconcile` export, typed as the bindings type it.
type ReconcileFunc<'a> =
    TypedFunc<(&'a guest::Request,), (Result<guest::Action, crate::wit::types::ReconcileError>,)>;

impl LoadedGuest {
    /// The world the guest was built for, from what it imports.
    pub fn world(&self) -> &'static str {
        if self.imports.contains("network-backend") {
            "network-controller"
        } else {
            "controller"
        }
    }

    /// The `reconcile` function of a fresh instance of this guest, without the per-instance
    /// type check of the bindings' `instantiate` (~0.7 µs per reconcile in
    /// `benches/reconcile.rs`): the check was made once, at load.
    fn reconcile_func<'a>(
        &self,
        instance: &Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<ReconcileFunc<'a>> {
        let func = instance
            .get_func(&mut *store, self.reconcile)
            .ok_or_else(|| wasmtime::format_err!("the instance has no `reconcile` export"))?;
        // SAFETY: `new_unchecked` needs the function's type to be `ReconcileFunc`'s.
        // `Runtime::load` creates a `LoadedGuest` only after instantiating `pre` through the
        // bindings, which type-check this very export against this signature, and every
        // instance of a component has its component's export types.
        Ok(unsafe { ReconcileFunc::new_unchecked(func) })
    }
}

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

/// Per-store data: the capabilities' call context, the guest's WASI context and the limiter.
pub struct HostState {
    call: CallContext,
    /// Built on the guest's first WASI call: most reconciles make none, and building one (its
    /// random sources, clocks, pipes) is a measurable share of a fresh instance's cost.
    wasi: Option<GuestWasi>,
    table: ResourceTable,
    limiter: MemoryCap,
}

/// A guest's WASI context and the stderr it writes to (read when a reconcile fails).
struct GuestWasi {
    ctx: WasiCtx,
    stderr: MemoryOutputPipe,
}

impl WasiView for HostState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        let wasi = self.wasi.get_or_insert_with(|| GuestWasi::new(&self.call));
        WasiCtxView {
            ctx: &mut wasi.ctx,
            table: &mut self.table,
        }
    }
}

impl GuestWasi {
    /// No files, sockets or arguments; the environment the guest's grant sets; a fixed wall
    /// clock when the offline runner asks for one; stderr captured for error messages.
    fn new(call: &CallContext) -> Self {
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        for (k, v) in &call.guest.grant.env {
            wasi.env(k, v);
        }
        if let Some(at) = call.guest.fixed_clock {
            wasi.wall_clock(FixedClock(
                at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
            ));
        }
        Self {
            ctx: wasi.build(),
            stderr,
        }
    }
}

/// Caps the linear memory of one instance, summed over all of its memories (a component may
/// hold several core modules, each with its own), and remembers whether the cap was hit, so an
/// out-of-memory abort is reported as a memory-limit hit rather than an anonymous trap.
struct MemoryCap {
    max_bytes: usize,
    /// Bytes of every memory of the instance so far (creation counts as growth from zero).
    total: usize,
    hit: bool,
}

impl wasmtime::ResourceLimiter for MemoryCap {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let after = self.total.saturating_add(desired.saturating_sub(current));
        if after > self.max_bytes {
            self.hit = true;
            return Ok(false);
        }
        self.total = after;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= 1_000_000)
    }
}

/// Engine settings that matter to the operator.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    /// Where compiled artefacts are cached; none = compile in memory every time.
    pub cache_dir: Option<PathBuf>,
    /// Largest memory cap any guest may have (sizes the pooling allocator's slots).
    pub max_memory_mib: u64,
    /// Instances alive at once across all guests (pool slots).
    pub max_instances: u32,
}

impl Default for RuntimeOptions {
    fn default() -> Self {
        Self {
            cache_dir: None,
            max_memory_mib: 512,
            max_instances: 128,
        }
    }
}

/// The wasmtime engine and the host's linker. Cheap to share (`Arc`).
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    cache: Option<crate::compile_cache::CompileCache>,
    engine_hash: String,
    ticker_stop: Arc<AtomicBool>,
    max_instances: u32,
    /// Drives guest calls made outside any tokio runtime (tests, benches, `load` from a plain
    /// thread): WASI's timers and the deadline's timeout need a reactor.
    fallback: OnceLock<tokio::runtime::Runtime>,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl Runtime {
    pub fn new(options: &RuntimeOptions) -> anyhow::Result<Self> {
        let mut pool = PoolingAllocationConfig::default();
        let instances = options.max_instances.max(1);
        pool.total_component_instances(instances)
            // A Rust wasip2 component holds a handful of core instances (the program and small
            // shims); other toolchains may hold more.
            .total_core_instances(instances * 16)
            .max_core_instances_per_component(32)
            .total_memories(instances * 2)
            .max_memories_per_component(4)
            .total_tables(instances * 4)
            .max_tables_per_component(8)
            .max_memory_size(usize::try_from(options.max_memory_mib << 20)?)
            // Reset a returned slot by finding its dirty pages (the PAGEMAP_SCAN ioctl, Linux
            // 6.7+; `Auto` falls back to madvise elsewhere) and restoring only those with
            // memset, up to KEEP_RESIDENT; beyond it, madvise. The next instance then takes no
            // page faults: this halved the cost of a reconcile (see benches/reconcile.rs).
            .pagemap_scan(wasmtime::Enabled::Auto)
            .linear_memory_keep_resident(KEEP_RESIDENT)
            .table_keep_resident(16 << 10);
        let mut config = Config::new();
        config
            .wasm_component_model(true)
            .epoch_interruption(true)
            .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        let engine = Engine::new(&config)?;

        let mut linker = Linker::<HostState>::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        crate::capabilities::add_to_linker(&mut linker, |state: &mut HostState| &mut state.call)?;

        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = format!("{:016x}", hasher.finish());

        let ticker_stop = Arc::new(AtomicBool::new(false));
        let (weak_engine, stop) = (engine.weak(), ticker_stop.clone());
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak_engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;

        // A cache directory the host cannot trust costs compiles, never the host.
        let cache = options.cache_dir.as_deref().and_then(|dir| {
            crate::compile_cache::CompileCache::open(dir)
                .inspect_err(|e| tracing::error!("{e}; compiling guests in memory, uncached"))
                .ok()
        });
        Ok(Self {
            engine,
            linker,
            cache,
            engine_hash,
            ticker_stop,
            max_instances: instances,
            fallback: OnceLock::new(),
        })
    }

    /// Runs `fut` to completion on `handle`, or on the runtime's own reactor when there is
    /// none. Blocks the calling thread: call from a blocking context, never from async code.
    /// A current-thread runtime's handle cannot drive its timers from another thread's
    /// `block_on`, so such a handle is passed over for the runtime's own reactor as well.
    fn drive<F: std::future::Future>(
        &self,
        handle: Option<tokio::runtime::Handle>,
        fut: F,
    ) -> F::Output {
        let handle = handle
            .or_else(|| tokio::runtime::Handle::try_current().ok())
            .filter(|h| h.runtime_flavor() != tokio::runtime::RuntimeFlavor::CurrentThread);
        match handle {
            Some(handle) => handle.block_on(fut),
            None => self
                .fallback
                .get_or_init(|| {
                    tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a current-thread tokio runtime builds")
                })
                .block_on(fut),
        }
    }

    /// Compiles (or maps from the cache) and validates a component, then calls `manifest()`
    /// in a throwaway instance whose host calls are all denied, under [`MANIFEST_DEADLINE`].
    /// Blocks the calling thread (call it from a blocking context).
    pub fn load(&self, bytes: &[u8], file: &Path) -> Result<LoadedGuest, LoadError> {
        let name = file.display().to_string();
        let hash = content_hash(bytes);
        let component = self.compile_cached(bytes, &hash, &name)?;

        let imports = component
            .component_type()
            .imports(&self.engine)
            .filter_map(|(import, _)| {
                let interface = import.strip_prefix(API_PACKAGE)?;
                Some(interface.split('@').next().unwrap_or(interface).to_owned())
            })
            .collect();
        let Some((ComponentItem::ComponentInstance(_), interface)) =
            component.get_export(None, RECONCILER_EXPORT)
        else {
            return Err(LoadError::WrongWorld {
                file: name,
                reason: format!("it does not export {RECONCILER_EXPORT}"),
            });
        };
        let reconcile = component
            .get_export_index(Some(&interface), "reconcile")
            .ok_or_else(|| LoadError::WrongWorld {
                file: name.clone(),
                reason: format!("its {RECONCILER_EXPORT} export has no `reconcile` function"),
            })?;
        let instance_pre =
            self.linker
                .instantiate_pre(&component)
                .map_err(|e| LoadError::WrongWorld {
                    file: name.clone(),
                    reason: format!("{e:#}"),
                })?;
        let pre = NetworkControllerPre::new(instance_pre).map_err(|e| LoadError::WrongWorld {
            file: name.clone(),
            reason: format!("{e:#}"),
        })?;

        let manifest = self.drive(None, self.describe(&pre, &name))?;
        let manifest =
            Manifest::from_wit(manifest).map_err(|invalid| LoadError::InvalidManifest {
                file: name.clone(),
                reason: invalid.to_string(),
            })?;
        Ok(LoadedGuest {
            pre,
            reconcile,
            hash,
            manifest,
            imports,
            file: file.to_owned(),
        })
    }

    /// Instantiates the guest once and asks for its manifest, all under the manifest deadline.
    async fn describe(
        &self,
        pre: &NetworkControllerPre<HostState>,
        name: &str,
    ) -> Result<guest::ControllerManifest, LoadError> {
        let call = CallContext::loading(name, MANIFEST_DEADLINE);
        let deadline = call.deadline;
        let mut store = self.store(call, crate::config::DEFAULT_MEMORY_MIB << 20);
        let result = tokio::time::timeout_at(deadline.into(), async {
            // The bindings' instantiation type-checks the exports: a guest built against
            // another revision of the contract fails here, before any of its code runs.
            // Reconciles rely on this check (see `LoadedGuest::reconcile_func`).
            let instance = pre
                .instantiate_async(&mut store)
                .await
                .map_err(|e| (true, e))?;
            instance
                .reconciler_api_reconciler()
                .call_manifest(&mut store)
                .await
                .map_err(|e| (false, e))
        })
        .await;
        let file = name.to_owned();
        match result {
            Ok(Ok(manifest)) => Ok(manifest),
            Ok(Err((_, e))) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                Err(LoadError::Busy {
                    file,
                    slots: self.max_instances,
                })
            }
            Ok(Err((true, e))) => Err(LoadError::WrongWorld {
                file,
                reason: format!(
                    "its {RECONCILER_EXPORT} export does not match this host's (built against another revision of wit/?): {e:#}"
                ),
            }),
            Ok(Err((false, e))) => Err(LoadError::Manifest {
                file,
                reason: describe_failure(&e, &store).1,
            }),
            Err(_) => Err(LoadError::ManifestDeadline { file }),
        }
    }

    fn compile_cached(&self, bytes: &[u8], hash: &str, name: &str) -> Result<Component, LoadError> {
        let compile = || {
            Component::new(&self.engine, bytes).map_err(|e| LoadError::Compile {
                file: name.to_owned(),
                reason: compile_reason(&e),
            })
        };
        let Some(cache) = &self.cache else {
            return compile();
        };
        let entry = format!("{hash}-{}.cwasm", self.engine_hash);
        match cache.get(&entry) {
            Ok(Some(verified)) => {
                // SAFETY: `deserialize` runs native code from these bytes. `get` returned them
                // only after checking, in memory, their tag under the cache's secret key: they
                // are what this host serialised under this name (content and engine hash), and
                // the file cannot change between that check and this use.
                match unsafe { Component::deserialize(&self.engine, verified.bytes()) } {
                    Ok(component) => return Ok(component),
                    Err(e) => {
                        tracing::warn!(entry, "discarding unreadable compile cache entry: {e:#}");
                    }
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!("{e}; discarding it and compiling the guest again"),
        }
        let component = compile()?;
        let serialized = component.serialize().map_err(|e| LoadError::Compile {
            file: name.to_owned(),
            reason: format!("{e:#}"),
        })?;
        // A cache that cannot be written costs a compile next time, not this guest: warn only.
        if let Err(e) = cache.put(&entry, &serialized) {
            let path = cache.dir().join(&entry);
            tracing::warn!(path = %path.display(), "could not write the compile cache: {e}");
        }
        Ok(component)
    }

    fn store(&self, call: CallContext, memory_bytes: usize) -> Store<HostState> {
        let deadline = call.deadline;
        let state = HostState {
            call,
            wasi: None,
            table: ResourceTable::new(),
            limiter: MemoryCap {
                max_bytes: memory_bytes,
                total: 0,
                hit: false,
            },
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limiter);
        // Every epoch tick a running guest yields to the executor (so a guest computing in a
        // loop shares its thread with the host's other tasks) and, once past its deadline,
        // traps with `Interrupt`.
        store.set_epoch_deadline(1);
        store.epoch_deadline_callback(move |store| {
            if Instant::now() >= deadline {
                return Err(Trap::Interrupt.into());
            }
            // Over the guest's CPU share: pause (the deadline's timeout still runs).
            Ok(match store.data().call.guest.budget.cpu_pause() {
                Some(pause) => {
                    wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(tokio::time::sleep(pause)))
                }
                None => wasmtime::UpdateDeadline::Yield(1),
            })
        });
        store
    }

    /// Runs one reconcile in a fresh instance. Blocks the calling thread (run it on a blocking
    /// thread) and drives the call on the context's tokio runtime; the guest's deadline and
    /// memory cap come from its grant.
    pub fn reconcile(&self, guest: &LoadedGuest, call: CallContext, request: Request) -> Run {
        let handle = call.runtime.clone();
        self.drive(handle, self.reconcile_async(guest, call, request))
    }

    /// [`Runtime::reconcile`] as a future: the whole guest call, imports included, under a
    /// timeout at the deadline (see the module docs).
    pub async fn reconcile_async(
        &self,
        guest: &LoadedGuest,
        mut call: CallContext,
        request: Request,
    ) -> Run {
        let started = Instant::now();
        let limits = &call.guest.grant.limits;
        let memory_bytes = limits.memory_bytes();
        call.deadline = started + limits.deadline();
        let deadline = call.deadline;
        let mut store = self.store(call, memory_bytes);
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
            let instance = guest.pre.instance_pre().instantiate_async(&mut store).await;
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
        let outcome = match result {
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
            Ok(Err(e)) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                Outcome::Transient(format!(
                    "no free instance slot: {e:#}; the host runs at most {} guest instances at once",
                    self.max_instances
                ))
            }
            Ok(Err(e)) => {
                let (kind, message) = describe_failure(&e, &store);
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
                store.data().call.guest.grant.limits.deadline()
            )),
        };
        let state = store.into_data();
        let finished = Instant::now();
        Run {
            outcome,
            conflicted: state.call.conflicted,
            calls: state.call.calls,
            shadow_differences: state.call.shadow_differences,
            store_time: stored - started,
            instantiate_time: instantiated - stored,
            call_time: called - instantiated,
            teardown_time: finished - called,
        }
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}

enum FailureKind {
    Trap,
    Deadline,
    MemoryLimit,
}

/// Classifies a failed call and builds a message with the trap and what the guest said last:
/// its stderr (where std reports a panic or an allocation failure), or, when that is empty,
/// the last line it logged at error level (where the Rust SDK reports a panic).
fn describe_failure(e: &wasmtime::Error, store: &Store<HostState>) -> (FailureKind, String) {
    let state = store.data();
    let stderr = state
        .wasi_stderr()
        .map(|s| s.trim().to_owned())
        .filter(|s| !s.is_empty());
    let kind = if matches!(e.downcast_ref::<Trap>(), Some(Trap::Interrupt)) {
        FailureKind::Deadline
    } else if state.limiter.hit {
        FailureKind::MemoryLimit
    } else {
        FailureKind::Trap
    };
    let head = match kind {
        FailureKind::Deadline => format!(
            "guest ran past its deadline of {:?} and was interrupted",
            state.call.guest.grant.limits.deadline()
        ),
        FailureKind::MemoryLimit => format!(
            "guest tried to grow its memory past its cap of {} MiB",
            state.limiter.max_bytes >> 20
        ),
        FailureKind::Trap => format!("guest trapped: {}", root_cause(e)),
    };
    // Guest text, escaped and bounded: a trap's message must not forge host log lines.
    let stderr = stderr.map(|s| crate::validation::message(&s));
    let message = match (stderr, &state.call.last_error) {
        (Some(stderr), _) => format!("{head}; guest stderr: {stderr}"),
        (None, Some(logged)) => format!("{head}; last error the guest logged: {logged}"),
        (None, None) => head,
    };
    (kind, message)
}

/// The trap, or the error's chain: escaped, since a wasm backtrace quotes the guest's own
/// function names.
fn root_cause(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<Trap>() {
        Some(trap) => trap.to_string(),
        None => crate::validation::message(&format!("{e:#}")),
    }
}

impl HostState {
    fn wasi_stderr(&self) -> Option<String> {
        let wasi = self.wasi.as_ref()?;
        Some(String::from_utf8_lossy(&wasi.stderr.contents()).into_owned())
    }
}

/// A wall clock that always reads the same instant.
struct FixedClock(Duration);

impl wasmtime_wasi::HostWallClock for FixedClock {
    fn resolution(&self) -> Duration {
        Duration::from_secs(1)
    }
    fn now(&self) -> Duration {
        self.0
    }
}

/// SHA-256 of a component's bytes, hex: the identity of a guest version (compile cache key,
/// `/guests`, change detection in the guest directory).
pub fn content_hash(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

/// Why a component did not compile, in one line: wasmparser's messages carry multi-line debug
/// dumps of the bytes it expected, which say nothing to an operator.
fn compile_reason(e: &wasmtime::Error) -> String {
    let root = e.root_cause().to_string();
    let first = root.lines().next().unwrap_or_default();
    let reason = first.split(" - expected=").next().unwrap_or(first).trim();
    match e.chain().next().map(ToString::to_string) {
        Some(top) if !top.contains(reason) => {
            format!("{}: {reason}", top.lines().next().unwrap_or_default())
        }
        _ => reason.to_owned(),
    }
}
