//! A reconciler in Rust on the SDK in `reconciler-guest/` (world `controller` of
//! `wit/reconciler.wit`): greets Widgets.
//!
//! Each reconcile writes `status.observedGeneration` and `status.greeting` ("<GREETING or hello>,
//! <spec.message or name>", GREETING from the grant's `env`) and records a Normal `Greeted` event.
//! A Widget whose `spec.message` is not a string is a permanent error; a failed status write is
//! transient (the host retries it with backoff).

use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, Guest, Manifest, ReconcileError, Request, cluster, event, gvk, info, permanent,
    transient, warn,
};

struct {{type}};

impl Guest for {{type}} {
    fn manifest() -> Manifest {
        Manifest::new("{{name}}", gvk!("test.reconciler.dev", "v1", "Widget")).generation_changed_only()
    }

    fn reconcile(request: Request) -> Result<Action, ReconcileError> {
        let Some(widget) = request.object_value()? else {
            info!("gone");
            return Ok(Action::await_change());
        };
        let message = widget["spec"]
            .get("message")
            .or_else(|| widget["metadata"].get("name"))
            .cloned()
            .unwrap_or_else(|| json!(""));
        let Value::String(message) = message else {
            return Err(permanent(format!(
                "spec.message must be a string, not {}",
                python_type(&message)
            )));
        };
        let word = std::env::var("GREETING").unwrap_or_else(|_| "hello".to_owned());
        let greeting = format!("{word}, {message}");
        let generation = widget["metadata"].get("generation").cloned().unwrap_or(json!(0));
        cluster::patch_status(
            &request.ref_,
            &json!({"observedGeneration": generation, "greeting": greeting}),
        )
        .map_err(|e| transient(format!("status write failed: {}", e.describe())))?;
        // An event is a courtesy: a refused one does not fail the reconcile.
        if let Err(e) = event::record(&request.ref_, event::EventType::Normal, "Greeted", greeting) {
            warn!("event not recorded: {}", e.describe());
        }
        Ok(Action::await_change())
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

reconciler_guest::export!({{type}});
