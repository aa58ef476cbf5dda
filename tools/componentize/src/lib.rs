//! The three component-model steps a C or Go guest's build needs, from the same crates
//! `wit-bindgen-cli` and `wasm-tools` are made of, run as `reconciler-host componentize`
//! (guests/lib.sh's C and Go recipes call it, in the repository and in a scaffolded project):
//!
//! ```text
//! reconciler-host componentize bindings --lang c|go --wit DIR --world NAME --out DIR
//!     # = wit-bindgen c|go: the guest's bindings (C: also the component-type object file)
//! reconciler-host componentize component CORE.wasm --out OUT.wasm [--wit DIR --world NAME]
//!     # = wasm-tools component embed (with --wit) + component new --adapt <reactor adapter>
//! reconciler-host componentize preinit CORE.wasm --out OUT.wasm
//!     # a Go guest's core module with its init already run (Wizer), data segments compacted
//! ```
//!
//! A library the host's command line takes [`Command`] from, not a binary of its own, so that a
//! guest author needs `reconciler-host` alone. The adapter is the WASI preview1 *reactor* adapter
//! of the host's wasmtime release (a guest is a library the host calls, not a command with
//! `_start`).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::{Subcommand, ValueEnum};
use wit_component::{ComponentEncoder, StringEncoding};
use wit_parser::Resolve;

mod preinit;

/// A step, with its arguments as the command line gives them.
#[derive(Subcommand)]
pub enum Command {
    /// Writes the bindings of one world for a language into a directory.
    Bindings {
        #[arg(long, value_enum)]
        lang: Lang,
        /// The WIT package directory (`wit/`).
        #[arg(long)]
        wit: PathBuf,
        #[arg(long)]
        world: String,
        #[arg(long)]
        out: PathBuf,
        /// Go only: organise the bindings as a library under this import path
        /// (`<path>/imports/...`, `<path>/exports/...`).
        #[arg(long)]
        go_package: Option<String>,
    },
    /// Wraps a wasip1 core module into a component with the WASI reactor adapter.
    Component {
        core: PathBuf,
        #[arg(long)]
        out: PathBuf,
        /// Embed this WIT package's world first (for a module built without the type section).
        #[arg(long, requires = "world")]
        wit: Option<PathBuf>,
        #[arg(long, requires = "wit")]
        world: Option<String>,
    },
    /// Pre-initialises a Go guest's wasip1 core module (before `component`): runs its init
    /// under Wizer and writes the snapshot, its data in a few segments. The module must export
    /// `reconciler_prime` (the Go SDK's, with `-tags reconciler_preinit`).
    Preinit {
        core: PathBuf,
        #[arg(long)]
        out: PathBuf,
    },
}

/// The language of the bindings.
#[derive(Clone, Copy, ValueEnum)]
pub enum Lang {
    C,
    Go,
}

/// Runs one step. Not on an async runtime: `preinit` starts one of its own for Wizer.
pub fn run(command: Command) -> Result<()> {
    match command {
        Command::Bindings {
            lang,
            wit,
            world,
            out,
            go_package,
        } => bindings(lang, &wit, &world, &out, go_package),
        Command::Component {
            core,
            out,
            wit,
            world,
        } => component(&core, &out, wit.as_deref().zip(world.as_deref())),
        Command::Preinit { core, out } => {
            let module =
                std::fs::read(&core).with_context(|| format!("cannot read {}", core.display()))?;
            if is_component(&module) {
                bail!(
                    "{} is a component: preinit takes the core module, before `component`",
                    core.display()
                );
            }
            let snapshot = preinit::preinit(&module)
                .with_context(|| format!("{}: cannot pre-initialise it", core.display()))?;
            std::fs::write(&out, snapshot)
                .with_context(|| format!("cannot write {}", out.display()))
        }
    }
}

fn load_world(wit: &Path, world: &str) -> Result<(Resolve, wit_parser::WorldId)> {
    let mut resolve = Resolve::default();
    let (package, _) = resolve
        .push_path(wit)
        .with_context(|| format!("cannot read the WIT package in {}", wit.display()))?;
    let id = resolve
        .select_world(&[package], Some(world))
        .with_context(|| format!("no world `{world}` in {}", wit.display()))?;
    Ok((resolve, id))
}

fn bindings(
    lang: Lang,
    wit: &Path,
    world: &str,
    out: &Path,
    go_package: Option<String>,
) -> Result<()> {
    let (mut resolve, id) = load_world(wit, world)?;
    let mut generator = match lang {
        Lang::C => wit_bindgen_c::Opts::default().build(),
        Lang::Go => wit_bindgen_go::Opts {
            pkg_name: go_package,
            ..Default::default()
        }
        .build(),
    };
    let mut files = wit_bindgen_core::Files::default();
    generator
        .generate(&mut resolve, id, &mut files)
        .context("generating the bindings")?;
    for (name, contents) in files.iter() {
        let path = out.join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, contents)
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn component(core: &Path, out: &Path, embed: Option<(&Path, &str)>) -> Result<()> {
    let mut module =
        std::fs::read(core).with_context(|| format!("cannot read {}", core.display()))?;
    if is_component(&module) {
        bail!("{} is already a component", core.display());
    }
    if let Some((wit, world)) = embed {
        let (resolve, id) = load_world(wit, world)?;
        wit_component::embed_component_metadata(&mut module, &resolve, id, StringEncoding::UTF8)
            .context("embedding the world")?;
    }
    let component = ComponentEncoder::default()
        .validate(true)
        .module(&module)
        .with_context(|| {
            format!(
                "{}: not a core module with a component type",
                core.display()
            )
        })?
        .adapter(
            "wasi_snapshot_preview1",
            wasi_preview1_component_adapter_provider::WASI_SNAPSHOT_PREVIEW1_REACTOR_ADAPTER,
        )
        .context("loading the WASI reactor adapter")?
        .encode()
        .with_context(|| format!("{}: cannot make a component of it", core.display()))?;
    std::fs::write(out, component).with_context(|| format!("cannot write {}", out.display()))
}

/// A component's header has layer 1 (bytes 6..8 of the preamble); a core module's has 0.
fn is_component(bytes: &[u8]) -> bool {
    bytes.len() >= 8 && bytes[..4] == *b"\0asm" && bytes[6..8] == [1, 0]
}
