//! The host's Kubernetes client with its writes under the flow control: a request with a
//! mutating method waits for a permit, its answer goes back to the limit, and a write the server
//! refused as overloaded is sent again once the hold its `Retry-After` set is over. Reads go
//! out as kube sends them, with kube's own retries, except those of a loop that retries by itself
//! (a watcher's lists and watches: `crate::cluster::retry_after`), which go out once.
//!
//! Writes go through a client without kube's retry layer: that layer retries a 429 inside the
//! client, where the limit would see only a slow write, never the refusal nor its
//! `Retry-After`. The retries are made here instead, each attempt with a permit of its own.
//!
//! Writes also run on a thread of their own ([`WriteThread`]): their connections, their
//! client's buffer task and the task that awaits each answer. A write's latency is then taken
//! when its response headers arrive, and its permit goes back then, not when the worker that
//! sent it is next polled: on a host whose workers keep both cores busy with guests, that poll
//! can come many milliseconds later, and the limit took that wait for a slower server (issue
//! 42, item 1 (a)).
//!
//! Cost: two connection pools (reads, writes), one thread with a single-threaded runtime for
//! the writes, one task spawned per write attempt, and the request cloned once per write
//! attempt that may still be retried (a status patch: a few hundred bytes).

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::{Answer, FlowControl};

/// Attempts of one write the server keeps refusing as overloaded; the last refusal is then
/// the caller's (a reconcile retries it with its key's backoff).
const MAX_ATTEMPTS: u32 = 10;

/// The host's client: `config`'s, with every write under `flow`.
///
/// # Errors
///
/// When kube cannot build a client from `config`, or the writes' thread cannot be started.
pub fn client(config: &kube::Config, flow: &FlowControl) -> Result<kube::Client, kube::Error> {
    let reads = crate::cluster::retry_after::client(config)?;
    let mut unretried = config.clone();
    unretried.default_retry = false;
    let thread = Arc::new(WriteThread::start().map_err(|e| kube::Error::Service(Box::new(e)))?);
    // Built inside the thread's runtime: the client's buffer task is spawned where it is built.
    let writes = {
        let _inside = thread.handle.enter();
        kube::Client::try_from(unretried)?
    };
    let flow = flow.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (reads, writes, flow, thread) =
            (reads.clone(), writes.clone(), flow.clone(), thread.clone());
        async move {
            if is_write(request.method()) {
                send_write(&writes, &flow, &thread, request).await
            } else {
                reads.send(request).await
            }
        }
    });
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// The thread the writes' I/O runs on; it ends when the last client holding it is dropped.
struct WriteThread {
    handle: tokio::runtime::Handle,
    _stop: oneshot::Sender<()>,
}

impl WriteThread {
    fn start() -> std::io::Result<Self> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("api-writes".into())
            .spawn(move || {
                // Returns when the sender is dropped; the runtime (with any connection left)
                // is dropped here, on its own thread, outside any async context.
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })?;
        Ok(Self {
            handle,
            _stop: stop,
        })
    }
}

/// Aborts the task if the caller stops waiting for it (a cancelled reconcile cancels its
/// write, as it would without the thread).
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

fn is_write(method: &Method) -> bool {
    matches!(
        *method,
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    )
}

async fn send_write(
    writes: &kube::Client,
    flow: &FlowControl,
    thread: &WriteThread,
    mut request: Request<Body>,
) -> Result<Response<Body>, kube::Error> {
    let mut attempt = 1;
    loop {
        let again = (attempt < MAX_ATTEMPTS)
            .then(|| clone_request(&request))
            .flatten();
        let permit = flow.acquire().await;
        let writes = writes.clone();
        let mut task = AbortOnDrop(thread.handle.spawn(async move {
            let started = Instant::now();
            match writes.send(request).await {
                Ok(response) => {
                    let answer = answer_of(&response, started.elapsed());
                    permit.answered(answer);
                    Ok((response, answer))
                }
                Err(e) => {
                    permit.answered(Answer::Lost);
                    Err(e)
                }
            }
        }));
        let (response, answer) = (&mut task.0)
            .await
            .map_err(|e| kube::Error::Service(Box::new(e)))??;
        match (answer, again) {
            // The hold this answer set makes the next `acquire` wait for its Retry-After.
            (Answer::Overloaded { status, .. }, Some(next)) => {
                tracing::debug!(
                    status,
                    attempt,
                    uri = %next.uri(),
                    "write refused as overloaded; sending it again after the hold"
                );
                request = next;
                attempt += 1;
            }
            _ => return Ok(response),
        }
    }
}

