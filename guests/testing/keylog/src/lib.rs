//! Test guest: a key logger. It reconciles `test.reconciler.dev/v1` `Widget`s
//! (`../widget/crd.yaml`) and writes down every key it is handed, whether or not the Widget
//! exists, in the status of each ledger Widget (label [`LEDGER_LABEL`]) its lister shows:
//! `status.handed.<namespace>/<name>: true` (`<name>` alone for a key without a namespace). A
//! namespaced `Reconciler`'s lister sees only its namespace, so a ledger there records what that
//! tenant's guest was handed; `tests/tests/tenant_keys.rs` reads it from the API server.
//!
//! Its watches are the ways a tenant could have keys of other namespaces, or objects outside
//! its own, brought to it:
//!
//! | kind | mapping | selected by | a change of it hands the guest |
//! |---|---|---|---|
//! | `ConfigMap` | owner labels [`OWNER_NAMESPACE`], [`OWNER_NAME`] | the name label | the key the labels name, in any namespace |
//! | `ConfigMap` | function: [`map`](KeyLog::map) | label [`MAPPED`] | the keys its annotation [`KEYS`] lists (`ns/name ns/name`) |
//! | `Namespace` (cluster-scoped) | owner labels, as above | the name label | the key the labels name |
//! | `Namespace` (cluster-scoped) | function, as above | label [`MAPPED`] | the keys its annotation lists |
//!
//! The manifest asks for reconciles on generation changes only, so the ledger's own status
//! writes wake nothing.

use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, Guest, Json, Manifest, ObjectKey, ObjectRef, ReconcileError, Request, Watch, Watches,
    cluster, gvk, lister, transient,
};

/// Marks the Widgets that keep the ledger.
pub const LEDGER_LABEL: &str = "keylog.test/ledger";
/// The owner labels: the namespace and the name of the Widget an object points at.
pub const OWNER_NAMESPACE: &str = "keylog.test/owner-namespace";
pub const OWNER_NAME: &str = "keylog.test/owner-name";
/// Selects the objects `map` is called on.
pub const MAPPED: &str = "keylog.test/mapped";
/// The annotation listing the keys `map` returns.
pub const KEYS: &str = "keylog.test/keys";

struct KeyLog;

fn widget() -> reconciler_guest::Gvk {
    gvk!("test.reconciler.dev", "v1", "Widget")
}

impl Guest for KeyLog {
    fn manifest() -> Manifest {
        Manifest::new("keylog", widget()).generation_changed_only()
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let key = match &req.ref_.namespace {
            Some(ns) => format!("{ns}/{}", req.ref_.name),
            None => req.ref_.name.clone(),
        };
        let ledgers = lister::list(&widget(), None, Some(LEDGER_LABEL))
            .map_err(|e| transient(format!("listing the ledgers: {}", e.describe())))?;
        let status = json!({ "handed": { key: true } });
        for ledger in &ledgers {
            let target = ObjectRef {
                kind: widget(),
                namespace: ledger["metadata"]["namespace"].as_str().map(str::to_owned),
                name: ledger["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            };
            cluster::patch_status(&target, &status)
                .map_err(|e| transient(format!("writing the ledger: {}", e.describe())))?;
        }
        Ok(Action::await_change())
    }
}

impl Watches for KeyLog {
    fn watches() -> Vec<Watch> {
        let by_labels = |kind| {
            Watch::new(kind)
                .by_owner_labels(OWNER_NAMESPACE, OWNER_NAME)
                .selecting(OWNER_NAME)
        };
        let by_map = |kind| Watch::new(kind).by_function().selecting(MAPPED);
        vec![
            by_labels(gvk!("", "v1", "ConfigMap")),
            by_map(gvk!("", "v1", "ConfigMap")),
            by_labels(gvk!("", "v1", "Namespace")),
            by_map(gvk!("", "v1", "Namespace")),
        ]
    }

    fn map(_kind: reconciler_guest::Gvk, object: Json) -> Vec<ObjectKey> {
        keys_listed(&object)
    }
}

/// The keys (`ns/name`, or `name`) an object's annotation [`KEYS`] lists.
fn keys_listed(object: &str) -> Vec<ObjectKey> {
    let Ok(object) = reconciler_guest::serde_json::from_str::<Value>(object) else {
        return Vec::new();
    };
    object["metadata"]["annotations"][KEYS]
        .as_str()
        .unwrap_or_default()
        .split_whitespace()
        .map(|key| match key.split_once('/') {
            Some((ns, name)) => ObjectKey::new(Some(ns), name),
            None => ObjectKey::new(None, key),
        })
        .collect()
}

reconciler_guest::export_watching!(KeyLog);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_annotation_lists_keys_with_and_without_a_namespace() {
        let object = json!({"metadata": {"annotations": {KEYS: "a/x  y"}}});
        assert_eq!(
            keys_listed(&object.to_string()),
            [ObjectKey::new(Some("a"), "x"), ObjectKey::new(None, "y")]
        );
        assert!(keys_listed("{}").is_empty());
    }
}
