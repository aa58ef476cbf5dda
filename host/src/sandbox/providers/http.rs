//! Outbound HTTP in `run`: requests the capability checked ([`crate::sandbox::capabilities::http`]) go
//! out here, and the values a grant's credentials name are read from the host's namespace.
//!
//! The host resolves the name itself and connects to an address it checked, never to the name
//! (a second lookup could answer an internal address: DNS rebinding). One connection per
//! request over HTTP/1.1 (hyper's client connection, rustls for TLS with the system's roots and
//! a grant's CA bundle); redirects are not followed here: the guest sees the 3xx and its next
//! request is checked against the grant like any other. Response headers are capped by hyper
//! as they are parsed, the body while it streams; everything ends at the reconcile's deadline.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use tokio::net::TcpStream;
use wasmtime_wasi_http::Error;

use crate::config::ValueFrom;
use crate::sandbox::capabilities::http::{
    MAX_HEADERS, MAX_RESPONSE_HEADER_BYTES, Outbound, OutboundRequest, OutboundResponse, ValueError,
};

/// A value read from a Secret or ConfigMap is used this long before it is read again, so a
/// rotated key takes effect within it and a busy guest does not read the Secret per request.
const VALUE_TTL: Duration = Duration::from_secs(30);

/// A value read, and when.
type Cached = (Instant, Arc<Vec<u8>>);

/// Sends guests' requests to the network and reads credentials from the host's namespace.
pub struct LiveOutbound {
    /// None: no API server (a host run without one reads no credentials).
    client: Option<kube::Client>,
    namespace: String,
    values: Mutex<BTreeMap<ValueFrom, Cached>>,
    /// Values given up front, never read again (tests, the offline runner's fixtures).
    fixed: BTreeMap<ValueFrom, Vec<u8>>,
}

impl LiveOutbound {
    pub fn new(client: Option<kube::Client>, namespace: String) -> Self {
        Self {
            client,
            namespace,
            values: Mutex::default(),
            fixed: BTreeMap::new(),
        }
    }

    /// Sends to the network with these values for the credentials, and no API server.
    pub fn with_values(values: BTreeMap<ValueFrom, Vec<u8>>) -> Self {
        Self {
            fixed: values,
            ..Self::new(None, String::new())
        }
    }
}

#[async_trait]
impl Outbound for LiveOutbound {
    async fn send(&self, request: OutboundRequest) -> Result<OutboundResponse, Error> {
        send(request).await
    }

    async fn value(&self, from: &ValueFrom) -> Result<Vec<u8>, ValueError> {
        if let Some(value) = self.fixed.get(from) {
            return Ok(value.clone());
        }
        if let Some((at, value)) = self.values.lock().expect("values lock").get(from)
            && at.elapsed() < VALUE_TTL
        {
            return Ok(value.to_vec());
        }
        let client = self
            .client
            .clone()
            .ok_or_else(|| ValueError::NoApiServer(from.to_string()))?;
        let namespace = &self.namespace;
        let value = match from {
            ValueFrom::SecretKeyRef(r) => {
                let object = format!("{namespace}/{}", r.name);
                let secret = Api::<Secret>::namespaced(client, namespace)
                    .get(&r.name)
                    .await
                    .map_err(|source| ValueError::Read {
                        kind: "Secret",
                        object: object.clone(),
                        source,
                    })?;
                secret
                    .data
                    .and_then(|mut data| data.remove(&r.key))
                    .map(|bytes| bytes.0)
                    .ok_or_else(|| ValueError::NoKey {
                        kind: "Secret",
                        object,
                        key: r.key.clone(),
                    })?
            }
            ValueFrom::ConfigMapKeyRef(r) => {
                let object = format!("{namespace}/{}", r.name);
                let map = Api::<ConfigMap>::namespaced(client, namespace)
                    .get(&r.name)
                    .await
                    .map_err(|source| ValueError::Read {
                        kind: "ConfigMap",
                        object: object.clone(),
                        source,
                    })?;
                map.data
                    .and_then(|mut data| data.remove(&r.key))
                    .map(String::into_bytes)
                    .ok_or_else(|| ValueError::NoKey {
                        kind: "ConfigMap",
                        object,
                        key: r.key.clone(),
                    })?
            }
        };
        let value = Arc::new(value);
        self.values
            .lock()
            .expect("values lock")
            .insert(from.clone(), (Instant::now(), value.clone()));
        Ok(value.to_vec())
    }
}

