//! Field indexes over a primary cache (client-go's `Indexer`, controller-runtime's
//! `IndexField`): for a `field` watch, which primaries' field at a path holds a value; for a
//! computed index, which primaries the guest's `index` export gave a value. An event of the
//! watched kind then finds its primaries without a scan and without a guest call.
//!
//! One index per path (or computed index) per controller, fed by its own subscription to the
//! primary informer (the list, then every change), so it holds what that cache holds (in
//! sharded mode, this replica's share). Cost: one entry per distinct value per primary object,
//! plus the key kept twice (value → keys, key → values); `reconciler_field_index_entries`
//! counts the entries. A computed index also costs one guest call per primary change (none per
//! event of the watched kind), and one per primary when a new guest version loads.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::DynamicObject;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::GuestVersion;
use crate::cluster::informers::{Informer, InformerEvent, Subscription};
use crate::cluster::objects::ObjectKey;
use crate::controller::queue::Priority;
use crate::sandbox::capabilities::CallContext;
use crate::sandbox::manifest::FieldPath;
use crate::sandbox::runtime::{Indexed, Runtime};

/// Which primaries hold which value: at one path, or as the guest computed them.
pub struct FieldIndex {
    source: Source,
    entries: Mutex<Entries>,
    /// A computed index's: the budget it shares with the guest's other computed indexes.
    budget: Option<Arc<IndexBudget>>,
}

/// What [`FieldIndex::set`] did with a key's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// They were what it held.
    Same,
    /// It holds them now, among them one it did not hold.
    More,
    /// It holds them now, all of them held before (some it held are gone).
    Fewer,
    /// A computed index past its budget with them: it holds none for the key.
    OverBudget,
}

/// Where an index's values come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    /// The strings at a path of each primary.
    Path(FieldPath),
    /// The guest's `index` export, for the index of this name.
    Computed(String),
}

/// What a guest's indexes hold together, by [`weight`], against [`INDEX_BYTES`]: one per
/// controller, shared by its field and computed indexes.
#[derive(Debug, Default)]
pub struct IndexBudget(AtomicUsize);

/// Each key and value is allocated once and shared by both maps; a value's primaries are a
/// plain list, since most values name one or a few (a set per value cost 200 bytes more per
/// primary, measured with `./dev bench watches`).
#[derive(Default)]
struct Entries {
    by_value: HashMap<Arc<str>, Vec<Arc<ObjectKey>>>,
    by_key: HashMap<Arc<ObjectKey>, Vec<Arc<str>>>,
    count: usize,
}

/// The most a guest's indexes hold together, field and computed, by [`weight`]: a computed
/// index's values come from the guest, and a field index's from primaries a tenant may write
/// (a list of 130,000 short strings in one object cost the host 12 MB as index entries, nine
/// times the object), so a guest must not grow the host without bound through either. 32 MiB
/// holds some 60,000 primaries of three 20-byte names.
pub(super) const INDEX_BYTES: usize = 32 << 20;

/// What one entry costs the host when its value is held by no other key, as measured by a
/// hostile guest's run (RSS against entries): the value's own allocation, its slot in the
/// value map, the list of its keys, and its place in the key's list, some 160 bytes around it.
fn weight(value: &str) -> usize {
    value.len() + 160
}

impl FieldIndex {
    pub(super) fn new(source: Source) -> Self {
        Self {
            source,
            entries: Mutex::default(),
            budget: None,
        }
    }

    /// An empty index over `path`, holding its entries against `budget`.
    pub(crate) fn of_path(path: FieldPath, budget: Arc<IndexBudget>) -> Self {
        Self {
            budget: Some(budget),
            ..Self::new(Source::Path(path))
        }
    }

    /// An empty computed index `name`, holding its entries against `budget`.
    pub fn computed(name: &str, budget: Arc<IndexBudget>) -> Self {
        Self {
            source: Source::Computed(name.to_owned()),
            entries: Mutex::default(),
            budget: Some(budget),
        }
    }

