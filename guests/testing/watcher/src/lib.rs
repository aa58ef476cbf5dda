//! Test guest for the contract's optional `watches` export, written on the Rust SDK
//! (`Watches`, `export_watching!`): the one Rust guest whose component targets the world
//! `watching-controller`. Every other Rust guest calls `export!` and exports no `watches`.
//!
//! It reconciles `test.reconciler.dev/v1` `Widget` (`../widget/crd.yaml`): each reconcile merges
//! `status.reconciles` (+1) and `status.observedGeneration`, so a test sees that a watched
//! change reached the key. Its watches, one per mapping the contract has beyond the manifest's:
//!
//! | kind | mapping | a change of it reconciles |
//! |---|---|---|
//! | `ConfigMap` | function: [`Watcher::map`] | the Widgets its annotation `test.reconciler.dev/widgets` lists (`a,b`), in its namespace |
//! | `Secret` | field index `spec.secretName`, name | the Widgets in its namespace whose `spec.secretName` names it |
//! | `Namespace` | field index `spec.namespaces[*]`, name | the Widgets anywhere whose `spec.namespaces` lists it |
//! | `ServiceAccount` | owner labels `test.reconciler.dev/owner-namespace`, `-name`, selected by the name label | the Widget the labels name, in any namespace |

use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, Guest, IndexValue, Json, Manifest, ObjectKey, ReconcileError, Request, Watch, Watches,
    cluster, gvk, transient,
};

/// The annotation of a `ConfigMap` listing the Widgets (comma-separated names) it affects.
pub const WIDGETS_ANNOTATION: &str = "test.reconciler.dev/widgets";

struct Watcher;

impl Guest for Watcher {
    fn manifest() -> Manifest {
        Manifest::new("watcher", gvk!("test.reconciler.dev", "v1", "Widget"))
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(widget) = req.object_value()? else {
            return Ok(Action::await_change());
        };
        let reconciles = widget["status"]["reconciles"].as_u64().unwrap_or(0) + 1;
        let status = json!({
            "reconciles": reconciles,
            "observedGeneration": widget["metadata"]["generation"],
        });
        cluster::patch_status(&req.ref_, &status)
            .map_err(|e| transient(format!("status write failed: {}", e.describe())))?;
        Ok(Action::await_change())
    }
}

impl Watches for Watcher {
    fn watches() -> Vec<Watch> {
        vec![
            Watch::new(gvk!("", "v1", "ConfigMap")).by_function(),
            Watch::new(gvk!("", "v1", "Secret")).by_field("spec.secretName", IndexValue::Name),
            Watch::new(gvk!("", "v1", "Namespace"))
                .by_field("spec.namespaces[*]", IndexValue::Name),
            Watch::new(gvk!("", "v1", "ServiceAccount"))
                .by_owner_labels(
                    "test.reconciler.dev/owner-namespace",
                    "test.reconciler.dev/owner-name",
                )
                .selecting("test.reconciler.dev/owner-name"),
        ]
    }

    fn map(_kind: reconciler_guest::Gvk, object: Json) -> Vec<ObjectKey> {
        keys_named_by(&object)
    }
}

/// The Widgets a `ConfigMap`'s annotation names, in its namespace; none when the text is not an
/// object or has no such annotation.
fn keys_named_by(object: &str) -> Vec<ObjectKey> {
    let Ok(object) = reconciler_guest::serde_json::from_str::<Value>(object) else {
        return Vec::new();
    };
    let namespace = object["metadata"]["namespace"].as_str();
    let Some(names) = object["metadata"]["annotations"][WIDGETS_ANNOTATION].as_str() else {
        return Vec::new();
    };
    names
        .split(',')
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .map(|name| ObjectKey::new(namespace, name))
        .collect()
}

reconciler_guest::export_watching!(Watcher);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_names_widgets_in_the_config_maps_namespace() {
        let cm = json!({"metadata": {"namespace": "demo", "name": "cm",
            "annotations": {WIDGETS_ANNOTATION: "a, b,,c"}}});
        assert_eq!(
            keys_named_by(&cm.to_string()),
            ["a", "b", "c"].map(|n| ObjectKey::new(Some("demo"), n))
        );
    }

    #[test]
    fn no_annotation_or_no_json_maps_to_nothing() {
        let cm = json!({"metadata": {"namespace": "demo", "name": "cm"}});
        assert!(keys_named_by(&cm.to_string()).is_empty());
        assert!(keys_named_by("not json").is_empty());
    }
}
