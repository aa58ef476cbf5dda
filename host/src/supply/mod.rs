//! The supply wing: where guests come from and which version of each is active.
//!
//! - [`guest_set`]: the set of active guests, their grants, status and events, fed by sources;
//! - [`dir_watch`]: the guest directory (and the configuration file) followed on disk;
//! - [`reconcilers`]: guests declared as `Reconciler` objects, the second source;
//! - [`rollout`]: a new version's rollout beside the old one: shares of keys, gates, status;
//!
//! It hands the controllers an `ActiveGuest` (a loaded component with its grant) and builds on
//! the sandbox wing to load and compile it, and on `crate::oci` to pull it from a registry.

pub(crate) mod dir_watch;
pub mod guest_set;
pub(crate) mod reconcilers;
pub(crate) mod rollout;
