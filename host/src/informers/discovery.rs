//! GVK → `ApiResource` + scope, through kube's one-kind discovery (`discovery::pinned_kind`:
//! one request to the kind's group/version), cached per GVK.
//!
//! Only successes are cached: a CRD installed after the host started becomes resolvable on the
//! next `acquire` without a restart.

use std::collections::HashMap;

use kube::{
    Client,
    core::GroupVersionKind,
    discovery::{self, ApiResource, Scope, verbs},
    error::DiscoveryError,
};
use parking_lot::Mutex;

use super::InformerError;

#[derive(Clone, Debug)]
pub(super) struct Resolved {
    pub(super) resource: ApiResource,
    pub(super) namespaced: bool,
}

#[derive(Default)]
pub(super) struct Resolver {
    cache: Mutex<HashMap<GroupVersionKind, Resolved>>,
}

impl Resolver {
    /// Cached: free. Otherwise one discovery request to the API server.
    pub(super) async fn resolve(
        &self,
        client: &Client,
        gvk: &GroupVersionKind,
    ) -> Result<Resolved, InformerError> {
        if let Some(found) = self.cache.lock().get(gvk) {
            return Ok(found.clone());
        }
        let unknown = || InformerError::UnknownKind {
            group: gvk.group.clone(),
            version: gvk.version.clone(),
            kind: gvk.kind.clone(),
        };
        let (resource, caps) = match discovery::pinned_kind(client, gvk).await {
            Ok(found) => found,
            // 404: the group/version is not served at all; MissingKind: it is, without this kind.
            Err(kube::Error::Api(status)) if status.code == 404 => return Err(unknown()),
            Err(kube::Error::Discovery(DiscoveryError::MissingKind(_))) => return Err(unknown()),
            Err(source) => {
                return Err(InformerError::Discovery {
                    gvk: super::describe(gvk),
                    source: Box::new(source),
                });
            }
        };
        if !(caps.supports_operation(verbs::LIST) && caps.supports_operation(verbs::WATCH)) {
            return Err(InformerError::NotWatchable {
                gvk: super::describe(gvk),
            });
        }
        let resolved = Resolved {
            resource,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.cache.lock().insert(gvk.clone(), resolved.clone());
        Ok(resolved)
    }
}
