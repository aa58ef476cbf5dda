//! Each guest's own identity: the ServiceAccount its grant names (`serviceAccount:`), which the
//! API server enforces every grant against a second time.
//!
//! - Writes ([`client_as`]): every API write the guest causes (status patches, applies,
//!   deletes, events, the host's finalizer add and remove for it) is sent impersonating the
//!   account on the host's shared connection pool, so the API server authorizes each against
//!   the account's RBAC; a `403` reaches the guest as `denied`, naming the account.
//! - Reads ([`review_reads`]): informers stay shared under the host's identity; the account's
//!   RBAC bounds them through `SubjectAccessReview`s at load, on a grant change and
//!   periodically, and a read the account lost unloads the guest.
//!
//! `reconciler-host rbac` generates the account, its bindings and the host's impersonation
//! rules (`crate::cli::rbac`). Files: `impersonate.rs` (the client), `review.rs` (the reviews).

mod impersonate;
mod review;

pub(crate) use impersonate::client_as;
pub use review::{
    AccessReview, ApiServerReview, READ_VERBS, Review, ReviewError, ReviewOutcome, review_reads,
};
