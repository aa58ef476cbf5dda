//! The guest directory, a [`GuestSource`]: every `*.wasm` in it is a guest, keyed by its file
//! stem. It is followed by [`DirWatch`]: a file renamed in or closed after writing is seen at
//! once, other changes after a short debounce; that covers copies, editors' renames and
//! ConfigMap volumes' `..data` swaps. A file read while it is still being written ([`cut_short`]
//! and changed in the last [`WRITING`]) is skipped until the next event, never refused; one cut
//! short for longer is judged, and refused as malformed.
//! Cost of a rescan: one `read_dir`, then every file read whole and hashed ([`Content`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::supply::dir_watch::{Content, DirWatch, cut_short};

use super::source::{Artefact, Changes, GuestSource, Origin, OriginKind, SourceError};

/// Rescan even without events, in case a notification was missed (e.g. on network filesystems).
const SAFETY_RESCAN: Duration = Duration::from_secs(30);

/// A file cut short and changed this recently is taken as still being written.
pub const WRITING: Duration = Duration::from_secs(10);

/// The guests in one directory (not below it).
pub struct Directory {
    dir: PathBuf,
}

impl Directory {
    pub fn new(dir: PathBuf) -> Self {
        Self { dir }
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
}

impl GuestSource for Directory {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        let files = self.wasm_files().map_err(|e| SourceError::Unreadable {
            what: format!("the guest directory {}", self.dir.display()),
            error: e.into(),
        })?;
        Ok(files.iter().map(|file| Origin::file(file)).collect())
    }

    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        // Listed names are UTF-8 `<stem>.wasm`: the stem gives the path back exactly.
        let file = self.dir.join(format!("{}.wasm", origin.stem()));
        let content = Content::read(&file).map_err(|e| SourceError::Unreadable {
            what: file.display().to_string(),
            error: e.into(),
        })?;
        if cut_short(&content.bytes) && changed_within(&file, WRITING) {
            return Err(SourceError::Unreadable {
                what: file.display().to_string(),
                error: format!(
                    "it is still being written ({} bytes so far, cut short); read again at the next change",
                    content.bytes.len()
                )
                .into(),
            });
        }
        Ok(Artefact {
            origin: origin.clone(),
            bytes: content.bytes,
            hash: content.hash,
            signed_by: None,
        })
    }

    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        let watch =
            DirWatch::new(&self.dir, SAFETY_RESCAN).map_err(|e| SourceError::Unwatchable {
                what: format!("the guest directory {}", self.dir.display()),
                error: e.into(),
            })?;
        Ok(Box::new(Watching(watch)))
    }

    fn holds(&self, origin: &Origin) -> bool {
        matches!(origin.kind(), OriginKind::File)
    }
}

/// Whether `file` (followed through symlinks) was modified less than `within` ago.
fn changed_within(file: &std::path::Path, within: Duration) -> bool {
    std::fs::metadata(file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|at| at.elapsed().ok())
        .is_none_or(|age| age < within)
}

/// The directory's changes, as its [`DirWatch`] sees them.
struct Watching(DirWatch);

#[async_trait::async_trait]
impl Changes for Watching {
    async fn next(&mut self) -> Result<(), SourceError> {
        self.0.changed().await.map_err(|_| SourceError::Stopped {
            what: "the guest directory watcher".into(),
        })
    }

    fn retry_in(&mut self, after: Duration) {
        self.0.retry_in(after);
    }
}
