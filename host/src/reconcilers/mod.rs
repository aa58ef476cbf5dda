//! Guests declared as `Reconciler` objects (`reconcilers.reconciler.dev`, cluster-scoped):
//! `spec.module` names an `oci://` module, `spec.grant` what it may do (bounded by the host's
//! `reconcilers.allow`), `spec.pullSecretRef` the credentials to pull it with. The host runs them
//! when its configuration has a `reconcilers:` section.
//!
//! [`Objects`] is a [`GuestSource`] beside the guest directory: the same guest set loads,
//! swaps, refuses (keeping the last good version) and unloads its items, so nothing of the
//! directory's state machine is written twice. What it adds is where the item lives:
//!
//! - the objects are followed with a kube-runtime reflector; each is an item named
//!   `reconciler/NAME` that carries its own grant ([`OriginKind::Reconciler`]), so a changed
//!   `spec.grant` is a changed item and a grant refused keeps the last good version;
//! - reading an item pulls its module (`pulls.rs`) into the content-addressed module cache
//!   (`crate::oci`), once per module reference and pull Secret: a tag is resolved to a digest
//!   then, and again only when the spec changes or the host restarts. A failed pull is retried
//!   with a backoff (5 s doubling to 5 min) while the last good version keeps running;
//! - what happened to each object (its pull, the guest set's verdict) is written to its
//!   `status` and told as events on it (`status.rs`), by one replica (the one that releases
//!   orphaned finalizers).
//!
//! Cost: a rescan lists the reflector's store and names each pulled module by its content hash
//! without reading it, so nothing already judged is read again; a module is read from the
//! module cache (and verified) only when the guest set loads it, and pulled only for a changed
//! module reference or Secret, on the guest set's blocking thread. No module bytes are kept in
//! memory beyond the compiled guest.

mod pulls;
pub(crate) mod spec;
mod status;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::config::HostConfig;
use crate::guest_set::{Artefact, Changes, GuestSource, Origin, OriginKind, SourceError, Verdict};
use crate::oci::{Endpoints, Puller};
use pulls::Records;
use spec::Spec;

pub(crate) use status::StatusWriter;

/// The `Reconciler` objects of a cluster, as a source of guests.
pub(crate) struct Objects {
    store: Store<DynamicObject>,
    shared: Arc<Shared>,
}

/// What the source, the status writer and the reflector share.
struct Shared {
    records: Arc<Mutex<Records>>,
    /// Something changed that a rescan or the status may need to see.
    changed: Notify,
    /// The status writer's own wake-up (verdicts and pulls), apart from rescans.
    status_changed: Notify,
}

impl Objects {
    /// Starts following the `Reconciler` objects with `client`; pulls through a [`Puller`] on
    /// `cache_dir` with the configuration's registry settings, reading pull Secrets from
    /// `namespace` (the host's); pulls refused are counted in `metrics`. Returns the source
    /// and its status writer.
    pub(crate) fn start(
        client: kube::Client,
        config: &HostConfig,
        cache_dir: &Path,
        namespace: String,
        metrics: &crate::metrics::Metrics,
    ) -> (Self, StatusWriter) {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &spec::api_resource());
        let writer = reflector::store::Writer::new(spec::api_resource());
        let store = writer.as_reader();
        let mut watcher_config = watcher::Config::default();
        if let Some(selector) = config.reconcilers.as_ref().and_then(|r| r.selector.clone()) {
            watcher_config = watcher_config.labels(&selector);
        }
        let allowed = config
            .reconcilers
            .as_ref()
            .map(|r| r.allow.registries.clone())
            .unwrap_or_default();
        // A registry's redirects and token realms may lead only to registries the host allows.
        let endpoints = Endpoints::new(allowed.iter().map(|r| r.registry().to_owned()));
        let shared = Arc::new(Shared {
            records: Arc::new(Mutex::new(Records::new(
                Puller::new(&config.registries, cache_dir, false)
                    .redirecting_to(endpoints)
                    .verifying_with(trust_policy(config)),
                client.clone(),
                namespace,
                config
                    .reconcilers
                    .as_ref()
                    .map(|r| r.pull_secrets.clone())
                    .unwrap_or_default(),
                allowed,
                metrics.clone(),
            ))),
            changed: Notify::new(),
            status_changed: Notify::new(),
        });
        let follow = shared.clone();
        tokio::spawn(async move {
            let events = watcher(api, watcher_config)
                .default_backoff()
                .reflect(writer);
            futures::pin_mut!(events);
            let mut failing = false;
            while let Some(event) = events.next().await {
                match event {
                    Ok(_) => {
                        failing = false;
                        follow.changed.notify_one();
                        follow.status_changed.notify_one();
                    }
                    // Said once per outage: the watcher retries with its backoff.
                    Err(e) if !failing => {
                        failing = true;
                        tracing::error!(
                            "cannot watch Reconciler objects ({e}); is the CRD installed? kubectl apply -f deploy/crds/reconcilers.yaml"
                        );
                    }
                    Err(_) => {}
                }
            }
        });
        let writer = StatusWriter::new(client, store.clone(), shared.clone());
        (Self { store, shared }, writer)
    }
}

