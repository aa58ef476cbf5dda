//! Outbound HTTP: the standard `wasi:http/outgoing-handler`, served by wasmtime-wasi-http, with
//! the host's policy in its request hook ([`HttpHooks`]'s `send_request`). A guest reaches the
//! world outside Kubernetes (a DNS provider's API, a cloud, a ticket system) only as far as the
//! `http:` of its grant reaches:
//!
//! ```text
//! guest ── wasi:http handle(request) ──▶ HttpHooks::send_request (per instance)
//!            1. grant      a rule whose prefix holds the URL and allows the method → `denied`
//!            2. caps       request body ≤ 1 MiB and ≤ 64 headers, read while it streams
//!            3. shadow     only GET and HEAD leave in shadow mode; others are "would send"
//!            4. replay     a replayed reconcile is answered from its record
//!            5. budget     `limits.httpPerSecond`, body bytes, host memory for the response
//!            6. credentials the rule's headers, read from Secrets, added here (never in the guest)
//!            7. provider   resolve, check every address, connect to the checked one, TLS,
//!                          response headers and body capped while they stream, all within
//!                          the reconcile's deadline ([`Outbound`])
//!            8. mask       every credential of the grant, in the forms a server may reflect it
//!                          in, overwritten in the body and header names and values
//!            9. finish     metrics per guest and host, the exchange recorded
//! ```
//!
//! A refusal reaches the guest as `internal-error(some("denied: ..."))`: `wasi:http`'s
//! `HTTP-request-denied` carries no text, and the text says which URL and what the grant allows.
//! The SDKs turn it into their `denied` error.

mod address;
mod ledger;
mod mask;
pub(crate) mod outbound;
mod policy;
pub(crate) mod session;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use wasmtime_wasi_http::{Error, ForbiddenHeaderFilter, RequestOptions, WasiBody, WasiHttpHooks};

pub use address::{AddressPolicy, special};
pub(crate) use ledger::{Charged, ChargedHttp, Ledger, MAX_RESOURCES};
pub use outbound::{Outbound, OutboundRequest, OutboundResponse, ValueError};
pub(crate) use session::{FUNCTION, INTERFACE, Session, lock};

use super::budget::HostBytes;
use super::context::{CallContext, GuestContext};
use super::replay::Call;
use crate::config::HttpRule;

/// A request body larger than this is refused while it streams.
pub(crate) const MAX_REQUEST_BODY: usize = 1 << 20;
/// A response body larger than this (or than the guest's host-memory budget) is cut off with
/// `HTTP-response-body-size`.
pub(crate) const MAX_RESPONSE_BODY: usize = 4 << 20;
/// Requests not sent in shadow mode that one reconcile reports (the rest are counted only).
const MAX_SHADOW_REPORTS: usize = 64;
/// Headers a request may carry, and a response.
pub(crate) const MAX_HEADERS: usize = 64;
/// Bytes of all the header names and values of a response.
pub(crate) const MAX_RESPONSE_HEADER_BYTES: usize = 64 << 10;

/// The `wasi:http` state of one instance: the context wasmtime-wasi-http keeps, the hooks of
/// the reconcile it serves, and the ledger of what its resources hold.
pub(crate) struct GuestHttp {
    pub(crate) ctx: wasmtime_wasi_http::WasiHttpCtx,
    pub(crate) hooks: HttpHooks,
    pub(crate) ledger: Ledger,
}

impl GuestHttp {
    /// The state for an instance serving `call`, made on its first `wasi:http` call.
    pub(crate) fn new(call: &CallContext) -> Self {
        let mut ctx = wasmtime_wasi_http::WasiHttpCtx::new();
        ctx.set_field_size_limit(MAX_RESPONSE_HEADER_BYTES);
        let guest = &call.guest;
        let (pool, pool_kib) = guest.budget.http_memory();
        let rules = !guest.grant.http.is_empty() || guest.grant.unrestricted;
        Self {
            ctx,
            hooks: HttpHooks::for_call(call),
            ledger: Ledger::new(&guest.name, pool, pool_kib, rules),
        }
    }