    /// An empty index over the path `path` (`spec.source`, `spec.targets[*]`), or why the
    /// path is not one.
    pub fn parse(path: &str) -> Result<Self, crate::cluster::validation::Invalid> {
        FieldPath::parse("field", path).map(|path| Self::new(Source::Path(path)))
    }

    pub(crate) fn source(&self) -> &Source {
        &self.source
    }

    /// Indexes `object` (none: the key's object is gone) in place of what the key held, by the
    /// index's path; a computed index takes its values from [`FieldIndex::set`].
    pub fn update(&self, key: &ObjectKey, object: Option<&DynamicObject>) -> Held {
        let values = match (&self.source, object) {
            (Source::Path(path), Some(object)) => path.object_values(object),
            _ => Vec::new(),
        };
        self.set(key, values)
    }

    /// Holds `values` for `key` in place of what it held (none: it leaves the index). An index
    /// with a budget whose guest's indexes would pass [`INDEX_BYTES`] with them holds none
    /// for the key instead.
    pub fn set(&self, key: &ObjectKey, mut values: Vec<String>) -> Held {
        values.sort_unstable();
        values.dedup();
        let mut entries = self.entries.lock();
        let Entries {
            by_value,
            by_key,
            count,
        } = &mut *entries;
        let old = by_key.get(key);
        if old.map_or(values.is_empty(), |old| {
            old.iter()
                .map(|v| &**v)
                .eq(values.iter().map(String::as_str))
        }) {
            return Held::Same;
        }
        // Both sorted: a value the key did not hold is one a lookup could have missed.
        let more = values.iter().any(|v| {
            old.is_none_or(|old| old.binary_search_by(|o| (**o).cmp(v.as_str())).is_err())
        });
        let shared = match by_key.remove_entry(key) {
            Some((shared, old)) => {
                for value in old {
                    if let Some(keys) = by_value.get_mut(&value) {
                        keys.retain(|k| **k != *key);
                        *count -= 1;
                        if let Some(budget) = &self.budget {
                            budget.0.fetch_sub(weight(&value), Ordering::Relaxed);
                        }
                        if keys.is_empty() {
                            by_value.remove(&value);
                        }
                    }
                }
                shared
            }
            None => Arc::new(key.clone()),
        };
        if let Some(budget) = &self.budget {
            // Under the entries' lock, so two sets of this index cannot both take the room;
            // the guest's other indexes are updated by the same task, one at a time.
            let adding: usize = values.iter().map(|v| weight(v)).sum();
            if budget.0.load(Ordering::Relaxed) + adding > INDEX_BYTES {
                return Held::OverBudget;
            }
            budget.0.fetch_add(adding, Ordering::Relaxed);
        }
        if values.is_empty() {
            return Held::Fewer;
        }
        let mut held = Vec::with_capacity(values.len());
        for value in values {
            let value: Arc<str> = match by_value.get_key_value(value.as_str()) {
                Some((existing, _)) => existing.clone(),
                None => Arc::from(value),
            };
            by_value
                .entry(value.clone())
                .or_default()
                .push(shared.clone());
            held.push(value);
        }
        *count += held.len();
        by_key.insert(shared, held);
        if more { Held::More } else { Held::Fewer }
    }

    /// The primaries whose field holds `value`; only those in `namespace` when it is given.
    pub fn lookup(&self, value: &str, namespace: Option<&str>) -> Vec<ObjectKey> {
        let entries = self.entries.lock();
        entries
            .by_value
            .get(value)
            .into_iter()
            .flatten()
            .filter(|k| namespace.is_none_or(|ns| k.namespace.as_deref() == Some(ns)))
            .map(|k| (**k).clone())
            .collect()
    }

    /// Entries held: one per distinct value per primary object.
    #[must_use]
    pub fn len(&self) -> usize {
        self.entries.lock().count
    }

