//! The informer's cache: the objects the watch reported, a namespace index, and the host's own
//! writes laid over them (read-your-writes). Objects are kept as [`CachedObject`]s (JSON text,
//! see `cached.rs`); the store takes and emits `DynamicObject`s at its edges.
//!
//! Why not kube-runtime's `reflector::Store`: its writer is fed only by the watch stream, so the
//! host cannot put the API server's answer to its own write into it, and it applies every event
//! without comparing resourceVersions. We need both: the write overlay (client-go's
//! `MutationCache`, which the API server's CRD naming controller uses to read its own status
//! writes) and "drop an update whose resourceVersion did not change". The store is plain data and
//! returns the events to emit; the caller holds the lock and does the sending.
//!
//! How long an overlay lasts uses what KEP-5647 (stale controller detection, beta in 1.36) gives
//! clients: resourceVersions that compare (KEP-5504: on etcd-backed servers they are integers in
//! write order) and the newest version a cache is synced to, client-go's
//! `LastStoreSyncResourceVersion` (here [`Store::synced_rv`]: watch events' and completed lists'
//! versions; kube-runtime's watcher passes on neither bookmarks nor a list's own version). Its
//! `ConsistencyStore` makes a controller wait until its cache reaches the version of its last
//! write; we show the write instead, until the cache reaches it: an overlay ends at its echo, at
//! a newer version of the object, or when the store is synced to its version or past it even
//! without an echo (the watch is ordered, so it will not come), and a write the store is synced
//! past is refused. The ttl is the fallback where versions do not compare (non-integer ones, a
//! store that has seen none yet), for deletions (whose version the host does not learn), and for
//! an overlay a relist did not confirm (see [`Store::listed`]). A watch that lags however long
//! keeps showing the host's own write, not the older object.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque},
    sync::Arc,
    time::{Duration, Instant},
};

use kube::{ResourceExt, api::DynamicObject, core::Selector};

use super::cached::{CachedObject, SelectorMatcher};
use super::event::InformerEvent;

/// `(namespace, name)`; the namespace is `""` for cluster-scoped objects.
type Key = (String, String);

pub(super) struct Store {
    /// namespace → name → entry. The outer map is the namespace index; both levels are sorted so
    /// `list` is deterministic (a guest sees the same order on replay).
    objects: BTreeMap<String, BTreeMap<String, Entry>>,
    /// Keys whose entry carries an overlay; small, so expiry and `len` only walk these.
    overlaid: BTreeSet<Key>,
    /// Entries with `watched` set.
    watched_count: usize,
    /// Recently deleted keys and their last resourceVersion, so a late `record_write` of an older
    /// version cannot resurrect a deleted object.
    tombstones: HashMap<Key, (String, Instant)>,
    tombstone_order: VecDeque<(Instant, Key)>,
    /// Between the watcher's `Init` and `InitDone`.
    relisting: Relist,
    /// How long an overlay stays in force when versions cannot be compared (see [`Overlay`]),
    /// and how long a tombstone is kept.
    ttl: Duration,
    /// The newest resourceVersion the store is synced to: the largest integer version of a
    /// watch event, or of a completed list's objects (client-go's
    /// `LastStoreSyncResourceVersion`, KEP-5647). None until one was seen. Never goes back.
    synced_rv: Option<u64>,
    /// The largest integer version of the relist in progress, taken into `synced_rv` when it
    /// completes: a list arrives in key order, not version order, so a version seen early in
    /// it says nothing yet about the objects still to come.
    listing_rv: Option<u64>,
    /// Keys with host writes in flight, and the watch's events for them held until the
    /// writes' answers (see [`Store::begin_write`]).
    writing: HashMap<Key, Writing>,
}

/// The host's writes of one key in flight, and what the watch reported meanwhile.
#[derive(Default)]
struct Writing {
    /// Writes sent and not yet answered (nor given up).
    in_flight: usize,
    /// resourceVersions the answers carried so far.
    answered: Vec<String>,
    /// Events for the key in the order the watch sent them.
    held: Vec<InformerEvent>,
}

enum Relist {
    Idle,
    /// The list started with nothing watched (the first list): nothing can vanish, so keys
    /// are not tracked, and a large first list builds no second index of every key.
    Fresh,
    /// Keys listed so far.
    Tracking(HashSet<Key>),
}

#[derive(Default)]
struct Entry {
    /// The newest state the watch reported: what subscribers were last told.
    watched: Option<Arc<CachedObject>>,
    /// The host's own write (or delete), newer than `watched`, shown to readers until the watch
    /// catches up or the ttl passes. Boxed: few entries have one, and every entry pays for
    /// the field.
    overlay: Option<Box<Overlay>>,
}

/// How an overlay ends: when the watch reports the written version (its echo), a newer one of
/// the object, or the object's deletion; or, with integer versions, when the store is synced to
/// the written version or past it ([`Store::synced_rv`]), echo or not: the watch is ordered by
/// version, so having passed the write without showing it, it never will (a selector or shard
/// the object no longer matches, a relist that did not list it). The ttl ends only an overlay
/// that `expires`: one whose version cannot be compared with the watch's.
struct Overlay {
    kind: OverlayKind,
    at: Instant,
    /// The written version as an integer; none for a deletion (its version is not known).
    rv: Option<u64>,
    /// The ttl ends it too. A written overlay with an integer version does not expire once the
    /// store has seen one: a lagging watch then keeps serving the host's own write rather
    /// than an older object. It does expire when recorded before the store saw any version,
    /// and from a relist that did not list its object on (the list may be older than the
    /// write, so only the watch's later events could tell, and a quiet watch sends none).
    expires: bool,
}

