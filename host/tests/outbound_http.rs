//! Outbound HTTP of a guest against the host's policy, with the real wasi:http path: the
//! fetcher test guest (a Widget's `spec.http`) in the runtime, the live provider, and a real HTTP server on
//! loopback that counts what reaches it. Every hostile case is read from the server's side (what
//! arrived) and from the guest's side (what it was given), not from the host's logs.

mod common;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::{Grant, KeyRef, ValueFrom};
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::http::LiveOutbound;
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{LoadedGuest, Outcome, Request, Runtime, RuntimeOptions};
use serde_json::{Value, json};

const KEY: &str = "s3cr3t-api-key-0123456789";

/// What reached the server.
#[derive(Default)]
struct Seen {
    requests: AtomicU64,
    /// `METHOD path x-api-key` of each request.
    lines: Mutex<Vec<String>>,
    /// Bytes of the endless body written before the host hung up.
    streamed: AtomicU64,
}

type Body = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(text: impl Into<Bytes>) -> Body {
    Full::new(text.into()).boxed()
}

/// A server on 127.0.0.1 with the routes the cases need, on a runtime of its own.
fn server() -> (SocketAddr, Arc<Seen>) {
    let seen = Arc::new(Seen::default());
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    let served = seen.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let seen = served.clone();
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| {
                        let seen = seen.clone();
                        async move { Ok::<_, Infallible>(route(&req, seen, addr)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    (addr, seen)
}

fn route(
    req: &hyper::Request<hyper::body::Incoming>,
    seen: Arc<Seen>,
    addr: SocketAddr,
) -> hyper::Response<Body> {
    seen.requests.fetch_add(1, Ordering::SeqCst);
    let key = req
        .headers()
        .get("x-api-key")
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .unwrap_or_default();
    let path = req.uri().path().to_owned();
    seen.lines
        .lock()
        .unwrap()
        .push(format!("{} {path} {key}", req.method()));
    match path.as_str() {
        // Reflects the request's headers, the key among them, in the body and a header.
        "/api/echo" => hyper::Response::builder()
            .header("x-echo-key", key.as_str())
            .body(full(format!(
                "{{\"key\":\"{key}\",\"b64\":\"{}\"}}",
                base64_of(&key)
            )))
            .unwrap(),
        "/api/ok" => hyper::Response::new(full("ok")),
        "/api/redirect" => hyper::Response::builder()
            .status(302)
            .header("location", format!("http://{addr}/outside"))
            .body(full(""))
            .unwrap(),
        // Endless: 64 KiB chunks for as long as the client reads.
        "/api/big" => {
            let chunk = Bytes::from(vec![b'x'; 64 << 10]);
            let stream = futures::stream::unfold(seen, move |seen| {
                let chunk = chunk.clone();
                async move {
                    seen.streamed
                        .fetch_add(chunk.len() as u64, Ordering::SeqCst);
                    Some((Ok::<_, Infallible>(Frame::data(chunk)), seen))
                }
            });
            hyper::Response::new(StreamBody::new(stream).boxed())
        }
        // One byte every 200 ms, for ever.
        "/api/trickle" => {
            let stream = futures::stream::unfold((), |()| async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Some((
                    Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"."))),
                    (),
                ))
            });
            hyper::Response::new(StreamBody::new(stream).boxed())
        }
        "/api/basic-echo" | "/api/store" | "/public/read" | "/api/header-name" | "/api/gzip" => {
            reflecting(req, &seen, addr, &path, &key)
        }
        _ => hyper::Response::builder()
            .status(404)
            .body(full("not here"))
            .unwrap(),
    }
}

