//! Following the files of one directory: the guest directory ([`crate::supply::guest_set`])
//! and the host configuration file both change under a running host and are followed this way.
//!
//! Watching is by rescan: an event in the directory (inotify via `notify`) schedules a rescan
//! ([`DirWatch::changed`]), and the caller compares content hashes ([`Content`], [`Followed`])
//! to tell a change from a mere event. An event that **completes** a change — a file closed
//! after writing, a name renamed into the directory, a removal — rescans at once; any other
//! (a file created, written, a directory made) waits for [`DEBOUNCE`] of quiet or a completing
//! event, whichever comes first, since a copy or a ConfigMap swap is several events in quick
//! succession. A file still being written may be read anyway (a writer that pauses); the guest
//! directory tells such a file by its content ([`cut_short`]) and waits for the next event
//! instead of refusing it. That one mechanism covers plain copies, editors that write a temp
//! file and rename it, and Kubernetes ConfigMap volumes, which swap a `..data` symlink by
//! rename so every file changes at once. The directory is
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

use crate::sandbox::runtime::content_hash;

/// Quiet time after the last event before a rescan, unless an event completes the change
/// first.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(150);

/// Whether an event completes a change: after it the files read whole (closed after writing,
/// renamed in, removed). Creating, writing and making directories do not.
fn completes(kind: notify::EventKind) -> bool {
    use notify::event::{AccessKind, AccessMode, EventKind, ModifyKind, RenameMode};
    matches!(
        kind,
        EventKind::Access(AccessKind::Close(AccessMode::Write))
            | EventKind::Modify(ModifyKind::Name(RenameMode::To | RenameMode::Both))
            | EventKind::Remove(_)
    )
}

/// Whether `bytes` are the beginning of a WebAssembly binary cut short: the header, or a
/// top-level section, runs past the end (an empty file counts: a copy starts that way). A file
/// being written looks like this; a malformed one does not. A cut that falls exactly between
/// two top-level sections looks whole: such a file is judged like any other, and the write's
/// completing event loads the whole one. Hand-written: wasmparser reports a cut only as an
/// error text.
#[must_use]
pub(crate) fn cut_short(bytes: &[u8]) -> bool {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 {
        return MAGIC.starts_with(&bytes[..bytes.len().min(MAGIC.len())]);
    }
    if &bytes[..4] != MAGIC {
        return false;
    }
    let mut at = 8;
    while at < bytes.len() {
        at += 1; // the section id
        // The section size: an unsigned LEB128 of at most 5 bytes.
        let mut size: u64 = 0;
        let mut shift = 0;
        loop {
            let Some(&byte) = bytes.get(at) else {
                return true;
            };
            at += 1;
            size |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 28 {
                return false;
            }
        }
        at = at.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
        if at > bytes.len() {
            return true;
        }
    }
    false
}

/// When to rescan a directory: after a change in it, or every `every` in any case.
pub(crate) struct DirWatch {
    dir: PathBuf,
    /// Each event: whether it completes a change ([`completes`]).
    events: mpsc::UnboundedReceiver<notify::Result<bool>>,
    /// Keeps the events flowing while the `DirWatch` lives; `None` when polling.
    _watcher: Option<notify::RecommendedWatcher>,
    /// Polling: the channel's sender, kept so that waiting times out rather than ends.
    _idle: Option<mpsc::UnboundedSender<notify::Result<bool>>>,
    every: Duration,
    retry: Option<Duration>,
}

/// The watcher's notification thread ended: only polling could see changes now.
#[derive(Debug, thiserror::Error)]
#[error("the watcher of {0} stopped")]
pub(crate) struct Stopped(String);

