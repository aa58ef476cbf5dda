//! `Retry-After` for the host's list and watch loops: when the API server refuses one of their
//! requests as overloaded (`429`, or `503`/`504`; a 1.37 API server answers `429` with
//! `Retry-After` while a resource's watch cache initialises, API Priority and Fairness when it
//! sheds), the loop waits what the server asked before it tries again, then resumes where it
//! was.
//!
//! Why a piece of our own: kube-runtime's watcher is the retry loop of a list+watch (it resumes
//! a watch from its last resourceVersion and relists after 410 Gone), but its backoff
//! (`DefaultBackoff`, client-go's reflector numbers) never sees the answer, so it cannot honour
//! `Retry-After`; and kube's client retry layer (`RetryPolicy::server_retry`) does honour it,
//! but inside one request, where the loop neither sees the refusal (no metric, no readiness
//! reason) nor stops its own backoff from growing: after eight refusals its waits grow past the
//! server's `Retry-After` to minutes, so the loop comes back long after the server recovered.
//!
//! So a loop's requests go out once ([`OwnRetries`] tells [`client`] to skip kube's retry layer),
//! the client that sends them notes each refusal in the loop's [`Hold`], and the loop's backoff
//! ([`ServerBackoff`]) waits `Retry-After` (at most [`LONGEST`], plus up to a fifth more at
//! random so that every informer of a host does not come back at the same instant) after a
//! refusal that gave one, and kube-runtime's `DefaultBackoff` after any other error. One-shot
//! reads (discovery, a lease's read) keep kube's retry layer, which honours `Retry-After` for
//! up to 15 attempts.
//!
//! Cost: one short mutex per refused answer and per error of a loop; nothing on a served one.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use kube::client::Body;
use kube::runtime::utils::Backoff;
use kube::runtime::watcher::{self, DefaultBackoff};
use parking_lot::Mutex;
use tokio::time::Instant;

/// The longest `Retry-After` obeyed: twice the most a kube-apiserver asks of itself (its watch
/// cache's `calculateRetryAfterForUnreadyCache` stops at 30 s). A longer one (a proxy's, a
/// typo) would leave a cache stale for as long, so the loop asks again after this.
pub(crate) const LONGEST: Duration = Duration::from_mins(1);

/// A request's marker: the caller retries it in a loop of its own, so [`client`] sends it
/// without kube's retry layer.
#[derive(Clone, Copy, Debug)]
pub(crate) struct OwnRetries;

/// kube's client for `config`, where requests marked [`OwnRetries`] skip kube's retry layer;
/// every other request is retried by kube's `RetryPolicy::server_retry` (429/503/504, honouring
/// `Retry-After`) unless `config.default_retry` is off. Both share one connection pool.
///
/// # Errors
///
/// When kube cannot build a client from `config`.
pub(crate) fn client(config: &kube::Config) -> Result<kube::Client, kube::Error> {
    let mut once = config.clone();
    let retrying = std::mem::replace(&mut once.default_retry, false);
    let once = kube::Client::try_from(once)?;
    let sent_once = once.clone();
    let retried = tower::ServiceBuilder::new()
        .option_layer(retrying.then(|| {
            tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry())
        }))
        .service_fn(move |request: Request<Body>| send(sent_once.clone(), request));
    let service = tower::service_fn(move |request: Request<Body>| -> Sent {
        if request.extensions().get::<OwnRetries>().is_some() {
            send(once.clone(), request)
        } else {
            Box::pin(tower::ServiceExt::oneshot(retried.clone(), request))
        }
    });
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// A request on its way (named: the closures of [`client`] return one type).
type Sent = futures::future::BoxFuture<'static, Result<Response<Body>, tower::BoxError>>;

fn send(client: kube::Client, request: Request<Body>) -> Sent {
    Box::pin(async move { client.send(request).await.map_err(tower::BoxError::from) })
}

/// Whether the server refused a request as overloaded, and for how long it asked the client to
/// wait (`Retry-After` in seconds; the HTTP-date form is rare from an API server and not read).
pub(crate) fn refusal<B>(response: &Response<B>) -> Option<Refusal> {
    let status = response.status();
    if !matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    ) {
        return None;
    }
    let retry_after = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Duration::from_secs);
    Some(Refusal {
        status: status.as_u16(),
        retry_after,
    })
}

/// The API server's answer when a watcher's `error` is a request it refused as overloaded
/// (a list or watch answered 429, 503 or 504).
pub(crate) fn overloaded(error: &watcher::Error) -> Option<&kube::core::Status> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status))
            if matches!(status.code, 429 | 503 | 504) =>
        {
            Some(status)
        }
        _ => None,
    }
}

