//! The Rust SDK for reconciler-host guests.
//!
//! **A guest is one trait impl; start here.** Implement [`Guest`] (what you want watched, and
//! what one `reconcile(key)` does) and call [`export!`] once:
//!
//! ```ignore
//! use reconciler_guest::{Action, Guest, Manifest, ReconcileError, Request, gvk, info};
//!
//! struct Hello;
//!
//! impl Guest for Hello {
//!     fn manifest() -> Manifest {
//!         Manifest::new("hello", gvk!("example.com", "v1", "Hello")).concurrency(2)
//!     }
//!
//!     fn reconcile(req: Request) -> Result<Action, ReconcileError> {
//!         info!("reconciling {}", req.ref_.name);
//!         Ok(Action::await_change())
//!     }
//! }
//!
//! reconciler_guest::export!(Hello);
//! ```
//!
//! Build the crate as a `cdylib` for `wasm32-wasip2`; rustc links it straight into a component.
//!
//! **Watches beyond owner and label mappings** (a field index, labels naming an owner in another
//! namespace, a map function, a namespace or label selector per watched kind) are the contract's
//! optional `watches` export. A guest that wants them also implements [`Watches`] and calls
//! [`export_watching!`] instead of [`export!`]; its component then targets the world
//! `watching-controller`. A guest that calls [`export!`] does not export `watches` and loads as
//! before:
//!
//! ```ignore
//! use reconciler_guest::{IndexValue, Watch, Watches, gvk};
//!
//! impl Watches for Mirror {
//!     fn watches() -> Vec<Watch> {
//!         vec![
//!             // a ConfigMap change reconciles every Mirror whose spec.source names it
//!             Watch::new(gvk!("", "v1", "ConfigMap")).by_field("spec.source", IndexValue::Name),
//!             // copies in other namespaces name their Mirror in two labels
//!             Watch::new(gvk!("", "v1", "ConfigMap"))
//!                 .by_owner_labels("example.com/owner-namespace", "example.com/owner-name")
//!                 .selecting("example.com/owner-name"),
//!         ]
//!     }
//! }
//!
//! reconciler_guest::export_watching!(Mirror); // Mirror: Guest + Watches
//! ```
//! Then, optionally, `reconciler-slim guest.wasm guest.slim.wasm` (`tools/slim` in the host's
//! repository) for a cheaper instantiation; see below.
//!
//! Everything else is à la carte, one module per host interface of `wit/reconciler.wit` (the
//! contract; the types here are generated from it):
//!
//! | module | what it wraps |
//! |---|---|
//! | [`lister`] | cache reads, raw JSON or typed through serde |
//! | [`cluster`] | status merge patches, server-side apply, deletes |
//! | [`event`] | Kubernetes events (best effort) |
//! | [`queue`] | enqueueing other keys of the guest's own kind |
//! | [`log`] | logging into the host's stream ([`info!`] and friends) |
//! | [`network_backend`] | the Network sample's backend (only for `network-controller` guests) |
//! | [`http`] | outbound HTTP through `wasi:http`, within the grant's `http:` (`http-controller` guests) |
//! | [`conditions`] | `metav1.Condition` bookkeeping with stable `lastTransitionTime` |
//! | `testing` | natively only: a fake host for a guest's unit tests (`cargo test`), so `map`, `index` and `reconcile` run outside a component |
//!
//! Host calls fail with [`HostError`]; `?` turns one into a [`ReconcileError`] (see
//! [`error`] for which failures are retried). A guest that never calls an interface does not
//! import it: the component linker drops unused imports, so a `controller` guest built with
//! this SDK does not ask for `network-backend` even though the bindings cover it.
//!
//! Memory: the SDK installs a bump-arena global allocator ([`arena`]), because every reconcile
//! runs in a fresh instance whose memory the host discards; it made the benchmark guest's call
//! about 15 % faster. Disable the default `arena` feature to bring your own allocator.
//!
//! Panics: the SDK's panic hook logs the panic message at error level before the instance
//! traps, and the host puts the last error logged into the reconcile's error. (std's own hook
//! writes to stderr, which a slimmed guest does not have; see below.)
//!
//! Besides its own imports, a Rust `wasm32-wasip2` component imports a few WASI interfaces
//! through std (`wasi:cli/*`, `wasi:io/*`, and `wasi:clocks/*` once it reads the time); the
//! host provides them without granting any ambient capability. `reconciler-slim` (in
//! `tools/slim`, run by `guests/build.sh`) answers the stdio ones inside the component, which
//! makes each reconcile's instantiation cheaper; stdout and stderr then go nowhere.

