//! The informers one controller holds: its primary kind's, each secondary watch's (with the
//! filter and the index its events go through) and every kind its grant lets it read, acquired
//! from the shared informers under the guest's namespace, selectors and shard.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::Shared;
use super::index::{FieldIndex, IndexBudget, Source as IndexSource};
use super::triggers::WatchFilter;
use crate::cluster::informers::{Informer, WatchScope};
use crate::cluster::objects::{Gvk, ObjectKey};
use crate::metrics::Metrics;
use crate::sandbox::manifest::{Mapping, SecondaryWatch};
use crate::supply::guest_set::ActiveGuest;

/// The informers a controller holds: primary, secondaries, and every kind it may read.
pub(super) struct Caches {
    pub(super) primary: Informer,
    /// Each secondary watch with the informer its events come from and what of them it takes.
    pub(super) secondaries: Vec<(Informer, SecondaryWatch, WatchFilter)>,
    /// The indexes the `field` and computed watches look up, one per path or computed index.
    pub(super) indexes: Vec<Arc<FieldIndex>>,
    pub(super) readable: BTreeMap<Gvk, Informer>,
    /// Sharded mode: primary keys seen deleted and not yet reconciled. Any other key whose
    /// object is not in the (sharded) primary cache belongs to another replica.
    pub(super) gone: Option<Arc<parking_lot::Mutex<std::collections::HashSet<ObjectKey>>>>,
}

