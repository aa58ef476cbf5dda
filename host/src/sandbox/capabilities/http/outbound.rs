//! The seam between the HTTP capability and whoever sends its requests (the live network in
//! `run`, fixtures in the offline runner): one checked request in, one whole response out.
//! Apart from `mod.rs`, so that the contexts that hold an [`Outbound`] do not import the
//! capability implemented on them.

use std::time::{Duration, Instant};

use async_trait::async_trait;
use bytes::Bytes;
use http::HeaderMap;
use wasmtime_wasi_http::Error;

use super::address::AddressPolicy;
use crate::config::ValueFrom;

/// One checked request, credentials added, as a provider sends it.
#[derive(Debug)]
pub struct OutboundRequest {
    pub(crate) method: http::Method,
    pub(crate) uri: http::Uri,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
    /// Which addresses the provider may connect to, after it resolved the host.
    pub(crate) addresses: AddressPolicy,
    /// PEM certificates trusted besides the system roots.
    pub(crate) ca_bundle: Option<Vec<u8>>,
    /// Everything (resolution, connection, TLS, the whole response) ends by then.
    pub(crate) deadline: Instant,
    /// The guest's own timeouts (`request-options`), each within the deadline.
    pub(crate) connect_timeout: Option<Duration>,
    pub(crate) first_byte_timeout: Option<Duration>,
    pub(crate) between_bytes_timeout: Option<Duration>,
    /// Caps on the response, checked while it streams.
    pub(crate) max_body: usize,
}

/// A whole response, its body read within the caps.
#[derive(Debug, Clone)]
pub struct OutboundResponse {
    pub(crate) status: http::StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// Sends checked requests and reads the values a grant's credentials name: the live network
/// and the host's namespace in `run`, fixtures in the offline runner.
#[async_trait]
pub trait Outbound: Send + Sync {
    async fn send(&self, request: OutboundRequest) -> Result<OutboundResponse, Error>;
    /// The bytes of a Secret's or ConfigMap's key, or why they cannot be read.
    async fn value(&self, from: &ValueFrom) -> Result<Vec<u8>, ValueError>;
}

/// Why the value a grant's credential names cannot be read: names the object and key, never a
/// value. `kind` is `Secret` or `ConfigMap`; `object` is `NAMESPACE/NAME` where the namespace
/// is known.
#[derive(Debug, thiserror::Error)]
pub enum ValueError {
    #[error("{0}: this host has no API server to read it from")]
    NoApiServer(String),
    #[error("cannot read {kind} {object}: {source}")]
    Read {
        kind: &'static str,
        object: String,
        source: kube::Error,
    },
    #[error("{kind} {object} has no key {key}")]
    NoKey {
        kind: &'static str,
        object: String,
        key: String,
    },
    #[error(
        "Secret {object} key {key} is not base64 (a Secret's data is; write plain text under stringData)"
    )]
    NotBase64 { object: String, key: String },
    #[error(
        "{kind} {name} is not among the loaded objects: add it, with {key} in its data, to them"
    )]
    NotLoaded {
        kind: &'static str,
        name: String,
        key: String,
    },
    #[error(
        "the loaded objects hold a {kind} {name} in several namespaces ({namespaces}): `run` reads the host's namespace only; keep one"
    )]
    Ambiguous {
        kind: &'static str,
        name: String,
        namespaces: String,
    },
}