impl GuestSource for Objects {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        let objects = self.store.state();
        let mut records = self.shared.records.lock();
        let mut origins = Vec::with_capacity(objects.len());
        let mut names = BTreeSet::new();
        for object in &objects {
            let Some(name) = object.metadata.name.clone() else {
                continue;
            };
            let generation = object.metadata.generation.unwrap_or(0);
            let origin = match Spec::of(object) {
                Ok(spec) => {
                    let origin = Origin::reconciler(&name, generation, spec.grant.clone());
                    records.observe(&name, generation, spec, &origin);
                    Some(origin)
                }
                // A spec the host cannot run keeps the item as it last ran, if it did.
                Err(why) => records.observe_invalid(&name, generation, why),
            };
            names.insert(name);
            origins.extend(origin);
        }
        records.retain(&names);
        drop(records);
        self.shared.status_changed.notify_one();
        Ok(origins)
    }

    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        let shared = self.shared.clone();
        let result = Records::read(&self.shared.records, origin.stem(), origin, move || {
            // The pull ended: judge its module (or its failure) now.
            shared.changed.notify_one();
            shared.status_changed.notify_one();
        });
        self.shared.status_changed.notify_one();
        result
    }

    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        Ok(Box::new(Watching {
            shared: self.shared.clone(),
            retry: None,
        }))
    }

    fn holds(&self, origin: &Origin) -> bool {
        matches!(origin.kind(), OriginKind::Reconciler { .. })
    }

    fn known_hash(&self, origin: &Origin) -> Option<String> {
        self.shared.records.lock().known_hash(origin.stem())
    }

    fn judged(&self, origin: &Origin, verdict: &Verdict) {
        let OriginKind::Reconciler { generation, .. } = origin.kind() else {
            return;
        };
        self.shared
            .records
            .lock()
            .judged(origin.stem(), *generation, verdict);
        self.shared.status_changed.notify_one();
    }
}

/// The objects' changes, and the time a failed pull is due again.
struct Watching {
    shared: Arc<Shared>,
    retry: Option<tokio::time::Instant>,
}

#[async_trait::async_trait]
impl Changes for Watching {
    async fn next(&mut self) -> Result<(), SourceError> {
        let due = self.shared.records.lock().next_retry();
        let retry = match (due, self.retry.take()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let changed = self.shared.changed.notified();
        match retry {
            Some(at) => {
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
        Ok(())
    }

    fn retry_in(&mut self, after: Duration) {
        self.retry = Some(tokio::time::Instant::now() + after);
    }
}

/// Whom Reconcilers' modules must be signed by, if signatures are required. The
/// configuration's parse read the keys and trusted root already; one unreadable now refuses
/// every module (fails closed) rather than running unsigned ones.
fn trust_policy(config: &HostConfig) -> Option<crate::oci::TrustPolicy> {
    let verify = config.reconcilers.as_ref()?.verify.as_ref()?;
    verify.trust_policy().unwrap_or_else(|e| {
        tracing::error!(
            "reconcilers.verify: {e}; every Reconciler's module is refused until it is fixed"
        );
        Some(crate::oci::TrustPolicy::none())
    })
}
