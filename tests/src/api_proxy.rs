//! An HTTP reverse proxy in front of kube-apiserver that can shed load the way a 1.37 API server
//! does while its watch cache initialises: on command it answers the lists and/or watches of one
//! collection with `429 Too Many Requests`, `Retry-After: N` and the API server's own `Status`
//! body (`reason: TooManyRequests`, `details.retryAfterSeconds: N`; apiserver's
//! `pkg/storage/cacher`). Every request is logged with the time it arrived and the status it
//! got, so a test can read the spacing of a client's attempts from the proxy's side.
//!
//! The client under test talks plain HTTP to `127.0.0.1:<port>` with no credentials
//! ([`ApiProxy::kubeconfig`]); the proxy forwards each request over TLS as the control plane's
//! admin, through a `kube::Client` without kube's retry layer (so the proxy never retries on the
//! client's behalf). Response bodies stream through, so watches work; [`ApiProxy::cut_watches`]
//! ends every watch in flight, as an API server ends one at its timeout, to make a client
//! reconnect.
//!
//! Unlike [`crate::robustness::relay`] (a TCP relay: TLS passes through untouched, so it cannot
//! tell a list from a watch), this proxy sees each request.

// Hand-written rather than a crate: no proxy crate in the tree answers chosen requests with a
// status of its own; hyper's server and kube's client do the HTTP, this file only routes.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt;
use http::{HeaderValue, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, BodyStream, Full, StreamBody, combinators::UnsyncBoxBody};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use kube::client::Body as KubeBody;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};
use tokio::time::Instant;

use crate::control_plane::ControlPlane;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type ProxyBody = UnsyncBoxBody<Bytes, BoxError>;

/// Which requests of a collection [`Shed`] refuses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Requests {
    /// GETs without `watch=true` (lists, each page of a paged one).
    Lists,
    /// GETs with `watch=true` (watches, streaming lists included).
    Watches,
    Both,
}

/// A shedding order: the collection at `path` (e.g. `/apis/g/v1/namespaces/ns/widgets`; not its
/// objects, not `/status`) is answered 429 with `Retry-After: retry_after` seconds.
#[derive(Clone, Debug)]
pub struct Shed {
    pub path: String,
    pub requests: Requests,
    pub retry_after: u64,
}

impl Shed {
    fn refuses(&self, request: &Logged) -> bool {
        request.method == "GET"
            && request.path == self.path
            && match self.requests {
                Requests::Lists => !request.watch,
                Requests::Watches => request.watch,
                Requests::Both => true,
            }
    }
}

/// One request as the proxy saw it.
#[derive(Clone, Debug)]
pub struct Logged {
    /// When it arrived.
    pub at: Instant,
    pub method: String,
    pub path: String,
    /// The query string, undecoded (empty when none).
    pub query: String,
    /// `watch=true` was asked.
    pub watch: bool,
    /// What the client was answered (the API server's status, or 429 when shed; 502 when the
    /// API server could not be reached).
    pub status: u16,
    /// The proxy answered 429 itself.
    pub shed: bool,
}

impl Logged {
    /// A query parameter's value, decoded.
    pub fn param(&self, key: &str) -> Option<String> {
        form_urlencoded::parse(self.query.as_bytes())
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.into_owned())
    }

    /// A watch that asks for the collection's current state first (a streaming list).
    pub fn streaming_list(&self) -> bool {
        self.watch && self.param("sendInitialEvents").as_deref() == Some("true")
    }
}

#[derive(Default)]
struct State {
    shed: Option<Shed>,
    log: Vec<Logged>,
}

/// The proxy; dropping it stops the listener and every connection.
pub struct ApiProxy {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    cuts: watch::Sender<u64>,
    accept: JoinHandle<()>,
    dir: tempfile::TempDir,
}

impl ApiProxy {
    /// Listens on `127.0.0.1:0` and forwards to `plane`'s kube-apiserver as its admin.
    pub async fn start(plane: &ControlPlane) -> Result<ApiProxy> {
        let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .context("the control plane's kubeconfig")?;
        // The client under test does its own retrying; the proxy sends each request once.
        config.default_retry = false;
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let dir = tempfile::Builder::new().prefix("api-proxy-").tempdir()?;
        std::fs::write(dir.path().join("kubeconfig"), kubeconfig_text(addr))?;
        let state = Arc::new(Mutex::new(State::default()));
        let (cuts, _) = watch::channel(0);
        // The upstream client is made inside the accept task: its buffer task lives on the
        // runtime that serves the connections.
        let accept = tokio::spawn(accept_loop(
            listener,
            config,
            Arc::clone(&state),
            cuts.clone(),
        ));
        Ok(ApiProxy {
            addr,
            state,
            cuts,
            accept,
            dir,
        })
    }

    /// A kubeconfig that reaches the API server through this proxy (plain HTTP, anonymous to
    /// the proxy, admin beyond it).
    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("kubeconfig")
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Starts refusing what `shed` names (replacing any earlier order).
    pub fn shed(&self, shed: Shed) {
        self.lock().shed = Some(shed);
    }

    /// Stops refusing; returns when that took effect.
    pub fn stop_shedding(&self) -> Instant {
        self.lock().shed = None;
        Instant::now()
    }

    /// Ends every watch response in flight (cleanly, as at a watch's timeout); the client
    /// sees its watch end and reconnects. Later watches are not affected.
    pub fn cut_watches(&self) {
        self.cuts.send_modify(|n| *n += 1);
    }

