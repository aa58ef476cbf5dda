//! The host side of every imported WIT interface, one module each. A capability does exactly
//! two things: check the calling guest's grant, then call its provider (a trait object chosen
//! by the host: informer caches and the API server in `run`, in-memory fixtures in the offline
//! runner). Every call is counted, and optionally recorded for the offline runner's output.
//!
//! Imports are synchronous on the WebAssembly side. A reconcile runs on a blocking thread (see
//! `runtime`), so a capability that needs the network blocks that thread on the tokio handle
//! it carries; the reconcile deadline bounds the wait.

pub mod backend;
mod cluster;
mod lister;
mod log;
mod queue;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::Serialize;
use serde_json::Value;

use crate::backends::NetworkBackend;
use crate::config::{Denied, Grant};
use crate::metrics::HostCallOutcome;
use crate::objects::{Gvk, ObjectRef};
use crate::wit::types;

/// Why a host call failed; mirrors the WIT `error` variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("denied: {0}")]
    Denied(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("{0}")]
    Other(String),
}

impl From<Denied> for HostError {
    fn from(d: Denied) -> Self {
        HostError::Denied(d.to_string())
    }
}

impl From<HostError> for types::Error {
    fn from(e: HostError) -> Self {
        match e {
            HostError::Denied(m) => types::Error::Denied(m),
            HostError::NotFound(m) => types::Error::NotFound(m),
            HostError::Conflict(m) => types::Error::Conflict(m),
            HostError::Invalid(m) => types::Error::Invalid(m),
            HostError::Unavailable(m) => types::Error::Unavailable(m),
            HostError::Other(m) => types::Error::Other(m),
        }
    }
}

impl From<crate::backends::BackendError> for HostError {
    fn from(e: crate::backends::BackendError) -> Self {
        use crate::backends::BackendError as B;
        match e {
            B::Invalid(m) => HostError::Invalid(m),
            B::Unavailable(m) => HostError::Unavailable(m),
            B::Other(m) => HostError::Other(m),
        }
    }
}

/// Reads of cached objects, as JSON text.
pub trait Lister: Send + Sync {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError>;
    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, HostError>;
}

/// An event as a guest asks for it; the provider aggregates repeats.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    pub regarding: ObjectRef,
    #[serde(rename = "type")]
    pub event_type: &'static str,
    pub reason: String,
    pub message: String,
}

/// Writes to the API server. `manager` is the guest's name (field manager, event reporter).
#[async_trait]
pub trait Cluster: Send + Sync {
    async fn patch_status(
        &self,
        manager: &str,
        object: &ObjectRef,
        patch: &Value,
    ) -> Result<Value, HostError>;
    async fn apply(&self, manager: &str, object: &Value) -> Result<Value, HostError>;
    async fn delete(&self, manager: &str, object: &ObjectRef) -> Result<bool, HostError>;
    async fn record_event(&self, manager: &str, event: &EventRecord) -> Result<(), HostError>;
}

/// The calling guest's own work queue.
pub trait WorkQueue: Send + Sync {
    fn enqueue(
        &self,
        namespace: Option<String>,
        name: String,
        after: Option<Duration>,
    ) -> Result<(), HostError>;
}

/// The providers behind the capabilities, chosen by the host (`run` or the offline runner).
#[derive(Clone)]
pub struct Providers {
    pub lister: Arc<dyn Lister>,
    pub cluster: Arc<dyn Cluster>,
    pub queue: Arc<dyn WorkQueue>,
    /// Backends by configured name (`network`).
    pub networks: BTreeMap<String, Arc<dyn NetworkBackend>>,
}

/// Everything a guest's imports need that lives as long as the guest is loaded.
pub struct GuestContext {
    pub guest: String,
    pub grant: Grant,
    pub providers: Providers,
    pub metrics: Option<crate::metrics::Metrics>,
    /// A fixed wall-clock time for the guest (offline runs that must be reproducible).
    pub fixed_clock: Option<std::time::SystemTime>,
}

/// One import call, as the offline runner prints it: JSON payloads embedded as JSON.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Call {
    pub interface: &'static str,
    pub function: &'static str,
    pub args: Value,
    pub returned: Value,
}

/// Per-reconcile state of the capabilities: who is calling, about which key, until when.
pub struct CallContext {
    pub guest: Arc<GuestContext>,
    /// Display form of the key being reconciled, for log lines.
    pub key: String,
    pub deadline: Instant,
    pub runtime: Option<tokio::runtime::Handle>,
    /// Set when any write hit a 409: the host retries the reconcile whatever the guest returns.
    pub conflicted: bool,
    /// When set, every call is appended here (offline runner, conformance tests).
    pub calls: Option<Vec<Call>>,
}

