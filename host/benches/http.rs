//! The cost of one granted outbound request: the `fetcher` guest sending `GET` requests through
//! `wasi:http` (grant check, credentials added, address check, the response masked, recorded
//! in metrics, handed to the guest whole) against the same request from native Rust (hyper, one
//! connection per request, as the host's provider opens them), to the same server on loopback,
//! interleaved in one run.
//!
//! `cargo bench -p reconciler-host --bench http` (or `./dev bench http`). Prints figures;
//! asserts nothing. `BENCH_REQUESTS` (default 200) requests per round, `BENCH_ROUNDS` (default
//! 15) rounds; per round the guest's cost per request is (one reconcile sending N requests − one
//! sending none) / N, so the reconcile's own cost is left out.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Full};
use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::{Grant, KeyRef, ValueFrom};
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::http::LiveOutbound;
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{LoadedGuest, Outcome, Request, Runtime, RuntimeOptions};
use reconciler_host_tests::repo_root;
use serde_json::json;

/// A JSON answer of about 1 KiB, as a REST API's small GET returns.
fn answer() -> Bytes {
    let records: Vec<String> = (0..16).map(|i| format!("192.0.2.{i}")).collect();
    Bytes::from(json!({"name": "www.example.test.", "type": "A", "ttl": 300, "records": records, "comments": []}).to_string())
}

fn server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            let body = answer();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let body = body.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |_req| {
                        let body = body.clone();
                        async move { Ok::<_, Infallible>(hyper::Response::new(Full::new(body))) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    addr
}

/// One native request on a fresh connection, its body read whole.
async fn native(addr: SocketAddr) -> usize {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = stream.set_nodelay(true);
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    let driver = tokio::spawn(connection);
    let request = hyper::Request::builder()
        .uri("/api/v1/zones/example.test.")
        .header("host", addr.to_string())
        .header("x-api-key", "s3cr3t-api-key-0123456789")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let response = sender.send_request(request).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    driver.abort();
    body.len()
}

struct Guest {
    runtime: Runtime,
    loaded: LoadedGuest,
    cache: Arc<MemoryCache>,
    context: Arc<GuestContext>,
}

fn guest(addr: SocketAddr) -> Guest {
    let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
    let path = repo_root().join("target/guests/fetcher.wasm");
    let bytes = std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; build the guests first (./dev build)",
            path.display()
        )
    });
    let loaded = runtime.load(&bytes, &path).unwrap();
    let grant: Grant = serde_yaml::from_str(&format!(
        "read: [test.reconciler.dev/v1/Widget]\nwrite: [test.reconciler.dev/v1/Widget/status]\nhttp:\n- prefix: http://{addr}/api\n  headers:\n    X-API-Key: {{secretKeyRef: {{name: api, key: key}}}}\nlimits: {{deadline: 120s, httpPerSecond: 1000000, httpBurst: 1000000}}\n"
    ))
    .unwrap();
    let key = ValueFrom::SecretKeyRef(KeyRef {
        name: "api".into(),
        key: "key".into(),
    });
    let outbound = LiveOutbound::with_values(BTreeMap::from([(
        key,
        b"s3cr3t-api-key-0123456789".to_vec(),
    )]));
    let cache = Arc::new(MemoryCache::default());
    let providers = offline::providers(cache.clone(), None).with_http(Arc::new(outbound));
    let context = Arc::new(GuestContext::new("fetcher", grant, providers));
    Guest {
        runtime,
        loaded,
        cache,
        context,
    }
}

/// One reconcile sending `n` GETs; its wall time.
fn reconcile(g: &Guest, rt: &tokio::runtime::Runtime, addr: SocketAddr, n: u32) -> Duration {
    let http = if n == 0 {
        json!([])
    } else {
        json!([{"url": format!("http://{addr}/api/v1/zones/example.test.")}])
    };
    let object = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "bench", "namespace": "default", "generation": 1, "uid": "u", "resourceVersion": "1"},
        "spec": {"http": http, "httpRepeat": n.max(1)},
    });
    g.cache.put(object.clone());
    let request = Request {
        object_ref: ObjectRef::of_object(&object).unwrap(),
        object: Some(object.to_string()),
        deleting: false,
        attempt: 0,
    };
    let call = CallContext::new(
        g.context.clone(),
        "default/bench".into(),
        Some(rt.handle().clone()),
    );
    let started = Instant::now();
    let run = g.runtime.reconcile(&g.loaded, call, request);
    let took = started.elapsed();
    assert_eq!(
        run.outcome,
        Outcome::Ok {
            requeue_after_ms: None
        },
        "the bench reconcile failed"
    );
    took
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

fn main() {
    let requests: u32 = std::env::var("BENCH_REQUESTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(15);
    let addr = server();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let g = guest(addr);
    // Warm up both paths (compile cache, pools, the server's accept loop).
    reconcile(&g, &rt, addr, 20);
    rt.block_on(async {
        for _ in 0..20 {
            native(addr).await;
        }
    });
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let started = Instant::now();
        rt.block_on(async {
            for _ in 0..requests {
                native(addr).await;
            }
        });
        theirs.push(started.elapsed().as_secs_f64() * 1e6 / f64::from(requests));
        let empty = reconcile(&g, &rt, addr, 0);
        let full = reconcile(&g, &rt, addr, requests);
        ours.push(full.saturating_sub(empty).as_secs_f64() * 1e6 / f64::from(requests));
    }
    let (ours, theirs) = (median(ours), median(theirs));
    println!(
        "outbound HTTP: one GET of a ~1 KiB JSON answer on a fresh loopback connection, {requests} per round, {rounds} rounds (medians)"
    );
    println!("  native Rust (hyper)          {theirs:8.1} µs per request");
    println!(
        "  guest through wasi:http      {ours:8.1} µs per request (grant, credentials, address check, masking, metrics)"
    );
    println!("  ratio                        {:8.2}x", ours / theirs);
}
