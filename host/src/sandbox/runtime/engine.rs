//! The engine and what keeps it running: the pooling allocator's configuration, the epoch
//! ticker that bounds guest computation, and the reactor that drives guest calls made outside
//! any tokio runtime.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::config::EPOCH_TICK;

/// Dirty bytes of a pool slot reset in place (kept resident) when an instance is dropped; a
/// slot keeps at most this much memory resident between reconciles. A Rust guest dirties well
/// under 1 MiB; a Python guest's fresh CPython heap several MiB, and restoring those in place
/// instead of faulting them in again made its reconciles more than twice as fast
/// (docs/performance.md, "Guests in other languages").
const KEEP_RESIDENT: usize = 16 << 20;

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

impl RuntimeOptions {
    /// Pool slots: instances alive at once, at least one.
    pub(super) fn slots(&self) -> u32 {
        self.max_instances.max(1)
    }
}

/// A component-model engine with epoch interruption and a pooling allocator of
/// `options.slots()` instances.
pub(super) fn new_engine(options: &RuntimeOptions) -> Result<Engine, StartError> {
    let mut pool = PoolingAllocationConfig::default();
    let instances = options.slots();
    pool.total_component_instances(instances)
        // A Rust wasip2 component holds a handful of core instances (the program and small
        // shims); other toolchains may hold more.
        .total_core_instances(instances * 16)
        .max_core_instances_per_component(32)
        .total_memories(instances * 2)
        .max_memories_per_component(4)
        .total_tables(instances * 4)
        .max_tables_per_component(8)
        .max_memory_size(
            usize::try_from(options.max_memory_mib << 20)
                .map_err(|_| StartError::MemoryCap(options.max_memory_mib))?,
        )
        // Reset a returned slot by finding its dirty pages (the PAGEMAP_SCAN ioctl, Linux
        // 6.7+; `Auto` falls back to madvise elsewhere) and restoring only those with
        // memset, up to KEEP_RESIDENT; beyond it, madvise. The next instance then takes no
        // page faults: this about halved the cost of a reconcile (docs/performance.md, the
        // reconcile bench).
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(KEEP_RESIDENT)
        .table_keep_resident(16 << 10);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .epoch_interruption(true)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    Engine::new(&config).map_err(StartError::Engine)
}

/// Why a runtime could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("a memory cap of {0} MiB does not fit this machine's address space")]
    MemoryCap(u64),
    // `wasmtime::Error` is not a `std::error::Error`: shown, not chained as a source.
    #[error("cannot configure the WebAssembly engine: {0:#}")]
    Engine(wasmtime::Error),
    #[error("cannot link the host's interfaces into the engine: {0:#}")]
    Linker(wasmtime::Error),
    #[error("cannot start the epoch ticker thread: {0}")]
    Ticker(#[source] std::io::Error),
}

/// A thread that advances the engine's epoch every `EPOCH_TICK`, so that a running guest
/// reaches its epoch callback (yield, CPU share, deadline). Stops when dropped or when the
/// engine is gone.
pub(super) struct EpochTicker {
    stop: Arc<AtomicBool>,
}

impl EpochTicker {
    pub(super) fn start(engine: &Engine) -> std::io::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let (weak_engine, stopped) = (engine.weak(), stop.clone());
        std::thread::Builder::new()
            .name("epoch-ticker".into())
            .spawn(move || {
                while !stopped.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak_engine.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(Self { stop })
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Drives guest calls made outside any tokio runtime (tests, benches, `load` from a plain
/// thread): WASI's timers and the deadline's timeout need a reactor.
#[derive(Default)]
pub(super) struct Reactor {
    fallback: OnceLock<tokio::runtime::Runtime>,
}

impl Reactor {
    /// Runs `fut` to completion on `handle`, or on the reactor's own runtime when there is
    /// none. Blocks the calling thread: call from a blocking context, never from async code.
    /// A current-thread runtime's handle cannot drive its timers from another thread's
    /// `block_on`, so such a handle is passed over for the reactor's own runtime as well.
    pub(super) fn drive<F: std::future::Future>(
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
}
