//! HTTP endpoints: `/healthz` (the process serves), `/readyz` (the guests the sources held at
//! start are loaded or refused, and every running controller's caches have synced), `/metrics`
//! (Prometheus/OpenMetrics text) and `/guests` (per-file load status: loaded or refused with the
//! reason, content hashes) and, in sharded mode, `/shards` (the ring as this replica sees it:
//! members, owned slots and hash ranges, keys per guest).
//!
//! The port is open to the pod network, so no client may hold the server (slowloris and the
//! like): each connection serves one request (no keep-alive: probes and scrapers gain nothing
//! from it), its request line and headers must arrive within
//! [`ServerOptions::header_read_timeout`], and the whole exchange (headers, handler, the client
//! reading the response) must end within [`ServerOptions::request_timeout`], or the connection
//! is dropped. At most [`ServerOptions::max_connections`] are open at once; further clients wait
//! in the listen backlog. `axum::serve` offers none of these knobs, hence the accept loop here.
//!
//! Nor may guests hold it: `/healthz` and `/readyz` must answer within the kubelet's probe
//! timeouts whatever guests make the host do, and guests run on the host's async workers (a
//! busy loop yields only every epoch tick; host work such as a list over a large cache runs
//! between yields). So the server runs on its own OS thread with its own single-threaded
//! runtime ([`serve`]), and the endpoints that take locks shared with the rest of the host
//! (`/metrics`, `/guests`, `/shards`) run on that runtime's blocking threads, so a wait there
//! never delays a probe. The probes themselves read only atomics and short-held locks:
//! `/readyz` the first-pass flag, the readiness map (held by the manager only to insert or
//! remove a guest) and each controller's synced flag, and while a cache has not synced, the
//! informers' registry and their last errors (`Informers::unsynced`: why a cache is still
//! waiting, such as an API server holding its list back with `Retry-After`).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

use crate::cluster::informers::Informers;
use crate::metrics::{CONTENT_TYPE, Metrics};
use crate::replicas::shards::ShardStatus;
use crate::supply::guest_set::{FirstPass, Guests};

/// What `/readyz` looks at, written by the manager.
#[derive(Default)]
pub(crate) struct Readiness {
    /// The manager has applied the guest set's first pass ([`crate::supply::guest_set::FirstPass`]):
    /// the guests its sources held at start are loaded (their controllers started) or refused.
    guests_applied: AtomicBool,
    /// Each running controller's synced flag, by guest.
    pub(crate) controllers: Mutex<BTreeMap<String, watch::Receiver<bool>>>,
}

impl Readiness {
    pub(crate) fn set_guests_applied(&self) {
        self.guests_applied.store(true, Ordering::Release);
    }

