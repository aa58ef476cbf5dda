//! The work queue between informers and workers: client-go's rate-limiting work queue
//! (`workqueue.TypedRateLimitingInterface`) in async Rust.
//!
//! The contract, which every worker loop relies on:
//!
//! - **Dedup.** A key waiting in the queue is queued once, however often it is added.
//!   Informer events only say "look at this key again", so coalescing them is free.
//! - **Exclusivity.** A key handed out by [`WorkQueue::get`] is not handed out again until
//!   [`WorkQueue::done`]. Adds in between mark it *dirty*; `done` puts it back, so the
//!   change that arrived mid-reconcile is seen by the next reconcile, never by a second
//!   worker racing the first.
//! - **Retries.** [`WorkQueue::add_rate_limited`] waits the longer of a per-key
//!   exponential backoff (base × 2^failures, capped) and a reservation on an overall token
//!   bucket; [`WorkQueue::forget`] resets the key's backoff after a success.
//! - **Delays.** [`WorkQueue::add_after`] adds later; for a key already waiting, the
//!   earliest deadline wins.
//! - **Priorities** (controller-runtime's priority queue, its default since v0.23).
//!   [`WorkQueue::add_with`] takes a [`Priority`]: keys from an initial list, a relist, a
//!   resync or a controller restart go in [`Priority::Low`], so that a change someone makes
//!   while the controller works through a backlog overtakes it; [`WorkQueue::add`], delayed
//!   and rate-limited adds are [`Priority::Normal`]. Normal keys are handed out first, each
//!   priority in FIFO order; a key queued low and added normal is promoted (still queued
//!   once). Dedup, exclusivity, backoff and delays hold across priorities.
//!   [`QueueConfig::priorities`] off makes every add normal: one FIFO, as client-go's.
//! - **Shutdown.** [`WorkQueue::shutdown`] refuses new keys and drops delayed ones; `get`
//!   keeps handing out what is queued and returns `None` once empty.
//!   [`WorkQueue::shutdown_with_drain`] also waits for in-flight keys to be `done`.
//!
//! A worker therefore reads as in the sample-controller:
//!
//! ```no_run
//! # use reconciler_host::cluster::objects::ObjectKey;
//! # use reconciler_host::controller::queue::{QueueConfig, WorkQueue};
//! # async fn reconcile(_: &ObjectKey) -> Result<(), ()> { Ok(()) }
//! # async fn worker(queue: WorkQueue<ObjectKey>) {
//! while let Some(key) = queue.get().await {
//!     match reconcile(&key).await {
//!         // Success: stop counting this key's failures, or its next error would wait
//!         // as if it had failed all along.
//!         Ok(()) => queue.forget(&key),
//!         // Transient failure: retry later, slower each time, never hot-looping.
//!         Err(()) => queue.add_rate_limited(key.clone()),
//!     }
//!     // Always: release the key so a dirty re-add is handed out again.
//!     queue.done(&key);
//! }
//! # }
//! ```
//!
//! Implementation: one `parking_lot` mutex over all state, held for O(1) work per call
//! (O(log n) when a delayed key is scheduled or becomes due), never across an await.
//! There is no timer task: waiting getters sleep until the earliest delayed deadline, and
//! every queue operation first moves due keys into the ready queue, in deadline order,
//! so delayed keys are ordered against immediate adds as if a timer had fired on time.

use std::cmp::Ordering;
use std::collections::hash_map::Entry;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::fmt;
use std::hash::Hash;
use std::pin::pin;
use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

pub use crate::config::QueueConfig;
use crate::metrics::{ScrapeHook, WorkqueueMetrics};
use rate_limit::Limiter;

mod rate_limit;

#[cfg(test)]
mod priority_tests;

/// Which keys a worker gets first; see the module docs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Priority {
    /// Backlog: initial lists, relists, resyncs, controller restarts.
    Low,
    /// A change: watch events, guest `enqueue`s, `requeue-after`, retries.
    #[default]
    Normal,
}

/// A work queue with client-go semantics; see the [module docs](self). Cheap to clone:
/// clones share one queue.
pub struct WorkQueue<K> {
    shared: Arc<Inner<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K> fmt::Debug for WorkQueue<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock();
        f.debug_struct("WorkQueue")
            .field("ready", &(state.queue.len() + state.low_seq.len()))
            .field("in_flight", &state.processing.len())
            .field("delayed", &state.waiting.len())
            .field("shutting_down", &state.shutting_down)
            .finish_non_exhaustive()
    }
}

