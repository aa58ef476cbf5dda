//! Leader election on a `coordination.k8s.io/v1` Lease: several hosts may run, one reconciles.
//! The others take over within about a lease duration when the leader dies; a host that sees it
//! lost the lease stops reconciling at once; a host that shuts down releases the lease so a
//! standby takes over without waiting for expiry.
//!
//! The rules are client-go's (`tools/leaderelection`), written here because the write fence
//! needs what no election crate exposes: when the last renewal that succeeded was *sent*.
//!
//! - Every `retry` (a sixth of the lease duration, at least 1 s) a candidate reads the Lease.
//!   A Lease whose holder, renew time or resourceVersion has not changed for a whole lease
//!   duration *as observed here* (the local monotonic clock, so clock skew between nodes does
//!   not matter) has expired; an empty holder is free.
//! - Acquiring and renewing are updates with the resourceVersion read (optimistic concurrency):
//!   of two candidates, one wins, the other gets a conflict.
//! - The holder may write until `renewal sent + lease duration - margin`
//!   ([`WriteFence::hold_until`]): a standby takes over at the earliest a whole lease duration
//!   after it last saw a change, which is after the renewal was sent, so the margin is the
//!   least time between the old leader's last write and the new leader's first.
//!
//! One addition to client-go's rules: a standby also watches the Lease, and tries to take it
//! the moment the last change it saw is a lease duration old. Polling alone sees a renewal up to
//! a retry period late and tries again up to a retry period after expiry, so a standby took over
//! anywhere between a lease duration less one retry period and plus one after the leader died;
//! with the watch it takes over a lease duration after the leader's last renewal, at most (a
//! change seen earlier is still seen after it was sent, so the fence's margin holds). The watch
//! waits out the `Retry-After` of an API server that sheds load (`crate::cluster::retry_after`); the
//! reads and updates are single requests, retried by kube's client within their deadline.

use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use crate::cluster::retry_after::{self, Hold, ServerBackoff};
use crate::replicas::fence::WriteFence;

#[derive(Debug, Clone)]
pub struct LeaderOptions {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    /// Stop writing this long before the lease could be taken over.
    pub grace: Duration,
}

impl LeaderOptions {
    fn retry(&self) -> Duration {
        (self.duration / 6).max(Duration::from_secs(1))
    }

    /// How long after a renewal was sent the leader may write without another.
    fn work_window(&self) -> Duration {
        self.duration.saturating_sub(self.grace)
    }
}

