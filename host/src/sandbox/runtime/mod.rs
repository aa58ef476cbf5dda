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
//! `benches/reconcile.rs` measures each phase; docs/performance.md has the figures.
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
//!
//! One lifecycle phase per file; each imports only files above it in this list (`call` runs
//! what `load` made; `load` never imports `call`, so describing a failure, which both need,
//! lives in `store`):
//! - `engine.rs`: [`RuntimeOptions`], the engine and its instance pool, the epoch ticker, and
//!   the reactor that drives guest calls made outside any tokio runtime;
//! - `store.rs`: per-store state ([`HostState`]: call context, lazy WASI context, memory cap,
//!   captured stderr), the linker that serves its imports, and the description of a failed
//!   call from what the store saw;
//! - `load.rs`: compile through the cache, check the world, `manifest()`: [`LoadedGuest`],
//!   [`LoadError`], [`content_hash`];
//! - `call.rs`: one reconcile: [`Request`], [`Run`], [`Outcome`];
//! - this file: [`Runtime`], which holds the engine's parts and runs the phases in order.

use std::path::Path;

use wasmtime::Engine;
use wasmtime::component::Linker;

mod call;
mod engine;
mod load;
mod store;

pub use crate::config::EPOCH_TICK;
pub use crate::config::Reuse;
pub(crate) use call::Run;
pub use call::{
    Indexed, MAX_INDEX_VALUE_BYTES, MAX_INDEX_VALUES, MAX_MAPPED_KEYS, Mapped, Outcome, Request,
    Warm,
};
pub use engine::{RuntimeOptions, StartError};
pub use load::{LoadError, LoadedGuest, MANIFEST_DEADLINE, content_hash};
pub(crate) use store::HostState;

use crate::sandbox::capabilities::CallContext;
use engine::{EpochTicker, Reactor};
use load::Compiler;

/// The wasmtime engine and the host's linker. Cheap to share (`Arc`).
pub struct Runtime {
    engine: Engine,
    linker: Linker<HostState>,
    compiler: Compiler,
    /// Pool slots: instances alive at once across all guests.
    slots: u32,
    reactor: Reactor,
    /// Manifests by content hash, or why `manifest()` failed ([`Runtime::load`]).
    manifests: parking_lot::Mutex<std::collections::HashMap<String, Remembered>>,
    /// Held for its `Drop`: the ticker thread stops with the runtime.
    _ticker: EpochTicker,
}

/// Contents whose manifest a runtime remembers at most.
const MANIFESTS_REMEMBERED: usize = 1024;
/// How long a `manifest()` that ran out of time is remembered as failed.
const SLOW_MANIFEST_REMEMBERED: std::time::Duration = std::time::Duration::from_mins(10);

/// A content's manifest, or why describing it failed and until when that is believed.
type Remembered = Result<crate::sandbox::manifest::Manifest, (String, Option<std::time::Instant>)>;

impl Runtime {
    pub fn new(options: &RuntimeOptions) -> Result<Self, StartError> {
        let engine = engine::new_engine(options)?;
        let linker = store::linker(&engine).map_err(StartError::Linker)?;
        let ticker = EpochTicker::start(&engine).map_err(StartError::Ticker)?;
        let compiler = Compiler::new(engine.clone(), options.cache_dir.as_deref());
        Ok(Self {
            engine,
            linker,
            compiler,
            slots: options.slots(),
            reactor: Reactor::default(),
            manifests: parking_lot::Mutex::default(),
            _ticker: ticker,
        })
    }