impl Overlay {
    fn in_force(&self, now: Instant, ttl: Duration) -> bool {
        !self.expires || now.saturating_duration_since(self.at) < ttl
    }
}

enum OverlayKind {
    Written(Arc<CachedObject>),
    /// Deleted by the host; `rv` is the last version it knew.
    Deleted {
        rv: Option<String>,
    },
}

fn key_of(obj: &DynamicObject) -> Key {
    (obj.namespace().unwrap_or_default(), obj.name_any())
}

fn rv_number(rv: Option<&str>) -> Option<u64> {
    rv?.parse().ok()
}

/// `a` is strictly newer than `b`. resourceVersions are opaque in general; etcd-backed servers
/// use integers, so compare those (as client-go's integer mutation cache does) and otherwise
/// answer "no", which makes the caller prefer the watch.
fn newer(a: Option<&str>, b: Option<&str>) -> bool {
    matches!((rv_number(a), rv_number(b)), (Some(a), Some(b)) if a > b)
}

/// Stores `obj` (`partial`: only its metadata, from a metadata-only watch); `None` (logged) in
/// the impossible case that it does not serialise.
fn cache(obj: &DynamicObject, partial: bool) -> Option<Arc<CachedObject>> {
    CachedObject::with_form(obj, partial)
        .inspect_err(|e| {
            tracing::error!(object = %obj.name_any(), error = %e, "object not cached: it does not serialise");
        })
        .ok()
        .map(Arc::new)
}

impl Entry {
    fn visible(&self, now: Instant, ttl: Duration) -> Option<&Arc<CachedObject>> {
        match &self.overlay {
            Some(overlay) if overlay.in_force(now, ttl) => match &overlay.kind {
                OverlayKind::Written(obj) => Some(obj),
                OverlayKind::Deleted { .. } => None,
            },
            _ => self.watched.as_ref(),
        }
    }
}

impl Store {
    pub(super) fn new(ttl: Duration) -> Self {
        Self {
            objects: BTreeMap::new(),
            overlaid: BTreeSet::new(),
            watched_count: 0,
            tombstones: HashMap::new(),
            tombstone_order: VecDeque::new(),
            relisting: Relist::Idle,
            ttl,
            synced_rv: None,
            listing_rv: None,
            writing: HashMap::new(),
        }
    }

    /// The newest resourceVersion the store is synced to (see [`Store::synced_rv`]). O(1).
    pub(super) fn synced_rv(&self) -> Option<u64> {
        self.synced_rv
    }

    /// The watch reported an object at `rv`. Returns whether `synced_rv` moved, so that the
    /// caller, done with the object's own entry, releases the overlays it reached.
    fn observe(&mut self, rv: Option<&str>) -> bool {
        let Some(rv) = rv_number(rv) else {
            return false;
        };
        if matches!(self.relisting, Relist::Idle) {
            let advanced = self.synced_rv.is_none_or(|s| rv > s);
            self.synced_rv = self.synced_rv.max(Some(rv));
            advanced
        } else {
            self.listing_rv = self.listing_rv.max(Some(rv));
            false
        }
    }

    /// O(log n).
    pub(super) fn get(
        &self,
        namespace: Option<&str>,
        name: &str,
        now: Instant,
    ) -> Option<Arc<CachedObject>> {
        self.objects
            .get(namespace.unwrap_or_default())?
            .get(name)?
            .visible(now, self.ttl)
            .cloned()
    }

    /// O(objects in `namespace`), or O(n) for all namespaces; sorted by namespace, then name.
    pub(super) fn list(
        &self,
        namespace: Option<&str>,
        selector: Option<&Selector>,
        now: Instant,
    ) -> Vec<Arc<CachedObject>> {
        let wanted = selector.map(SelectorMatcher::new);
        let matches = |obj: &&Arc<CachedObject>| wanted.as_ref().is_none_or(|m| m.matches(obj));
        let visible = |names: &BTreeMap<String, Entry>| -> Vec<Arc<CachedObject>> {
            names
                .values()
                .filter_map(|e| e.visible(now, self.ttl))
                .filter(matches)
                .cloned()
                .collect()
        };
        match namespace {
            Some(ns) => self.objects.get(ns).map(visible).unwrap_or_default(),
            None => self.objects.values().flat_map(visible).collect(),
        }
    }

    /// Number of objects `list(None, None)` would return; O(overlays), not O(n).
    pub(super) fn len(&self, now: Instant) -> usize {
        let mut len = self.watched_count;
        for (ns, name) in &self.overlaid {
            let Some(entry) = self.objects.get(ns).and_then(|m| m.get(name)) else {
                continue;
            };
            match (
                entry.watched.is_some(),
                entry.visible(now, self.ttl).is_some(),
            ) {
                (false, true) => len += 1,
                (true, false) => len -= 1,
                _ => {}
            }
        }
        len
    }

    /// The watcher restarted its list; objects not listed again by `end_relist` are gone.
    pub(super) fn begin_relist(&mut self) {
        self.listing_rv = None;
        self.relisting = if self.watched_count > 0 {
            Relist::Tracking(HashSet::new())
        } else {
            Relist::Fresh
        };
    }

