//! Slims a Rust `wasm32-wasip2` guest component: the WASI stdio functions that std links in
//! (stdin/stdout/stderr streams, terminals, polling them, `exit`) become small functions inside
//! the guest instead of imports.
//!
//! Why: the host instantiates a guest afresh for every reconcile, and every lowered import costs
//! something at each instantiation. A Rust guest imports ~18 such functions only because std's
//! panic and print paths reference them; a reconciler has no terminal, and the host discards its
//! stdout anyway. Without them a reconcile's instantiation takes about a third less time
//! (`host/benches/reconcile.rs`).
//!
//! What the guest sees afterwards:
//! - writes to stdout and stderr succeed and go nowhere; reading stdin finds it closed; no
//!   stream is a terminal;
//! - `exit` traps;
//! - everything else (the `reconciler:api` interfaces, the environment, clocks, random) is
//!   imported as before.
//!
//! A panic message used to reach the host through stderr; the Rust SDK's panic hook sends it
//! through the `log` interface instead, and the host puts it into the reconcile's error.
//!
//! The rewrite is all or nothing: when the guest imports a stdio function this crate does not
//! know how to answer, or another import that hands out or takes the same resources (a
//! monotonic-clock `subscribe-*` returns a `pollable`, a filesystem returns streams), the guest
//! is left as it is and [`Slimmed::kept`] says why.

use std::collections::HashMap;

use anyhow::{Context, Result, bail};
use wasm_encoder::reencode::{self, Reencode};
use wasm_encoder::{CodeSection, FunctionSection, ImportSection, Instruction, MemArg, ValType};
use wasmparser::{Parser, Payload, TypeRef};

/// Interfaces (package and name, without the version) whose functions are answered inside the
/// guest. They hand each other resources (streams, pollables, errors), so they go together.
pub const STDIO: &[&str] = &[
    "wasi:cli/stdin",
    "wasi:cli/stdout",
    "wasi:cli/stderr",
    "wasi:cli/terminal-input",
    "wasi:cli/terminal-output",
    "wasi:cli/terminal-stdin",
    "wasi:cli/terminal-stdout",
    "wasi:cli/terminal-stderr",
    "wasi:cli/exit",
    "wasi:io/streams",
    "wasi:io/poll",
    "wasi:io/error",
];

/// Imports that may stay next to slimmed stdio: they neither hand out nor take its resources.
fn compatible(interface: &str, function: &str) -> bool {
    interface.starts_with("reconciler:api/")
        || matches!(
            interface,
            "wasi:cli/environment"
                | "wasi:clocks/wall-clock"
                | "wasi:random/random"
                | "wasi:random/insecure"
                | "wasi:random/insecure-seed"
        )
        || (interface == "wasi:clocks/monotonic-clock" && matches!(function, "now" | "resolution"))
}

/// What a stub does, for a function whose core signature (after the canonical ABI's lowering)
/// is `params -> results`.
#[derive(Clone, Copy)]
enum Stub {
    /// Returns this constant (a handle, or `true`).
    Const(i32),
    /// Does nothing (a resource drop, blocking on a pollable that is always ready).
    Nothing,
    /// Writes `none` / `ok` (tag 0) at the return pointer, the last parameter.
    TagZero,
    /// `check-write`: `ok(permit)` at the return pointer.
    Permit,
    /// `read`: `err(closed)` at the return pointer.
    Closed,
    /// Traps (`exit`).
    Trap,
}

/// The functions this crate answers, by name, with the core signature it expects.
fn stub_for(function: &str) -> Option<(Stub, &'static [ValType], &'static [ValType])> {
    use ValType::{I32, I64};
    Some(match function {
        "get-stdin" => (Stub::Const(1), &[], &[I32]),
        "get-stdout" => (Stub::Const(2), &[], &[I32]),
        "get-stderr" => (Stub::Const(3), &[], &[I32]),
        "get-terminal-stdin" | "get-terminal-stdout" | "get-terminal-stderr" => {
            (Stub::TagZero, &[I32], &[])
        }
        "[method]output-stream.check-write" => (Stub::Permit, &[I32, I32], &[]),
        "[method]output-stream.write" | "[method]output-stream.blocking-write-and-flush" => {
            (Stub::TagZero, &[I32, I32, I32, I32], &[])
        }
        "[method]output-stream.flush" | "[method]output-stream.blocking-flush" => {
            (Stub::TagZero, &[I32, I32], &[])
        }
        "[method]input-stream.read" | "[method]input-stream.blocking-read" => {
            (Stub::Closed, &[I32, I64, I32], &[])
        }
        "[method]output-stream.subscribe" | "[method]input-stream.subscribe" => {
            (Stub::Const(4), &[I32], &[I32])
        }
        "[method]pollable.ready" => (Stub::Const(1), &[I32], &[I32]),
        "[method]pollable.block" => (Stub::Nothing, &[I32], &[]),
        "exit" => (Stub::Trap, &[I32], &[]),
        f if f.starts_with("[resource-drop]") => (Stub::Nothing, &[I32], &[]),
        _ => return None,
    })
}

