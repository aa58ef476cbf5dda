//! Loading one guest version, once per content hash: compile it (or map it from the compile
//! cache), check that it targets the contract's world, and ask for its manifest in a throwaway
//! instance. What comes out, a [`LoadedGuest`], is what every reconcile of that version
//! instantiates.

use std::collections::BTreeSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};
use wasmtime::component::{
    Component, ComponentExportIndex, Instance, InstancePre, Linker, TypedFunc, types::ComponentItem,
};
use wasmtime::{Engine, Store};

use super::store::{HostState, describe_failure, new_store};
use crate::sandbox::capabilities::CallContext;
use crate::sandbox::compile_cache::CompileCache;
use crate::sandbox::manifest::Manifest;
use crate::sandbox::wit::indexing::indexes;
use crate::sandbox::wit::watching::watches;
use crate::sandbox::wit::{NetworkController, NetworkControllerPre, guest};

const RECONCILER_EXPORT: &str = "reconciler:api/reconciler@0.1.0";
/// The optional export of the `watching-controller` world.
const WATCHES_EXPORT: &str = "reconciler:api/watches@0.1.0";
/// The optional export of the `indexing-controller` world.
const INDEXES_EXPORT: &str = "reconciler:api/indexes@0.1.0";
/// Interfaces of the contract, as a component's imports name them.
const API_PACKAGE: &str = "reconciler:api/";
/// The import of the `http-controller` world, as [`LoadedGuest::imports`] lists it.
const HTTP_IMPORT: &str = "wasi:http/outgoing-handler";
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
    pub(crate) fn is_transient(&self) -> bool {
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
    /// Where the optional `watches` export's functions are, when the guest has it.
    watches: Option<watches::GuestIndices>,
    /// Where the optional `indexes` export's functions are, when the guest has it.
    indexes: Option<indexes::GuestIndices>,
    /// SHA-256 of the component bytes, hex.
    pub hash: String,
    pub manifest: Manifest,
    /// The contract's interfaces the component imports (`lister`, `network-backend`, ...), and
    /// `wasi:http/outgoing-handler` when it imports that.
    pub(crate) imports: BTreeSet<String>,
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
pub(super) type ReconcileFunc<'a> = TypedFunc<
    (&'a guest::Request,),
    (Result<guest::Action, crate::sandbox::wit::types::ReconcileError>,),
>;

impl LoadedGuest {
    /// The world the guest was built for, from what it imports and exports: `controller`, or
    /// the worlds that add to it, joined by `+` (`http-controller+watching-controller`).
    pub fn world(&self) -> String {
        let worlds: Vec<&str> = [
            (
                self.imports.contains("network-backend"),
                "network-controller",
            ),
            (self.imports.contains(HTTP_IMPORT), "http-controller"),
            (
                self.watches.is_some() && self.indexes.is_none(),
                "watching-controller",
            ),
            (self.indexes.is_some(), "indexing-controller"),
        ]
        .into_iter()
        .filter_map(|(has, world)| has.then_some(world))
        .collect();
        if worlds.is_empty() {
            "controller".to_owned()
        } else {
            worlds.join("+")
        }
    }

    /// The guest's `watches` export in `instance`, when it has one.
    pub(super) fn watches_export(
        &self,
        instance: &Instance,
        store: &mut Store<HostState>,
    ) -> Option<wasmtime::Result<watches::Guest>> {
        let indices = self.watches.as_ref()?;
        Some(indices.load(store, instance))
    }

    /// The guest's `indexes` export in `instance`, when it has one.
    pub(super) fn indexes_export(
        &self,
        instance: &Instance,
        store: &mut Store<HostState>,
    ) -> Option<wasmtime::Result<indexes::Guest>> {
        let indices = self.indexes.as_ref()?;
        Some(indices.load(store, instance))
    }

    /// Every import resolved against the host's linker: instantiating it links nothing.
    pub(super) fn instance_pre(&self) -> &InstancePre<HostState> {
        self.pre.instance_pre()
    }

    /// The `reconcile` function of a fresh instance of this guest, without the per-instance
    /// type check of the bindings' `instantiate` (a measurable share of a reconcile; see
    /// docs/performance.md): the check was made once, at load.
    pub(super) fn reconcile_func<'a>(
        &self,
        instance: &Instance,
        store: &mut Store<HostState>,
    ) -> wasmtime::Result<ReconcileFunc<'a>> {
        let func = instance
            .get_func(&mut *store, self.reconcile)
            .ok_or_else(|| wasmtime::format_err!("the instance has no `reconcile` export"))?;
        // SAFETY: `new_unchecked` needs the function's type to be `ReconcileFunc`'s.
        // A `LoadedGuest` is made only by `Checked::describe`, after its `manifest` call
        // instantiated `pre` through the bindings, which type-check this very export against
        // this signature, and every instance of a component has its component's export types.
        Ok(unsafe { ReconcileFunc::new_unchecked(func) })
    }
}