/// The system's trusted roots, read once.
fn system_roots() -> &'static rustls::RootCertStore {
    static ROOTS: OnceLock<rustls::RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let mut roots = rustls::RootCertStore::empty();
        let found = rustls_native_certs::load_native_certs();
        let (added, _) = roots.add_parsable_certificates(found.certs);
        if added == 0 {
            tracing::warn!("no system root certificates found: HTTPS requests of guests trust only their grant's CA bundle");
        }
        roots
    })
}

/// A denial of an address, as the guest receives it.
fn denied(text: &str) -> Error {
    Error::InternalError(Some(format!("denied: {text}")))
}

/// Resolves, checks, connects, sends and reads the whole response.
async fn send(request: OutboundRequest) -> Result<OutboundResponse, Error> {
    let deadline = tokio::time::Instant::from_std(request.deadline);
    let uri = request.uri.clone();
    let host = uri.host().ok_or(Error::HttpRequestUriInvalid)?.to_owned();
    let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
    let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
    let address = resolve(&request, &host, port).await?;
    let connect = async {
        let stream = TcpStream::connect(address).await.map_err(connect_error)?;
        let _ = stream.set_nodelay(true);
        Ok::<_, Error>(stream)
    };
    let stream = within(
        deadline,
        request.connect_timeout,
        connect,
        Error::ConnectionTimeout,
    )
    .await?;
    let mut builder = hyper::client::conn::http1::Builder::new();
    builder
        .max_headers(MAX_HEADERS)
        .max_buf_size(MAX_RESPONSE_HEADER_BYTES.max(8192));
    let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_owned();
    let mut outgoing = http::Request::builder()
        .method(request.method.clone())
        .uri(path)
        .body(http_body_util::Full::new(request.body.clone()))
        .map_err(|_| Error::HttpRequestUriInvalid)?;
    *outgoing.headers_mut() = request.headers.clone();
    let exchange = async {
        if https {
            let tls = tls_connector(request.ca_bundle.as_deref())?;
            let name = rustls::pki_types::ServerName::try_from(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_owned(),
            )
            .map_err(|_| Error::HttpRequestUriInvalid)?;
            let stream = tls
                .connect(name, stream)
                .await
                .map_err(|e| Error::InternalError(Some(format!("TLS with {host}: {e}"))))?;
            exchange(&builder, TokioIo::new(stream), outgoing, &request, deadline).await
        } else {
            exchange(&builder, TokioIo::new(stream), outgoing, &request, deadline).await
        }
    };
    tokio::time::timeout_at(deadline, exchange)
        .await
        .unwrap_or(Err(Error::HttpResponseTimeout))
}

/// The first address of `host` the request may connect to: a literal IP as it is, a name
/// resolved by the host. Every address the name resolves to is checked; when none may be
/// reached, the refusal names them and why.
async fn resolve(request: &OutboundRequest, host: &str, port: u16) -> Result<SocketAddr, Error> {
    let literal = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<SocketAddr> = if let Ok(ip) = literal.parse::<std::net::IpAddr>() {
        vec![SocketAddr::new(ip, port)]
    } else {
        let lookup = tokio::net::lookup_host((literal, port));
        tokio::time::timeout_at(request.deadline.into(), lookup)
            .await
            .map_err(|_| Error::DnsTimeout)?
            .map_err(|e| Error::DnsError {
                rcode: Some(e.to_string()),
                info_code: None,
            })?
            .collect()
    };
    let mut refused = Vec::new();
    for address in &addresses {
        match request.addresses.check(address.ip()) {
            Ok(()) => return Ok(*address),
            Err(what) => refused.push(format!("{} is {what}", address.ip())),
        }
    }
    if refused.is_empty() {
        return Err(Error::DestinationNotFound);
    }
    Err(denied(&format!(
        "{} {}: {host} resolves only to addresses the host does not connect to ({}): only a grant prefix naming such an address literally reaches it",
        request.method,
        request.uri,
        refused.join(", ")
    )))
}

fn connect_error(e: std::io::Error) -> Error {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => Error::ConnectionRefused,
        std::io::ErrorKind::TimedOut => Error::ConnectionTimeout,
        _ => Error::Connect(e),
    }
}