    /// A reused instance's next reconcile: hooks with its deadline and session.
    pub(crate) fn renew(&mut self, call: &CallContext) {
        self.hooks = HttpHooks::for_call(call);
    }
}

/// The host's policy for one reconcile's requests.
pub(crate) struct HttpHooks {
    exchange: Arc<Exchanger>,
}

struct Exchanger {
    guest: Arc<GuestContext>,
    deadline: Instant,
    recording: bool,
    session: Arc<Mutex<Session>>,
}

impl HttpHooks {
    /// Hooks for the reconcile `call`: its guest, its deadline, whether it records, and the
    /// session its exchanges go to.
    fn for_call(call: &CallContext) -> Self {
        Self {
            exchange: Arc::new(Exchanger {
                guest: call.guest.clone(),
                deadline: call.deadline,
                recording: call.calls.is_some(),
                session: call.http.clone(),
            }),
        }
    }
}

impl WasiHttpHooks for HttpHooks {
    /// Small chunks: what an outgoing body's channel holds is booked ([`ledger::BODY_CHANNEL`]).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        ledger::BODY_CHUNK
    }

    /// The headers the host sets (any rule's) are the host's: a guest may not set them. Nor
    /// headers that make a server act on another method or path than the one the grant
    /// checked (method overrides, rewritten URLs, forwarding), nor `TE`; and while the grant
    /// has credentials, nor `Range`, with which a server that stored a credential would hand it
    /// over in pieces the mask cannot recognise.
    fn forbidden_header_filter(&mut self) -> ForbiddenHeaderFilter {
        let http = &self.exchange.guest.grant.http;
        let injected: Vec<HeaderName> = http
            .iter()
            .flat_map(HttpRule::injected_headers)
            .filter_map(|name| HeaderName::try_from(name).ok())
            .collect();
        let credentials = !injected.is_empty();
        Arc::new(move |name| {
            wasmtime_wasi_http::DEFAULT_FORBIDDEN_HEADERS.contains(name)
                || injected.contains(name)
                || redirecting(name.as_str())
                || (credentials && matches!(name.as_str(), "range" | "if-range"))
        })
    }

    fn send_request(
        &mut self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Box<
        dyn Future<
                Output = wasmtime_wasi_http::Result<(
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                )>,
            > + Send,
    > {
        drop(fut);
        let exchange = self.exchange.clone();
        Box::new(async move {
            let response = exchange.run(request, options).await?;
            let done: Box<dyn Future<Output = Result<(), Error>> + Send> =
                Box::new(async { Ok(()) });
            Ok((response, done))
        })
    }
}

/// Headers with which servers and frameworks take another method, path or host than the
/// request's own (Symfony, Laravel and Express method overrides; IIS and Symfony
/// `X-Original-URL`; Spring's `X-Forwarded-Prefix`), and `TE`, which asks for transfer codings.
fn redirecting(name: &str) -> bool {
    matches!(
        name,
        "te" | "forwarded"
            | "x-http-method-override"
            | "x-http-method"
            | "x-method-override"
            | "x-rewrite-url"
            | "x-real-ip"
    ) || name.starts_with("x-forwarded-")
        || name.starts_with("x-original-")
}

/// A denial as the guest receives it.
/// The CA bundle `rule` names, read through `provider`, if it names one.
async fn ca_bundle(provider: &dyn Outbound, rule: &HttpRule) -> Result<Option<Vec<u8>>, Error> {
    let Some(from) = &rule.ca_bundle else {
        return Ok(None);
    };
    provider.value(from).await.map(Some).map_err(|why| {
        Error::InternalError(Some(format!(
            "unavailable: the CA bundle of {}: {why}",
            rule.prefix
        )))
    })
}

fn denied(text: impl std::fmt::Display) -> Error {
    Error::InternalError(Some(format!("denied: {text}")))
}

impl Exchanger {
    fn name(&self) -> &str {
        &self.guest.name
    }

    fn count(&self, host: &str, outcome: &'static str) {
        if let Some(metrics) = &self.guest.metrics {
            metrics.http_request(self.name(), host, outcome);
        }
    }

