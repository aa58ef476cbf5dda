//! The shape of one registered capability: its interface and what it requires of a guest's
//! grant at load.

use std::collections::BTreeSet;

use crate::config::{Grant, HostConfig};
use crate::sandbox::manifest::Manifest;

/// What a guest being loaded imports and asks for, for the capabilities' load-time checks.
pub struct LoadCheck<'a> {
    pub(crate) manifest: &'a Manifest,
    /// The WIT interfaces (without version) the component imports, e.g. `network-backend`.
    pub(crate) imports: &'a BTreeSet<String>,
    pub(crate) grant: &'a Grant,
    pub(crate) config: &'a HostConfig,
}

/// One registered capability: its WIT interface and its load-time requirement.
pub struct Capability {
    pub interface: &'static str,
    /// What the guest's grant lacks for what its manifest and imports ask; empty when nothing.
    pub(crate) requirement: fn(&LoadCheck<'_>) -> Vec<String>,
}
