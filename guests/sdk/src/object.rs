//! Naming objects: kinds ([`Gvk`]), references ([`ObjectRef`]), queue keys ([`ObjectKey`]),
//! and reading the object a [`Request`] carries.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{Gvk, ObjectKey, ObjectRef, ReconcileError, Request};

/// A [`Gvk`] from its parts, or from a `k8s-openapi` type.
///
/// ```ignore
/// let network = gvk!("samplecrd.k8s.io", "v1", "Network");
/// let config_map = gvk!(k8s_openapi::api::core::v1::ConfigMap); // "" / v1 / ConfigMap
/// ```
#[macro_export]
macro_rules! gvk {
    ($group:expr, $version:expr, $kind:expr $(,)?) => {
        $crate::Gvk::new($group, $version, $kind)
    };
    ($ty:ty) => {
        $crate::Gvk::of::<$ty>()
    };
}

impl Gvk {
    /// The core group is `""`.
    pub fn new(
        group: impl Into<String>,
        version: impl Into<String>,
        kind: impl Into<String>,
    ) -> Self {
        Gvk {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
        }
    }

    /// The kind of a `k8s-openapi` type, e.g. `Gvk::of::<ConfigMap>()`.
    #[must_use]
    pub fn of<K: k8s_openapi::Resource>() -> Self {
        Gvk::new(K::GROUP, K::VERSION, K::KIND)
    }

    /// From an object's `apiVersion` (`group/version`, or just `version` for the core group).
    #[must_use]
    pub fn from_api_version(api_version: &str, kind: &str) -> Self {
        match api_version.split_once('/') {
            Some((group, version)) => Gvk::new(group, version, kind),
            None => Gvk::new("", api_version, kind),
        }
    }

    /// The `apiVersion` an object of this kind carries.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

impl ObjectRef {
    /// An object of a namespaced kind.
    pub fn namespaced(kind: Gvk, namespace: impl Into<String>, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// An object of a cluster-scoped kind.
    pub fn cluster_scoped(kind: Gvk, name: impl Into<String>) -> Self {
        ObjectRef {
            kind,
            namespace: None,
            name: name.into(),
        }
    }

    /// Another object of the same kind, e.g. for [`crate::queue::enqueue`].
    #[must_use]
    pub fn sibling(&self, name: impl Into<String>) -> Self {
        ObjectRef {
            kind: self.kind.clone(),
            namespace: self.namespace.clone(),
            name: name.into(),
        }
    }

    /// Names an object from its JSON (`apiVersion`, `kind`, `metadata.namespace/name`), e.g.
    /// one returned by [`crate::lister::list`]. None when any of those (but namespace) is
    /// missing.
    #[must_use]
    pub fn from_json(object: &Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        let metadata = object.get("metadata")?;
        Some(ObjectRef {
            kind: Gvk::from_api_version(api_version, kind),
            namespace: metadata
                .get("namespace")
                .and_then(Value::as_str)
                .map(str::to_owned),
            name: metadata.get("name")?.as_str()?.to_owned(),
        })
    }

    /// The queue key of this object.
    #[must_use]
    pub fn key(&self) -> ObjectKey {
        ObjectKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

impl std::fmt::Display for ObjectRef {
    /// `Kind namespace/name` (or `Kind name` when cluster-scoped), as in log lines.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.kind, self.name),
            None => write!(f, "{} {}", self.kind.kind, self.name),
        }
    }
}

impl ObjectKey {
    /// `namespace` none for cluster-scoped primaries.
    pub fn new(namespace: Option<&str>, name: impl Into<String>) -> Self {
        ObjectKey {
            namespace: namespace.map(str::to_owned),
            name: name.into(),
        }
    }
}

impl Request {
    /// The object as JSON, or none when it is gone.
    ///
    /// # Errors
    ///
    /// Permanent when the host passed text that is not JSON (retrying cannot help).
    pub fn object_value(&self) -> Result<Option<Value>, ReconcileError> {
        self.object_as::<Value>()
    }

    /// The object deserialised into `T` (a `k8s-openapi` type or the guest's own CRD struct),
    /// or none when it is gone.
    ///
    /// # Errors
    ///
    /// Permanent when the object does not fit `T`: the same object would fail the same way
    /// on every retry, and the next change of it triggers a reconcile anyway.
    pub fn object_as<T: DeserializeOwned>(&self) -> Result<Option<T>, ReconcileError> {
        let Some(json) = &self.object else {
            return Ok(None);
        };
        serde_json::from_str(json).map(Some).map_err(|e| {
            ReconcileError::Permanent(format!(
                "{} does not match the guest's {}: {e}",
                self.ref_,
                std::any::type_name::<T>()
            ))
        })
    }

    /// The queue key of the request's object.
    #[must_use]
    pub fn key(&self) -> ObjectKey {
        self.ref_.key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn gvk_round_trips_api_version_for_core_and_named_groups() {
        let core = gvk!(ConfigMap);
        assert_eq!(core, Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(core.api_version(), "v1");
        assert_eq!(Gvk::from_api_version("v1", "ConfigMap"), core);

        let net = gvk!("samplecrd.k8s.io", "v1", "Network");
        assert_eq!(net.api_version(), "samplecrd.k8s.io/v1");
        assert_eq!(Gvk::from_api_version("samplecrd.k8s.io/v1", "Network"), net);
    }

    #[test]
    fn object_ref_from_json_reads_kind_namespace_and_name() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"namespace": "ns", "name": "a"}});
        assert_eq!(
            ObjectRef::from_json(&cm),
            Some(ObjectRef::namespaced(gvk!(ConfigMap), "ns", "a"))
        );
        let cluster = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "ns"}});
        assert_eq!(ObjectRef::from_json(&cluster).unwrap().namespace, None);
        assert_eq!(ObjectRef::from_json(&json!({"kind": "X"})), None);
    }

    fn request(object: Option<&str>) -> Request {
        Request {
            ref_: ObjectRef::namespaced(gvk!(ConfigMap), "ns", "a"),
            object: object.map(str::to_owned),
            deleting: false,
            attempt: 0,
        }
    }

    #[test]
    fn object_as_parses_typed_objects_and_reports_mismatches_as_permanent() {
        let req = request(Some(
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"k":"v"}}"#,
        ));
        let cm: ConfigMap = req.object_as().unwrap().unwrap();
        assert_eq!(cm.data.unwrap()["k"], "v");

        assert_eq!(request(None).object_as::<ConfigMap>().unwrap(), None);

        let bad = request(Some(r#"{"data": 5}"#)).object_as::<ConfigMap>();
        match bad {
            Err(ReconcileError::Permanent(msg)) => assert!(msg.contains("ConfigMap ns/a"), "{msg}"),
            other => panic!("expected a permanent error, got {other:?}"),
        }
    }
}
