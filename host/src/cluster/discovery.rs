//! GVK → `ApiResource` + scope, the one way the host asks the API server what a kind is:
//! kube's one-kind discovery (`discovery::pinned_kind`: one request to the kind's
//! group/version), cached per GVK. One [`Resolver`] serves a whole `run` (the informers, every
//! guest's cluster writer and the release of orphaned finalizers share its cache).
//!
//! Only successes are cached: a CRD installed after the host started becomes resolvable on the
//! next lookup without a restart.

use std::collections::HashMap;
use std::sync::Arc;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{self, ApiResource, Scope, verbs};
use parking_lot::Mutex;

/// What discovery says of a kind.
#[derive(Clone, Debug)]
pub(crate) struct Resolved {
    pub resource: ApiResource,
    pub namespaced: bool,
    /// Served with `list` and `watch`, so an informer can cache it.
    pub watchable: bool,
}

/// Cheap to clone: clones share the cache.
#[derive(Clone, Default)]
pub(crate) struct Resolver {
    cache: Arc<Mutex<HashMap<GroupVersionKind, Resolved>>>,
}

impl Resolver {
    /// Cached: free. Otherwise one discovery request to the API server.
    pub(crate) async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Resolved, kube::Error> {
        if let Some(found) = self.cache.lock().get(gvk) {
            return Ok(found.clone());
        }
        let (resource, caps) = discovery::pinned_kind(client, gvk).await?;
        let resolved = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
            watchable: caps.supports_operation(verbs::LIST)
                && caps.supports_operation(verbs::WATCH),
        };
        self.cache.lock().insert(gvk.clone(), resolved.clone());
        Ok(resolved)
    }
}

/// 404 (the group/version is not served at all) or `MissingKind` (it is, without this kind):
/// the kind does not exist, as opposed to discovery failing.
pub(crate) fn is_unknown_kind(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code == 404,
        kube::Error::Discovery(kube::error::DiscoveryError::MissingKind(_)) => true,
        _ => false,
    }
}