    /// An object from the watch (listed or changed). Returns the event to emit, or `None` when
    /// its resourceVersion equals the one subscribers already saw. The event's `old` is the
    /// previous version's head (see [`InformerEvent::Applied`]).
    pub(super) fn apply(&mut self, obj: Arc<DynamicObject>, now: Instant) -> Option<InformerEvent> {
        self.apply_as(obj, now, false)
    }

    /// As [`Store::apply`], for an object from a metadata-only watch: only its metadata.
    pub(super) fn apply_partial(
        &mut self,
        obj: Arc<DynamicObject>,
        now: Instant,
    ) -> Option<InformerEvent> {
        self.apply_as(obj, now, true)
    }

    fn apply_as(
        &mut self,
        obj: Arc<DynamicObject>,
        now: Instant,
        partial: bool,
    ) -> Option<InformerEvent> {
        self.settle(now);
        let key = key_of(&obj);
        if let Relist::Tracking(seen) = &mut self.relisting {
            seen.insert(key.clone());
        }
        // Released at the end, after this entry's own overlay told its echo.
        let advanced = self.observe(obj.metadata.resource_version.as_deref());
        let entry = self
            .objects
            .entry(key.0.clone())
            .or_default()
            .entry(key.1.clone())
            .or_default();
        let obj_rv = obj.metadata.resource_version.as_deref();
        if let Some(old) = &entry.watched
            && old.resource_version() == obj_rv
        {
            // The version subscribers saw, now whole (the relist of an informer upgrading from
            // metadata to full objects): stored without an event.
            if old.is_partial()
                && !partial
                && let Some(whole) = cache(&obj, false)
            {
                entry.watched = Some(whole);
            }
            if advanced {
                self.settle(now);
            }
            return None;
        }
        let Some(cached) = cache(&obj, partial) else {
            if advanced {
                self.settle(now);
            }
            return None;
        };
        let old = entry.watched.replace(cached);
        if old.is_none() {
            self.watched_count += 1;
        }
        // The host's own write: answered and recorded with this very version. Nothing else is
        // its echo, not even an event that beats the answer: anyone's change in that window
        // would otherwise wait behind the backlog (low priority), and only the version tells.
        let echo = entry.overlay.as_ref().is_some_and(
            |o| matches!(&o.kind, OverlayKind::Written(w) if w.resource_version() == obj_rv),
        );
        let keep_overlay = entry.overlay.as_ref().is_some_and(|o| match &o.kind {
            OverlayKind::Written(w) => newer(w.resource_version(), obj_rv),
            // The watch saw a version after the one deleted: re-created (or a stale delete).
            OverlayKind::Deleted { rv } => !newer(obj_rv, rv.as_deref()),
        });
        if !keep_overlay && entry.overlay.take().is_some() {
            self.overlaid.remove(&key);
        }
        if let Some((rv, _)) = self.tombstones.get(&key)
            && newer(obj_rv, Some(rv))
        {
            self.tombstones.remove(&key);
        }
        if advanced {
            self.settle(now);
        }
        let old = old.and_then(|o| o.to_head()).map(Arc::new);
        let listed = !matches!(self.relisting, Relist::Idle);
        let event = InformerEvent::Applied {
            object: obj,
            old,
            listed,
            echo,
        };
        self.unless_held(&key, event)
    }

    /// The watch reported a deletion. Returns the event to emit, or `None` while it is held
    /// behind a write of the key.
    pub(super) fn delete(
        &mut self,
        obj: Arc<DynamicObject>,
        now: Instant,
    ) -> Option<InformerEvent> {
        self.settle(now);
        let key = key_of(&obj);
        self.remove_entry(&key);
        self.tombstone(key.clone(), obj.resource_version(), now);
        if self.observe(obj.metadata.resource_version.as_deref()) {
            self.settle(now);
        }
        self.unless_held(&key, InformerEvent::Deleted { object: obj })
    }

    /// The host is about to send a write of this object. Until its answer
    /// ([`Store::end_write`]), the key's events are held: the watch may deliver the write's
    /// own version before the answer names it, and only that version tells the echo from
    /// someone else's change. The cache itself is updated at once; only the events wait.
    pub(super) fn begin_write(&mut self, namespace: Option<&str>, name: &str) {
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        self.writing.entry(key).or_default().in_flight += 1;
    }

    /// One of the host's writes of this object ended: answered with resourceVersion `rv`
    /// (recorded with [`Store::record_write`] before), or with none (it failed or was given
    /// up). Once no write of the key is out, returns the held events in the order the watch
    /// sent them, each `Applied` of a version an answer carried marked as an echo; anything
    /// else, a change someone made while the write was out included, stays a change.
    pub(super) fn end_write(
        &mut self,
        namespace: Option<&str>,
        name: &str,
        rv: Option<&str>,
    ) -> Vec<InformerEvent> {
        let key = (namespace.unwrap_or_default().to_owned(), name.to_owned());
        let Some(writing) = self.writing.get_mut(&key) else {
            return Vec::new();
        };
        if let Some(rv) = rv {
            writing.answered.push(rv.to_owned());
        }
        writing.in_flight = writing.in_flight.saturating_sub(1);
        if writing.in_flight > 0 {
            return Vec::new();
        }
        let Some(Writing { answered, held, .. }) = self.writing.remove(&key) else {
            return Vec::new();
        };
        held.into_iter()
            .map(|mut event| {
                if let InformerEvent::Applied { object, echo, .. } = &mut event {
                    let version = object.metadata.resource_version.as_deref();
                    *echo |= answered.iter().any(|a| Some(a.as_str()) == version);
                }
                event
            })
            .collect()
    }