/// `future` within the deadline and the guest's own timeout, whichever ends first.
async fn within<T>(
    deadline: tokio::time::Instant,
    timeout: Option<Duration>,
    future: impl Future<Output = Result<T, Error>>,
    on_timeout: Error,
) -> Result<T, Error> {
    let until = timeout.map_or(deadline, |t| deadline.min(tokio::time::Instant::now() + t));
    tokio::time::timeout_at(until, future)
        .await
        .unwrap_or(Err(on_timeout))
}

fn tls_connector(ca_bundle: Option<&[u8]>) -> Result<tokio_rustls::TlsConnector, Error> {
    let mut roots = system_roots().clone();
    if let Some(pem) = ca_bundle {
        use rustls::pki_types::pem::PemObject as _;
        let mut added = 0;
        for cert in rustls::pki_types::CertificateDer::pem_slice_iter(pem) {
            let cert = cert.map_err(|e| {
                Error::InternalError(Some(format!(
                    "unavailable: the grant's CA bundle is not PEM: {e}"
                )))
            })?;
            roots.add(cert).map_err(|e| {
                Error::InternalError(Some(format!(
                    "unavailable: the grant's CA bundle holds an unusable certificate: {e}"
                )))
            })?;
            added += 1;
        }
        if added == 0 {
            return Err(Error::InternalError(Some(
                "unavailable: the grant's CA bundle holds no certificate".to_owned(),
            )));
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|_| Error::ConfigurationError)?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// One request on a fresh connection, the response read whole within the caps.
async fn exchange<S>(
    builder: &hyper::client::conn::http1::Builder,
    io: TokioIo<S>,
    outgoing: http::Request<http_body_util::Full<Bytes>>,
    request: &OutboundRequest,
    deadline: tokio::time::Instant,
) -> Result<OutboundResponse, Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let (mut sender, connection) = builder.handshake(io).await.map_err(Error::from)?;
    // The connection is driven by its own task; it ends with the response (one request).
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let _abort = AbortOnDrop(driver);
    let response = within(
        deadline,
        request.first_byte_timeout,
        async { sender.send_request(outgoing).await.map_err(Error::from) },
        Error::ConnectionReadTimeout,
    )
    .await?;
    let (mut parts, mut body) = response.into_parts();
    check_head(&parts.headers)?;
    let mut collected = Vec::new();
    loop {
        let frame = within(
            deadline,
            request.between_bytes_timeout,
            async { Ok(body.frame().await) },
            Error::ConnectionReadTimeout,
        )
        .await?;
        let Some(frame) = frame else { break };
        if let Ok(data) = frame.map_err(Error::from)?.into_data() {
            if collected.len() + data.len() > request.max_body {
                return Err(Error::HttpResponseBodySize(Some(
                    (collected.len() + data.len()) as u64,
                )));
            }
            collected.extend_from_slice(&data);
        }
    }
    // Hop-by-hop framing of this connection: the guest receives the body whole.
    for name in [http::header::TRANSFER_ENCODING, http::header::CONNECTION] {
        parts.headers.remove(name);
    }
    Ok(OutboundResponse {
        status: parts.status,
        headers: parts.headers,
        body: Bytes::from(collected),
    })
}

/// A response's headers within the cap, and no transfer coding beside `chunked`: one such
/// (`gzip, chunked`) reaches the client still encoded, and the host could neither hand the
/// guest a body it can read nor look in it for credentials.
fn check_head(headers: &http::HeaderMap) -> Result<(), Error> {
    let header_bytes: usize = headers
        .iter()
        .map(|(name, value)| name.as_str().len() + value.len())
        .sum();
    if header_bytes > MAX_RESPONSE_HEADER_BYTES {
        return Err(Error::HttpResponseHeaderSectionSize(
            u32::try_from(header_bytes).ok(),
        ));
    }
    if let Some(coding) = headers
        .get_all(http::header::TRANSFER_ENCODING)
        .iter()
        .flat_map(|v| {
            String::from_utf8_lossy(v.as_bytes())
                .split(',')
                .map(|c| c.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .find(|c| !c.is_empty() && c != "chunked" && c != "identity")
    {
        return Err(Error::InternalError(Some(format!(
            "unavailable: the response has transfer coding {coding}, which the host does not \
             decode (it asks for none); only chunked is read"
        ))));
    }
    Ok(())
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