/// Compiles components, through the on-disk compile cache when there is one. Entries are
/// keyed by the content hash and the engine's compatibility hash, so an artefact is never
/// loaded into an engine that did not make it.
pub(super) struct Compiler {
    engine: Engine,
    cache: Option<CompileCache>,
    engine_hash: String,
}

impl Compiler {
    pub(super) fn new(engine: Engine, cache_dir: Option<&Path>) -> Self {
        let mut hasher = DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        let engine_hash = format!("{:016x}", hasher.finish());
        // A cache directory the host cannot trust costs compiles, never the host.
        let cache = cache_dir.and_then(|dir| {
            CompileCache::open(dir)
                .inspect_err(|e| tracing::error!("{e}; compiling guests in memory, uncached"))
                .ok()
        });
        Self {
            engine,
            cache,
            engine_hash,
        }
    }

    /// The component of `bytes` (whose content hash is `hash`), mapped from the cache or
    /// compiled and written to it.
    pub(super) fn compile(
        &self,
        bytes: &[u8],
        hash: &str,
        name: &str,
    ) -> Result<Component, LoadError> {
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
}

/// What a guest says of itself at load: `manifest()`, `watches()` and `indexes()`.
type Described = (
    guest::ControllerManifest,
    Vec<watches::Watch>,
    Vec<indexes::ComputedIndex>,
);

/// A component that exports the contract's `reconcile` and whose imports the host's linker
/// resolves: what is left to learn is its manifest.
pub(super) struct Checked {
    name: String,
    pre: NetworkControllerPre<HostState>,
    reconcile: ComponentExportIndex,
    watches: Option<watches::GuestIndices>,
    indexes: Option<indexes::GuestIndices>,
    imports: BTreeSet<String>,
}

/// Checks the component's world: it exports the contract's interface with a `reconcile`
/// function, and imports only what the linker provides. Resolves every import once, here.
pub(super) fn check_world(
    engine: &Engine,
    linker: &Linker<HostState>,
    component: &Component,
    name: &str,
) -> Result<Checked, LoadError> {
    let wrong_world = |reason: String| LoadError::WrongWorld {
        file: name.to_owned(),
        reason,
    };
    let imports = component
        .component_type()
        .imports(engine)
        .filter_map(|(import, _)| {
            if import.starts_with(HTTP_IMPORT) {
                return Some(HTTP_IMPORT.to_owned());
            }
            let interface = import.strip_prefix(API_PACKAGE)?;
            Some(interface.split('@').next().unwrap_or(interface).to_owned())
        })
        .collect();
    let Some((ComponentItem::ComponentInstance(_), interface)) =
        component.get_export(None, RECONCILER_EXPORT)
    else {
        return Err(wrong_world(format!(
            "it does not export {RECONCILER_EXPORT}"
        )));
    };
    let reconcile = component
        .get_export_index(Some(&interface), "reconcile")
        .ok_or_else(|| {
            wrong_world(format!(
                "its {RECONCILER_EXPORT} export has no `reconcile` function"
            ))
        })?;
    let instance_pre = linker
        .instantiate_pre(component)
        .map_err(|e| wrong_world(format!("{e:#}")))?;
    // The optional export: its functions' types are checked when `watches()` is called.
    let watches = match component.get_export(None, WATCHES_EXPORT) {
        Some(_) => Some(
            watches::GuestIndices::new(&instance_pre)
                .map_err(|e| wrong_world(format!("its {WATCHES_EXPORT} export: {e:#}")))?,
        ),
        None => None,
    };
    let indexes = match component.get_export(None, INDEXES_EXPORT) {
        Some(_) => Some(
            indexes::GuestIndices::new(&instance_pre)
                .map_err(|e| wrong_world(format!("its {INDEXES_EXPORT} export: {e:#}")))?,
        ),
        None => None,
    };
    let pre = NetworkControllerPre::new(instance_pre).map_err(|e| wrong_world(format!("{e:#}")))?;
    Ok(Checked {
        name: name.to_owned(),
        pre,
        reconcile,
        watches,
        indexes,
        imports,
    })
}

impl Checked {
    /// Asks the guest for its manifest and, if that is valid, makes it a [`LoadedGuest`]: the
    /// only way to one, which `LoadedGuest::reconcile_func` relies on. `slots` is the pool's
    /// size, for the error when every slot is busy.
    pub(super) async fn describe(
        self,
        engine: &Engine,
        slots: u32,
        hash: String,
        file: &Path,
    ) -> Result<LoadedGuest, LoadError> {
        let (manifest, watches, indexes) = self.manifest(engine, slots).await?;
        let manifest = Manifest::from_wit(manifest, watches, indexes).map_err(|invalid| {
            LoadError::InvalidManifest {
                file: self.name.clone(),
                reason: invalid.to_string(),
            }
        })?;
        Ok(self.described(manifest, hash, file))
    }

