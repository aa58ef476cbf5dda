//! `preinit`: a Go guest's core module with its initialisation already done, so that a fresh
//! instance starts from the snapshot instead of running Go's runtime and package init (the Go
//! greeter's fresh reconcile in the host: ~460 µs as built, ~250 µs pre-initialised;
//! docs/performance.md).
//!
//! Two steps, both on the wasip1 core module, before it is made a component:
//!
//! 1. [`snapshot`]: Wizer runs the module's `_initialize` (Go's runtime and every `init`) with
//!    WASI preview1 linked, then writes a module whose memory and globals are the state it left.
//!    The snapshot freezes what init read: the environment (empty here), the monotonic clock's
//!    base, the runtime's random seeds. That is why a guest opts in (docs/guests/go.md).
//! 2. [`compact_data`]: Wizer writes the memory image as tens of thousands of small data
//!    segments (the Go greeter: ~38,000) and instantiation applies them one by one; a few large
//!    segments instead took the snapshot's instantiation from ~210 µs to ~30 µs (prototype).
//!
//! The module must export [`PRIME_EXPORT`] (the Go SDK's `preinit_wasip1.go`, compiled in
//! with `-tags reconciler_preinit`): it becomes the snapshot's `_initialize`, which the
//! component runs in every instance. Why it is needed is said at [`snapshot`].

use std::time::Instant;

use anyhow::{Result, anyhow, bail};
use wasm_encoder::{ConstExpr, DataSection, RawSection};
use wasmparser::{DataKind, Encoding, Operator, Parser, Payload};
// wasmtime's own error type has its own `context`.
use wasmtime::error::Context as _;
use wasmtime::{Config, Engine, Linker, Module, Store, Val};
use wasmtime_wasi::WasiCtx;
use wasmtime_wasi::p1::WasiP1Ctx;
use wasmtime_wizer::{InstanceState, SnapshotVal, ValType, Wizer};

/// The export the snapshot runs as its `_initialize` in every instance.
pub const PRIME_EXPORT: &str = "reconciler_prime";

/// Initialised bytes closer than this are joined into one segment, the gap zero-filled: copying
/// 64 KiB of zeros costs less at instantiation than another segment.
const MERGE_GAP: u64 = 64 << 10;

/// Pre-initialises the core module `wasm`: [`snapshot`], then [`compact_data`].
pub fn preinit(wasm: &[u8]) -> Result<Vec<u8>> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| anyhow!("cannot start the async runtime Wizer runs on: {e}"))?;
    let snapshot = runtime.block_on(snapshot(wasm))?;
    compact_data(&snapshot).map_err(|e| e.context("compacting the snapshot's data segments"))
}

/// Runs the module's `_initialize` under Wizer and returns the snapshot, with [`PRIME_EXPORT`]
/// exported as its `_initialize` and the original one gone.
///
/// Why a prime at all: the component's WASI adapter allocates its own state through the
/// guest's `cabi_realloc` at its first call. In a fresh instance of a plain build that first
/// call comes from Go's init, while `cabi_realloc` still takes the `sbrk` path. In a snapshot,
/// Go's init has already run and switched `cabi_realloc` to Go's allocator, which calls the
/// adapter again from inside that first call, and the adapter traps. The prime makes one WASI
/// call with the `sbrk` path forced, before any export runs.
async fn snapshot(wasm: &[u8]) -> Result<Vec<u8>> {
    if !exports_function(wasm, PRIME_EXPORT)? {
        bail!(
            "the module exports no `{PRIME_EXPORT}`: build the guest with `-tags reconciler_preinit` and the Go SDK's preinit_wasip1.go (guests/lib.sh does when the guest has a `preinit` file)"
        );
    }
    let mut wizer = Wizer::new();
    wizer
        .init_func("_initialize")
        .func_rename("_initialize", PRIME_EXPORT);
    let (cx, instrumented) = wizer.instrument(wasm)?;

    let engine = Engine::new(&Config::new())?;
    let module = Module::new(&engine, &instrumented).context("compiling the core module")?;
    let mut linker = Linker::<WasiP1Ctx>::new(&engine);
    wasmtime_wasi::p1::add_to_linker_async(&mut linker, |wasi| wasi)?;
    // Imported by Go's `cabi_realloc` from the component's WASI adapter, which wasmtime's own
    // preview1 lacks; nothing is lowered during init, so there is nothing to pause.
    linker.func_wrap(
        "wasi_snapshot_preview1",
        "adapter_monotonic_clock_set_paused",
        |_: i32| {},
    )?;
    // The reconciler interfaces: a guest's init that calls the host traps here, by name.
    linker.define_unknown_imports_as_traps(&module)?;

    // No environment and no arguments: Go copies both at init, so this is what the guest sees.
    let mut wasi = WasiCtx::builder();
    wasi.inherit_stdout()
        .inherit_stderr()
        .monotonic_clock(ClockFromZero::default());
    let mut store = Store::new(&engine, wasi.build_p1());
    let instance = linker
        .instantiate_async(&mut store, &module)
        .await
        .context("instantiating the core module")?;
    instance
        .get_typed_func::<(), ()>(&mut store, "_initialize")
        .context("the module's `_initialize` (Go's reactor init, -buildmode=c-shared)")?
        .call_async(&mut store, ())
        .await
        .context("the guest's initialisation (Go's runtime and package init) trapped")?;
    Ok(wizer
        .snapshot(
            &cx,
            &mut Snapshotted {
                store: &mut store,
                instance,
            },
        )
        .await?)
}

