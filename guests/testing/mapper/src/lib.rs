//! Test guest for the contract's optional `watches` and `indexes` exports (the
//! `indexing-controller` world), built without the SDK so it pins the exports as the WIT spells
//! them. It reconciles `test.reconciler.dev/v1` `Widget`s (see `../widget/crd.yaml`) and
//! declares one watch of each kind of mapping, each with a label selector:
//!
//! | watched | selector | mapping |
//! |---|---|---|
//! | `ConfigMap` | `mapper.test/role=source` | field index: `spec.source` = its name |
//! | `ConfigMap` | `mapper.test/owner-name` | owner labels `mapper.test/owner-namespace`, `-name` |
//! | `ConfigMap` | `mapper.test/role=pointer` | function: `map` reads its annotations |
//! | `Namespace` | none | field index: `spec.targets[*]` = its name |
//! | `ConfigMap` | `mapper.test/role=listed` | computed index `listed`: the names `spec.listed` (`"a,b"`) holds |
//!
//! Built as `mapper-v2` (its `v2` feature), `map` also reads the annotation `mapper.test/widgets-v2`
//! and `index` also splits `spec.listedV2`: a new version whose functions relate objects the first
//! does not, with the same watches, for the rollout tests.
//!
//! `map` of a pointer `ConfigMap` returns the keys its annotation `mapper.test/widgets` lists
//! (`ns/name ns/name`); its annotation `mapper.test/map` makes it misbehave: `trap` panics,
//! `loop` spins past the deadline, `write` first tries to write the `Widget`'s status (the host
//! must refuse: only the lister answers in `map`), `read` first reads the Widget through the
//! lister (which must answer). `map` of a listed `ConfigMap` (no watch asks for it; the watches
//! bench calls it, as config-reloader's first version did) lists the `Widget`s of its namespace
//! and keeps those whose `spec.listed` names it.
//!
//! `index("listed", widget)` splits the Widget's `spec.listed` at commas; its `spec.index` makes
//! it misbehave: `trap` panics, `loop` spins past the deadline, `read` first lists `ConfigMap`s
//! through the lister and, if that answers (it must not: no host call answers in `index`),
//! returns no value.
//!
//! A reconcile patches the `Widget`'s status with what it read, so a test sees, on the API
//! server, that a change of a watched object reached it:
//! - `source`: `data.value` of the `ConfigMap` `spec.source` in its namespace (null if absent);
//! - `pointers`: `NAME=VALUE` of each pointer `ConfigMap` whose annotation names the Widget;
//! - `listed`: `NAME=VALUE` of each listed `ConfigMap` of its namespace its `spec.listed` names;
//! - `copies`: the namespaces of `spec.targets` that exist, where it applies the `ConfigMap`
//!   `<widget>-copy` (owner labels, `data.value` = the source's value);
//! - `peek`: `present` or `absent`, whether the lister has the `ConfigMap` `spec.peek`;
//! - `reconciles`: one more than before.
//!
//! `spec.fail: permanent` makes the reconcile fail permanently, `spec.fail: trap` panic.

// Generated code: not ours to lint.
#[allow(clippy::all, clippy::pedantic)]
mod bindings {
    wit_bindgen::generate!({
        path: "../../../wit",
        world: "indexing-controller",
    });
}

use bindings::exports::reconciler::api::indexes::{ComputedIndex, Guest as Indexes, Lookup};
use bindings::exports::reconciler::api::reconciler::{
    ControllerManifest, Guest as Reconciler, Request,
};
use bindings::exports::reconciler::api::watches::{
    FieldIndex, Guest as Watches, IndexValue, OwnerLabels, Watch, WatchMapping,
};
use bindings::reconciler::api::types::{Action, Gvk, ObjectKey, ObjectRef, ReconcileError};
use bindings::reconciler::api::{cluster, lister};
use serde_json::{Value, json};

const OWNER_NAMESPACE: &str = "mapper.test/owner-namespace";
const OWNER_NAME: &str = "mapper.test/owner-name";
const WIDGETS: &str = "mapper.test/widgets";
/// What `map` also reads in the `v2` build.
const WIDGETS_V2: &str = "mapper.test/widgets-v2";
const MISBEHAVE: &str = "mapper.test/map";

fn gvk(group: &str, version: &str, kind: &str) -> Gvk {
    Gvk {
        group: group.to_owned(),
        version: version.to_owned(),
        kind: kind.to_owned(),
    }
}

fn widget() -> Gvk {
    gvk("test.reconciler.dev", "v1", "Widget")
}

fn config_map() -> Gvk {
    gvk("", "v1", "ConfigMap")
}

struct Mapper;

