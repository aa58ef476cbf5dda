//! Finalizers left behind by unloaded guests (see [`crate::finalizer`]): noted when a guest is
//! unloaded, and with the `release` policy removed from every object after the grace period,
//! by one replica (see [`super::ownership::Ownership::coordinates`]). A guest loaded again
//! before then takes its objects back and nothing is released.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::discovery::Resolver;
use crate::guest_set::{Guests, OrphanedFinalizer};
use crate::metrics::Metrics;

pub(super) struct Orphans {
    guests: Arc<Guests>,
    metrics: Metrics,
    /// Unloaded guests whose finalizer the `release` policy removes at the given time.
    releases: BTreeMap<String, Instant>,
}

impl Orphans {
    pub(super) fn new(guests: Arc<Guests>, metrics: Metrics) -> Self {
        Self {
            guests,
            metrics,
            releases: BTreeMap::new(),
        }
    }

    /// A guest is back: its finalizer is no longer orphaned.
    pub(super) fn loaded(&mut self, guest: &str) {
        if self.releases.remove(guest).is_some() {
            self.metrics.finalizer_orphaned(guest, 0);
        }
    }

    /// Notes what an unloaded guest's finalizer leaves behind (`carrying`: the objects its
    /// cache held with it, if its controller ran here), and schedules its release when the
    /// policy says so.
    pub(super) fn unloaded(&mut self, guest: &str, carrying: impl FnOnce(&str) -> Option<usize>) {
        let Some(orphan) = self.guests.orphan(guest) else {
            return;
        };
        let objects = carrying(&orphan.finalizer);
        if let Some(objects) = objects {
            self.metrics.finalizer_orphaned(guest, objects);
            self.guests
                .update_orphan(guest, |o| o.objects = Some(objects));
        }
        let config = self.guests.config();
        let policy = &config.finalizer_policy;
        tracing::warn!(guest = %guest, finalizer = %orphan.finalizer, ?objects, policy = ?policy.on_unload,
            "guest unloaded while objects may still carry its finalizer");
        if policy.on_unload == crate::config::OnUnload::Release {
            self.releases
                .insert(guest.to_owned(), Instant::now() + policy.grace());
        }
    }

    /// Releases the finalizers of guests unloaded longer than the grace period ago.
    pub(super) async fn release_due(
        &mut self,
        client: &kube::Client,
        discovery: &Resolver,
        namespace: Option<&str>,
    ) {
        let now = Instant::now();
        let due: Vec<String> = self
            .releases
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            let Some(orphan) = self.guests.orphan(&name) else {
                self.releases.remove(&name);
                continue;
            };
            match release(client, discovery, namespace, &orphan).await {
                Ok(released) => {
                    self.releases.remove(&name);
                    tracing::info!(guest = %name, finalizer = %orphan.finalizer, released, "finalizer released");
                    self.metrics.finalizer_released(&name, released);
                    self.metrics.finalizer_orphaned(&name, 0);
                    self.guests.update_orphan(&name, |o| {
                        o.released = Some(released);
                        o.objects = Some(0);
                    });
                }
                Err(e) => {
                    tracing::warn!(guest = %name, "releasing the finalizer failed, will retry: {e}");
                }
            }
        }
    }
}

async fn release(
    client: &kube::Client,
    discovery: &Resolver,
    namespace: Option<&str>,
    orphan: &OrphanedFinalizer,
) -> Result<usize, kube::Error> {
    let gvk = kube::core::GroupVersionKind::from(&orphan.kind);
    let kind = discovery.resolve(client, &gvk).await?;
    // A tenant's guest released its finalizer in its own namespace only.
    let api = match orphan.namespace.as_deref().or(namespace) {
        Some(ns) if kind.namespaced => {
            kube::Api::namespaced_with(client.clone(), ns, &kind.resource)
        }
        _ => kube::Api::all_with(client.clone(), &kind.resource),
    };
    crate::finalizer::release_all(&api, &orphan.finalizer).await
}
