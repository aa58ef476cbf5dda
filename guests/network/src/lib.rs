//! The sample-controller `Network` (`samplecrd.k8s.io/v1`), reconciled against the host's
//! network backend: for every Network there is one backend network (a Linux bridge carrying
//! the gateway address, or an in-memory entry offline) with id `namespace/name`.
//!
//! A reconcile reads top to bottom:
//!
//! 1. Object gone: delete the backend network (idempotent). Deleting: delete it, event
//!    `Deleted`; the host then removes the finalizer. A failed delete is retried.
//! 2. Validate the spec ([`spec::validate`]). Invalid: `Ready=False InvalidSpec`, a warning,
//!    and no retry, since only a new spec can fix it.
//! 3. Read the backend network and [`status::plan`]: create it, correct drift, or nothing.
//!    The manifest's 30 s resync is what brings a bridge deleted by hand back.
//! 4. Report: `Ready=True Synced` with what the backend has. The backend rejecting the spec
//!    (e.g. it overlaps another network) is `Ready=False BackendRejected` without retry; any
//!    other backend failure is `Ready=False BackendError` and a retry with backoff.
//!
//! Events: `Synced` only when something was created or corrected, warnings on every failure
//! (the host aggregates repeats). The status is written only when it changed.

pub mod spec;
pub mod status;

use reconciler_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use reconciler_guest::network_backend::{self as backend, NetworkSpec};
use reconciler_guest::serde_json::{self, Value};
use reconciler_guest::{
    Action, Guest, HostError, Manifest, ObjectRef, ReconcileError, Request, cluster, event, gvk,
    info, permanent, transient, warn,
};
use serde::Deserialize;

use crate::status::{Plan, Status};

struct Network;

impl Guest for Network {
    fn manifest() -> Manifest {
        Manifest::new("network", gvk!("samplecrd.k8s.io", "v1", "Network"))
            .finalizer("samplecrd.k8s.io/network-backend")
            .concurrency(4)
            .resync_seconds(30)
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let id = backend_id(&req.ref_);
        let Some(object) = req.object_value()? else {
            // Normally the finalizer path below already cleaned up; this covers objects
            // deleted while the guest was not installed.
            if backend::delete(&id).map_err(|e| backend_failure(&id, "delete", &e))? {
                info!("deleted backend network {id} of a Network that is gone");
            }
            return Ok(Action::await_change());
        };
        if req.deleting {
            let existed = backend::delete(&id).map_err(|e| backend_failure(&id, "delete", &e))?;
            let what = if existed {
                "deleted"
            } else {
                "was already gone"
            };
            event::normal(&req.ref_, "Deleted", format!("backend network {id} {what}"));
            return Ok(Action::await_change());
        }

        let network: NetworkObject = serde_json::from_value(object)
            .map_err(|e| permanent(format!("{} does not parse: {e}", req.ref_)))?;
        let generation = network.metadata.generation;
        let before = network.status(&req.ref_);
        let mut status = before.clone().unwrap_or_default();

        let valid = match spec::validate(&network.spec) {
            Ok(valid) => valid,
            Err(e) => {
                let message = e.to_string();
                status.set_ready(generation, false, "InvalidSpec", &message);
                event::warning(&req.ref_, "InvalidSpec", message.as_str());
                write_status(&req.ref_, before.as_ref(), &status)?;
                return Ok(Action::await_change());
            }
        };
        let desired = NetworkSpec {
            id: id.clone(),
            cidr: valid.cidr.to_string(),
            gateway: valid.gateway.to_string(),
        };

        match converge(&req.ref_, &desired, &valid) {
            Ok(actual) => {
                let message = format!(
                    "network {id} is up on {} with {}, gateway {}",
                    actual.interface_name, actual.cidr, actual.gateway
                );
                status.set_ready(generation, true, "Synced", &message);
                status.set_actual(&actual);
                write_status(&req.ref_, before.as_ref(), &status)?;
                Ok(Action::await_change())
            }
            Err(HostError::Invalid(reason)) => {
                let message = format!("the backend rejected the spec: {reason}");
                status.set_ready(generation, false, "BackendRejected", &message);
                event::warning(&req.ref_, "BackendRejected", message.as_str());
                write_status(&req.ref_, before.as_ref(), &status)?;
                Ok(Action::await_change())
            }
            Err(e) => {
                let failure = backend_failure(&id, "ensure", &e);
                status.set_ready(generation, false, "BackendError", failure.message());
                event::warning(&req.ref_, "BackendFailed", failure.message());
                if let Err(write) = write_status(&req.ref_, before.as_ref(), &status) {
                    warn!("could not record the backend failure: {}", write.message());
                }
                Err(failure)
            }
        }
    }
}

reconciler_guest::export!(Network);

#[derive(Deserialize)]
struct NetworkObject {
    metadata: ObjectMeta,
    // Spec and status stay raw here, so that a spec of the wrong shape is reported by
    // `spec::validate` in the status, and a mangled status is overwritten rather than
    // blocking every reconcile (and deletion) of the object.
    #[serde(default)]
    spec: Value,
    #[serde(default)]
    status: Value,
}

impl NetworkObject {
    /// The status as last written, or none when absent or unreadable.
    fn status(&self, network: &ObjectRef) -> Option<Status> {
        if self.status.is_null() {
            return None;
        }
        serde_json::from_value(self.status.clone())
            .inspect_err(|e| warn!("ignoring the unreadable status of {network}: {e}"))
            .ok()
    }
}

/// Stable for the object's lifetime, unique across namespaces.
fn backend_id(network: &ObjectRef) -> String {
    match &network.namespace {
        Some(ns) => format!("{ns}/{}", network.name),
        None => network.name.clone(),
    }
}

/// Brings the backend network to `desired`, recording `Synced` when it had to change it.
fn converge(
    network: &ObjectRef,
    desired: &NetworkSpec,
    valid: &spec::ValidSpec,
) -> Result<backend::NetworkStatus, HostError> {
    let current = backend::get(&desired.id)?;
    let change = match (status::plan(valid, current.as_ref()), current) {
        (Plan::InSync, Some(actual)) => return Ok(actual),
        (Plan::Create | Plan::InSync, _) => {
            info!("creating backend network {} ({})", desired.id, desired.cidr);
            format!("created backend network {} ({})", desired.id, desired.cidr)
        }
        (Plan::Correct(drift), _) => {
            let drift = drift.join(", ");
            warn!(
                "backend network {} drifted: {drift}; correcting",
                desired.id
            );
            format!("corrected backend network {}: {drift}", desired.id)
        }
    };
    let actual = backend::ensure(desired)?;
    event::normal(network, "Synced", change);
    Ok(actual)
}

/// A backend failure other than a rejected spec: retried with backoff, except a missing grant,
/// which only an operator can fix (and fixing it reloads the guest).
fn backend_failure(id: &str, call: &str, e: &HostError) -> ReconcileError {
    let message = format!("backend {call} of network {id} failed: {}", e.describe());
    match e {
        HostError::Denied(_) => permanent(message),
        _ => transient(message),
    }
}

/// Writes `status` with a merge patch, unless it equals what the object already shows.
fn write_status(
    network: &ObjectRef,
    before: Option<&Status>,
    status: &Status,
) -> Result<(), ReconcileError> {
    if before == Some(status) {
        return Ok(());
    }
    let value = serde_json::to_value(status)
        .map_err(|e| permanent(format!("status does not serialise: {e}")))?;
    cluster::patch_status(network, &value)?;
    Ok(())
}