    /// Every request so far, in arrival order.
    pub fn log(&self) -> Vec<Logged> {
        self.lock().log.clone()
    }

    /// The requests for the collection at `path` (lists and watches), in arrival order.
    pub fn requests_to(&self, path: &str) -> Vec<Logged> {
        self.lock()
            .log
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ApiProxy {
    fn drop(&mut self) {
        // The accept task owns the connections' `JoinSet`: aborting it closes them all.
        self.accept.abort();
    }
}

fn kubeconfig_text(addr: SocketAddr) -> String {
    format!(
        "apiVersion: v1\nkind: Config\n\
         clusters:\n- name: proxy\n  cluster:\n    server: http://{addr}\n\
         users:\n- name: anonymous\n  user: {{}}\n\
         contexts:\n- name: proxy\n  context:\n    cluster: proxy\n    user: anonymous\n\
         current-context: proxy\n"
    )
}

async fn accept_loop(
    listener: TcpListener,
    config: kube::Config,
    state: Arc<Mutex<State>>,
    cuts: watch::Sender<u64>,
) {
    let upstream = match kube::Client::try_from(config) {
        Ok(client) => client,
        Err(e) => {
            eprintln!("api proxy: no client for the API server: {e}");
            return;
        }
    };
    let mut connections = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let (upstream, state, cuts) = (upstream.clone(), Arc::clone(&state), cuts.clone());
        connections.spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                serve(
                    request,
                    upstream.clone(),
                    Arc::clone(&state),
                    cuts.subscribe(),
                )
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn serve(
    request: Request<Incoming>,
    upstream: kube::Client,
    state: Arc<Mutex<State>>,
    cuts: watch::Receiver<u64>,
) -> Result<Response<ProxyBody>, Infallible> {
    let mut logged = Logged {
        at: Instant::now(),
        method: request.method().to_string(),
        path: request.uri().path().to_owned(),
        query: request.uri().query().unwrap_or_default().to_owned(),
        watch: false,
        status: 0,
        shed: false,
    };
    logged.watch = logged
        .param("watch")
        .is_some_and(|w| w == "true" || w == "1");
    let shed = {
        let state = state.lock().unwrap_or_else(PoisonError::into_inner);
        state.shed.clone().filter(|s| s.refuses(&logged))
    };
    let response = match shed {
        Some(shed) => {
            logged.shed = true;
            too_many_requests(shed.retry_after)
        }
        None => forward(request, &upstream, logged.watch, cuts).await,
    };
    logged.status = response.status().as_u16();
    state
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .log
        .push(logged);
    Ok(response)
}

/// What a 1.37 API server answers while a resource's watch cache initialises
/// (`errors.NewTooManyRequests`, its `Retry-After` header set from the details).
fn too_many_requests(retry_after: u64) -> Response<ProxyBody> {
    let status = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {},
        "status": "Failure", "message": "storage is (re)initializing",
        "reason": "TooManyRequests", "details": {"retryAfterSeconds": retry_after}, "code": 429,
    });
    let mut response = Response::new(full(status.to_string()));
    *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
    let headers = response.headers_mut();
    headers.insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

fn full(text: String) -> ProxyBody {
    Full::new(Bytes::from(text))
        .map_err(|never| match never {})
        .boxed_unsync()
}

/// Sends `request` on to the API server and streams its answer back; a watch's answer ends
/// when the proxy is told to cut watches.
async fn forward(
    request: Request<Incoming>,
    upstream: &kube::Client,
    watch: bool,
    mut cuts: watch::Receiver<u64>,
) -> Response<ProxyBody> {
    let (mut parts, body) = request.into_parts();
    let body = match body.collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) => return bad_gateway(&format!("reading the request: {e}")),
    };
    // Hop-by-hop and addressing headers are the proxy's own; kube sets its own Host.
    for name in [
        header::HOST,
        header::CONNECTION,
        header::TRANSFER_ENCODING,
        header::UPGRADE,
        header::TE,
    ] {
        parts.headers.remove(name);
    }
    let path = parts
        .uri
        .path_and_query()
        .map_or("/", http::uri::PathAndQuery::as_str);
    parts.uri = match path.parse() {
        Ok(uri) => uri,
        Err(e) => return bad_gateway(&format!("the request's path: {e}")),
    };
    let response = match upstream
        .send(Request::from_parts(parts, KubeBody::from(body)))
        .await
    {
        Ok(response) => response,
        Err(e) => return bad_gateway(&format!("the API server: {e}")),
    };
    let (parts, body) = response.into_parts();
    let body: ProxyBody = if watch {
        cuts.mark_unchanged();
        let cut = Box::pin(async move {
            let _ = cuts.changed().await;
        });
        let frames = BodyStream::new(body)
            .take_until(cut)
            .map(|frame| frame.map_err(BoxError::from));
        StreamBody::new(frames).boxed_unsync()
    } else {
        body.map_err(BoxError::from).boxed_unsync()
    };
    Response::from_parts(parts, body)
}

fn bad_gateway(why: &str) -> Response<ProxyBody> {
    let mut response = Response::new(full(format!("api proxy: {why}")));
    *response.status_mut() = StatusCode::BAD_GATEWAY;
    response
}

/// The gaps between consecutive requests, in order.
pub fn gaps(requests: &[Logged]) -> Vec<Duration> {
    requests.windows(2).map(|w| w[1].at - w[0].at).collect()
}
