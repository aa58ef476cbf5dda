//! Finalizers left behind by unloaded guests (see [`crate::cluster::finalizer`]): noted when a guest is
//! unloaded, and with the `release` policy removed from every object after the grace period,
//! by one replica (see [`super::ownership::Ownership::coordinates`]). A guest loaded again
//! before then takes its objects back and nothing is released.

use std::collections::BTreeMap;
use std::sync::Arc;

use tokio::time::Instant;

use crate::cluster::discovery::Resolver;
use crate::metrics::Metrics;
use crate::supply::guest_set::{Guests, OrphanedFinalizer};

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
    // Patched as the account the guest wrote as: under `reconciler-host rbac` the host holds
    // no write of its own on a kind whose guests write as their accounts.
    let writer = orphan.service_account.as_ref().map_or_else(
        || client.clone(),
        |account| crate::sandbox::identity::client_as(client, account),
    );
    crate::cluster::finalizer::release_all(&api, &writer, &kind.resource, &orphan.finalizer).await
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    use super::*;

    /// A client for an API server holding one Widget `team-a/w` that carries `cleanup`:
    /// it answers discovery, the list and the patch, and keeps each request as
    /// `METHOD path as USER` (`host` when nobody is impersonated).
    fn server() -> (kube::Client, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let kept = seen.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let who = request
                .headers()
                .get("impersonate-user")
                .map_or("host".to_owned(), |v| v.to_str().unwrap_or("?").to_owned());
            let path = request.uri().path().to_owned();
            kept.lock()
                .unwrap()
                .push(format!("{} {path} as {who}", request.method()));
            let widget = json!({
                "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                "metadata": {"name": "w", "namespace": "team-a", "finalizers": ["cleanup"]},
            });
            let body = if path == "/apis/test.reconciler.dev/v1" {
                json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "test.reconciler.dev/v1",
                       "resources": [{"name": "widgets", "singularName": "widget", "namespaced": true,
                                      "kind": "Widget", "verbs": ["get", "list", "watch", "patch"]}]})
            } else if request.method() == http::Method::GET {
                json!({"apiVersion": "test.reconciler.dev/v1", "kind": "WidgetList",
                       "metadata": {}, "items": [widget]})
            } else {
                widget
            };
            async move {
                Ok::<_, std::convert::Infallible>(Response::new(Body::from(
                    serde_json::to_vec(&body).unwrap(),
                )))
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    fn orphan(account: Option<&str>) -> OrphanedFinalizer {
        OrphanedFinalizer {
            finalizer: "cleanup".into(),
            kind: crate::cluster::objects::Gvk::new("test.reconciler.dev", "v1", "Widget"),
            namespace: Some("team-a".into()),
            service_account: account.map(|a| a.parse().unwrap()),
            policy: crate::config::OnUnload::Release,
            unloaded_at: String::new(),
            objects: None,
            released: None,
        }
    }

    /// Issue 52, item 4: a guest that writes as an account (a tenant's, or one its grant
    /// names) has its finalizer released as that account, which holds the write; the host,
    /// under what `reconciler-host rbac` prints, holds only reads of the kind. It still lists
    /// as itself: the account is impersonated for writes only.
    #[tokio::test]
    async fn a_finalizer_is_released_as_the_account_its_guest_wrote_as() {
        let (client, seen) = server();
        let released = release(
            &client,
            &Resolver::default(),
            None,
            &orphan(Some("team-a/reconciler")),
        )
        .await
        .unwrap();
        assert_eq!(released, 1);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                "GET /apis/test.reconciler.dev/v1 as host",
                "GET /apis/test.reconciler.dev/v1/namespaces/team-a/widgets as host",
                "PATCH /apis/test.reconciler.dev/v1/namespaces/team-a/widgets/w as system:serviceaccount:team-a:reconciler",
            ]
        );

        // A guest without an account writes as the host, and is released as the host.
        let (client, seen) = server();
        release(&client, &Resolver::default(), None, &orphan(None))
            .await
            .unwrap();
        assert_eq!(
            seen.lock().unwrap().last().map(String::as_str),
            Some("PATCH /apis/test.reconciler.dev/v1/namespaces/team-a/widgets/w as host")
        );
    }
}
