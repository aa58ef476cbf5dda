//! The guest directory: every `*.wasm` in it is a guest. Files are loaded at start, then the
//! directory is watched: a new file is loaded, a changed file is compiled, validated and swapped
//! in (reconciles already running finish on the old version, which they hold), a removed file
//! is unloaded. A file that fails to load is refused with its reason, and if an earlier version
//! of it was good, that version stays active.
//!
//! The host configuration can change under a running directory ([`GuestDirectory::reconfigure`]):
//! every file is judged again against the new grants. A guest whose grant changed (its mode
//! included) is loaded again with it; one whose grant was withdrawn is unloaded, since a
//! revoked grant must take effect.
//!
//! A grant belongs to the file a guest is loaded from, never to the name it declares
//! ([`source`]): `guests.network` is the grant of `network.wasm`, and a file that declares
//! `network` under any other name is refused, so no file takes another guest's grant or pushes
//! the rightful one out. A grant keyed `<manifest name>@<file stem>` (e.g. `network@network-v2`
//! for `network-v2.wasm`) is that file's and names the guest it loads: that is how a second
//! version of a guest runs beside the first (typically in shadow mode) before it is promoted.
//!
//! Watching is by rescan: any change in the directory (inotify via `notify`) schedules a short
//! debounced rescan that compares content hashes. That one mechanism covers plain copies,
//! editors that write a temp file and rename it, and Kubernetes ConfigMap volumes, which swap a
//! `..data` symlink so every file changes at once.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::broadcast;

use crate::capabilities::LoadCheck;
use crate::config::{Grant, HostConfig};
use crate::metrics::Metrics;
use crate::runtime::{LoadError, LoadedGuest, Runtime, content_hash};
use crate::shadow::Shadows;

mod source;
pub use source::{GrantKey, GuestSource, NotItsGrant};

/// Quiet time after the last file event before rescanning.
const DEBOUNCE: Duration = Duration::from_millis(150);
/// Rescan even without events, in case a notification was missed (e.g. on network filesystems).
const SAFETY_RESCAN: Duration = Duration::from_secs(30);
/// Rescan this soon when a load failed for a reason that may pass (no free instance slot).
const TRANSIENT_RETRY: Duration = Duration::from_secs(1);

/// A guest that passed every check, with what it was granted. Its manifest name is the name
/// it runs under: its grant key (`name`, or `name@file-stem` for a second version).
#[derive(Debug)]
pub struct ActiveGuest {
    pub loaded: LoadedGuest,
    pub grant: Grant,
}

impl ActiveGuest {
    pub fn name(&self) -> &str {
        &self.loaded.manifest.name
    }
}

/// What changed in the set of active guests.
#[derive(Debug, Clone)]
pub enum GuestEvent {
    /// A guest became active, or a new version of it replaced the old one.
    Loaded(Arc<ActiveGuest>),
    /// The guest's file was removed (the name is the manifest name).
    Unloaded(String),
}

/// Status of one file, as logs, metrics and `/guests` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStatus {
    pub file: PathBuf,
    /// SHA-256 of the file's current content.
    pub hash: String,
    pub state: FileState,
    /// The guest name of the active version from this file, if any.
    pub guest: Option<String>,
    /// The content hash of the version that is active (differs from `hash` after a refusal).
    pub active_hash: Option<String>,
    /// For an unloaded guest that declared a finalizer: what is left of it on objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned_finalizer: Option<OrphanedFinalizer>,
    /// The active version's mode (`active` or `shadow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::shadow::Mode>,
    /// The guest's verdicts in shadow mode, if it ever ran in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shadow: Option<crate::shadow::ShadowReport>,
}

/// A finalizer whose guest was unloaded: objects may still carry it (see `crate::finalizer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanedFinalizer {
    pub finalizer: String,
    /// The guest's primary kind, which carries the finalizer.
    pub kind: crate::objects::Gvk,
    pub policy: crate::finalizer::OnUnload,
    /// When the guest was unloaded (RFC 3339).
    pub unloaded_at: String,
    /// Objects carrying it, as cached when the guest was unloaded.
    pub objects: Option<usize>,
    /// Objects the host released it from (policy `release`, after the grace period).
    pub released: Option<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum FileState {
    /// The file is gone; its guest left a finalizer behind (`orphanedFinalizer`).
    Unloaded,
    Loaded,
    Failed(String),
}

