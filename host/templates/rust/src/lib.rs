//! A reconciler in Rust, against `wit/reconciler.wit` (world `controller`): greets Widgets.
//!
//! Each reconcile writes `status.observedGeneration` and `status.greeting` ("hello, <spec.message
//! or name>") and records a Normal `Greeted` event. A Widget whose `spec.message` is not a string
//! is a permanent error; a failed status write is transient (the host retries it with backoff).

wit_bindgen::generate!({ path: "wit", world: "controller" });

use exports::reconciler::api::reconciler::{ControllerManifest, Guest, Request};
use reconciler::api::cluster::{self, Event, EventType};
use reconciler::api::log::{self, Level};
use reconciler::api::types::{Action, Error, Gvk, ReconcileError};
use serde_json::{Value, json};

struct Reconciler;

impl Guest for Reconciler {
    fn manifest() -> ControllerManifest {
        ControllerManifest {
            name: "{{name}}".into(),
            primary: Gvk {
                group: "test.reconciler.dev".into(),
                version: "v1".into(),
                kind: "Widget".into(),
            },
            namespace: None,
            label_selector: None,
            secondary: vec![],
            finalizer: None,
            concurrency: 0,
            resync_seconds: 0,
            generation_changed_only: true,
        }
    }

    fn reconcile(request: Request) -> Result<Action, ReconcileError> {
        let done = Action {
            requeue_after_ms: None,
        };
        let Some(object) = request.object else {
            log::log(Level::Info, "gone");
            return Ok(done);
        };
        let widget: Value = serde_json::from_str(&object)
            .map_err(|e| ReconcileError::Permanent(format!("object is not JSON: {e}")))?;
        let message = widget["spec"]
            .get("message")
            .or_else(|| widget["metadata"].get("name"))
            .cloned()
            .unwrap_or_else(|| json!(""));
        let Value::String(message) = message else {
            return Err(ReconcileError::Permanent(format!(
                "spec.message must be a string, not {}",
                python_type(&message)
            )));
        };
        let greeting = format!("hello, {message}");
        let generation = widget["metadata"]
            .get("generation")
            .cloned()
            .unwrap_or(json!(0));
        let patch = json!({"status": {"observedGeneration": generation, "greeting": greeting}});
        cluster::patch_status(&request.ref_, &patch.to_string()).map_err(|e| {
            ReconcileError::Transient(format!("status write failed: {}", describe(&e)))
        })?;
        let event = Event {
            regarding: request.ref_.clone(),
            event_type: EventType::Normal,
            reason: "Greeted".into(),
            message: greeting,
        };
        if let Err(e) = cluster::record_event(&event) {
            // An event is a courtesy: a refused one does not fail the reconcile.
            log::log(
                Level::Warn,
                &format!("event not recorded: {}", describe(&e)),
            );
        }
        Ok(done)
    }
}

/// The names Python gives JSON's types, so that every language's greeter fails in the same words.
fn python_type(value: &Value) -> &'static str {
    match value {
        Value::Null => "NoneType",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

fn describe(e: &Error) -> String {
    match e {
        Error::Denied(m) => format!("denied: {m}"),
        Error::NotFound(m) => format!("not-found: {m}"),
        Error::Conflict(m) => format!("conflict: {m}"),
        Error::Invalid(m) => format!("invalid: {m}"),
        Error::Unavailable(m) => format!("unavailable: {m}"),
        Error::Other(m) => format!("other: {m}"),
    }
}

export!(Reconciler);