    /// Compiles (or maps from the cache) and validates a component, then calls `manifest()`
    /// in a throwaway instance whose host calls are all denied, under [`MANIFEST_DEADLINE`].
    /// Blocks the calling thread (call it from a blocking context).
    ///
    /// A content's manifest is remembered (by content hash) once it was described, and a
    /// `manifest()` that failed or ran out of time is remembered as failed: judging the same
    /// content again (a new grant, a new generation of its object, a reload) never runs it
    /// again, so a guest that takes its whole deadline to describe itself costs that once, not
    /// at every change another party can cause.
    pub fn load(&self, bytes: &[u8], file: &Path) -> Result<LoadedGuest, LoadError> {
        let name = file.display().to_string();
        let hash = content_hash(bytes);
        let component = self.compiler.compile(bytes, &hash, &name)?;
        let checked = load::check_world(&self.engine, &self.linker, &component, &name)?;
        let known = self.manifests.lock().get(&hash).cloned();
        match known {
            Some(Ok(manifest)) => return Ok(checked.described(manifest, hash, file)),
            Some(Err((reason, until))) if until.is_none_or(|t| std::time::Instant::now() < t) => {
                return Err(LoadError::Manifest {
                    file: name,
                    reason: format!("{reason} (remembered from an earlier load of this content)"),
                });
            }
            _ => {}
        }
        let loaded = self.reactor.drive(
            None,
            checked.describe(&self.engine, self.slots, hash.clone(), file),
        );
        let remembered = match &loaded {
            Ok(guest) => Some(Ok(guest.manifest.clone())),
            Err(e @ (LoadError::Manifest { .. } | LoadError::InvalidManifest { .. })) => {
                Some(Err((e.to_string(), None)))
            }
            // A deadline may have been the host's load, not the guest: remembered a while.
            Err(e @ LoadError::ManifestDeadline { .. }) => Some(Err((
                e.to_string(),
                Some(std::time::Instant::now() + SLOW_MANIFEST_REMEMBERED),
            ))),
            Err(_) => None,
        };
        if let Some(remembered) = remembered {
            let mut manifests = self.manifests.lock();
            // Bounded: forgetting only costs a `manifest()` call again.
            if manifests.len() >= MANIFESTS_REMEMBERED {
                manifests.clear();
            }
            manifests.insert(hash, remembered);
        }
        loaded
    }

    /// Runs one reconcile in a fresh instance. Blocks the calling thread (run it on a blocking
    /// thread) and drives the call on the context's tokio runtime; the guest's deadline and
    /// memory cap come from its grant.
    pub fn reconcile(&self, guest: &LoadedGuest, call: CallContext, request: Request) -> Run {
        let handle = call.runtime.clone();
        self.reactor
            .drive(handle, self.reconcile_async(guest, call, request))
    }

    /// [`Runtime::reconcile`] as a future: the whole guest call, imports included, under a
    /// timeout at the deadline (see the module docs).
    pub(crate) async fn reconcile_async(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        request: Request,
    ) -> Run {
        call::reconcile(&self.engine, self.slots, guest, call, request).await
    }

    /// [`Runtime::reconcile_async`] in `warm`'s instance when `reuse` allows it, keeping the
    /// instance there for the next reconcile of this worker (see [`call::reconcile_reusing`]).
    pub async fn reconcile_reusing(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        request: Request,
        warm: &mut Option<Warm>,
        reuse: Option<Reuse>,
    ) -> Run {
        call::reconcile_reusing(&self.engine, self.slots, guest, call, request, warm, reuse).await
    }

    /// Calls the guest's `map` export on one object of `kind` in a fresh instance, under the
    /// deadline and memory cap of the context's grant. Blocks the calling thread, as
    /// [`Runtime::reconcile`] does.
    pub fn map(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        kind: &crate::cluster::objects::Gvk,
        object: String,
    ) -> Mapped {
        let handle = call.runtime.clone();
        self.reactor
            .drive(handle, self.map_async(guest, call, kind, object))
    }

    /// [`Runtime::map`] as a future (see [`call::map`]).
    pub(crate) async fn map_async(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        kind: &crate::cluster::objects::Gvk,
        object: String,
    ) -> Mapped {
        call::map(&self.engine, self.slots, guest, call, kind, object).await
    }

    /// Calls the guest's `index` export for index `name` on one primary object in a fresh
    /// instance, under the deadline and memory cap of the context's grant. Blocks the calling
    /// thread, as [`Runtime::reconcile`] does.
    pub fn index(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        name: &str,
        object: String,
    ) -> Indexed {
        let handle = call.runtime.clone();
        self.reactor
            .drive(handle, self.index_async(guest, call, name, object))
    }

    /// [`Runtime::index`] as a future (see [`call::index`]).
    pub(crate) async fn index_async(
        &self,
        guest: &LoadedGuest,
        call: CallContext,
        name: &str,
        object: String,
    ) -> Indexed {
        call::index(&self.engine, self.slots, guest, call, name, object).await
    }

    pub fn engine(&self) -> &Engine {
        &self.engine
    }
}