    async fn run(
        &self,
        request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
    ) -> Result<http::Response<WasiBody>, Error> {
        let started = Instant::now();
        let (parts, body) = request.into_parts();
        let host = parts.uri.host().unwrap_or("-").to_ascii_lowercase();
        let rule =
            match policy::authorize(self.name(), &self.guest.grant, &parts.method, &parts.uri) {
                Ok(rule) => rule.clone(),
                // The offline runner and a replay without a configuration allow every call, as
                // they do every read and write; with no rule, no credentials are added.
                Err(_) if self.guest.grant.unrestricted => open_rule(&parts.uri)?,
                Err(text) => {
                    // A host no rule names counts as `-`: a label per name a guest makes up
                    // would grow without end.
                    let named = self
                        .guest
                        .grant
                        .http
                        .iter()
                        .any(|rule| rule.prefix.host.eq_ignore_ascii_case(&host));
                    self.count(if named { &host } else { "-" }, "denied");
                    tracing::warn!(guest = %self.name(), "{text}");
                    // A guest writes the body after `handle`: it is read and thrown away (held
                    // nowhere), so the guest gets the refusal rather than a failed write.
                    self.drain(body).await;
                    return Err(denied(text));
                }
            };
        let body = self.read_body(body).await;
        if parts.headers.len() > MAX_HEADERS {
            self.count(&host, "error");
            return Err(Error::HttpRequestHeaderSectionSize(
                u32::try_from(parts.headers.len()).ok(),
            ));
        }
        let (body, _held) = body.inspect_err(|_| self.count(&host, "error"))?;
        let sent = body.len();
        let args = exchange_args(&parts, &body);
        let result = self.answer(&host, &rule, parts, body, options).await;
        if let Err(e) = &result
            && !is_denial(e)
        {
            self.count(&host, "error");
        }
        if self.recording {
            let returned = match &result {
                Ok((response, _)) => response_json(response),
                Err(e) => json!({ "error": error_text(e) }),
            };
            self.record(args, returned);
        }
        let (response, held) = result?;
        if let Some(metrics) = &self.guest.metrics {
            metrics.http_exchanged(
                self.name(),
                &host,
                sent,
                response.body.len(),
                started.elapsed(),
            );
        }
        Ok(into_wasi(response, held))
    }

    /// Keeps an exchange for the record while the reconcile lasts, its copy held from the
    /// guest's HTTP memory; when that is held elsewhere, the bodies are left out of the record
    /// (saying so) rather than kept uncounted.
    fn record(&self, mut args: Value, mut returned: Value) {
        let bytes = args.to_string().len() + returned.to_string().len();
        let held = self.guest.budget.try_hold_http(bytes);
        if held.is_none() {
            let omitted = json!({"omitted": "the guest's HTTP memory was held; not recorded"});
            for value in [&mut args, &mut returned] {
                if let Some(body) = value.get_mut("body") {
                    *body = omitted.clone();
                }
            }
        }
        let mut session = lock(&self.session);
        session.calls.push(Call {
            interface: INTERFACE,
            function: FUNCTION,
            args,
            returned,
        });
        session.held.extend(held);
    }

    /// The request body, read while it streams, at most [`MAX_REQUEST_BODY`] and within the
    /// deadline; what it holds is held from the guest's HTTP memory as it arrives (waiting
    /// while the guest's other exchanges hold it), until the exchange ends.
    async fn read_body(&self, mut body: WasiBody) -> Result<(Bytes, Option<HostBytes>), Error> {
        let budget = &self.guest.budget;
        let read = async {
            let mut collected = Vec::new();
            let mut held = None;
            while let Some(frame) = body.frame().await {
                if let Ok(data) = frame?.into_data() {
                    let total = collected.len() + data.len();
                    if total > MAX_REQUEST_BODY {
                        return Err(Error::HttpRequestBodySize(Some(total as u64)));
                    }
                    held = Some(budget.hold_http_to(held, total).await.ok_or_else(|| {
                        Error::InternalError(Some(format!(
                            "unavailable: a request body of {total} bytes is more than the \
                             guest's memory for HTTP exchanges ({} KiB, a quarter of limits.memoryMiB)",
                            budget.http_exchange_bytes() >> 10
                        )))
                    })?);
                    collected.extend_from_slice(&data);
                }
            }
            Ok((Bytes::from(collected), held))
        };
        tokio::time::timeout_at(self.deadline.into(), read)
            .await
            .unwrap_or(Err(Error::ConnectionWriteTimeout))
    }