    /// Whether it holds no entry.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps the index in step with the primary informer's events; `changed` is told after
    /// each update (for the entries gauge).
    pub(super) async fn follow(
        &self,
        mut events: Subscription,
        primary: &Informer,
        changed: impl Fn(),
    ) {
        while let Some(event) = events.next().await {
            let object = event.object();
            let key = key_of(object);
            let held = match &event {
                InformerEvent::Deleted { .. } => self.update(&key, None),
                // Replayed from the cache (a subscription's first snapshot, a resync): the head
                // only, so a path into the body is read from the whole cached object.
                InformerEvent::Applied { .. } | InformerEvent::Resync { .. }
                    if object.data.is_null() =>
                {
                    match primary.get(key.namespace.as_deref(), &key.name) {
                        Some(whole) => self.update(&key, Some(&whole)),
                        None => Held::Same,
                    }
                }
                InformerEvent::Applied { .. } | InformerEvent::Resync { .. } => {
                    self.update(&key, Some(object))
                }
            };
            if held == Held::OverBudget {
                let Source::Path(path) = &self.source else {
                    continue;
                };
                tracing::warn!(field = %path, object = %key, "field index values left out: the guest's indexes hold {} MiB, their most; the object is out of the index until its next change", INDEX_BYTES >> 20);
            }
            changed();
        }
    }
}

/// What a guest's computed indexes take: the indexes, the guest version of the moment (a hot
/// swap re-indexes every primary with the new version), the engine, the queue (for primaries
/// that gain a value) and the primary cache (whole objects: events replayed from the cache
/// carry only the head).
pub(super) struct Indexer {
    pub(super) indexes: Vec<Arc<FieldIndex>>,
    pub(super) keys: super::keys::Keys,
    pub(super) runtime: Arc<Runtime>,
    pub(super) version: watch::Receiver<Arc<GuestVersion>>,
    /// The new version of a rollout in flight: its values are held beside the stable one's.
    pub(super) candidate: watch::Receiver<Option<Arc<GuestVersion>>>,
    pub(super) metrics: crate::metrics::Metrics,
    pub(super) primary: Informer,
}

/// How often primaries whose `index` call found no free instance slot (the host's limit, not
/// the guest's fault) are tried again.
const RETRY: Duration = Duration::from_secs(10);

/// Keeps a guest's computed indexes in step with the primary informer's events and the guest's
/// versions, in one task (so a guest runs at most one `index` call at a time): for each
/// primary added or changed, every index's values (a resync of an object already indexed at
/// its resourceVersion calls nothing); for every primary, when a new version loads. `changed`
/// is told after each update.
pub(super) async fn follow_computed(
    mut events: Subscription,
    mut indexer: Indexer,
    changed: impl Fn(),
) {
    let mut state = Followed::default();
    let mut tick = tokio::time::interval(RETRY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    indexer.version.mark_unchanged();
    indexer.candidate.mark_unchanged();
    loop {
        tokio::select! {
            event = events.next() => {
                let Some(event) = event else { return };
                let key = key_of(event.object());
                if let InformerEvent::Deleted { .. } = &event {
                    state.forget(&key);
                    for index in &indexer.indexes {
                        index.set(&key, Vec::new());
                    }
                } else {
                    let priority = match &event {
                        InformerEvent::Applied { listed: false, echo: false, .. } => Priority::Normal,
                        _ => Priority::Low,
                    };
                    index_key(&indexer, &key, priority, &mut state).await;
                }
                changed();
            }
            // A new version, or a rollout begun or ended: every primary again with the
            // versions that run now; a newer change starts it over.
            Ok(()) = versions_changed(&mut indexer) => {
                'versions: loop {
                    indexer.version.mark_unchanged();
                    indexer.candidate.mark_unchanged();
                    state.at.clear();
                    for cached in indexer.primary.list_cached(None, None) {
                        let moved = indexer.version.has_changed().unwrap_or(false)
                            || indexer.candidate.has_changed().unwrap_or(false);
                        if moved {
                            continue 'versions;
                        }
                        let Some(head) = cached.to_head() else { continue };
                        let key = key_of(&head);
                        index_key(&indexer, &key, Priority::Low, &mut state).await;
                    }
                    break;
                }
                changed();
            }
            _ = tick.tick(), if !state.retry.is_empty() => {
                for key in std::mem::take(&mut state.retry) {
                    index_key(&indexer, &key, Priority::Low, &mut state).await;
                }
                changed();
            }
        }
    }
}

