//! Providers for the offline runner (`reconciler-host reconcile`): objects come from YAML/JSON
//! files into an in-memory cache, cluster writes are recorded and answered as the API server
//! would answer a successful write (so read-your-writes holds within the run), nothing is sent.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use serde_json::Value;
use wasmtime_wasi_http::Error as HttpError;

use crate::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use crate::config::ValueFrom;
use crate::sandbox::capabilities::http::{Outbound, OutboundRequest, OutboundResponse, ValueError};
use crate::sandbox::capabilities::lister::Listed;
use crate::sandbox::capabilities::{Cluster, Enqueuer, EventRecord, HostError, Lister, Providers};

/// The providers of the offline runner: `cache` serves reads and takes the recorded writes,
/// enqueues are recorded, networks live in `network`.
pub fn providers(
    cache: std::sync::Arc<MemoryCache>,
    network: Option<std::sync::Arc<dyn crate::sandbox::backends::NetworkBackend>>,
) -> Providers {
    let cluster = std::sync::Arc::new(RecordingCluster::new(cache.clone()));
    providers_writing_to(cache, cluster, network)
}

/// [`providers`] whose cluster writes go through `cluster`, which the reconcile step's own
/// writes share (one resourceVersion sequence).
pub(crate) fn providers_writing_to(
    cache: std::sync::Arc<MemoryCache>,
    cluster: std::sync::Arc<RecordingCluster>,
    network: Option<std::sync::Arc<dyn crate::sandbox::backends::NetworkBackend>>,
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
pub(crate) enum FixtureError {
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
    #[error("cannot read HTTP exchanges from {path}: {source}")]
    ReadExchanges {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path}: not a list of HTTP exchanges ({{method, url, status, headers?, body?}} or {{method, url, error}}): {source}"
    )]
    ParseExchanges {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("{path}: exchange {index} ({method} {url}): {why}")]
    BadExchange {
        path: PathBuf,
        index: usize,
        method: String,
        url: String,
        why: String,
    },
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
    pub(crate) fn load(paths: &[PathBuf]) -> Result<Self, FixtureError> {
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

    /// Every loaded object.
    pub(crate) fn all(&self) -> Vec<Value> {
        self.objects.lock().values().cloned().collect()
    }

    fn remove(&self, r: &ObjectRef) -> Option<Value> {
        self.objects.lock().remove(&cache_key(r))
    }

    /// The loaded objects of `kind` named `name`, in any namespace.
    fn named(&self, kind: &Gvk, name: &str) -> Vec<Value> {
        self.objects
            .lock()
            .values()
            .filter(|o| ObjectRef::of_object(o).is_some_and(|r| r.kind == *kind && r.name == name))
            .cloned()
            .collect()
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
pub(crate) struct RecordingCluster {
    cache: std::sync::Arc<MemoryCache>,
    next_version: Mutex<u64>,
    /// With [`RecordingCluster::with_namespaces`]: the namespaces that exist, so that an apply
    /// creating an object elsewhere is answered 404 as the API server answers it.
    namespaces: Option<Mutex<std::collections::BTreeSet<String>>>,
}

/// The namespaces every cluster has from its start.
const BUILT_IN_NAMESPACES: [&str; 4] = ["default", "kube-node-lease", "kube-public", "kube-system"];

impl RecordingCluster {
    pub(crate) fn new(cache: std::sync::Arc<MemoryCache>) -> Self {
        Self {
            cache,
            next_version: Mutex::new(1000),
            namespaces: None,
        }
    }

    /// Applies refuse to create an object in a namespace that does not exist, as the API
    /// server's `NamespaceLifecycle` admission does (404 `NotFound`). The loaded objects stand for
    /// a cluster: a namespace exists when a loaded Namespace has its name, when a loaded object
    /// lives in it (the server would not hold that object otherwise), when the run applied a
    /// Namespace of that name, or when every cluster has it (`default`, `kube-system`, ...).
    #[must_use]
    pub(crate) fn with_namespaces(mut self) -> Self {
        let namespace = Gvk::new("", "v1", "Namespace");
        let known = self
            .cache
            .objects
            .lock()
            .values()
            .filter_map(ObjectRef::of_object)
            .filter_map(|r| match r.namespace {
                Some(ns) => Some(ns),
                None => (r.kind == namespace).then_some(r.name),
            })
            .chain(BUILT_IN_NAMESPACES.map(str::to_owned))
            .collect();
        self.namespaces = Some(Mutex::new(known));
        self
    }

    /// The API server's answer to an apply that would create `target` in a namespace that does
    /// not exist; none when it may be written.
    fn missing_namespace(&self, target: &ObjectRef, exists: bool) -> Option<HostError> {
        let (Some(known), Some(ns), false) = (&self.namespaces, &target.namespace, exists) else {
            return None;
        };
        if known.lock().contains(ns) {
            return None;
        }
        Some(HostError::NotFound(format!(
            "apply of {target}: namespaces \"{ns}\" not found (404); offline, a namespace exists when a loaded object is in it or a loaded Namespace names it"
        )))
    }

    /// An applied Namespace exists from now on.
    fn created(&self, applied: &ObjectRef) {
        if let Some(known) = &self.namespaces
            && applied.namespace.is_none()
            && applied.kind == Gvk::new("", "v1", "Namespace")
        {
            known.lock().insert(applied.name.clone());
        }
    }

    /// A write's new `resourceVersion`: above every loaded object's, as the API server's
    /// versions only grow (a fixture saved from a cluster carries the cluster's).
    fn bump(&self, object: &mut Value) {
        let mut next = self.next_version.lock();
        let loaded = self
            .cache
            .objects
            .lock()
            .values()
            .filter_map(|o| {
                o.pointer("/metadata/resourceVersion")?
                    .as_str()?
                    .parse::<u64>()
                    .ok()
            })
            .max()
            .unwrap_or(0);
        *next = (*next).max(loaded) + 1;
        if let Some(meta) = object.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.insert("resourceVersion".into(), Value::String(next.to_string()));
        }
    }
}

/// RFC 7386 JSON merge patch.
pub(crate) fn merge_patch(target: &mut Value, patch: &Value) {
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

    /// Field ownership is not modelled: an unforced apply is written as a forced one (a
    /// conflict with another manager shows only against a real API server).
    async fn apply(
        &self,
        _manager: &str,
        object: &Value,
        _force: bool,
    ) -> Result<Value, HostError> {
        let r = ObjectRef::of_object(object).ok_or_else(|| {
            HostError::Invalid("the applied object needs apiVersion, kind and metadata.name".into())
        })?;
        let current = self.cache.get(&r);
        if let Some(refusal) = self.missing_namespace(&r, current.is_some()) {
            return Err(refusal);
        }
        preconditions(object, current.as_ref())?;
        let mut merged = current.unwrap_or(Value::Null);
        merge_patch(&mut merged, object);
        self.bump(&mut merged);
        self.cache.put(merged.clone());
        self.created(&r);
        Ok(merged)
    }

    async fn delete(&self, _manager: &str, object: &ObjectRef) -> Result<bool, HostError> {
        Ok(self.cache.remove(object).is_some())
    }

    async fn record_event(&self, _manager: &str, _event: &EventRecord) -> Result<(), HostError> {
        Ok(())
    }
}

/// The API server's answers to an apply whose `metadata.uid` or `resourceVersion` does not
/// match the object (a uid with no object: it refuses to create, 409; an empty one is no
/// precondition).
fn preconditions(applied: &Value, current: Option<&Value>) -> Result<(), HostError> {
    // Empty is no precondition, as on the API server.
    let field = |object: &Value, name: &str| {
        object["metadata"][name]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_owned)
    };
    if let Some(uid) = field(applied, "uid") {
        match current.and_then(|c| field(c, "uid")) {
            None => {
                return Err(HostError::Conflict(format!(
                    "uid mismatch: the provided object specified uid {uid}, and no existing object was found"
                )));
            }
            Some(theirs) if theirs != uid => {
                return Err(HostError::Conflict(format!(
                    "Precondition failed: UID in precondition: {uid}, UID in object meta: {theirs}"
                )));
            }
            Some(_) => {}
        }
    }
    // Against an existing object only: an apply carrying a resourceVersion of an object that
    // does not exist creates it (Kubernetes 1.37, checked with kubectl).
    if let (Some(version), Some(current)) = (field(applied, "resourceVersion"), current)
        && field(current, "resourceVersion") != Some(version)
    {
        return Err(HostError::Conflict(
            "the object has been modified; please apply your changes to the latest version and try again".into(),
        ));
    }
    Ok(())
}

