//! Outbound HTTP: requests to APIs outside the cluster through the standard
//! `wasi:http/outgoing-handler` (the contract's `http-controller` world). The host sends a
//! request only when the `http:` of the guest's grant covers its URL and method, adds the
//! grant's credentials itself (the guest never sees them), and hands back the whole response.
//!
//! ```no_run
//! use reconciler_guest::http;
//!
//! # fn f() -> Result<(), http::HttpError> {
//! let zone = http::get("http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.test.")?;
//! if zone.status == 200 {
//!     let body: reconciler_guest::serde_json::Value = zone.json()?;
//! }
//! http::Request::new("PATCH", "http://127.0.0.1:8081/api/v1/servers/localhost/zones/example.test.")
//!     .json(&reconciler_guest::serde_json::json!({"rrsets": []}))
//!     .send()?;
//! # Ok(()) }
//! ```
//!
//! Every call blocks until the whole response is in (or the host refuses it); the reconcile's
//! deadline bounds it. A refusal by the host is [`HttpError::Denied`], whose text names the URL
//! and what the grant allows; `?` in `reconcile` makes it permanent, and a failure to reach the
//! server ([`HttpError::Unavailable`]) transient.

use crate::ReconcileError;
use crate::bindings::wasi::http::outgoing_handler;
use crate::bindings::wasi::http::types::{
    ErrorCode, Fields, IncomingBody, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use crate::bindings::wasi::io::streams::StreamError;

/// Why a request got no response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The host refused it: outside the grant's `http:`, or an address it does not connect to.
    Denied(String),
    /// The request is malformed (a URL, a header); the text says what.
    Invalid(String),
    /// No response: the server is unreachable, too slow, or answered beyond a cap.
    Unavailable(String),
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::Denied(m) => write!(f, "denied: {m}"),
            HttpError::Invalid(m) => write!(f, "invalid: {m}"),
            HttpError::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

impl std::error::Error for HttpError {}

impl From<HttpError> for ReconcileError {
    /// Denied and invalid wait for a change (of the grant or the object); unavailable retries.
    fn from(e: HttpError) -> Self {
        match e {
            HttpError::Denied(_) | HttpError::Invalid(_) => {
                ReconcileError::Permanent(e.to_string())
            }
            HttpError::Unavailable(_) => ReconcileError::Transient(e.to_string()),
        }
    }
}

impl From<serde_json::Error> for HttpError {
    fn from(e: serde_json::Error) -> Self {
        HttpError::Invalid(format!("JSON: {e}"))
    }
}

/// A whole response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// Header names in lower case, in the order received.
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (any case), as text.
    #[must_use]
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .and_then(|(_, v)| std::str::from_utf8(v).ok())
    }

    /// The body as text (invalid UTF-8 replaced).
    #[must_use]
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body parsed as JSON.
    ///
    /// # Errors
    /// [`HttpError::Invalid`] when it is not JSON of that shape.
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> Result<T, HttpError> {
        Ok(serde_json::from_slice(&self.body)?)
    }

    /// Whether the status is 2xx.
    #[must_use]
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }
}

/// A request being built; [`Request::send`] sends it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    method: String,
    url: String,
    headers: Vec<(String, Vec<u8>)>,
    body: Vec<u8>,
}

impl Request {
    /// A request with `method` (`GET`, `PATCH`, ...) to the absolute `url`.
    #[must_use]
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            method: method.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Adds a header (a header the grant's rule sets is the host's; setting it is refused).
    #[must_use]
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers
            .push((name.to_owned(), value.as_bytes().to_vec()));
        self
    }

    /// The body, as bytes.
    #[must_use]
    pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
        self.body = body.into();
        self
    }

    /// A JSON body, with `Content-Type: application/json`.
    #[must_use]
    pub fn json(self, value: &serde_json::Value) -> Self {
        self.header("content-type", "application/json")
            .body(value.to_string())
    }

    /// Sends it and reads the whole response.
    ///
    /// # Errors
    /// [`HttpError`]: refused by the host, malformed, or no response.
    pub fn send(self) -> Result<Response, HttpError> {
        send(&self)
    }
}

/// `GET url`.
///
/// # Errors
/// As [`Request::send`].
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::new("GET", url).send()
}

/// The parts of an absolute URL that wasi:http sets one by one.
struct Target<'a> {
    scheme: Scheme,
    authority: &'a str,
    path_with_query: &'a str,
}

fn target(url: &str) -> Result<Target<'_>, HttpError> {
    let (scheme, rest) = url
        .split_once("://")
        .ok_or_else(|| HttpError::Invalid(format!("{url}: not an absolute URL")))?;
    let scheme = match scheme.to_ascii_lowercase().as_str() {
        "http" => Scheme::Http,
        "https" => Scheme::Https,
        other => {
            return Err(HttpError::Invalid(format!(
                "{url}: scheme {other} is not http or https"
            )));
        }
    };
    let split = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(split);
    Ok(Target {
        scheme,
        authority,
        path_with_query: if path.is_empty() { "/" } else { path },
    })
}