struct Inner<K> {
    state: Mutex<State<K>>,
    /// A key became ready, a delayed deadline moved earlier, or the queue shut down.
    ready: Notify,
    /// The last in-flight key was done.
    idle: Notify,
    metrics: WorkqueueMetrics,
}

/// Every structure below holds the same `Arc` of a key: a key is stored once, however many
/// places know it (two `String`s of an `ObjectKey` copied into three maps cost ~320 B a key).
struct State<K> {
    /// Ready normal-priority keys in FIFO order; each is also in `dirty` and not in
    /// `processing`.
    queue: VecDeque<Arc<K>>,
    /// Ready low-priority keys in FIFO order, each with the sequence number of its entry.
    /// An entry whose number is no longer the key's in `low_seq` (the key was promoted, or
    /// handed out) is stale and skipped: removing from the middle of a deque is O(n).
    low: VecDeque<(Arc<K>, u64)>,
    /// The live entry of each key queued low.
    low_seq: HashMap<Arc<K>, u64>,
    /// Keys that need a reconcile, at the priority of that reconcile: everything queued
    /// plus in-flight keys re-added since they were handed out.
    dirty: HashMap<Arc<K>, Priority>,
    /// How many of `dirty` are at low priority (`reconciler_workqueue_depth`).
    dirty_low: usize,
    /// Whether low-priority adds go behind normal ones ([`QueueConfig::priorities`]).
    priorities: bool,
    /// In-flight keys and when they were handed out.
    processing: HashMap<Arc<K>, Instant>,
    /// When each dirty key was added, for `workqueue_queue_duration_seconds`.
    added_at: HashMap<Arc<K>, Instant>,
    /// The one live deadline of each delayed key (earliest wins) and its heap entry's
    /// sequence number; heap entries whose sequence differs are stale and skipped.
    waiting: HashMap<Arc<K>, (Instant, u64)>,
    deadlines: BinaryHeap<Delayed<Arc<K>>>,
    next_seq: u64,
    limiter: Limiter<K>,
    shutting_down: bool,
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + fmt::Debug + 'static,
{
    /// A queue whose metrics nobody scrapes (offline runs, tests).
    #[must_use]
    pub fn new(config: QueueConfig) -> Self {
        Self::with_metrics(config, WorkqueueMetrics::unregistered())
    }

    /// A queue reporting the `workqueue_*` series in `metrics` (see
    /// [`crate::metrics::Metrics::workqueue`]); the in-flight gauges are computed on scrape.
    /// Give each live queue its own name: two queues on one name would overwrite each
    /// other's gauges.
    #[must_use]
    pub fn with_metrics(config: QueueConfig, metrics: WorkqueueMetrics) -> Self {
        let shared = Arc::new(Inner {
            state: Mutex::new(State {
                queue: VecDeque::new(),
                low: VecDeque::new(),
                low_seq: HashMap::new(),
                dirty: HashMap::new(),
                dirty_low: 0,
                priorities: config.priorities,
                processing: HashMap::new(),
                added_at: HashMap::new(),
                waiting: HashMap::new(),
                deadlines: BinaryHeap::new(),
                next_seq: 0,
                limiter: Limiter::new(&config, Instant::now()),
                shutting_down: false,
            }),
            ready: Notify::new(),
            idle: Notify::new(),
            metrics,
        });
        let hook: Weak<Inner<K>> = Arc::downgrade(&shared);
        shared.metrics.register_scrape_hook(hook);
        Self { shared }
    }

    /// Queue `key` at [`Priority::Normal`] unless it is already waiting; if it is in
    /// flight, mark it to be queued again on `done`. Ignored after shutdown. O(1) (plus
    /// O(log n) per delayed key that has fallen due and is moved to the ready queue first);
    /// the lock is held briefly.
    pub fn add(&self, key: K) {
        self.add_with(key, Priority::Normal);
    }

    /// [`Self::add`] at `priority`: a key already waiting at a lower priority is promoted.
    pub fn add_with(&self, key: K, priority: Priority) {
        let now = Instant::now();
        let wake = {
            let mut state = self.shared.state.lock();
            let promoted = state.promote_due(now, &self.shared.metrics);
            state.add(Arc::new(key), priority, now, &self.shared.metrics) || promoted
        };
        if wake {
            self.shared.ready.notify_one();
        }
    }

    /// Add `key` once `delay` has passed. If `key` is already scheduled, the earlier of the
    /// two deadlines wins. A zero delay adds at once. Counts as a retry in the metrics, as
    /// in client-go. O(log n) in the number of delayed keys.
    pub fn add_after(&self, key: K, delay: Duration) {
        let now = Instant::now();
        let wake = {
            let mut state = self.shared.state.lock();
            if state.shutting_down {
                return;
            }
            let promoted = state.promote_due(now, &self.shared.metrics);
            state.add_after(Arc::new(key), delay, now, &self.shared.metrics) || promoted
        };
        if wake {
            self.shared.ready.notify_one();
        }
    }

    /// Add `key` after the longer of its exponential backoff and the overall token bucket's
    /// reservation. Counts a requeue for `key` (see [`Self::num_requeues`]). Call it when a
    /// reconcile failed transiently.
    pub fn add_rate_limited(&self, key: K) {
        let now = Instant::now();
        let wake = {
            let mut state = self.shared.state.lock();
            if state.shutting_down {
                return;
            }
            let promoted = state.promote_due(now, &self.shared.metrics);
            let delay = state.limiter.when(&key, now);
            state.add_after(Arc::new(key), delay, now, &self.shared.metrics) || promoted
        };
        if wake {
            self.shared.ready.notify_one();
        }
    }

    /// Reset `key`'s backoff: its next rate-limited retry waits the base delay again. Call
    /// it after a successful reconcile. Does not remove the key from the queue.
    pub fn forget(&self, key: &K) {
        self.shared.state.lock().limiter.forget(key);
    }

    /// How many rate-limited retries `key` had since it was last forgotten.
    #[must_use]
    pub fn num_requeues(&self, key: &K) -> u32 {
        self.shared.state.lock().limiter.num_requeues(key)
    }

    /// Wait for a ready key and mark it in flight; the caller must call [`Self::done`] with
    /// it. `None` once the queue is shut down and empty. Cancel-safe: a dropped `get`
    /// takes no key.
    pub async fn get(&self) -> Option<K> {
        loop {
            // Register for wake-ups before looking, so an add between the look and the
            // wait is not missed.
            let mut notified = pin!(self.shared.ready.notified());
            notified.as_mut().enable();
            let next_deadline = {
                let now = Instant::now();
                let mut state = self.shared.state.lock();
                state.promote_due(now, &self.shared.metrics);
                if let Some(key) = state.take(now, &self.shared.metrics) {
                    let more = state.ready_len() > 0;
                    drop(state);
                    if more {
                        // Pass the baton: one wake-up per add may have been spent on us.
                        self.shared.ready.notify_one();
                    }
                    return Some(K::clone(&key));
                }
                if state.shutting_down {
                    return None;
                }
                state.deadlines.peek().map(|delayed| delayed.at)
            };
            match next_deadline {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    /// Release `key` after processing. If it was re-added meanwhile it is queued again
    /// (even during shutdown: that change arrived before it). A key that is not in flight
    /// is ignored. O(1).
    pub fn done(&self, key: &K) {
        let now = Instant::now();
        let (requeued, idle) = {
            let mut state = self.shared.state.lock();
            let Some(started) = state.processing.remove(key) else {
                return;
            };
            self.shared.metrics.worked_for(now - started);
            // Keys that fell due while we worked were ready before this re-add.
            let promoted = state.promote_due(now, &self.shared.metrics);
            let again = state
                .dirty
                .get_key_value(key)
                .map(|(key, &priority)| (key.clone(), priority));
            let requeued = match again {
                Some((key, priority)) => {
                    state.push(key, priority);
                    true
                }
                None => false,
            };
            (requeued || promoted, state.processing.is_empty())
        };
        if requeued {
            self.shared.ready.notify_one();
        }
        if idle {
            self.shared.idle.notify_waiters();
        }
    }

    /// Ready keys, of either priority (delayed and in-flight keys not counted).
    #[must_use]
    pub fn len(&self) -> usize {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        state.promote_due(now, &self.shared.metrics);
        state.ready_len()
    }

    /// Ready keys at `priority`.
    #[must_use]
    pub fn len_at(&self, priority: Priority) -> usize {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        state.promote_due(now, &self.shared.metrics);
        match priority {
            Priority::Normal => state.queue.len(),
            Priority::Low => state.low_seq.len(),
        }
    }

    /// Keys waiting for their delay to pass.
    #[must_use]
    pub fn delayed(&self) -> usize {
        self.shared.state.lock().waiting.len()
    }

    /// No key is ready.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stop accepting keys and drop delayed ones; `get` hands out what is queued, then
    /// returns `None`. Does not wait; see [`Self::shutdown_with_drain`].
    pub fn shutdown(&self) {
        {
            let mut state = self.shared.state.lock();
            state.shutting_down = true;
            // They could never be added now; free them.
            state.waiting.clear();
            state.deadlines.clear();
        }
        self.shared.ready.notify_waiters();
    }

    /// [`Self::shutdown`], then wait until no key is in flight (every `get` matched by its
    /// `done`). Keys still queued are not waited for, as in client-go.
    pub async fn shutdown_with_drain(&self) {
        self.shutdown();
        loop {
            let mut idle = pin!(self.shared.idle.notified());
            idle.as_mut().enable();
            if self.shared.state.lock().processing.is_empty() {
                return;
            }
            idle.await;
        }
    }

    /// Whether [`Self::shutdown`] was called.
    #[must_use]
    pub fn is_shutting_down(&self) -> bool {
        self.shared.state.lock().shutting_down
    }
}

impl<K> State<K>
where
    K: Clone + Eq + Hash,
{
    /// Ready keys of both priorities.
    fn ready_len(&self) -> usize {
        self.queue.len() + self.low_seq.len()
    }

    /// Returns whether a key was pushed onto a ready queue (a promotion included).
    fn add(
        &mut self,
        key: Arc<K>,
        priority: Priority,
        now: Instant,
        metrics: &WorkqueueMetrics,
    ) -> bool {
        if self.shutting_down {
            return false;
        }
        let priority = if self.priorities {
            priority
        } else {
            Priority::Normal
        };
        if let Some(queued) = self.dirty.get_mut(&key) {
            if priority <= *queued {
                return false;
            }
            // Promoted: a waiting key moves to the normal queue (its low entry goes stale);
            // an in-flight one is queued normal on `done`.
            *queued = priority;
            self.dirty_low -= 1;
            metrics.set_depth(self.dirty.len(), self.dirty_low);
            if self.low_seq.remove(&key).is_some() {
                self.queue.push_back(key);
                return true;
            }
            return false;
        }
        self.dirty.insert(key.clone(), priority);
        self.dirty_low += usize::from(priority == Priority::Low);
        metrics.added();
        metrics.set_depth(self.dirty.len(), self.dirty_low);
        self.added_at.entry(key.clone()).or_insert(now);
        if self.processing.contains_key(&key) {
            return false;
        }
        self.push(key, priority);
        true
    }

    /// Appends `key`, which is dirty and not in flight, to the ready queue of `priority`.
    fn push(&mut self, key: Arc<K>, priority: Priority) {
        match priority {
            Priority::Normal => self.queue.push_back(key),
            Priority::Low => {
                let seq = self.next_seq;
                self.next_seq += 1;
                self.low_seq.insert(key.clone(), seq);
                self.low.push_back((key, seq));
            }
        }
    }

    /// Returns whether waiters should look again (a key was pushed or a deadline set).
    fn add_after(
        &mut self,
        key: Arc<K>,
        delay: Duration,
        now: Instant,
        metrics: &WorkqueueMetrics,
    ) -> bool {
        metrics.retried();
        if delay.is_zero() {
            return self.add(key, Priority::Normal, now, metrics);
        }
        let at = now.checked_add(delay).unwrap_or_else(|| far_future(now));
        let seq = self.next_seq;
        match self.waiting.entry(key.clone()) {
            Entry::Occupied(entry) if entry.get().0 <= at => return false,
            Entry::Occupied(mut entry) => {
                entry.insert((at, seq));
            }
            Entry::Vacant(entry) => {
                entry.insert((at, seq));
            }
        }
        self.next_seq += 1;
        self.deadlines.push(Delayed { at, seq, key });
        true
    }

    /// Move every delayed key whose deadline has passed into the ready queue, earliest
    /// first. Returns whether any was pushed.
    fn promote_due(&mut self, now: Instant, metrics: &WorkqueueMetrics) -> bool {
        let mut pushed = false;
        while self.deadlines.peek().is_some_and(|next| next.at <= now) {
            let Some(due) = self.deadlines.pop() else {
                break;
            };
            if self.waiting.get(&due.key).map(|&(_, seq)| seq) != Some(due.seq) {
                continue;
            }
            self.waiting.remove(&due.key);
            pushed |= self.add(due.key, Priority::Normal, now, metrics);
        }
        pushed
    }

    fn take(&mut self, now: Instant, metrics: &WorkqueueMetrics) -> Option<Arc<K>> {
        let key = match self.queue.pop_front() {
            Some(key) => key,
            None => loop {
                let (key, seq) = self.low.pop_front()?;
                if self.low_seq.get(&key) == Some(&seq) {
                    self.low_seq.remove(&key);
                    break key;
                }
            },
        };
        if self.dirty.remove(&key) == Some(Priority::Low) {
            self.dirty_low -= 1;
        }
        metrics.set_depth(self.dirty.len(), self.dirty_low);
        if let Some(added) = self.added_at.remove(&key) {
            metrics.queued_for(now - added);
        }
        self.processing.insert(key.clone(), now);
        Some(key)
    }
}

impl<K> ScrapeHook for Inner<K>
where
    K: Clone + Eq + Hash + Send + Sync,
{
    /// O(in-flight keys) under the lock; in-flight keys are bounded by the worker count.
    fn before_scrape(&self) {
        let now = Instant::now();
        let promoted = {
            let mut state = self.state.lock();
            let promoted = state.promote_due(now, &self.metrics);
            let (unfinished, longest) = state.processing.values().fold(
                (Duration::ZERO, Duration::ZERO),
                |(sum, longest), &started| {
                    let age = now - started;
                    (sum + age, longest.max(age))
                },
            );
            self.metrics.set_in_flight(unfinished, longest);
            promoted
        };
        if promoted {
            self.ready.notify_one();
        }
    }
}

/// A delayed add. Ordered by deadline, then by scheduling order, reversed so that
/// `BinaryHeap` (a max-heap) pops the earliest first. `seq` is unique, so the order is
/// total without comparing keys.
struct Delayed<K> {
    at: Instant,
    seq: u64,
    key: K,
}

impl<K> PartialEq for Delayed<K> {
    fn eq(&self, other: &Self) -> bool {
        self.seq == other.seq
    }
}

impl<K> Eq for Delayed<K> {}

impl<K> PartialOrd for Delayed<K> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<K> Ord for Delayed<K> {
    fn cmp(&self, other: &Self) -> Ordering {
        (other.at, other.seq).cmp(&(self.at, self.seq))
    }
}

/// A deadline nobody will live to see, for delays too large to add to an `Instant`.
fn far_future(now: Instant) -> Instant {
    const THIRTY_YEARS: Duration = Duration::from_hours(24 * 365 * 30);
    now + THIRTY_YEARS
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::objects::ObjectKey;
    use crate::metrics::{Metrics, sample};
    use std::num::NonZeroU32;
    use tokio::time::{advance, sleep, timeout};

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("default", name)
    }

    fn queue() -> WorkQueue<ObjectKey> {
        WorkQueue::new(QueueConfig::default())
    }

    /// `get`, failing the test if nothing is ready within `within`.
    async fn get_within(queue: &WorkQueue<ObjectKey>, within: Duration) -> ObjectKey {
        timeout(within, queue.get())
            .await
            .expect("a key should be ready")
            .expect("the queue should not be shut down")
    }

    /// Assert nothing becomes ready within `within`.
    async fn assert_nothing_within(queue: &WorkQueue<ObjectKey>, within: Duration) {
        if let Ok(got) = timeout(within, queue.get()).await {
            panic!("expected no key within {within:?}, got {got:?}");
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn object_key_displays_and_parses_like_client_go() {
        assert_eq!(key("a").to_string(), "default/a");
        assert_eq!(ObjectKey::cluster_scoped("n").to_string(), "n");
        assert_eq!("default/a".parse(), Ok(key("a")));
        assert_eq!("n".parse(), Ok(ObjectKey::cluster_scoped("n")));
        for bad in ["", "/a", "ns/", "a/b/c"] {
            assert!(
                bad.parse::<ObjectKey>().is_err(),
                "{bad:?} should not parse"
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn rapid_adds_of_one_key_are_queued_once_in_fifo_order() {
        let q = queue();
        q.add(key("a"));
        q.add(key("b"));
        q.add(key("a"));
        q.add(key("a"));
        q.add(key("c"));
        assert_eq!(q.len(), 3);
        assert_eq!(get_within(&q, MS).await, key("a"));
        assert_eq!(get_within(&q, MS).await, key("b"));
        assert_eq!(get_within(&q, MS).await, key("c"));
        assert_nothing_within(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_key_in_flight_is_not_handed_out_again_until_done() {
        let q = queue();
        q.add(key("a"));
        let first = get_within(&q, MS).await;
        assert_eq!(first, key("a"));

        // Re-added while in flight: dirty, but not ready.
        q.add(key("a"));
        q.add(key("a"));
        assert_eq!(q.len(), 0);
        let second_worker = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        sleep(Duration::from_secs(10)).await;
        assert!(!second_worker.is_finished(), "a second worker got {first}");

        // Other keys still flow while "a" is in flight.
        q.add(key("b"));
        assert_eq!(second_worker.await.unwrap(), Some(key("b")));

        q.done(&first);
        assert_eq!(q.len(), 1, "the dirty re-add is queued once on done");
        assert_eq!(get_within(&q, MS).await, key("a"));
        q.done(&key("a"));
        assert_nothing_within(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn done_without_re_add_does_not_requeue_and_unknown_done_is_ignored() {
        let q = queue();
        q.add(key("a"));
        let a = get_within(&q, MS).await;
        q.done(&key("never-handed-out"));
        q.done(&a);
        q.done(&a);
        assert_eq!(q.len(), 0);
        assert_nothing_within(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn many_workers_each_get_a_distinct_key() {
        let q = queue();
        let workers: Vec<_> = (0..4)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for name in ["a", "b", "c", "d", "a", "b"] {
            q.add(key(name));
        }
        let mut got = Vec::new();
        for worker in workers {
            got.push(timeout(MS, worker).await.unwrap().unwrap().unwrap());
        }
        got.sort();
        assert_eq!(got, vec![key("a"), key("b"), key("c"), key("d")]);
    }

    #[test]
    fn backoff_doubles_from_5ms_per_key_and_forget_resets_it() {
        let now = Instant::now();
        let mut limiter = Limiter::new(&QueueConfig::default(), now);
        let delays: Vec<_> = (0..6).map(|_| limiter.when(&key("a"), now)).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40, 80, 160].map(Duration::from_millis).to_vec()
        );
        assert_eq!(limiter.num_requeues(&key("a")), 6);
        // Per key: another key starts at the base.
        assert_eq!(limiter.when(&key("b"), now), 5 * MS);
        limiter.forget(&key("a"));
        assert_eq!(limiter.num_requeues(&key("a")), 0);
        assert_eq!(limiter.when(&key("a"), now), 5 * MS);
        assert_eq!(limiter.when(&key("a"), now), 10 * MS);
    }

    #[test]
    fn backoff_is_capped_at_max_delay() {
        let now = Instant::now();
        let config = QueueConfig {
            max_delay: 40 * MS,
            ..QueueConfig::default()
        };
        let mut limiter = Limiter::new(&config, now);
        let delays: Vec<_> = (0..6).map(|_| limiter.when(&key("a"), now)).collect();
        assert_eq!(
            delays,
            [5, 10, 20, 40, 40, 40].map(Duration::from_millis).to_vec()
        );

        // The default cap, 1000 s, is reached after 18 doublings and holds far beyond the
        // point where 2^n overflows.
        let mut limiter = Limiter::new(&QueueConfig::default(), now);
        let delays: Vec<_> = (0..100).map(|_| limiter.when(&key("a"), now)).collect();
        assert_eq!(delays[17], Duration::from_millis(5 << 17)); // 655.36 s
        assert!(delays[18..].iter().all(|&d| d == Duration::from_secs(1000)));
    }

    #[test]
    fn token_bucket_reserves_after_the_burst_and_refills_at_qps() {
        let start = Instant::now();
        let config = QueueConfig {
            qps: NonZeroU32::new(10).unwrap(),
            burst: NonZeroU32::new(3).unwrap(),
            ..QueueConfig::default()
        };
        let mut limiter = Limiter::new(&config, start);
        // Distinct keys, so the backoff stays at 5 ms and the bucket shows.
        let delays: Vec<_> = ["a", "b", "c", "d", "e"]
            .into_iter()
            .map(|name| limiter.when(&key(name), start))
            .collect();
        assert_eq!(
            delays,
            [5, 5, 5, 100, 200].map(Duration::from_millis).to_vec()
        );
        // Reserved, not dropped: 50 ms later the next token is still 250 ms away.
        assert_eq!(limiter.when(&key("f"), start + 50 * MS), 250 * MS);
        // After a quiet second the bucket has refilled.
        let later = start + Duration::from_secs(2);
        let delays: Vec<_> = ["g", "h", "i", "j"]
            .into_iter()
            .map(|name| limiter.when(&key(name), later))
            .collect();
        assert_eq!(delays, [5, 5, 5, 100].map(Duration::from_millis).to_vec());
    }

    #[test]
    fn default_bucket_allows_100_then_10_per_second() {
        let now = Instant::now();
        let mut limiter = Limiter::new(&QueueConfig::default(), now);
        for i in 0..100 {
            assert_eq!(
                limiter.when(&i, now),
                5 * MS,
                "retry {i} is within the burst"
            );
        }
        assert_eq!(limiter.when(&100, now), 100 * MS);
        assert_eq!(limiter.when(&101, now), 200 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_add_becomes_ready_after_the_backoff() {
        let q = queue();
        q.add_rate_limited(key("a"));
        assert_eq!(q.num_requeues(&key("a")), 1);
        assert_nothing_within(&q, 4 * MS).await;
        assert_eq!(get_within(&q, 2 * MS).await, key("a"));
        q.done(&key("a"));

        q.add_rate_limited(key("a"));
        assert_nothing_within(&q, 9 * MS).await;
        assert_eq!(get_within(&q, 2 * MS).await, key("a"));
        q.done(&key("a"));

        q.forget(&key("a"));
        assert_eq!(q.num_requeues(&key("a")), 0);
        q.add_rate_limited(key("a"));
        assert_nothing_within(&q, 4 * MS).await;
        assert_eq!(get_within(&q, 2 * MS).await, key("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn delayed_adds_come_out_in_deadline_order() {
        let q = queue();
        let start = Instant::now();
        q.add_after(key("c"), 30 * MS);
        q.add_after(key("a"), 10 * MS);
        q.add_after(key("b"), 20 * MS);
        assert_eq!(q.len(), 0);
        let mut got = Vec::new();
        for _ in 0..3 {
            got.push((
                get_within(&q, Duration::from_secs(1)).await,
                start.elapsed(),
            ));
        }
        assert_eq!(
            got,
            vec![
                (key("a"), 10 * MS),
                (key("b"), 20 * MS),
                (key("c"), 30 * MS)
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn earliest_deadline_wins_and_superseded_ones_never_fire() {
        let q = queue();
        let start = Instant::now();
        q.add_after(key("a"), 50 * MS);
        q.add_after(key("a"), 10 * MS);
        q.add_after(key("a"), 100 * MS);
        assert_eq!(get_within(&q, Duration::from_secs(1)).await, key("a"));
        assert_eq!(start.elapsed(), 10 * MS);
        q.done(&key("a"));
        assert_nothing_within(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_due_delayed_key_is_ordered_before_a_later_immediate_add() {
        let q = queue();
        q.add_after(key("delayed"), 10 * MS);
        // Nobody is waiting in `get` while the deadline passes.
        advance(20 * MS).await;
        q.add(key("immediate"));
        assert_eq!(get_within(&q, MS).await, key("delayed"));
        assert_eq!(get_within(&q, MS).await, key("immediate"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_delayed_add_of_a_waiting_key_is_deduplicated() {
        let q = queue();
        q.add(key("a"));
        q.add_after(key("a"), 10 * MS);
        advance(20 * MS).await;
        assert_eq!(q.len(), 1);
        assert_eq!(get_within(&q, MS).await, key("a"));
        assert_nothing_within(&q, Duration::from_secs(1)).await;
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_wakes_a_getter_sleeping_on_a_later_one() {
        let q = queue();
        let start = Instant::now();
        q.add_after(key("late"), Duration::from_secs(10));
        let getter = tokio::spawn({
            let q = q.clone();
            async move { q.get().await }
        });
        tokio::task::yield_now().await;
        q.add_after(key("early"), 10 * MS);
        assert_eq!(getter.await.unwrap(), Some(key("early")));
        assert_eq!(start.elapsed(), 10 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_hands_out_what_is_queued_then_none_and_ignores_new_keys() {
        let q = queue();
        q.add(key("a"));
        q.add_after(key("delayed"), 10 * MS);
        q.shutdown();
        assert!(q.is_shutting_down());
        q.add(key("b"));
        q.add_after(key("c"), MS);
        q.add_rate_limited(key("d"));
        assert_eq!(q.num_requeues(&key("d")), 0);
        assert_eq!(q.get().await, Some(key("a")));
        advance(Duration::from_secs(1)).await;
        assert_eq!(q.get().await, None);
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_wakes_every_waiting_getter() {
        let q = queue();
        let getters: Vec<_> = (0..3)
            .map(|_| {
                let q = q.clone();
                tokio::spawn(async move { q.get().await })
            })
            .collect();
        tokio::task::yield_now().await;
        q.shutdown();
        for getter in getters {
            assert_eq!(timeout(MS, getter).await.unwrap().unwrap(), None);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_with_drain_waits_for_in_flight_keys() {
        let q = queue();
        q.add(key("a"));
        q.add(key("b"));
        let a = get_within(&q, MS).await;
        let b = get_within(&q, MS).await;
        q.add(key("a")); // dirty: handed out again after done, despite shutdown
        let drain = tokio::spawn({
            let q = q.clone();
            async move { q.shutdown_with_drain().await }
        });
        sleep(Duration::from_secs(10)).await;
        assert!(!drain.is_finished());
        q.done(&a);
        let a_again = get_within(&q, MS).await;
        assert_eq!(a_again, key("a"));
        q.done(&b);
        sleep(Duration::from_secs(10)).await;
        assert!(!drain.is_finished(), "a is in flight again");
        q.done(&a_again);
        timeout(MS, drain).await.unwrap().unwrap();
        assert_eq!(q.get().await, None);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_with_drain_returns_at_once_when_idle() {
        let q = queue();
        timeout(MS, q.shutdown_with_drain()).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn metrics_follow_the_queue() {
        let metrics = Metrics::new();
        let q = WorkQueue::with_metrics(QueueConfig::default(), metrics.workqueue("network"));
        let value = |series: &str| {
            let series = format!("workqueue_{series}{{name=\"network\"}}");
            sample(&metrics.render(), &series)
        };

        q.add(key("a"));
        q.add(key("b"));
        q.add(key("a"));
        assert_eq!(value("adds_total"), Some(2.0));
        assert_eq!(value("depth"), Some(2.0));

        advance(Duration::from_secs(1)).await;
        let a = get_within(&q, MS).await;
        assert_eq!(value("depth"), Some(1.0));
        assert_eq!(value("queue_duration_seconds_count"), Some(1.0));
        assert_eq!(value("queue_duration_seconds_sum"), Some(1.0));

        advance(Duration::from_secs(2)).await;
        let b = get_within(&q, MS).await;
        assert_eq!(value("depth"), Some(0.0));
        assert_eq!(value("queue_duration_seconds_sum"), Some(4.0));

        // Computed on scrape: a has run 2 s, b 0 s so far.
        assert_eq!(value("unfinished_work_seconds"), Some(2.0));
        assert_eq!(value("longest_running_processor_seconds"), Some(2.0));
        advance(Duration::from_secs(3)).await;
        assert_eq!(value("unfinished_work_seconds"), Some(8.0));
        assert_eq!(value("longest_running_processor_seconds"), Some(5.0));

        q.done(&a);
        assert_eq!(value("work_duration_seconds_count"), Some(1.0));
        assert_eq!(value("work_duration_seconds_sum"), Some(5.0));
        assert_eq!(value("unfinished_work_seconds"), Some(3.0));
        q.done(&b);
        assert_eq!(value("work_duration_seconds_sum"), Some(8.0));
        assert_eq!(value("unfinished_work_seconds"), Some(0.0));
        assert_eq!(value("longest_running_processor_seconds"), Some(0.0));

        q.add_rate_limited(key("a"));
        q.add_after(key("b"), MS);
        assert_eq!(value("retries_total"), Some(2.0));
        assert_eq!(
            value("adds_total"),
            Some(2.0),
            "delayed keys are not added yet"
        );
        advance(10 * MS).await;
        // Due keys are promoted on scrape too, so depth is current without a getter.
        assert_eq!(value("depth"), Some(2.0));
        assert_eq!(value("adds_total"), Some(4.0));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dropped_queue_keeps_its_counters_in_the_exposition() {
        let metrics = Metrics::new();
        let q: WorkQueue<ObjectKey> =
            WorkQueue::with_metrics(QueueConfig::default(), metrics.workqueue("gone"));
        q.add(key("a"));
        drop(q);
        let text = metrics.render();
        assert_eq!(
            sample(&text, r#"workqueue_adds_total{name="gone"}"#),
            Some(1.0)
        );
    }
}