/// Routes that hand back the key the host added, in the forms the masking must recognise.
fn reflecting(
    req: &hyper::Request<hyper::body::Incoming>,
    seen: &Seen,
    addr: SocketAddr,
    path: &str,
    key: &str,
) -> hyper::Response<Body> {
    match path {
        // The key in the shapes a server hands back: a Basic credential, a JWT claim, a
        // line-wrapped base64 dump of the request, hex, and a URL with every byte escaped.
        "/api/basic-echo" => {
            let dump = format!("GET {path} HTTP/1.1\r\nhost: {addr}\r\nx-api-key: {key}\r\n\r\n");
            let dump: Vec<String> = base64_of(&dump)
                .as_bytes()
                .chunks(76)
                .map(|line| String::from_utf8_lossy(line).into_owned())
                .collect();
            let claims = base64_url_of(&format!(r#"{{"sub":"ws","key":"{key}"}}"#));
            let body = json!({
                "basic": format!("Basic {}", base64_of(&format!("user:{key}"))),
                "jwt": format!("eyJhbGciOiJub25lIn0.{claims}."),
                "dump": dump.join("\r\n"),
                "hex": hex_of(key).to_uppercase(),
                "url": format!("http://{addr}/?k={}", percent_of(key)),
            });
            hyper::Response::new(full(body.to_string()))
        }
        // Keeps nothing itself: `/public/read` finds the key in what reached the server.
        "/api/store" => hyper::Response::new(full("stored")),
        // Hands back the key the last `/api/store` received, in the body, in a header value and
        // as a header name, and says which encoding the request accepted.
        "/public/read" => {
            let stored = seen
                .lines
                .lock()
                .unwrap()
                .iter()
                .rev()
                .find_map(|line| line.strip_prefix("POST /api/store ").map(str::to_owned))
                .unwrap_or_default();
            let accepted = req
                .headers()
                .get("accept-encoding")
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .unwrap_or_default();
            hyper::Response::builder()
                .header("x-stored", stored.as_str())
                .header(format!("x-{stored}"), "1")
                .body(full(
                    json!({
                        "stored": stored,
                        "basic": base64_of(&format!("user:{stored}")),
                        "hex": hex_of(&stored),
                        "accept-encoding": accepted,
                    })
                    .to_string(),
                ))
                .unwrap()
        }
        // The key as the names of response headers, as sent and base64url-encoded.
        "/api/header-name" => hyper::Response::builder()
            .header(key, "1")
            .header(format!("x-{key}-echo"), "2")
            .header(format!("x-{}", base64_url_of(&format!("u:{key}"))), "3")
            .body(full("named"))
            .unwrap(),
        // A server that compresses although asked for `identity` (these bytes stand for a
        // gzip stream the host cannot scan).
        "/api/gzip" => hyper::Response::builder()
            .header("content-encoding", "gzip")
            .body(full(format!("\x1f\u{8b}{key}")))
            .unwrap(),
        _ => unreachable!("{path} is not a reflecting route"),
    }
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

fn base64_url_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(text)
}

fn hex_of(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// `text` with every byte percent-encoded.
fn percent_of(text: &str) -> String {
    use std::fmt::Write as _;
    text.bytes().fold(String::new(), |mut out, b| {
        let _ = write!(out, "%{b:02X}");
        out
    })
}

fn key_ref() -> ValueFrom {
    ValueFrom::SecretKeyRef(KeyRef {
        name: "api".into(),
        key: "key".into(),
    })
}

/// The grant of every case: GET and POST under `/api` of the server, the key added by the host.
fn grant(addr: SocketAddr, extra: &str) -> Grant {
    serde_yaml::from_str(&format!(
        "read: [test.reconciler.dev/v1/Widget]\nwrite: [test.reconciler.dev/v1/Widget/status]\nhttp:\n- prefix: http://{addr}/api\n  methods: [GET, POST]\n  headers:\n    X-API-Key: {{secretKeyRef: {{name: api, key: key}}}}\n{extra}"
    ))
    .unwrap()
}

struct Case {
    runtime: Runtime,
    guest: LoadedGuest,
    cache: Arc<MemoryCache>,
    context: Arc<GuestContext>,
}

fn case(grant: Grant) -> Case {
    let runtime = Runtime::new(&RuntimeOptions {
        cache_dir: Some(common::cache_dir()),
        ..RuntimeOptions::default()
    })
    .unwrap();
    let path = common::guest("fetcher");
    let guest = runtime.load(&std::fs::read(&path).unwrap(), &path).unwrap();
    let cache = Arc::new(MemoryCache::default());
    let outbound =
        LiveOutbound::with_values(BTreeMap::from([(key_ref(), KEY.as_bytes().to_vec())]));
    let providers = offline::providers(cache.clone(), None).with_http(Arc::new(outbound));
    let context = Arc::new(GuestContext::new("fetcher", grant, providers));
    Case {
        runtime,
        guest,
        cache,
        context,
    }
}

/// Reconciles a Widget whose spec is `spec`; the outcome, the status written, every call.
fn reconcile(case: &Case, spec: &Value) -> (Outcome, Value, String) {
    let object = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "ns", "generation": 1, "uid": "uid-1", "resourceVersion": "10"},
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
        "ns/w".into(),
        Some(rt.handle().clone()),
    )
    .recording();
    let run = case.runtime.reconcile(&case.guest, call, request);
    let status = case
        .cache
        .get(&object_ref)
        .and_then(|o| o.get("status").cloned())
        .unwrap_or(Value::Null);
    let calls = serde_json::to_string(&run.calls.unwrap_or_default()).unwrap();
    let differences = format!("{:?}", run.shadow_differences);
    (run.outcome, status, calls + &differences)
}

fn ok() -> Outcome {
    Outcome::Ok {
        requeue_after_ms: None,
    }
}

#[test]
fn a_granted_request_carries_the_key_the_guest_never_sees() {
    let (addr, seen) = server();
    let case = case(grant(addr, ""));
    let (outcome, status, calls) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/echo")}, {"method": "POST", "url": format!("http://{addr}/api/ok"), "body": "hello"}]}),
    );
    assert_eq!(outcome, ok());
    // The server got the key, from the host.
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(
        lines,
        [
            format!("GET /api/echo {KEY}"),
            format!("POST /api/ok {KEY}")
        ]
    );
    // The guest got the echo with the key overwritten, as sent and base64-encoded.
    assert_eq!(status["http"][0]["status"], 200, "{status}");
    assert_eq!(status["http"][1]["body"], "ok", "{status}");
    let text = status.to_string();
    assert!(
        !text.contains(KEY) && !text.contains(&base64_of(KEY)[..20]),
        "{text}"
    );
    assert!(text.contains(&"*".repeat(KEY.len())), "{text}");
    // The record has the exchange, without the key.
    assert!(calls.contains("wasi:http/outgoing-handler"), "{calls}");
    assert!(calls.contains("/api/echo"), "{calls}");
    assert!(!calls.contains(KEY), "{calls}");
}