/// What a response tells the limit.
fn answer_of<B>(response: &Response<B>, latency: Duration) -> Answer {
    let status = response.status();
    if matches!(
        status,
        StatusCode::TOO_MANY_REQUESTS
            | StatusCode::SERVICE_UNAVAILABLE
            | StatusCode::GATEWAY_TIMEOUT
    ) {
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Answer::Overloaded {
            status: status.as_u16(),
            retry_after,
        }
    } else {
        Answer::Answered(latency)
    }
}

/// A copy of `request` to send again, if its body can be copied (every body kube builds for
/// a write can).
fn clone_request(request: &Request<Body>) -> Option<Request<Body>> {
    let body = request.body().try_clone()?;
    let mut copy = Request::builder()
        .method(request.method().clone())
        .uri(request.uri().clone())
        .version(request.version())
        .body(body)
        .ok()?;
    *copy.headers_mut() = request.headers().clone();
    *copy.extensions_mut() = request.extensions().clone();
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(status: u16, retry_after: Option<&str>) -> Response<()> {
        let mut builder = Response::builder().status(status);
        if let Some(after) = retry_after {
            builder = builder.header("Retry-After", after);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn a_429_is_an_overload_with_its_retry_after_and_other_answers_are_latency() {
        let took = Duration::from_millis(3);
        assert_eq!(
            answer_of(&response(429, Some("2")), took),
            Answer::Overloaded {
                status: 429,
                retry_after: Some(Duration::from_secs(2))
            }
        );
        assert_eq!(
            answer_of(&response(503, Some("a date, not seconds")), took),
            Answer::Overloaded {
                status: 503,
                retry_after: None
            }
        );
        for status in [200, 201, 404, 409, 422, 500] {
            assert_eq!(
                answer_of(&response(status, Some("5")), took),
                Answer::Answered(took),
                "{status}"
            );
        }
    }

    /// An API server stand-in on a thread of its own: answers each request with `200 {}`,
    /// each only when told to, and says when a request has arrived.
    fn held_server() -> (
        String,
        std::sync::mpsc::Receiver<()>,
        std::sync::mpsc::Sender<()>,
    ) {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (arrived, arrivals) = std::sync::mpsc::channel();
        let (answer, answers) = std::sync::mpsc::channel::<()>();
        std::thread::spawn(move || {
            let Ok((stream, _)) = listener.accept() else {
                return;
            };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let mut stream = stream;
            loop {
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                    if line == "\r\n" {
                        break;
                    }
                }
                let mut body = vec![0; length];
                if reader.read_exact(&mut body).is_err() || arrived.send(()).is_err() {
                    return;
                }
                if answers.recv().is_err() {
                    return;
                }
                let response = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}";
                if stream.write_all(response.as_bytes()).is_err() {
                    return;
                }
            }
        });
        (url, arrivals, answer)
    }

    /// The runtime the caller runs on is blocked (a guest holding its worker thread) when the
    /// answer arrives: the write's permit still comes back, because the answer is taken where
    /// the host's own work cannot delay it.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_is_answered_to_the_limit_while_the_runtime_that_sent_it_is_busy() {
        let (url, arrivals, answer) = held_server();
        let config = kube::Config::new(url.parse().unwrap());
        let flow = FlowControl::new(&super::super::Settings::default(), None);
        let client = client(&config, &flow).unwrap();
        let sent = tokio::spawn(async move {
            let request = Request::patch("/api/v1/namespaces/a/configmaps/x")
                .header("Content-Type", "application/merge-patch+json")
                .body(b"{}".to_vec())
                .unwrap();
            client.request_text(request).await
        });
        tokio::task::spawn_blocking(move || arrivals.recv().unwrap())
            .await
            .unwrap();
        assert_eq!(flow.in_flight(), 1);
        // From here this thread, the only one of the caller's runtime, does not yield.
        answer.send(()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while flow.in_flight() > 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(
            flow.in_flight(),
            0,
            "the permit waits for the busy runtime to poll the write"
        );
        assert_eq!(sent.await.unwrap().unwrap(), "{}");
    }

    #[test]
    fn only_mutating_methods_are_writes() {
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(is_write(&method), "{method}");
        }
        for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
            assert!(!is_write(&method), "{method}");
        }
    }

    #[test]
    fn a_write_is_copied_whole_to_be_sent_again() {
        let request = Request::builder()
            .method(Method::PATCH)
            .uri("/apis/test.reconciler.dev/v1/namespaces/a/widgets/w/status")
            .header("Content-Type", "application/merge-patch+json")
            .body(Body::from(br#"{"status":{}}"#.to_vec()))
            .unwrap();
        let copy = clone_request(&request).expect("a buffered body copies");
        assert_eq!(copy.method(), Method::PATCH);
        assert_eq!(copy.uri(), request.uri());
        assert_eq!(copy.headers(), request.headers());
    }
}