impl RecordingCluster {
    /// The loaded object `object`, as the writes left it.
    pub(crate) fn object(&self, object: &ObjectRef) -> Option<Value> {
        self.cache.get(object)
    }

    /// Applies a JSON patch of the host's own (a finalizer's) to the cached object.
    pub(crate) fn json_patch(
        &self,
        object: &ObjectRef,
        ops: Vec<Value>,
    ) -> Result<Value, HostError> {
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

/// One exchange of a fixture file, as written.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ExchangeEntry {
    method: String,
    url: String,
    status: Option<u16>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    body: Option<Value>,
    error: Option<String>,
}

/// One exchange, checked: the request it answers and the answer.
struct Exchange {
    method: String,
    /// As `http::Uri` writes it, which is how the capability writes the request's.
    url: String,
    answer: Answer,
}

/// What one fixture exchange answers: a response, or the error text the guest is given.
#[derive(Clone)]
enum Answer {
    Response(OutboundResponse),
    Error(String),
}

/// Outbound HTTP of the offline runner: every request the capability let through is answered
/// by the first unused exchange of the fixture file with its method and URL, and one that has
/// none gets `unavailable` naming the request and the file. Nothing is resolved or sent, so
/// the live provider's address check does not apply here; the grant's checks do (they are the
/// capability's). The credentials a grant names are read from the loaded Secrets (`data`,
/// base64, or `stringData`) and `ConfigMap`s (`data`) of that name, as `run` reads them from the
/// host's namespace.
pub(crate) struct FixtureOutbound {
    /// The fixture file, named in answers to requests it has no exchange for.
    file: Option<PathBuf>,
    exchanges: Vec<Exchange>,
    used: Mutex<Vec<bool>>,
    cache: std::sync::Arc<MemoryCache>,
}

impl FixtureOutbound {
    /// The exchanges of `file` (a YAML or JSON list); none without one.
    pub(crate) fn load(
        file: Option<&Path>,
        cache: std::sync::Arc<MemoryCache>,
    ) -> Result<Self, FixtureError> {
        let exchanges = match file {
            Some(path) => read_exchanges(path)?,
            None => Vec::new(),
        };
        Ok(Self {
            file: file.map(Path::to_owned),
            used: Mutex::new(vec![false; exchanges.len()]),
            exchanges,
            cache,
        })
    }

