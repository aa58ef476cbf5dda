//! Client-side flow control of the host's API writes: one adaptive limit per host on the writes
//! it has in flight, found from those writes' own latency, so that the host writes as fast as
//! the API server answers and no faster (client-go's `util/flowcontrol` names the same concern).
//!
//! Newcomers start with [`FlowControl`]:
//!
//! - every request of the host's client with a mutating method (POST, PUT, PATCH, DELETE)
//!   takes a permit first and gives it back with its latency ([`client`]); guests' writes and
//!   events, the host's finalizer writes and the Reconcilers' status go through it. The lease's
//!   own client does not: a renewal never waits behind guests' writes;
//! - the limit moves by the gradient rule of [`gradient`]: up while writes are answered about
//!   as fast as unloaded, down as they queue in the server;
//! - a `429` (API Priority and Fairness rejecting a request it will not queue, or the
//!   max-in-flight filter) or a `503`/`504` halves the limit once and sends no write before the
//!   answer's `Retry-After` (1 s if it gives none), then the write is tried again;
//! - a guest whose manifest leaves `concurrency` at 0 reconciles as many keys at once as the
//!   limit allows, up to `maxConcurrency` ([`Slots`]); one that sets it runs that many workers,
//!   whose writes wait for permits like everyone's.
//!
//! Metrics: `reconciler_api_write_limit`, `reconciler_api_writes_in_flight`,
//! `reconciler_api_write_duration_seconds`, `reconciler_api_write_throttled_total{reason}` and
//! `reconciler_guest_concurrency{guest}`.
//!
//! Cost: a write takes a short mutex twice (permit, answer) and one gauge update; reads pass
//! straight through.

mod client;
mod gradient;

use std::sync::{Arc, Weak};
use std::time::Duration;

use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::metrics::{Metrics, ScrapeHook};
pub use client::client;
use gradient::{Bounds, Gradient};

/// `apiWrites:` in the host configuration: the adaptive limit on the host's API writes in
/// flight. Every field is optional.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Settings {
    /// Writes in flight at start (default 4).
    pub initial_limit: Option<u32>,
    /// Never fewer than this (default 1).
    pub min_limit: Option<u32>,
    /// Never more than this (default 64). `minLimit` = `maxLimit` pins the limit.
    pub max_limit: Option<u32>,
    /// How many times the unloaded latency a write may take before the limit stops growing
    /// (default 2.0; at least 1).
    pub latency_tolerance: Option<f64>,
}

impl Settings {
    fn bounds(&self) -> Bounds {
        let min = f64::from(self.min_limit.unwrap_or(1).max(1));
        let max = f64::from(self.max_limit.unwrap_or(64)).max(min);
        Bounds {
            initial: f64::from(self.initial_limit.unwrap_or(4)).clamp(min, max),
            min,
            max,
            tolerance: self.latency_tolerance.unwrap_or(2.0).max(1.0),
        }
    }
}

/// How a write ended, as the limit learns from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The server answered (any status but the overload ones) after this long.
    Answered(Duration),
    /// `429`, `503` or `504`, with the `Retry-After` it gave.
    Overloaded {
        status: u16,
        retry_after: Option<Duration>,
    },
    /// No answer (a connection error, or the caller gave up): nothing learnt.
    Lost,
}

/// The wait when an overloaded answer names none.
const DEFAULT_RETRY_AFTER: Duration = Duration::from_secs(1);
/// The longest `Retry-After` honoured: a longer one is taken as this.
const MAX_RETRY_AFTER: Duration = Duration::from_mins(1);

/// The host's flow control of API writes; cheap to clone (clones share one limit).
#[derive(Clone)]
pub struct FlowControl {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// A permit came back, the limit grew, or a hold ended.
    freed: Notify,
    /// The key limit, for [`Slots`].
    limit: watch::Sender<usize>,
    metrics: Option<Metrics>,
}

struct State {
    gradient: Gradient,
    in_flight: usize,
    /// No write is sent before this (the last overload's `Retry-After`).
    hold_until: Option<Instant>,
}