/// A running election: `is_leader` changes as leadership is won and lost.
pub struct Election {
    pub is_leader: watch::Receiver<bool>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Election {
    /// Starts campaigning. `fence` is held to the deadline of every renewal that succeeds.
    pub fn start(client: kube::Client, options: &LeaderOptions, fence: WriteFence) -> Self {
        Self::start_counting(client, options, fence, || {})
    }

    /// As [`Election::start`], calling `throttled` each time the API server refuses the lease
    /// watch as overloaded.
    pub(crate) fn start_counting(
        client: kube::Client,
        options: &LeaderOptions,
        fence: WriteFence,
        throttled: impl Fn() + Clone + Send + Sync + 'static,
    ) -> Self {
        let (leader_tx, is_leader) = watch::channel(false);
        let hold = Hold::default();
        let watching = retry_after::watch_client(client.clone(), hold.clone(), throttled);
        let (stop, stopped) = oneshot::channel();
        let candidate = Candidate {
            api: Api::namespaced(client, &options.namespace),
            watched: (Api::namespaced(watching, &options.namespace), hold),
            options: options.clone(),
            fence,
            leader: leader_tx,
            observed: None,
            renewed: None,
        };
        let task = tokio::spawn(candidate.run(stopped));
        Self {
            is_leader,
            stop,
            task,
        }
    }

    /// Releases the lease (if held) and stops the election.
    pub async fn release(self) {
        let _ = self.stop.send(());
        if let Err(e) = self.task.await {
            tracing::warn!("lease task failed: {e}");
        }
    }
}

/// The last version of the Lease seen, and when it was first seen.
struct Observed {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    resource_version: Option<String>,
    at: Instant,
}

struct Candidate {
    api: Api<Lease>,
    /// The lease watch's own client, and what it noted of refusals.
    watched: (Api<Lease>, Hold),
    options: LeaderOptions,
    fence: WriteFence,
    leader: watch::Sender<bool>,
    observed: Option<Observed>,
    /// When the last renewal that succeeded was sent.
    renewed: Option<Instant>,
}

impl Candidate {
    async fn run(mut self, mut stopped: oneshot::Receiver<()>) {
        let mut tick = tokio::time::interval(self.options.retry());
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (watched, mut seen) = watch::channel(None);
        let watching = tokio::spawn(watch_lease(
            self.watched.clone(),
            self.options.lease_name.clone(),
            watched,
        ));
        loop {
            let standby = !*self.leader.borrow();
            let expiry = self
                .observed
                .as_ref()
                .filter(|_| standby)
                .map(|o| tokio::time::Instant::from_std(o.at + self.options.duration));
            tokio::select! {
                _ = &mut stopped => break,
                _ = tick.tick() => {}
                () = sleep_until(expiry) => {}
                changed = seen.changed(), if standby => {
                    if changed.is_err() || !self.saw(seen.borrow_and_update().as_ref()) {
                        continue;
                    }
                }
            }
            let sent = Instant::now();
            match self.try_acquire_or_renew(sent).await {
                Ok(true) => {
                    self.renewed = Some(sent);
                    self.fence.hold_until(sent + self.options.work_window());
                    self.set_leader(true);
                }
                Ok(false) => self.set_leader(false),
                Err(e) => {
                    tracing::warn!(lease = %self.options.lease_name, "leader election: {e}");
                    let within = self
                        .renewed
                        .is_some_and(|r| Instant::now() < r + self.options.work_window());
                    if !within {
                        self.set_leader(false);
                    }
                }
            }
        }
        watching.abort();
        self.release().await;
    }

    /// Notes a version of the Lease the watch delivered; true when it is free to take now.
    fn saw(&mut self, lease: Option<&Lease>) -> bool {
        let Some(lease) = lease else { return false };
        let spec = lease.spec.clone().unwrap_or_default();
        self.observe(lease, &spec, Instant::now());
        spec.holder_identity.is_none_or(|h| h.is_empty())
    }

    fn set_leader(&self, leading: bool) {
        self.leader.send_if_modified(|was| {
            let changed = *was != leading;
            *was = leading;
            changed
        });
    }