impl CallContext {
    /// Runs a provider future to completion on this blocking thread, bounded by the deadline.
    fn block_on<T>(
        &self,
        fut: impl std::future::Future<Output = Result<T, HostError>>,
    ) -> Result<T, HostError> {
        let remaining = self.deadline.saturating_duration_since(Instant::now());
        let Some(handle) = &self.runtime else {
            return Err(HostError::Unavailable(
                "no async runtime for host calls".into(),
            ));
        };
        handle.block_on(async {
            tokio::time::timeout(remaining, fut)
                .await
                .unwrap_or_else(|_| {
                    Err(HostError::Unavailable(
                        "the reconcile deadline passed while waiting for the host call".into(),
                    ))
                })
        })
    }

    /// Counts (and, when recording, records) one finished call. `args` and `returned` build
    /// the recorded JSON only when recording, so the hot path pays nothing for them.
    fn finish<T>(
        &mut self,
        interface: &'static str,
        function: &'static str,
        args: impl FnOnce() -> Value,
        result: &Result<T, HostError>,
        returned: impl FnOnce(&T) -> Value,
    ) {
        if let Some(metrics) = &self.guest.metrics {
            let outcome = match result {
                Ok(_) => HostCallOutcome::Ok,
                Err(HostError::Denied(_)) => HostCallOutcome::Denied,
                Err(_) => HostCallOutcome::Error,
            };
            metrics.host_call(&self.guest.guest, interface, function, outcome);
        }
        if matches!(result, Err(HostError::Conflict(_))) {
            self.conflicted = true;
        }
        if let Some(calls) = &mut self.calls {
            let returned = match result {
                Ok(v) => serde_json::json!({ "ok": returned(v) }),
                Err(e) => serde_json::json!({ "error": error_json(e) }),
            };
            calls.push(Call {
                interface,
                function,
                args: args(),
                returned,
            });
        }
    }
}

/// Records a returned value as it is.
fn as_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

fn error_json(e: &HostError) -> Value {
    let (kind, message) = match e {
        HostError::Denied(m) => ("denied", m),
        HostError::NotFound(m) => ("not-found", m),
        HostError::Conflict(m) => ("conflict", m),
        HostError::Invalid(m) => ("invalid", m),
        HostError::Unavailable(m) => ("unavailable", m),
        HostError::Other(m) => ("other", m),
    };
    serde_json::json!({ kind: message })
}

/// Parses JSON text a guest handed over; a parse failure is the guest's `invalid` error.
fn parse_json(text: &str, what: &str) -> Result<Value, HostError> {
    serde_json::from_str(text)
        .map_err(|e| HostError::Invalid(format!("{what} is not valid JSON: {e}")))
}

/// Parses the lister's optional label selector; a bad one is the guest's `invalid` error.
pub fn label_selector(selector: Option<&str>) -> Result<Option<kube::core::Selector>, HostError> {
    selector
        .map(crate::informers::parse_selector)
        .transpose()
        .map_err(|e| HostError::Invalid(e.to_string()))
}

/// Embeds JSON text as JSON in recorded calls (falls back to the string if it does not parse).
fn embed(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_owned()))
}

impl CallContext {
    /// A context for reconciling `key`; the deadline is reset when the reconcile starts.
    pub fn new(
        guest: Arc<GuestContext>,
        key: String,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        let deadline = Instant::now() + guest.grant.limits.deadline();
        Self {
            guest,
            key,
            deadline,
            runtime,
            conflicted: false,
            calls: None,
        }
    }

    /// Records every call of this reconcile (see [`Call`]).
    pub fn recording(mut self) -> Self {
        self.calls = Some(Vec::new());
        self
    }
}

impl GuestContext {
    /// A context whose every call is denied: used while a guest describes itself.
    pub fn deny_all(file: &str) -> Self {
        let deny = Arc::new(DenyAll);
        Self {
            guest: file.to_owned(),
            grant: Grant::default(),
            providers: Providers {
                lister: deny.clone(),
                cluster: deny.clone(),
                queue: deny,
                networks: BTreeMap::new(),
            },
            metrics: None,
            fixed_clock: None,
        }
    }
}

/// Providers for a guest that may not call anything yet.
struct DenyAll;

const LOADING: &str = "host calls are not available while the guest is being loaded (manifest)";

impl Lister for DenyAll {
    fn get(&self, _: &ObjectRef) -> Result<Option<String>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    fn list(&self, _: &Gvk, _: Option<&str>, _: Option<&str>) -> Result<Vec<String>, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
}

#[async_trait]
impl Cluster for DenyAll {
    async fn patch_status(&self, _: &str, _: &ObjectRef, _: &Value) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn apply(&self, _: &str, _: &Value) -> Result<Value, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn delete(&self, _: &str, _: &ObjectRef) -> Result<bool, HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
    async fn record_event(&self, _: &str, _: &EventRecord) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
}

impl WorkQueue for DenyAll {
    fn enqueue(&self, _: Option<String>, _: String, _: Option<Duration>) -> Result<(), HostError> {
        Err(HostError::Denied(LOADING.into()))
    }
}