/// Largest write `check-write` permits at once (wasi-libc writes in chunks of it).
const PERMIT: i64 = 1 << 16;

/// The result of [`slim`].
pub struct Slimmed {
    /// The component to use: rewritten, or the input when `kept` says why not.
    pub component: Vec<u8>,
    /// The imports that became stubs, as `interface#function`.
    pub removed: Vec<String>,
    /// Why the component was left as it was, if it was.
    pub kept: Option<String>,
}

/// Slims `component` (see the crate documentation).
///
/// # Errors
///
/// When `component` is not a WebAssembly component, does not parse, or cannot be encoded
/// again. A component of another shape is not an error: it comes back unchanged, with
/// [`Slimmed::kept`] saying why.
pub fn slim(component: &[u8]) -> Result<Slimmed> {
    if !Parser::is_component(component) {
        bail!("not a WebAssembly component");
    }
    let keep = |reason: String| Slimmed {
        component: component.to_vec(),
        removed: Vec::new(),
        kept: Some(reason),
    };
    let program = match program_module(component)? {
        Ok(program) => program,
        Err(shape) => return Ok(keep(shape)),
    };
    let Functions { imports, defined } = functions(program)?;
    let mut stubs = HashMap::new();
    for (index, import) in imports.iter().enumerate() {
        let interface = unversioned(&import.module);
        if STDIO.contains(&interface) {
            let Some((stub, params, results)) = stub_for(&import.name) else {
                return Ok(keep(format!(
                    "it imports {interface}#{}, which reconciler-slim cannot answer",
                    import.name
                )));
            };
            if import.params != params || import.results != results {
                return Ok(keep(format!(
                    "{interface}#{} has an unexpected core signature",
                    import.name
                )));
            }
            stubs.insert(index, stub);
        } else if !compatible(interface, &import.name) {
            return Ok(keep(format!(
                "it imports {interface}#{}, which may share resources with stdio",
                import.name
            )));
        }
    }
    if stubs.is_empty() {
        return Ok(keep("it imports no WASI stdio".into()));
    }
    let removed = imports
        .iter()
        .enumerate()
        .filter(|(i, _)| stubs.contains_key(i))
        .map(|(_, i)| format!("{}#{}", unversioned(&i.module), i.name))
        .collect();

    let mut module = rewrite(program, &imports, defined, &stubs)?;
    let (resolve, world) =
        match wit_component::decode(component).context("reading the component's WIT world")? {
            wit_parser::decoding::DecodedWasm::Component(resolve, world) => (resolve, world),
            wit_parser::decoding::DecodedWasm::WitPackage(..) => {
                bail!("a WIT package, not a component")
            }
        };
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )?;
    let component = wit_component::ComponentEncoder::default()
        .module(&module)?
        .validate(true)
        .encode()
        .context("encoding the slimmed component")?;
    Ok(Slimmed {
        component,
        removed,
        kept: None,
    })
}

/// `wasi:io/streams@0.2.0` -> `wasi:io/streams`.
fn unversioned(module: &str) -> &str {
    module.split_once('@').map_or(module, |(name, _)| name)
}

