//! Providers for the offline runner (`reconciler-host reconcile`): objects come from YAML/JSON
//! files into an in-memory cache, cluster writes are recorded and answered as the API server
//! would answer a successful write (so read-your-writes holds within the run), nothing is sent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;

use crate::capabilities::lister::Listed;
use crate::capabilities::{Cluster, Enqueuer, EventRecord, HostError, Lister, Providers};
use crate::objects::{Gvk, ObjectKey, ObjectRef};

/// The providers of the offline runner: `cache` serves reads and takes the recorded writes,
/// enqueues are recorded, networks live in `network`.
pub fn providers(
    cache: std::sync::Arc<MemoryCache>,
    network: Option<std::sync::Arc<dyn crate::backends::NetworkBackend>>,
) -> Providers {
    let cluster = std::sync::Arc::new(RecordingCluster::new(cache.clone()));
    providers_writing_to(cache, cluster, network)
}

/// [`providers`] whose cluster writes go through `cluster`, which the reconcile step's own
/// writes share (one resourceVersion sequence).
pub fn providers_writing_to(
    cache: std::sync::Arc<MemoryCache>,
    cluster: std::sync::Arc<RecordingCluster>,
    network: Option<std::sync::Arc<dyn crate::backends::NetworkBackend>>,
) -> Providers {
    Providers {
        lister: cache,
        cluster,
        queue: std::sync::Arc::new(RecordingQueue::default()),
        network,
        http: None,
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FixtureError {
    #[error("cannot read objects from {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: document {index} is not valid YAML or JSON: {source}")]
    Parse {
        path: PathBuf,
        index: usize,
        source: serde_yaml::Error,
    },
    #[error(
        "{path}: document {index} is not a Kubernetes object: it needs apiVersion, kind and metadata.name"
    )]
    NotAnObject { path: PathBuf, index: usize },
}

/// An in-memory object cache keyed by reference.
#[derive(Debug, Default)]
pub struct MemoryCache {
    objects: Mutex<BTreeMap<String, Value>>,
}

fn cache_key(r: &ObjectRef) -> String {
    format!(
        "{}|{}|{}",
        r.kind,
        r.namespace.as_deref().unwrap_or(""),
        r.name
    )
}

impl MemoryCache {
    /// Loads every object from the given files and directories (sorted, `.yaml`/`.yml`/`.json`);
    /// multi-document YAML and `kind: List` documents are expanded.
    pub fn load(paths: &[PathBuf]) -> Result<Self, FixtureError> {
        let cache = Self::default();
        for path in paths {
            for file in files_under(path)? {
                cache.load_file(&file)?;
            }
        }
        Ok(cache)
    }

    fn load_file(&self, path: &Path) -> Result<(), FixtureError> {
        let text = std::fs::read_to_string(path).map_err(|source| FixtureError::Read {
            path: path.to_owned(),
            source,
        })?;
        for (index, document) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value = <Value as serde::Deserialize>::deserialize(document).map_err(|source| {
                FixtureError::Parse {
                    path: path.to_owned(),
                    index: index + 1,
                    source,
                }
            })?;
            if value.is_null() {
                continue;
            }
            let items = match value.get("items").and_then(Value::as_array) {
                Some(items)
                    if value
                        .get("kind")
                        .and_then(Value::as_str)
                        .is_some_and(|k| k.ends_with("List")) =>
                {
                    items.clone()
                }
                _ => vec![value],
            };
            for item in items {
                if ObjectRef::of_object(&item).is_none() {
                    return Err(FixtureError::NotAnObject {
                        path: path.to_owned(),
                        index: index + 1,
                    });
                }
                self.put(item);
            }
        }
        Ok(())
    }

    pub fn put(&self, object: Value) {
        if let Some(r) = ObjectRef::of_object(&object) {
            self.objects.lock().insert(cache_key(&r), object);
        }
    }

    pub fn get(&self, r: &ObjectRef) -> Option<Value> {
        self.objects.lock().get(&cache_key(r)).cloned()
    }

    fn remove(&self, r: &ObjectRef) -> Option<Value> {
        self.objects.lock().remove(&cache_key(r))
    }
}

fn files_under(path: &Path) -> Result<Vec<PathBuf>, FixtureError> {
    let read_err = |source| FixtureError::Read {
        path: path.to_owned(),
        source,
    };
    if !path.is_dir() {
        std::fs::metadata(path).map_err(read_err)?;
        return Ok(vec![path.to_owned()]);
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(path).map_err(read_err)? {
        let entry = entry.map_err(read_err)?.path();
        if entry.is_dir() {
            files.extend(files_under(&entry)?);
        } else if matches!(
            entry.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml" | "json")
        ) {
            files.push(entry);
        }
    }
    files.sort();
    Ok(files)
}

impl Lister for MemoryCache {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError> {
        Ok(MemoryCache::get(self, object).map(|v| v.to_string()))
    }

    /// Serialises each match (the cache keeps trees): the copy is made before the capability
    /// sizes the result, which is acceptable here, where the objects come from the operator's
    /// own files.
    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        selector: Option<&kube::core::Selector>,
    ) -> Result<Vec<std::sync::Arc<dyn Listed>>, HostError> {
        let objects = self.objects.lock();
        Ok(objects
            .values()
            .filter(|o| {
                let Some(r) = ObjectRef::of_object(o) else {
                    return false;
                };
                r.kind == *kind && namespace.is_none_or(|ns| r.namespace.as_deref() == Some(ns))
            })
            .filter(|o| {
                selector.is_none_or(|s| {
                    use kube::core::SelectorExt;
                    let labels: BTreeMap<String, String> = o
                        .pointer("/metadata/labels")
                        .and_then(|l| serde_json::from_value(l.clone()).ok())
                        .unwrap_or_default();
                    s.matches(&labels)
                })
            })
            .map(|o| std::sync::Arc::new(o.to_string()) as std::sync::Arc<dyn Listed>)
            .collect())
    }

    fn visits(&self, _: &Gvk, _: Option<&str>) -> usize {
        self.objects.lock().len()
    }
}