/// An answer that refused a request as overloaded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub status: u16,
    /// What the server asked the client to wait; none when it did not say.
    pub retry_after: Option<Duration>,
}

/// The refusals one loop's requests met, shared by the client that sees the answers and the
/// loop's [`ServerBackoff`]. Cheap to clone: clones share it.
#[derive(Clone, Default)]
pub(crate) struct Hold(Arc<Mutex<HoldState>>);

#[derive(Default)]
struct HoldState {
    /// The latest refusal, and when it arrived.
    latest: Option<(Refusal, Instant)>,
    /// `latest` arrived after the backoff last looked: the error it caused is the next one.
    unread: bool,
    /// Until when the loop waits, when it waits for a `Retry-After`.
    until: Option<Instant>,
}

impl Hold {
    /// Notes `response` if it refused the request as overloaded; returns the refusal.
    pub(crate) fn note<B>(&self, response: &Response<B>) -> Option<Refusal> {
        let refusal = refusal(response)?;
        let mut state = self.0.lock();
        state.latest = Some((refusal, Instant::now()));
        state.unread = true;
        Some(refusal)
    }

    /// Marks `request` as one its loop retries (see [`OwnRetries`]).
    pub(crate) fn own<B>(request: &mut Request<B>) {
        request.extensions_mut().insert(OwnRetries);
    }

    /// The latest refusal and, while the loop waits for its `Retry-After`, until when.
    pub(crate) fn latest(&self) -> Option<(Refusal, Option<Instant>)> {
        let state = self.0.lock();
        let until = state.until.filter(|until| *until > Instant::now());
        state.latest.map(|(refusal, _)| (refusal, until))
    }

    /// What to wait for the error that just happened: what is left of the `Retry-After` of a
    /// refusal not read yet, if it gave one. Records until when.
    fn asked(&self, jitter: f64) -> Option<Duration> {
        let mut state = self.0.lock();
        if !std::mem::replace(&mut state.unread, false) {
            return None;
        }
        let (refusal, at) = state.latest?;
        let asked = refusal.retry_after?.min(LONGEST);
        let until = at + asked + asked.mul_f64(jitter);
        state.until = Some(until);
        Some(until.saturating_duration_since(Instant::now()))
    }

    /// A served answer ended the refusals: readiness stops naming them.
    fn clear(&self) {
        let mut state = self.0.lock();
        state.until = None;
        state.unread = false;
    }
}

/// A loop's backoff: after an error the server caused with a refusal that carried
/// `Retry-After`, that long (at most [`LONGEST`]) and up to a fifth more; after any other error,
/// kube-runtime's `DefaultBackoff` (800 ms doubling to 30 s, with jitter, reset after 120 s
/// without errors). A `Retry-After` wait does not advance the default's growth: the server set
/// the pace, and raises its `Retry-After` itself the longer it is down.
pub(crate) struct ServerBackoff {
    default: DefaultBackoff,
    hold: Hold,
}

impl ServerBackoff {
    pub(crate) fn new(hold: Hold) -> Self {
        Self {
            default: DefaultBackoff::default(),
            hold,
        }
    }
}

impl Iterator for ServerBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        match self.hold.asked(jitter()) {
            Some(wait) => Some(wait),
            None => self.default.next(),
        }
    }
}

impl Backoff for ServerBackoff {
    fn reset(&mut self) {
        self.hold.clear();
        self.default.reset();
    }
}

/// A fraction in `[0, 0.2)`. `RandomState` is std's randomly keyed hasher: enough to spread
/// loops apart, without a random-number crate for it.
fn jitter() -> f64 {
    let bits = std::hash::RandomState::new().hash_one(std::time::Instant::now());
    #[allow(clippy::cast_precision_loss)] // 53 bits of a random u64 are plenty for a jitter
    let unit = (bits >> 11) as f64 / (1u64 << 53) as f64;
    unit * 0.2
}

