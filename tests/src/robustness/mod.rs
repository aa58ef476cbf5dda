//! The robustness suite: real host replicas against a real control plane, a workload that keeps
//! changing objects, faults drawn from a seed, a recorded history and an offline checker
//! (`docs/reliability.md`; `./dev robustness`).
//!
//! - [`schedule`]: the faults, drawn from the seed alone, in two lanes that combine;
//! - [`relay`]: a TCP relay per replica, between it and kube-apiserver, that the harness can
//!   blackhole, delay or cut (a partition of one replica, the others unaffected);
//! - [`harness`]: one run: control plane with an audit log, replicas, workload, faults,
//!   convergence, history;
//! - [`history`]: what a run records and how it is read from the raw files;
//! - [`check`]: the offline checker over a history.

pub mod check;
pub mod harness;
pub mod history;
pub mod relay;
pub mod schedule;
