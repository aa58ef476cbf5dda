//! The host side of every imported WIT interface, one module each: [`lister`], [`cluster`],
//! [`queue`], [`log`], [`network`] ([`bodies`]: what a write may carry and hand back), and
//! [`http`], which serves the standard `wasi:http/outgoing-handler` through
//! wasmtime-wasi-http with the host's policy in its request hook. A
//! capability is one self-contained unit (Spin's factor shape): its provider trait, its input
//! validation, its grant check, its load-time requirement and its `Host` implementation, with
//! unit tests that call the `Host` functions with no wasm at all.
//!
//! Data path of one import call:
//!
//! ```text
//! guest ──call──▶ CallContext (per reconcile)
//!                   1. validate  every string the guest handed over   → `invalid`
//!                   2. grant     the guest's grant and scope           → `denied`
//!                   3. budget    per-guest rates and quotas            → `unavailable`
//!                   4. provider  informer caches / API server / backend (sandbox/providers/)
//!                   5. finish    metric per call, optional recording for the offline runner
//! ```
//!
//! Steps 1-3 live in this module, never in a provider, so `run` and the offline runner enforce
//! exactly the same rules: only the providers differ ([`crate::sandbox::providers`]). Step 5, with the
//! replay of a record, is one helper every call goes through (`CallContext::recorded`).
//!
//! The shared core is in files of its own: `context` (the per-guest and per-reconcile
//! contexts), `budget` (rates, host memory and CPU), `error` (`HostError`), `capability` (what
//! one registered capability is), `deny` (the providers of a guest being loaded). This file
//! keeps the recipe below, the registry ([`CAPABILITIES`]) and [`add_to_linker`].
//!
//! The `Host` traits are implemented on [`CallContext`], which knows nothing of wasmtime: the
//! runtime links the capabilities (through [`add_to_linker`]) and the capabilities never import
//! the runtime. Imports are `async` on the host side: a call waiting on the API server, a rate
//! limiter or a WASI clock yields, and the runtime's deadline (a timeout around the whole
//! guest call) cancels it wherever it waits.
//!
//! ## Adding a capability
//!
//! 1. Declare the interface in `wit/reconciler.wit` and import it in a world.
//! 2. Add one module here with: its validation and grant check, `impl <interface>::Host for
//!    CallContext`, a `requirement` function (what a guest importing it needs in its grant),
//!    its `add_to_linker`, and its unit tests. Its provider trait, if it reaches outside the
//!    host, goes in `seams.rs` (the module re-exports it), so that the contexts holding the
//!    providers never import the capability implemented on them.
//! 3. Register it in this file: its `mod` line, one line in [`add_to_linker`] and one entry
//!    in [`CAPABILITIES`] (which runs its load-time requirement).
//! 4. If it has a provider, add its field to [`Providers`] and build it in
//!    [`crate::sandbox::providers`] (`kube` for `run`, `offline` for the offline runner).
//! 5. Wrap it in the Rust SDK (`guests/sdk`).
//!
//! A capability without a provider (a toy `clock` returning the host's time, tried when this
//! recipe was written) touches three files: the WIT, its module, and this one.
//!
//! `http` is the exception to steps 2 and 3: `wasi:http` is a standard interface served by
//! wasmtime-wasi-http, linked by the runtime's store (`sandbox/runtime/store.rs`) with the
//! host's policy in its request hook; its provider trait is `http/outbound.rs`, what a call's
//! exchanges leave behind `http/session.rs`.

mod bodies;
mod budget;
mod capability;
pub(crate) mod cluster;
mod context;
mod deny;
mod error;
pub mod http;
pub(crate) mod lister;
pub(crate) mod log;
pub(crate) mod network;
#[cfg(test)]
mod properties;
pub(crate) mod queue;
pub(crate) mod replay;
mod seams;
#[cfg(test)]
pub(crate) mod testing;

use wasmtime::component::{HasSelf, Linker};

pub(crate) use bodies::reserved_key;
pub use budget::{Budget, HostBytes};
pub use capability::{Capability, LoadCheck};
pub use cluster::{Cluster, EventRecord};
pub(crate) use cluster::{EventType, SKIP_WRITE_GRANT_ENV, skip_write_grant};
pub use context::{CallContext, GuestContext, Providers};
pub(crate) use context::{Pinned, Scope};
pub use error::HostError;
pub(crate) use lister::Lister;
pub(crate) use log::RECONCILE_SPAN;
pub(crate) use network::NETWORK_BACKEND;
pub use queue::Enqueuer;
pub use replay::Call;

/// Every capability, in WIT order. The guest directory runs each one's requirement at load.
pub(crate) const CAPABILITIES: &[Capability] = &[
    lister::CAPABILITY,
    cluster::CAPABILITY,
    queue::CAPABILITY,
    log::CAPABILITY,
    network::CAPABILITY,
];

/// Checks a guest against its grant at load: everything every capability finds missing, at
/// once.
pub(crate) fn check_grant(check: &LoadCheck<'_>) -> Result<(), Missing> {
    let missing: Vec<String> = CAPABILITIES
        .iter()
        .flat_map(|c| (c.requirement)(check))
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Missing(missing))
    }
}

/// What a guest uses that its grant does not give: each item names the grant entry to add.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.join(", "))]
pub(crate) struct Missing(pub(crate) Vec<String>);

/// Links every capability into `linker`; `get` finds the call context in the store's data.
pub(crate) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    crate::sandbox::wit::reconciler::api::types::add_to_linker::<T, HasSelf<CallContext>>(
        linker, get,
    )?;
    lister::add_to_linker(linker, get)?;
    cluster::add_to_linker(linker, get)?;
    queue::add_to_linker(linker, get)?;
    log::add_to_linker(linker, get)?;
    network::add_to_linker(linker, get)?;
    Ok(())
}
