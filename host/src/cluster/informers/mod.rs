//! Shared informers: one list+watch per (kind, scope), shared by every guest that reads or
//! watches that kind, released when the last user lets go. The cache behind each is what the
//! guests' `lister` interface reads.
//!
//! Start with [`Informers::acquire`]; the handle it returns ([`Informer`]) reads the cache,
//! subscribes to events and records the host's own writes (read-your-writes).
//!
//! Kinds arrive at run time with guests, so everything is dynamic: `DynamicObject` plus the
//! `ApiResource` found by discovery. From kube-rs we take discovery ([`crate::cluster::discovery`]) and the
//! watch protocol with its backoff (`watch.rs`). We write the store (`store.rs`: the reflector's
//! store takes no writes from outside and does not compare resourceVersions), the form an object
//! is cached in (`cached.rs`: its JSON text, once, without `managedFields`), the sharing and
//! ref-counting (here), subscriptions with lag recovery and resync (`subscription.rs`), the
//! label selector parser (`crate::cluster::selector`: kube-core has none), and each informer's own client
//! (`client.rs`: counts the bytes it receives, adds `shardSelector`).
//!
//! The public registry ([`Informers`]) is here; `informer.rs` holds one informer, its handles
//! and the weak map behind the registry; `subscription.rs` subscribes to one; `event.rs`,
//! `scope.rs`, `options.rs`, `error.rs` the types they share.
//!
//! How a cache is filled and what it holds: a streaming list where the API server serves one,
//! pages where it refuses ([`InitialList`]); whole objects, or for a kind whose events are all
//! a caller needs ([`Informers::acquire_metadata`]: secondary watches mapped by owner reference,
//! label or field index) only each object's metadata, until the first read of the kind asks for
//! more ([`Informer::until_full`]). See `watch.rs`.
//!
//! Sharded scopes ([`WatchScope::shard`], sharded mode) hold only the objects whose uid hashes into
//! a set of slots, filtered on the API server when it honours `shardSelector` and on the client
//! otherwise ([`ShardFilter`], `shard.rs`). A new slot set is a new scope, so a handover is a
//! fresh list of the new share rather than an edit of a running cache.

mod cached;
mod client;
mod error;
mod event;
mod informer;
mod options;
mod scope;
mod shard;
mod store;
mod subscription;
mod watch;

use std::{
    collections::{HashMap, HashSet},
    fmt,
    sync::{
        Arc, Weak,
        atomic::{AtomicUsize, Ordering},
    },
    time::Instant,
};

use kube::{Client, core::GroupVersionKind};
use parking_lot::Mutex;

use error::describe;
use informer::{InformerState, Key, Registry};

pub use crate::cluster::selector::{SelectorError, parse_selector};
pub(crate) use cached::CachedObject;
pub use cached::SelectorMatcher;
pub use error::InformerError;
pub use event::InformerEvent;
pub use informer::{Informer, OwnWrite};
pub use options::{INITIAL_LIST_ENV, InitialList, METADATA_SECONDARIES_ENV, Options};
pub use scope::WatchScope;
pub(crate) use shard::Share;
pub use shard::{FilterMode, ShardFilter};
pub use subscription::Subscription;

/// The registry of shared informers; clone it freely (one per host).
#[derive(Clone)]
pub struct Informers {
    registry: Arc<Registry>,
}

impl fmt::Debug for Informers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Informers")
            .field("active", &self.active())
            .finish()
    }
}

/// One running informer, as listed by [`Informers::active`].
#[derive(Clone, Debug)]
pub struct InformerInfo {
    pub(crate) gvk: GroupVersionKind,
    pub(crate) scope: WatchScope,
    /// Live [`Informer`] handles, subscriptions included.
    pub handles: usize,
    pub objects: usize,
    pub synced: bool,
    /// See [`Informer::lists`].
    pub lists: u64,
    /// See [`Informer::filter_mode`].
    pub filter: Option<FilterMode>,
    /// See [`Informer::metadata_only`].
    pub metadata_only: bool,
    /// See [`Informer::list_mode`].
    pub list_mode: Option<InitialList>,
}

