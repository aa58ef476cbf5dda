//! `log`: guest log lines join the host's tracing stream, labelled with guest and key.

use serde_json::json;

use crate::runtime::HostState;
use crate::wit::reconciler::api::log::{self, Level};

impl log::Host for HostState {
    fn log(&mut self, level: Level, message: String) {
        let guest = self.call.guest.guest.as_str();
        let key = self.call.key.as_str();
        match level {
            Level::Trace => tracing::trace!(target: "guest", guest, key, "{message}"),
            Level::Debug => tracing::debug!(target: "guest", guest, key, "{message}"),
            Level::Info => tracing::info!(target: "guest", guest, key, "{message}"),
            Level::Warn => tracing::warn!(target: "guest", guest, key, "{message}"),
            Level::Error => {
                tracing::error!(target: "guest", guest, key, "{message}");
                self.last_error = Some(message.clone());
            }
        }
        let level_name = match level {
            Level::Trace => "trace",
            Level::Debug => "debug",
            Level::Info => "info",
            Level::Warn => "warn",
            Level::Error => "error",
        };
        self.call.finish(
            "log",
            "log",
            || json!({ "level": level_name, "message": message }),
            &Ok::<_, super::HostError>(()),
            super::as_json,
        );
    }
}