/// Completes when the stable version changes, or a rollout begins or ends (a step of one does
/// not: both versions' values are held at every step).
async fn versions_changed(indexer: &mut Indexer) -> Result<(), watch::error::RecvError> {
    let Indexer {
        version, candidate, ..
    } = indexer;
    tokio::select! {
        changed = version.changed() => changed,
        changed = candidate.changed() => changed,
    }
}

/// What the task that follows a guest's computed indexes remembers of each primary.
#[derive(Default)]
struct Followed {
    /// The resourceVersion each key was indexed at by the current version.
    at: HashMap<ObjectKey, String>,
    /// Keys whose call found no free instance slot: tried again every [`RETRY`].
    retry: HashSet<ObjectKey>,
    /// When each key was last queued for a value it gained.
    queued: HashMap<ObjectKey, Instant>,
}

impl Followed {
    fn forget(&mut self, key: &ObjectKey) {
        self.at.remove(key);
        self.retry.remove(key);
        self.queued.remove(key);
    }
}

/// A key that gains values again and again (values drawn from what its own reconcile writes,
/// or from the clock) is queued for them at most this often: a loop of one reconcile per
/// write becomes one per this, and no value's event is lost, only later.
const REQUEUE_GAINED: Duration = Duration::from_secs(10);

/// Indexes the cached primary `key` in each of the guest's indexes, unless it is already
/// indexed at its resourceVersion; queues it at `priority` when it gained a value.
async fn index_key(indexer: &Indexer, key: &ObjectKey, priority: Priority, state: &mut Followed) {
    // The whole object, from the cache: an event replayed from it carries only the head. Gone:
    // its Deleted event follows.
    let Some(object) = indexer.primary.get(key.namespace.as_deref(), &key.name) else {
        return;
    };
    let version = object.metadata.resource_version.clone().unwrap_or_default();
    if state.at.get(key) == Some(&version) {
        return;
    }
    let (mut gained, mut complete) = (false, true);
    for index in &indexer.indexes {
        match index_one(indexer, index, key, &object).await {
            Outcome::Held(held) => gained |= held == Held::More,
            Outcome::Left => complete = false,
            Outcome::NoSlot => {
                complete = false;
                state.retry.insert(key.clone());
            }
        }
    }
    if complete {
        state.at.insert(key.clone(), version);
    } else {
        state.at.remove(key);
    }
    if gained {
        // An event of the watched kind between the primary's change and this call was looked
        // up among its old values, without the new one: its reconcile, queued now, reads what
        // that event changed.
        let now = Instant::now();
        match state.queued.get(key).map(|last| now.duration_since(*last)) {
            Some(since) if since < REQUEUE_GAINED => {
                let wait = REQUEUE_GAINED.saturating_sub(since);
                indexer.keys.add_after(key.clone(), wait);
                state.queued.insert(key.clone(), now + wait);
            }
            _ => {
                indexer
                    .keys
                    .add(key.clone(), priority, &"a new index value");
                state.queued.insert(key.clone(), now);
            }
        }
    }
}

/// What one `index` call came to.
enum Outcome {
    /// The values are held, as [`FieldIndex::set`] says.
    Held(Held),
    /// The call failed, or the values were past the budget: the key is out of the index.
    Left,
    /// No instance slot was free: the key keeps its values, to be tried again.
    NoSlot,
}