    /// Reads the Lease and takes or renews it if it is ours, free or expired. `Ok(false)`:
    /// another candidate holds it.
    async fn try_acquire_or_renew(&mut self, sent: Instant) -> Result<bool, kube::Error> {
        let name = self.options.lease_name.clone();
        let retry = self.options.retry();
        let Some(lease) = within(retry, self.api.get_opt(&name)).await? else {
            let lease = self.lease(None, None, 0);
            return match within(retry, self.api.create(&PostParams::default(), &lease)).await {
                Ok(_) => {
                    tracing::info!(lease = %name, identity = %self.options.identity, "acquired the lease (created it)");
                    Ok(true)
                }
                Err(e) if status_code(&e) == Some(409) => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        self.observe(&lease, &spec, sent);
        let ours = holder.as_deref() == Some(self.options.identity.as_str());
        let expired = self
            .observed
            .as_ref()
            .is_some_and(|o| o.at + self.options.duration <= sent);
        if !ours && holder.is_some() && !expired {
            return Ok(false);
        }
        let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
        let acquired = if ours { spec.acquire_time } else { None };
        let update = self.lease(lease.metadata.resource_version, acquired, transitions);
        match within(
            retry,
            self.api.replace(&name, &PostParams::default(), &update),
        )
        .await
        {
            Ok(_) => {
                if !ours {
                    tracing::info!(lease = %name, identity = %self.options.identity, previous = ?holder, "acquired the lease");
                }
                Ok(true)
            }
            // Another candidate wrote first: it is theirs.
            Err(e) if status_code(&e) == Some(409) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Notes when this version of the Lease was first seen: expiry is judged by the local
    /// clock from that moment.
    fn observe(&mut self, lease: &Lease, spec: &LeaseSpec, at: Instant) {
        let same = self.observed.as_ref().is_some_and(|o| {
            o.holder == spec.holder_identity
                && o.renew_time == spec.renew_time
                && o.resource_version == lease.metadata.resource_version
        });
        if !same {
            self.observed = Some(Observed {
                holder: spec.holder_identity.clone(),
                renew_time: spec.renew_time.clone(),
                resource_version: lease.metadata.resource_version.clone(),
                at,
            });
        }
    }

    /// The Lease as this candidate writes it: holding it now.
    fn lease(
        &self,
        resource_version: Option<String>,
        acquired: Option<MicroTime>,
        transitions: i32,
    ) -> Lease {
        let now = now();
        Lease {
            metadata: ObjectMeta {
                name: Some(self.options.lease_name.clone()),
                namespace: Some(self.options.namespace.clone()),
                resource_version,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.options.identity.clone()),
                lease_duration_seconds: i32::try_from(self.options.duration.as_secs()).ok(),
                acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
                renew_time: Some(now),
                lease_transitions: Some(transitions),
                ..LeaseSpec::default()
            }),
        }
    }

    /// Gives the lease up if it is ours, so a standby takes over at once.
    async fn release(&self) {
        self.fence.close();
        self.set_leader(false);
        let name = &self.options.lease_name;
        let Ok(Some(lease)) = within(self.options.retry(), self.api.get_opt(name)).await else {
            return;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.options.identity.as_str()) {
            return;
        }
        let released = Lease {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(self.options.namespace.clone()),
                resource_version: lease.metadata.resource_version,
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: None,
                renew_time: None,
                ..spec
            }),
        };
        match within(
            self.options.retry(),
            self.api.replace(name, &PostParams::default(), &released),
        )
        .await
        {
            Ok(_) => tracing::info!(lease = %name, "lease released"),
            Err(e) => tracing::warn!(lease = %name, "releasing the lease failed: {e}"),
        }
    }
}

/// Sleeps until `at`, or for ever without one.
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Follows the Lease `name` into `seen` (each version as it is written), for as long as the
/// election runs; the watcher retries with backoff after errors (`Retry-After`, when the
/// refusal in `hold` gave one).
async fn watch_lease(
    (api, hold): (Api<Lease>, Hold),
    name: String,
    seen: watch::Sender<Option<Lease>>,
) {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut leases = watcher(api, config)
        .backoff(ServerBackoff::new(hold))
        .applied_objects()
        .boxed();
    while let Some(lease) = leases.next().await {
        match lease {
            Ok(lease) => {
                seen.send_replace(Some(lease));
            }
            Err(e) => tracing::debug!(lease = %name, "watching the lease: {e}"),
        }
    }
}

/// Now, as a Lease's times are written (the ring's leases too).
pub(crate) fn now() -> MicroTime {
    MicroTime(k8s_openapi::jiff::Timestamp::now())
}

/// The HTTP status of an API error.
pub(crate) fn status_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

/// A request that gives up after `limit` (as a transport error), so a hung connection does
/// not stall the election.
pub(crate) async fn within<T>(
    limit: Duration,
    request: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, kube::Error> {
    tokio::time::timeout(limit, request)
        .await
        .unwrap_or_else(|_| {
            Err(kube::Error::Service(
                format!("no answer within {limit:?}").into(),
            ))
        })
}
