//! The read side of the OCI distribution API as pulls use it: a manifest by tag or digest,
//! whether a registry holds a manifest, a blob as a stream, and the bearer-token exchange.
//! Written on reqwest rather than taken from `oci-client`, whose pulls read manifests, token
//! answers and error bodies whole and follow any redirect; the registry is not trusted here:
//!
//! - every body is read in chunks against a cap (manifests [`MAX_MANIFEST_BYTES`], token
//!   answers and error bodies [`MAX_SMALL_BODY`]); a `Content-Length` over it is refused before
//!   a byte is read;
//! - a redirect, and a token realm, lead only to a `host[:port]` in [`Endpoints`] (the
//!   registries the host allows, and the reference's own), never from HTTPS to plain HTTP, at
//!   most [`MAX_REDIRECTS`] times; reqwest drops the credentials on a move to another host;
//! - an error answer becomes a one-line summary (status, then the first error's code and
//!   message, cut), never the raw body.
//!
//! Connect and read timeouts bound each request; the caller bounds the whole pull.

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Method, Response, StatusCode, Url, header};

use super::credentials::Auth;
use super::error::PullError;
use super::reference::ModuleRef;

/// The largest manifest read: a Wasm artifact's is under a kilobyte; a few MiB leaves room
/// for annotations without letting a registry fill the host's memory.
pub(super) const MAX_MANIFEST_BYTES: u64 = 4 << 20;
/// Token answers and error bodies are a few hundred bytes.
const MAX_SMALL_BODY: u64 = 64 << 10;
/// A registry's error message is cut to this many characters.
const MAX_MESSAGE_CHARS: usize = 200;
const MAX_REDIRECTS: usize = 5;
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPES: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// The `host[:port]`s a redirect or a token realm may lead to.
#[derive(Clone, Debug, Default)]
pub(crate) struct Endpoints(Arc<Vec<String>>);

impl Endpoints {
    pub(crate) fn new(hosts: impl IntoIterator<Item = String>) -> Self {
        Self(Arc::new(
            hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect(),
        ))
    }

    fn with(&self, host: &str) -> Self {
        let mut hosts = (*self.0).clone();
        hosts.push(host.to_ascii_lowercase());
        Self(Arc::new(hosts))
    }

    /// Whether `url` is on a listed host and port (a listed host without a port: the scheme's
    /// default port).
    fn allows(&self, url: &Url) -> bool {
        let Some(host) = url.host_str() else {
            return false;
        };
        let host = host.to_ascii_lowercase();
        let explicit = url.port().map(|port| format!("{host}:{port}"));
        self.0.iter().any(|listed| {
            explicit.as_deref() == Some(listed.as_str())
                || (url.port().is_none() && *listed == host)
                || url
                    .port_or_known_default()
                    .is_some_and(|port| *listed == format!("{host}:{port}"))
        })
    }
}

/// Why a move from `from` to `to` (a redirect or a token realm) is not taken, if it is not.
fn refused_move(endpoints: &Endpoints, from: &Url, to: &Url) -> Option<String> {
    if from.scheme() == "https" && to.scheme() != "https" {
        return Some(format!(
            "the registry sent the host from HTTPS to {}://{}: refused",
            to.scheme(),
            to.host_str().unwrap_or("?")
        ));
    }
    if !matches!(to.scheme(), "https" | "http") || !endpoints.allows(to) {
        return Some(format!(
            "the registry sent the host to {}://{}{}, which is not a registry reconcilers.allow.registries lists: refused",
            to.scheme(),
            to.host_str().unwrap_or("?"),
            to.port().map(|p| format!(":{p}")).unwrap_or_default()
        ));
    }
    None
}

/// One module's repository on one registry, with one set of credentials.
pub(super) struct Session {
    http: reqwest::Client,
    /// `scheme://host[:port]/v2/REPOSITORY`.
    base: Url,
    repository: String,
    auth: Auth,
    /// A token the registry's realm gave for this repository.
    bearer: Option<String>,
    /// The registry asked for basic credentials once: sent with every request after.
    basic: bool,
    endpoints: Endpoints,
    module: String,
}