impl Reconciler for Mapper {
    fn manifest() -> ControllerManifest {
        ControllerManifest {
            name: "mapper".to_owned(),
            primary: widget(),
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
        let done = Action {
            requeue_after_ms: None,
        };
        let Some(text) = request.object else {
            return Ok(done);
        };
        let object: Value = serde_json::from_str(&text)
            .map_err(|e| ReconcileError::Permanent(format!("object: {e}")))?;
        let spec = &object["spec"];
        match spec["fail"].as_str() {
            Some("permanent") => {
                return Err(ReconcileError::Permanent(
                    "spec.fail asks for a permanent error".to_owned(),
                ));
            }
            Some("trap") => panic!("spec.fail asks for a trap"),
            _ => {}
        }
        let namespace = request.ref_.namespace.clone();
        let name = request.ref_.name.clone();
        let source = spec["source"]
            .as_str()
            .map(|s| read(&config_map(), namespace.clone(), s))
            .transpose()?
            .flatten()
            .and_then(|cm| cm["data"]["value"].as_str().map(str::to_owned));
        let key = format!("{}/{name}", namespace.as_deref().unwrap_or_default());
        let mut pointers: Vec<String> =
            lister::list(&config_map(), None, Some("mapper.test/role=pointer"))
                .map_err(transient)?
                .iter()
                .filter_map(|text| serde_json::from_str::<Value>(text).ok())
                .filter(|cm| names(cm).contains(&key))
                .map(|cm| {
                    format!(
                        "{}={}",
                        cm["metadata"]["name"].as_str().unwrap_or_default(),
                        cm["data"]["value"].as_str().unwrap_or_default()
                    )
                })
                .collect();
        pointers.sort();
        let listed = listed_values(namespace.as_deref(), &object)?;
        let mut copies = Vec::new();
        for target in spec["targets"].as_array().into_iter().flatten() {
            let Some(target) = target.as_str() else {
                continue;
            };
            if read(&gvk("", "v1", "Namespace"), None, target)?.is_none() {
                continue;
            }
            let copy = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": format!("{name}-copy"),
                    "namespace": target,
                    "labels": {
                        OWNER_NAMESPACE: namespace.as_deref().unwrap_or_default(),
                        OWNER_NAME: name,
                        "mapper.test/role": "copy",
                    },
                },
                "data": { "value": source.clone().unwrap_or_default() },
            });
            cluster::apply(&copy.to_string()).map_err(transient)?;
            copies.push(target.to_owned());
        }
        let peek = spec["peek"]
            .as_str()
            .map(|p| read(&config_map(), namespace.clone(), p))
            .transpose()?
            .map(|found| if found.is_some() { "present" } else { "absent" });
        let reconciles = object["status"]["reconciles"].as_u64().unwrap_or(0) + 1;
        let status = json!({ "status": {
            "source": source,
            "pointers": pointers,
            "listed": listed,
            "copies": copies,
            "peek": peek,
            "reconciles": reconciles,
        }});
        cluster::patch_status(&request.ref_, &status.to_string()).map_err(transient)?;
        Ok(done)
    }
}

impl Watches for Mapper {
    fn watches() -> Vec<Watch> {
        vec![
            Watch {
                kind: config_map(),
                mapping: WatchMapping::Field(FieldIndex {
                    field: "spec.source".to_owned(),
                    value: IndexValue::Name,
                }),
                namespace: None,
                label_selector: Some("mapper.test/role=source".to_owned()),
            },
            Watch {
                kind: config_map(),
                mapping: WatchMapping::OwnerLabels(OwnerLabels {
                    namespace: Some(OWNER_NAMESPACE.to_owned()),
                    name: OWNER_NAME.to_owned(),
                }),
                namespace: None,
                label_selector: Some(OWNER_NAME.to_owned()),
            },
            Watch {
                kind: config_map(),
                mapping: WatchMapping::Function,
                namespace: None,
                label_selector: Some("mapper.test/role=pointer".to_owned()),
            },
            Watch {
                kind: gvk("", "v1", "Namespace"),
                mapping: WatchMapping::Field(FieldIndex {
                    field: "spec.targets[*]".to_owned(),
                    value: IndexValue::Name,
                }),
                namespace: None,
                label_selector: None,
            },
        ]
    }

    fn map(_kind: Gvk, object: String) -> Vec<ObjectKey> {
        let Ok(object) = serde_json::from_str::<Value>(&object) else {
            return Vec::new();
        };
        if object["metadata"]["labels"]["mapper.test/role"] == "listed" {
            return listing(&object);
        }
        let keys: Vec<ObjectKey> = names(&object)
            .iter()
            .filter_map(|k| k.split_once('/'))
            .map(|(namespace, name)| ObjectKey {
                namespace: Some(namespace.to_owned()),
                name: name.to_owned(),
            })
            .collect();
        let widget_ref = |key: &ObjectKey| ObjectRef {
            kind: widget(),
            namespace: key.namespace.clone(),
            name: key.name.clone(),
        };
        match object["metadata"]["annotations"][MISBEHAVE].as_str() {
            Some("trap") => panic!("told to trap in map"),
            Some("loop") => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("write") => {
                for key in &keys {
                    // Must be refused: map only names keys.
                    let _ = cluster::patch_status(
                        &widget_ref(key),
                        r#"{"status":{"writtenByMap":true}}"#,
                    );
                }
            }
            Some("read") => {
                // Must answer: a widget that the lister does not have is not mapped.
                return keys
                    .into_iter()
                    .filter(|k| matches!(lister::get(&widget_ref(k)), Ok(Some(_))))
                    .collect();
            }
            _ => {}
        }
        keys
    }
}

