//! reconciler-host: the generic half of a Kubernetes controller, native; the business half,
//! `reconcile(key)`, in sandboxed WebAssembly components.
//!
//! Newcomers start with [`controller`] (the control loop, read top to bottom like client-go's
//! sample-controller), then [`runtime`] (how a guest is compiled and called) and
//! [`capabilities`] (what a guest may call, one module per WIT interface, with the recipe for
//! adding one). The contract itself is `wit/reconciler.wit`; [`wit`] holds the generated
//! bindings.
//!
//! The data path, in module order:
//!
//! ```text
//! informers ──events──▶ controller (triggers, workers) ──keys──▶ queue
//!                             │ worker pops a key
//!                             ▼
//!                 guests (sources, hot reload) ─▶ runtime (wasmtime, deadline, memory cap)
//!                                                       │ imports
//!                                                       ▼
//!                 capabilities (validate · grant · budget) ─▶ providers (kube | offline)
//!                                                                 └─▶ backends (networks)
//! ```
//!
//! Every other module, the room it belongs to and which rooms may import which are listed once,
//! in `docs/architecture.md`.
//!
//! Dependencies point one way: the runtime links the capabilities, the capabilities call
//! provider traits, and no capability imports the runtime or a provider.

// `pub` only for what the binary, the tests and the benches use; `pub(crate)` otherwise.
#![warn(unreachable_pub)]

pub mod backends;
pub mod capabilities;
pub mod cli;
pub(crate) mod compile_cache;
pub mod config;
pub mod controller;
pub(crate) mod dir_watch;
pub(crate) mod discovery;
pub mod fence;
pub(crate) mod finalizer;
pub mod flowcontrol;
pub mod guest_set;
pub mod identity;
pub mod informers;
pub mod leader;
pub(crate) mod manager;
pub(crate) mod manifest;
pub mod metrics;
pub mod objects;
pub mod oci;
pub(crate) mod offline;
pub mod providers;
pub mod queue;
pub(crate) mod rbac;
pub(crate) mod reconcilers;
pub(crate) mod records;
pub(crate) mod retry_after;
pub mod runtime;
pub mod scaffold;
pub(crate) mod selector;
pub(crate) mod server;
pub mod shadow;
pub mod shards;
pub(crate) mod validation;
pub(crate) mod wit;