impl FlowControl {
    /// A limit with these settings, reporting to `metrics` if given.
    pub fn new(settings: &Settings, metrics: Option<Metrics>) -> Self {
        let gradient = Gradient::new(settings.bounds());
        let (limit, keys) = (gradient.limit(), gradient.steady_limit());
        if let Some(m) = &metrics {
            m.api_write_limit(limit);
            m.api_writes_in_flight(0);
        }
        Self {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    gradient,
                    in_flight: 0,
                    hold_until: None,
                }),
                freed: Notify::new(),
                limit: watch::channel(keys).0,
                metrics,
            }),
        }
    }

    /// The writes allowed in flight now.
    pub fn limit(&self) -> usize {
        self.inner.state.lock().gradient.limit()
    }

    /// Writes in flight now.
    pub fn in_flight(&self) -> usize {
        self.inner.state.lock().in_flight
    }

    /// Waits until a write may be sent: fewer than the limit in flight and no hold. The permit
    /// is given back with the write's [`Answer`] ([`Permit::answered`]), or as lost if dropped.
    pub async fn acquire(&self) -> Permit {
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            let hold = {
                let mut state = self.inner.state.lock();
                match state.hold_until {
                    Some(until) if Instant::now() < until => Some(until),
                    _ => {
                        state.hold_until = None;
                        if state.in_flight < state.gradient.limit() {
                            state.in_flight += 1;
                            self.report_in_flight(state.in_flight);
                            return Permit {
                                flow: Some(self.clone()),
                                started: Instant::now(),
                            };
                        }
                        None
                    }
                }
            };
            match hold {
                Some(until) => tokio::time::sleep_until(until).await,
                None => freed.await,
            }
        }
    }

    /// How many keys an adaptive guest may have in progress: the limit as if no probe were
    /// running (see `gradient`: a probe holds writes, not work).
    fn key_limit(&self) -> usize {
        self.inner.state.lock().gradient.steady_limit()
    }

    /// Subscribes to the changes of [`Self::key_limit`].
    fn watch_limit(&self) -> watch::Receiver<usize> {
        self.inner.limit.subscribe()
    }

    fn finish(&self, answer: Answer, started: Instant) {
        let (limit, keys, throttled) = {
            let mut state = self.inner.state.lock();
            let in_flight = state.in_flight;
            state.in_flight = in_flight.saturating_sub(1);
            self.report_in_flight(state.in_flight);
            let throttled = match answer {
                Answer::Answered(latency) => {
                    state.gradient.sample(latency, in_flight);
                    None
                }
                Answer::Overloaded {
                    status,
                    retry_after,
                } => {
                    let wait = retry_after
                        .unwrap_or(DEFAULT_RETRY_AFTER)
                        .min(MAX_RETRY_AFTER);
                    let now = Instant::now();
                    // One decrease per hold: the writes out when the server pushed back were
                    // all sent under the old limit and say nothing new.
                    if state.hold_until.is_none_or(|until| until <= now) {
                        state.gradient.overloaded();
                    }
                    let until = now + wait;
                    state.hold_until = Some(state.hold_until.map_or(until, |u| u.max(until)));
                    Some(status)
                }
                Answer::Lost => None,
            };
            (
                state.gradient.limit(),
                state.gradient.steady_limit(),
                throttled,
            )
        };
        self.inner.limit.send_if_modified(|l| {
            let changed = *l != keys;
            *l = keys;
            changed
        });
        self.inner.freed.notify_waiters();
        if let Some(m) = &self.inner.metrics {
            m.api_write_limit(limit);
            match (answer, throttled) {
                (Answer::Answered(_), _) => m.api_write_finished(started.elapsed()),
                (_, Some(status)) => m.api_write_throttled(status),
                _ => {}
            }
        }
    }

    fn report_in_flight(&self, in_flight: usize) {
        if let Some(m) = &self.inner.metrics {
            m.api_writes_in_flight(in_flight);
        }
    }
}

