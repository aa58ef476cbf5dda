//! Following the files of one directory: the guest directory ([`crate::guests`])
//! and the host configuration file both change under a running host and are followed this way.
//!
//! Watching is by rescan: any event in the directory (inotify via `notify`) schedules one
//! debounced rescan ([`DirWatch::changed`]), and the caller compares content hashes
//! ([`Content`], [`Followed`]) to tell a change from a mere event. That one mechanism covers
//! plain copies, editors that write a temp file and rename it, and Kubernetes ConfigMap
//! volumes, which swap a `..data` symlink so every file changes at once. The directory is
//! watched, not the file: a rename replaces the file, and a watch on it would stay on the old
//! one. A periodic rescan catches what notifications miss (e.g. on network file systems).
//!
//! Cost: one non-recursive inotify watch and one `notify` thread per [`DirWatch`]; a wake-up
//! costs what the caller then reads and hashes (whole files: guests and configurations are
//! small).

use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::Watcher;
use tokio::sync::mpsc;

use crate::runtime::content_hash;

/// Quiet time after the last event before a rescan: a copy or a ConfigMap swap is several
/// events in quick succession.
pub const DEBOUNCE: Duration = Duration::from_millis(150);

/// When to rescan a directory: after a change in it, or every `every` in any case.
pub struct DirWatch {
    dir: PathBuf,
    events: mpsc::UnboundedReceiver<notify::Result<()>>,
    /// Keeps the events flowing while the `DirWatch` lives; `None` when polling.
    _watcher: Option<notify::RecommendedWatcher>,
    /// Polling: the channel's sender, kept so that waiting times out rather than ends.
    _idle: Option<mpsc::UnboundedSender<notify::Result<()>>>,
    every: Duration,
    retry: Option<Duration>,
}

/// The watcher's notification thread ended: only polling could see changes now.
#[derive(Debug, thiserror::Error)]
#[error("the watcher of {0} stopped")]
pub struct Stopped(String);

impl DirWatch {
    /// Watches the entries of `dir` (not below it), with a rescan at least every `every`.
    pub fn new(dir: &Path, every: Duration) -> notify::Result<Self> {
        let (tx, events) = mpsc::unbounded_channel();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let _ = tx.send(event.map(|_| ()));
            })?;
        watcher.watch(dir, notify::RecursiveMode::NonRecursive)?;
        Ok(Self {
            dir: dir.to_owned(),
            events,
            _watcher: Some(watcher),
            _idle: None,
            every,
            retry: None,
        })
    }

    /// Without notifications (where [`DirWatch::new`] failed): a rescan every `every` only.
    pub fn polling(dir: &Path, every: Duration) -> Self {
        let (tx, events) = mpsc::unbounded_channel();
        Self {
            dir: dir.to_owned(),
            events,
            _watcher: None,
            _idle: Some(tx),
            every,
            retry: None,
        }
    }

    /// The next wait ends after `after` at most, not `every`: something failed for a reason
    /// that may pass, and waiting for the next change or the periodic rescan is too long.
    pub fn retry_in(&mut self, after: Duration) {
        self.retry = Some(after);
    }

    /// Returns when the directory is due for a rescan: an event and then [`DEBOUNCE`] of
    /// quiet, or the periodic (or retry) interval without one.
    pub async fn changed(&mut self) -> Result<(), Stopped> {
        let wait = self.retry.take().unwrap_or(self.every);
        match tokio::time::timeout(wait, self.events.recv()).await {
            Ok(None) => return Err(Stopped(self.dir.display().to_string())),
            Ok(Some(Err(e))) => tracing::warn!(dir = %self.dir.display(), "watch error: {e}"),
            Ok(Some(Ok(()))) | Err(_) => {}
        }
        while let Ok(Some(_)) = tokio::time::timeout(DEBOUNCE, self.events.recv()).await {}
        Ok(())
    }
}

/// A file read whole, with its content hash (SHA-256, as [`content_hash`]).
pub struct Content {
    pub bytes: Vec<u8>,
    pub hash: String,
}

impl Content {
    /// Reads `path`, following symlinks (as ConfigMap volumes need).
    pub fn read(path: &Path) -> io::Result<Self> {
        let bytes = std::fs::read(path)?;
        let hash = content_hash(&bytes);
        Ok(Self { bytes, hash })
    }
}

/// One file followed by content: [`Followed::changed`] hands its content out once per change.
pub struct Followed {
    path: PathBuf,
    seen: String,
}

impl Followed {
    /// Starts from the file's content now, which counts as seen (none if it is unreadable).
    pub fn new(path: PathBuf) -> Self {
        let seen = Content::read(&path).map(|c| c.hash).unwrap_or_default();
        Self { path, seen }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The directory to watch for it ([`DirWatch::new`]); `.` for a bare file name.
    pub fn dir(&self) -> &Path {
        self.path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The file's content if it differs from the last seen (and is now seen); `None` when it
    /// is unchanged or unreadable (e.g. mid-rename: the next event looks again).
    pub fn changed(&mut self) -> Option<Vec<u8>> {
        let content = Content::read(&self.path).ok()?;
        if content.hash == self.seen {
            return None;
        }
        self.seen = content.hash;
        Some(content.bytes)
    }
}