    /// `event` for `key`, or `None` when it is held behind a write of the key in flight.
    fn unless_held(&mut self, key: &Key, event: InformerEvent) -> Option<InformerEvent> {
        match self.writing.get_mut(key) {
            Some(writing) => {
                writing.held.push(event);
                None
            }
            None => Some(event),
        }
    }

    /// The relist is complete: whatever the watch knew but did not list again was deleted while
    /// we were not watching.
    pub(super) fn end_relist(&mut self, now: Instant) -> Vec<InformerEvent> {
        self.settle(now);
        let seen = match std::mem::replace(&mut self.relisting, Relist::Idle) {
            Relist::Tracking(seen) => seen,
            Relist::Fresh => {
                self.pack();
                self.listed(now);
                return Vec::new();
            }
            Relist::Idle => return Vec::new(),
        };
        let mut gone = Vec::new();
        for (ns, names) in &mut self.objects {
            for (name, entry) in names.iter_mut() {
                let key = (ns.clone(), name.clone());
                if !seen.contains(&key)
                    && let Some(obj) = entry.watched.take()
                {
                    self.watched_count -= 1;
                    gone.push((key, obj));
                }
            }
            // A write the relist did not show yet may still be newer than the list: kept (see
            // `listed`).
            names.retain(|_, e| e.watched.is_some() || e.overlay.is_some());
        }
        self.objects.retain(|_, names| !names.is_empty());
        self.listed(now);
        gone.into_iter()
            .filter_map(|(key, obj)| {
                self.tombstone(key.clone(), obj.resource_version().map(Into::into), now);
                let event = InformerEvent::Deleted {
                    object: Arc::new(obj.to_object()?),
                };
                self.unless_held(&key, event)
            })
            .collect()
    }

    /// A list completed: the store is synced to its newest version, which releases the
    /// overlays it reached. An overlay whose object the list did not show and which is newer
    /// than everything listed is kept, and from now on expires: the list may be older than the
    /// write (a list served from an API server's cache), or the object may have been deleted or
    /// left the informer's view while nobody watched, and only a later watch event tells.
    fn listed(&mut self, now: Instant) {
        self.synced_rv = self.synced_rv.max(self.listing_rv.take());
        for (ns, name) in &self.overlaid {
            if let Some(entry) = self.objects.get_mut(ns).and_then(|m| m.get_mut(name))
                && entry.watched.is_none()
                && let Some(overlay) = &mut entry.overlay
            {
                overlay.expires = true;
            }
        }
        self.settle(now);
    }

    /// Rebuilds each namespace's map with full nodes. A list arrives in key order, and a
    /// `BTreeMap` grown by ascending inserts splits every full leaf in the middle and never
    /// fills the left half again: half-empty nodes, about 40 bytes per object more. Collecting
    /// from a sorted iterator builds it packed. O(n), once per first list.
    fn pack(&mut self) {
        for names in self.objects.values_mut() {
            *names = std::mem::take(names).into_iter().collect();
        }
    }

    /// The API server's answer to one of the host's writes. Shown at once unless the cache (or a
    /// recent deletion) already holds this version or a newer one, or the store is synced to
    /// this version already: the watch passed it, so the object it holds (or its absence: a
    /// deletion whose tombstone expired, a selector the object left) is newer. Returns whether
    /// it was taken.
    pub(super) fn record_write(&mut self, obj: &DynamicObject, now: Instant) -> bool {
        self.settle(now);
        let key = key_of(obj);
        // From here the overlay tells its echo (and a no-op write has none).
        let rv = obj.metadata.resource_version.as_deref();
        let number = rv_number(rv);
        if let (Some(number), Some(synced)) = (number, self.synced_rv)
            && number <= synced
        {
            return false;
        }
        if let Some((deleted_rv, _)) = self.tombstones.get(&key)
            && !newer(rv, Some(deleted_rv))
        {
            return false;
        }
        let ttl = self.ttl;
        let entry = self.objects.get(&key.0).and_then(|m| m.get(&key.1));
        if let Some(entry) = entry {
            if let Some(watched) = &entry.watched
                && !newer(rv, watched.resource_version())
            {
                return false;
            }
            if let Some(overlay) = &entry.overlay
                && overlay.in_force(now, ttl)
            {
                let shadowed = match &overlay.kind {
                    OverlayKind::Written(w) => w.resource_version(),
                    OverlayKind::Deleted { rv } => rv.as_deref(),
                };
                if shadowed.is_some() && !newer(rv, shadowed) {
                    return false;
                }
            }
        }
        let Some(cached) = cache(obj, false) else {
            return false;
        };
        let entry = self
            .objects
            .entry(key.0.clone())
            .or_default()
            .entry(key.1.clone())
            .or_default();
        entry.overlay = Some(Box::new(Overlay {
            kind: OverlayKind::Written(cached),
            at: now,
            rv: number,
            expires: number.is_none() || self.synced_rv.is_none(),
        }));
        self.overlaid.insert(key);
        true
    }