pub mod arena;
pub mod cluster;
pub mod conditions;
pub mod error;
pub mod event;
pub mod http;
pub mod lister;
pub mod log;
mod manifest;
mod object;
pub mod queue;
#[cfg(not(target_arch = "wasm32"))]
pub mod testing;

/// The contract's imports as the SDK's modules call them. In a component they are the generated
/// bindings themselves (re-exported: the component is the code it was without this module);
/// natively, where wit-bindgen's imports have no host behind them, the [`testing::FakeHost`] a
/// test installed answers them. Inline rather than a file of its own because a component's
/// build needs it, and `reconciler-host new` copies a fixed list of this crate's files.
mod host {
    #[cfg(target_arch = "wasm32")]
    pub(crate) use crate::bindings::reconciler::api::{
        cluster::{apply, apply_with, delete, patch_status, record_event},
        lister::{get, list},
        log::log,
        queue::enqueue,
    };

    #[cfg(not(target_arch = "wasm32"))]
    pub(crate) use crate::testing::imports::{
        apply, apply_with, delete, enqueue, get, list, log, patch_status, record_event,
    };
}

/// Bindings generated from `wit/` for every world of the contract at once (`network-controller`
/// and `http-controller`, whose `wasi:http` imports [`http`] wraps). A component imports only
/// what its code calls, so a guest that never sends a request imports no `wasi:http`. Prefer
/// the re-exports at the crate root.
///
/// The optional export `watches` is not in this world: wit-bindgen's `export!` exports every
/// export of its world, so every guest would have to implement it. It has bindings of its own,
/// [`watching_bindings`].
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package reconciler:sdk;
            world guest {
                include reconciler:api/network-controller@0.1.0;
                include reconciler:api/http-controller@0.1.0;
            }
        ",
        world: "reconciler:sdk/guest",
        generate_all,
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::reconciler_guest::bindings",
        additional_derives: [PartialEq, Eq],
        // WASI types that hold resources (an I/O error, a stream error) cannot derive them.
        additional_derives_ignore: ["stream-error", "error-code", "header-error", "field-size-payload", "DNS-error-payload", "TLS-alert-received-payload"],
    });
}

/// Bindings of the optional export `watches` alone (a world of that one export), which
/// [`export_watching!`] exports beside [`bindings`]' `reconciler`. The contract's `types` are
/// [`bindings`]' own (`with`), so a [`Gvk`] or an [`ObjectKey`] is the same type in both.
///
/// Why two `generate!`s make one component: each export macro embeds its world in the module,
/// and the component is made from the union of the worlds embedded (`wit-component`), so a
/// guest that invokes both macros targets `controller` + `export watches` =
/// `watching-controller`, and one that invokes only [`export!`] never embeds this world.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod watching_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package reconciler:sdk-watching;
            world watching {
                export reconciler:api/watches@0.1.0;
            }
        ",
        world: "reconciler:sdk-watching/watching",
        with: {
            "reconciler:api/types@0.1.0": crate::bindings::reconciler::api::types,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::reconciler_guest::watching_bindings",
        additional_derives: [PartialEq, Eq],
    });
}

/// Bindings of the optional export `indexes` alone, which [`export_indexing!`] exports beside
/// [`bindings`]' `reconciler` (and, when asked, [`watching_bindings`]' `watches`), as
/// [`watching_bindings`] does for `watches`.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod indexing_bindings {
    wit_bindgen::generate!({
        path: "../../wit",
        inline: "
            package reconciler:sdk-indexing;
            world indexing {
                export reconciler:api/indexes@0.1.0;
            }
        ",
        world: "reconciler:sdk-indexing/indexing",
        with: {
            "reconciler:api/types@0.1.0": crate::bindings::reconciler::api::types,
        },
        pub_export_macro: true,
        export_macro_name: "export",
        default_bindings_module: "::reconciler_guest::indexing_bindings",
        additional_derives: [PartialEq, Eq],
    });
}

