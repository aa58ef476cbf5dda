//! Kubernetes events about objects, for the humans running `kubectl describe`.
//!
//! The host aggregates repeats of the same (object, type, reason), so recording on every
//! reconcile costs little. [`normal`] and [`warning`] are best effort: a failure is logged
//! and does not fail the reconcile; use [`record`] to handle it yourself.

pub use crate::bindings::reconciler::api::cluster::{Event, EventType};

use crate::host as wit;
use crate::{HostError, ObjectRef};

/// Records a `Normal` event; `reason` is `UpperCamelCase`, e.g. `Synced`.
pub fn normal(regarding: &ObjectRef, reason: &str, message: impl Into<String>) {
    best_effort(regarding, EventType::Normal, reason, message.into());
}

/// Records a `Warning` event; `reason` is `UpperCamelCase`, e.g. `BackendFailed`.
pub fn warning(regarding: &ObjectRef, reason: &str, message: impl Into<String>) {
    best_effort(regarding, EventType::Warning, reason, message.into());
}

/// Records an event and reports whether the host accepted it.
///
/// # Errors
///
/// The host's error, e.g. `denied` when the guest may not read `regarding`.
pub fn record(
    regarding: &ObjectRef,
    event_type: EventType,
    reason: &str,
    message: impl Into<String>,
) -> Result<(), HostError> {
    wit::record_event(&Event {
        regarding: regarding.clone(),
        event_type,
        reason: reason.to_owned(),
        message: message.into(),
    })
}

fn best_effort(regarding: &ObjectRef, event_type: EventType, reason: &str, message: String) {
    if let Err(e) = record(regarding, event_type, reason, message) {
        crate::warn!(
            "could not record event {reason} on {regarding}: {}",
            e.describe()
        );
    }
}
