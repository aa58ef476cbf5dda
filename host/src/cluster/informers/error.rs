//! Why an informer could not be had.

use kube::core::GroupVersionKind;

use crate::cluster::selector::SelectorError;

#[derive(Debug, thiserror::Error)]
pub enum InformerError {
    #[error(
        "unknown kind: the API server does not serve kind {kind:?} in group {group:?} version \
         {version:?}; install the CRD that defines it or fix the group/version/kind"
    )]
    UnknownKind {
        group: String,
        version: String,
        kind: String,
    },
    #[error(
        "discovery of {gvk} failed: {source}; is the API server reachable and are we allowed to read discovery?"
    )]
    Discovery {
        gvk: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("{gvk} cannot be watched: the API server does not offer list and watch for it")]
    NotWatchable { gvk: String },
    #[error(
        "{gvk} is cluster-scoped, so its informer cannot be limited to namespace {namespace:?}; \
         leave the namespace out"
    )]
    ClusterScoped { gvk: String, namespace: String },
    #[error("informer for {gvk}: {source}")]
    Selector {
        gvk: String,
        #[source]
        source: SelectorError,
    },
}

/// `ConfigMap (v1)`, `Network (samplecontroller.k8s.io/v1alpha1)`.
pub(super) fn describe(gvk: &GroupVersionKind) -> String {
    format!("{} ({})", gvk.kind, gvk.api_version())
}
