//! Names of Kubernetes kinds and objects as the host and the WIT contract speak them.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The `Reconciler` kind: guests declared as cluster-scoped objects (`crate::supply::reconcilers`).
pub(crate) mod reconciler_kind {
    pub(crate) const GROUP: &str = "reconciler.dev";
    pub(crate) const VERSION: &str = "v1alpha1";
    /// The namespaced kind: a team's guest, held to its namespace.
    pub(crate) const KIND: &str = "Reconciler";
    pub(crate) const PLURAL: &str = "reconcilers";
    /// The cluster-scoped kind: an administrator's guest, within `reconcilers.allow`.
    pub(crate) const CLUSTER_KIND: &str = "ClusterReconciler";
    pub(crate) const CLUSTER_PLURAL: &str = "clusterreconcilers";
}

/// Group, version and kind; the core group is the empty string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Gvk {
    pub(crate) group: String,
    pub(crate) version: String,
    pub(crate) kind: String,
}

impl Gvk {
    pub fn new(group: &str, version: &str, kind: &str) -> Self {
        Self {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        }
    }

    /// `apiVersion` as written in objects: `v1` for the core group, else `group/version`.
    pub(crate) fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The kind of a JSON object from its `apiVersion` and `kind` fields.
    pub(crate) fn of_object(object: &serde_json::Value) -> Option<Self> {
        let api_version = object.get("apiVersion")?.as_str()?;
        let kind = object.get("kind")?.as_str()?;
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        Some(Self::new(group, version, kind))
    }
}

/// `group/version/Kind`, or `version/Kind` for the core group (`v1/ConfigMap`).
impl From<&Gvk> for kube::core::GroupVersionKind {
    fn from(g: &Gvk) -> Self {
        Self::gvk(&g.group, &g.version, &g.kind)
    }
}

impl fmt::Display for Gvk {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            write!(f, "{}/{}", self.version, self.kind)
        } else {
            write!(f, "{}/{}/{}", self.group, self.version, self.kind)
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error(
    "`{0}` is not a kind: write group/version/Kind, or version/Kind for the core group (e.g. samplecrd.k8s.io/v1/Network, v1/ConfigMap)"
)]
pub struct GvkParseError(String);

impl FromStr for Gvk {
    type Err = GvkParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split('/').collect();
        let (group, version, kind) = match parts.as_slice() {
            [version, kind] => ("", *version, *kind),
            [group, version, kind] => (*group, *version, *kind),
            _ => return Err(GvkParseError(s.to_owned())),
        };
        let kind_ok = kind.chars().next().is_some_and(|c| c.is_ascii_uppercase());
        if version.is_empty() || !kind_ok {
            return Err(GvkParseError(s.to_owned()));
        }
        Ok(Self::new(group, version, kind))
    }
}

/// Deserializes a set of kinds written as strings (`samplecrd.k8s.io/v1/Network`).
pub(crate) fn deserialize_kinds<'de, D>(
    deserializer: D,
) -> Result<std::collections::BTreeSet<Gvk>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let names = <Vec<String> as Deserialize>::deserialize(deserializer)?;
    names
        .iter()
        .map(|n| n.parse().map_err(serde::de::Error::custom))
        .collect()
}

/// One object: kind, namespace (none for cluster-scoped kinds) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ObjectRef {
    pub(crate) kind: Gvk,
    pub(crate) namespace: Option<String>,
    pub(crate) name: String,
}

impl ObjectRef {
    /// The reference of a JSON object (apiVersion, kind, metadata.namespace, metadata.name).
    pub fn of_object(object: &serde_json::Value) -> Option<Self> {
        let metadata = object.get("metadata")?;
        Some(Self {
            kind: Gvk::of_object(object)?,
            namespace: metadata
                .get("namespace")
                .and_then(|n| n.as_str())
                .map(str::to_owned),
            name: metadata.get("name")?.as_str()?.to_owned(),
        })
    }
}

impl ObjectRef {
    /// The object's identity as JSON: `apiVersion`, `kind`, `metadata.name` and `.namespace`.
    pub(crate) fn identity(&self) -> serde_json::Value {
        let mut metadata = serde_json::json!({"name": self.name});
        if let Some(namespace) = &self.namespace {
            metadata["namespace"] = namespace.clone().into();
        }
        serde_json::json!({
            "apiVersion": self.kind.api_version(),
            "kind": self.kind.kind,
            "metadata": metadata,
        })
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind, self.name),
            None => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// The key the host queues: an object's namespace (none for cluster-scoped objects) and
/// name. Displays as client-go's `MetaNamespaceKeyFunc` does: `namespace/name` or `name`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    /// `None` for cluster-scoped objects.
    pub(crate) namespace: Option<String>,
    /// `metadata.name`.
    pub(crate) name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    #[must_use]
    pub fn namespaced(namespace: impl Into<String>, name: impl Into<String>) -> Self {
        Self {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    /// The key of a cluster-scoped object.
    #[must_use]
    pub(crate) fn cluster_scoped(name: impl Into<String>) -> Self {
        Self {
            namespace: None,
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(namespace) => write!(f, "{namespace}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// A string that is not a `namespace/name` or `name` key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid object key {key:?}: expected \"namespace/name\" or \"name\" with non-empty parts")]
pub struct ParseObjectKeyError {
    key: String,
}

impl FromStr for ObjectKey {
    type Err = ParseObjectKeyError;

    /// The inverse of `Display`, like client-go's `SplitMetaNamespaceKey`.
    fn from_str(key: &str) -> Result<Self, Self::Err> {
        let invalid = || ParseObjectKeyError {
            key: key.to_owned(),
        };
        let mut parts = key.split('/');
        match (parts.next(), parts.next(), parts.next()) {
            (Some(name), None, None) if !name.is_empty() => Ok(Self::cluster_scoped(name)),
            (Some(namespace), Some(name), None) if !namespace.is_empty() && !name.is_empty() => {
                Ok(Self::namespaced(namespace, name))
            }
            _ => Err(invalid()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_core_and_grouped_kinds() {
        assert_eq!(
            "v1/ConfigMap".parse::<Gvk>().unwrap(),
            Gvk::new("", "v1", "ConfigMap")
        );
        let network: Gvk = "samplecrd.k8s.io/v1/Network".parse().unwrap();
        assert_eq!(network, Gvk::new("samplecrd.k8s.io", "v1", "Network"));
        assert_eq!(network.to_string(), "samplecrd.k8s.io/v1/Network");
        assert_eq!(network.api_version(), "samplecrd.k8s.io/v1");
    }

    #[test]
    fn rejects_malformed_kinds_with_the_expected_form() {
        for bad in ["Network", "a/b/c/d", "v1/configmap", "/ConfigMap"] {
            let err = bad.parse::<Gvk>().unwrap_err().to_string();
            assert!(err.contains("group/version/Kind"), "{bad}: {err}");
        }
    }

    #[test]
    fn reads_the_reference_of_an_object() {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "namespace": "ns"}
        });
        let r = ObjectRef::of_object(&object).unwrap();
        assert_eq!(r.kind, Gvk::new("", "v1", "ConfigMap"));
        assert_eq!(r.namespace.as_deref(), Some("ns"));
        assert_eq!(r.to_string(), "v1/ConfigMap ns/a");
    }
}
