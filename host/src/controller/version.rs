//! One version of a guest as its controller runs it: the capability contexts of its reconciles,
//! its `map` and its `index` calls, the providers behind them, its recorder, and how many keys
//! it reconciles at once. A hot swap builds a new one; a reconcile keeps the one it started on.

use std::sync::Arc;

use super::Shared;
use super::caches::Caches;
use super::keys::Keys;
use crate::sandbox::capabilities::{GuestContext, NETWORK_BACKEND, Providers, Scope};
use crate::sandbox::providers::kube::KubeCluster;
use crate::sandbox::records::Recorder;
use crate::supply::guest_set::ActiveGuest;

/// One guest version with the capability context built for it.
pub(super) struct GuestVersion {
    pub(super) guest: Arc<ActiveGuest>,
    pub(super) context: Arc<GuestContext>,
    /// What the guest's `map` calls see: its lister, and refusals for everything else.
    pub(super) map_context: Arc<GuestContext>,
    /// What the guest's `index` calls see: refusals only (the values come from the object).
    pub(super) index_context: Arc<GuestContext>,
    /// Long-lived per guest: its event recorder aggregates repeats across reconciles.
    pub(super) cluster: Arc<KubeCluster>,
    /// When the grant sets `record`: which reconciles are written down for replay.
    pub(super) recorder: Option<Recorder>,
    /// Whether its reconciles count in the guest's metrics and shadow verdicts: not for a
    /// rollout's shadow runs of a new version, which the rollout counts.
    pub(super) counted: bool,
}

impl GuestVersion {
    pub(super) fn new(
        shared: &Shared,
        guest: &Arc<ActiveGuest>,
        caches: &Arc<Caches>,
        keys: &Keys,
    ) -> Self {
        let cluster = Arc::new(KubeCluster::new(
            shared.client.clone(),
            caches.readable_with_primary(),
            shared.informers.resolver().clone(),
            guest.name(),
            shared.fence.clone(),
            guest.grant.service_account.as_ref(),
        ));
        let network = shared
            .networks
            .get(NETWORK_BACKEND)
            .filter(|_| guest.grant.backends.contains(NETWORK_BACKEND))
            .cloned();
        let mut providers = crate::sandbox::providers::kube::providers(
            caches.readable.clone(),
            Arc::new(keys.clone()),
            cluster.clone(),
            network,
        );
        if !guest.grant.http.is_empty() {
            providers = providers.with_http(shared.outbound.clone());
        }
        let scope = Scope::of(&guest.loaded.manifest, shared.namespace.as_deref())
            .in_tenant(guest.tenant());
        let map_context = map_context(shared, guest, &providers, scope.clone());
        let index_context = index_context(shared, guest, scope.clone());
        let context = GuestContext::new(guest.name(), guest.grant.clone(), providers)
            .with_scope(scope)
            .with_metrics(shared.metrics.clone());
        Self {
            guest: guest.clone(),
            context: Arc::new(context),
            map_context,
            index_context,
            cluster,
            recorder: recorder(shared, guest),
            counted: true,
        }
    }
}

impl GuestVersion {
    /// A new version of the same guest in place of `current`: its providers, cluster writer
    /// and budget carry over, so its rates and its event aggregation continue.
    pub(super) fn swapped(
        shared: &Shared,
        guest: Arc<ActiveGuest>,
        current: &GuestVersion,
    ) -> Self {
        let budget = current.context.budget.clone();
        let providers = current.context.providers.clone();
        Self::beside(shared, guest, current, providers, Some(budget))
    }

    /// A rollout's new version beside `current`: the same providers, but a budget of its own
    /// (the grant's rates), so neither version can spend what the other may write; the keys
    /// it enqueues are noted in `enqueued`, so the old version's reconciles they cause do not
    /// count in its window (a version must not make its baseline look worse).
    pub(super) fn candidate(
        shared: &Shared,
        guest: Arc<ActiveGuest>,
        current: &GuestVersion,
        enqueued: Enqueued,
    ) -> Self {
        let mut providers = current.context.providers.clone();
        providers.queue = Arc::new(Noted {
            queue: providers.queue.clone(),
            enqueued,
        });
        Self::beside(shared, guest, current, providers, None)
    }

    /// A rollout's shadow runs of `guest` beside `current`: its grant in shadow mode, so its
    /// writes are compared with the live state, not sent; its enqueues not sent either (the
    /// queue is the stable version's); a budget of its own; nothing recorded for replay; its
    /// reconciles counted by the rollout only.
    pub(super) fn shadowing(shared: &Shared, guest: &ActiveGuest, current: &GuestVersion) -> Self {
        let mut providers = current.context.providers.clone();
        providers.queue = Arc::new(NotSent(providers.queue.clone()));
        let mut version = Self::beside(
            shared,
            Arc::new(guest.in_shadow()),
            current,
            providers,
            None,
        );
        version.recorder = None;
        version.counted = false;
        version
    }

