//! The providers behind the capabilities, in one place and built by named constructors, so
//! `run`, the offline runner, tests and benches assemble a guest's providers the same way.
//! Providers only reach the outside world: every check on what a guest may ask happens in
//! [`crate::sandbox::capabilities`] before a provider is called.
//!
//! - [`kube`]: `run` — informer caches, the guest's work queue, the API server.
//! - [`http`]: outbound HTTP of guests in `run` (the network, credentials from the host's
//!   namespace).
//! - [`offline`]: the offline runner — objects from files, writes recorded and applied in
//!   memory, nothing sent.
//!
//! Network providers are the [`crate::sandbox::backends`] (Linux bridges, in memory).

pub mod http;
pub(crate) mod kube;
pub mod offline;
