//! The door of a controller's work queue, and the rule it keeps: a namespaced `Reconciler`'s
//! guest (a tenant) is handed keys of its own namespace only.
//!
//! Every key a guest reconciles was let in here: the primary informer's, every secondary
//! watch's whatever its mapping (owner references, a label, owner labels, a field index, the
//! guest's `map`), and the guest's own `queue.enqueue`. The workers re-add only keys they took
//! from the queue (a retry, a `requeue-after`), so nothing reaches the guest past this door.
//! The mappings need not each remember the rule, and a mapping added later cannot forget it.
//!
//! What the door cannot see, the informers keep out: a tenant's informers are all limited to
//! its namespace (`Caches::acquire`), so no object of another namespace, and no
//! cluster-scoped object, reaches a `map` call or wakes one of its keys.
//!
//! Cost: one string comparison per key, for tenants only.

use std::sync::Arc;
use std::time::Duration;

use crate::cluster::objects::ObjectKey;
use crate::controller::queue::{Priority, WorkQueue};
use crate::metrics::Metrics;
use crate::sandbox::capabilities::{Enqueuer, HostError};

/// A controller's work queue as everything but its workers sees it.
#[derive(Clone)]
pub(crate) struct Keys {
    queue: WorkQueue<ObjectKey>,
    /// A namespaced Reconciler's namespace: the only one its guest's keys may name.
    tenant: Option<Arc<str>>,
    guest: Arc<str>,
    metrics: Metrics,
}

impl Keys {
    pub(crate) fn new(
        queue: WorkQueue<ObjectKey>,
        tenant: Option<&str>,
        guest: &str,
        metrics: Metrics,
    ) -> Self {
        Self {
            queue,
            tenant: tenant.map(Arc::from),
            guest: Arc::from(guest),
            metrics,
        }
    }

    /// Queues `key` at `priority` if the guest may be handed it; `from` names what named it,
    /// for the log line of a key refused.
    pub(crate) fn add(&self, key: ObjectKey, priority: Priority, from: &dyn std::fmt::Display) {
        if self.admits(&key, from) {
            self.queue.add_with(key, priority);
        }
    }

    /// Queues `key` after `delay` if the guest may be handed it.
    pub(crate) fn add_after(&self, key: ObjectKey, delay: Duration) {
        if self.admits(&key, &"a new index value") {
            self.queue.add_after(key, delay);
        }
    }

    /// Whether the guest may be handed `key`. One it may not is counted
    /// (`reconciler_keys_outside_namespace_total`) and logged at debug: a tenant decides how
    /// many such keys its objects name, so a line per key at a louder level would let it fill
    /// the operator's log.
    fn admits(&self, key: &ObjectKey, from: &dyn std::fmt::Display) -> bool {
        let Some(tenant) = &self.tenant else {
            return true;
        };
        if key.namespace.as_deref() == Some(&**tenant) {
            return true;
        }
        self.metrics.key_outside_namespace(&self.guest);
        tracing::debug!(guest = %self.guest, %key, %from, "key outside the namespace of a namespaced Reconciler's guest, dropped");
        false
    }
}

impl Enqueuer for Keys {
    /// The `queue` capability refuses such a key first, with its reason; this holds if it
    /// ever did not.
    fn enqueue(&self, key: ObjectKey, after: Option<Duration>) -> Result<(), HostError> {
        if !self.admits(&key, &"the guest's enqueue") {
            return Err(HostError::Invalid(format!(
                "key.namespace: a namespaced Reconciler's guest is handed keys of its namespace {} only",
                self.tenant.as_deref().unwrap_or_default()
            )));
        }
        match after {
            Some(delay) => self.queue.add_after(key, delay),
            None => self.queue.add(key),
        }
        Ok(())
    }

    fn pending(&self) -> usize {
        self.queue.len() + self.queue.delayed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::queue::QueueConfig;

    fn key(text: &str) -> ObjectKey {
        text.parse().unwrap()
    }

    fn keys(tenant: Option<&str>) -> (Keys, WorkQueue<ObjectKey>, Metrics) {
        let queue = WorkQueue::new(QueueConfig::default());
        let metrics = Metrics::new();
        let keys = Keys::new(queue.clone(), tenant, "g", metrics.clone());
        (keys, queue, metrics)
    }

    #[test]
    fn a_tenants_enqueue_outside_its_namespace_is_refused_and_counted() {
        let (keys, queue, metrics) = keys(Some("team"));
        keys.enqueue(key("team/a"), None).unwrap();
        keys.enqueue(key("team/b"), Some(Duration::from_mins(1)))
            .unwrap();
        for outside in ["other/a", "a"] {
            let err = keys.enqueue(key(outside), None).unwrap_err();
            assert!(
                matches!(&err, HostError::Invalid(m) if m.contains("namespace team only")),
                "{err:?}"
            );
        }
        keys.add(key("other/c"), Priority::Normal, &"a watch");
        assert_eq!((queue.len(), queue.delayed()), (1, 1));
        assert!(
            metrics
                .render()
                .contains(r#"reconciler_keys_outside_namespace_total{guest="g"} 3"#),
            "{}",
            metrics.render()
        );
    }

    #[test]
    fn a_guest_of_no_tenant_is_handed_any_key() {
        let (keys, queue, _) = keys(None);
        for key_text in ["team/a", "other/a", "a"] {
            keys.add(key(key_text), Priority::Normal, &"a watch");
        }
        keys.enqueue(key("elsewhere/b"), None).unwrap();
        assert_eq!(queue.len(), 4);
    }
}