#[test]
fn requests_outside_the_grant_are_refused_before_anything_is_sent() {
    let (addr, seen) = server();
    let port = addr.port();
    // `localhost` is granted by name: it resolves to loopback, which only a prefix naming the
    // address literally may reach.
    let case = case(grant(
        addr,
        &format!("- prefix: http://localhost:{port}/api\n- prefix: http://{addr}/public\n"),
    ));
    let urls = [
        format!("http://{addr}/other"),
        format!("http://127.0.0.2:{port}/api/ok"),
        format!("http://localhost:{port}/api/ok"),
        format!("http://{addr}/api/../admin"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        format!("http://{addr}/api/redirect"),
    ];
    let requests: Vec<Value> = urls
        .iter()
        .map(|u| json!({"url": u}))
        .chain([json!({"method": "DELETE", "url": format!("http://{addr}/api/ok"), "body": "a body the host reads before it refuses"})])
        .chain([json!({"url": format!("http://{addr}/api/ok"), "headers": {"X-API-Key": "mine"}})])
        .collect();
    let (outcome, status, _) = reconcile(&case, &json!({ "http": requests }));
    assert_eq!(outcome, ok());
    let outcomes = status["http"].as_array().unwrap().clone();
    let error = |i: usize| outcomes[i]["error"].as_str().unwrap_or_default().to_owned();
    for (i, why) in [
        (0, "no prefix of the grant holds the URL"),
        (1, "no prefix of the grant holds the URL"),
        (
            2,
            "resolves only to addresses the host does not connect to (127.0.0.1 is a loopback address",
        ),
        (3, ".. segment"),
        (4, "no prefix of the grant holds the URL"),
    ] {
        assert!(error(i).starts_with("denied: "), "{i}: {}", outcomes[i]);
        assert!(error(i).contains(why), "{i}: {}", outcomes[i]);
        assert!(
            error(i).contains("guests.fetcher.http"),
            "{i}: {}",
            outcomes[i]
        );
    }
    // A redirect is handed to the guest, not followed: its target is checked when the guest
    // asks for it.
    assert_eq!(outcomes[5]["status"], 302, "{}", outcomes[5]);
    assert!(
        error(6).contains("do not allow the method"),
        "{}",
        outcomes[6]
    );
    assert!(
        error(7).contains("orbidden"),
        "a header the host sets may not be set by the guest: {}",
        outcomes[7]
    );
    // Only the redirect reached the server; nothing went to /outside.
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(lines, [format!("GET /api/redirect {KEY}")]);
}

/// The resident set of this process, from /proc.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap()
}