    /// Reads a refused request's body to its end, keeping none of it, within the deadline.
    async fn drain(&self, mut body: WasiBody) {
        let drain = async { while let Some(Ok(_)) = body.frame().await {} };
        let _ = tokio::time::timeout_at(self.deadline.into(), drain).await;
    }

    /// The response to a request within the grant: not sent (shadow), from the record (replay),
    /// or from the provider, credentials added and masked again in what comes back.
    async fn answer(
        &self,
        host: &str,
        rule: &HttpRule,
        parts: http::request::Parts,
        body: Bytes,
        options: Option<RequestOptions>,
    ) -> Result<(OutboundResponse, Option<HostBytes>), Error> {
        let url = parts.uri.to_string();
        let budget = &self.guest.budget;
        let within = |what: &'static str| {
            move |_| {
                Error::InternalError(Some(format!(
                    "unavailable: the reconcile's deadline passed while waiting for {what}"
                )))
            }
        };
        // Before shadow mode's answer too: a request not sent is still reported and kept.
        tokio::time::timeout_at(self.deadline.into(), budget.http.until_ready())
            .await
            .map_err(within("the guest's HTTP rate (limits.httpPerSecond)"))?;
        if self.guest.grant.mode == crate::config::Mode::Shadow
            && !matches!(parts.method, http::Method::GET | http::Method::HEAD)
        {
            return Ok((self.not_sent(host, &parts.method, &url, body.len()), None));
        }
        if let Some(answer) = self.replayed(&parts, &body) {
            self.count(host, "replayed");
            return answer.map(|response| (response, None));
        }
        let Some(provider) = self.guest.providers.http.clone() else {
            return Err(denied(format!(
                "guest `{}` may not {} {url}: this host sends no HTTP for its guests",
                self.name(),
                parts.method
            )));
        };
        let (mut headers, secrets) = self
            .credentials(provider.as_ref(), rule, parts.headers)
            .await?;
        headers.insert(
            http::header::HOST,
            HeaderValue::from_str(parts.uri.authority().map_or("", |a| a.as_str()))
                .map_err(|_| Error::HttpRequestUriInvalid)?,
        );
        let ca_bundle = ca_bundle(provider.as_ref(), rule).await?;
        let (max_body, mut held) = self.hold_response().await?;
        let option =
            |pick: fn(&RequestOptions) -> Option<Duration>| options.as_ref().and_then(pick);
        let request = OutboundRequest {
            method: parts.method,
            uri: parts.uri,
            headers,
            body,
            addresses: AddressPolicy {
                literal: rule.prefix.literal_ip(),
            },
            ca_bundle,
            deadline: self.deadline,
            connect_timeout: option(|o| o.connect_timeout),
            first_byte_timeout: option(|o| o.first_byte_timeout),
            between_bytes_timeout: option(|o| o.between_bytes_timeout),
            max_body,
        };
        let mut response = tokio::time::timeout_at(self.deadline.into(), provider.send(request))
            .await
            .unwrap_or(Err(Error::HttpResponseTimeout))
            .map_err(|e| self.refused_address(host, e))?;
        if let Some(held) = &mut held {
            held.shrink_to(response.body.len() + header_bytes(&response.headers));
        }
        let _ = budget.body_bytes(response.body.len()).await;
        if !secrets.is_empty() {
            mask_response(&secrets, &mut response).inspect_err(|_| self.count(host, "error"))?;
        }
        self.count(host, status_class(response.status));
        Ok((response, held))
    }

    /// `e` as the guest is told it: when the provider refused an address, whose request it was
    /// and where a grant goes.
    fn refused_address(&self, host: &str, e: Error) -> Error {
        if !is_denial(&e) {
            return e;
        }
        self.count(host, "denied");
        let text = format!(
            "guest `{}` may not {}; add a prefix naming the address to {}",
            self.name(),
            error_text(&e).trim_start_matches("denied: "),
            self.guest.grant.place_in_full(self.name(), "http")
        );
        tracing::warn!(guest = %self.name(), "{text}");
        denied(&text)
    }

    /// The most a response may hold, and that much held from the guest's memory for HTTP
    /// exchanges before it is read (waiting, within the deadline, while its other exchanges
    /// hold it); what the response turns out to hold stays held until the guest drops it.
    async fn hold_response(&self) -> Result<(usize, Option<HostBytes>), Error> {
        let budget = &self.guest.budget;
        let max_body = MAX_RESPONSE_BODY.min(
            budget
                .http_exchange_bytes()
                .saturating_sub(MAX_RESPONSE_HEADER_BYTES),
        );
        let held = tokio::time::timeout_at(
            self.deadline.into(),
            budget.hold_http(max_body + MAX_RESPONSE_HEADER_BYTES),
        )
        .await
        .map_err(|_| {
            Error::InternalError(Some(
                "unavailable: the reconcile's deadline passed while waiting for the guest's \
                 memory for HTTP exchanges (a quarter of limits.memoryMiB, held by its other \
                 exchanges)"
                    .to_owned(),
            ))
        })?;
        Ok((max_body, held))
    }

    /// Shadow mode's answer to a request that would change something: not sent, reported as
    /// "would send", and answered `202 Accepted` with `x-reconciler-shadow: not-sent`.
    fn not_sent(
        &self,
        host: &str,
        method: &http::Method,
        url: &str,
        bytes: usize,
    ) -> OutboundResponse {
        self.count(host, "shadow");
        let mut session = lock(&self.session);
        // Kept for the verdict while the reconcile lasts: a bounded number, each URL cut.
        if session.differences.len() < MAX_SHADOW_REPORTS {
            let shown: String = url.chars().take(256).collect();
            session.differences.extend(crate::sandbox::shadow::single(
                format!("{method} {shown}"),
                true,
                format!("would send {bytes} bytes (shadow mode sends only GET and HEAD)"),
            ));
        }
        drop(session);
        let mut headers = HeaderMap::new();
        headers.insert("x-reconciler-shadow", HeaderValue::from_static("not-sent"));
        OutboundResponse {
            status: http::StatusCode::ACCEPTED,
            headers,
            body: Bytes::new(),
        }
    }

    /// The guest's headers with the rule's credentials set (any value the guest gave for those
    /// names replaced), and the values to mask in the response: every credential of the grant.
    async fn credentials(
        &self,
        provider: &dyn Outbound,
        rule: &HttpRule,
        mut headers: HeaderMap,
    ) -> Result<(HeaderMap, mask::Secrets), Error> {
        let bearer = rule
            .bearer_token
            .as_ref()
            .map(|from| ("authorization".to_owned(), from, "Bearer "));
        let named = rule
            .headers
            .iter()
            .map(|(name, from)| (name.clone(), from, ""));
        for (name, from, prefix) in named.chain(bearer) {
            let value = provider.value(from).await.map_err(|why| {
                Error::InternalError(Some(format!(
                    "unavailable: the value of header {name} for {}: {why}",
                    rule.prefix
                )))
            })?;
            let value = trim_newline(&value);
            let mut full = prefix.as_bytes().to_vec();
            full.extend_from_slice(value);
            let name =
                HeaderName::try_from(name.as_str()).map_err(|_| Error::ConfigurationError)?;
            let mut value = HeaderValue::from_bytes(&full).map_err(|_| {
                Error::InternalError(Some(format!(
                    "unavailable: the value of header {name} from {from} is not a valid header value"
                )))
            })?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        let secrets = self.grant_secrets(provider).await?;
        // Compressed, a reflected value would pass the scan.
        if !secrets.is_empty() {
            headers.insert(
                http::header::ACCEPT_ENCODING,
                HeaderValue::from_static("identity"),
            );
        }
        Ok((headers, secrets))
    }

    /// Every credential value of the guest's grant, whichever rule a request matched: a value
    /// sent under one rule can come back under another (stored by a `POST`, read by a `GET`).
    /// One that cannot be read fails the request before it is sent, since its response could
    /// not be masked for it.
    async fn grant_secrets(&self, provider: &dyn Outbound) -> Result<mask::Secrets, Error> {
        let mut secrets = mask::Secrets::default();
        for rule in &self.guest.grant.http {
            let named = rule
                .headers
                .iter()
                .map(|(name, from)| (name.as_str(), from));
            for (name, from) in named.chain(rule.bearer_token.iter().map(|f| ("authorization", f)))
            {
                let value = provider.value(from).await.map_err(|why| {
                    Error::InternalError(Some(format!(
                        "unavailable: the host masks every credential of the grant in every response and cannot read header {name} of {}: {why}",
                        rule.prefix
                    )))
                })?;
                secrets.add(trim_newline(&value));
            }
        }
        Ok(secrets)
    }

    /// The recorded answer to this request when a record is being replayed.
    fn replayed(
        &self,
        parts: &http::request::Parts,
        body: &Bytes,
    ) -> Option<Result<OutboundResponse, Error>> {
        let mut session = lock(&self.session);
        let queue = session.replay.as_mut()?;
        let asked = exchange_args(parts, body);
        let Some(recorded) = queue.pop_front() else {
            session.divergence.get_or_insert_with(|| {
                format!("an HTTP request the record does not have: {asked}")
            });
            return Some(Err(Error::InternalError(Some(
                "unavailable: replay: the record has no answer for this HTTP request".to_owned(),
            ))));
        };
        if recorded.args != asked {
            session.divergence.get_or_insert_with(|| {
                format!(
                    "a different HTTP request: recorded {}, replayed {asked}",
                    recorded.args
                )
            });
        }
        Some(response_from_json(&recorded.returned))
    }
}