/// Why a guest's caches could not be acquired: its controller does not start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CacheError {
    /// `what` is the secondary kind and a space, or empty for the primary.
    #[error(
        "guest `{guest}` watches {what}in namespace {wanted} but the host is restricted to namespace {host}"
    )]
    Outside {
        guest: String,
        what: String,
        wanted: String,
        host: String,
    },
    #[error(transparent)]
    Informer(#[from] crate::cluster::informers::InformerError),
    #[error(transparent)]
    Selector(#[from] crate::cluster::informers::SelectorError),
}

impl Caches {
    pub(super) async fn acquire(shared: &Shared, guest: &ActiveGuest) -> Result<Self, CacheError> {
        let manifest = &guest.loaded.manifest;
        let namespace = match (&manifest.namespace, &shared.namespace) {
            (Some(wanted), Some(host)) if wanted != host => {
                return Err(CacheError::Outside {
                    guest: manifest.name.clone(),
                    what: String::new(),
                    wanted: wanted.clone(),
                    host: host.clone(),
                });
            }
            (wanted, host) => wanted.clone().or_else(|| host.clone()),
        };
        let selectors = &guest.grant.read_selectors;
        let primary = acquire_scoped(
            shared,
            &manifest.primary,
            namespace.clone(),
            selectors.narrow(&manifest.primary, manifest.label_selector.as_deref()),
            shared.shard,
            guest,
        )
        .await?;
        let readable = Self::readable(shared, guest, &primary).await;
        let mut secondaries = Vec::new();
        let mut indexes: Vec<Arc<FieldIndex>> = Vec::new();
        // What the guest's indexes hold together.
        let budget = Arc::new(IndexBudget::default());
        for secondary in &manifest.secondary {
            let watched = match (&secondary.namespace, &shared.namespace) {
                (Some(wanted), Some(host)) if wanted != host => {
                    return Err(CacheError::Outside {
                        guest: manifest.name.clone(),
                        what: format!("{} ", secondary.kind),
                        wanted: wanted.clone(),
                        host: host.clone(),
                    });
                }
                (Some(wanted), _) => Some(wanted.clone()),
                (None, _) => namespace.clone(),
            };
            let Some(informer) =
                secondary_informer(shared, guest, &readable, &secondary.kind).await?
            else {
                continue;
            };
            let filter = WatchFilter::new(watched, secondary.label_selector.as_deref())?;
            let index = match &secondary.mapping {
                Mapping::Field { path, .. } => {
                    Some(FieldIndex::of_path(path.clone(), budget.clone()))
                }
                Mapping::Computed { index, .. } => {
                    Some(FieldIndex::computed(index, budget.clone()))
                }
                _ => None,
            };
            if let Some(index) = index
                && !indexes.iter().any(|i| i.source() == index.source())
            {
                indexes.push(Arc::new(index));
            }
            secondaries.push((informer, secondary.clone(), filter));
        }
        Ok(Self {
            primary,
            secondaries,
            indexes,
            readable,
            gone: shared.shard.map(|_| Arc::default()),
        })
    }

    /// The informers the lister serves: every kind in the grant, within its readSelectors. A
    /// kind the server does not serve (yet) is logged and its reads return `unavailable`.
    async fn readable(
        shared: &Shared,
        guest: &ActiveGuest,
        primary: &Informer,
    ) -> BTreeMap<Gvk, Informer> {
        let manifest = &guest.loaded.manifest;
        let selectors = &guest.grant.read_selectors;
        let mut readable = BTreeMap::new();
        // Sharded: lookups of the primary kind read this replica's share unless the grant
        // asks for the whole kind (`primaryReads: whole`).
        if shared.shard.is_some() && guest.grant.primary_reads == crate::config::PrimaryReads::Share
        {
            readable.insert(manifest.primary.clone(), primary.clone());
        }
        let whole: Vec<&Gvk> = guest
            .grant
            .read
            .iter()
            .filter(|k| !readable.contains_key(*k))
            .collect();
        // A namespaced Reconciler's guest reads only its namespace, and no cluster-scoped kind.
        let namespace = guest
            .tenant()
            .map(str::to_owned)
            .or_else(|| shared.namespace.clone());
        for kind in whole {
            let selector = selectors.get(kind).map(str::to_owned);
            let acquired =
                acquire_scoped(shared, kind, namespace.clone(), selector, None, guest).await;
            match acquired {
                Ok(informer) => {
                    readable.insert(kind.clone(), informer);
                }
                Err(e) => {
                    tracing::warn!(guest = %manifest.name, %kind, "granted kind cannot be cached: {e}");
                }
            }
        }
        readable
    }

    pub(super) async fn wait_synced(&self) {
        self.primary.wait_synced().await;
        for (informer, _, _) in &self.secondaries {
            informer.wait_synced().await;
        }
        for informer in self.readable.values() {
            informer.wait_synced().await;
        }
    }

    /// Sharded: a key whose object this replica neither caches nor saw deleted is another
    /// replica's (a secondary object's owner, a guest's enqueue); its owner reconciles it.
    /// Counted and logged here.
    pub(super) fn foreign(&self, key: &ObjectKey, metrics: &Metrics, guest: &str) -> bool {
        let foreign = self
            .gone
            .as_ref()
            .is_some_and(|gone| !gone.lock().contains(key));
        if foreign {
            tracing::debug!("owned by another replica; dropped");
            metrics.shard_foreign_key(guest);
        }
        foreign
    }

    /// The index of `source` (made in `acquire` for every `field` and computed watch).
    pub(super) fn index(&self, source: &IndexSource) -> Arc<FieldIndex> {
        self.indexes
            .iter()
            .find(|i| i.source() == source)
            .cloned()
            .expect("an index for every field and computed watch")
    }

    /// Entries across the field indexes.
    pub(super) fn index_entries(&self) -> usize {
        self.indexes.iter().map(|i| i.len()).sum()
    }

    /// The readable informers plus the primary one (finalizer patches record into it).
    pub(super) fn readable_with_primary(&self) -> BTreeMap<Gvk, Informer> {
        let mut all = self.readable.clone();
        let gvk = self.primary.gvk();
        all.entry(Gvk::new(&gvk.group, &gvk.version, &gvk.kind))
            .or_insert_with(|| self.primary.clone());
        all
    }
}

/// Acquires an informer limited to `namespace`; cluster-scoped kinds ignore the limit, except
/// for a namespaced Reconciler's guest, which may not watch them.
/// The informer a secondary watch of `kind` takes its events from: the lister's informer of
/// the kind, not one of the watch's own, so that an event reaches the guest only once the cache
/// its reconcile reads holds the change (two informers of a kind see a change at different
/// moments, and a reconcile woken by one read the other's older object). The grant's
/// readSelectors bound that cache; the watch's namespace and selector choose among its events.
/// None: a tenant's watch of a cluster-scoped kind, which takes no event (no object of such a
/// kind is in a namespace, as its lister reads none).
async fn secondary_informer(
    shared: &Shared,
    guest: &ActiveGuest,
    readable: &BTreeMap<Gvk, Informer>,
    kind: &Gvk,
) -> Result<Option<Informer>, CacheError> {
    if let Some(informer) = readable.get(kind) {
        return Ok(Some(informer.clone()));
    }
    let selector = guest.grant.read_selectors.get(kind).map(str::to_owned);
    // A tenant's informers, as its lister's, hold its namespace only.
    let within = guest
        .tenant()
        .map(str::to_owned)
        .or_else(|| shared.namespace.clone());
    match acquire_scoped(shared, kind, within, selector, None, guest).await {
        Ok(informer) => Ok(Some(informer)),
        Err(crate::cluster::informers::InformerError::ClusterScoped { .. })
            if guest.tenant().is_some() =>
        {
            tracing::warn!(guest = %guest.loaded.manifest.name, %kind, "secondary watch left out: a namespaced Reconciler's guest watches its namespace only, and this kind is cluster-scoped");
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

async fn acquire_scoped(
    shared: &Shared,
    kind: &Gvk,
    namespace: Option<String>,
    label_selector: Option<String>,
    slots: Option<crate::cluster::shard_ranges::SlotSet>,
    guest: &ActiveGuest,
) -> Result<Informer, crate::cluster::informers::InformerError> {
    let gvk = kube::core::GroupVersionKind::from(kind);
    let scope = WatchScope {
        namespace,
        label_selector: label_selector.clone(),
        shard: slots,
    };
    let metadata = metadata_kinds(&guest.loaded.manifest).contains(kind);
    match shared.informers.acquire_with(&gvk, scope, metadata).await {
        Err(crate::cluster::informers::InformerError::ClusterScoped { .. })
            if guest.tenant().is_none() =>
        {
            shared
                .informers
                .acquire_with(
                    &gvk,
                    WatchScope {
                        namespace: None,
                        label_selector,
                        shard: slots,
                    },
                    metadata,
                )
                .await
        }
        other => other,
    }
}

/// Secondary kinds whose every watch maps events by owner reference, label or an index:
/// their events need only metadata, so their informers start metadata-only, and the guest's
/// first read of the kind makes them whole (`Informers::acquire_metadata`). A `map` call takes
/// the whole object; the primary kind is always whole.
fn metadata_kinds(
    manifest: &crate::sandbox::manifest::Manifest,
) -> std::collections::BTreeSet<&Gvk> {
    let whole = |kind: &Gvk| {
        *kind == manifest.primary
            || manifest
                .secondary
                .iter()
                .any(|w| w.kind == *kind && matches!(w.mapping, Mapping::Function))
    };
    let watched = manifest.secondary.iter().map(|w| &w.kind);
    watched.filter(|kind| !whole(kind)).collect()
}
