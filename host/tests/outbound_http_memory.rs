//! What a guest can make the host hold through `wasi:http`, read from `/proc` (the process's
//! peak resident set), and whether a slow outside API holds back its Kubernetes writes. The
//! fetcher test guest's `spec.hoard` keeps raw resources (header maps, unsent and unfinished
//! bodies, unread responses) while 16 keys reconcile at once; a loopback server answers,
//! streams or waits as each case needs.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::{Grant, KeyRef, ValueFrom};
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::http::LiveOutbound;
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{LoadedGuest, Outcome, Request, Runtime, RuntimeOptions};
use serde_json::{Value, json};

/// The guest's memory cap in these cases (`limits.memoryMiB`); its HTTP memory is half.
const CAP_MIB: u64 = 32;
/// What the host may grow by beyond the guest's cap while 16 instances hoard: the instances'
/// own resource tables (up to 1,024 small WASI entries each), allocator slack, the threads.
const SLACK_MIB: u64 = 24;
const KEYS: usize = 16;

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

/// A server on 127.0.0.1: `/api/hold` answers once the gate opens, `/api/big` sends 4 MiB,
/// anything else `ok`. Counts the requests that arrived.
struct Server {
    addr: SocketAddr,
    arrived: Arc<AtomicU64>,
    gate: Arc<tokio::sync::Semaphore>,
}

impl Server {
    fn start() -> Self {
        let arrived = Arc::new(AtomicU64::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (count, opened) = (arrived.clone(), gate.clone());
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                loop {
                    let (stream, _) = listener.accept().await.unwrap();
                    let (count, opened) = (count.clone(), opened.clone());
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |req| {
                            let (count, opened) = (count.clone(), opened.clone());
                            async move { Ok::<_, Infallible>(route(&req, &count, &opened).await) }
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                            .await;
                    });
                }
            });
        });
        Server {
            addr,
            arrived,
            gate,
        }
    }

    fn open(&self) {
        self.gate.add_permits(1 << 20);
    }
}

async fn route(
    req: &hyper::Request<hyper::body::Incoming>,
    arrived: &AtomicU64,
    gate: &tokio::sync::Semaphore,
) -> hyper::Response<Body> {
    arrived.fetch_add(1, Ordering::SeqCst);
    match req.uri().path() {
        "/api/hold" => {
            let _ = gate.acquire().await;
            hyper::Response::new(Full::new(Bytes::from_static(b"late")).boxed())
        }
        "/api/big" => hyper::Response::new(Full::new(Bytes::from(vec![b'x'; 4 << 20])).boxed()),
        _ => hyper::Response::new(Full::new(Bytes::from_static(b"ok")).boxed()),
    }
}

struct Case {
    runtime: Runtime,
    guest: LoadedGuest,
    cache: Arc<MemoryCache>,
    context: Arc<GuestContext>,
}

fn case(grant: &str) -> Case {
    let grant: Grant = serde_yaml::from_str(grant).unwrap();
    let runtime = Runtime::new(&RuntimeOptions {
        cache_dir: Some(common::cache_dir()),
        ..RuntimeOptions::default()
    })
    .unwrap();
    let path = common::guest("fetcher");
    let guest = runtime.load(&std::fs::read(&path).unwrap(), &path).unwrap();
    let cache = Arc::new(MemoryCache::default());
    let key = ValueFrom::SecretKeyRef(KeyRef {
        name: "api".into(),
        key: "key".into(),
    });
    let outbound = LiveOutbound::with_values(BTreeMap::from([(key, b"k3y-value".to_vec())]));
    let providers = offline::providers(cache.clone(), None).with_http(Arc::new(outbound));
    let context = Arc::new(GuestContext::new("fetcher", grant, providers));
    Case {
        runtime,
        guest,
        cache,
        context,
    }
}

fn granted(addr: SocketAddr, deadline: &str) -> String {
    format!(
        "read: [test.reconciler.dev/v1/Widget]\nwrite: [test.reconciler.dev/v1/Widget/status]\nhttp:\n- prefix: http://{addr}/api\n  methods: [GET, POST]\nlimits: {{memoryMiB: {CAP_MIB}, deadline: {deadline}}}\n"
    )
}

/// Reconciles Widget `name` whose spec is `spec`: the outcome and the status written.
fn reconcile(case: &Case, name: &str, spec: &Value) -> (Outcome, Value) {
    let object = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "ns", "generation": 1, "uid": format!("uid-{name}"), "resourceVersion": "10"},
        "spec": spec,
    });
    case.cache.put(object.clone());
    let object_ref = ObjectRef::of_object(&object).unwrap();
    let request = Request {
        object_ref: object_ref.clone(),
        object: Some(object.to_string()),
        deleting: false,
        attempt: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = CallContext::new(
        case.context.clone(),
        format!("ns/{name}"),
        Some(rt.handle().clone()),
    );
    let run = case.runtime.reconcile(&case.guest, call, request);
    let status = case
        .cache
        .get(&object_ref)
        .and_then(|o| o.get("status").cloned())
        .unwrap_or(Value::Null);
    (run.outcome, status)
}

/// This process's resident set and its peak since the last reset, in KiB, from /proc.
fn memory_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