/// `base`, for one loop that retries by itself: every request is marked [`OwnRetries`], and
/// each refusal is noted in `hold` and counted by `refused`. For watchers outside the informers
/// (the informers' own client does the same beside its other work: `cluster/informers/client.rs`).
///
/// Cost: one `kube::Client` (a tower buffer task) per loop.
pub(crate) fn watch_client(
    base: kube::Client,
    hold: Hold,
    refused: impl Fn() + Clone + Send + Sync + 'static,
) -> kube::Client {
    let namespace = base.default_namespace().to_owned();
    let service = tower::service_fn(move |mut request: Request<Body>| {
        let (base, hold, refused) = (base.clone(), hold.clone(), refused.clone());
        Hold::own(&mut request);
        async move {
            let response = base.send(request).await?;
            if hold.note(&response).is_some() {
                refused();
            }
            Ok::<_, kube::Error>(response)
        }
    });
    kube::Client::new(service, namespace)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    fn answer(status: u16, retry_after: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(after) = retry_after {
            builder = builder.header("Retry-After", after);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn overload_answers_are_refusals_with_their_retry_after() {
        assert_eq!(
            refusal(&answer(429, Some("3"))),
            Some(Refusal {
                status: 429,
                retry_after: Some(Duration::from_secs(3))
            })
        );
        assert_eq!(
            refusal(&answer(503, Some("Wed, 21 Oct 2026 07:28:00 GMT"))),
            Some(Refusal {
                status: 503,
                retry_after: None
            })
        );
        for served in [200, 404, 410, 500] {
            assert_eq!(refusal(&answer(served, Some("3"))), None, "{served}");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_with_retry_after_sets_the_next_wait_once_and_capped() {
        let hold = Hold::default();
        let mut backoff = ServerBackoff::new(hold.clone());
        hold.note(&answer(429, Some("5")));
        let wait = backoff.next().unwrap();
        assert!(
            (Duration::from_secs(5)..Duration::from_secs(6)).contains(&wait),
            "{wait:?}"
        );
        let (refusal, until) = hold.latest().unwrap();
        assert_eq!(refusal.status, 429);
        assert!(until.is_some(), "the wait is reported while it lasts");
        // The next error without a new refusal (a connection refused): the default backoff.
        let default = backoff.next().unwrap();
        assert!(default < Duration::from_millis(1700), "{default:?}");

        hold.note(&answer(429, Some("3600")));
        let capped = backoff.next().unwrap();
        assert!(
            (LONGEST..LONGEST.mul_f64(1.2)).contains(&capped),
            "{capped:?}"
        );
        backoff.reset();
        assert_eq!(hold.latest().map(|(_, until)| until), Some(None));
    }

    #[tokio::test(start_paused = true)]
    async fn the_wait_counts_from_the_refusal_and_a_refusal_without_retry_after_backs_off() {
        let hold = Hold::default();
        let mut backoff = ServerBackoff::new(hold.clone());
        hold.note(&answer(429, Some("4")));
        tokio::time::advance(Duration::from_secs(3)).await;
        let left = backoff.next().unwrap();
        assert!(
            (Duration::from_secs(1)..Duration::from_millis(1800)).contains(&left),
            "{left:?}"
        );
        hold.note(&answer(503, None));
        let default = backoff.next().unwrap();
        assert!(default < Duration::from_secs(4), "{default:?}");
    }

    #[test]
    fn jitter_stays_within_a_fifth_and_varies() {
        let draws: Vec<f64> = (0..64).map(|_| jitter()).collect();
        assert!(draws.iter().all(|j| (0.0..0.2).contains(j)), "{draws:?}");
        assert!(
            draws.windows(2).any(|w| (w[0] - w[1]).abs() > f64::EPSILON),
            "{draws:?}"
        );
    }

    /// A server stand-in that answers every request 429 with `Retry-After: 1`, counting them.
    fn refusing() -> (kube::Client, Arc<AtomicUsize>) {
        let seen = Arc::new(AtomicUsize::new(0));
        let counter = seen.clone();
        let service = tower::service_fn(move |_: Request<Body>| {
            counter.fetch_add(1, Ordering::SeqCst);
            async {
                // The Status body an API server sends with it.
                let status = br#"{"kind":"Status","apiVersion":"v1","status":"Failure","message":"storage is (re)initializing","reason":"TooManyRequests","code":429}"#;
                let mut response = Response::new(Body::from(status.to_vec()));
                *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
                response
                    .headers_mut()
                    .insert(http::header::RETRY_AFTER, "1".parse().unwrap());
                Ok::<_, std::convert::Infallible>(response)
            }
        });
        (kube::Client::new(service, "default"), seen)
    }

    #[tokio::test]
    async fn a_loops_client_notes_and_counts_each_refusal_and_marks_its_requests() {
        let (base, seen) = refusing();
        let hold = Hold::default();
        let counted = Arc::new(AtomicUsize::new(0));
        let count = counted.clone();
        let client = watch_client(base, hold.clone(), move || {
            count.fetch_add(1, Ordering::SeqCst);
        });
        let request = Request::get("/api/v1/namespaces").body(Vec::new()).unwrap();
        let answer = client.request_text(request).await;
        assert!(
            matches!(answer, Err(kube::Error::Api(ref s)) if s.code == 429),
            "{answer:?}"
        );
        assert_eq!(seen.load(Ordering::SeqCst), 1);
        assert_eq!(counted.load(Ordering::SeqCst), 1);
        assert_eq!(
            hold.latest().map(|(r, _)| r.retry_after),
            Some(Some(Duration::from_secs(1)))
        );
    }
}