impl Informers {
    /// The discovery cache these informers resolve kinds with, for others to share.
    pub(crate) fn resolver(&self) -> &crate::cluster::discovery::Resolver {
        &self.registry.discovery
    }

    pub fn new(client: Client) -> Self {
        Self::with_options(client, Options::default())
    }

    pub fn with_options(client: Client, options: Options) -> Self {
        let metrics = options.metrics.clone();
        let registry = Arc::new(Registry {
            client,
            options,
            discovery: crate::cluster::discovery::Resolver::default(),
            informers: Mutex::new(HashMap::new()),
            watch_tasks: Arc::new(AtomicUsize::new(0)),
            reported: Mutex::new(HashSet::new()),
            reported_filters: Mutex::new(HashSet::new()),
        });
        if let Some(metrics) = metrics {
            let weak: Weak<Registry> = Arc::downgrade(&registry);
            metrics.register_scrape_hook(weak);
        }
        Self { registry }
    }

    /// A handle on the informer for `gvk` within `scope`, starting it if nobody holds one.
    ///
    /// Cost: free when the informer runs already; otherwise one discovery request (cached per
    /// GVK after the first success; failures are not cached, so a CRD installed later resolves
    /// on the next call) and a new list+watch in the background. The returned handle has not
    /// necessarily synced: gate on [`Informer::wait_synced`]. A sharded scope in `auto` or
    /// `server` mode first lists one object to learn whether the server filters (see
    /// [`ShardFilter`]); an empty slot set costs nothing at all.
    ///
    /// # Errors
    ///
    /// [`InformerError::UnknownKind`] when the API server does not serve the kind (yet),
    /// `ClusterScoped` for a namespace on a cluster-scoped kind, `Selector` for a bad label
    /// selector, `NotWatchable` and `Discovery` as named.
    pub async fn acquire(
        &self,
        gvk: &GroupVersionKind,
        scope: WatchScope,
    ) -> Result<Informer, InformerError> {
        self.acquire_with(gvk, scope, false).await
    }

    /// As [`Informers::acquire`], for a caller that needs only the objects' metadata (a
    /// secondary watch that maps events by owner reference, label or field index). A new
    /// informer then watches `PartialObjectMetadata`: a fraction of the memory and traffic of
    /// whole objects. A running informer is shared as it is, full or not. The first reader of
    /// whole objects upgrades it ([`Informer::until_full`]), as does an `acquire` of the same
    /// kind and scope; it never goes back. With [`Options::metadata_secondaries`] off, the same
    /// as `acquire`.
    ///
    /// # Errors
    ///
    /// As [`Informers::acquire`].
    pub async fn acquire_metadata(
        &self,
        gvk: &GroupVersionKind,
        scope: WatchScope,
    ) -> Result<Informer, InformerError> {
        self.acquire_with(gvk, scope, true).await
    }

