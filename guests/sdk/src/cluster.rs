//! Writes to the API server, with the guest's name as field manager.
//!
//! Each call is one request to the API server (a round trip, not a cache read). After a
//! write the host's cache shows the returned object at once, so a following `lister::get`
//! reads the guest's own write.

use serde::Serialize;
use serde_json::{Value, json};

use crate::host as wit;
use crate::lister::parse;
use crate::{HostError, ObjectRef};

/// JSON merge patch of the status subresource with `{"status": status}`; returns the object
/// as the API server returned it (only its identity, `apiVersion`, `kind` and `metadata`'s
/// name, namespace, uid, resourceVersion, generation and timestamps, when the guest's grant
/// does not let it read the kind). A status patch changes status only: to write labels,
/// annotations or owner references, apply the object.
///
/// Merge-patch rules apply: fields absent from `status` are left alone, `null` removes a
/// field, and lists (such as `conditions`) are replaced whole.
///
/// # Errors
///
/// The host's error: `conflict`, `not-found` (object gone), `invalid` (rejected by the schema),
/// `denied` (no status write grant).
pub fn patch_status(target: &ObjectRef, status: &Value) -> Result<Value, HostError> {
    let patch = json!({ "status": status }).to_string();
    let returned = wit::patch_status(target, &patch)?;
    parse(&returned, "the object returned by the status patch")
}

/// Like [`patch_status`], for guests that build the merge patch (`{"status": ...}`) as JSON
/// text themselves and do not need the returned object parsed: the cheapest way to write status.
///
/// # Errors
/// As [`patch_status`].
pub fn patch_status_raw(target: &ObjectRef, patch: &str) -> Result<String, HostError> {
    wit::patch_status(target, patch)
}

/// Server-side apply (with `apiVersion`, `kind` and `metadata.name`) with the guest as field
/// manager, forced: the guest takes every field it sets, from any other manager. It owns the
/// fields it sends and nothing else, so send an object of the guest's own whole; on an object
/// others manage too (a Deployment kubectl, Helm or an HPA writes), send only the fields the
/// guest manages, or use [`apply_with`] without `force`. `k8s-openapi` types serialise with
/// `apiVersion` and `kind`, so they can be passed as they are (every field they hold is sent).
///
/// # Errors
///
/// `invalid` when `object` does not serialise; otherwise the host's error.
pub fn apply<T: Serialize>(object: &T) -> Result<Value, HostError> {
    let body = serde_json::to_string(object)
        .map_err(|e| HostError::Invalid(format!("object to apply does not serialise: {e}")))?;
    let returned = wit::apply(&body)?;
    parse(&returned, "the object returned by apply")
}

pub use crate::bindings::reconciler::api::cluster::ApplyOptions;

/// Server-side apply of the fields the guest manages, as its own field manager: `object`
/// carries `apiVersion`, `kind`, `metadata.name` (and `namespace`) and only the fields the guest
/// sets, e.g. one annotation of a Deployment's Pod template. Every other field stays its
/// owner's; a field the guest applied before and leaves out now is removed. Without
/// [`ApplyOptions::force`], a field another manager owns is a `conflict` whose text names the
/// field and the manager (the API server's), and nothing is written.
///
/// # Errors
///
/// As [`apply`]; `conflict` as above (transient: retried with backoff until the other manager
/// lets go of the field).
pub fn apply_with<T: Serialize>(object: &T, options: ApplyOptions) -> Result<Value, HostError> {
    let body = serde_json::to_string(object)
        .map_err(|e| HostError::Invalid(format!("object to apply does not serialise: {e}")))?;
    let returned = wit::apply_with(&body, options)?;
    parse(&returned, "the object returned by apply")
}

/// Deletes an object; `Ok(false)` when it was already gone.
///
/// # Errors
///
/// The host's error.
pub fn delete(target: &ObjectRef) -> Result<bool, HostError> {
    wit::delete(target)
}
