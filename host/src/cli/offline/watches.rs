//! `reconcile --events`: a guest's watches run offline. Each event (an object of a watched kind,
//! or a `{type, object}` watch event as `kubectl get --watch --output-watch-events -o json`
//! prints it) goes through the guest's watches the way `run` maps an informer's event: the
//! watch's namespace and label selector, then its mapping (owner references, a label, owner
//! labels, a field index, a computed index, the guest's `map`), with the controller's own
//! functions. The indexes are built from the loaded primaries, as `run` builds them from its
//! primary cache, and a computed index's values are shown per primary, so an author can pin
//! both what their `index` returns and which keys an event wakes.
//!
//! Events are mapped against the loaded objects and change nothing: a reconcile in the same
//! run sees the loaded objects, not the events.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use kube::api::DynamicObject;
use serde_json::{Value, json};

use crate::cluster::objects::{ObjectKey, ObjectRef};
use crate::config::Grant;
use crate::controller::{
    FieldIndex, IndexBudget, WatchFilter, index_keys, kept_generation, primary_keys, valid_keys,
};
use crate::sandbox::capabilities::{CallContext, GuestContext, Providers, Scope};
use crate::sandbox::manifest::{Manifest, Mapping, SecondaryWatch};
use crate::sandbox::providers::offline::MemoryCache;
use crate::sandbox::runtime::{Indexed, LoadedGuest, Mapped, Runtime};

/// One event of the `--events` file.
struct Event {
    /// `ADDED`, `MODIFIED` or `DELETED`.
    kind: &'static str,
    object_ref: ObjectRef,
    object: DynamicObject,
}

/// Reads the events: multi-document YAML or JSON (a JSON array, or `kind: List`, expanded);
/// a document with `type` and `object` is a watch event, any other is an object, `MODIFIED`
/// when an object of its kind and name is loaded, else `ADDED`.
fn read_events(path: &Path, cache: &MemoryCache) -> anyhow::Result<Vec<Event>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let mut events = Vec::new();
    for (at, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = <Value as serde::Deserialize>::deserialize(document)
            .with_context(|| format!("{}: document {}", path.display(), at + 1))?;
        let items = match value {
            Value::Null => continue,
            Value::Array(items) => items,
            list if list["kind"].as_str().is_some_and(|k| k.ends_with("List"))
                && list["items"].is_array() =>
            {
                list["items"].as_array().cloned().unwrap_or_default()
            }
            one => vec![one],
        };
        for item in items {
            let where_ = || format!("{}: document {}", path.display(), at + 1);
            let (kind, object) = match (item.get("type"), item.get("object")) {
                (Some(Value::String(kind)), Some(object)) => {
                    let kind = match kind.as_str() {
                        "ADDED" => "ADDED",
                        "MODIFIED" => "MODIFIED",
                        "DELETED" => "DELETED",
                        other => anyhow::bail!(
                            "{}: event type {other:?}: ADDED, MODIFIED or DELETED",
                            where_()
                        ),
                    };
                    (Some(kind), object.clone())
                }
                _ => (None, item),
            };
            let Some(object_ref) = ObjectRef::of_object(&object) else {
                anyhow::bail!(
                    "{}: not an object (apiVersion, kind, metadata.name) nor a {{type, object}} event",
                    where_()
                );
            };
            // As the API server would hold it: a kind, a name and a namespace it accepts.
            crate::cluster::validation::gvk("kind", &object_ref.kind)
                .and_then(|()| {
                    crate::cluster::validation::object_name("metadata.name", &object_ref.name)
                })
                .and_then(|()| {
                    crate::cluster::validation::namespace(
                        "metadata.namespace",
                        object_ref.namespace.as_deref(),
                    )
                })
                .map_err(|e| anyhow::anyhow!("{}: {e}", where_()))?;
            let kind = kind.unwrap_or(if cache.get(&object_ref).is_some() {
                "MODIFIED"
            } else {
                "ADDED"
            });
            let object = serde_json::from_value(object).with_context(where_)?;
            events.push(Event {
                kind,
                object_ref,
                object,
            });
        }
    }
    Ok(events)
}

/// The guest's indexes over the loaded primaries: one per field path and per computed index,
/// as `run` keeps them over its primary cache.
struct Indexes {
    by_path: BTreeMap<String, FieldIndex>,
    computed: BTreeMap<String, FieldIndex>,
    /// Each computed index's values per primary (`namespace/name`), or why there are none.
    shown: BTreeMap<String, BTreeMap<String, Value>>,
}

/// What mapping events needs: the guest, its manifest's filters and the loaded objects.
pub(super) struct Watches<'a> {
    pub runtime: Arc<Runtime>,
    pub loaded: &'a LoadedGuest,
    pub grant: &'a Grant,
    pub cache: Arc<MemoryCache>,
}

