//! Test guest: built against `wit/reconciler.wit` exactly as `reconciler:api@0.1.0` was
//! published before the `http-controller` world was added (the frozen copy in `wit/` here,
//! never to be edited), without the SDK, which follows the current contract. The host must keep
//! loading and running it unchanged: it reconciles `test.reconciler.dev/v1` `Widget`s by
//! reading the object and writing `status.contract: "0.1.0"`.

// Generated code: not ours to lint.
#[allow(clippy::all, clippy::pedantic)]
mod bindings {
    wit_bindgen::generate!({
        path: "wit",
        world: "controller",
    });
}

use bindings::exports::reconciler::api::reconciler::{ControllerManifest, Guest, Request};
use bindings::reconciler::api::types::{Action, Gvk, ReconcileError};
use bindings::reconciler::api::{cluster, lister};

struct Old;

impl Guest for Old {
    fn manifest() -> ControllerManifest {
        ControllerManifest {
            name: "contract-0-1-0".to_owned(),
            primary: Gvk {
                group: "test.reconciler.dev".to_owned(),
                version: "v1".to_owned(),
                kind: "Widget".to_owned(),
            },
            namespace: None,
            label_selector: None,
            secondary: Vec::new(),
            finalizer: None,
            concurrency: 0,
            resync_seconds: 0,
            generation_changed_only: true,
        }
    }

    fn reconcile(request: Request) -> Result<Action, ReconcileError> {
        let fail = |e: bindings::reconciler::api::types::Error| {
            ReconcileError::Transient(format!("{e:?}"))
        };
        if lister::get(&request.ref_).map_err(fail)?.is_none() || request.deleting {
            return Ok(Action {
                requeue_after_ms: None,
            });
        }
        cluster::patch_status(&request.ref_, r#"{"status":{"contract":"0.1.0"}}"#).map_err(fail)?;
        Ok(Action {
            requeue_after_ms: None,
        })
    }
}

bindings::export!(Old with_types_in bindings);