#[test]
fn an_endless_response_is_cut_at_the_cap_and_a_trickle_at_the_deadline() {
    let (addr, seen) = server();
    let case = case(grant(addr, "limits: {deadline: 1500ms}\n"));
    let before = rss_kib();
    let (outcome, status, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/big")}]}),
    );
    assert_eq!(outcome, ok());
    let error = status["http"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("ResponseBodySize"), "{status}");
    // The server wrote little more than the cap (4 MiB) plus the socket's buffers before the
    // host hung up; the process did not grow by the gigabytes on offer.
    let streamed = seen.streamed.load(Ordering::SeqCst);
    assert!(streamed < 32 << 20, "the server streamed {streamed} bytes");
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 64 << 10, "the host grew by {grown} KiB");

    let started = Instant::now();
    let (outcome, _, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/trickle")}]}),
    );
    let took = started.elapsed();
    assert!(
        matches!(outcome, Outcome::Deadline(_)),
        "a trickle holds the reconcile until its deadline, no longer: {outcome:?}"
    );
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

#[test]
fn a_flood_of_requests_is_held_to_the_guests_rate() {
    let (addr, seen) = server();
    let case = case(grant(
        addr,
        "limits: {deadline: 2s, httpPerSecond: 20, httpBurst: 10}\n",
    ));
    let started = Instant::now();
    let (outcome, _, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/ok")}], "httpRepeat": 10000}),
    );
    let took = started.elapsed();
    assert!(matches!(outcome, Outcome::Deadline(_)), "{outcome:?}");
    // A burst of 10 and 20 a second for the 2 s deadline: about 50, never the 10,000 asked.
    let reached = seen.requests.load(Ordering::SeqCst);
    assert!(
        (30..=60).contains(&reached),
        "{reached} requests reached the server in {took:?}"
    );
}

#[test]
fn shadow_mode_sends_reads_and_reports_the_rest_as_would_send() {
    let (addr, seen) = server();
    let case = case(grant(addr, "mode: shadow\n"));
    let (outcome, _, differences) = reconcile(
        &case,
        &json!({"http": [
            {"url": format!("http://{addr}/api/ok")},
            {"method": "POST", "url": format!("http://{addr}/api/ok"), "body": "create"},
        ]}),
    );
    assert_eq!(outcome, ok());
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(lines, [format!("GET /api/ok {KEY}")], "only the GET left");
    assert!(
        differences.contains(&format!("POST http://{addr}/api/ok"))
            && differences.contains("would send 6 bytes"),
        "{differences}"
    );
}

/// An HTTPS server on 127.0.0.1 whose certificate a CA of the test's own issued; the CA's PEM.
fn tls_server() -> (SocketAddr, String) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, SanType};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.subject_alt_names = vec![SanType::IpAddress("127.0.0.1".parse().unwrap())];
    let cert = params
        .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(listener).unwrap();
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let Ok(stream) = acceptor.accept(stream).await else {
                        return;
                    };
                    let service = hyper::service::service_fn(|_req| async {
                        Ok::<_, Infallible>(hyper::Response::new(full("secure")))
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                        .await;
                });
            }
        });
    });
    (addr, ca.pem())
}