    /// The host deleted the object and the API server confirmed it is gone: hide it at once.
    /// Subscribers still get `Deleted` from the watch. Returns whether something was hidden.
    pub(super) fn record_delete(
        &mut self,
        namespace: Option<&str>,
        name: &str,
        now: Instant,
    ) -> bool {
        self.settle(now);
        let key = (namespace.unwrap_or_default().to_string(), name.to_string());
        let ttl = self.ttl;
        let Some(names) = self.objects.get_mut(&key.0) else {
            return false;
        };
        let Some(entry) = names.get_mut(&key.1) else {
            return false;
        };
        let Some(visible) = entry.visible(now, ttl) else {
            return false;
        };
        let rv = visible.resource_version().map(ToOwned::to_owned);
        if entry.watched.is_none() {
            names.remove(&key.1);
            if names.is_empty() {
                self.objects.remove(&key.0);
            }
            self.overlaid.remove(&key);
        } else {
            entry.overlay = Some(Box::new(Overlay {
                kind: OverlayKind::Deleted { rv: rv.clone() },
                at: now,
                rv: None,
                expires: true,
            }));
            self.overlaid.insert(key.clone());
        }
        if let Some(rv) = rv {
            self.tombstone(key, Some(rv), now);
        }
        true
    }

    fn remove_entry(&mut self, key: &Key) {
        if let Some(names) = self.objects.get_mut(&key.0) {
            if let Some(entry) = names.remove(&key.1)
                && entry.watched.is_some()
            {
                self.watched_count -= 1;
            }
            if names.is_empty() {
                self.objects.remove(&key.0);
            }
        }
        self.overlaid.remove(key);
    }

    fn tombstone(&mut self, key: Key, rv: Option<String>, now: Instant) {
        if let Some(rv) = rv {
            self.tombstones.insert(key.clone(), (rv, now));
            self.tombstone_order.push_back((now, key));
        }
    }

    /// Drops the overlays the store is synced past, and tombstones and expiring overlays older
    /// than the ttl. Amortised O(expired + overlays).
    fn settle(&mut self, now: Instant) {
        let ttl = self.ttl;
        let old = |at: Instant| now.saturating_duration_since(at) >= ttl;
        let synced = self.synced_rv;
        let ended = |o: &Overlay| {
            !o.in_force(now, ttl) || o.rv.is_some_and(|rv| synced.is_some_and(|s| s >= rv))
        };
        while let Some((at, _)) = self.tombstone_order.front()
            && old(*at)
        {
            let Some((at, key)) = self.tombstone_order.pop_front() else {
                break;
            };
            if self.tombstones.get(&key).is_some_and(|(_, t)| *t == at) {
                self.tombstones.remove(&key);
            }
        }
        let expired: Vec<Key> = self
            .overlaid
            .iter()
            .filter(|(ns, name)| {
                let entry = self.objects.get(ns).and_then(|m| m.get(name));
                entry.is_none_or(|e| e.overlay.as_deref().is_none_or(ended))
            })
            .cloned()
            .collect();
        for key in expired {
            self.overlaid.remove(&key);
            let Some(names) = self.objects.get_mut(&key.0) else {
                continue;
            };
            let Some(entry) = names.get_mut(&key.1) else {
                continue;
            };
            entry.overlay = None;
            if entry.watched.is_none() {
                names.remove(&key.1);
                if names.is_empty() {
                    self.objects.remove(&key.0);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_mins(1);

    fn cm(ns: &str, name: &str, rv: &str, labels: &[(&str, &str)]) -> Arc<DynamicObject> {
        let mut obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "namespace": ns, "name": name, "resourceVersion": rv },
        }))
        .unwrap();
        if !labels.is_empty() {
            obj.metadata.labels = Some(
                labels
                    .iter()
                    .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
                    .collect(),
            );
        }
        Arc::new(obj)
    }

    fn rv_of(obj: Option<Arc<CachedObject>>) -> Option<String> {
        obj.and_then(|o| o.resource_version().map(ToOwned::to_owned))
    }

