//! What one instance's exchanges leave behind for the reconcile that made them: the calls for
//! records and the offline runner, shadow mode's unsent requests, a replay's progress. Apart
//! from `mod.rs`, so that the call context that holds a session does not import the capability.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::super::budget::HostBytes;
use super::super::replay::{Call, RecordedCall};
use crate::sandbox::shadow::Difference;

/// How the interface and function of an exchange are named in records and the offline runner.
pub(crate) const INTERFACE: &str = "wasi:http/outgoing-handler";
pub(crate) const FUNCTION: &str = "handle";

/// What one instance's exchanges left behind, read when its reconcile ends.
#[derive(Debug, Default)]
pub(crate) struct Session {
    /// Every exchange, for the offline runner and records (only when the call records).
    pub(crate) calls: Vec<Call>,
    /// Shadow mode: the requests that were not sent.
    pub(crate) differences: Vec<Difference>,
    /// Replaying a record: the recorded exchanges not yet answered, in order.
    pub(crate) replay: Option<VecDeque<RecordedCall>>,
    /// Replaying: the first exchange that differed from its record.
    pub(crate) divergence: Option<String>,
    /// The guest's HTTP memory the recorded exchanges hold.
    pub(crate) held: Vec<HostBytes>,
}

/// The session, even after a panic elsewhere left its lock poisoned (it holds plain data).
pub(crate) fn lock(session: &Mutex<Session>) -> std::sync::MutexGuard<'_, Session> {
    session
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
