//! Controller triggers: how informer events become keys of the primary kind (client-go's
//! event handlers; `EnqueueRequestForOwner`, label mapping, field indexes and
//! `EnqueueRequestsFromMapFunc` in controller-runtime terms).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use futures::StreamExt;
use kube::api::DynamicObject;
use kube::core::SelectorExt as _;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::GuestVersion;
use super::index::FieldIndex;
use super::keys::Keys;
use crate::cluster::informers::InformerEvent;
use crate::cluster::objects::{Gvk, ObjectKey};
use crate::controller::queue::Priority;
use crate::sandbox::capabilities::CallContext;
use crate::sandbox::manifest::{IndexValue, Mapping};
use crate::sandbox::runtime::{Mapped, Runtime};

/// How an informer's events become primary keys.
pub(super) enum Route {
    /// The primary kind: the object's own key. `gone` (sharded mode) collects the keys seen
    /// deleted, which the controller may still reconcile though they left its cache.
    Primary {
        generation_changed_only: bool,
        gone: Option<Arc<Mutex<HashSet<ObjectKey>>>>,
    },
    /// A secondary kind: the keys its mapper names, for the events its filter takes.
    Secondary(Mapper, WatchFilter),
}

/// Which of an informer's objects a secondary watch takes: its namespace and label selector,
/// applied to the events of the lister's (broader) informer of the kind.
#[derive(Clone)]
pub(crate) struct WatchFilter {
    namespace: Option<String>,
    selector: Option<kube::core::Selector>,
}

impl WatchFilter {
    pub(crate) fn new(
        namespace: Option<String>,
        selector: Option<&str>,
    ) -> Result<Self, crate::cluster::informers::SelectorError> {
        let selector = selector
            .map(crate::cluster::informers::parse_selector)
            .transpose()?;
        Ok(Self {
            namespace,
            selector,
        })
    }

    /// Whether the watch takes `object`: a cluster-scoped object ignores the namespace.
    pub(crate) fn takes(&self, object: &DynamicObject) -> bool {
        let namespace = object.metadata.namespace.as_deref();
        let in_namespace = match (&self.namespace, namespace) {
            (Some(wanted), Some(ns)) => wanted == ns,
            _ => true,
        };
        let empty = std::collections::BTreeMap::new();
        let labels = object.metadata.labels.as_ref().unwrap_or(&empty);
        in_namespace && self.selector.as_ref().is_none_or(|s| s.matches(labels))
    }
}

/// How one secondary watch finds the primary keys of an object.
pub(super) enum Mapper {
    /// Read off the object: owner references, a label, owner labels.
    Read(Mapping),
    /// Looked up in a field index over the primary cache.
    Index {
        index: Arc<FieldIndex>,
        value: IndexValue,
    },
    /// Asked of the guest's `map` export.
    Function(FunctionMapper),
}

/// What calling a guest's `map` needs: the guest version of the moment (a hot swap maps the
/// next event with the new version) and the engine.
pub(super) struct FunctionMapper {
    pub(super) kind: Gvk,
    pub(super) runtime: Arc<Runtime>,
    pub(super) version: watch::Receiver<Arc<GuestVersion>>,
    /// The new version of a rollout in flight: its `map` runs too.
    pub(super) candidate: watch::Receiver<Option<Arc<GuestVersion>>>,
    pub(super) metrics: crate::metrics::Metrics,
    /// The guest's one permit for `map` calls, shared by its function watches.
    pub(super) calls: Arc<tokio::sync::Semaphore>,
}

impl Mapper {
    /// The primary keys `object` maps to.
    async fn keys(&self, object: &DynamicObject, primary: &Gvk) -> Vec<ObjectKey> {
        match self {
            Mapper::Read(mapping) => primary_keys(object, mapping, primary),
            Mapper::Index { index, value } => index_keys(index, *value, object),
            Mapper::Function(function) => function.call(object).await,
        }
    }
}

/// The primaries a field or computed index holds under the watched `object`'s `value`.
pub(crate) fn index_keys(
    index: &FieldIndex,
    value: IndexValue,
    object: &DynamicObject,
) -> Vec<ObjectKey> {
    let namespace = object.metadata.namespace.as_deref();
    let name = object.metadata.name.as_deref().unwrap_or_default();
    match (value, namespace) {
        (IndexValue::Name, namespace) => index.lookup(name, namespace),
        (IndexValue::Namespace, Some(namespace)) => index.lookup(namespace, None),
        (IndexValue::Namespace, None) => Vec::new(),
        (IndexValue::NamespacedName, Some(namespace)) => {
            index.lookup(&format!("{namespace}/{name}"), None)
        }
        (IndexValue::NamespacedName, None) => index.lookup(name, None),
    }
}