/// What an unrestricted grant allows under `uri`'s origin: every method, no credentials.
fn open_rule(uri: &http::Uri) -> Result<HttpRule, Error> {
    let origin = format!(
        "{}://{}",
        uri.scheme_str().unwrap_or_default(),
        uri.authority().map_or("", |a| a.as_str())
    );
    Ok(HttpRule {
        prefix: origin.parse().map_err(|_| Error::HttpRequestUriInvalid)?,
        methods: None,
        headers: std::collections::BTreeMap::new(),
        bearer_token: None,
        ca_bundle: None,
    })
}

/// Whether `e` is the host's refusal (outside the grant, or an address it may not reach).
fn is_denial(e: &Error) -> bool {
    matches!(e, Error::InternalError(Some(t)) if t.starts_with("denied: "))
}

/// A Secret's value as written with `kubectl create secret --from-file`, without its newline.
fn trim_newline(value: &[u8]) -> &[u8] {
    value
        .strip_suffix(b"\r\n")
        .or_else(|| value.strip_suffix(b"\n"))
        .unwrap_or(value)
}

/// The content coding of a response body the host cannot scan (anything but `identity`).
fn encoded(response: &OutboundResponse) -> Option<String> {
    let coding = response
        .headers
        .get_all(http::header::CONTENT_ENCODING)
        .iter()
        .map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .trim()
                .to_ascii_lowercase()
        })
        .find(|c| !c.is_empty() && c != "identity")?;
    (!response.body.is_empty()).then_some(coding)
}

