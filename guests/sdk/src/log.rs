//! Logging into the host's log stream, labelled there with the guest, key and attempt.
//!
//! Prefer the macros ([`crate::info!`], [`crate::warn!`], ...), which format like `format!`.
//! Each line is one host call; the host decides which levels it keeps.

pub use crate::bindings::reconciler::api::log::Level;

use crate::host as wit;

/// Logs `message` at `level`.
pub fn log(level: Level, message: &str) {
    wit::log(level, message);
}

/// Installs, once per instance, a panic hook that logs the panic (message and location) at
/// error level. The SDK calls it on entry to every export.
pub(crate) fn report_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        std::panic::set_hook(Box::new(|info| log(Level::Error, &format!("guest {info}"))));
    });
}

#[doc(hidden)]
#[macro_export]
macro_rules! __log {
    ($level:ident, $($arg:tt)+) => {
        $crate::log::log($crate::log::Level::$level, &::std::format!($($arg)+))
    };
}

/// Logs at trace level: `trace!("looked at {}", name)`.
#[macro_export]
macro_rules! trace { ($($arg:tt)+) => { $crate::__log!(Trace, $($arg)+) }; }

/// Logs at debug level: `debug!("looked at {}", name)`.
#[macro_export]
macro_rules! debug { ($($arg:tt)+) => { $crate::__log!(Debug, $($arg)+) }; }

/// Logs at info level: `info!("created {}", name)`.
#[macro_export]
macro_rules! info { ($($arg:tt)+) => { $crate::__log!(Info, $($arg)+) }; }

/// Logs at warn level: `warn!("drift on {}", name)`.
#[macro_export]
macro_rules! warn { ($($arg:tt)+) => { $crate::__log!(Warn, $($arg)+) }; }

/// Logs at error level: `error!("gave up on {}", name)`.
#[macro_export]
macro_rules! error { ($($arg:tt)+) => { $crate::__log!(Error, $($arg)+) }; }