impl Session {
    /// `https`: speak HTTPS (else plain HTTP, for registries the configuration lists as
    /// insecure). `endpoints`: where redirects and token realms may lead besides the module's
    /// own registry.
    pub(super) fn new(
        module: &ModuleRef,
        auth: &Auth,
        https: bool,
        endpoints: &Endpoints,
    ) -> Result<Self, PullError> {
        let name = module.to_string();
        let endpoints = endpoints.with(module.registry());
        let scheme = if https { "https" } else { "http" };
        let repository = module.reference().repository().to_owned();
        let base = Url::parse(&format!(
            "{scheme}://{}/v2/{repository}/",
            module.reference().resolve_registry()
        ))
        .map_err(|e| PullError::Registry {
            module: name.clone(),
            error: format!("not a registry address: {e}"),
        })?;
        let policy_endpoints = endpoints.clone();
        let policy = reqwest::redirect::Policy::custom(move |attempt| {
            if attempt.previous().len() >= MAX_REDIRECTS {
                return attempt.error(format!("more than {MAX_REDIRECTS} redirects"));
            }
            let from = attempt.previous().last().cloned();
            match from.and_then(|from| refused_move(&policy_endpoints, &from, attempt.url())) {
                Some(why) => attempt.error(why),
                None => attempt.follow(),
            }
        });
        // reqwest's rustls needs a process-wide provider: ring, the one kube builds.
        // Installing it twice is harmless (the first wins).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .redirect(policy)
            .connect_timeout(Duration::from_secs(10))
            .read_timeout(Duration::from_mins(1))
            .user_agent(concat!("reconciler-host/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| PullError::Registry {
                module: name.clone(),
                error: format!(
                    "cannot build a registry client ({e}): most often the TLS stack found no CA certificates (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs); give the host a CA bundle"
                ),
            })?;
        Ok(Self {
            http,
            base,
            repository,
            auth: auth.clone(),
            bearer: None,
            basic: false,
            endpoints,
            module: name,
        })
    }

    /// The manifest `reference` (a tag or a digest) names, read against
    /// [`MAX_MANIFEST_BYTES`].
    pub(super) async fn manifest(&mut self, reference: &str) -> Result<Vec<u8>, PullError> {
        let path = format!("manifests/{reference}");
        let mut response = self.send(Method::GET, &path, MANIFEST_TYPES).await?;
        read_capped(&mut response, MAX_MANIFEST_BYTES)
            .await
            .map_err(|e| self.body_error(e, "the manifest", MAX_MANIFEST_BYTES))
    }

    /// The image index at `reference` (a tag or digest), read against [`MAX_MANIFEST_BYTES`].
    pub(super) async fn index(&mut self, reference: &str) -> Result<Vec<u8>, PullError> {
        self.read_index(&format!("manifests/{reference}")).await
    }

    /// The OCI 1.1 referrers of manifest `digest` (an image index), from the referrers API.
    pub(super) async fn referrers(&mut self, digest: &str) -> Result<Vec<u8>, PullError> {
        self.read_index(&format!("referrers/{digest}")).await
    }

    async fn read_index(&mut self, path: &str) -> Result<Vec<u8>, PullError> {
        let mut response = self.send(Method::GET, path, INDEX_TYPE).await?;
        read_capped(&mut response, MAX_MANIFEST_BYTES)
            .await
            .map_err(|e| self.body_error(e, "the index", MAX_MANIFEST_BYTES))
    }

    /// Whether the registry, asked with this session's credentials, holds manifest `digest`:
    /// `Ok` if it does, `NotFound` or `Denied` if not.
    pub(super) async fn holds(&mut self, digest: &str) -> Result<(), PullError> {
        let path = format!("manifests/{digest}");
        self.send(Method::HEAD, &path, MANIFEST_TYPES)
            .await
            .map(drop)
    }

    /// The blob `digest`, as an answer whose body the caller streams against its cap.
    pub(super) async fn blob(&mut self, digest: &str) -> Result<Response, PullError> {
        self.send(Method::GET, &format!("blobs/{digest}"), "*/*")
            .await
    }

    /// Sends one request, answering a `401` once: with a token from the realm its bearer
    /// challenge names, or with the basic credentials if it asks for those.
    async fn send(
        &mut self,
        method: Method,
        path: &str,
        accept: &str,
    ) -> Result<Response, PullError> {
        let url = self
            .base
            .join(path)
            .map_err(|e| self.failed(e.to_string()))?;
        for attempt in 0..2 {
            let mut request = self
                .http
                .request(method.clone(), url.clone())
                .header(header::ACCEPT, accept);
            request = match (&self.bearer, &self.auth) {
                (Some(token), _) | (None, Auth::Bearer(token)) => request.bearer_auth(token),
                (None, Auth::Basic { username, password }) if self.basic => {
                    request.basic_auth(username, Some(password))
                }
                _ => request,
            };
            let response = request.send().await.map_err(|e| self.transport(&e))?;
            if response.status() != StatusCode::UNAUTHORIZED || attempt == 1 {
                return self.checked(response).await;
            }
            let challenge = response
                .headers()
                .get(header::WWW_AUTHENTICATE)
                .and_then(|v| v.to_str().ok())
                .map(Challenge::parse);
            match challenge {
                Some(Challenge::Bearer {
                    realm,
                    service,
                    scope,
                }) => {
                    self.bearer = Some(self.token(&url, &realm, service, scope).await?);
                }
                Some(Challenge::Basic)
                    if matches!(self.auth, Auth::Basic { .. }) && !self.basic =>
                {
                    self.basic = true;
                }
                _ => return self.checked(response).await,
            }
        }
        unreachable!("the second attempt always returns")
    }