/// Whether `wasm` exports a function named `name`.
fn exports_function(wasm: &[u8], name: &str) -> Result<bool> {
    for payload in Parser::new(0).parse_all(wasm) {
        if let Payload::ExportSection(reader) = payload? {
            for export in reader {
                let export = export?;
                if export.name == name && export.kind == wasmparser::ExternalKind::Func {
                    return Ok(true);
                }
            }
        }
    }
    Ok(false)
}

/// The instance Wizer reads globals and memories from, by the export names its instrumentation
/// added (so a missing one is Wizer's bug, not the guest's). Written here rather than taken from
/// Wizer's `wasmtime` feature, which would change the workspace's wasmtime features.
struct Snapshotted<'a> {
    store: &'a mut Store<WasiP1Ctx>,
    instance: wasmtime::Instance,
}

impl InstanceState for Snapshotted<'_> {
    async fn global_get(&mut self, name: &str, _: ValType) -> SnapshotVal {
        let global = self
            .instance
            .get_global(&mut *self.store, name)
            .expect("Wizer's instrumentation exports every global");
        match global.get(&mut *self.store) {
            Val::I32(x) => SnapshotVal::I32(x),
            Val::I64(x) => SnapshotVal::I64(x),
            Val::F32(x) => SnapshotVal::F32(x),
            Val::F64(x) => SnapshotVal::F64(x),
            Val::V128(x) => SnapshotVal::V128(x.as_u128()),
            other => panic!("Wizer snapshots numeric globals only, not {other:?}"),
        }
    }

    async fn memory_contents(&mut self, name: &str, contents: impl FnOnce(&[u8]) + Send) {
        let memory = self
            .instance
            .get_memory(&mut *self.store, name)
            .expect("Wizer's instrumentation exports every memory");
        contents(memory.data(&*self.store));
    }
}

/// A monotonic clock that reads 1 ns at its first read. Go keeps its first reading as the base
/// of every monotonic time (`runtime.startNano`); the snapshot freezes it, and each instance's
/// clock starts near 0 again, so a base taken from a clock that had been running would put
/// every later reading before it. Go refuses a clock that reads 0, hence 1.
#[derive(Default)]
struct ClockFromZero(std::sync::OnceLock<Instant>);

impl wasmtime_wasi::HostMonotonicClock for ClockFromZero {
    fn resolution(&self) -> u64 {
        1
    }

    fn now(&self) -> u64 {
        let elapsed = self.0.get_or_init(Instant::now).elapsed().as_nanos();
        1 + u64::try_from(elapsed).unwrap_or(u64::MAX - 1)
    }
}