    fn beside(
        shared: &Shared,
        guest: Arc<ActiveGuest>,
        current: &GuestVersion,
        providers: Providers,
        budget: Option<Arc<crate::sandbox::capabilities::Budget>>,
    ) -> Self {
        let scope = Scope::of(&guest.loaded.manifest, shared.namespace.as_deref())
            .in_tenant(guest.tenant());
        let map_context = map_context(shared, &guest, &providers, scope.clone());
        let mut context = GuestContext::new(guest.name(), guest.grant.clone(), providers)
            .with_scope(scope.clone())
            .with_metrics(shared.metrics.clone());
        if let Some(budget) = budget {
            context = context.with_budget(budget);
        }
        GuestVersion {
            map_context,
            index_context: index_context(shared, &guest, scope),
            context: Arc::new(context),
            recorder: recorder(shared, &guest),
            guest,
            cluster: current.cluster.clone(),
            counted: true,
        }
    }
}

/// Keys (their [`crate::supply::rollout::key_id`]) a rollout's new version enqueued.
pub(super) type Enqueued = Arc<parking_lot::Mutex<std::collections::HashSet<u64>>>;

/// The new version's enqueues: sent, and noted.
struct Noted {
    queue: Arc<dyn crate::sandbox::capabilities::Enqueuer>,
    enqueued: Enqueued,
}

impl crate::sandbox::capabilities::Enqueuer for Noted {
    fn enqueue(
        &self,
        key: crate::cluster::objects::ObjectKey,
        after: Option<std::time::Duration>,
    ) -> Result<(), crate::sandbox::capabilities::HostError> {
        let id = crate::supply::rollout::key_id(key.namespace.as_deref(), &key.name);
        self.queue.enqueue(key, after)?;
        let mut enqueued = self.enqueued.lock();
        // Bounded as a window's keys are; beyond, the old version's runs count again.
        if enqueued.len() < 65_536 {
            enqueued.insert(id);
        }
        Ok(())
    }

    fn pending(&self) -> usize {
        self.queue.pending()
    }
}

/// A shadow run's enqueues: answered as sent, never queued (the queue is the stable
/// version's, and a shadow run changes nothing).
struct NotSent(Arc<dyn crate::sandbox::capabilities::Enqueuer>);

impl crate::sandbox::capabilities::Enqueuer for NotSent {
    fn enqueue(
        &self,
        key: crate::cluster::objects::ObjectKey,
        after: Option<std::time::Duration>,
    ) -> Result<(), crate::sandbox::capabilities::HostError> {
        tracing::debug!(%key, ?after, "shadow: enqueue not sent");
        Ok(())
    }

    fn pending(&self) -> usize {
        self.0.pending()
    }
}

/// The context of the guest's `map` calls: its lister and nothing else, and a budget of their
/// own, so mapping events never spends what its reconciles may write.
fn map_context(
    shared: &Shared,
    guest: &ActiveGuest,
    providers: &Providers,
    scope: Scope,
) -> Arc<GuestContext> {
    Arc::new(
        GuestContext::new(guest.name(), guest.grant.clone(), providers.read_only())
            .with_scope(scope)
            .with_metrics(shared.metrics.clone()),
    )
}

/// The context of the guest's `index` calls: every host call refused, so an index's values
/// come from the primary object alone.
fn index_context(shared: &Shared, guest: &ActiveGuest, scope: Scope) -> Arc<GuestContext> {
    Arc::new(
        GuestContext::new(
            guest.name(),
            guest.grant.clone(),
            Providers::deny_indexing(),
        )
        .with_scope(scope)
        .with_metrics(shared.metrics.clone()),
    )
}

fn recorder(shared: &Shared, guest: &ActiveGuest) -> Option<Recorder> {
    Recorder::new(
        guest.grant.record.as_ref(),
        shared.record_directory.as_deref(),
        guest.name(),
    )
}

/// How many keys a guest reconciles at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Concurrency {
    /// The manifest's `concurrency` (lowered by the grant's): that many workers.
    Fixed(usize),
    /// The manifest left it at 0: the host's adaptive limit on API writes, up to `cap` (the
    /// grant's `concurrency`, else `maxConcurrency`).
    Adaptive { cap: usize },
}

/// The guest's concurrency; a `max_concurrency` of 0 leaves the adaptive cap at the grant's
/// (for comparing two versions of one guest, which share the host's).
pub(super) fn concurrency(guest: &ActiveGuest, max_concurrency: u32) -> Concurrency {
    let granted = guest.grant.limits.concurrency;
    match guest.loaded.manifest.concurrency {
        0 => {
            let max = if max_concurrency == 0 {
                u32::MAX
            } else {
                max_concurrency
            };
            let cap = granted.map_or(max, |g| g.min(max));
            Concurrency::Adaptive {
                cap: cap.max(1) as usize,
            }
        }
        asked => Concurrency::Fixed(asked.min(granted.unwrap_or(asked)).max(1) as usize),
    }
}

impl Concurrency {
    /// The workers to start and, for an adaptive guest, the slots they take keys under.
    pub(super) fn workers(
        self,
        shared: &Shared,
        guest: &str,
    ) -> (usize, Option<Arc<crate::cluster::flowcontrol::Slots>>) {
        match self {
            Concurrency::Fixed(n) => {
                shared.metrics.guest_concurrency(guest, n);
                (n, None)
            }
            Concurrency::Adaptive { cap } => (
                cap,
                Some(Arc::new(crate::cluster::flowcontrol::Slots::new(
                    &shared.flow,
                    cap,
                    guest,
                ))),
            ),
        }
    }
}