impl DirWatch {
    /// Watches the entries of `dir` (not below it), with a rescan at least every `every`.
    pub(crate) fn new(dir: &Path, every: Duration) -> notify::Result<Self> {
        let (tx, events) = mpsc::unbounded_channel();
        let mut watcher =
            notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
                let _ = tx.send(event.map(|e| completes(e.kind)));
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
    pub(crate) fn polling(dir: &Path, every: Duration) -> Self {
        let (tx, events) = mpsc::unbounded_channel::<notify::Result<bool>>();
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
    pub(crate) fn retry_in(&mut self, after: Duration) {
        self.retry = Some(after);
    }

    /// Returns when the directory is due for a rescan: at once after an event that completes
    /// a change; after [`DEBOUNCE`] of quiet (or a completing event) after any other; after
    /// the periodic (or retry) interval without one.
    pub(crate) async fn changed(&mut self) -> Result<(), Stopped> {
        let wait = self.retry.take().unwrap_or(self.every);
        match tokio::time::timeout(wait, self.events.recv()).await {
            Ok(None) => return Err(Stopped(self.dir.display().to_string())),
            Ok(Some(Ok(true))) => {
                self.drain();
                return Ok(());
            }
            Ok(Some(Err(e))) => tracing::warn!(dir = %self.dir.display(), "watch error: {e}"),
            Ok(Some(Ok(false))) => {}
            Err(_) => return Ok(()),
        }
        loop {
            match tokio::time::timeout(DEBOUNCE, self.events.recv()).await {
                Ok(Some(Ok(true))) => {
                    self.drain();
                    return Ok(());
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => return Ok(()),
            }
        }
    }

    /// Takes the events already queued: the rescan about to run sees what they report.
    fn drain(&mut self) {
        while self.events.try_recv().is_ok() {}
    }
}

/// A file read whole, with its content hash (SHA-256, as [`content_hash`]).
pub(crate) struct Content {
    pub bytes: Vec<u8>,
    pub hash: String,
}

impl Content {
    /// Reads `path`, following symlinks (as ConfigMap volumes need).
    pub(crate) fn read(path: &Path) -> io::Result<Self> {
        let bytes = std::fs::read(path)?;
        let hash = content_hash(&bytes);
        Ok(Self { bytes, hash })
    }
}

/// One file followed by content: [`Followed::changed`] hands its content out once per change.
pub(crate) struct Followed {
    path: PathBuf,
    seen: String,
}

impl Followed {
    /// Starts from the file's content now, which counts as seen (none if it is unreadable).
    pub(crate) fn new(path: PathBuf) -> Self {
        let seen = Content::read(&path).map(|c| c.hash).unwrap_or_default();
        Self { path, seen }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The directory to watch for it ([`DirWatch::new`]); `.` for a bare file name.
    pub(crate) fn dir(&self) -> &Path {
        self.path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."))
    }

    /// The file's content if it differs from the last seen (and is now seen); `None` when it
    /// is unchanged or unreadable (e.g. mid-rename: the next event looks again).
    pub(crate) fn changed(&mut self) -> Option<Vec<u8>> {
        let content = Content::read(&self.path).ok()?;
        if content.hash == self.seen {
            return None;
        }
        self.seen = content.hash;
        Some(content.bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component header and one custom section of `len` payload bytes.
    fn binary(len: u8) -> Vec<u8> {
        let mut bytes = b"\0asm\x0d\0\x01\0".to_vec();
        bytes.extend([0, len]);
        bytes.extend(std::iter::repeat_n(7, usize::from(len)));
        bytes
    }

    #[test]
    fn every_prefix_cut_inside_the_header_or_a_section_is_cut_short_and_the_whole_is_not() {
        let whole = binary(20);
        for end in (0..whole.len()).filter(|&end| end != 8) {
            assert!(cut_short(&whole[..end]), "a prefix of {end} bytes");
        }
        // Cut exactly between sections, a binary looks whole (see `cut_short`).
        assert!(!cut_short(&whole[..8]));
        assert!(!cut_short(&whole));
        // Two sections, cut inside the second's size.
        let mut two = binary(3);
        two.extend([0, 0x85]);
        assert!(cut_short(&two));
        two.extend([0x01]);
        assert!(cut_short(&two), "a size of 133 with no payload yet");
    }

    #[test]
    fn what_is_no_wasm_or_malformed_is_not_cut_short() {
        assert!(!cut_short(b"hello, not a component"));
        assert!(!cut_short(b"\0asx\x0d\0\x01\0"));
        // A size that never ends is malformed, not short.
        let mut endless = binary(1);
        endless.extend([0, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]);
        assert!(!cut_short(&endless));
    }

    #[test]
    fn closing_after_writing_renaming_in_and_removing_complete_a_change() {
        use notify::event::{
            AccessKind, AccessMode, CreateKind, DataChange, EventKind, ModifyKind, RemoveKind,
            RenameMode,
        };
        assert!(completes(EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(completes(EventKind::Modify(ModifyKind::Name(
            RenameMode::To
        ))));
        assert!(completes(EventKind::Modify(ModifyKind::Name(
            RenameMode::Both
        ))));
        assert!(completes(EventKind::Remove(RemoveKind::File)));
        assert!(!completes(EventKind::Create(CreateKind::File)));
        assert!(!completes(EventKind::Create(CreateKind::Folder)));
        assert!(!completes(EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(!completes(EventKind::Modify(ModifyKind::Name(
            RenameMode::From
        ))));
        assert!(!completes(EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
    }

    #[tokio::test]
    async fn a_file_renamed_in_wakes_the_watch() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let mut watch = DirWatch::new(dir.path(), Duration::from_hours(1)).expect("a watch");
        let tmp = dir.path().join(".g.wasm.tmp");
        std::fs::write(&tmp, binary(4)).expect("write");
        // Take the writing's events; then the rename alone must wake the watch.
        let _ = tokio::time::timeout(Duration::from_millis(500), watch.changed()).await;
        std::fs::rename(&tmp, dir.path().join("g.wasm")).expect("rename");
        let woke = tokio::time::timeout(Duration::from_secs(5), watch.changed()).await;
        assert!(woke.is_ok(), "the rename did not wake the watch");
    }
}
