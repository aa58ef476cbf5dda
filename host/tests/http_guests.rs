//! Outbound HTTP from guests written on the JavaScript and Go SDKs: the couriers
//! (`guests/js/courier`, standard `fetch` in an async reconcile; `guests/go/courier`, the
//! standard `http.Client` on the SDK's `wasihttp` transport), built by `guests/build.sh`, each
//! reconciling a Widget in the host's runtime with the `run` provider (`LiveOutbound`) against
//! a server on 127.0.0.1 that this test starts. The request crosses every layer a real one
//! does: the guest's client, wasi:http, the grant's `http:` rules, the host's resolution and
//! address check, the socket; the answer comes back whole into the guest's status.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};

use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::HostConfig;
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::http::LiveOutbound;
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{LoadedGuest, Outcome, Request, Runtime, RuntimeOptions};
use serde_json::{Value, json};

/// One request as the server read it.
#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Received {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// An HTTP/1.1 server on 127.0.0.1 answering `/greetings` with `{"reply": "hello, <message>"}`
/// and an `x-request-id`, `/overloaded` with 503, anything else with 404; one request per
/// connection, each recorded.
struct Server {
    port: u16,
    received: Arc<Mutex<Vec<Received>>>,
}

impl Server {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let Some(request) = read_request(&mut stream) else {
                    continue;
                };
                let (status, body) = answer(&request);
                log.lock().unwrap().push(request);
                let response = format!(
                    "HTTP/1.1 {status}\r\n\
                     content-type: application/json\r\n\
                     x-request-id: r-42\r\n\
                     content-length: {}\r\n\
                     connection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(response.as_bytes());
            }
        });
        Server { port, received }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn read_request(stream: &mut std::net::TcpStream) -> Option<Received> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_owned(), parts.next()?.to_owned());
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line).ok()?;
        let Some((name, value)) = line.trim_end().split_once(':') else {
            break;
        };
        headers.push((name.trim().to_owned(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .map_or(0, |(_, v)| v.parse().unwrap_or(0));
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Received {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn answer(request: &Received) -> (&'static str, String) {
    match request.path.as_str() {
        "/greetings" => {
            let sent: Value = serde_json::from_str(&request.body).unwrap_or(Value::Null);
            let reply = format!("hello, {}", sent["message"].as_str().unwrap_or("?"));
            ("200 OK", json!({ "reply": reply }).to_string())
        }
        "/overloaded" => ("503 Service Unavailable", "overloaded".into()),
        _ => ("404 Not Found", "no such thing".into()),
    }
}

fn runtime() -> Runtime {
    Runtime::new(&RuntimeOptions {
        cache_dir: Some(common::cache_dir()),
        ..RuntimeOptions::default()
    })
    .unwrap()
}

fn load(runtime: &Runtime, name: &str) -> LoadedGuest {
    let path = common::guest(name);
    runtime
        .load(&std::fs::read(&path).unwrap(), &path)
        .expect("guest loads")
}

/// One reconcile of a Widget whose `spec` is `spec`, with the courier's grant: status writes,
/// and `POST` under the server's `/greetings` and `/overloaded` only. Returns the outcome and
/// the calls the guest made (its exchanges among them).
fn reconcile(
    runtime: &Runtime,
    guest: &LoadedGuest,
    server: &Server,
    spec: &Value,
) -> (Outcome, Vec<reconciler_host::sandbox::capabilities::Call>) {
    let config = HostConfig::parse(
        &format!(
            "
guests:
  courier:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
    http:
      - prefix: {}
        methods: [POST]
      - prefix: {}
        methods: [POST]
",
            server.url("/greetings"),
            server.url("/overloaded"),
        ),
        "host.yaml".as_ref(),
    )
    .unwrap();
    let cache = Arc::new(MemoryCache::default());
    // The provider `run` uses; without an API server it reads no credentials (none are named).
    let providers = offline::providers(cache.clone(), None)
        .with_http(Arc::new(LiveOutbound::new(None, "default".into())));
    let context = Arc::new(GuestContext::new(
        "courier",
        config.grant("courier").unwrap(),
        providers,
    ));
    let object = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "demo", "generation": 2, "uid": "uid-1", "resourceVersion": "10"},
        "spec": spec,
    });
    cache.put(object.clone());
    let request = Request {
        object_ref: ObjectRef::of_object(&object).unwrap(),
        object: Some(object.to_string()),
        deleting: false,
        attempt: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call = CallContext::new(context, "demo/w1".into(), Some(rt.handle().clone())).recording();
    let run = runtime.reconcile(guest, call, request);
    (run.outcome, run.calls.unwrap_or_default())
}

fn status_patch(calls: &[reconciler_host::sandbox::capabilities::Call]) -> Option<&Value> {
    calls
        .iter()
        .find(|c| c.function == "patch-status")
        .map(|c| &c.args["patch"]["status"])
}

/// The Widget's message went out as JSON in a POST, and the reply, the status code and a
/// response header came back into its status.
fn greets_through_the_grant(guest: &str) {
    let runtime = runtime();
    let guest = load(&runtime, guest);
    let server = Server::start();
    let (outcome, calls) = reconcile(
        &runtime,
        &guest,
        &server,
        &json!({"url": server.url("/greetings"), "message": "world"}),
    );
    assert_eq!(
        outcome,
        Outcome::Ok {
            requeue_after_ms: None
        },
        "{calls:#?}"
    );
    let received = server.received();
    assert_eq!(received.len(), 1, "{received:?}");
    let sent = &received[0];
    assert_eq!(
        (sent.method.as_str(), sent.path.as_str()),
        ("POST", "/greetings")
    );
    assert_eq!(sent.header("content-type"), Some("application/json"));
    let body: Value = serde_json::from_str(&sent.body).unwrap();
    assert_eq!(body, json!({"widget": "demo/w1", "message": "world"}));
    assert_eq!(
        status_patch(&calls),
        Some(
            &json!({"observedGeneration": 2, "reply": "hello, world", "requestId": "r-42", "httpStatus": 200})
        ),
        "{calls:#?}"
    );
    let exchange = calls
        .iter()
        .find(|c| c.interface == "wasi:http/outgoing-handler")
        .expect("the exchange is recorded");
    assert_eq!(exchange.returned["status"], 200, "{exchange:?}");
}

/// A 503 is a response, which the guest turns into a transient error; the status is untouched.
fn a_5xx_answer_is_transient(guest: &str) {
    let runtime = runtime();
    let guest = load(&runtime, guest);
    let server = Server::start();
    let url = server.url("/overloaded");
    let (outcome, calls) = reconcile(&runtime, &guest, &server, &json!({"url": url}));
    assert_eq!(
        outcome,
        Outcome::Transient(format!("POST {url} answered 503: overloaded")),
        "{calls:#?}"
    );
    assert_eq!(status_patch(&calls), None);
}

/// A URL outside the grant never reaches the server, and the guest fails without trapping.
fn a_url_outside_the_grant_is_refused(guest: &str) -> String {
    let runtime = runtime();
    let guest = load(&runtime, guest);
    let server = Server::start();
    let (outcome, calls) = reconcile(
        &runtime,
        &guest,
        &server,
        &json!({"url": server.url("/admin")}),
    );
    assert!(server.received().is_empty(), "{:?}", server.received());
    assert_eq!(status_patch(&calls), None);
    match outcome {
        Outcome::Permanent(message) | Outcome::Transient(message) => message,
        other => panic!("expected an error of the guest's, got {other:?}"),
    }
}

#[test]
fn the_javascript_courier_posts_through_the_grant_and_writes_the_reply() {
    greets_through_the_grant("courier-js");
}

#[test]
fn the_go_courier_posts_through_the_grant_and_writes_the_reply() {
    greets_through_the_grant("courier-go");
}

#[test]
fn a_5xx_answer_is_transient_in_javascript() {
    a_5xx_answer_is_transient("courier-js");
}

#[test]
fn a_5xx_answer_is_transient_in_go() {
    a_5xx_answer_is_transient("courier-go");
}

/// Go sees the host's words: a `denied` `HostError`, which the SDK makes permanent.
#[test]
fn a_url_outside_the_grant_is_a_permanent_denial_in_go() {
    let message = a_url_outside_the_grant_is_refused("courier-go");
    assert!(
        message.contains("denied: guest `courier` may not POST http://127.0.0.1:")
            && message.contains("add it to guests.courier.http"),
        "{message}"
    );
}

/// `StarlingMonkey`'s `fetch` rejects with a `TypeError` that carries no reason; the SDK makes
/// it a transient error naming the request.
#[test]
fn a_url_outside_the_grant_is_a_transient_failure_naming_the_request_in_javascript() {
    let message = a_url_outside_the_grant_is_refused("courier-js");
    assert!(
        message.starts_with("POST http://127.0.0.1:")
            && message.contains("NetworkError when attempting to fetch resource"),
        "{message}"
    );
}