    fn guests_applied(&self) -> bool {
        self.guests_applied.load(Ordering::Acquire)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    directory: Arc<Guests>,
    readiness: Arc<Readiness>,
    /// Why caches wait, for `/readyz`; none in tests of the server alone.
    informers: Option<Informers>,
    shards: Option<Arc<ShardStatus>>,
}

/// Limits on what a client may hold (see the module docs).
#[derive(Debug, Clone)]
pub(crate) struct ServerOptions {
    /// From accepting a connection to the end of the request's headers.
    pub header_read_timeout: Duration,
    /// From accepting a connection to the last byte of the response.
    pub request_timeout: Duration,
    /// Connections open at once.
    pub max_connections: usize,
}

impl Default for ServerOptions {
    fn default() -> Self {
        Self {
            header_read_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

/// The running server (see [`serve`]): stops when dropped.
pub(crate) struct Server {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Binds `addr` for [`serve`]; the host binds before it starts anything else, so an address
/// in use is a clear error at start and not a failure halfway through (port 0 picks one).
pub(crate) fn bind(addr: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    use anyhow::Context as _;
    std::net::TcpListener::bind(addr).with_context(|| format!("cannot listen on {addr} (--listen)"))
}

/// Serves on `listener` on a thread of its own until the returned [`Server`] is dropped.
/// Returns the bound address.
pub(crate) fn serve(
    listener: std::net::TcpListener,
    metrics: Metrics,
    directory: Arc<Guests>,
    (readiness, informers): (Arc<Readiness>, Informers),
    shards: Option<Arc<ShardStatus>>,
) -> anyhow::Result<(SocketAddr, Server)> {
    serve_with(
        listener,
        metrics,
        directory,
        (readiness, Some(informers)),
        shards,
        ServerOptions::default(),
    )
}

/// [`serve`] with other limits.
pub(crate) fn serve_with(
    listener: std::net::TcpListener,
    metrics: Metrics,
    directory: Arc<Guests>,
    (readiness, informers): (Arc<Readiness>, Option<Informers>),
    shards: Option<Arc<ShardStatus>>,
    options: ServerOptions,
) -> anyhow::Result<(SocketAddr, Server)> {
    let app = Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics_text))
        .route("/guests", get(guests))
        .route("/shards", get(shards_report))
        .with_state(AppState {
            metrics,
            directory,
            readiness,
            informers,
            shards,
        });
    serve_router(listener, app, options)
}

/// Serves `app` on a new OS thread running a current-thread tokio runtime: no task of the
/// host's own runtime can delay it. Cost: one thread, its runtime and its blocking pool
/// (threads started on demand, for the endpoints that take shared locks).
fn serve_router(
    listener: std::net::TcpListener,
    app: Router,
    options: ServerOptions,
) -> anyhow::Result<(SocketAddr, Server)> {
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .thread_name("http-blocking")
        .build()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("http-server".into())
        .spawn(move || {
            runtime.block_on(async move {
                let listener = match TcpListener::from_std(listener) {
                    Ok(listener) => listener,
                    Err(e) => {
                        tracing::error!("HTTP server: cannot serve on {bound}: {e}");
                        return;
                    }
                };
                tokio::select! {
                    () = accept_loop(listener, app, options) => {}
                    _ = stopped => {}
                }
            });
        })?;
    Ok((bound, Server { stop: Some(stop) }))
}

async fn accept_loop(listener: TcpListener, app: Router, options: ServerOptions) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .keep_alive(false);
    let open = Arc::new(Semaphore::new(options.max_connections.max(1)));
    loop {
        // Taken before accepting: at the cap, clients queue in the kernel, not in memory here.
        let Ok(permit) = open.clone().acquire_owned().await else {
            return;
        };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            // The client gave up before we accepted it: nothing to wait for.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Out of file descriptors and the like: wait for some to be freed, as
                // axum::serve does, rather than spin.
                tracing::warn!("HTTP server: cannot accept a connection: {e}; retrying in 1s");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let conn =
            http.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app.clone()));
        let limit = options.request_timeout;
        tokio::spawn(async move {
            let _permit = permit;
            match tokio::time::timeout(limit, conn).await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::debug!(%peer, "HTTP connection failed: {e}"),
                Err(_) => {
                    tracing::debug!(%peer, "HTTP connection dropped: not done within {limit:?}");
                }
            }
        });
    }
}

fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    if let Some(Err(why)) = state.shards.as_ref().map(|s| s.ready()) {
        return (StatusCode::SERVICE_UNAVAILABLE, why.to_string());
    }
    if !state.readiness.guests_applied() {
        let why = match &*state.directory.first_pass().borrow() {
            FirstPass::Waiting(why) => format!("guests not loaded yet: {why}"),
            FirstPass::Done => "guests loaded; their controllers are starting".to_owned(),
        };
        return (StatusCode::SERVICE_UNAVAILABLE, why);
    }
    let waiting: Vec<String> = state
        .readiness
        .controllers
        .lock()
        .iter()
        .filter(|(_, synced)| !*synced.borrow())
        .map(|(guest, _)| guest.clone())
        .collect();
    if waiting.is_empty() {
        return (StatusCode::OK, "ok".to_owned());
    }
    let mut why = format!("caches not synced for: {}", waiting.join(", "));
    for reason in state.informers.iter().flat_map(Informers::unsynced) {
        why.push('\n');
        why.push_str(&reason);
    }
    (StatusCode::SERVICE_UNAVAILABLE, why)
}

/// Runs `f` on the server runtime's blocking threads (see the module docs).
async fn off_the_probes<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, (StatusCode, &'static str)> {
    tokio::task::spawn_blocking(f).await.map_err(|_| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            "the handler failed; see the host's log",
        )
    })
}

async fn metrics_text(State(state): State<AppState>) -> axum::response::Response {
    match off_the_probes(move || state.metrics.render()).await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(failed) => failed.into_response(),
    }
}

async fn guests(State(state): State<AppState>) -> axum::response::Response {
    match off_the_probes(move || state.directory.statuses()).await {
        Ok(statuses) => axum::Json(statuses).into_response(),
        Err(failed) => failed.into_response(),
    }
}