    /// A token from `realm` for pulling this repository.
    async fn token(
        &self,
        registry: &Url,
        realm: &str,
        service: Option<String>,
        scope: Option<String>,
    ) -> Result<String, PullError> {
        let mut url = Url::parse(realm).map_err(|e| PullError::Denied {
            module: self.module.clone(),
            error: format!("the registry named a token realm that is not a URL ({e})"),
        })?;
        if let Some(why) = refused_move(&self.endpoints, registry, &url) {
            return Err(PullError::Denied {
                module: self.module.clone(),
                error: format!("token realm: {why}"),
            });
        }
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = &service {
                query.append_pair("service", service);
            }
            let scope = scope.unwrap_or_else(|| format!("repository:{}:pull", self.repository));
            query.append_pair("scope", &scope);
        }
        let mut request = self.http.get(url);
        if let Auth::Basic { username, password } = &self.auth {
            request = request.basic_auth(username, Some(password));
        }
        let mut response = request.send().await.map_err(|e| self.transport(&e))?;
        if !response.status().is_success() {
            let summary = summary(&mut response).await;
            return Err(PullError::Denied {
                module: self.module.clone(),
                error: format!("the token realm refused: {summary}"),
            });
        }
        let body = read_capped(&mut response, MAX_SMALL_BODY)
            .await
            .map_err(|e| self.body_error(e, "the token answer", MAX_SMALL_BODY))?;
        let answer: TokenAnswer = serde_json::from_slice(&body).map_err(|e| PullError::Denied {
            module: self.module.clone(),
            error: format!("the token realm's answer is not a token ({e})"),
        })?;
        answer
            .token
            .or(answer.access_token)
            .ok_or_else(|| PullError::Denied {
                module: self.module.clone(),
                error: "the token realm's answer carries no token".into(),
            })
    }

    /// `response` if it succeeded, else its error, summarised.
    async fn checked(&self, mut response: Response) -> Result<Response, PullError> {
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let error = summary(&mut response).await;
        let module = self.module.clone();
        Err(match status {
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => PullError::Denied { module, error },
            StatusCode::NOT_FOUND => PullError::NotFound { module, error },
            _ => PullError::Registry { module, error },
        })
    }

    fn transport(&self, e: &reqwest::Error) -> PullError {
        // The redirect policy's refusal is the error's source; reqwest's own text of it
        // ("error following redirect") says less.
        let mut error = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(inner) = source {
            error = format!("{error}: {inner}");
            source = inner.source();
        }
        if e.is_redirect() {
            return self.failed(error);
        }
        PullError::Unreachable {
            module: self.module.clone(),
            error,
        }
    }

    pub(super) fn failed(&self, error: String) -> PullError {
        PullError::Registry {
            module: self.module.clone(),
            error,
        }
    }

    fn body_error(&self, e: BodyError, what: &str, max: u64) -> PullError {
        match e {
            BodyError::TooLarge => PullError::TooLarge {
                module: self.module.clone(),
                size: format!("{what}, as it streamed,"),
                max,
                hint: "",
            },
            BodyError::Transport(e) => self.transport(&e),
        }
    }
}

/// A token realm's answer (the distribution spec's token authentication).
#[derive(serde::Deserialize)]
struct TokenAnswer {
    token: Option<String>,
    access_token: Option<String>,
}

/// The distribution API's error body.
#[derive(serde::Deserialize)]
struct ErrorEnvelope {
    errors: Vec<ErrorEntry>,
}

#[derive(serde::Deserialize)]
struct ErrorEntry {
    code: Option<String>,
    message: Option<String>,
}

pub(super) enum BodyError {
    TooLarge,
    Transport(reqwest::Error),
}