/// One write's place in flight; give it back with [`Permit::answered`].
#[must_use = "a permit is given back when dropped: keep it while the write is out"]
pub struct Permit {
    flow: Option<FlowControl>,
    started: Instant,
}

impl Permit {
    /// The write ended with `answer`.
    pub fn answered(mut self, answer: Answer) {
        if let Some(flow) = self.flow.take() {
            flow.finish(answer, self.started);
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(flow) = self.flow.take() {
            flow.finish(Answer::Lost, self.started);
        }
    }
}

/// A guest's keys in progress under the adaptive limit: at most `min(limit, cap)` at once,
/// where `cap` is the guest's `maxConcurrency` (or its grant's `concurrency`, if lower), and
/// `limit` the limit as if no probe were running.
pub(crate) struct Slots {
    inner: Arc<SlotsInner>,
}

struct SlotsInner {
    flow: FlowControl,
    cap: usize,
    used: Mutex<usize>,
    freed: Notify,
    guest: String,
}

impl Slots {
    pub(crate) fn new(flow: &FlowControl, cap: usize, guest: &str) -> Self {
        let inner = Arc::new(SlotsInner {
            flow: flow.clone(),
            cap: cap.max(1),
            used: Mutex::new(0),
            freed: Notify::new(),
            guest: guest.to_owned(),
        });
        if let Some(metrics) = &flow.inner.metrics {
            // Reports the guest's limit at each scrape for as long as the slots live.
            let hook: Weak<SlotsInner> = Arc::downgrade(&inner);
            metrics.register_scrape_hook(hook);
        }
        Self { inner }
    }