#[test]
fn https_trusts_the_ca_bundle_a_rule_names_and_nothing_unknown() {
    let (addr, ca_pem) = tls_server();
    let ca_ref = ValueFrom::ConfigMapKeyRef(KeyRef {
        name: "test-ca".into(),
        key: "ca.crt".into(),
    });
    let grant = |ca: bool| -> Grant {
        serde_yaml::from_str(&format!(
            "read: [test.reconciler.dev/v1/Widget]\nwrite: [test.reconciler.dev/v1/Widget/status]\nhttp:\n- prefix: https://{addr}/api\n{}",
            if ca { "  caBundle: {configMapKeyRef: {name: test-ca, key: ca.crt}}\n" } else { "" }
        ))
        .unwrap()
    };
    let spec = json!({"http": [{"url": format!("https://{addr}/api/ok")}]});
    for (with_ca, expect_ok) in [(true, true), (false, false)] {
        let mut case = case(grant(with_ca));
        let outbound = LiveOutbound::with_values(BTreeMap::from([(
            ca_ref.clone(),
            ca_pem.as_bytes().to_vec(),
        )]));
        let providers = offline::providers(case.cache.clone(), None).with_http(Arc::new(outbound));
        case.context = Arc::new(GuestContext::new("fetcher", grant(with_ca), providers));
        let (outcome, status, _) = reconcile(&case, &spec);
        assert_eq!(outcome, ok());
        let first = &status["http"][0];
        if expect_ok {
            assert_eq!(first["status"], 200, "{status}");
            assert_eq!(first["body"], "secure", "{status}");
        } else {
            let error = first["error"].as_str().unwrap_or_default();
            assert!(
                error.contains("TLS") && error.contains("UnknownIssuer"),
                "a certificate no root or bundle vouches for is refused: {status}"
            );
        }
    }
}

#[test]
fn paths_a_server_would_serve_outside_the_prefix_never_leave() {
    let (addr, seen) = server();
    let case = case(grant(addr, ""));
    // Tomcat serves the first two as /admin, a proxy that decodes before a backend that decodes
    // again the third, a decoder that reads overlong UTF-8 the fourth, one that folds
    // look-alikes (NFKC) the fifth (host/src/config/http_path.rs has the table).
    let refused = [
        ("/api/..;/admin", "path parameter"),
        ("/api/x/..;/..;/admin", "path parameter"),
        ("/api/%252e%252e/admin", "encoded %"),
        ("/api/%c0%ae%c0%ae/admin", "non-ASCII"),
        ("/api/%ef%bc%8e%ef%bc%8e/admin", "non-ASCII"),
        // A proxy that decodes `?` or `#` before the backend ends the path there: `/api/x/..`.
        ("/api/x/..%3F", "encoded ?"),
        ("/api/x/..%23", "encoded #"),
    ];
    let requests: Vec<Value> = refused
        .iter()
        .map(|(path, _)| json!({"url": format!("http://{addr}{path}")}))
        .chain([json!({"url": format!("http://{addr}/api/ok")})])
        .collect();
    let (outcome, status, _) = reconcile(&case, &json!({ "http": requests }));
    assert_eq!(outcome, ok());
    let outcomes = status["http"].as_array().unwrap();
    for (i, (path, why)) in refused.iter().enumerate() {
        let error = outcomes[i]["error"].as_str().unwrap_or_default();
        assert!(error.starts_with("denied: "), "{path}: {}", outcomes[i]);
        assert!(error.contains(why), "{path}: {}", outcomes[i]);
    }
    assert_eq!(outcomes[refused.len()]["status"], 200, "{status}");
    // The server saw the one request inside the grant, and nothing else.
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(lines, [format!("GET /api/ok {KEY}")]);
}