/// Overwrites the grant's credentials in the body, the header values and the header names.
/// Masks the grant's `secrets` in `response`, or refuses it when its body is compressed (the
/// host cannot find them there).
fn mask_response(secrets: &mask::Secrets, response: &mut OutboundResponse) -> Result<(), Error> {
    if let Some(encoding) = encoded(response) {
        return Err(Error::InternalError(Some(format!(
            "unavailable: the response is {encoding}-encoded although the host asked for \
             identity; the grant has credentials, and the host cannot find them in a \
             compressed body to mask them"
        ))));
    }
    if let Some(body) = secrets.masked(&response.body) {
        response.body = Bytes::from(body);
    }
    secrets.mask_headers(&mut response.headers);
    Ok(())
}

fn status_class(status: http::StatusCode) -> &'static str {
    match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    }
}

/// The guest-facing text of an error.
pub(crate) fn error_text(e: &Error) -> String {
    match e {
        Error::InternalError(Some(text)) => text.clone(),
        other => format!("{other:?}"),
    }
}

/// A request as records and the offline runner show it: the guest's own headers (never the
/// credentials the host adds), the body as text when it is UTF-8.
fn exchange_args(parts: &http::request::Parts, body: &Bytes) -> Value {
    json!({
        "method": parts.method.as_str(),
        "url": parts.uri.to_string(),
        "headers": headers_json(&parts.headers),
        "body": body_json(body),
    })
}