    /// The loaded guest with a manifest already known for its content.
    pub(super) fn described(self, manifest: Manifest, hash: String, file: &Path) -> LoadedGuest {
        LoadedGuest {
            pre: self.pre,
            reconcile: self.reconcile,
            watches: self.watches,
            indexes: self.indexes,
            hash,
            manifest,
            imports: self.imports,
            file: file.to_owned(),
        }
    }

    /// Instantiates the guest once and calls `manifest()`, then `watches()` and `indexes()`
    /// when it exports them, all under the manifest deadline, in a store whose host calls are
    /// all denied.
    async fn manifest(&self, engine: &Engine, slots: u32) -> Result<Described, LoadError> {
        let call = CallContext::loading(&self.name, MANIFEST_DEADLINE);
        let deadline = call.deadline;
        let mut store = new_store(engine, call, crate::config::DEFAULT_MEMORY_MIB << 20);
        let result = tokio::time::timeout_at(deadline.into(), async {
            // The bindings' instantiation type-checks the exports: a guest built against
            // another revision of the contract fails here, before any of its code runs.
            // Reconciles rely on this check (see `LoadedGuest::reconcile_func`).
            let instance = self
                .pre
                .instance_pre()
                .instantiate_async(&mut store)
                .await
                .map_err(|e| (true, e))?;
            let bindings = NetworkController::new(&mut store, &instance).map_err(|e| (true, e))?;
            let manifest = bindings
                .reconciler_api_reconciler()
                .call_manifest(&mut store)
                .await
                .map_err(|e| (false, e))?;
            let mut watches = Vec::new();
            if let Some(indices) = &self.watches {
                let exported = indices.load(&mut store, &instance).map_err(|e| (true, e))?;
                watches = exported
                    .call_watches(&mut store)
                    .await
                    .map_err(|e| (false, e))?;
            }
            let mut indexes = Vec::new();
            if let Some(indices) = &self.indexes {
                let exported = indices.load(&mut store, &instance).map_err(|e| (true, e))?;
                indexes = exported
                    .call_indexes(&mut store)
                    .await
                    .map_err(|e| (false, e))?;
            }
            Ok((manifest, watches, indexes))
        })
        .await;
        let file = self.name.clone();
        match result {
            Ok(Ok(manifest)) => Ok(manifest),
            Ok(Err((_, e))) if e.is::<wasmtime::PoolConcurrencyLimitError>() => {
                Err(LoadError::Busy { file, slots })
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
