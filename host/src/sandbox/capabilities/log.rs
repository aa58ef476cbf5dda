//! `log`: guest log lines join the host's tracing stream, labelled with guest and key. Lines
//! are escaped (one guest line is one host line), cut to a bounded size, and rate-limited per
//! guest; dropped lines are counted.

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::capability::{Capability, LoadCheck};
use super::context::{CallContext, as_json};
use super::error::HostError;
use crate::cluster::validation;
use crate::sandbox::wit::reconciler::api::log::{self as wit, Level};

/// The name of the span a reconcile runs in, which names its guest and key.
pub(crate) const RECONCILE_SPAN: &str = "reconcile";

pub(super) const CAPABILITY: Capability = Capability {
    interface: "log",
    requirement: |_: &LoadCheck<'_>| Vec::new(),
};

pub(super) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<CallContext>>(linker, get)
}

fn level_name(level: Level) -> &'static str {
    match level {
        Level::Trace => "trace",
        Level::Debug => "debug",
        Level::Info => "info",
        Level::Warn => "warn",
        Level::Error => "error",
    }
}

impl CallContext {
    /// Emits one guest line, escaped and cut, unless the guest is over its log rate: a flood
    /// is dropped before any work is spent on it (but an error line is kept for a trap's
    /// message).
    fn log_line(&mut self, level: Level, message: &str) -> Result<(), HostError> {
        if level == Level::Error {
            self.last_error = Some(validation::message(message));
        }
        if self.guest.budget.logs.check().is_err() {
            self.logs_dropped += 1;
            if self.logs_dropped == 1 {
                tracing::warn!(target: "guest", guest = %self.guest.name, key = %self.key,
                    "guest logs faster than its log rate; dropping lines for now");
            }
            return Err(HostError::Limited("log rate exceeded; line dropped".into()));
        }
        let message = validation::message(message);
        let (guest, key) = (self.guest.name.as_str(), self.key.as_str());
        // Inside a reconcile the host's `reconcile` span already names guest and key, so the
        // line carries only its message (else each line named them twice); a line from
        // elsewhere (a watch's map function) names them itself.
        let in_reconcile = tracing::Span::current()
            .metadata()
            .is_some_and(|m| m.name() == RECONCILE_SPAN);
        macro_rules! line {
            ($level:ident) => {
                if in_reconcile {
                    tracing::$level!(target: "guest", "{message}")
                } else {
                    tracing::$level!(target: "guest", guest, key, "{message}")
                }
            };
        }
        match level {
            Level::Trace => line!(trace),
            Level::Debug => line!(debug),
            Level::Info => line!(info),
            Level::Warn => line!(warn),
            Level::Error => line!(error),
        }
        Ok(())
    }
}

impl wit::Host for CallContext {
    async fn log(&mut self, level: Level, message: String) {
        let args =
            || json!({ "level": level_name(level), "message": validation::message(&message) });
        // Not `recorded`: a replay matches the line with the record and still logs it (the
        // last error-level line goes into a trap's message).
        let _ = self.replayed("log", "log", args);
        let result = self.log_line(level, &message);
        self.finish("log", "log", args, &result, as_json);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::context::Scope;
    use crate::sandbox::capabilities::testing::Harness;
    use wit::Host as _;

    #[tokio::test]
    async fn lines_are_escaped_bounded_and_rate_limited() {
        let h = Harness::new();
        let mut call = h.call(
            "{limits: {logLinesPerSecond: 1, logBurst: 3}}",
            Scope::default(),
        );
        call.log(Level::Error, "boom\nINFO forged".into()).await;
        assert_eq!(call.last_error.as_deref(), Some("boom\\nINFO forged"));
        call.log(Level::Info, "x".repeat(100_000)).await;
        for _ in 0..5 {
            call.log(Level::Info, "flood".into()).await;
        }
        assert_eq!(call.logs_dropped, 4, "burst of 3, the rest dropped");
        let calls = call.calls.as_ref().unwrap();
        let long = calls[1].args["message"].as_str().unwrap();
        assert!(long.len() < validation::MAX_MESSAGE_BYTES + 64);
        assert_eq!(
            calls[6].returned["error"]["unavailable"],
            "log rate exceeded; line dropped"
        );
    }

    #[tokio::test]
    async fn a_line_separator_or_bidi_override_cannot_split_or_disguise_a_line() {
        let h = Harness::new();
        let mut call = h.call("{}", Scope::default());
        let forged = "ok\u{2028}INFO host: guest admin loaded\u{2029}\u{85}\u{202E}dekcatta";
        call.log(Level::Error, forged.into()).await;
        let kept = call.last_error.as_deref().unwrap();
        assert_eq!(
            kept,
            "ok\\u{2028}INFO host: guest admin loaded\\u{2029}\\u{85}\\u{202e}dekcatta"
        );
        let recorded = call.calls.as_ref().unwrap()[0].args["message"]
            .as_str()
            .unwrap();
        assert_eq!(recorded, kept, "the recording holds the escaped line too");
    }
}