/// Resets the peak resident set (`VmHWM`) to the current one (Linux's `clear_refs`, value 5).
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// Runs `spec` on 16 keys at once; the outcomes and how far the peak resident set rose above
/// the resident set before, in MiB.
fn hoard_at_once(case: &Case, spec: &Value) -> (Vec<(Outcome, Value)>, u64) {
    reset_peak();
    let before = memory_kib("VmRSS:");
    let outcomes = std::thread::scope(|s| {
        let runs: Vec<_> = (0..KEYS)
            .map(|i| s.spawn(move || reconcile(case, &format!("w{i}"), spec)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let grown = memory_kib("VmHWM:").saturating_sub(before) >> 10;
    (outcomes, grown)
}

/// The cases read the whole process's peak resident set: one at a time.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

#[test]
fn whatever_a_guest_keeps_of_wasi_http_the_host_grows_by_at_most_its_cap() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let server = Server::start();
    let addr = server.addr;
    let case = case(&granted(addr, "10s"));
    // Warm up: the compiled guest, 16 instances, the threads, with the same spec shape.
    let (warm, baseline) = hoard_at_once(
        &case,
        &json!({"hoard": {"kind": "fields", "count": 1, "bytes": 4096}}),
    );
    assert!(
        warm.iter().all(|(o, _)| matches!(o, Outcome::Ok { .. })),
        "{warm:?}"
    );
    let limit = CAP_MIB + SLACK_MIB;
    let url_hold = format!("http://{addr}/api/hold");
    let url_big = format!("http://{addr}/api/big");
    let mut figures = Vec::new();
    for (what, spec) in [
        (
            "header maps",
            json!({"kind": "fields", "count": 2000, "bytes": 60 << 10}),
        ),
        (
            "unsent bodies",
            json!({"kind": "unsent", "count": 2000, "bytes": 2 << 20}),
        ),
        (
            "unfinished bodies",
            json!({"kind": "unfinished", "count": 2000, "bytes": 2 << 20, "url": url_hold}),
        ),
        (
            "unread responses",
            json!({"kind": "unread", "count": 200, "url": url_big}),
        ),
    ] {
        let (outcomes, grown) = hoard_at_once(&case, &json!({ "hoard": spec }));
        eprintln!(
            "{what}: the host's peak resident set grew by {grown} MiB (warm-up {baseline} MiB)"
        );
        figures.push(format!("{what} +{grown} MiB"));
        assert!(
            grown <= limit,
            "{what}: the host grew by {grown} MiB, more than the cap ({CAP_MIB} MiB) and {SLACK_MIB} MiB"
        );
        // What stopped the guest was the host's refusal (or its deadline while waiting for
        // memory its other keys hold), never the host holding all it asked.
        for (outcome, status) in &outcomes {
            let stopped = match outcome {
                // The ledger's refusal, or the resource table's bound.
                Outcome::Trap(text) => {
                    text.contains("wasi:http resources")
                        || text.contains("resource table has no free keys")
                }
                Outcome::Deadline(_) => true,
                Outcome::Ok { .. } => {
                    status["hoard"]["error"].is_string()
                        && status["hoard"]["made"].as_u64() < spec["count"].as_u64()
                }
                _ => false,
            };
            assert!(stopped, "{what}: {outcome:?} {}", status["hoard"]);
        }
    }
    eprintln!("{}", figures.join(", "));
    server.open();
}

#[test]
fn a_guest_without_an_http_rule_holds_no_more_than_a_constant() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let case = case(
        "read: [test.reconciler.dev/v1/Widget]\nwrite: [test.reconciler.dev/v1/Widget/status]\nlimits: {memoryMiB: 32}\n",
    );
    for spec in [
        json!({"kind": "fields", "count": 100, "bytes": 8 << 10}),
        json!({"kind": "unsent", "count": 100, "bytes": 1 << 20}),
    ] {
        let (outcome, status) = reconcile(&case, "w", &json!({ "hoard": spec }));
        let Outcome::Trap(text) = &outcome else {
            panic!("{spec}: {outcome:?} {status}");
        };
        assert!(text.contains("no http: rule"), "{text}");
        assert!(text.contains("64 KiB"), "{text}");
    }
    // A request is still refused in words, within the constant.
    let (outcome, status) = reconcile(
        &case,
        "w",
        &json!({"http": [{"method": "POST", "url": "http://127.0.0.1:1/api", "body": "x"}]}),
    );
    assert!(matches!(outcome, Outcome::Ok { .. }), "{outcome:?}");
    let error = status["http"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("allows no HTTP"), "{status}");
}

#[test]
fn a_slow_outside_api_never_holds_back_the_guests_status_writes() {
    let _alone = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let server = Server::start();
    let case = case(&granted(server.addr, "20s"));
    let slow = json!({"http": [{"url": format!("http://{}/api/hold", server.addr)}]});
    let waited = Mutex::new(None);
    std::thread::scope(|s| {
        let pending: Vec<_> = (0..20)
            .map(|i| {
                let (case, slow) = (&case, &slow);
                s.spawn(move || reconcile(case, &format!("slow{i}"), slow))
            })
            .collect();
        // The slow requests are at the server (those the guest's HTTP memory lets through at
        // once) or waiting for that memory.
        let started = Instant::now();
        while server.arrived.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "nothing arrived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_millis(300));
        // Another key's reconcile writes its status while they all wait.
        let started = Instant::now();
        let (outcome, status) = reconcile(&case, "quick", &json!({}));
        *waited.lock().unwrap() = Some(started.elapsed());
        let still_waiting = pending.iter().filter(|p| !p.is_finished()).count();
        server.open();
        assert!(matches!(outcome, Outcome::Ok { .. }), "{outcome:?}");
        assert_eq!(status["observedGeneration"], 1, "{status}");
        let done: Vec<_> = pending.into_iter().map(|p| p.join().unwrap()).collect();
        assert_eq!(
            still_waiting, 20,
            "the status write finished while the slow requests were all still pending: {done:?}"
        );
        for (outcome, status) in done {
            assert!(matches!(outcome, Outcome::Ok { .. }), "{outcome:?}");
            assert_eq!(status["http"][0]["body"], "late", "{status}");
        }
    });
    eprintln!(
        "status write beside 20 pending requests: {:?}",
        waited.lock().unwrap().unwrap()
    );
}
