//! reconciler-host: the generic half of a Kubernetes controller, native; the business half,
//! `reconcile(key)`, in sandboxed WebAssembly components.
//!
//! Newcomers start with [`controller`] (the control loop, read top to bottom like client-go's
//! sample-controller), then [`runtime`] (how a guest is compiled and called) and
//! [`capabilities`] (what a guest may call, one module per WIT interface). The data flow reads
//! in module order: [`informers`] → [`controller`] / [`queue`] → [`guests`] / [`runtime`] →
//! [`capabilities`] → [`cluster`] (API-server writes) and [`backends`] (actual state).
//! Around them: [`config`] (grants), [`metrics`], [`server`], [`leader`], [`host`] (`run`),
//! [`offline`] (the offline runner's providers) and [`cli`]. The contract itself is
//! `wit/reconciler.wit`; [`wit`] holds the generated bindings.

pub mod backends;
pub mod capabilities;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod controller;
pub mod guests;
pub mod host;
pub mod informers;
pub mod leader;
pub mod metrics;
pub mod objects;
pub mod offline;
pub mod queue;
pub mod runtime;
pub mod server;
pub mod wit;
