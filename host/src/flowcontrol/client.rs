//! The host's Kubernetes client with its writes under the flow control: a request with a
//! mutating method waits for a permit, its answer goes back to the limit, and a write the server
//! refused as overloaded is sent again once the hold its `Retry-After` set is over. Reads go
//! out as kube sends them, with kube's own retries.
//!
//! Writes go through a client without kube's retry layer: that layer retries a 429 inside the
//! client, where the limit would see only a slow write, never the refusal nor its
//! `Retry-After`. The retries are made here instead, each attempt with a permit of its own.
//!
//! Cost: two connection pools (reads, writes), and the request cloned once per write attempt
//! that may still be retried (a status patch: a few hundred bytes).

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use tokio::time::Instant;

use super::{Answer, FlowControl};

/// Attempts of one write the server keeps refusing as overloaded; the last refusal is then
/// the caller's (a reconcile retries it with its key's backoff).
const MAX_ATTEMPTS: u32 = 10;

/// The host's client: `config`'s, with every write under `flow`.
pub fn client(config: &kube::Config, flow: &FlowControl) -> Result<kube::Client, kube::Error> {
    let reads = kube::Client::try_from(config.clone())?;
    let mut unretried = config.clone();
    unretried.default_retry = false;
    let writes = kube::Client::try_from(unretried)?;
    let flow = flow.clone();
    let service = tower::service_fn(move |request: Request<Body>| {
        let (reads, writes, flow) = (reads.clone(), writes.clone(), flow.clone());
        async move {
            if is_write(request.method()) {
                send_write(&writes, &flow, request).await
            } else {
                reads.send(request).await
            }
        }
    });
    Ok(kube::Client::new(service, config.default_namespace.clone()))
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
    mut request: Request<Body>,
) -> Result<Response<Body>, kube::Error> {
    let mut attempt = 1;
    loop {
        let again = (attempt < MAX_ATTEMPTS)
            .then(|| clone_request(&request))
            .flatten();
        let permit = flow.acquire().await;
        let started = Instant::now();
        let response = match writes.send(request).await {
            Ok(response) => response,
            Err(e) => {
                permit.answered(Answer::Lost);
                return Err(e);
            }
        };
        let answer = answer_of(&response, started.elapsed());
        permit.answered(answer);
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