    /// The same exchanges, their file named `name` in answers to requests it lacks: a case
    /// run from elsewhere tells the guest what a run in its own folder tells it.
    #[must_use]
    pub(crate) fn shown_as(mut self, name: &Path) -> Self {
        if self.file.is_some() {
            self.file = Some(name.to_owned());
        }
        self
    }

    /// Why no exchange answers `method url`, as the guest is told.
    fn missing(&self, method: &str, url: &str) -> String {
        let Some(file) = &self.file else {
            return format!(
                "unavailable: offline: no fixture for {method} {url}: no HTTP exchanges were given (name a file of them with reconcile --http FILE)"
            );
        };
        let answered = self
            .exchanges
            .iter()
            .filter(|e| e.method == method && e.url == url)
            .count();
        let more = if answered == 0 {
            String::new()
        } else {
            format!(" (its {answered} for this request answered earlier ones; each answers one)")
        };
        format!(
            "unavailable: offline: no fixture for {method} {url} in {}{more}; add {{method: {method}, url: {url}, status: 200}} to it",
            file.display()
        )
    }
}

fn read_exchanges(path: &Path) -> Result<Vec<Exchange>, FixtureError> {
    let text = std::fs::read_to_string(path).map_err(|source| FixtureError::ReadExchanges {
        path: path.to_owned(),
        source,
    })?;
    let entries: Vec<ExchangeEntry> =
        serde_yaml::from_str(&text).map_err(|source| FixtureError::ParseExchanges {
            path: path.to_owned(),
            source,
        })?;
    entries
        .into_iter()
        .enumerate()
        .map(|(i, entry)| {
            let bad = |why: &str| FixtureError::BadExchange {
                path: path.to_owned(),
                index: i + 1,
                method: entry.method.clone(),
                url: entry.url.clone(),
                why: why.to_owned(),
            };
            let url = entry
                .url
                .parse::<http::Uri>()
                .map_err(|e| bad(&format!("the url is not a URL: {e}")))?
                .to_string();
            let answer = match (&entry.status, &entry.error) {
                (Some(status), None) => {
                    let shape = serde_json::json!({"status": status, "headers": entry.headers, "body": entry.body});
                    Answer::Response(crate::sandbox::capabilities::http::response_from_json(&shape).map_err(|_| {
                        bad("status is 100 to 999, headers are names and values HTTP allows, body is text or {base64: ...}")
                    })?)
                }
                (None, Some(error)) if entry.headers.is_empty() && entry.body.is_none() => {
                    Answer::Error(error.clone())
                }
                _ => return Err(bad("give either status (with headers and body) or error")),
            };
            Ok(Exchange {
                method: entry.method.to_ascii_uppercase(),
                url,
                answer,
            })
        })
        .collect()
}

#[async_trait]
impl Outbound for FixtureOutbound {
    async fn send(&self, request: OutboundRequest) -> Result<OutboundResponse, HttpError> {
        let method = request.method.as_str();
        let url = request.uri.to_string();
        let found = {
            let mut used = self.used.lock();
            let found = (0..self.exchanges.len()).find(|&i| {
                !used[i] && self.exchanges[i].method == method && self.exchanges[i].url == url
            });
            if let Some(i) = found {
                used[i] = true;
            }
            found
        };
        let Some(i) = found else {
            return Err(HttpError::InternalError(Some(self.missing(method, &url))));
        };
        let response = match self.exchanges[i].answer.clone() {
            Answer::Response(response) => response,
            Answer::Error(text) => return Err(HttpError::InternalError(Some(text))),
        };
        // The live provider's cap on what it reads, so a fixture cannot pass what `run` cuts.
        if response.body.len() > request.max_body {
            return Err(HttpError::HttpResponseBodySize(Some(
                response.body.len() as u64
            )));
        }
        Ok(response)
    }