    #[test]
    fn unchanged_resource_version_is_dropped() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        assert!(matches!(
            s.apply(cm("a", "x", "1", &[]), t),
            Some(InformerEvent::Applied { old: None, .. })
        ));
        assert!(s.apply(cm("a", "x", "1", &[]), t).is_none());
        // Outside a list: a watch event.
        let Some(InformerEvent::Applied {
            object,
            old: Some(old),
            listed: false,
            echo: false,
        }) = s.apply(cm("a", "x", "2", &[]), t)
        else {
            panic!("expected an update from the watch")
        };
        assert_eq!(
            (object.resource_version(), old.resource_version()),
            (Some("2".into()), Some("1".into()))
        );
        assert_eq!(s.len(t), 1);
    }

    #[test]
    fn objects_from_a_list_are_marked_listed_and_watch_events_are_not() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        let listed = |event: Option<InformerEvent>| match event {
            Some(InformerEvent::Applied { listed, .. }) => listed,
            other => panic!("expected Applied, got {other:?}"),
        };
        s.begin_relist();
        assert!(listed(s.apply(cm("a", "x", "1", &[]), t)));
        s.end_relist(t);
        assert!(!listed(s.apply(cm("a", "y", "2", &[]), t)));
        // A relist after the watch broke: what changed meanwhile is backlog too.
        s.begin_relist();
        assert!(listed(s.apply(cm("a", "x", "3", &[]), t)));
        s.end_relist(t);
        assert!(!listed(s.apply(cm("a", "x", "4", &[]), t)));
    }

    #[test]
    fn the_watch_echoing_the_hosts_own_write_is_marked_and_anyone_elses_is_not() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        let echo = |event: Option<InformerEvent>| match event {
            Some(InformerEvent::Applied { echo, .. }) => echo,
            other => panic!("expected Applied, got {other:?}"),
        };
        assert!(!echo(s.apply(cm("a", "x", "1", &[]), t)));
        // The host writes version 2; the watch then reports it.
        assert!(s.record_write(&cm("a", "x", "2", &[]), t));
        assert!(echo(s.apply(cm("a", "x", "2", &[]), t)));
        // Someone else's write after it.
        assert!(!echo(s.apply(cm("a", "x", "3", &[]), t)));
        // The watch beating the answer of a write the store was not told of (`begin_write`):
        // the event cannot be told from anyone else's change (a status write by another
        // client looks the same), so it is no echo, and the answer arriving after it changes
        // nothing.
        assert!(!echo(s.apply(cm("a", "x", "4", &[]), t)));
        assert!(
            !s.record_write(&cm("a", "x", "4", &[]), t),
            "already watched"
        );
        assert!(!echo(s.apply(cm("a", "x", "5", &[]), t)));
        // A status-only change by someone else right after the host's answer recorded 6.
        assert!(s.record_write(&cm("a", "x", "6", &[]), t));
        assert!(
            !echo(s.apply(cm("a", "x", "7", &[]), t)),
            "not the version written"
        );
        assert!(
            !echo(s.apply(cm("a", "x", "6", &[]), t)),
            "older than what was seen"
        );
    }

    fn applied(event: &InformerEvent) -> (String, bool) {
        match event {
            InformerEvent::Applied { object, echo, .. } => {
                (object.resource_version().unwrap_or_default(), *echo)
            }
            other => panic!("expected Applied, got {other:?}"),
        }
    }

    #[test]
    fn events_during_a_write_wait_for_its_answer_and_only_its_version_is_an_echo() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "1", &[]), t);
        s.begin_write(Some("a"), "x");
        // The watch beats the answer: its own version (2), then someone else's change (3).
        assert!(s.apply(cm("a", "x", "2", &[]), t).is_none(), "held");
        assert!(s.apply(cm("a", "x", "3", &[]), t).is_none(), "held");
        assert_eq!(
            rv_of(s.get(Some("a"), "x", t)),
            Some("3".into()),
            "readers see it"
        );
        // Another key is not held.
        assert!(s.apply(cm("a", "y", "4", &[]), t).is_some());
        assert!(
            !s.record_write(&cm("a", "x", "2", &[]), t),
            "already watched"
        );
        let released = s.end_write(Some("a"), "x", Some("2"));
        assert_eq!(
            released.iter().map(applied).collect::<Vec<_>>(),
            [("2".into(), true), ("3".into(), false)],
            "the echo marked, the other change still a change, in the watch's order"
        );
        // Nothing is held any more.
        assert!(s.apply(cm("a", "x", "5", &[]), t).is_some());
        assert!(s.end_write(Some("a"), "x", None).is_empty());
    }

    #[test]
    fn a_failed_write_releases_what_it_held_as_changes_and_overlapping_writes_release_at_the_last()
    {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "1", &[]), t);
        s.begin_write(Some("a"), "x");
        assert!(s.apply(cm("a", "x", "2", &[]), t).is_none());
        let released = s.end_write(Some("a"), "x", None);
        assert_eq!(
            released.iter().map(applied).collect::<Vec<_>>(),
            [("2".into(), false)]
        );

        // Two writes of one key out at once: released when both are answered, and either's
        // version is an echo; a deletion seen meanwhile comes after, in order.
        s.begin_write(Some("a"), "x");
        s.begin_write(Some("a"), "x");
        assert!(s.apply(cm("a", "x", "3", &[]), t).is_none());
        assert!(
            s.end_write(Some("a"), "x", Some("3")).is_empty(),
            "one still out"
        );
        assert!(s.apply(cm("a", "x", "4", &[]), t).is_none());
        assert!(s.delete(cm("a", "x", "5", &[]), t).is_none());
        let released = s.end_write(Some("a"), "x", Some("4"));
        assert_eq!(released.len(), 3);
        assert_eq!(applied(&released[0]), ("3".into(), true));
        assert_eq!(applied(&released[1]), ("4".into(), true));
        assert!(matches!(released[2], InformerEvent::Deleted { .. }));
    }

    #[test]
    fn namespace_index_and_selector() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "1", &[("app", "web")]), t);
        s.apply(cm("a", "y", "2", &[("app", "db")]), t);
        s.apply(cm("b", "x", "3", &[("app", "web")]), t);
        let names = |v: Vec<Arc<CachedObject>>| {
            v.iter()
                .map(|o| {
                    let o = o.to_head().unwrap();
                    format!("{}/{}", o.namespace().unwrap(), o.name_any())
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(names(s.list(Some("a"), None, t)), ["a/x", "a/y"]);
        assert_eq!(names(s.list(None, None, t)), ["a/x", "a/y", "b/x"]);
        let web = super::super::parse_selector("app=web").unwrap();
        assert_eq!(names(s.list(None, Some(&web), t)), ["a/x", "b/x"]);
        assert_eq!(names(s.list(Some("b"), Some(&web), t)), ["b/x"]);
        assert!(s.list(Some("c"), None, t).is_empty());
        assert!(
            s.get(None, "x", t).is_none(),
            "namespaced objects need their namespace"
        );
    }

    #[test]
    fn a_write_wins_until_the_watch_catches_up() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        assert!(s.record_write(&cm("a", "x", "7", &[]), t));
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("7".into()));
        // An older event is still news to subscribers, but does not regress readers.
        assert!(s.apply(cm("a", "x", "6", &[]), t).is_some());
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("7".into()));
        // The watch reaches the written version: the event is emitted (subscribers never saw 7).
        assert!(s.apply(cm("a", "x", "7", &[]), t).is_some());
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("7".into()));
        assert!(s.overlaid.is_empty());
        // Writes older than (or equal to) what the watch has are ignored.
        assert!(!s.record_write(&cm("a", "x", "7", &[]), t));
        assert!(!s.record_write(&cm("a", "x", "3", &[]), t));
    }

    #[test]
    fn the_store_is_synced_to_the_newest_version_of_its_events_and_completed_lists() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        assert_eq!(s.synced_rv(), None);
        s.apply(cm("a", "x", "abc", &[]), t);
        assert_eq!(s.synced_rv(), None, "not an integer");
        s.apply(cm("a", "x", "5", &[]), t);
        s.apply(cm("a", "y", "3", &[]), t);
        assert_eq!(s.synced_rv(), Some(5), "never goes back");
        s.delete(cm("a", "x", "7", &[]), t);
        assert_eq!(s.synced_rv(), Some(7), "a deletion's version counts");
        // A list comes in key order: its versions count once it is complete.
        s.begin_relist();
        s.apply(cm("a", "z", "9", &[]), t);
        s.apply(cm("a", "y", "3", &[]), t);
        assert_eq!(s.synced_rv(), Some(7));
        s.end_relist(t);
        assert_eq!(s.synced_rv(), Some(9));
    }

    #[test]
    fn an_overlay_ends_once_the_store_is_synced_past_it_without_its_echo() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        assert!(s.record_write(&cm("a", "x", "7", &[]), t));
        // Events older than the write leave it in force.
        s.apply(cm("a", "y", "6", &[]), t);
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("7".into()));
        // The watch passed 7 without showing it: the written object left the watch's view.
        s.apply(cm("a", "y", "8", &[]), t);
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("5".into()));
        assert!(s.overlaid.is_empty());
        // A write of a new object, passed the same way, is gone.
        assert!(s.record_write(&cm("a", "new", "9", &[]), t));
        assert_eq!(s.len(t), 3);
        s.delete(cm("a", "y", "10", &[]), t);
        assert!(s.get(Some("a"), "new", t).is_none());
        assert_eq!(s.len(t), 1);
        assert!(s.objects.get("a").is_some_and(|m| !m.contains_key("new")));
        // A delete's overlay knows only the version before the delete: the watch passing that
        // does not end it.
        assert!(s.record_delete(Some("a"), "x", t));
        s.apply(cm("a", "z", "11", &[]), t);
        assert!(s.get(Some("a"), "x", t).is_none());
    }

    #[test]
    fn a_lagging_watch_keeps_showing_the_hosts_write_past_the_ttl() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        assert!(s.record_write(&cm("a", "x", "7", &[]), t));
        let later = t + 3 * TTL;
        s.apply(cm("a", "y", "6", &[]), later);
        assert_eq!(rv_of(s.get(Some("a"), "x", later)), Some("7".into()));
        assert_eq!(s.len(later), 2);
        assert!(
            !s.record_write(&cm("a", "x", "6", &[]), later),
            "an older write does not replace it"
        );
        assert!(matches!(
            s.apply(cm("a", "x", "7", &[]), later),
            Some(InformerEvent::Applied { echo: true, .. })
        ));
        assert!(s.overlaid.is_empty());
        // Where versions do not compare, the ttl still ends an overlay.
        assert!(s.record_write(&cm("a", "odd", "abc", &[]), later));
        assert!(s.get(Some("a"), "odd", later + TTL).is_none());
    }

    #[test]
    fn a_write_the_store_is_synced_past_is_refused_after_its_tombstone_expired() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        s.delete(cm("a", "x", "6", &[]), t);
        let later = t + TTL;
        assert!(
            !s.record_write(&cm("a", "x", "6", &[]), later),
            "a late answer does not resurrect the object"
        );
        s.apply(cm("a", "y", "9", &[]), later);
        assert!(
            !s.record_write(&cm("a", "z", "8", &[]), later),
            "the watch passed 8 without showing z"
        );
        assert!(s.get(Some("a"), "x", later).is_none() && s.get(Some("a"), "z", later).is_none());
        assert!(s.record_write(&cm("a", "z", "10", &[]), later));
    }

    #[test]
    fn a_relist_ends_the_overlays_it_passed_and_leaves_the_newer_unlisted_ones_to_the_ttl() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        s.apply(cm("a", "y", "6", &[]), t);
        assert!(s.record_write(&cm("a", "x", "10", &[]), t));
        assert!(s.record_write(&cm("a", "new", "11", &[]), t));
        // x and new were deleted while the watch was down; the list is at 12.
        s.begin_relist();
        s.apply(cm("a", "y", "12", &[]), t);
        assert_eq!(
            rv_of(s.get(Some("a"), "x", t)),
            Some("10".into()),
            "a list half read ends nothing"
        );
        let events = s.end_relist(t);
        assert!(
            matches!(&events[..], [InformerEvent::Deleted { object }] if object.name_any() == "x")
        );
        assert!(s.get(Some("a"), "x", t).is_none());
        assert!(s.get(Some("a"), "new", t).is_none());
        assert_eq!(s.len(t), 1);

        // A list older than the writes (a lagging cache's): only the ttl ends them, as the
        // watch may never mention their objects again.
        assert!(s.record_write(&cm("a", "y", "20", &[]), t));
        assert!(s.record_write(&cm("a", "new", "21", &[]), t));
        s.begin_relist();
        s.apply(cm("a", "y", "12", &[]), t);
        s.end_relist(t);
        assert_eq!(rv_of(s.get(Some("a"), "y", t)), Some("20".into()));
        assert_eq!(rv_of(s.get(Some("a"), "new", t)), Some("21".into()));
        let later = t + TTL;
        assert_eq!(
            rv_of(s.get(Some("a"), "y", later)),
            Some("20".into()),
            "listed: the watch will tell"
        );
        assert!(s.get(Some("a"), "new", later).is_none(), "not listed");
    }

    #[test]
    fn uncomparable_versions_prefer_the_watch() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "abc", &[]), t);
        assert!(!s.record_write(&cm("a", "x", "def", &[]), t));
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("abc".into()));
    }

    #[test]
    fn a_write_of_a_new_object_is_visible_and_expires_unconfirmed() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        assert!(s.record_write(&cm("a", "new", "9", &[]), t));
        assert_eq!(s.len(t), 1);
        assert_eq!(s.list(Some("a"), None, t).len(), 1);
        let later = t + TTL;
        assert!(s.get(Some("a"), "new", later).is_none());
        assert_eq!(s.len(later), 0);
        s.apply(cm("a", "other", "10", &[]), later);
        assert!(
            s.objects.get("a").is_some_and(|m| !m.contains_key("new")),
            "expired overlay purged"
        );
    }

    #[test]
    fn deletes_hide_and_tombstones_block_stale_writes() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "x", "5", &[]), t);
        assert!(s.record_delete(Some("a"), "x", t));
        assert!(s.get(Some("a"), "x", t).is_none());
        assert_eq!(s.len(t), 0);
        assert!(
            !s.record_write(&cm("a", "x", "5", &[]), t),
            "the deleted version stays deleted"
        );
        // The watch's delete still reaches subscribers.
        assert!(matches!(
            s.delete(cm("a", "x", "6", &[]), t),
            Some(InformerEvent::Deleted { .. })
        ));
        assert!(!s.record_write(&cm("a", "x", "6", &[]), t));
        assert!(s.get(Some("a"), "x", t).is_none());
        // A re-creation (newer version) is accepted.
        assert!(s.record_write(&cm("a", "x", "8", &[]), t));
        assert_eq!(rv_of(s.get(Some("a"), "x", t)), Some("8".into()));
    }

    #[test]
    fn the_first_list_keeps_everything_and_a_later_relist_still_finds_what_vanished() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.begin_relist();
        s.apply(cm("a", "x", "1", &[]), t);
        s.apply(cm("a", "y", "2", &[]), t);
        assert!(s.end_relist(t).is_empty());
        assert_eq!(s.len(t), 2);
        s.begin_relist();
        s.apply(cm("a", "x", "1", &[]), t);
        let events = s.end_relist(t);
        assert!(
            matches!(&events[..], [InformerEvent::Deleted { object }] if object.name_any() == "y")
        );
        assert_eq!(s.len(t), 1);
    }

    #[test]
    fn a_metadata_object_becomes_whole_silently_and_a_changed_one_with_an_event() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        assert!(s.apply_partial(cm("a", "x", "1", &[]), t).is_some());
        assert!(s.apply_partial(cm("a", "y", "2", &[]), t).is_some());
        let partial = |s: &Store, name| s.get(Some("a"), name, t).unwrap().is_partial();
        assert!(partial(&s, "x") && partial(&s, "y"));
        // The upgrade's relist: x unchanged, y changed meanwhile.
        s.begin_relist();
        assert!(s.apply(cm("a", "x", "1", &[]), t).is_none(), "no news");
        assert!(!partial(&s, "x"), "but stored whole");
        assert!(matches!(
            s.apply(cm("a", "y", "3", &[]), t),
            Some(InformerEvent::Applied { listed: true, .. })
        ));
        assert!(s.end_relist(t).is_empty());
        assert!(!partial(&s, "y"));
        // A whole object is never replaced by its own metadata.
        assert!(s.apply_partial(cm("a", "x", "1", &[]), t).is_none());
        assert!(!partial(&s, "x"));
        assert_eq!(s.len(t), 2);
    }

    #[test]
    fn relist_reports_what_vanished_and_keeps_unconfirmed_writes() {
        let mut s = Store::new(TTL);
        let t = Instant::now();
        s.apply(cm("a", "keep", "1", &[]), t);
        s.apply(cm("a", "gone", "2", &[]), t);
        s.record_write(&cm("b", "written", "9", &[]), t);
        s.begin_relist();
        assert!(
            s.apply(cm("a", "keep", "1", &[]), t).is_none(),
            "unchanged on relist"
        );
        let events = s.end_relist(t);
        assert_eq!(events.len(), 1);
        assert!(
            matches!(&events[0], InformerEvent::Deleted { object } if object.name_any() == "gone")
        );
        assert_eq!(s.len(t), 2);
        assert!(s.get(Some("b"), "written", t).is_some());
    }
}