fn method(name: &str) -> Method {
    match name.to_ascii_uppercase().as_str() {
        "GET" => Method::Get,
        "HEAD" => Method::Head,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "PATCH" => Method::Patch,
        "OPTIONS" => Method::Options,
        other => Method::Other(other.to_owned()),
    }
}

fn send(request: &Request) -> Result<Response, HttpError> {
    let target = target(&request.url)?;
    let invalid =
        |what: &str| HttpError::Invalid(format!("{} {}: {what}", request.method, request.url));
    let headers =
        Fields::from_list(&request.headers).map_err(|e| invalid(&format!("headers: {e:?}")))?;
    let outgoing = OutgoingRequest::new(headers);
    outgoing
        .set_method(&method(&request.method))
        .map_err(|()| invalid("method"))?;
    outgoing
        .set_scheme(Some(&target.scheme))
        .map_err(|()| invalid("scheme"))?;
    outgoing
        .set_authority(Some(target.authority))
        .map_err(|()| invalid("host"))?;
    outgoing
        .set_path_with_query(Some(target.path_with_query))
        .map_err(|()| invalid("path"))?;
    let body = outgoing.body().map_err(|()| invalid("body taken twice"))?;
    // Sent first, then the body streams in: the host reads it while the request is on its way.
    let future = outgoing_handler::handle(outgoing, None).map_err(error)?;
    write_body(&body, &request.body)
        .map_err(|e| HttpError::Unavailable(format!("writing the body: {e}")))?;
    OutgoingBody::finish(body, None).map_err(error)?;
    let incoming = loop {
        match future.get() {
            Some(result) => {
                break result
                    .map_err(|()| HttpError::Unavailable("the response was taken twice".into()))?
                    .map_err(error)?;
            }
            None => future.subscribe().block(),
        }
    };
    let status = incoming.status();
    let headers = incoming.headers().entries();
    let body = incoming
        .consume()
        .map_err(|()| HttpError::Unavailable("the response body was taken twice".into()))?;
    let bytes = read_body(&body)?;
    IncomingBody::finish(body);
    Ok(Response {
        status,
        headers,
        body: bytes,
    })
}

fn write_body(body: &OutgoingBody, bytes: &[u8]) -> Result<(), String> {
    if bytes.is_empty() {
        return Ok(());
    }
    let stream = body
        .write()
        .map_err(|()| "the body stream was taken twice".to_owned())?;
    // `blocking-write-and-flush` takes at most 4096 bytes a call.
    for chunk in bytes.chunks(4096) {
        stream
            .blocking_write_and_flush(chunk)
            .map_err(|e| format!("{e:?}"))?;
    }
    Ok(())
}

fn read_body(body: &IncomingBody) -> Result<Vec<u8>, HttpError> {
    let stream = body
        .stream()
        .map_err(|()| HttpError::Unavailable("the response body stream was taken twice".into()))?;
    let mut bytes = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => bytes.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(bytes),
            Err(StreamError::LastOperationFailed(e)) => {
                return Err(HttpError::Unavailable(format!(
                    "reading the response body: {}",
                    e.to_debug_string()
                )));
            }
        }
    }
}

/// The host's refusal (`internal-error("denied: ...")`) as [`HttpError::Denied`]; any other code
/// as unavailable, named as wasi:http names it.
fn error(code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::InternalError(Some(text)) => match text.strip_prefix("denied: ") {
            Some(why) => HttpError::Denied(why.to_owned()),
            None => HttpError::Unavailable(text),
        },
        other => HttpError::Unavailable(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_url_splits_into_what_wasi_http_sets() {
        let t = target("https://api.example.com:8443/v1/zones?x=1").unwrap();
        assert!(matches!(t.scheme, Scheme::Https));
        assert_eq!(t.authority, "api.example.com:8443");
        assert_eq!(t.path_with_query, "/v1/zones?x=1");
        let root = target("http://127.0.0.1:8081").unwrap();
        assert_eq!(root.path_with_query, "/");
        assert!(matches!(target("ftp://x/"), Err(HttpError::Invalid(_))));
        assert!(matches!(target("/relative"), Err(HttpError::Invalid(_))));
    }

    #[test]
    fn the_hosts_refusal_is_denied_and_other_codes_unavailable() {
        assert_eq!(
            error(ErrorCode::InternalError(Some(
                "denied: guest `g` may not GET x".into()
            ))),
            HttpError::Denied("guest `g` may not GET x".into())
        );
        assert!(
            matches!(error(ErrorCode::ConnectionRefused), HttpError::Unavailable(m) if m.contains("ConnectionRefused"))
        );
        assert!(matches!(
            ReconcileError::from(HttpError::Denied("x".into())),
            ReconcileError::Permanent(_)
        ));
        assert!(matches!(
            ReconcileError::from(HttpError::Unavailable("x".into())),
            ReconcileError::Transient(_)
        ));
    }
}