fn response_json(response: &OutboundResponse) -> Value {
    json!({
        "status": response.status.as_u16(),
        "headers": headers_json(&response.headers),
        "body": body_json(&response.body),
    })
}

fn headers_json(headers: &HeaderMap) -> Value {
    let mut map = serde_json::Map::new();
    for (name, value) in headers {
        if value.is_sensitive() {
            continue;
        }
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match map.get_mut(name.as_str()) {
            Some(Value::String(existing)) => {
                existing.push_str(", ");
                existing.push_str(&text);
            }
            _ => {
                map.insert(name.as_str().to_owned(), Value::String(text));
            }
        }
    }
    Value::Object(map)
}

/// A body as text, or `{"base64": ...}` when it is not UTF-8.
fn body_json(body: &Bytes) -> Value {
    use base64::Engine as _;
    match std::str::from_utf8(body) {
        Ok(text) => Value::String(text.to_owned()),
        Err(_) => json!({ "base64": base64::engine::general_purpose::STANDARD.encode(body) }),
    }
}

fn body_from_json(value: &Value) -> Option<Bytes> {
    use base64::Engine as _;
    match value {
        Value::Null => Some(Bytes::new()),
        Value::String(text) => Some(Bytes::from(text.clone())),
        Value::Object(o) => o
            .get("base64")
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .map(Bytes::from),
        _ => None,
    }
}

/// A response as records and fixtures write it (`{status, headers, body}` or `{error}`).
pub(crate) fn response_from_json(value: &Value) -> Result<OutboundResponse, Error> {
    if let Some(error) = value.get("error").and_then(Value::as_str) {
        return Err(Error::InternalError(Some(error.to_owned())));
    }
    let malformed = || {
        Error::InternalError(Some(
            "unavailable: a recorded HTTP response is malformed".to_owned(),
        ))
    };
    let status = value
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .and_then(|s| http::StatusCode::from_u16(s).ok())
        .ok_or_else(malformed)?;
    let mut headers = HeaderMap::new();
    if let Some(map) = value.get("headers").and_then(Value::as_object) {
        for (name, v) in map {
            let (Ok(name), Some(Ok(v))) = (
                HeaderName::try_from(name.as_str()),
                v.as_str().map(HeaderValue::from_str),
            ) else {
                return Err(malformed());
            };
            headers.append(name, v);
        }
    }
    let body = body_from_json(value.get("body").unwrap_or(&Value::Null)).ok_or_else(malformed)?;
    Ok(OutboundResponse {
        status,
        headers,
        body,
    })
}

/// The bytes of a header map's names and values.
fn header_bytes(headers: &HeaderMap) -> usize {
    headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum()
}

/// A response body and the guest's HTTP memory it holds, given back when the guest drops it
/// (or has read it to the end).
struct HeldBody {
    body: http_body_util::Full<Bytes>,
    _held: Option<HostBytes>,
}

impl http_body::Body for HeldBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The response as wasmtime-wasi-http hands it to the guest, holding `held` while it lives.
fn into_wasi(response: OutboundResponse, held: Option<HostBytes>) -> http::Response<WasiBody> {
    let body = HeldBody {
        body: http_body_util::Full::new(response.body),
        _held: held,
    }
    .map_err(|never| match never {})
    .boxed_unsync();
    let mut out = http::Response::new(body);
    *out.status_mut() = response.status;
    *out.headers_mut() = response.headers;
    out
}