impl FunctionMapper {
    /// Calls the guest's `map` on `object`: the keys it named. During a rollout the new
    /// version's `map` runs too, and the keys either named are enqueued (a key the other side
    /// reconciles is only reconciled once more): each version gets the events its own `map`
    /// relates to its keys, from the first step on.
    async fn call(&self, object: &DynamicObject) -> Vec<ObjectKey> {
        let stable = self.version.borrow().clone();
        let new = self.candidate.borrow().clone();
        let mut keys = self.call_version(&stable, object).await;
        if let Some(new) = new {
            for key in self.call_version(&new, object).await {
                if !keys.contains(&key) {
                    keys.push(key);
                }
            }
        }
        keys
    }

    /// Calls `version`'s `map` on `object`: the keys it named, or none when the call failed
    /// (logged and counted; the next change or resync repairs what this event missed).
    async fn call_version(&self, version: &GuestVersion, object: &DynamicObject) -> Vec<ObjectKey> {
        let name = version.guest.name();
        let what = format!("{} {}", self.kind, key_of(object));
        let json = match serde_json::to_string(object) {
            Ok(json) => json,
            Err(e) => {
                tracing::warn!(guest = %name, object = %what, "map not called: the object does not serialise: {e}");
                return Vec::new();
            }
        };
        let call = CallContext::new(
            version.map_context.clone(),
            format!("map {what}"),
            Some(tokio::runtime::Handle::current()),
        );
        let Ok(_permit) = self.calls.acquire().await else {
            return Vec::new();
        };
        let started = Instant::now();
        let mapped = self
            .runtime
            .map_async(&version.guest.loaded, call, &self.kind, json)
            .await;
        match mapped {
            Mapped::Keys { keys, cut } => {
                self.metrics.map_called(
                    name,
                    crate::metrics::ReconcileResult::Success,
                    started.elapsed(),
                );
                if cut {
                    tracing::warn!(guest = %name, object = %what, "map returned more than {} keys; the rest were dropped", crate::sandbox::runtime::MAX_MAPPED_KEYS);
                }
                valid_keys(
                    name,
                    &what,
                    keys,
                    version.context.scope.primary_namespace.as_deref(),
                )
            }
            Mapped::Failed { result, message } => {
                self.metrics.map_called(name, result, started.elapsed());
                tracing::warn!(guest = %name, object = %what, "map failed ({}); this event enqueues nothing, the next change or resync repairs it: {message}", result.as_str());
                Vec::new()
            }
        }
    }
}

/// The keys a guest's `map` returned that can name a primary, once each: a valid name, and the
/// primary watch's namespace when that is restricted. The others are dropped with a log line.
/// A key named twice is enqueued once: a worker may take the first before the second arrives,
/// and would reconcile it twice for one event.
pub(crate) fn valid_keys(
    guest: &str,
    what: &str,
    keys: Vec<ObjectKey>,
    namespace: Option<&str>,
) -> Vec<ObjectKey> {
    let mut seen = std::collections::BTreeSet::new();
    keys.into_iter()
        .filter(|key| seen.insert(key.clone()))
        .filter(|key| {
            let checked = crate::cluster::validation::object_name("key.name", &key.name)
                .and_then(|()| crate::cluster::validation::namespace("key.namespace", key.namespace.as_deref()));
            let outside = namespace.is_some_and(|ns| key.namespace.as_deref() != Some(ns));
            match checked {
                Err(e) => tracing::warn!(guest, object = %what, "map returned an invalid key {key}, dropped: {e}"),
                Ok(()) if outside => tracing::warn!(guest, object = %what, "map returned {key}, outside the primary watch's namespace, dropped"),
                Ok(()) => return true,
            }
            false
        })
        .collect()
}