impl Watches<'_> {
    /// `{"indexes": {...}, "watches": [...]}` for the events in `path`.
    pub(super) async fn map(&self, path: &Path) -> anyhow::Result<Value> {
        let manifest = &self.loaded.manifest;
        let events = read_events(path, &self.cache)?;
        let primary_filter = WatchFilter::new(
            manifest.namespace.clone(),
            self.grant
                .read_selectors
                .narrow(&manifest.primary, manifest.label_selector.as_deref())
                .as_deref(),
        )?;
        let primaries: Vec<DynamicObject> = self
            .cache
            .all()
            .into_iter()
            .filter(|o| ObjectRef::of_object(o).is_some_and(|r| r.kind == manifest.primary))
            .filter_map(|o| serde_json::from_value::<DynamicObject>(o).ok())
            .filter(|o| primary_filter.takes(o))
            .collect();
        let indexes = self.indexes(manifest, &primaries).await;
        let map_context = Arc::new(
            GuestContext::new(
                manifest.name.clone(),
                self.grant.clone(),
                crate::sandbox::providers::offline::providers(self.cache.clone(), None).read_only(),
            )
            .with_scope(Scope::of(manifest, None)),
        );
        let mut mapped = Vec::new();
        for event in &events {
            mapped.push(
                self.event(manifest, event, &primary_filter, &indexes, &map_context)
                    .await?,
            );
        }
        let mut output = serde_json::Map::new();
        if !indexes.shown.is_empty() {
            output.insert("indexes".into(), serde_json::to_value(&indexes.shown)?);
        }
        output.insert("watches".into(), Value::Array(mapped));
        Ok(Value::Object(output))
    }

    async fn indexes(&self, manifest: &Manifest, primaries: &[DynamicObject]) -> Indexes {
        let mut indexes = Indexes {
            by_path: BTreeMap::new(),
            computed: BTreeMap::new(),
            shown: BTreeMap::new(),
        };
        let budget = Arc::new(IndexBudget::default());
        let context = Arc::new(
            GuestContext::new(
                manifest.name.clone(),
                self.grant.clone(),
                Providers::deny_indexing(),
            )
            .with_scope(Scope::of(manifest, None)),
        );
        for watch in &manifest.secondary {
            match &watch.mapping {
                Mapping::Field { path, .. } => {
                    let text = serde_json::to_value(path)
                        .ok()
                        .and_then(|v| v.as_str().map(ToOwned::to_owned))
                        .unwrap_or_default();
                    indexes.by_path.entry(text).or_insert_with(|| {
                        let index = FieldIndex::of_path(path.clone(), budget.clone());
                        for object in primaries {
                            index.update(&key_of(object), Some(object));
                        }
                        index
                    });
                }
                Mapping::Computed { index: name, .. } if !indexes.computed.contains_key(name) => {
                    let index = FieldIndex::computed(name, budget.clone());
                    let mut shown = BTreeMap::new();
                    for object in primaries {
                        let key = key_of(object);
                        let value = self.index_one(&context, name, &index, &key, object).await;
                        shown.insert(key.to_string(), value);
                    }
                    indexes.computed.insert(name.clone(), index);
                    indexes.shown.insert(name.clone(), shown);
                }
                _ => {}
            }
        }
        indexes
    }

    /// Calls the guest's `index` on one primary and holds what it returned, as `run` does;
    /// returns what the output shows for it.
    async fn index_one(
        &self,
        context: &Arc<GuestContext>,
        name: &str,
        index: &FieldIndex,
        key: &ObjectKey,
        object: &DynamicObject,
    ) -> Value {
        let json = match serde_json::to_string(object) {
            Ok(json) => json,
            Err(e) => return json!({ "error": format!("the object does not serialise: {e}") }),
        };
        let call = CallContext::new(
            context.clone(),
            format!("index {name} {key}"),
            Some(tokio::runtime::Handle::current()),
        );
        match self
            .runtime
            .index_async(self.loaded, call, name, json)
            .await
        {
            Indexed::Values { values, dropped } => {
                let shown = values.clone();
                if index.set(key, values) == crate::controller::Held::OverBudget {
                    index.set(key, Vec::new());
                    return json!({ "error": "over the guest's index budget: left out" });
                }
                if dropped > 0 {
                    json!({ "values": shown, "dropped": dropped })
                } else {
                    json!(shown)
                }
            }
            Indexed::Failed { result, message } => {
                json!({ "error": format!("{}: {message}", result.as_str()) })
            }
        }
    }

    /// The keys one event wakes, watch by watch.
    async fn event(
        &self,
        manifest: &Manifest,
        event: &Event,
        primary_filter: &WatchFilter,
        indexes: &Indexes,
        map_context: &Arc<GuestContext>,
    ) -> anyhow::Result<Value> {
        let object = &event.object;
        let kind = &event.object_ref.kind;
        let key = key_of(object);
        // A MODIFIED event's previous version, which `run` maps too (it may have named
        // primaries the new one no longer names).
        let old = (event.kind == "MODIFIED")
            .then(|| self.cache.get(&event.object_ref))
            .flatten()
            .and_then(|o| serde_json::from_value::<DynamicObject>(o).ok());
        let versions: Vec<&DynamicObject> = std::iter::once(object).chain(old.as_ref()).collect();
        let mut by = Vec::new();
        let mut all = BTreeSet::new();
        if *kind == manifest.primary && versions.iter().any(|o| primary_filter.takes(o)) {
            if manifest.generation_changed_only
                && old.as_ref().is_some_and(|old| kept_generation(object, old))
            {
                by.push(json!({
                    "watch": "primary",
                    "keys": [],
                    "skipped": "generation-changed-only, and the update kept metadata.generation",
                }));
            } else {
                all.insert(key.to_string());
                by.push(json!({ "watch": "primary", "keys": [key.to_string()] }));
            }
        }
        for (at, watch) in manifest.secondary.iter().enumerate() {
            if watch.kind != *kind {
                continue;
            }
            let filter = WatchFilter::new(
                watch
                    .namespace
                    .clone()
                    .or_else(|| manifest.namespace.clone()),
                watch.label_selector.as_deref(),
            )?;
            let taken: Vec<&&DynamicObject> = versions.iter().filter(|o| filter.takes(o)).collect();
            if taken.is_empty() {
                // Outside the watch's namespace or selector: `run` never maps it.
                continue;
            }
            let mut keys = BTreeSet::new();
            let mut shown = serde_json::Map::new();
            shown.insert("watch".into(), json!(format!("secondary[{at}]")));
            shown.insert("mapping".into(), serde_json::to_value(&watch.mapping)?);
            for version in taken {
                match self
                    .keys(manifest, watch, version, indexes, map_context)
                    .await
                {
                    Ok((found, dropped)) => {
                        keys.extend(found.iter().map(ToString::to_string));
                        if !dropped.is_empty() {
                            shown.insert("dropped".into(), json!(dropped));
                        }
                    }
                    Err(error) => {
                        shown.insert("error".into(), json!(error.to_string()));
                    }
                }
            }
            all.extend(keys.iter().cloned());
            shown.insert("keys".into(), json!(keys));
            by.push(Value::Object(shown));
        }
        Ok(json!({
            "event": { "type": event.kind, "kind": kind.to_string(), "key": key.to_string() },
            "keys": all,
            "by": by,
        }))
    }

    /// The keys `object` maps to by `mapping`, and the keys a `map` returned that `run` drops
    /// (invalid, or outside the primary watch's namespace); or why the guest's call failed.
    async fn keys(
        &self,
        manifest: &Manifest,
        watch: &SecondaryWatch,
        object: &DynamicObject,
        indexes: &Indexes,
        map_context: &Arc<GuestContext>,
    ) -> anyhow::Result<(Vec<ObjectKey>, Vec<String>)> {
        match &watch.mapping {
            Mapping::Field { path, value } => {
                let text = serde_json::to_value(path)
                    .ok()
                    .and_then(|v| v.as_str().map(ToOwned::to_owned))
                    .unwrap_or_default();
                Ok((
                    indexes
                        .by_path
                        .get(&text)
                        .map(|index| index_keys(index, *value, object))
                        .unwrap_or_default(),
                    Vec::new(),
                ))
            }
            Mapping::Computed { index, value } => Ok((
                indexes
                    .computed
                    .get(index)
                    .map(|index| index_keys(index, *value, object))
                    .unwrap_or_default(),
                Vec::new(),
            )),
            Mapping::Function => {
                let kind = &watch.kind;
                let json = serde_json::to_string(object)?;
                let what = format!("{kind} {}", key_of(object));
                let call = CallContext::new(
                    map_context.clone(),
                    format!("map {what}"),
                    Some(tokio::runtime::Handle::current()),
                );
                match self.runtime.map_async(self.loaded, call, kind, json).await {
                    Mapped::Keys { keys, cut } => {
                        let named: Vec<String> = keys.iter().map(ToString::to_string).collect();
                        let kept = valid_keys(
                            &manifest.name,
                            &what,
                            keys,
                            map_context.scope.primary_namespace.as_deref(),
                        );
                        let mut dropped: Vec<String> = named
                            .into_iter()
                            .filter(|k| !kept.iter().any(|kept| kept.to_string() == *k))
                            .collect();
                        if cut {
                            dropped.push(format!(
                                "(more than {} keys: the rest)",
                                crate::sandbox::runtime::MAX_MAPPED_KEYS
                            ));
                        }
                        Ok((kept, dropped))
                    }
                    Mapped::Failed { result, message } => {
                        Err(anyhow::anyhow!("{}: {message}", result.as_str()))
                    }
                }
            }
            read => Ok((primary_keys(object, read, &manifest.primary), Vec::new())),
        }
    }
}

fn key_of(object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        namespace: object.metadata.namespace.clone(),
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}
