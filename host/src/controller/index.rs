//! Field indexes over a primary cache (client-go's `Indexer`, controller-runtime's
//! `IndexField`): for a `field` watch, which primaries' field at a path holds a value, so an
//! event of the watched kind finds its primaries without a scan and without a guest call.
//!
//! One index per path per controller, fed by its own subscription to the primary informer
//! (the list, then every change), so it holds what that cache holds (in sharded mode, this
//! replica's share). Cost: one entry per distinct value per primary object, plus the key kept
//! twice (value → keys, key → values); `reconciler_field_index_entries` counts the entries.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use kube::api::DynamicObject;
use parking_lot::Mutex;

use crate::informers::{InformerEvent, Subscription};
use crate::manifest::FieldPath;
use crate::objects::ObjectKey;

/// Which primaries hold which value at one path.
pub struct FieldIndex {
    path: FieldPath,
    entries: Mutex<Entries>,
}

/// Each key and value is allocated once and shared by both maps; a value's primaries are a
/// plain list, since most values name one or a few (a set per value cost 200 bytes more per
/// primary, measured with `./dev bench watches`).
#[derive(Default)]
struct Entries {
    by_value: HashMap<Arc<str>, Vec<Arc<ObjectKey>>>,
    by_key: HashMap<Arc<ObjectKey>, Vec<Arc<str>>>,
    count: usize,
}

impl FieldIndex {
    pub(super) fn new(path: FieldPath) -> Self {
        Self {
            path,
            entries: Mutex::default(),
        }
    }

    /// An empty index over the path `path` (`spec.source`, `spec.targets[*]`), or why the
    /// path is not one.
    pub fn parse(path: &str) -> Result<Self, String> {
        FieldPath::parse("field", path)
            .map(Self::new)
            .map_err(|e| e.to_string())
    }

    pub(crate) fn path(&self) -> &FieldPath {
        &self.path
    }

    /// Indexes `object` (none: the key's object is gone) in place of what the key held.
    pub fn update(&self, key: &ObjectKey, object: Option<&DynamicObject>) {
        let mut values: Vec<String> = object
            .map(|o| self.path.object_values(o))
            .unwrap_or_default();
        values.sort_unstable();
        values.dedup();
        let mut entries = self.entries.lock();
        let Entries {
            by_value,
            by_key,
            count,
        } = &mut *entries;
        if by_key.get(key).is_some_and(|old| {
            old.iter()
                .map(|v| &**v)
                .eq(values.iter().map(String::as_str))
        }) {
            return;
        }
        let shared = match by_key.remove_entry(key) {
            Some((shared, old)) => {
                for value in old {
                    if let Some(keys) = by_value.get_mut(&value) {
                        keys.retain(|k| **k != *key);
                        *count -= 1;
                        if keys.is_empty() {
                            by_value.remove(&value);
                        }
                    }
                }
                shared
            }
            None => Arc::new(key.clone()),
        };
        if values.is_empty() {
            return;
        }
        let mut held = Vec::with_capacity(values.len());
        for value in values {
            let value: Arc<str> = match by_value.get_key_value(value.as_str()) {
                Some((existing, _)) => existing.clone(),
                None => Arc::from(value),
            };
            by_value
                .entry(value.clone())
                .or_default()
                .push(shared.clone());
            held.push(value);
        }
        *count += held.len();
        by_key.insert(shared, held);
    }

    /// The primaries whose field holds `value`; only those in `namespace` when it is given.
    pub fn lookup(&self, value: &str, namespace: Option<&str>) -> Vec<ObjectKey> {
        let entries = self.entries.lock();
        entries
            .by_value
            .get(value)
            .into_iter()
            .flatten()
            .filter(|k| namespace.is_none_or(|ns| k.namespace.as_deref() == Some(ns)))
            .map(|k| (**k).clone())
            .collect()
    }

