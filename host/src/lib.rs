//! reconciler-host: the generic half of a Kubernetes controller, native; the business half,
//! `reconcile(key)`, in sandboxed WebAssembly components.
//!
//! Newcomers start with [`controller`] (the control loop, read top to bottom like client-go's
//! sample-controller), then [`sandbox::runtime`] (how a guest is compiled and called) and
//! [`sandbox::capabilities`] (what a guest may call, one module per WIT interface, with the
//! recipe for adding one). The contract itself is `wit/reconciler.wit`.
//!
//! The house is in wings, each a folder, in the order a key travels (top to bottom; a wing
//! imports only wings below it):
//!
//! ```text
//! cli         the edge: arguments, every command, the offline runner, `new`, `rbac`
//! manager     `run`: wires the host, follows guests and ownership, serves /metrics
//! controller  one per active guest: triggers → queue → workers → the reconcile step
//! supply      where guests come from: the guest set, the directory, Reconcilers
//! sandbox     runtime ─▶ capabilities (validate · grant · budget) ─▶ providers ─▶ backends
//! config      the host configuration and every grant
//! oci         guests as OCI artifacts: references, pull, signatures, the cache
//! replicas    leader election, the shard ring, the write fence
//! cluster     informers, flow control, kinds and names, discovery, finalizers
//! metrics     every metric family
//! ```
//!
//! Every room of every wing, and which may import which, is listed once in
//! `docs/architecture.md`; `host/tests/layering.rs` holds the code to it.

// `pub` only for what the binary, the tests and the benches use; `pub(crate)` otherwise.
#![warn(unreachable_pub)]

pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller;
pub(crate) mod manager;
pub mod metrics;
pub mod oci;
pub mod replicas;
pub mod sandbox;
pub mod supply;