/// Rewrites the data of core module `wasm` as a few active segments holding the same memory
/// image: segments closer than [`MERGE_GAP`] are joined (later segments still overwrite
/// earlier ones), empty passive segments and the data count section are dropped.
///
/// Segment indices change, so a module whose code names segments (`memory.init`, `data.drop`,
/// `array.new_data`, `array.init_data`) is refused, as is a non-empty passive segment, a
/// second memory or an offset that is not an `i32.const`. A module without data is returned
/// as it is.
pub fn compact_data(wasm: &[u8]) -> Result<Vec<u8>> {
    let mut segments: Vec<(u64, &[u8])> = Vec::new();
    let mut has_data = false;
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::Version {
                encoding: Encoding::Component,
                ..
            } => bail!("a component, not a core module"),
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader()?;
                while !ops.eof() {
                    match ops.read()? {
                        Operator::MemoryInit { .. }
                        | Operator::DataDrop { .. }
                        | Operator::ArrayNewData { .. }
                        | Operator::ArrayInitData { .. } => bail!(
                            "the module's code names data segments (memory.init, data.drop or array.*_data), whose indices compaction changes"
                        ),
                        _ => {}
                    }
                }
            }
            Payload::DataSection(reader) => {
                has_data = true;
                for data in reader {
                    let data = data?;
                    match data.kind {
                        DataKind::Active {
                            memory_index: 0,
                            offset_expr,
                        } => {
                            let Operator::I32Const { value } =
                                offset_expr.get_operators_reader().read()?
                            else {
                                bail!("a data segment's offset is not an i32.const");
                            };
                            // The offset is an unsigned address in the 32-bit memory.
                            segments.push((u64::from(value.cast_unsigned()), data.data));
                        }
                        DataKind::Passive if data.data.is_empty() => {}
                        DataKind::Passive => bail!("a passive data segment is not empty"),
                        DataKind::Active { .. } => {
                            bail!("a data segment initialises a memory other than the first")
                        }
                    }
                }
            }
            _ => {}
        }
    }
    if !has_data {
        return Ok(wasm.to_vec());
    }

    let mut runs = merged_runs(&segments);
    for &(offset, bytes) in segments.iter().filter(|(_, bytes)| !bytes.is_empty()) {
        // The run that starts at or before `offset`; merged_runs made one for every segment.
        let index = runs.partition_point(|(start, _)| *start <= offset) - 1;
        let (start, image) = &mut runs[index];
        let at = usize::try_from(offset - *start)?;
        image[at..at + bytes.len()].copy_from_slice(bytes);
    }
    let mut section = DataSection::new();
    for (start, image) in &runs {
        let offset = u32::try_from(*start)?;
        section.active(
            0,
            &ConstExpr::i32_const(offset.cast_signed()),
            image.iter().copied(),
        );
    }

    let mut module = wasm_encoder::Module::new();
    for payload in Parser::new(0).parse_all(wasm) {
        match payload? {
            Payload::DataCountSection { .. } => {}
            // Every segment lives in the one section written here.
            Payload::DataSection(_) => {
                module.section(&section);
            }
            payload => {
                if let Some((id, range)) = payload.as_section() {
                    module.section(&RawSection {
                        id,
                        data: &wasm[range],
                    });
                }
            }
        }
    }
    let compacted = module.finish();
    wasmparser::Validator::new()
        .validate_all(&compacted)
        .map_err(|e| anyhow!("the compacted module does not validate: {e}"))?;
    Ok(compacted)
}