/// Turns informer events into keys of the primary kind, let into the queue by `keys` (which
/// keeps a tenant's in its namespace). Until `lead` is true (a standby waiting for the lease)
/// every key goes in low: the leader is handling those changes, and what it leaves undone is
/// reconciled after the changes that come once this replica leads.
pub(super) async fn map_events(
    mut events: impl futures::Stream<Item = InformerEvent> + Unpin,
    keys: Keys,
    route: Route,
    primary: Gvk,
    lead: watch::Receiver<bool>,
) {
    while let Some(event) = events.next().await {
        let object = event.object();
        let priority = if *lead.borrow() {
            priority(&event)
        } else {
            Priority::Low
        };
        match &route {
            Route::Primary {
                generation_changed_only,
                gone,
            } => {
                if *generation_changed_only && same_generation(&event) {
                    continue;
                }
                if let (InformerEvent::Deleted { .. }, Some(gone)) = (&event, gone) {
                    gone.lock().insert(key_of(object));
                }
                keys.add(key_of(object), priority, &"its own event");
            }
            Route::Secondary(mapper, filter) => {
                if filter.takes(object) {
                    for key in mapper.keys(object, &primary).await {
                        keys.add(key, priority, &Watched(object));
                    }
                }
                // An update that moved the object to another owner (or out of the watch's
                // selector) must wake the old one too.
                if let InformerEvent::Applied { old: Some(old), .. } = &event
                    && filter.takes(old)
                {
                    for key in mapper.keys(old, &primary).await {
                        keys.add(key, priority, &Watched(old));
                    }
                }
            }
        }
    }
}

/// Backlog (a list, a snapshot, a resync) is low priority, so that a change made while the
/// controller works through it overtakes it; so is the echo of the host's own write (a guest's
/// status write coming back on the watch), which would otherwise put a second pass over every
/// object written ahead of the first pass's remaining backlog. Any other watch event is a
/// change.
fn priority(event: &InformerEvent) -> Priority {
    match event {
        InformerEvent::Applied { listed, echo, .. } if *listed || *echo => Priority::Low,
        InformerEvent::Resync { .. } => Priority::Low,
        InformerEvent::Applied { .. } | InformerEvent::Deleted { .. } => Priority::Normal,
    }
}

/// An update that left the generation and the deletion timestamp as they were (a status,
/// label or annotation write). False for anything else, and for kinds without a generation.
fn same_generation(event: &InformerEvent) -> bool {
    let InformerEvent::Applied {
        object,
        old: Some(old),
        ..
    } = event
    else {
        return false;
    };
    kept_generation(object, old)
}

/// Whether `new` left the generation and the deletion timestamp of `old` as they were: an
/// update a `generation-changed-only` guest is not woken by. False for kinds without one.
pub(crate) fn kept_generation(new: &DynamicObject, old: &DynamicObject) -> bool {
    let (new, old) = (&new.metadata, &old.metadata);
    new.generation.is_some()
        && new.generation == old.generation
        && new.deletion_timestamp == old.deletion_timestamp
}

/// The watched object that named a key, for the log line of one the door refuses.
struct Watched<'a>(&'a DynamicObject);

impl std::fmt::Display for Watched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = self.0.types.as_ref().map_or("", |t| t.kind.as_str());
        write!(f, "a watch's event of {kind} {}", key_of(self.0))
    }
}

fn key_of(object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        namespace: object.metadata.namespace.clone(),
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}

