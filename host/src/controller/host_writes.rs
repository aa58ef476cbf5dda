//! The host's own writes around one reconcile, a step of their own so that `sync` reads as
//! read → run → decide:
//!
//! - the guest's finalizer is added before the first reconcile of an object, so a deletion
//!   while the host is down still reaches the guest;
//! - it is removed only after a successful reconcile with `deleting = true`, from the object's
//!   latest version (the guest may have written it meanwhile);
//! - in shadow mode neither is made: each is compared like the guest's own writes, and the
//!   reconcile's verdict is recorded with them.

use kube::api::DynamicObject;

use super::{Caches, Services, Version};
use crate::capabilities::HostError;
use crate::informers::CachedObject;
use crate::objects::{ObjectKey, ObjectRef};
use crate::providers::kube::KubeCluster;
use crate::runtime::Outcome;
use crate::shadow::{Difference, Mode};

pub(super) struct HostWrites<'a> {
    finalizer: Option<&'a str>,
    object_ref: &'a ObjectRef,
    /// The object's metadata as cached; read only when the guest declares a finalizer.
    head: Option<DynamicObject>,
    deleting: bool,
    shadow: bool,
    /// Shadow mode: what the host would have written.
    differences: Vec<Difference>,
}

impl<'a> HostWrites<'a> {
    pub fn new(
        version: &'a Version,
        object_ref: &'a ObjectRef,
        stored: Option<&CachedObject>,
        deleting: bool,
    ) -> Self {
        let finalizer = version.guest.loaded.manifest.finalizer.as_deref();
        Self {
            finalizer,
            object_ref,
            head: finalizer.and(stored).and_then(CachedObject::to_head),
            deleting,
            shadow: version.guest.grant.mode == Mode::Shadow,
            differences: Vec::new(),
        }
    }

    /// Before the reconcile: adds the finalizer to an object not being deleted. `object` is
    /// what the guest will be given: the written version, or none if the object is gone.
    /// False: the write failed, retry the key.
    pub async fn before(&mut self, cluster: &KubeCluster, object: &mut Option<String>) -> bool {
        let (Some(finalizer), Some(current), false) = (self.finalizer, &self.head, self.deleting)
        else {
            return true;
        };
        if self.shadow {
            self.differences.extend(crate::shadow::single(
                format!("finalizer add on {}", self.object_ref),
                !crate::finalizer::carries(current, finalizer),
                format!("metadata.finalizers: {finalizer} would be added"),
            ));
            return true;
        }
        match cluster
            .add_finalizer(self.object_ref, current, finalizer)
            .await
        {
            Ok(None) => {}
            Ok(Some(written)) => *object = Some(written.to_string()),
            Err(HostError::NotFound(_)) => *object = None,
            Err(e) => {
                tracing::warn!("adding finalizer {finalizer} failed, will retry: {e}");
                return false;
            }
        }
        true
    }

    /// After a successful reconcile of a deleted object: removes the finalizer (in shadow mode
    /// that removal was compared in [`HostWrites::record`]). False: retry the key.
    pub async fn after_success(&self, caches: &Caches, cluster: &KubeCluster) -> bool {
        let (Some(finalizer), true, false) = (self.finalizer, self.deleting, self.shadow) else {
            return true;
        };
        let object_ref = self.object_ref;
        let Some(latest) = caches
            .primary
            .get(object_ref.namespace.as_deref(), &object_ref.name)
        else {
            return true;
        };
        match cluster
            .remove_finalizer(object_ref, &latest, finalizer)
            .await
        {
            Ok(removed) => {
                if removed {
                    tracing::info!("finalizer {finalizer} removed");
                }
                true
            }
            Err(e) => {
                tracing::warn!("removing finalizer {finalizer} failed, will retry: {e}");
                false
            }
        }
    }

    /// Shadow mode: the verdict of one reconcile, with the host's compared writes and the
    /// guest's (`guest_differences`). A finished reconcile gets one; a failed one only if it
    /// intended a change. Nothing in active mode.
    pub fn record(
        &mut self,
        shared: &Services,
        version: &Version,
        key: &ObjectKey,
        outcome: &Outcome,
        guest_differences: &mut Vec<Difference>,
    ) {
        if !self.shadow {
            return;
        }
        self.differences.append(guest_differences);
        let finished = matches!(outcome, Outcome::Ok { .. });
        let deleted = self.head.as_ref().filter(|_| self.deleting);
        // A finished reconcile of a deleted object would have removed the finalizer.
        if let (true, Some(finalizer), Some(object)) = (finished, self.finalizer, deleted) {
            self.differences.extend(crate::shadow::single(
                format!("finalizer removal on {key}"),
                crate::finalizer::carries(object, finalizer),
                format!("metadata.finalizers: {finalizer} would be removed"),
            ));
        }
        if finished || !self.differences.is_empty() {
            let differences = std::mem::take(&mut self.differences);
            shared
                .shadows
                .record(version.guest.name(), &key.to_string(), differences);
        }
    }
}