/// Every form of `key` a guest could read it back from: as sent (either case), hex (either
/// case), every byte percent-encoded, and each run of base64 characters (at every alignment,
/// in both alphabets) that only the key decides.
fn key_forms(key: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE};
    let mut forms = vec![
        key.to_owned(),
        key.to_uppercase(),
        hex_of(key),
        hex_of(key).to_uppercase(),
        percent_of(key),
    ];
    for engine in [&STANDARD, &URL_SAFE] {
        for k in 0..3 {
            let encoded = engine.encode([&vec![0; k][..], key.as_bytes()].concat());
            forms.push(encoded[(8 * k).div_ceil(6)..(8 * (k + key.len())) / 6].to_owned());
        }
    }
    forms
}

fn assert_no_key(what: &str, text: &str) {
    for form in key_forms(KEY) {
        assert!(
            !text.to_lowercase().contains(&form.to_lowercase()),
            "{what} holds the key as {form}: {text}"
        );
    }
}

#[test]
fn a_key_in_a_basic_credential_a_jwt_or_a_wrapped_base64_dump_never_reaches_the_guest() {
    let (addr, _) = server();
    let case = case(grant(addr, ""));
    let (outcome, status, calls) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/basic-echo")}]}),
    );
    assert_eq!(outcome, ok());
    assert_eq!(status["http"][0]["status"], 200, "{status}");
    let body: Value =
        serde_json::from_str(status["http"][0]["body"].as_str().unwrap_or_default()).unwrap();
    for field in ["basic", "jwt", "dump", "hex", "url"] {
        assert!(body[field].is_string(), "{field}: {status}");
    }
    // The dump is wrapped at 76 columns: read it joined as a decoder would.
    let dump = body["dump"]
        .as_str()
        .unwrap_or_default()
        .replace("\r\n", "");
    assert_no_key("the joined dump", &dump);
    assert_no_key("the guest's status", &status.to_string());
    assert_no_key("the record", &calls);
}

#[test]
fn a_key_stored_under_one_rule_and_read_back_under_another_never_reaches_the_guest() {
    let (addr, seen) = server();
    // The second rule adds no credential: the read carries no key, and its response is masked
    // all the same.
    let case = case(grant(addr, &format!("- prefix: http://{addr}/public\n")));
    let (outcome, status, calls) = reconcile(
        &case,
        &json!({"http": [
            {"method": "POST", "url": format!("http://{addr}/api/store"), "body": "keep it"},
            {"url": format!("http://{addr}/public/read")},
        ]}),
    );
    assert_eq!(outcome, ok());
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(
        lines,
        [
            format!("POST /api/store {KEY}"),
            "GET /public/read ".to_owned()
        ]
    );
    assert_eq!(status["http"][1]["status"], 200, "{status}");
    let body: Value =
        serde_json::from_str(status["http"][1]["body"].as_str().unwrap_or_default()).unwrap();
    assert_eq!(body["stored"], "*".repeat(KEY.len()), "{status}");
    assert_eq!(
        body["accept-encoding"], "identity",
        "a grant with a credential asks every response unencoded: {status}"
    );
    assert_no_key("the guest's status", &status.to_string());
    assert_no_key("the record", &calls);
}

#[test]
fn a_key_reflected_as_a_response_header_name_never_reaches_the_guest() {
    let (addr, _) = server();
    let case = case(grant(addr, &format!("- prefix: http://{addr}/public\n")));
    let (outcome, status, calls) = reconcile(
        &case,
        &json!({"http": [
            {"url": format!("http://{addr}/api/header-name")},
            {"method": "POST", "url": format!("http://{addr}/api/store"), "body": "keep it"},
            {"url": format!("http://{addr}/public/read")},
        ]}),
    );
    assert_eq!(outcome, ok());
    assert_eq!(status["http"][0]["body"], "named", "{status}");
    // The fetcher reports bodies only; the record holds the headers as the guest received them.
    assert!(
        calls.contains(&format!("\"x-{}-echo\"", "*".repeat(KEY.len()))),
        "{calls}"
    );
    assert_no_key("the record", &calls);
    assert_no_key("the guest's status", &status.to_string());
}

