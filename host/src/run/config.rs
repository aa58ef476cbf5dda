//! Following the configuration file: every valid change is applied to the running guests
//! (grants, limits, modes; see [`GuestDirectory::reconfigure`]) without a restart.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::HostConfig;
use crate::guests::GuestDirectory;

/// How often the configuration file is read again even without a change notification.
const CONFIG_RESCAN: Duration = Duration::from_secs(30);

/// Applies every valid change of the configuration file to the guest directory (grants,
/// limits, modes; see [`GuestDirectory::reconfigure`]), without a restart. An invalid file is
/// refused with its error and the running configuration stays. The file's directory is
/// watched, so editors' renames and ConfigMap volumes' `..data` swaps are seen.
pub async fn follow_config(path: PathBuf, directory: Arc<GuestDirectory>) {
    use notify::Watcher;
    let digest = |bytes: &[u8]| crate::runtime::content_hash(bytes);
    let mut applied = std::fs::read(&path).map(|b| digest(&b)).unwrap_or_default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let _ = tx.send(event.is_ok());
    });
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    // Kept alive for the loop; without it, only the periodic rescan sees changes.
    let _watcher = match watcher.and_then(|mut w| {
        w.watch(parent, notify::RecursiveMode::NonRecursive)
            .map(|()| w)
    }) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(config = %path.display(), "cannot watch the configuration file, re-reading it every {CONFIG_RESCAN:?}: {e}");
            None
        }
    };
    loop {
        let _ = tokio::time::timeout(CONFIG_RESCAN, rx.recv()).await;
        // Debounce: a save is several events in quick succession.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(150), rx.recv()).await {}
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let hash = digest(&bytes);
        if hash == applied {
            continue;
        }
        applied = hash;
        let text = String::from_utf8_lossy(&bytes);
        let result = match HostConfig::parse(&text, &path) {
            // Judging the guests again compiles them (from the cache): off the async workers.
            Ok(config) => {
                let directory = directory.clone();
                tokio::task::spawn_blocking(move || directory.reconfigure(config))
                    .await
                    .unwrap_or_else(|e| Err(format!("reconfiguring panicked: {e}")))
            }
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(()) => tracing::info!(config = %path.display(), "configuration change applied"),
            Err(e) => tracing::error!(config = %path.display(),
                "configuration change refused, the running configuration stays: {e}"),
        }
    }
}