    /// Entries held: one per distinct value per primary object.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.lock().count
    }

    /// Whether it holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the index in step with the primary informer's events; `changed` is told after
    /// each update (for the entries gauge).
    pub(super) async fn follow(&self, mut events: Subscription, changed: impl Fn()) {
        while let Some(event) = events.next().await {
            let object = event.object();
            let key = ObjectKey {
                namespace: object.metadata.namespace.clone(),
                name: object.metadata.name.clone().unwrap_or_default(),
            };
            match &event {
                InformerEvent::Deleted { .. } => self.update(&key, None),
                InformerEvent::Applied { .. } | InformerEvent::Resync { .. } => {
                    self.update(&key, Some(object));
                }
            }
            changed();
        }
    }
}

impl FieldPath {
    /// The strings this path reaches in `object`: its metadata too when the path starts at
    /// `metadata`, else its body (`spec`, `status`, ...), which needs no conversion.
    pub(crate) fn object_values(&self, object: &DynamicObject) -> Vec<String> {
        let owned;
        let root = if self.to_string().starts_with("metadata") {
            owned = serde_json::json!({ "metadata": object.metadata });
            &owned
        } else {
            &object.data
        };
        self.values(root).into_iter().map(str::to_owned).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)] // called with `json!` literals
    fn mirror(namespace: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new(
            name,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
        .within(namespace);
        object.data = serde_json::json!({ "spec": spec });
        object
    }

    fn key(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    fn path(text: &str) -> FieldPath {
        FieldPath::parse("field", text).unwrap()
    }

    #[test]
    fn a_list_field_indexes_every_item_and_an_update_replaces_the_old_values() {
        let index = FieldIndex::new(path("spec.targetNamespaces[*]"));
        let a = mirror(
            "team",
            "a",
            serde_json::json!({"targetNamespaces": ["x", "y", "x"]}),
        );
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(index.lookup("x", None), vec![key("team", "a")]);
        assert_eq!(index.lookup("y", None), vec![key("team", "a")]);
        assert_eq!(index.len(), 2, "a repeated value is one entry");

        let a = mirror("team", "a", serde_json::json!({"targetNamespaces": ["z"]}));
        index.update(&key("team", "a"), Some(&a));
        assert!(index.lookup("x", None).is_empty(), "the old value is gone");
        assert_eq!(index.lookup("z", None), vec![key("team", "a")]);
        assert_eq!(index.len(), 1);

        index.update(&key("team", "a"), None);
        assert!(index.lookup("z", None).is_empty());
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn a_lookup_in_a_namespace_finds_only_that_namespaces_primaries() {
        let index = FieldIndex::new(path("spec.source"));
        for (ns, name) in [("a", "m1"), ("a", "m2"), ("b", "m3")] {
            let m = mirror(ns, name, serde_json::json!({"source": "settings"}));
            index.update(&key(ns, name), Some(&m));
        }
        let mut in_a = index.lookup("settings", Some("a"));
        in_a.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(in_a, vec![key("a", "m1"), key("a", "m2")]);
        assert_eq!(index.lookup("settings", None).len(), 3);
        assert!(index.lookup("other", None).is_empty());
    }

    #[test]
    fn values_that_are_not_strings_and_missing_fields_are_not_indexed() {
        let index = FieldIndex::new(path("spec.refs[*].name"));
        let m = mirror(
            "ns",
            "m",
            serde_json::json!({"refs": [{"name": "one"}, {"name": 2}, {"other": "x"}, "bare"]}),
        );
        index.update(&key("ns", "m"), Some(&m));
        assert_eq!(index.len(), 1);
        assert_eq!(index.lookup("one", None), vec![key("ns", "m")]);
        let empty = mirror("ns", "n", serde_json::json!({}));
        index.update(&key("ns", "n"), Some(&empty));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_metadata_path_reads_the_metadata() {
        let index = FieldIndex::new(path("metadata.name"));
        let m = mirror("ns", "m", serde_json::json!({}));
        index.update(&key("ns", "m"), Some(&m));
        assert_eq!(index.lookup("m", Some("ns")), vec![key("ns", "m")]);
    }
}
