//! The reconcile logic of the benchmark, shared verbatim by the guest and the native baseline
//! (`host/benches/reconcile.rs` includes this file), so both sides do the same work.
//! Plain `serde_json` only: it must compile in both places.

use serde_json::{Value, json};

/// From an object's JSON, the status merge patch a typical controller would write: the
/// observed generation, a Ready condition and a summary of the spec.
///
/// # Errors
///
/// When `object` is not JSON.
pub fn status_patch(object: &str) -> Result<String, String> {
    let object: Value =
        serde_json::from_str(object).map_err(|e| format!("object does not parse: {e}"))?;
    let generation = object
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let items = object
        .pointer("/spec/items")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let patch = json!({
        "status": {
            "observedGeneration": generation,
            "items": items,
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "Synced",
                "message": format!("{name} has {items} items"),
                "observedGeneration": generation,
            }],
        }
    });
    Ok(patch.to_string())
}