    /// Waits for a slot: fewer keys in progress than [`Self::limit`].
    pub(crate) async fn take(&self) -> Slot {
        let mut limit = self.inner.flow.watch_limit();
        loop {
            let freed = self.inner.freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            limit.borrow_and_update();
            {
                let mut used = self.inner.used.lock();
                if *used < self.inner.limit() {
                    *used += 1;
                    return Slot {
                        slots: Arc::downgrade(&self.inner),
                    };
                }
            }
            tokio::select! {
                () = freed => {}
                changed = limit.changed() => if changed.is_err() {
                    // The flow control is gone with the host: no limit to wait for.
                    std::future::pending::<()>().await;
                },
            }
        }
    }
}

impl SlotsInner {
    fn limit(&self) -> usize {
        self.flow.key_limit().min(self.cap)
    }
}

impl ScrapeHook for SlotsInner {
    fn before_scrape(&self) {
        if let Some(metrics) = &self.flow.inner.metrics {
            metrics.guest_concurrency(&self.guest, self.limit());
        }
    }
}

/// A key in progress; its slot is free again when dropped.
pub(crate) struct Slot {
    slots: Weak<SlotsInner>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(slots) = self.slots.upgrade() {
            let mut used = slots.used.lock();
            *used = used.saturating_sub(1);
            drop(used);
            slots.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flow control past its first probe (writes answered alone in 2 ms).
    async fn flow(initial: u32) -> FlowControl {
        let flow = FlowControl::new(
            &Settings {
                initial_limit: Some(initial),
                ..Settings::default()
            },
            None,
        );
        for _ in 0..gradient::PROBE_WRITES {
            assert_eq!(flow.limit(), 1, "probing: one write at a time");
            flow.acquire()
                .await
                .answered(Answer::Answered(Duration::from_millis(2)));
        }
        assert_eq!(flow.limit(), initial as usize);
        flow
    }

    async fn not_within<F: std::future::Future>(f: F, limit: Duration) -> bool {
        tokio::time::timeout(limit, f).await.is_err()
    }

    #[tokio::test(start_paused = true)]
    async fn no_more_writes_than_the_limit_are_in_flight() {
        let flow = flow(2).await;
        let a = flow.acquire().await;
        let _b = flow.acquire().await;
        assert_eq!(flow.in_flight(), 2);
        assert!(not_within(flow.acquire(), Duration::from_secs(5)).await);
        a.answered(Answer::Answered(Duration::from_millis(2)));
        let _c = tokio::time::timeout(Duration::from_secs(5), flow.acquire())
            .await
            .expect("a permit once one came back");
        assert_eq!(flow.in_flight(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_429_halves_the_limit_and_no_write_goes_out_before_its_retry_after() {
        let flow = flow(8).await;
        let permit = flow.acquire().await;
        let answered = Instant::now();
        permit.answered(Answer::Overloaded {
            status: 429,
            retry_after: Some(Duration::from_secs(3)),
        });
        assert_eq!(flow.limit(), 4, "halved");
        let _next = flow.acquire().await;
        assert!(
            Instant::now() >= answered + Duration::from_secs(3),
            "a write went out {:?} after the 429, before its Retry-After of 3 s",
            Instant::now() - answered
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_writes_refused_together_shrink_the_limit_once_and_a_429_without_retry_after_waits_a_second()
     {
        let flow = flow(16).await;
        let permits: Vec<Permit> = futures::future::join_all((0..4).map(|_| flow.acquire())).await;
        let answered = Instant::now();
        for permit in permits {
            permit.answered(Answer::Overloaded {
                status: 429,
                retry_after: None,
            });
        }
        assert_eq!(flow.limit(), 8, "one halving for one push-back");
        let _next = flow.acquire().await;
        assert!(Instant::now() >= answered + DEFAULT_RETRY_AFTER);
        // Pushed back again after the hold: halved again.
        flow.acquire().await.answered(Answer::Overloaded {
            status: 503,
            retry_after: Some(Duration::from_millis(10)),
        });
        assert_eq!(flow.limit(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn an_adaptive_guest_takes_no_more_keys_than_the_limit_nor_its_cap() {
        let flow = flow(3).await;
        let slots = Slots::new(&flow, 16, "g");
        let held: Vec<Slot> = futures::future::join_all((0..3).map(|_| slots.take())).await;
        assert!(
            not_within(slots.take(), Duration::from_secs(5)).await,
            "a fourth key at limit 3"
        );
        drop(held);
        let capped = Slots::new(&flow, 2, "h");
        assert_eq!(capped.inner.limit(), 2);
        let _two: Vec<Slot> = futures::future::join_all((0..2).map(|_| capped.take())).await;
        assert!(
            not_within(capped.take(), Duration::from_secs(5)).await,
            "a third key over the cap"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_shrunk_limit_admits_fewer_keys() {
        let flow = flow(4).await;
        let slots = Slots::new(&flow, 16, "g");
        flow.acquire().await.answered(Answer::Overloaded {
            status: 429,
            retry_after: Some(Duration::from_millis(1)),
        });
        assert_eq!(slots.inner.limit(), 2);
        let _held: Vec<Slot> = futures::future::join_all((0..2).map(|_| slots.take())).await;
        assert!(not_within(slots.take(), Duration::from_secs(5)).await);
    }

    /// The probe measures the no-load latency with the host as busy as usual: its writes go
    /// out one at a time, but the guest keeps as many keys in progress as before.
    #[tokio::test(start_paused = true)]
    async fn during_a_probe_writes_go_out_alone_and_an_adaptive_guest_keeps_its_keys() {
        let flow = flow(4).await;
        let slots = Slots::new(&flow, 16, "g");
        // A window of writes none of which was a probe's.
        for _ in 0..gradient::WINDOW {
            let permits: Vec<Permit> =
                futures::future::join_all((0..4).map(|_| flow.acquire())).await;
            for permit in permits {
                permit.answered(Answer::Answered(Duration::from_millis(2)));
            }
            if flow.limit() == 1 {
                break;
            }
        }
        assert_eq!(flow.limit(), 1, "probing");
        let _keys: Vec<Slot> = futures::future::join_all((0..4).map(|_| slots.take())).await;
        let _alone = flow.acquire().await;
        assert!(
            not_within(flow.acquire(), Duration::from_secs(5)).await,
            "a second write during the probe"
        );
    }
}