#[test]
fn a_credential_of_the_grant_that_cannot_be_read_fails_every_response_closed() {
    let (addr, seen) = server();
    // No Secret `gone` exists: the host could not mask its value, so it sends nothing.
    let case = case(grant(
        addr,
        &format!(
            "- prefix: http://{addr}/public\n  headers:\n    X-Other: {{secretKeyRef: {{name: gone, key: key}}}}\n"
        ),
    ));
    let (outcome, status, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/echo")}]}),
    );
    assert_eq!(outcome, ok());
    let error = status["http"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("unavailable") && error.contains("gone"),
        "{status}"
    );
    assert_eq!(seen.requests.load(Ordering::SeqCst), 0, "nothing was sent");
}

#[test]
fn a_compressed_response_to_a_grant_with_credentials_fails_closed() {
    let (addr, seen) = server();
    let case = case(grant(addr, ""));
    let (outcome, status, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/gzip")}]}),
    );
    assert_eq!(outcome, ok());
    let error = status["http"][0]["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("gzip-encoded") && error.contains("cannot find them"),
        "{status}"
    );
    assert!(!status.to_string().contains(KEY), "{status}");
    assert_eq!(seen.requests.load(Ordering::SeqCst), 1, "it was sent");
}

#[test]
fn headers_that_change_what_a_server_serves_are_the_hosts() {
    let (addr, seen) = server();
    let case = case(grant(addr, ""));
    let url = format!("http://{addr}/api/ok");
    let headers = [
        ("Range", "bytes=0-3"),
        ("X-HTTP-Method-Override", "DELETE"),
        ("X-Original-URL", "/admin"),
        ("TE", "gzip"),
        ("X-Forwarded-Prefix", "/admin"),
    ];
    let requests: Vec<Value> = headers
        .iter()
        .map(|(name, value)| json!({"method": "POST", "url": url, "headers": {*name: *value}}))
        .chain([json!({"method": "POST", "url": url})])
        .collect();
    let (outcome, status, _) = reconcile(&case, &json!({ "http": requests }));
    assert_eq!(outcome, ok());
    let outcomes = status["http"].as_array().unwrap();
    for (i, (name, _)) in headers.iter().enumerate() {
        let error = outcomes[i]["error"].as_str().unwrap_or_default();
        assert!(error.contains("orbidden"), "{name}: {}", outcomes[i]);
    }
    assert_eq!(outcomes[headers.len()]["status"], 200, "{status}");
    let lines = seen.lines.lock().unwrap().clone();
    assert_eq!(lines, [format!("POST /api/ok {KEY}")]);
}

/// A server on 127.0.0.1 that answers every connection with `response`, as written.
fn raw_server(response: &'static [u8]) -> SocketAddr {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(response);
        }
    });
    addr
}

#[test]
fn a_transfer_coding_the_host_does_not_decode_fails_closed() {
    // A gzip stream stands for any bytes the mask could not look into.
    let addr = raw_server(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nConnection: close\r\n\r\n5\r\n\x1f\x8b\x08\x00\x00\r\n0\r\n\r\n",
    );
    let case = case(grant(addr, ""));
    let (outcome, status, _) = reconcile(
        &case,
        &json!({"http": [{"url": format!("http://{addr}/api/ok")}]}),
    );
    assert_eq!(outcome, ok());
    let error = status["http"][0]["error"].as_str().unwrap_or_default();
    assert!(error.contains("transfer coding gzip"), "{status}");
}

#[test]
fn shadow_mode_reports_a_bounded_number_of_requests_at_the_guests_rate() {
    let (addr, seen) = server();
    let case = case(grant(
        addr,
        "mode: shadow\nlimits: {deadline: 2s, httpPerSecond: 20, httpBurst: 10}\n",
    ));
    let (outcome, _, differences) = reconcile(
        &case,
        &json!({"http": [{"method": "POST", "url": format!("http://{addr}/api/ok"), "body": "x"}], "httpRepeat": 10000}),
    );
    assert!(matches!(outcome, Outcome::Deadline(_)), "{outcome:?}");
    let reported = differences.matches("would send").count();
    assert!(
        (30..=64).contains(&reported),
        "{reported} requests reported (at most 64, and the rate lets about 50 through)"
    );
    assert_eq!(
        seen.requests.load(Ordering::SeqCst),
        0,
        "shadow sent nothing"
    );
}
