//! Per-store state: what one instance may touch while it lives (the capabilities' call
//! context, a lazily built WASI context, the memory cap), the linker that serves its imports,
//! and how a failed call is described from what the store saw. Failure description lives here,
//! beside the state it reads, so that loading and calling both use it without importing each
//! other.

use std::time::{Duration, Instant};

use wasmtime::component::{Linker, ResourceTable};
use wasmtime::{Engine, Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use crate::sandbox::capabilities::CallContext;
use crate::sandbox::capabilities::http::{Charged, ChargedHttp, GuestHttp, MAX_RESOURCES};
use wasmtime_wasi_http::WasiHttpCtxView;
use wasmtime_wasi_http::p2::bindings::http::{outgoing_handler, types as http_types};

/// Bytes of guest stderr kept per instance (a panic message fits; a flood does not grow memory).
pub(super) const STDERR_CAPTURE: usize = 16 * 1024;

/// Per-store data: the capabilities' call context, the guest's WASI context and the limiter.
pub(crate) struct HostState {
    call: CallContext,
    /// Built on the guest's first WASI call: most reconciles make none, and building one (its
    /// random sources, clocks, pipes) is a measurable share of a fresh instance's cost.
    wasi: Option<GuestWasi>,
    table: ResourceTable,
    /// Built on the guest's first `wasi:http` call, for the reconcile it serves.
    http: Option<GuestHttp>,
    limiter: MemoryCap,
}

impl HostState {
    pub(super) fn call(&self) -> &CallContext {
        &self.call
    }

    /// What the store's capabilities recorded, once the instance is gone.
    pub(super) fn into_call(mut self) -> CallContext {
        self.call.absorb_http();
        self.call
    }

    /// A reused instance's next reconcile: its context replaces the last one's, which is
    /// returned with what it recorded.
    pub(super) fn next_call(&mut self, call: CallContext) -> CallContext {
        let mut last = std::mem::replace(&mut self.call, call);
        // The next reconcile's requests get hooks with its own deadline and session; the
        // ledger stays, since resources the instance kept stay in its table.
        if let Some(http) = &mut self.http {
            http.renew(&self.call);
        }
        last.absorb_http();
        last
    }

    /// Bytes the guest wrote to stderr so far (bounded by the capture).
    pub(super) fn stderr_len(&self) -> usize {
        self.wasi.as_ref().map_or(0, |w| w.stderr.contents().len())
    }

    fn wasi_stderr(&self) -> Option<String> {
        let wasi = self.wasi.as_ref()?;
        Some(String::from_utf8_lossy(&wasi.stderr.contents()).into_owned())
    }
}

/// The host's linker: async WASI (language toolchains import it) and the contract's
/// interfaces, each served by its capability from the store's call context.
pub(super) fn linker(engine: &Engine) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::<HostState>::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
    // `wasi:http/outgoing-handler` (the contract's `http-controller` world), and the types it
    // shares with toolchains that import them incidentally (StarlingMonkey's `fetch`): served
    // by wasmtime-wasi-http through the instance's ledger, which books every resource.
    let options = wasmtime_wasi_http::p2::bindings::LinkOptions::default();
    outgoing_handler::add_to_linker::<_, ChargedHttp>(&mut linker, HostState::http)?;
    http_types::add_to_linker::<_, ChargedHttp>(&mut linker, &options.into(), HostState::http)?;
    crate::sandbox::capabilities::add_to_linker(&mut linker, |state: &mut HostState| {
        &mut state.call
    })?;
    Ok(linker)
}

/// A fresh store for one instance: `memory_bytes` across all its memories, and an epoch
/// callback that enforces `call.deadline`.
pub(super) fn new_store(
    engine: &Engine,
    call: CallContext,
    memory_bytes: usize,
) -> Store<HostState> {
    let mut table = ResourceTable::new();
    table.set_max_capacity(MAX_RESOURCES);
    let state = HostState {
        call,
        wasi: None,
        table,
        http: None,
        limiter: MemoryCap {
            max_bytes: memory_bytes,
            total: 0,
            hit: false,
        },
    };
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    // Every epoch tick a running guest yields to the executor (so a guest computing in a
    // loop shares its thread with the host's other tasks) and, once past its deadline,
    // traps with `Interrupt`.
    store.set_epoch_deadline(1);
    // The deadline is read from the store: a reused instance serves one call after another.
    store.epoch_deadline_callback(move |store| {
        if Instant::now() >= store.data().call.deadline {
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

impl HostState {
    /// The instance's `wasi:http` state, made on its first call, and its ledger.
    fn http(&mut self) -> Charged<'_> {
        let call = &self.call;
        let http = self.http.get_or_insert_with(|| GuestHttp::new(call));
        Charged {
            http: WasiHttpCtxView {
                ctx: &mut http.ctx,
                table: &mut self.table,
                hooks: &mut http.hooks,
            },
            ledger: &mut http.ledger,
        }
    }
}

impl GuestWasi {
    /// No files, sockets or arguments; the environment the guest's grant sets; a fixed wall
    /// clock when the offline runner asks for one, or a recorded reconcile's clock and random
    /// seed; stderr captured for error messages.
    fn new(call: &CallContext) -> Self {
        use rand::SeedableRng as _;
        use rand::rngs::StdRng;
        let stderr = MemoryOutputPipe::new(STDERR_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone());
        for (k, v) in &call.guest.grant.env {
            wasi.env(k, v);
        }
        let clock = call.pinned.map(|p| p.clock).or(call.guest.fixed_clock);
        if let Some(at) = clock {
            wasi.wall_clock(FixedClock(
                at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default(),
            ));
        }
        if let Some(pinned) = call.pinned {
            // One seed, three sources that differ: each is a stream of its own.
            wasi.secure_random(StdRng::seed_from_u64(pinned.seed))
                .insecure_random(StdRng::seed_from_u64(pinned.seed ^ 0x5bd1_e995))
                .insecure_random_seed(u128::from(pinned.seed) << 64 | u128::from(!pinned.seed));
        }
        Self {
            ctx: wasi.build(),
            stderr,
        }
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

pub(super) enum FailureKind {
    Trap,
    Deadline,
    MemoryLimit,
}

/// Classifies a failed call and builds a message with the trap and what the guest said last:
/// its stderr (where std reports a panic or an allocation failure), or, when that is empty,
/// the last line it logged at error level (where the Rust SDK reports a panic).
pub(super) fn describe_failure(
    e: &wasmtime::Error,
    store: &Store<HostState>,
) -> (FailureKind, String) {
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
    let stderr = stderr.map(|s| crate::cluster::validation::message(&s));
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
        None => crate::cluster::validation::message(&format!("{e:#}")),
    }
}