/// The component's one program module: the core module with a memory. The others must be
/// wit-component's shim and fixup modules, which the encoder regenerates. `Ok(Err(shape))`
/// describes a component of another shape (composed, several programs), left alone.
fn program_module(component: &[u8]) -> Result<Result<&[u8], String>> {
    let mut modules = Vec::new();
    // parse_all descends into nested modules: `depth` 1 is the component itself.
    let mut depth = 0;
    for payload in Parser::new(0).parse_all(component) {
        match payload? {
            Payload::Version { .. } => depth += 1,
            Payload::End(_) => depth -= 1,
            Payload::ModuleSection {
                unchecked_range, ..
            } if depth == 1 => modules.push(&component[unchecked_range]),
            // wit-component nests type-only components (export shims); a nested module means
            // a composition, which this crate does not take apart.
            Payload::ModuleSection { .. } => {
                return Ok(Err(
                    "it is composed of components with core modules of their own".into(),
                ));
            }
            _ => {}
        }
    }
    let mut programs = modules.iter().filter(|m| defines_memory(m));
    Ok(match (programs.next(), programs.next(), modules.len()) {
        (Some(program), None, 1..=3) => Ok(program),
        _ => Err(format!(
            "it has {} core modules, not one program and wit-component's shims (what rustc links for wasm32-wasip2)",
            modules.len()
        )),
    })
}

fn defines_memory(module: &[u8]) -> bool {
    Parser::new(0)
        .parse_all(module)
        .any(|p| matches!(p, Ok(Payload::MemorySection(s)) if s.count() > 0))
}

/// One function import of the program module, with its lowered core signature.
struct FunctionImport {
    module: String,
    name: String,
    type_index: u32,
    params: Vec<ValType>,
    results: Vec<ValType>,
}

/// The program module's function imports and how many functions it defines.
struct Functions {
    imports: Vec<FunctionImport>,
    defined: u32,
}

fn functions(module: &[u8]) -> Result<Functions> {
    let mut types = Vec::new();
    let mut imports = Vec::new();
    let mut defined = 0;
    for payload in Parser::new(0).parse_all(module) {
        match payload? {
            Payload::TypeSection(section) => {
                let convert = |v: &[wasmparser::ValType]| {
                    v.iter()
                        .map(|t| ValType::try_from(*t))
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| anyhow::anyhow!("{e:?}"))
                };
                for ty in section.into_iter_err_on_gc_types() {
                    let ty = ty?;
                    types.push((convert(ty.params())?, convert(ty.results())?));
                }
            }
            Payload::ImportSection(section) => {
                for import in section.into_imports() {
                    let import = import?;
                    if let TypeRef::Func(type_index) = import.ty {
                        let (params, results) = types
                            .get(type_index as usize)
                            .cloned()
                            .context("an import names a type that does not exist")?;
                        imports.push(FunctionImport {
                            module: import.module.to_owned(),
                            name: import.name.to_owned(),
                            type_index,
                            params,
                            results,
                        });
                    }
                }
            }
            Payload::FunctionSection(section) => defined = section.count(),
            _ => {}
        }
    }
    Ok(Functions { imports, defined })
}

/// The program module with the imports in `stubs` replaced by functions appended after its
/// own, every function index renumbered, and the component metadata and DWARF dropped (the
/// metadata is embedded again from the component's world; code offsets have moved).
fn rewrite(
    module: &[u8],
    imports: &[FunctionImport],
    defined: u32,
    stubs: &HashMap<usize, Stub>,
) -> Result<Vec<u8>> {
    if defined == 0 {
        bail!("the program module defines no functions");
    }
    let kept = u32::try_from(imports.len() - stubs.len())?;
    let mut remap = Vec::with_capacity(imports.len());
    let (mut next_kept, mut next_stub) = (0, kept + defined);
    let mut appended = Vec::new();
    for (index, import) in imports.iter().enumerate() {
        match stubs.get(&index) {
            Some(stub) => {
                remap.push(next_stub);
                next_stub += 1;
                appended.push((import.type_index, *stub, import.params.len()));
            }
            None => {
                remap.push(next_kept);
                next_kept += 1;
            }
        }
    }
    let mut slimmer = Slimmer {
        remap,
        kept,
        removed: u32::try_from(stubs.len())?,
        appended,
        next_import: 0,
    };
    let mut out = wasm_encoder::Module::new();
    slimmer
        .parse_core_module(&mut out, Parser::new(0), module)
        .map_err(|e| anyhow::anyhow!("rewriting the program module: {e:?}"))?;
    Ok(out.finish())
}

