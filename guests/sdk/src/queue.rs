//! The guest's own work queue: keys of its primary kind.

use std::time::Duration;

use crate::host as wit;
use crate::{HostError, ObjectKey};

/// Adds a key (now, or not before `after`); duplicate adds collapse, and the host never runs
/// two reconciles of one key at once.
///
/// # Errors
///
/// The host's error.
pub fn enqueue(key: &ObjectKey, after: Option<Duration>) -> Result<(), HostError> {
    wit::enqueue(
        key,
        after.map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
    )
}