/// Asks the guest for `object`'s values in `index` and holds them. During a rollout the new
/// version is asked too and the values of both are held: a watched object's event then reaches
/// the primaries either version relates it to.
async fn index_one(
    indexer: &Indexer,
    index: &FieldIndex,
    key: &ObjectKey,
    object: &DynamicObject,
) -> Outcome {
    let Source::Computed(name) = index.source() else {
        return Outcome::Left;
    };
    let stable = indexer.version.borrow().clone();
    let new = indexer.candidate.borrow().clone();
    let what = format!("{} {key}", indexer.primary.gvk().kind);
    let mut values = match values_of(indexer, &stable, name, &what, object).await {
        Ok(values) => values,
        Err(outcome) => {
            if matches!(outcome, Outcome::Left) {
                index.set(key, Vec::new());
            }
            return outcome;
        }
    };
    // The new version's failure leaves the stable one's values (logged and counted); so does
    // a share of the budget the stable one's values would not need: the new version cannot
    // crowd the stable one's events out of the index.
    let mut held = None;
    if let Some(new) = new
        && let Ok(more) = values_of(indexer, &new, name, &what, object).await
    {
        let mut both = values.clone();
        both.extend(more);
        both.sort();
        both.dedup();
        match index.set(key, both) {
            Held::OverBudget => {}
            kept => held = Some(kept),
        }
    }
    let guest = stable.guest.name();
    match held.unwrap_or_else(|| index.set(key, std::mem::take(&mut values))) {
        Held::OverBudget => {
            indexer.metrics.index_called(
                guest,
                crate::metrics::ReconcileResult::Error,
                Duration::ZERO,
            );
            tracing::warn!(guest = %guest, index = %name, object = %what, "index values left out: the guest's indexes hold {} MiB, their most; the object is out of the index until its next change", INDEX_BYTES >> 20);
            index.set(key, Vec::new());
            Outcome::Left
        }
        held => Outcome::Held(held),
    }
}

/// `version`'s values for `object` (`what`) in its computed index `name`; what the index
/// should do instead when the call gave none ([`Outcome::Left`]: drop the object's values,
/// [`Outcome::NoSlot`]: keep them and try again).
async fn values_of(
    indexer: &Indexer,
    version: &GuestVersion,
    name: &str,
    what: &str,
    object: &DynamicObject,
) -> Result<Vec<String>, Outcome> {
    let guest = version.guest.name();
    let json = match serde_json::to_string(object) {
        Ok(json) => json,
        Err(e) => {
            tracing::warn!(guest = %guest, index = %name, object = %what, "index not called: the object does not serialise: {e}");
            return Err(Outcome::Left);
        }
    };
    let call = CallContext::new(
        version.index_context.clone(),
        format!("index {name} {what}"),
        Some(tokio::runtime::Handle::current()),
    );
    let started = Instant::now();
    let result = indexer
        .runtime
        .index_async(&version.guest.loaded, call, name, json)
        .await;
    match result {
        Indexed::Values { values, dropped } => {
            indexer.metrics.index_called(
                guest,
                crate::metrics::ReconcileResult::Success,
                started.elapsed(),
            );
            if dropped > 0 {
                tracing::warn!(guest = %guest, index = %name, object = %what, "index returned {dropped} values it does not keep (empty, longer than {} bytes, or past the first {})", crate::sandbox::runtime::MAX_INDEX_VALUE_BYTES, crate::sandbox::runtime::MAX_INDEX_VALUES);
            }
            Ok(values)
        }
        Indexed::Failed { result, message } if result == crate::metrics::ReconcileResult::Error => {
            indexer
                .metrics
                .index_called(guest, result, started.elapsed());
            tracing::warn!(guest = %guest, index = %name, object = %what, "index not run ({message}); the object keeps its values and is tried again in {RETRY:?}");
            Err(Outcome::NoSlot)
        }
        Indexed::Failed { result, message } => {
            indexer
                .metrics
                .index_called(guest, result, started.elapsed());
            tracing::warn!(guest = %guest, index = %name, object = %what, "index failed ({}); the object is left out of the index until its next change: {message}", result.as_str());
            Err(Outcome::Left)
        }
    }
}

fn key_of(object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        namespace: object.metadata.namespace.clone(),
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}