/// Answers writes from the in-memory cache as a successful API server would, bumping
/// `resourceVersion` (and `generation` on spec changes is not modelled: status and apply only).
pub struct RecordingCluster {
    cache: std::sync::Arc<MemoryCache>,
    next_version: Mutex<u64>,
}

impl RecordingCluster {
    pub fn new(cache: std::sync::Arc<MemoryCache>) -> Self {
        Self {
            cache,
            next_version: Mutex::new(1000),
        }
    }

    fn bump(&self, object: &mut Value) {
        let mut next = self.next_version.lock();
        *next += 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(next.to_string()));
        }
    }
}

/// RFC 7386 JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    if let Value::Object(target) = target {
        for (key, value) in patch {
            if value.is_null() {
                target.remove(key);
            } else {
                merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

#[async_trait]
impl Cluster for RecordingCluster {
    async fn patch_status(
        &self,
        _manager: &str,
        object: &ObjectRef,
        patch: &Value,
    ) -> Result<Value, HostError> {
        let mut current = self.cache.get(object).ok_or_else(|| {
            HostError::NotFound(format!("{object} is not among the loaded objects"))
        })?;
        // Only `status` is written through the status subresource, as on a real server.
        if let Some(status) = patch.get("status") {
            let mut merged = current.get("status").cloned().unwrap_or(Value::Null);
            merge_patch(&mut merged, status);
            current["status"] = merged;
        }
        self.bump(&mut current);
        self.cache.put(current.clone());
        Ok(current)
    }

    async fn get(&self, object: &ObjectRef) -> Result<Option<Value>, HostError> {
        Ok(self.cache.get(object))
    }

    async fn apply(&self, _manager: &str, object: &Value) -> Result<Value, HostError> {
        let r = ObjectRef::of_object(object).ok_or_else(|| {
            HostError::Invalid("the applied object needs apiVersion, kind and metadata.name".into())
        })?;
        let mut merged = self.cache.get(&r).unwrap_or(Value::Null);
        merge_patch(&mut merged, object);
        self.bump(&mut merged);
        self.cache.put(merged.clone());
        Ok(merged)
    }

    async fn delete(&self, _manager: &str, object: &ObjectRef) -> Result<bool, HostError> {
        Ok(self.cache.remove(object).is_some())
    }

    async fn record_event(&self, _manager: &str, _event: &EventRecord) -> Result<(), HostError> {
        Ok(())
    }
}

impl RecordingCluster {
    /// The loaded object `object`, as the writes left it.
    pub fn object(&self, object: &ObjectRef) -> Option<Value> {
        self.cache.get(object)
    }

    /// Applies a JSON patch of the host's own (a finalizer's) to the cached object.
    pub fn json_patch(&self, object: &ObjectRef, ops: Vec<Value>) -> Result<Value, HostError> {
        let mut current = self.cache.get(object).ok_or_else(|| {
            HostError::NotFound(format!("{object} is not among the loaded objects"))
        })?;
        let patch: json_patch::Patch = serde_json::from_value(Value::Array(ops))
            .map_err(|e| HostError::Other(format!("building the patch: {e}")))?;
        json_patch::patch(&mut current, &patch).map_err(|e| HostError::Conflict(e.to_string()))?;
        self.bump(&mut current);
        self.cache.put(current.clone());
        Ok(current)
    }
}

/// Accepts every enqueue (the recorded call is the observable effect) and remembers the
/// distinct keys, as a queue would hold them.
#[derive(Default)]
pub struct RecordingQueue {
    keys: Mutex<std::collections::BTreeSet<ObjectKey>>,
}

impl Enqueuer for RecordingQueue {
    fn enqueue(&self, key: ObjectKey, _after: Option<Duration>) -> Result<(), HostError> {
        self.keys.lock().insert(key);
        Ok(())
    }

    fn pending(&self) -> usize {
        self.keys.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut target = serde_json::json!({"a": {"b": 1, "c": 2}, "d": [1]});
        merge_patch(
            &mut target,
            &serde_json::json!({"a": {"b": null, "e": 3}, "d": [2]}),
        );
        assert_eq!(target, serde_json::json!({"a": {"c": 2, "e": 3}, "d": [2]}));
    }

    #[test]
    fn loads_multi_document_yaml_and_lists_and_refuses_non_objects() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("a.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: n, labels: {app: x}}\n---\n\
             apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b, namespace: n}\n",
        )
        .unwrap();
        let cache = MemoryCache::load(&[dir.path().to_owned()]).unwrap();
        let cm = Gvk::new("", "v1", "ConfigMap");
        assert_eq!(Lister::list(&cache, &cm, Some("n"), None).unwrap().len(), 2);
        let selector = crate::informers::parse_selector("app=x").unwrap();
        assert_eq!(
            Lister::list(&cache, &cm, None, Some(&selector))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            Lister::list(&cache, &cm, Some("other"), None)
                .unwrap()
                .len(),
            0
        );

        std::fs::write(dir.path().join("b.yaml"), "kind: Thing\n").unwrap();
        let err = MemoryCache::load(&[dir.path().to_owned()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("b.yaml: document 1 is not a Kubernetes object"),
            "{err}"
        );
    }
}