pub use bindings::exports::reconciler::api::reconciler::{
    ControllerManifest as Manifest, Mapping, Request, SecondaryWatch,
};
pub use bindings::reconciler::api::network_backend;
pub use bindings::reconciler::api::types::{
    Action, Error as HostError, Gvk, Json, ObjectKey, ObjectRef, ReconcileError,
};
pub use error::{permanent, transient};
pub use indexing_bindings::exports::reconciler::api::indexes::{ComputedIndex, Lookup};
pub use watching_bindings::exports::reconciler::api::watches::{
    FieldIndex, IndexValue, OwnerLabels, Watch, WatchMapping,
};

/// The crates whose types appear in this API, so a guest needs no version of its own.
pub use k8s_openapi;
pub use serde_json;

/// A reconciler: what it watches and what it does for one key.
///
/// The host calls [`Guest::manifest`] once when it loads the component and
/// [`Guest::reconcile`] for every key, each call in a fresh instance: keep no state between
/// calls; read it from the request, the lister or the backend instead.
pub trait Guest {
    /// What the guest watches and wants; the host configuration must grant it.
    fn manifest() -> Manifest;

    /// Drives the object named by `req.ref_` towards its spec.
    ///
    /// # Errors
    ///
    /// [`ReconcileError::Transient`] to be retried with backoff,
    /// [`ReconcileError::Permanent`] to wait for the next change of the object.
    fn reconcile(req: Request) -> Result<Action, ReconcileError>;
}

// The generated trait follows the WIT names; guests implement `Guest` above so their code does
// not change when the contract renames a function.
impl<T: Guest> bindings::exports::reconciler::api::reconciler::Guest for T {
    fn manifest() -> Manifest {
        log::report_panics();
        <T as Guest>::manifest()
    }

    fn reconcile(request: Request) -> Result<Action, ReconcileError> {
        log::report_panics();
        <T as Guest>::reconcile(request)
    }
}

/// Exports a [`Guest`] implementation as the component's `reconciler` interface.
///
/// Call it once, at the top level of the guest crate: `reconciler_guest::export!(MyGuest);`.
#[macro_export]
macro_rules! export {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
    };
}

/// A guest's watches beyond its manifest's `secondary` list: the contract's optional export
/// `watches`. Implement it beside [`Guest`] and export both with [`export_watching!`].
///
/// The host calls [`Watches::watches`] once at load, right after [`Guest::manifest`], with every
/// host call denied; each watched kind must be readable under the guest's grant. Its watches
/// join the manifest's `secondary` (at most 16 in all). A watch's events come from the lister's
/// cache of its kind, which the grant's `readSelectors` bound, not the watch's selector.
///
/// What each mapping costs the host: an owner, label or owner-labels watch only its cache of the
/// kind; a field index one index entry per value per primary, and no guest call; a function
/// watch one [`Watches::map`] call per event of its kind, each in a fresh instance.
pub trait Watches: Guest {
    /// The watches, built with [`Watch::new`].
    fn watches() -> Vec<Watch>;

    /// The primary keys an object of `kind` (one of the [`Watch::by_function`] watches)
    /// affects; `object` is its JSON. Called on every add, update (the new and then the old
    /// version) and delete of such an object, in a fresh instance under the guest's deadline
    /// and memory cap; reads through [`lister`] work, every write, enqueue and backend call is
    /// denied. The host takes at most 1,000 keys; a panic drops the event's keys (the next
    /// change or resync repairs them).
    ///
    /// The default maps nothing and logs an error: a guest that declares a function watch must
    /// implement it.
    #[must_use]
    fn map(kind: Gvk, object: Json) -> Vec<ObjectKey> {
        let _ = object;
        crate::error!(
            "map was called for {}/{} but the guest does not implement Watches::map; no keys",
            kind.api_version(),
            kind.kind
        );
        Vec::new()
    }
}