#[derive(Debug, thiserror::Error)]
pub enum RefusalError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    NotItsGrant(#[from] NotItsGrant),
    #[error(
        "{file}: guest `{guest}` has no grant: add guests.{guest} to the host configuration with what it needs (read: {needs})"
    )]
    NoGrant {
        file: String,
        guest: String,
        needs: String,
    },
    #[error("{file}: guest `{guest}` asks for more than its grant: {missing}")]
    BeyondGrant {
        file: String,
        guest: String,
        missing: String,
    },
    #[error(
        "{file}: guest name `{guest}` is already used by {other}; each guest needs a unique manifest name"
    )]
    DuplicateName {
        file: String,
        guest: String,
        other: String,
    },
}

/// Checks a loaded guest against its grant and the host's caps; lists everything missing at
/// once. Each capability states its own requirement (`capabilities::CAPABILITIES`).
pub fn check_grant(loaded: &LoadedGuest, grant: &Grant, config: &HostConfig) -> Result<(), String> {
    let manifest = &loaded.manifest;
    let mut missing = Vec::new();
    let cap = config.max_concurrency();
    if manifest.concurrency > cap {
        missing.push(format!(
            "concurrency {} (the host allows at most {cap} per guest: maxConcurrency)",
            manifest.concurrency
        ));
    }
    if let Err(more) = crate::capabilities::check_grant(&LoadCheck {
        manifest,
        imports: &loaded.imports,
        grant,
        config,
    }) {
        missing.push(more);
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

/// The grant of `file`'s source for the guest loaded from it, checked against what its
/// manifest asks. The guest is renamed to its grant key (`<name>@<file stem>` for a file not
/// named after it).
fn grant_for(
    file: &Path,
    loaded: &mut LoadedGuest,
    config: &HostConfig,
) -> Result<Grant, RefusalError> {
    let key = GuestSource::file(file).resolve(&loaded.manifest.name, config)?;
    loaded.manifest.name = key.to_string();
    let manifest = &loaded.manifest;
    let name = file.display().to_string();
    let Some(grant) = config.grant(&manifest.name) else {
        let mut needs = vec![manifest.primary.to_string()];
        needs.extend(manifest.secondary.iter().map(|s| s.kind.to_string()));
        return Err(RefusalError::NoGrant {
            file: name,
            guest: manifest.name.clone(),
            needs: needs.join(", "),
        });
    };
    check_grant(loaded, &grant, config).map_err(|missing| RefusalError::BeyondGrant {
        file: name,
        guest: manifest.name.clone(),
        missing,
    })?;
    Ok(grant)
}

#[derive(Default)]
struct State {
    files: BTreeMap<PathBuf, FileEntry>,
    /// Unloaded guests that declared a finalizer, by guest name, with their file.
    orphans: BTreeMap<String, (PathBuf, OrphanedFinalizer)>,
}

struct FileEntry {
    hash: String,
    state: FileState,
    active: Option<Arc<ActiveGuest>>,
}

/// The set of guests loaded from one directory.
pub struct GuestDirectory {
    dir: PathBuf,
    runtime: Arc<Runtime>,
    config: parking_lot::RwLock<Arc<HostConfig>>,
    metrics: Option<Metrics>,
    shadows: Arc<Shadows>,
    state: Mutex<State>,
    events: broadcast::Sender<GuestEvent>,
    /// A load failed for a transient reason: rescan soon rather than on the next event.
    retry_soon: std::sync::atomic::AtomicBool,
}

impl GuestDirectory {
    pub fn new(
        dir: PathBuf,
        runtime: Arc<Runtime>,
        config: Arc<HostConfig>,
        metrics: Option<Metrics>,
    ) -> Arc<Self> {
        let (events, _) = broadcast::channel(256);
        let shadows = Arc::new(Shadows::new(metrics.clone()));
        Arc::new(Self {
            dir,
            runtime,
            config: parking_lot::RwLock::new(config),
            metrics,
            shadows,
            state: Mutex::new(State::default()),
            events,
            retry_soon: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The host configuration the directory checks guests against (the latest one applied).
    pub fn config(&self) -> Arc<HostConfig> {
        self.config.read().clone()
    }

    /// Where controllers record their shadow-mode verdicts, and `/guests` reads them.
    pub fn shadows(&self) -> Arc<Shadows> {
        self.shadows.clone()
    }

    /// Applies a new host configuration: every guest file is judged again against it (see the
    /// module docs). Backends cannot change while the host runs: such a configuration is
    /// refused whole and the current one stays.
    pub fn reconfigure(&self, config: HostConfig) -> Result<(), String> {
        if config.backends != self.config().backends {
            return Err(
                "backends: differ from the running configuration; backends change only with a restart, so nothing of the new configuration was applied".into(),
            );
        }
        *self.config.write() = Arc::new(config);
        let files: Vec<(PathBuf, Option<Arc<ActiveGuest>>)> = self
            .state
            .lock()
            .files
            .iter()
            .map(|(file, entry)| (file.clone(), entry.active.clone()))
            .collect();
        for (file, active) in files {
            match active {
                // The running version is judged again, whatever the file holds now (a newer
                // content that was refused stays refused).
                Some(active) => self.regrant(&file, &active),
                // A file refused so far (e.g. for want of a grant) may pass now.
                None => match std::fs::read(&file) {
                    Ok(bytes) => {
                        let hash = content_hash(&bytes);
                        self.load(&file, &bytes, hash);
                    }
                    Err(e) => {
                        tracing::debug!(file = %file.display(), "skipping unreadable file: {e}");
                    }
                },
            }
        }
        Ok(())
    }

    /// The active version of `file` under the current configuration: unchanged, reloaded with
    /// its new grant (or name), or unloaded when its grant was withdrawn or no longer covers it.
    fn regrant(&self, file: &Path, active: &Arc<ActiveGuest>) {
        let mut loaded = active.loaded.clone();
        // Judged again from the name it declared, not the key it ran under.
        GrantKey::parse(active.name())
            .declared()
            .clone_into(&mut loaded.manifest.name);
        let config = self.config();
        match grant_for(file, &mut loaded, &config) {
            Ok(grant) if grant == active.grant && loaded.manifest.name == active.name() => {}
            Ok(grant) => {
                let new = Arc::new(ActiveGuest { loaded, grant });
                if new.name() != active.name() {
                    let _ = self
                        .events
                        .send(GuestEvent::Unloaded(active.name().to_owned()));
                    self.set_loaded_metric(active, false);
                    self.set_loaded_metric(&new, true);
                }
                tracing::info!(file = %file.display(), guest = %new.name(), mode = ?new.grant.mode,
                    "guest reloaded with its new grant");
                if let Some(entry) = self.state.lock().files.get_mut(file) {
                    entry.active = Some(new.clone());
                }
                let _ = self.events.send(GuestEvent::Loaded(new));
            }
            Err(err) => {
                // A revoked grant must take effect: the guest stops now.
                let hash = self
                    .state
                    .lock()
                    .files
                    .get(file)
                    .map(|e| e.hash.clone())
                    .unwrap_or_default();
                self.unload(file);
                self.refuse(file, hash, None, &err);
            }
        }
    }

    /// Receives every later change; call before the first `rescan` to miss nothing.
    pub fn subscribe(&self) -> broadcast::Receiver<GuestEvent> {
        self.events.subscribe()
    }

    /// The guests active now.
    pub fn active(&self) -> Vec<Arc<ActiveGuest>> {
        self.state
            .lock()
            .files
            .values()
            .filter_map(|f| f.active.clone())
            .collect()
    }

    pub fn statuses(&self) -> Vec<FileStatus> {
        let state = self.state.lock();
        let files = state.files.iter().map(|(file, entry)| FileStatus {
            file: file.clone(),
            hash: entry.hash.clone(),
            state: entry.state.clone(),
            guest: entry.active.as_ref().map(|a| a.name().to_owned()),
            active_hash: entry.active.as_ref().map(|a| a.loaded.hash.clone()),
            orphaned_finalizer: None,
            mode: entry.active.as_ref().map(|a| a.grant.mode),
            shadow: entry
                .active
                .as_ref()
                .and_then(|a| self.shadows.report(a.name())),
        });
        let orphans = state
            .orphans
            .iter()
            .map(|(guest, (file, orphan))| FileStatus {
                file: file.clone(),
                hash: String::new(),
                state: FileState::Unloaded,
                guest: Some(guest.clone()),
                active_hash: None,
                orphaned_finalizer: Some(orphan.clone()),
                mode: None,
                shadow: None,
            });
        files.chain(orphans).collect()
    }

    /// The finalizer an unloaded guest left behind, if any.
    pub fn orphan(&self, guest: &str) -> Option<OrphanedFinalizer> {
        self.state.lock().orphans.get(guest).map(|(_, o)| o.clone())
    }

    /// Updates what is known of an unloaded guest's finalizer.
    pub fn update_orphan(&self, guest: &str, update: impl FnOnce(&mut OrphanedFinalizer)) {
        if let Some((_, orphan)) = self.state.lock().orphans.get_mut(guest) {
            update(orphan);
        }
    }

    /// Brings the loaded set in line with the directory. Compiling happens on this thread; call
    /// it from a blocking context.
    pub fn rescan(&self) {
        let present = match self.wasm_files() {
            Ok(files) => files,
            Err(e) => {
                tracing::error!(dir = %self.dir.display(), "cannot read the guest directory: {e}");
                return;
            }
        };
        let known: Vec<PathBuf> = self.state.lock().files.keys().cloned().collect();
        for file in known.iter().filter(|f| !present.contains(f)) {
            self.unload(file);
        }
        for file in &present {
            let bytes = match std::fs::read(file) {
                Ok(bytes) => bytes,
                // Vanished between listing and reading: the next event rescans.
                Err(e) => {
                    tracing::debug!(file = %file.display(), "skipping unreadable file: {e}");
                    continue;
                }
            };
            let hash = content_hash(&bytes);
            let unchanged = self
                .state
                .lock()
                .files
                .get(file)
                .is_some_and(|e| e.hash == hash);
            if !unchanged {
                self.load(file, &bytes, hash);
            }
        }
    }

    fn wasm_files(&self) -> std::io::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // Dot-files are editor temporaries and ConfigMap internals (`..data/`).
            // Exactly `.wasm`, the name every guest build writes; `x.WASM` is not a guest.
            #[allow(clippy::case_sensitive_file_extension_comparisons)]
            if name.starts_with('.') || !name.ends_with(".wasm") {
                continue;
            }
            // `is_file` follows symlinks, as ConfigMap volumes need.
            if path.is_file() {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }

    fn load(&self, file: &Path, bytes: &[u8], hash: String) {
        let result = self.validate(file, bytes);
        let mut state = self.state.lock();
        let previous = state.files.get(file).and_then(|e| e.active.clone());
        match result {
            Err(RefusalError::Load(e)) if e.is_transient() => {
                drop(state);
                // Not recorded as this content's verdict: the next rescan loads it again.
                tracing::warn!(file = %file.display(), "{e}");
                self.retry_soon
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
            Ok(active) => {
                let active = Arc::new(active);
                let name = active.name().to_owned();
                // A running name encodes its file's stem (`source`), so two files of one
                // directory never meet here; kept for sources to come (`Reconciler` objects).
                if let Some(other) = state.files.iter().find(|(f, e)| {
                    f.as_path() != file && e.active.as_ref().is_some_and(|a| a.name() == name)
                }) {
                    let err = RefusalError::DuplicateName {
                        file: file.display().to_string(),
                        guest: name,
                        other: other.0.display().to_string(),
                    };
                    drop(state);
                    return self.refuse(file, hash, previous, &err);
                }
                if let Some(old) = &previous
                    && old.name() != name
                {
                    let _ = self
                        .events
                        .send(GuestEvent::Unloaded(old.name().to_owned()));
                    self.set_loaded_metric(old, false);
                }
                tracing::info!(
                    file = %file.display(), guest = %name, hash = %active.loaded.hash,
                    replaced = previous.is_some(), "guest loaded"
                );
                // Back before its finalizer was released: it handles its objects again.
                state.orphans.remove(&name);
                self.set_loaded_metric(&active, true);
                state.files.insert(
                    file.to_owned(),
                    FileEntry {
                        hash,
                        state: FileState::Loaded,
                        active: Some(active.clone()),
                    },
                );
                drop(state);
                let _ = self.events.send(GuestEvent::Loaded(active));
            }
            Err(err) => {
                drop(state);
                self.refuse(file, hash, previous, &err);
            }
        }
    }

    fn refuse(
        &self,
        file: &Path,
        hash: String,
        previous: Option<Arc<ActiveGuest>>,
        err: &RefusalError,
    ) {
        if let Some(old) = &previous {
            tracing::error!(
                file = %file.display(), keeping = %old.loaded.hash,
                "guest refused, keeping the last good version: {err}"
            );
        } else {
            tracing::error!(file = %file.display(), "guest refused: {err}");
        }
        if let Some(metrics) = &self.metrics {
            metrics.guest_load_failed(&file.display().to_string());
            if let RefusalError::Load(LoadError::ManifestDeadline { .. }) = err {
                metrics.deadline_hit(&file.display().to_string());
            }
        }
        self.state.lock().files.insert(
            file.to_owned(),
            FileEntry {
                hash,
                state: FileState::Failed(err.to_string()),
                active: previous,
            },
        );
    }

    fn unload(&self, file: &Path) {
        let Some(entry) = self.state.lock().files.remove(file) else {
            return;
        };
        if let Some(active) = entry.active {
            tracing::info!(file = %file.display(), guest = %active.name(), "guest unloaded");
            let manifest = &active.loaded.manifest;
            // A guest in shadow mode never wrote its finalizer: nothing of it is left behind.
            let wrote = active.grant.mode == crate::shadow::Mode::Active;
            if let (Some(finalizer), true) = (&manifest.finalizer, wrote) {
                let orphan = OrphanedFinalizer {
                    finalizer: finalizer.clone(),
                    kind: manifest.primary.clone(),
                    policy: self.config().finalizer_policy.on_unload,
                    unloaded_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                        .to_string(),
                    objects: None,
                    released: None,
                };
                self.state
                    .lock()
                    .orphans
                    .insert(active.name().to_owned(), (file.to_owned(), orphan));
            }
            self.set_loaded_metric(&active, false);
            let _ = self
                .events
                .send(GuestEvent::Unloaded(active.name().to_owned()));
        }
    }

    fn set_loaded_metric(&self, guest: &ActiveGuest, loaded: bool) {
        if let Some(metrics) = &self.metrics {
            metrics.guest_loaded(guest.name(), &guest.loaded.hash, loaded);
        }
    }

    fn validate(&self, file: &Path, bytes: &[u8]) -> Result<ActiveGuest, RefusalError> {
        let mut loaded = self.runtime.load(bytes, file)?;
        let grant = grant_for(file, &mut loaded, &self.config())?;
        Ok(ActiveGuest { loaded, grant })
    }

    /// Loads everything now, then keeps watching until the returned task is dropped/aborted.
    pub async fn watch(self: Arc<Self>) -> anyhow::Result<()> {
        use notify::Watcher;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let _ = tx.send(event.map(|_| ()));
            })?;
        watcher.watch(&self.dir, notify::RecursiveMode::NonRecursive)?;
        let this = self.clone();
        tokio::task::spawn_blocking(move || this.rescan()).await?;
        loop {
            let wait = if self
                .retry_soon
                .swap(false, std::sync::atomic::Ordering::Relaxed)
            {
                TRANSIENT_RETRY
            } else {
                SAFETY_RESCAN
            };
            let event = tokio::time::timeout(wait, rx.recv()).await;
            match event {
                Ok(None) => anyhow::bail!("the guest directory watcher stopped"),
                Ok(Some(Err(e))) => tracing::warn!(dir = %self.dir.display(), "watch error: {e}"),
                Ok(Some(Ok(()))) | Err(_) => {}
            }
            // Debounce: a copy or a ConfigMap swap is several events in quick succession.
            while let Ok(Some(_)) = tokio::time::timeout(DEBOUNCE, rx.recv()).await {}
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.rescan()).await?;
        }
    }
}