struct Slimmer {
    /// New index of each imported function, by old index.
    remap: Vec<u32>,
    /// How many imported functions stay imports, and how many became stubs.
    kept: u32,
    removed: u32,
    /// Stubs to append: type index, behaviour, parameter count.
    appended: Vec<(u32, Stub, usize)>,
    next_import: usize,
}

impl Reencode for Slimmer {
    type Error = std::convert::Infallible;

    fn function_index(&mut self, func: u32) -> Result<u32, reencode::Error<Self::Error>> {
        Ok(match self.remap.get(func as usize) {
            Some(new) => *new,
            // A defined function moves down by the number of imports removed.
            None => func - self.removed,
        })
    }

    fn parse_import_section(
        &mut self,
        out: &mut ImportSection,
        section: wasmparser::ImportSectionReader<'_>,
    ) -> Result<(), reencode::Error<Self::Error>> {
        for import in section.into_imports() {
            let import = import?;
            if matches!(import.ty, TypeRef::Func(_)) {
                let index = self.next_import;
                self.next_import += 1;
                // Kept imports are renumbered below `kept`; stubs come after every function.
                if self.remap[index] >= self.kept {
                    continue;
                }
            }
            self.parse_import(out, import)?;
        }
        Ok(())
    }

    fn parse_function_section(
        &mut self,
        out: &mut FunctionSection,
        section: wasmparser::FunctionSectionReader<'_>,
    ) -> Result<(), reencode::Error<Self::Error>> {
        reencode::utils::parse_function_section(self, out, section)?;
        for (type_index, _, _) in &self.appended {
            out.function(*type_index);
        }
        Ok(())
    }

    fn parse_code_section(
        &mut self,
        out: &mut CodeSection,
        section: wasmparser::CodeSectionReader<'_>,
    ) -> Result<(), reencode::Error<Self::Error>> {
        reencode::utils::parse_code_section(self, out, section)?;
        for (_, stub, params) in &self.appended {
            out.function(&stub_body(*stub, *params));
        }
        Ok(())
    }

    fn parse_custom_section(
        &mut self,
        module: &mut wasm_encoder::Module,
        section: wasmparser::CustomSectionReader<'_>,
    ) -> Result<(), reencode::Error<Self::Error>> {
        let name = section.name();
        if name.starts_with("component-type") || name.starts_with(".debug_") {
            return Ok(());
        }
        reencode::utils::parse_custom_section(self, module, section)
    }
}

/// The body of a stub taking `params` parameters (the return pointer, if any, is the last).
fn stub_body(stub: Stub, params: usize) -> wasm_encoder::Function {
    let mut f = wasm_encoder::Function::new([]);
    let retptr = u32::try_from(params).unwrap_or(1).saturating_sub(1);
    let at = |offset: u64, align: u32| MemArg {
        offset,
        align,
        memory_index: 0,
    };
    match stub {
        Stub::Const(value) => {
            f.instruction(&Instruction::I32Const(value));
        }
        Stub::Nothing => {}
        Stub::TagZero => {
            f.instruction(&Instruction::LocalGet(retptr))
                .instruction(&Instruction::I32Const(0))
                .instruction(&Instruction::I32Store8(at(0, 0)));
        }
        Stub::Permit => {
            // result<u64, stream-error>: the tag at 0, the u64 at 8.
            f.instruction(&Instruction::LocalGet(retptr))
                .instruction(&Instruction::I32Const(0))
                .instruction(&Instruction::I32Store8(at(0, 0)))
                .instruction(&Instruction::LocalGet(retptr))
                .instruction(&Instruction::I64Const(PERMIT))
                .instruction(&Instruction::I64Store(at(8, 3)));
        }
        Stub::Closed => {
            // result<list<u8>, stream-error>: err (1) at 0; stream-error `closed` (1) at 4.
            f.instruction(&Instruction::LocalGet(retptr))
                .instruction(&Instruction::I32Const(1))
                .instruction(&Instruction::I32Store8(at(0, 0)))
                .instruction(&Instruction::LocalGet(retptr))
                .instruction(&Instruction::I32Const(1))
                .instruction(&Instruction::I32Store8(at(4, 0)));
        }
        Stub::Trap => {
            f.instruction(&Instruction::Unreachable);
        }
    }
    f.instruction(&Instruction::End);
    f
}