impl<T: Watches> watching_bindings::exports::reconciler::api::watches::Guest for T {
    fn watches() -> Vec<Watch> {
        log::report_panics();
        <T as Watches>::watches()
    }

    fn map(kind: Gvk, object: Json) -> Vec<ObjectKey> {
        log::report_panics();
        <T as Watches>::map(kind, object)
    }
}

/// Exports a guest that implements both [`Guest`] and [`Watches`]: the component's `reconciler`
/// and `watches` interfaces (the world `watching-controller`).
///
/// Call it once, at the top level of the guest crate, instead of [`export!`]:
/// `reconciler_guest::export_watching!(MyGuest);`.
#[macro_export]
macro_rules! export_watching {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
        $crate::watching_bindings::export!($ty with_types_in $crate::watching_bindings);
    };
}

/// A guest's computed indexes (controller-runtime's `IndexField` with an extractor): the
/// contract's optional export `indexes`. Implement it beside [`Guest`] and export both with
/// [`export_indexing!`].
///
/// Each [`ComputedIndex`] is a watch of its kind whose events are looked up among the values
/// [`Indexes::index`] computed from each primary object: a secondary event costs a lookup in
/// the host's memory, no guest call. The host calls [`Indexes::indexes`] once at load (every
/// host call denied) and [`Indexes::index`] when a primary is added or changes, and for every
/// primary when a new version of the guest loads. Indexes count among the 16 watches.
pub trait Indexes: Guest {
    /// The indexes, built with [`ComputedIndex::new`].
    fn indexes() -> Vec<ComputedIndex>;

    /// The values of index `name` for one primary object (`primary` is its JSON): for a
    /// [`Lookup::Name`] index, the names of the watched objects it depends on. Called in a
    /// fresh instance under the guest's deadline and memory cap, with every host call denied:
    /// compute from the object alone. The host keeps at most 100 values of at most 317 bytes;
    /// a panic leaves the primary out of the index until its next change.
    fn index(name: String, primary: Json) -> Vec<String>;
}

impl<T: Indexes> indexing_bindings::exports::reconciler::api::indexes::Guest for T {
    fn indexes() -> Vec<ComputedIndex> {
        log::report_panics();
        <T as Indexes>::indexes()
    }

    fn index(name: String, primary: Json) -> Vec<String> {
        log::report_panics();
        <T as Indexes>::index(name, primary)
    }
}

/// Exports a guest that implements [`Guest`] and [`Indexes`]: the component's `reconciler` and
/// `indexes` interfaces (the world `indexing-controller`, less `watches`), or with
/// `+ watches`, one that also implements [`Watches`].
///
/// Call it once, at the top level of the guest crate, instead of [`export!`]:
/// `reconciler_guest::export_indexing!(MyGuest);` or
/// `reconciler_guest::export_indexing!(MyGuest + watches);`.
#[macro_export]
macro_rules! export_indexing {
    ($ty:ident) => {
        $crate::bindings::export!($ty with_types_in $crate::bindings);
        $crate::indexing_bindings::export!($ty with_types_in $crate::indexing_bindings);
    };
    ($ty:ident + watches) => {
        $crate::export_watching!($ty);
        $crate::indexing_bindings::export!($ty with_types_in $crate::indexing_bindings);
    };
}

impl Action {
    /// Done; reconcile again only when the object (or a watched secondary) changes, or at the
    /// manifest's resync interval.
    #[must_use]
    pub fn await_change() -> Self {
        Action {
            requeue_after_ms: None,
        }
    }

    /// Done for now; reconcile this key again after `after`, e.g. to poll something external.
    #[must_use]
    pub fn requeue(after: std::time::Duration) -> Self {
        Action {
            requeue_after_ms: Some(u64::try_from(after.as_millis()).unwrap_or(u64::MAX)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn action_constructors_say_when_to_come_back() {
        assert_eq!(Action::await_change().requeue_after_ms, None);
        assert_eq!(
            Action::requeue(Duration::from_secs(3)).requeue_after_ms,
            Some(3000)
        );
        assert_eq!(
            Action::requeue(Duration::MAX).requeue_after_ms,
            Some(u64::MAX)
        );
    }
}