impl Indexes for Mapper {
    fn indexes() -> Vec<ComputedIndex> {
        vec![ComputedIndex {
            name: "listed".to_owned(),
            kind: config_map(),
            lookup: Lookup::Name,
            namespace: None,
            label_selector: Some("mapper.test/role=listed".to_owned()),
        }]
    }

    fn index(name: String, primary: String) -> Vec<String> {
        let Ok(widget) = serde_json::from_str::<Value>(&primary) else {
            return Vec::new();
        };
        assert_eq!(name, "listed", "an index this guest did not declare");
        match widget["spec"]["index"].as_str() {
            Some("trap") => panic!("told to trap in index"),
            Some("loop") => {
                let mut n: u64 = 0;
                loop {
                    n = std::hint::black_box(n.wrapping_add(1));
                }
            }
            Some("read") if lister::list(&config_map(), None, None).is_ok() => {
                // Must not happen: no host call answers in index.
                return Vec::new();
            }
            _ => {}
        }
        let mut values = listed(&widget);
        if cfg!(feature = "v2") {
            values.extend(split_names(&widget["spec"]["listedV2"]));
        }
        values
    }
}

/// `NAME=VALUE` of each listed `ConfigMap` of `namespace` the Widget's `spec.listed` names.
fn listed_values(namespace: Option<&str>, widget: &Value) -> Result<Vec<String>, ReconcileError> {
    let names = listed(widget);
    let mut values: Vec<String> =
        lister::list(&config_map(), namespace, Some("mapper.test/role=listed"))
            .map_err(transient)?
            .iter()
            .filter_map(|text| serde_json::from_str::<Value>(text).ok())
            .filter_map(|cm| {
                let name = cm["metadata"]["name"].as_str()?;
                names.iter().any(|n| n == name).then(|| {
                    format!(
                        "{name}={}",
                        cm["data"]["value"].as_str().unwrap_or_default()
                    )
                })
            })
            .collect();
    values.sort();
    Ok(values)
}

/// The `ConfigMap` names a Widget's `spec.listed` (`"a,b"`) holds.
fn listed(widget: &Value) -> Vec<String> {
    split_names(&widget["spec"]["listed"])
}

/// The names a comma-separated string holds.
fn split_names(text: &Value) -> Vec<String> {
    text.as_str()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_owned)
        .collect()
}

/// The Widgets of a listed `ConfigMap`'s namespace whose `spec.listed` names it: a pass over the
/// cached Widgets, what a `map` must do without an index.
fn listing(config_map: &Value) -> Vec<ObjectKey> {
    let name = config_map["metadata"]["name"].as_str().unwrap_or_default();
    let namespace = config_map["metadata"]["namespace"].as_str();
    let Ok(widgets) = lister::list(&widget(), namespace, None) else {
        return Vec::new();
    };
    widgets
        .iter()
        .filter_map(|text| serde_json::from_str::<Value>(text).ok())
        .filter(|w| listed(w).iter().any(|n| n == name))
        .map(|w| ObjectKey {
            namespace: w["metadata"]["namespace"].as_str().map(str::to_owned),
            name: w["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        })
        .collect()
}

/// The keys (`ns/name`) a pointer `ConfigMap`'s annotation names.
fn names(object: &Value) -> Vec<String> {
    let annotations = &object["metadata"]["annotations"];
    let read: &[&str] = if cfg!(feature = "v2") {
        &[WIDGETS, WIDGETS_V2]
    } else {
        &[WIDGETS]
    };
    read.iter()
        .flat_map(|a| {
            annotations[*a]
                .as_str()
                .unwrap_or_default()
                .split_whitespace()
        })
        .map(str::to_owned)
        .collect()
}

fn read(
    kind: &Gvk,
    namespace: Option<String>,
    name: &str,
) -> Result<Option<Value>, ReconcileError> {
    let found = lister::get(&ObjectRef {
        kind: kind.clone(),
        namespace,
        name: name.to_owned(),
    })
    .map_err(transient)?;
    Ok(found.and_then(|text| serde_json::from_str(&text).ok()))
}

#[allow(clippy::needless_pass_by_value)] // the shape `map_err` hands it
fn transient(e: bindings::reconciler::api::types::Error) -> ReconcileError {
    ReconcileError::Transient(format!("{e:?}"))
}

bindings::export!(Mapper with_types_in bindings);