async fn shards_report(State(state): State<AppState>) -> axum::response::Response {
    let Some(shards) = state.shards else {
        return (
            StatusCode::NOT_FOUND,
            "this host is not sharded (run --shards auto)",
        )
            .into_response();
    };
    match off_the_probes(move || shards.report()).await {
        Ok(report) => axum::Json(report).into_response(),
        Err(failed) => failed.into_response(),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    use super::*;

    const PARTIAL: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n";
    const COMPLETE: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n";

    async fn start(options: ServerOptions) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        tokio::spawn(accept_loop(listener, app, options));
        addr
    }

    async fn send(addr: SocketAddr, request: &[u8]) -> TcpStream {
        let mut client = TcpStream::connect(addr).await.unwrap();
        client.write_all(request).await.unwrap();
        client
    }

    /// What the server sent until it closed the connection, and how long that took; `None` if
    /// it was still open after `within`.
    async fn until_closed(client: &mut TcpStream, within: Duration) -> Option<(String, Duration)> {
        let started = Instant::now();
        let mut received = Vec::new();
        // A reset counts as closed too.
        let _ = tokio::time::timeout(within, client.read_to_end(&mut received))
            .await
            .ok()?;
        Some((
            String::from_utf8_lossy(&received).into_owned(),
            started.elapsed(),
        ))
    }

    #[tokio::test]
    async fn a_complete_request_is_answered_and_the_connection_closed() {
        let addr = start(ServerOptions::default()).await;
        let mut client = send(addr, COMPLETE).await;
        let (response, _) = until_closed(&mut client, Duration::from_secs(5))
            .await
            .expect("closed after one response");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
        assert!(response.ends_with("ok"), "{response}");
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_disconnected() {
        let addr = start(ServerOptions {
            header_read_timeout: Duration::from_millis(300),
            ..ServerOptions::default()
        })
        .await;
        let mut client = send(addr, PARTIAL).await;
        let (response, after) = until_closed(&mut client, Duration::from_secs(5))
            .await
            .expect("disconnected by the header read timeout");
        assert!(
            after >= Duration::from_millis(250),
            "closed after {after:?}"
        );
        assert!(!response.contains("200 OK"), "{response}");
    }

    #[tokio::test]
    async fn the_request_timeout_bounds_the_whole_exchange() {
        let addr = start(ServerOptions {
            header_read_timeout: Duration::from_mins(1),
            request_timeout: Duration::from_millis(300),
            ..ServerOptions::default()
        })
        .await;
        let mut client = send(addr, PARTIAL).await;
        let (_, after) = until_closed(&mut client, Duration::from_secs(5))
            .await
            .expect("disconnected by the request timeout");
        assert!(
            after >= Duration::from_millis(250),
            "closed after {after:?}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn probes_are_answered_while_every_worker_of_the_host_is_busy() {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        let app = Router::new().route("/healthz", get(|| async { "ok" }));
        let (addr, _server) = serve_router(
            bind("127.0.0.1:0".parse().unwrap()).unwrap(),
            app,
            ServerOptions::default(),
        )
        .unwrap();
        // Both workers taken, as by guests in long host calls: nothing else runs on them.
        let busy = Arc::new(AtomicBool::new(true));
        for _ in 0..2 {
            let busy = busy.clone();
            tokio::spawn(async move {
                while busy.load(Ordering::Relaxed) {
                    std::hint::spin_loop();
                }
            });
        }
        let answer = std::thread::spawn(move || {
            let mut client = std::net::TcpStream::connect(addr).unwrap();
            client
                .set_read_timeout(Some(Duration::from_secs(10)))
                .unwrap();
            client.write_all(COMPLETE).unwrap();
            let mut answer = String::new();
            let _ = client.read_to_string(&mut answer);
            answer
        })
        .join();
        busy.store(false, Ordering::Relaxed);
        let answer = answer.unwrap();
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer:?}");
    }

    #[tokio::test]
    async fn a_client_beyond_the_connection_cap_waits_for_a_free_one() {
        let addr = start(ServerOptions {
            max_connections: 1,
            ..ServerOptions::default()
        })
        .await;
        let mut stalling = send(addr, PARTIAL).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
        let mut waiting = send(addr, COMPLETE).await;
        assert!(
            until_closed(&mut waiting, Duration::from_millis(500))
                .await
                .is_none(),
            "served beyond the cap"
        );
        stalling.shutdown().await.unwrap();
        drop(stalling);
        let (response, _) = until_closed(&mut waiting, Duration::from_secs(5))
            .await
            .expect("served once the other connection closed");
        assert!(response.starts_with("HTTP/1.1 200 OK"), "{response}");
    }
}