impl FieldPath {
    /// The strings this path reaches in `object`: its metadata too when the path starts at
    /// `metadata`, else its body (`spec`, `status`, ...), which needs no conversion.
    pub(crate) fn object_values(&self, object: &DynamicObject) -> Vec<String> {
        let owned;
        let root = if self.starts_at_metadata() {
            owned = serde_json::json!({ "metadata": object.metadata });
            &owned
        } else {
            &object.data
        };
        self.values(root).into_iter().map(str::to_owned).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[allow(clippy::needless_pass_by_value)] // called with `json!` literals
    fn mirror(namespace: &str, name: &str, spec: serde_json::Value) -> DynamicObject {
        let mut object = DynamicObject::new(
            name,
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        )
        .within(namespace);
        object.data = serde_json::json!({ "spec": spec });
        object
    }

    fn key(namespace: &str, name: &str) -> ObjectKey {
        ObjectKey {
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    fn path(text: &str) -> FieldPath {
        FieldPath::parse("field", text).unwrap()
    }

    #[test]
    fn a_computed_index_holds_what_it_is_given_up_to_its_budget() {
        let budget = Arc::new(IndexBudget::default());
        let index = FieldIndex::computed("listed", budget.clone());
        assert_eq!(
            index.set(
                &key("apps", "web"),
                vec!["b".into(), "a".into(), "a".into()]
            ),
            Held::More
        );
        assert_eq!(index.lookup("a", Some("apps")), [key("apps", "web")]);
        assert_eq!(index.len(), 2);
        // The same values again are no new entries.
        assert_eq!(
            index.set(&key("apps", "web"), vec!["a".into(), "b".into()]),
            Held::Same
        );
        assert_eq!(index.len(), 2);
        // Only a value it did not hold is more; nothing for a key that held nothing is the same.
        assert_eq!(
            index.set(&key("apps", "web"), vec!["a".into()]),
            Held::Fewer
        );
        assert_eq!(
            index.set(&key("apps", "web"), vec!["a".into(), "b".into()]),
            Held::More
        );
        assert_eq!(index.set(&key("apps", "none"), Vec::new()), Held::Same);
        // A guest returning the most it may for every primary fills the budget, then no more.
        let value = |k: usize, v: usize| format!("{k:04}-{v:02}-{}", "x".repeat(290));
        let mut refused = None;
        for k in 0..1000 {
            let values = (0..100).map(|v| value(k, v)).collect();
            if index.set(&key("apps", &format!("p{k}")), values) == Held::OverBudget {
                refused = Some(k);
                break;
            }
        }
        let refused = refused.expect("the budget ends the index before 1,000 primaries");
        assert!(refused > 100, "refused only at {refused}");
        assert!(index.lookup(&value(refused, 0), None).is_empty());
        assert_eq!(index.lookup(&value(0, 0), None), [key("apps", "p0")]);
        // The guest's other indexes share the budget: what did not fit here fits there neither.
        let other = FieldIndex::computed("other", budget.clone());
        assert_eq!(
            other.set(
                &key("apps", "p0"),
                (0..100).map(|v| value(refused, v)).collect()
            ),
            Held::OverBudget
        );
        // What leaves makes room again.
        for k in 0..refused {
            index.set(&key("apps", &format!("p{k}")), Vec::new());
        }
        assert_eq!(index.len(), 2);
        assert_eq!(
            index.set(&key("apps", "late"), vec![value(0, 0)]),
            Held::More
        );
        // A field index of the same guest shares the budget too: a primary whose list holds
        // more than fits is out of it, and one that fits is in.
        let refs = FieldIndex::of_path(path("spec.refs[*]"), budget.clone());
        let mut big = mirror("apps", "big", serde_json::json!({}));
        let many: Vec<String> = (0..200_000).map(|v| format!("{v:08}")).collect();
        big.data = serde_json::json!({ "spec": { "refs": many } });
        assert_eq!(
            refs.update(&key("apps", "big"), Some(&big)),
            Held::OverBudget
        );
        assert!(refs.lookup("00000000", None).is_empty());
        let mut small = mirror("apps", "small", serde_json::json!({}));
        small.data = serde_json::json!({ "spec": { "refs": ["a"] } });
        assert_eq!(refs.update(&key("apps", "small"), Some(&small)), Held::More);
        assert_eq!(refs.lookup("a", None), [key("apps", "small")]);
    }

    #[test]
    fn a_list_field_indexes_every_item_and_an_update_replaces_the_old_values() {
        let index = FieldIndex::new(Source::Path(path("spec.targetNamespaces[*]")));
        let a = mirror(
            "team",
            "a",
            serde_json::json!({"targetNamespaces": ["x", "y", "x"]}),
        );
        index.update(&key("team", "a"), Some(&a));
        assert_eq!(index.lookup("x", None), vec![key("team", "a")]);
        assert_eq!(index.lookup("y", None), vec![key("team", "a")]);
        assert_eq!(index.len(), 2, "a repeated value is one entry");

        let a = mirror("team", "a", serde_json::json!({"targetNamespaces": ["z"]}));
        index.update(&key("team", "a"), Some(&a));
        assert!(index.lookup("x", None).is_empty(), "the old value is gone");
        assert_eq!(index.lookup("z", None), vec![key("team", "a")]);
        assert_eq!(index.len(), 1);

        index.update(&key("team", "a"), None);
        assert!(index.lookup("z", None).is_empty());
        assert_eq!(index.len(), 0);
    }

    #[test]
    fn a_lookup_in_a_namespace_finds_only_that_namespaces_primaries() {
        let index = FieldIndex::new(Source::Path(path("spec.source")));
        for (ns, name) in [("a", "m1"), ("a", "m2"), ("b", "m3")] {
            let m = mirror(ns, name, serde_json::json!({"source": "settings"}));
            index.update(&key(ns, name), Some(&m));
        }
        let mut in_a = index.lookup("settings", Some("a"));
        in_a.sort_by(|x, y| x.name.cmp(&y.name));
        assert_eq!(in_a, vec![key("a", "m1"), key("a", "m2")]);
        assert_eq!(index.lookup("settings", None).len(), 3);
        assert!(index.lookup("other", None).is_empty());
    }

    #[test]
    fn values_that_are_not_strings_and_missing_fields_are_not_indexed() {
        let index = FieldIndex::new(Source::Path(path("spec.refs[*].name")));
        let m = mirror(
            "ns",
            "m",
            serde_json::json!({"refs": [{"name": "one"}, {"name": 2}, {"other": "x"}, "bare"]}),
        );
        index.update(&key("ns", "m"), Some(&m));
        assert_eq!(index.len(), 1);
        assert_eq!(index.lookup("one", None), vec![key("ns", "m")]);
        let empty = mirror("ns", "n", serde_json::json!({}));
        index.update(&key("ns", "n"), Some(&empty));
        assert_eq!(index.len(), 1);
    }

    #[test]
    fn a_metadata_path_reads_the_metadata() {
        let index = FieldIndex::new(Source::Path(path("metadata.name")));
        let m = mirror("ns", "m", serde_json::json!({}));
        index.update(&key("ns", "m"), Some(&m));
        assert_eq!(index.lookup("m", Some("ns")), vec![key("ns", "m")]);
        // Quoted, the first step is the same step; a body field whose name begins with
        // `metadata` is the body's.
        let quoted = FieldIndex::new(Source::Path(path(r#"["metadata"].name"#)));
        quoted.update(&key("ns", "m"), Some(&m));
        assert_eq!(quoted.lookup("m", Some("ns")), vec![key("ns", "m")]);
        let body = FieldIndex::new(Source::Path(path("metadataRef.name")));
        let mut n = mirror("ns", "n", serde_json::json!({}));
        n.data = serde_json::json!({"metadataRef": {"name": "x"}});
        body.update(&key("ns", "n"), Some(&n));
        assert_eq!(body.lookup("x", Some("ns")), vec![key("ns", "n")]);
    }
}