    /// [`Informers::acquire_metadata`] when `metadata_only`, else [`Informers::acquire`].
    ///
    /// # Errors
    ///
    /// As [`Informers::acquire`].
    pub async fn acquire_with(
        &self,
        gvk: &GroupVersionKind,
        scope: WatchScope,
        metadata_only: bool,
    ) -> Result<Informer, InformerError> {
        let metadata = metadata_only && self.registry.options.metadata_secondaries;
        let selector = match scope
            .label_selector
            .as_deref()
            .map(parse_selector)
            .transpose()
        {
            Ok(selector) => selector.filter(|s| !s.selects_all()),
            Err(source) => {
                return Err(InformerError::Selector {
                    gvk: describe(gvk),
                    source,
                });
            }
        };
        // Canonical, so `a=1,b=2` and `b=2, a=1` share one informer.
        let key = Key {
            gvk: gvk.clone(),
            scope: WatchScope {
                namespace: scope.namespace.filter(|ns| !ns.is_empty()),
                label_selector: selector.as_ref().map(ToString::to_string),
                shard: scope.shard.filter(|slots| !slots.is_all()),
            },
        };
        if let Some(shared) = self.lookup(&key) {
            return Ok(Self::shared(shared, metadata));
        }
        let resolved = self
            .registry
            .discovery
            .resolve(&self.registry.client, gvk)
            .await
            .map_err(|source| {
                if crate::cluster::discovery::is_unknown_kind(&source) {
                    InformerError::UnknownKind {
                        group: gvk.group.clone(),
                        version: gvk.version.clone(),
                        kind: gvk.kind.clone(),
                    }
                } else {
                    InformerError::Discovery {
                        gvk: describe(gvk),
                        source: Box::new(source),
                    }
                }
            })?;
        if !resolved.watchable {
            return Err(InformerError::NotWatchable { gvk: describe(gvk) });
        }
        if let Some(namespace) = &key.scope.namespace
            && !resolved.namespaced
        {
            return Err(InformerError::ClusterScoped {
                gvk: describe(gvk),
                namespace: namespace.clone(),
            });
        }
        let mut informers = self.registry.informers.lock();
        if let Some(shared) = informers.get(&key).and_then(Weak::upgrade) {
            drop(informers);
            return Ok(Self::shared(shared, metadata));
        }
        let shared = Arc::new(InformerState::start(
            &self.registry,
            key.clone(),
            resolved,
            selector,
            metadata,
        ));
        informers.insert(key, Arc::downgrade(&shared));
        drop(informers);
        Ok(Informer { shared })
    }

    /// A handle on a running informer; one that wants whole objects upgrades it.
    fn shared(shared: Arc<InformerState>, metadata: bool) -> Informer {
        if !metadata {
            shared.upgrade();
        }
        Informer { shared }
    }

    fn lookup(&self, key: &Key) -> Option<Arc<InformerState>> {
        let informers = self.registry.informers.lock();
        informers.get(key).and_then(Weak::upgrade)
    }

    /// The running informers, sorted by kind. For status pages and tests.
    pub fn active(&self) -> Vec<InformerInfo> {
        let live = self.registry.live();
        let mut infos: Vec<InformerInfo> = live
            .iter()
            .map(|shared| InformerInfo {
                gvk: shared.key.gvk.clone(),
                scope: shared.key.scope.clone(),
                handles: Arc::strong_count(shared) - 1,
                objects: shared.cache.store.read().len(Instant::now()),
                synced: *shared.cache.synced.borrow(),
                lists: shared.cache.lists.load(Ordering::Relaxed),
                filter: shared.cache.filter.get().copied(),
                metadata_only: *shared.cache.form.borrow() != watch::Form::Full,
                list_mode: *shared.cache.listed_by.lock(),
            })
            .collect();
        drop(live);
        infos.sort_by_cached_key(|info| {
            (
                info.gvk.group.clone(),
                info.gvk.version.clone(),
                info.gvk.kind.clone(),
                info.scope.namespace.clone(),
                info.scope.label_selector.clone(),
                info.scope.shard.map(|slots| slots.runs()),
            )
        });
        infos
    }

    /// Each informer whose cache has not synced and whose watch has failed meanwhile, as
    /// `Kind (group/version): why`, sorted: what `/readyz` adds to the guests it names (an API
    /// server holding a list back with `Retry-After`, an RBAC refusal). Takes only the
    /// registry's lock and each such informer's error lock, both short-held.
    pub fn unsynced(&self) -> Vec<String> {
        let mut reasons: Vec<String> = self
            .registry
            .live()
            .iter()
            .filter(|shared| !*shared.cache.synced.borrow())
            .filter_map(|shared| {
                let why = shared.cache.last_error.lock().clone()?;
                Some(format!("{}: {why}", error::describe(&shared.key.gvk)))
            })
            .collect();
        reasons.sort();
        reasons.dedup();
        reasons
    }

    /// Watch tasks still running. Drops to 0 shortly after the last handles go (tasks are aborted,
    /// and an aborted task is torn down on the runtime's next turn).
    pub fn watch_tasks(&self) -> usize {
        self.registry.watch_tasks.load(Ordering::SeqCst)
    }
}
