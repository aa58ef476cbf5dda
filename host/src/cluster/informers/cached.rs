//! How an informer keeps one object: its JSON text, stored once.
//!
//! Why not the `DynamicObject` the watch delivers: as a tree (`serde_json::Value` maps of
//! `String`s, one allocation per key and per string) a typical custom resource takes three to
//! four times its JSON size, and a reconcile hands the guest JSON text anyway. So the cache keeps
//! the compact text plus the few fields the cache itself reads (resourceVersion, labels for
//! selectors, whether deletion was requested), and parses on demand: [`CachedObject::to_object`]
//! for callers that want a tree, [`CachedObject::json`] (free) for callers that want text.
//!
//! `metadata.managedFields` is dropped before an object is stored, unless the informers were
//! built with `Options::keep_managed_fields` (environment: `RECONCILER_KEEP_MANAGED_FIELDS=1`):
//! it is bookkeeping for server-side apply, often larger than the rest of the metadata, and a
//! reconcile rarely reads it (controller-runtime offers the same as a cache transform).
//!
//! An informer that watches only metadata (`Informers::acquire_metadata`) stores each object's
//! `apiVersion`, `kind` and `metadata` and marks it [`CachedObject::is_partial`]; such an
//! object is never handed to a guest (reads first upgrade the informer to full objects).

use std::collections::BTreeMap;

use kube::api::{DynamicObject, ObjectMeta, TypeMeta};
use kube::core::{Expression, Selector};
use serde::Deserialize;

/// One cached object. Cheap to share (`Arc`); immutable.
pub struct CachedObject {
    json: Box<str>,
    resource_version: Option<Version>,
    /// `key\0value\0key\0value`, sorted by key (neither may hold a NUL): one allocation of the
    /// labels' own length, where a `BTreeMap` of them takes its first node (540 bytes) and two
    /// allocations per label. Selectors test them through [`SelectorMatcher`].
    labels: Option<Box<str>>,
    deletion_requested: bool,
    /// Only `apiVersion`, `kind` and `metadata`: from a metadata-only watch.
    partial: bool,
}

/// A resourceVersion, inline when short (etcd's are decimal integers of a few digits), so the
/// common case costs no allocation of its own.
enum Version {
    Inline { len: u8, bytes: [u8; 22] },
    Long(Box<str>),
}

impl Version {
    fn new(rv: &str) -> Self {
        let mut bytes = [0; 22];
        match u8::try_from(rv.len()) {
            Ok(len) if rv.len() <= bytes.len() => {
                bytes[..rv.len()].copy_from_slice(rv.as_bytes());
                Self::Inline { len, bytes }
            }
            _ => Self::Long(rv.into()),
        }
    }

    fn as_str(&self) -> &str {
        match self {
            // Copied whole from a `&str`, so valid UTF-8 up to `len`.
            Self::Inline { len, bytes } => {
                std::str::from_utf8(&bytes[..usize::from(*len)]).unwrap_or_default()
            }
            Self::Long(rv) => rv,
        }
    }
}

impl std::fmt::Debug for CachedObject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedObject")
            .field("resource_version", &self.resource_version())
            .field("bytes", &self.json.len())
            .field("partial", &self.partial)
            .finish_non_exhaustive()
    }
}

/// `labels` as `key\0value\0…` in key order; none when empty.
fn packed(labels: &BTreeMap<String, String>) -> Option<Box<str>> {
    if labels.is_empty() {
        return None;
    }
    let mut text = String::with_capacity(labels.iter().map(|(k, v)| k.len() + v.len() + 2).sum());
    for (key, value) in labels {
        if !text.is_empty() {
            text.push('\0');
        }
        text.push_str(key);
        text.push('\0');
        text.push_str(value);
    }
    Some(text.into_boxed_str())
}

/// A label selector ready to test cached objects: its requirements once, each object's labels
/// looked up where they are kept (no map built per object). The same answers as
/// `kube::core::Selector::matches` on the object's labels.
pub struct SelectorMatcher(Vec<Expression>);

impl SelectorMatcher {
    /// Cost: one copy of the selector's requirements.
    pub fn new(selector: &Selector) -> Self {
        Self(selector.clone().into_iter().collect())
    }

    /// Whether `object`'s labels satisfy every requirement. O(requirements × labels).
    pub fn matches(&self, object: &CachedObject) -> bool {
        self.0.iter().all(|requirement| {
            let value = |key: &str| object.label(key);
            match requirement {
                Expression::In(key, values) => value(key).is_some_and(|v| values.contains(v)),
                Expression::NotIn(key, values) => value(key).is_none_or(|v| !values.contains(v)),
                Expression::Exists(key) => value(key).is_some(),
                Expression::DoesNotExist(key) => value(key).is_none(),
                Expression::Equal(key, wanted) => value(key) == Some(wanted.as_str()),
                Expression::NotEqual(key, unwanted) => value(key) != Some(unwanted.as_str()),
            }
        })
    }
}

/// The part of an object that event consumers (key mapping, generation checks) read.
#[derive(Deserialize)]
struct Head {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    #[serde(default)]
    metadata: ObjectMeta,
}

impl CachedObject {
    /// Serialises `obj` (cost: one `serde_json::to_string`, a few µs for a typical object).
    ///
    /// # Errors
    ///
    /// When `obj` does not serialise (a `DynamicObject` read from JSON always does).
    pub(crate) fn new(obj: &DynamicObject) -> Result<Self, serde_json::Error> {
        Self::with_form(obj, false)
    }