/// The primary keys a secondary object maps to.
pub(crate) fn primary_keys(
    object: &DynamicObject,
    mapping: &Mapping,
    primary: &Gvk,
) -> Vec<ObjectKey> {
    let namespace = object.metadata.namespace.clone();
    match mapping {
        Mapping::Owner => object
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == primary.kind && o.api_version == primary.api_version())
            .map(|o| ObjectKey {
                namespace: namespace.clone(),
                name: o.name.clone(),
            })
            .collect(),
        Mapping::Label(label) => object
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label))
            .map(|name| ObjectKey {
                namespace,
                name: name.clone(),
            })
            .into_iter()
            .collect(),
        Mapping::OwnerLabels {
            namespace: namespace_label,
            name: name_label,
        } => {
            let labels = object.metadata.labels.as_ref();
            let label = |key: &str| labels.and_then(|l| l.get(key)).filter(|v| !v.is_empty());
            let Some(name) = label(name_label) else {
                return Vec::new();
            };
            let namespace = match namespace_label {
                Some(key) => match label(key) {
                    Some(ns) => Some(ns.clone()),
                    None => return Vec::new(),
                },
                None => None,
            };
            vec![ObjectKey {
                namespace,
                name: name.clone(),
            }]
        }
        // Mapped by the index or the guest, never read off the object.
        Mapping::Field { .. } | Mapping::Computed { .. } | Mapping::Function => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use std::sync::Arc;

    fn object(generation: Option<i64>, deleting: bool) -> Arc<DynamicObject> {
        let mut object = DynamicObject::new(
            "w",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        object.metadata.generation = generation;
        object.metadata.deletion_timestamp =
            deleting.then_some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        Arc::new(object)
    }

    fn update(old: Arc<DynamicObject>, new: Arc<DynamicObject>) -> InformerEvent {
        InformerEvent::Applied {
            object: new,
            old: Some(old),
            listed: false,
            echo: false,
        }
    }

    /// A primary (a ConfigMap standing in) in `namespace` whose `spec.source` holds `source`.
    fn primary(namespace: &str, name: &str, source: &str) -> (ObjectKey, DynamicObject) {
        let mut object = DynamicObject::new(
            name,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
        .within(namespace);
        object.data = serde_json::json!({"spec": {"source": source}});
        let key = ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        };
        (key, object)
    }

    /// The primaries an event of `watched` wakes through a `field` mapping of `value`.
    fn woken(index: &Arc<FieldIndex>, value: IndexValue, watched: &DynamicObject) -> Vec<String> {
        let mapper = Mapper::Index {
            index: index.clone(),
            value,
        };
        let primary = Gvk::new("", "v1", "ConfigMap");
        let mut keys: Vec<String> = futures::executor::block_on(mapper.keys(watched, &primary))
            .iter()
            .map(ToString::to_string)
            .collect();
        keys.sort();
        keys
    }

    /// The tenant namespace of the tests below: a namespaced Reconciler's guest held to it.
    const TEAM: &str = "team";

    fn widget_kind() -> Gvk {
        Gvk::new("test.reconciler.dev", "v1", "Widget")
    }

    /// A watched object (a ConfigMap) in `namespace` (none: a cluster-scoped Namespace named
    /// `name`) with `labels`, owned by the Widgets `owners` names.
    fn watched(
        namespace: Option<&str>,
        name: &str,
        labels: &[(&str, &str)],
        owners: &[&str],
    ) -> Arc<DynamicObject> {
        let mut object = match namespace {
            Some(ns) => DynamicObject::new(
                name,
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            )
            .within(ns),
            None => DynamicObject::new(
                name,
                &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
            ),
        };
        object.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
        );
        object.metadata.owner_references = Some(
            owners
                .iter()
                .map(
                    |owner| k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                        api_version: "test.reconciler.dev/v1".into(),
                        kind: "Widget".into(),
                        name: (*owner).into(),
                        uid: format!("uid-{owner}"),
                        ..Default::default()
                    },
                )
                .collect(),
        );
        Arc::new(object)
    }

    fn created(object: Arc<DynamicObject>) -> InformerEvent {
        InformerEvent::Applied {
            object,
            old: None,
            listed: false,
            echo: false,
        }
    }

    /// The keys a guest held to namespace [`TEAM`] is handed for `events` through `route`,
    /// sorted. The route's filter takes every namespace: the rule must hold whatever the
    /// informer and the filter let through.
    async fn handed(route: Route, events: Vec<InformerEvent>) -> Vec<String> {
        let queue = crate::controller::queue::WorkQueue::new(
            crate::controller::queue::QueueConfig::default(),
        );
        let keys = Keys::new(
            queue.clone(),
            Some(TEAM),
            "g",
            crate::metrics::Metrics::new(),
        );
        let (_lead, lead) = watch::channel(true);
        map_events(
            futures::stream::iter(events),
            keys,
            route,
            widget_kind(),
            lead,
        )
        .await;
        let mut keys = Vec::new();
        while !queue.is_empty() {
            let key = queue.get().await.expect("a queued key");
            queue.done(&key);
            keys.push(key.to_string());
        }
        keys.sort();
        keys
    }

    fn secondary(mapper: Mapper) -> Route {
        Route::Secondary(mapper, WatchFilter::new(None, None).unwrap())
    }

    #[tokio::test]
    async fn a_tenant_guest_is_handed_no_primary_key_outside_its_namespace() {
        let route = Route::Primary {
            generation_changed_only: false,
            gone: None,
        };
        let events = vec![
            created(watched(Some(TEAM), "own", &[], &[])),
            created(watched(Some("other"), "theirs", &[], &[])),
            created(watched(None, "cluster", &[], &[])),
        ];
        assert_eq!(handed(route, events).await, ["team/own"]);
    }

    #[tokio::test]
    async fn an_owner_labels_watch_hands_a_tenant_guest_no_key_of_another_namespace() {
        let mapper = Mapper::Read(Mapping::OwnerLabels {
            namespace: Some("owner-namespace".into()),
            name: "owner-name".into(),
        });
        let events = vec![
            created(watched(
                Some(TEAM),
                "points-home",
                &[("owner-namespace", TEAM), ("owner-name", "mine")],
                &[],
            )),
            created(watched(
                Some(TEAM),
                "points-away",
                &[("owner-namespace", "other"), ("owner-name", "theirs")],
                &[],
            )),
            // A cluster-scoped object naming the tenant's own namespace is no way in either.
            created(watched(
                None,
                "cluster",
                &[("owner-namespace", "kube-system"), ("owner-name", "x")],
                &[],
            )),
        ];
        assert_eq!(handed(secondary(mapper), events).await, ["team/mine"]);
        // Without a namespace label the key is cluster-scoped: outside any namespace.
        let bare = Mapper::Read(Mapping::OwnerLabels {
            namespace: None,
            name: "owner-name".into(),
        });
        let events = vec![created(watched(
            Some(TEAM),
            "bare",
            &[("owner-name", "mine")],
            &[],
        ))];
        assert!(handed(secondary(bare), events).await.is_empty());
    }

    #[tokio::test]
    async fn an_update_moving_owner_labels_away_wakes_only_the_tenants_old_owner() {
        let mapper = Mapper::Read(Mapping::OwnerLabels {
            namespace: Some("owner-namespace".into()),
            name: "owner-name".into(),
        });
        let old = watched(
            Some(TEAM),
            "cm",
            &[("owner-namespace", TEAM), ("owner-name", "mine")],
            &[],
        );
        let new = watched(
            Some(TEAM),
            "cm",
            &[("owner-namespace", "other"), ("owner-name", "theirs")],
            &[],
        );
        assert_eq!(
            handed(secondary(mapper), vec![update(old, new)]).await,
            ["team/mine"]
        );
    }

    #[tokio::test]
    async fn owner_and_label_watches_of_cluster_scoped_or_foreign_objects_hand_a_tenant_nothing() {
        let events = || {
            vec![
                created(watched(Some(TEAM), "own", &[("owner", "mine")], &["mine"])),
                created(watched(
                    Some("other"),
                    "theirs",
                    &[("owner", "theirs")],
                    &["theirs"],
                )),
                created(watched(None, "cluster", &[("owner", "any")], &["any"])),
            ]
        };
        assert_eq!(
            handed(secondary(Mapper::Read(Mapping::Owner)), events()).await,
            ["team/mine"]
        );
        assert_eq!(
            handed(
                secondary(Mapper::Read(Mapping::Label("owner".into()))),
                events()
            )
            .await,
            ["team/mine"]
        );
    }

    #[tokio::test]
    async fn a_field_index_hands_a_tenant_guest_no_key_of_another_namespace() {
        // An index over a cache wider than the tenant's (as it would be if the primary
        // informer were ever shared): the rule holds all the same.
        let index = Arc::new(FieldIndex::parse("spec.source").unwrap());
        for (ns, name, source) in [
            (TEAM, "by-name", "settings"),
            ("other", "by-name", "settings"),
            (TEAM, "by-namespace", "hub"),
            ("other", "by-namespace", "hub"),
            (TEAM, "by-namespaced-name", "hub/settings"),
            ("other", "by-namespaced-name", "hub/settings"),
        ] {
            let (key, object) = primary(ns, name, source);
            index.update(&key, Some(&object));
        }
        let settings = || vec![created(watched(Some("hub"), "settings", &[], &[]))];
        let cluster = || vec![created(watched(None, "settings", &[], &[]))];
        let mapper = |value| Mapper::Index {
            index: index.clone(),
            value,
        };
        assert_eq!(
            handed(secondary(mapper(IndexValue::Namespace)), settings()).await,
            ["team/by-namespace"]
        );
        assert_eq!(
            handed(secondary(mapper(IndexValue::NamespacedName)), settings()).await,
            ["team/by-namespaced-name"]
        );
        // A cluster-scoped object by name matches primaries in every namespace.
        assert_eq!(
            handed(secondary(mapper(IndexValue::Name)), cluster()).await,
            ["team/by-name"]
        );
    }

    #[test]
    fn a_function_maps_keys_outside_the_primary_namespace_to_nothing() {
        let keys = ["team/mine", "other/theirs", "cluster"]
            .map(|k| k.parse::<ObjectKey>().unwrap())
            .to_vec();
        let kept = valid_keys("g", "ConfigMap team/cm", keys, Some(TEAM));
        assert_eq!(kept, ["team/mine".parse::<ObjectKey>().unwrap()]);
    }

    #[test]
    fn a_key_a_function_names_twice_is_enqueued_once() {
        let keys = ["team/a", "team/b", "team/a"]
            .map(|k| k.parse::<ObjectKey>().unwrap())
            .to_vec();
        let kept = valid_keys("g", "ConfigMap team/cm", keys, Some(TEAM));
        assert_eq!(
            kept,
            ["team/a", "team/b"].map(|k| k.parse::<ObjectKey>().unwrap())
        );
    }

    #[test]
    fn a_field_index_matches_by_name_by_namespace_and_by_namespace_slash_name() {
        let index = Arc::new(FieldIndex::parse("spec.source").unwrap());
        for (ns, name, source) in [
            ("team", "by-name", "settings"),
            ("other", "by-name-elsewhere", "settings"),
            ("hub", "by-namespace", "team"),
            ("hub", "by-namespaced-name", "team/settings"),
        ] {
            let (key, object) = primary(ns, name, source);
            index.update(&key, Some(&object));
        }
        let settings = DynamicObject::new(
            "settings",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        )
        .within("team");
        // By name: the primaries in the object's own namespace only.
        assert_eq!(woken(&index, IndexValue::Name, &settings), ["team/by-name"]);
        // By namespace: every primary naming it, in any namespace.
        assert_eq!(
            woken(&index, IndexValue::Namespace, &settings),
            ["hub/by-namespace"]
        );
        // By `namespace/name`: in any namespace too.
        assert_eq!(
            woken(&index, IndexValue::NamespacedName, &settings),
            ["hub/by-namespaced-name"]
        );
        // A cluster-scoped object: by namespace nothing; by `namespace/name`, its name alone.
        let cluster = DynamicObject::new(
            "team",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
        );
        assert!(woken(&index, IndexValue::Namespace, &cluster).is_empty());
        assert_eq!(
            woken(&index, IndexValue::NamespacedName, &cluster),
            ["hub/by-namespace"]
        );
    }

    #[test]
    fn only_updates_that_keep_the_generation_are_skipped() {
        let same = update(object(Some(3), false), object(Some(3), false));
        assert!(same_generation(&same), "status/label write");
        let spec = update(object(Some(3), false), object(Some(4), false));
        assert!(!same_generation(&spec), "spec change");
        let deleting = update(object(Some(3), false), object(Some(3), true));
        assert!(!same_generation(&deleting), "deletion started");
        let no_generation = update(object(None, false), object(None, false));
        assert!(!same_generation(&no_generation), "kind without generation");
        let created = InformerEvent::Applied {
            object: object(Some(1), false),
            old: None,
            listed: false,
            echo: false,
        };
        assert!(!same_generation(&created), "creation");
        let resync = InformerEvent::Resync {
            object: object(Some(1), false),
        };
        assert!(!same_generation(&resync), "resync");
        let deleted = InformerEvent::Deleted {
            object: object(Some(1), false),
        };
        assert!(!same_generation(&deleted), "deletion");
    }

    #[test]
    fn lists_snapshots_and_resyncs_are_backlog_and_watch_events_are_changes() {
        let applied = |listed, echo| InformerEvent::Applied {
            object: object(Some(1), false),
            old: None,
            listed,
            echo,
        };
        assert_eq!(priority(&applied(true, false)), Priority::Low);
        assert_eq!(
            priority(&applied(false, true)),
            Priority::Low,
            "the host's own write"
        );
        assert_eq!(
            priority(&InformerEvent::Resync {
                object: object(Some(1), false)
            }),
            Priority::Low
        );
        assert_eq!(priority(&applied(false, false)), Priority::Normal);
        assert_eq!(
            priority(&InformerEvent::Deleted {
                object: object(Some(1), false)
            }),
            Priority::Normal
        );
    }
}