/// The body of `response`, refused once it is longer than `max` (by its `Content-Length`
/// before reading, or while it streams).
pub(super) async fn read_capped(response: &mut Response, max: u64) -> Result<Vec<u8>, BodyError> {
    if response.content_length().is_some_and(|n| n > max) {
        return Err(BodyError::TooLarge);
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(BodyError::Transport)? {
        if body.len() as u64 + chunk.len() as u64 > max {
            return Err(BodyError::TooLarge);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error answer in one bounded line: the status and, when the body is the distribution
/// API's error envelope, its first error's code and message (cut). Nothing else of the body
/// is kept: it is the registry's text, bound for a status and a log line.
async fn summary(response: &mut Response) -> String {
    let status = response.status();
    let status = format!(
        "HTTP {}{}",
        status.as_u16(),
        status
            .canonical_reason()
            .map(|r| format!(" {r}"))
            .unwrap_or_default()
    );
    let Ok(body) = read_capped(response, MAX_SMALL_BODY).await else {
        return status;
    };
    let Some(first) = serde_json::from_slice::<ErrorEnvelope>(&body)
        .ok()
        .and_then(|e| e.errors.into_iter().next())
    else {
        return status;
    };
    let cut = |text: String| -> String {
        let text = crate::cluster::validation::message(&text);
        if text.chars().count() <= MAX_MESSAGE_CHARS {
            return text;
        }
        let mut cut: String = text.chars().take(MAX_MESSAGE_CHARS).collect();
        cut.push('…');
        cut
    };
    let code = first.code.map(&cut).unwrap_or_default();
    match first.message {
        Some(message) => format!("{status}: {code}: {}", cut(message)),
        None => format!("{status}: {code}"),
    }
}

/// A `WWW-Authenticate` challenge, as registries send them. Parsed here: the header's
/// grammar (RFC 9110 §11.6.1) is a scheme and comma-separated `key="value"` pairs, and no
/// well-kept crate parses it for reqwest.
#[derive(Debug, PartialEq, Eq)]
enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
    Other,
}

impl Challenge {
    fn parse(header: &str) -> Self {
        let (scheme, rest) = header.trim().split_once(' ').unwrap_or((header.trim(), ""));
        if scheme.eq_ignore_ascii_case("basic") {
            return Self::Basic;
        }
        if !scheme.eq_ignore_ascii_case("bearer") {
            return Self::Other;
        }
        let params = parameters(rest);
        let get = |key: &str| {
            params
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(key))
                .map(|(_, v)| v.clone())
        };
        match get("realm") {
            Some(realm) => Self::Bearer {
                realm,
                service: get("service"),
                scope: get("scope"),
            },
            None => Self::Other,
        }
    }
}

/// `key="value", key=token, …`: quoted values may hold commas and `\"`.
fn parameters(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars.by_ref().take_while(|c| *c != '=').collect();
        if key.is_empty() {
            return out;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            value = chars.by_ref().take_while(|c| *c != ',').collect();
        }
        out.push((key.trim().to_owned(), value.trim().to_owned()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn challenges_parse_as_registries_send_them() {
        assert_eq!(
            Challenge::parse(
                r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#
            ),
            Challenge::Bearer {
                realm: "https://auth.example/token".into(),
                service: Some("registry.example".into()),
                scope: Some("repository:a/b:pull,push".into()),
            }
        );
        assert_eq!(
            Challenge::parse(r#"Basic realm="Registry Realm""#),
            Challenge::Basic
        );
        assert_eq!(Challenge::parse("Bearer service=x"), Challenge::Other);
        assert_eq!(Challenge::parse("Negotiate"), Challenge::Other);
    }

    #[test]
    fn moves_stay_on_listed_hosts_and_never_drop_to_plain_http() {
        let endpoints = Endpoints::new(["registry.example".into(), "10.0.0.1:5000".into()]);
        let url = |u: &str| Url::parse(u).unwrap();
        let from = url("https://registry.example/v2/a/manifests/v1");
        assert_eq!(
            refused_move(&endpoints, &from, &url("https://registry.example/x")),
            None
        );
        assert_eq!(
            refused_move(&endpoints, &from, &url("https://registry.example:443/x")),
            None
        );
        assert_eq!(
            refused_move(&endpoints, &from, &url("https://10.0.0.1:5000/x")),
            None
        );
        for elsewhere in [
            "https://10.0.0.1:6443/x",
            "https://169.254.169.254/latest",
            "https://registry.example:8443/x",
            "http://registry.example/x",
            "file:///etc/passwd",
        ] {
            assert!(
                refused_move(&endpoints, &from, &url(elsewhere)).is_some(),
                "{elsewhere}"
            );
        }
        let plain = url("http://10.0.0.1:5000/v2/a/blobs/x");
        assert_eq!(
            refused_move(&endpoints, &plain, &url("http://10.0.0.1:5000/y")),
            None
        );
    }
}
