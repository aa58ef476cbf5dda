//! Following the configuration file: every valid change is applied to the running guests
//! (grants, limits, modes; see [`Guests::reconfigure`]) without a restart. An invalid file is
//! refused with its error and the running configuration stays. The file's directory is
//! watched ([`crate::supply::dir_watch`]), so editors' renames and ConfigMap volumes' `..data` swaps
//! are seen.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::HostConfig;
use crate::supply::dir_watch::{DirWatch, Followed};
use crate::supply::guest_set::Guests;

/// How often the configuration file is read again even without a change notification.
const CONFIG_RESCAN: Duration = Duration::from_secs(30);

pub(super) async fn follow_config(path: PathBuf, guests: Arc<Guests>) {
    let mut file = Followed::new(path);
    let mut watch = DirWatch::new(file.dir(), CONFIG_RESCAN).unwrap_or_else(|e| {
        tracing::warn!(config = %file.path().display(), "cannot watch the configuration file, re-reading it every {CONFIG_RESCAN:?}: {e}");
        DirWatch::polling(file.dir(), CONFIG_RESCAN)
    });
    while watch.changed().await.is_ok() {
        let Some(bytes) = file.changed() else {
            continue;
        };
        let path = file.path();
        let text = String::from_utf8_lossy(&bytes);
        let result = match HostConfig::parse(&text, path) {
            // Judging the guests again compiles them (from the cache): off the async workers.
            Ok(config) => {
                let guests = guests.clone();
                match tokio::task::spawn_blocking(move || guests.reconfigure(config)).await {
                    Ok(applied) => applied.map_err(anyhow::Error::from),
                    Err(e) => Err(anyhow::anyhow!("reconfiguring panicked: {e}")),
                }
            }
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(()) => tracing::info!(config = %path.display(), "configuration change applied"),
            Err(e) => tracing::error!(config = %path.display(),
                "configuration change refused, the running configuration stays: {e}"),
        }
    }
    tracing::error!(config = %file.path().display(), "the configuration file watcher stopped; changes are no longer applied");
}