    /// As [`CachedObject::new`]; `partial`: `obj` holds only the metadata (see
    /// [`CachedObject::is_partial`]).
    pub(crate) fn with_form(obj: &DynamicObject, partial: bool) -> Result<Self, serde_json::Error> {
        // Printed into a buffer kept per thread, then copied into an allocation of the exact
        // size: growing a fresh `String` would leave every intermediate size behind as a hole in
        // the heap, and a cache of many objects would keep those holes.
        thread_local! {
            static BUFFER: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let json = BUFFER.with_borrow_mut(|buffer| {
            buffer.clear();
            serde_json::to_writer(&mut *buffer, obj)?;
            // serde_json writes valid UTF-8.
            let text = std::str::from_utf8(buffer).map_err(serde::ser::Error::custom)?;
            let boxed: Box<str> = text.into();
            if buffer.capacity() > 1 << 20 {
                *buffer = Vec::new();
            }
            Ok::<_, serde_json::Error>(boxed)
        })?;
        Ok(Self {
            json,
            resource_version: obj.metadata.resource_version.as_deref().map(Version::new),
            labels: obj.metadata.labels.as_ref().and_then(packed),
            deletion_requested: obj.metadata.deletion_timestamp.is_some(),
            partial,
        })
    }

    /// Only the object's `apiVersion`, `kind` and `metadata` are here: it came from a
    /// metadata-only watch (`PartialObjectMetadata`), and its body was never received.
    pub fn is_partial(&self) -> bool {
        self.partial
    }

    /// The object as JSON text, exactly what a guest receives. Free.
    pub fn json(&self) -> &str {
        &self.json
    }

    pub(crate) fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_ref().map(Version::as_str)
    }

    /// The value of label `key`. O(labels).
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        let mut parts = self.labels.as_deref()?.split('\0');
        while let (Some(k), Some(v)) = (parts.next(), parts.next()) {
            if k == key {
                return Some(v);
            }
        }
        None
    }

    /// `metadata.deletionTimestamp` is set.
    pub(crate) fn deletion_requested(&self) -> bool {
        self.deletion_requested
    }

    /// The object as a tree. Cost: one parse of [`CachedObject::json`] (tens of µs for a typical
    /// custom resource). `None` only if the text does not parse back, which text written by
    /// [`CachedObject::new`] always does.
    pub(crate) fn to_object(&self) -> Option<DynamicObject> {
        serde_json::from_str(&self.json)
            .inspect_err(|e| tracing::error!(error = %e, "a cached object does not parse back"))
            .ok()
    }

    /// The object's `apiVersion`, `kind` and `metadata`, with `data` null: what event
    /// consumers read, at a fraction of a full parse (nothing outside `metadata` is built).
    pub fn to_head(&self) -> Option<DynamicObject> {
        let head: Head = serde_json::from_str(&self.json)
            .inspect_err(|e| tracing::error!(error = %e, "a cached object does not parse back"))
            .ok()?;
        Some(DynamicObject {
            types: Some(TypeMeta {
                api_version: head.api_version,
                kind: head.kind,
            }),
            metadata: head.metadata,
            data: serde_json::Value::Null,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_text_and_what_the_store_reads() {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "namespace": "a", "name": "x", "resourceVersion": "7", "generation": 3,
                "labels": {"app": "web"}, "deletionTimestamp": "2026-01-01T00:00:00Z",
            },
            "data": {"k": "v"},
        }))
        .unwrap();
        let cached = CachedObject::new(&obj).unwrap();
        assert_eq!(cached.resource_version(), Some("7"));
        assert_eq!(cached.label("app"), Some("web"));
        assert_eq!(cached.label("ap"), None);
        assert!(cached.deletion_requested());
        let back = cached.to_object().unwrap();
        assert_eq!(back.data, obj.data);
        assert_eq!(back.metadata, obj.metadata);
        let json: serde_json::Value = serde_json::from_str(cached.json()).unwrap();
        assert_eq!(json["data"]["k"], "v");
        let head = cached.to_head().unwrap();
        assert_eq!(head.metadata, obj.metadata);
        assert_eq!(head.types.unwrap().kind, "ConfigMap");
        assert!(head.data.is_null(), "the head leaves the body out");
    }

    #[test]
    fn selectors_match_packed_labels_as_kube_matches_a_map() {
        use kube::core::SelectorExt as _;
        let label_sets: [&[(&str, &str)]; 5] = [
            &[],
            &[("app", "web")],
            &[("app", "db"), ("tier", "")],
            &[("app.kubernetes.io/name", "x"), ("app", "web"), ("z", "1")],
            &[("a", "app"), ("app", "a")],
        ];
        let selectors = [
            "",
            "app",
            "!app",
            "app=web",
            "app!=web",
            "app in (web,db)",
            "app notin (web)",
            "tier=",
            "tier",
            "app=web,z=1",
            "app.kubernetes.io/name=x,!tier",
            "a=app,app=a",
        ];
        for labels in label_sets {
            let map: BTreeMap<String, String> = labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "x"},
            }))
            .unwrap();
            obj.metadata.labels = Some(map.clone());
            let cached = CachedObject::new(&obj).unwrap();
            for text in selectors {
                let selector = crate::cluster::selector::parse_selector(text).unwrap();
                assert_eq!(
                    SelectorMatcher::new(&selector).matches(&cached),
                    selector.matches(&map),
                    "{text:?} on {labels:?}"
                );
            }
        }
    }

    #[test]
    fn resource_versions_short_and_long() {
        for rv in [
            "",
            "7",
            "1234567890123456789012",
            "12345678901234567890123",
            "ünïcode-ẞ",
        ] {
            assert_eq!(Version::new(rv).as_str(), rv);
        }
        assert!(matches!(Version::new("85528"), Version::Inline { .. }));
    }
}