/// The address ranges the non-empty segments cover, joined where closer than [`MERGE_GAP`],
/// each with a zeroed image of its length, in address order.
fn merged_runs(segments: &[(u64, &[u8])]) -> Vec<(u64, Vec<u8>)> {
    let mut extents: Vec<(u64, u64)> = segments
        .iter()
        .filter(|(_, bytes)| !bytes.is_empty())
        .map(|&(offset, bytes)| (offset, offset + bytes.len() as u64))
        .collect();
    extents.sort_unstable();
    let mut joined: Vec<(u64, u64)> = Vec::new();
    for (start, end) in extents {
        match joined.last_mut() {
            Some((_, last_end)) if start <= *last_end + MERGE_GAP => {
                *last_end = (*last_end).max(end);
            }
            _ => joined.push((start, end)),
        }
    }
    joined
        .into_iter()
        .map(|(start, end)| {
            let len = usize::try_from(end - start).expect("a run lies inside a 32-bit memory");
            (start, vec![0; len])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wasm_encoder::{
        CodeSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemArg,
        MemorySection, MemoryType, TypeSection,
    };

    const PAGE: u64 = 64 << 10;

    fn memory_section(pages: u64) -> MemorySection {
        let mut memories = MemorySection::new();
        memories.memory(MemoryType {
            minimum: pages,
            maximum: None,
            memory64: false,
            shared: false,
            page_size_log2: None,
        });
        memories
    }

    /// A module with three pages of memory, exported, initialised by `segments` (offset and
    /// bytes; `None`: an empty passive segment), and no code.
    fn module_with_data(segments: &[Option<(i32, &[u8])>]) -> Vec<u8> {
        let mut module = wasm_encoder::Module::new();
        module.section(&memory_section(3));
        let mut exports = ExportSection::new();
        exports.export("memory", ExportKind::Memory, 0);
        module.section(&exports);
        let mut data = DataSection::new();
        for segment in segments {
            match segment {
                Some((offset, bytes)) => {
                    data.active(0, &ConstExpr::i32_const(*offset), bytes.iter().copied());
                }
                None => {
                    data.passive([]);
                }
            }
        }
        module.section(&data);
        module.finish()
    }

    fn memory_image(wasm: &[u8]) -> Vec<u8> {
        let engine = Engine::default();
        let module = Module::new(&engine, wasm).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        memory.data(&store).to_vec()
    }

    fn data_segments(wasm: &[u8]) -> Vec<(DataKind<'_>, usize)> {
        let mut segments = Vec::new();
        for payload in Parser::new(0).parse_all(wasm) {
            if let Payload::DataSection(reader) = payload.unwrap() {
                for data in reader {
                    let data = data.unwrap();
                    segments.push((data.kind, data.data.len()));
                }
            }
        }
        segments
    }

    #[test]
    fn compaction_keeps_the_bytes_of_the_memory_image() {
        let far = i32::try_from(2 * PAGE + 100).unwrap();
        let original = module_with_data(&[
            Some((16, b"hello")),
            None,
            // Overlaps the first: written after it, so its bytes win.
            Some((18, b"XY")),
            Some((4000, b"world")),
            None,
            // More than MERGE_GAP past the others: a run of its own.
            Some((far, b"far away")),
            Some((8, b"")),
        ]);
        let compacted = compact_data(&original).unwrap();

        assert_eq!(memory_image(&compacted), memory_image(&original));
        assert_eq!(&memory_image(&compacted)[16..21], b"heXYo");
        let segments = data_segments(&compacted);
        assert_eq!(segments.len(), 2, "{segments:?}");
        assert!(
            segments
                .iter()
                .all(|(kind, _)| matches!(kind, DataKind::Active { .. }))
        );
        assert_eq!(segments[0].1, 4005 - 16);
    }

    #[test]
    fn compaction_refuses_a_module_whose_code_uses_memory_init() {
        let mut module = wasm_encoder::Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], []);
        module.section(&types);
        let mut functions = FunctionSection::new();
        functions.function(0);
        module.section(&functions);
        module.section(&memory_section(1));
        module.section(&wasm_encoder::DataCountSection { count: 1 });
        let mut code = CodeSection::new();
        let mut body = Function::new([]);
        body.instructions()
            .i32_const(0)
            .i32_const(0)
            .i32_const(0)
            .memory_init(0, 0)
            .end();
        code.function(&body);
        module.section(&code);
        let mut data = DataSection::new();
        data.passive(*b"abc");
        module.section(&data);

        let error = compact_data(&module.finish()).unwrap_err().to_string();
        assert!(error.contains("memory.init"), "{error}");
    }

    /// A module whose `_initialize` stores 42 at address 8 and whose prime stores 7 at 12.
    fn module_with_init_and_prime(prime: &str) -> Vec<u8> {
        let store = |address: i32, value: i32| {
            let mut body = Function::new([]);
            body.instruction(&Instruction::I32Const(address))
                .instruction(&Instruction::I32Const(value))
                .instruction(&Instruction::I32Store8(MemArg {
                    offset: 0,
                    align: 0,
                    memory_index: 0,
                }))
                .instruction(&Instruction::End);
            body
        };
        let mut module = wasm_encoder::Module::new();
        let mut types = TypeSection::new();
        types.ty().function([], []);
        module.section(&types);
        let mut functions = FunctionSection::new();
        functions.function(0).function(0);
        module.section(&functions);
        module.section(&memory_section(1));
        let mut exports = ExportSection::new();
        exports
            .export("memory", ExportKind::Memory, 0)
            .export("_initialize", ExportKind::Func, 0)
            .export(prime, ExportKind::Func, 1);
        module.section(&exports);
        let mut code = CodeSection::new();
        code.function(&store(8, 42)).function(&store(12, 7));
        module.section(&code);
        module.finish()
    }

    #[test]
    fn preinit_keeps_what_init_wrote_and_runs_the_prime_as_initialize() {
        let snapshot = preinit(&module_with_init_and_prime(PRIME_EXPORT)).unwrap();

        let engine = Engine::default();
        let module = Module::new(&engine, &snapshot).unwrap();
        let mut store = Store::new(&engine, ());
        let instance = wasmtime::Instance::new(&mut store, &module, &[]).unwrap();
        let memory = instance.get_memory(&mut store, "memory").unwrap();
        assert_eq!(
            memory.data(&store)[8],
            42,
            "init's write is in the snapshot"
        );
        assert_eq!(memory.data(&store)[12], 0, "the prime has not run yet");
        assert!(instance.get_export(&mut store, PRIME_EXPORT).is_none());
        instance
            .get_typed_func::<(), ()>(&mut store, "_initialize")
            .unwrap()
            .call(&mut store, ())
            .unwrap();
        assert_eq!(memory.data(&store)[12], 7, "`_initialize` is the prime");
        assert!(data_segments(&snapshot).len() <= 1);
    }

    #[test]
    fn preinit_says_how_to_build_a_module_without_the_prime() {
        let error = preinit(&module_with_init_and_prime("something_else"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("-tags reconciler_preinit"), "{error}");
    }
}