    async fn value(&self, from: &ValueFrom) -> Result<Vec<u8>, ValueError> {
        let (kind, r) = match from {
            ValueFrom::SecretKeyRef(r) => ("Secret", r),
            ValueFrom::ConfigMapKeyRef(r) => ("ConfigMap", r),
        };
        let mut found = self.cache.named(&Gvk::new("", "v1", kind), &r.name);
        let object = match found.len() {
            0 => {
                return Err(ValueError::NotLoaded {
                    kind,
                    name: r.name.clone(),
                    key: r.key.clone(),
                });
            }
            1 => found.remove(0),
            _ => {
                let namespaces: Vec<String> = found
                    .iter()
                    .filter_map(|o| ObjectRef::of_object(o).and_then(|r| r.namespace))
                    .collect();
                return Err(ValueError::Ambiguous {
                    kind,
                    name: r.name.clone(),
                    namespaces: namespaces.join(", "),
                });
            }
        };
        let text = |field: &str| {
            object
                .get(field)
                .and_then(|d| d.get(&r.key))
                .and_then(Value::as_str)
        };
        if kind == "Secret" {
            if let Some(plain) = text("stringData") {
                return Ok(plain.as_bytes().to_vec());
            }
            if let Some(encoded) = text("data") {
                use base64::Engine as _;
                return base64::engine::general_purpose::STANDARD
                    .decode(encoded)
                    .map_err(|_| ValueError::NotBase64 {
                        object: r.name.clone(),
                        key: r.key.clone(),
                    });
            }
        } else if let Some(plain) = text("data") {
            return Ok(plain.as_bytes().to_vec());
        }
        Err(ValueError::NoKey {
            kind,
            object: r.name.clone(),
            key: r.key.clone(),
        })
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
    use std::sync::Arc;

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
        let selector = crate::cluster::informers::parse_selector("app=x").unwrap();
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

    fn config_map(namespace: &str) -> Value {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "copy", "namespace": namespace}, "data": {"a": "1"}})
    }

    /// As the API server's `NamespaceLifecycle` admission: an apply that would create an object
    /// in a namespace nobody made is 404 `NotFound`, and nothing is written.
    #[tokio::test]
    async fn an_apply_into_a_namespace_that_does_not_exist_is_not_found() {
        let cache = Arc::new(MemoryCache::default());
        cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "source", "namespace": "apps"}}));
        cache.put(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "mirror-a"}}));
        let cluster = RecordingCluster::new(cache.clone()).with_namespaces();
        for namespace in ["apps", "mirror-a", "default", "kube-system"] {
            let applied = cluster.apply("g", &config_map(namespace), true).await;
            assert!(applied.is_ok(), "{namespace}: {applied:?}");
        }
        let err = cluster
            .apply("g", &config_map("ghost"), true)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, HostError::NotFound(m)
                if m.starts_with("apply of v1/ConfigMap ghost/copy: namespaces \"ghost\" not found (404)")),
            "{err:?}"
        );
        let ghost = ObjectRef::of_object(&config_map("ghost")).unwrap();
        assert!(cache.get(&ghost).is_none(), "written anyway");

        let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "ghost"}});
        cluster.apply("g", &namespace, true).await.unwrap();
        let applied = cluster.apply("g", &config_map("ghost"), true).await;
        assert!(applied.is_ok(), "after its Namespace: {applied:?}");

        // Unless asked, any namespace is taken (the capabilities' own tests load nothing).
        let lax = RecordingCluster::new(Arc::new(MemoryCache::default()));
        assert!(lax.apply("g", &config_map("anywhere"), true).await.is_ok());
    }

    /// A fixture saved from a cluster carries its versions: a write goes above the highest of
    /// them, as the API server's versions only grow.
    #[tokio::test]
    async fn a_write_gets_a_resource_version_above_every_loaded_one() {
        let cache = Arc::new(MemoryCache::default());
        let loaded = |name: &str, version: &str| {
            serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": "apps", "resourceVersion": version}})
        };
        cache.put(loaded("a", "3001"));
        cache.put(loaded("b", "17"));
        let cluster = RecordingCluster::new(cache.clone());
        let version = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let first = cluster.apply("g", &config_map("apps"), true).await.unwrap();
        assert_eq!(version(&first), "3002");
        let second = cluster.apply("g", &config_map("apps"), true).await.unwrap();
        assert_eq!(version(&second), "3003");

        // With nothing loaded, versions start where they always did.
        let empty = RecordingCluster::new(Arc::new(MemoryCache::default()));
        let applied = empty.apply("g", &config_map("apps"), true).await.unwrap();
        assert_eq!(version(&applied), "1001");
    }

    fn get(url: &str) -> OutboundRequest {
        OutboundRequest {
            method: http::Method::GET,
            uri: url.parse().unwrap(),
            headers: http::HeaderMap::new(),
            body: bytes::Bytes::new(),
            addresses: crate::sandbox::capabilities::http::AddressPolicy { literal: None },
            ca_bundle: None,
            deadline: std::time::Instant::now() + Duration::from_secs(5),
            connect_timeout: None,
            first_byte_timeout: None,
            between_bytes_timeout: None,
            max_body: 1 << 20,
        }
    }

    fn error_text(result: Result<OutboundResponse, HttpError>) -> String {
        match result {
            Err(e) => crate::sandbox::capabilities::http::error_text(&e),
            Ok(r) => panic!("answered {}", r.status),
        }
    }

    #[tokio::test]
    async fn each_request_takes_the_first_unused_exchange_and_one_without_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("http.yaml");
        std::fs::write(
            &file,
            "- {method: get, url: 'http://api.test', status: 200, body: first}\n\
             - {method: GET, url: 'http://api.test/', status: 503, headers: {retry-after: '1'}}\n\
             - {method: GET, url: 'http://api.test/down', error: ConnectionRefused}\n",
        )
        .unwrap();
        let outbound = FixtureOutbound::load(Some(&file), Arc::default()).unwrap();
        let first = outbound.send(get("http://api.test/")).await.unwrap();
        assert_eq!(
            (first.status.as_u16(), &first.body[..]),
            (200, &b"first"[..])
        );
        let second = outbound.send(get("http://api.test/")).await.unwrap();
        assert_eq!(second.status.as_u16(), 503);
        assert_eq!(second.headers["retry-after"], "1");
        let third = error_text(outbound.send(get("http://api.test/")).await);
        assert_eq!(
            third,
            format!(
                "unavailable: offline: no fixture for GET http://api.test/ in {} (its 2 for this request answered earlier ones; each answers one); add {{method: GET, url: http://api.test/, status: 200}} to it",
                file.display()
            )
        );
        assert_eq!(
            error_text(outbound.send(get("http://api.test/down")).await),
            "ConnectionRefused"
        );

        let none = FixtureOutbound::load(None, Arc::default()).unwrap();
        assert!(
            error_text(none.send(get("http://api.test/")).await).contains(
                "no HTTP exchanges were given (name a file of them with reconcile --http FILE)"
            )
        );
    }

    #[test]
    fn a_bad_exchange_is_refused_naming_the_file_and_the_entry() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("http.yaml");
        let refused = |text: &str| {
            std::fs::write(&file, text).unwrap();
            match FixtureOutbound::load(Some(&file), Arc::default()) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{text} was accepted"),
            }
        };
        let err = refused("- {method: GET, url: 'http://a.test/', status: 200, error: boom}\n");
        assert_eq!(
            err,
            format!(
                "{}: exchange 1 (GET http://a.test/): give either status (with headers and body) or error",
                file.display()
            )
        );
        let err = refused("- {method: GET, url: 'http://a.test/', status: 200, body: [1]}\n");
        assert!(err.contains("body is text or {base64: ...}"), "{err}");
        let err = refused("- {method: GET, url: 'http://a.test/', stauts: 200}\n");
        assert!(err.contains("not a list of HTTP exchanges"), "{err}");
    }

    #[tokio::test]
    async fn credentials_are_read_from_the_loaded_secrets_and_config_maps() {
        use crate::config::KeyRef;
        let cache = Arc::new(MemoryCache::default());
        let secret = |ns: &str, name: &str, data: Value| {
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": ns}, "data": data})
        };
        cache.put(secret(
            "host",
            "api",
            serde_json::json!({"key": "czNjcjN0"}),
        ));
        cache.put(secret(
            "host",
            "bad",
            serde_json::json!({"key": "not base64!"}),
        ));
        cache.put(secret("a", "twice", serde_json::json!({})));
        cache.put(secret("b", "twice", serde_json::json!({})));
        let mut plain = secret("host", "plain", serde_json::json!({"key": "aWdub3JlZA=="}));
        plain["stringData"] = serde_json::json!({"key": "as written"});
        cache.put(plain);
        cache.put(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "ca", "namespace": "host"}, "data": {"pem": "-----BEGIN"}}));
        let outbound = FixtureOutbound::load(None, cache).unwrap();
        let of = |name: &str, key: &str| {
            ValueFrom::SecretKeyRef(KeyRef {
                name: name.into(),
                key: key.into(),
            })
        };
        assert_eq!(outbound.value(&of("api", "key")).await.unwrap(), b"s3cr3t");
        assert_eq!(
            outbound.value(&of("plain", "key")).await.unwrap(),
            b"as written",
            "stringData wins, as on the API server"
        );
        let map = ValueFrom::ConfigMapKeyRef(KeyRef {
            name: "ca".into(),
            key: "pem".into(),
        });
        assert_eq!(outbound.value(&map).await.unwrap(), b"-----BEGIN");
        for (name, key, why) in [
            ("api", "other", "Secret api has no key other"),
            ("bad", "key", "Secret bad key key is not base64"),
            ("gone", "key", "Secret gone is not among the loaded objects"),
            ("twice", "key", "in several namespaces (a, b)"),
        ] {
            let err = outbound
                .value(&of(name, key))
                .await
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{name}: {err}");
            assert!(!err.contains("s3cr3t"), "{err}");
        }
    }
}
