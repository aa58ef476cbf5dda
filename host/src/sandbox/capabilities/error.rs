//! Why a host call failed, as the capabilities say it and as the guest receives it.

use crate::cluster::validation::Invalid;
use crate::config::Denied;
use crate::metrics::HostCallOutcome;
use crate::sandbox::wit::types;

/// Why a host call failed; mirrors the WIT `error` variant (plus `Limited`, which the guest
/// sees as `unavailable`: a rate or quota, worth retrying later).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    #[error("denied: {0}")]
    Denied(String),
    /// The API server refused a write sent as the guest's ServiceAccount (`403`): the guest
    /// sees `denied`, the metrics tell it from the host's own denial.
    #[error("denied: {0}")]
    Forbidden(String),
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    /// An unforced apply met fields another field manager owns (the API server's 409 "Apply
    /// failed with N conflicts"): the guest sees `conflict`, but the object was not stale, so
    /// the host does not retry the reconcile for it (see `CallContext::conflicted`).
    #[error("conflict: {0}")]
    FieldConflict(String),
    #[error("invalid: {0}")]
    Invalid(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("limited: {0}")]
    Limited(String),
    #[error("{0}")]
    Other(String),
}

impl From<Denied> for HostError {
    fn from(d: Denied) -> Self {
        HostError::Denied(d.to_string())
    }
}

impl From<Invalid> for HostError {
    fn from(e: Invalid) -> Self {
        HostError::Invalid(e.to_string())
    }
}

impl From<HostError> for types::Error {
    fn from(e: HostError) -> Self {
        match e {
            HostError::Denied(m) | HostError::Forbidden(m) => types::Error::Denied(m),
            HostError::NotFound(m) => types::Error::NotFound(m),
            HostError::Conflict(m) | HostError::FieldConflict(m) => types::Error::Conflict(m),
            HostError::Invalid(m) => types::Error::Invalid(m),
            HostError::Unavailable(m) | HostError::Limited(m) => types::Error::Unavailable(m),
            HostError::Other(m) => types::Error::Other(m),
        }
    }
}

impl HostError {
    /// The WIT variant's name, as recordings print it.
    pub(super) fn kind(&self) -> &'static str {
        match self {
            HostError::Denied(_) | HostError::Forbidden(_) => "denied",
            HostError::NotFound(_) => "not-found",
            HostError::Conflict(_) | HostError::FieldConflict(_) => "conflict",
            HostError::Invalid(_) => "invalid",
            HostError::Unavailable(_) | HostError::Limited(_) => "unavailable",
            HostError::Other(_) => "other",
        }
    }

    pub(super) fn message(&self) -> &str {
        match self {
            HostError::Denied(m)
            | HostError::Forbidden(m)
            | HostError::NotFound(m)
            | HostError::Conflict(m)
            | HostError::FieldConflict(m)
            | HostError::Invalid(m)
            | HostError::Unavailable(m)
            | HostError::Limited(m)
            | HostError::Other(m) => m,
        }
    }

    pub(super) fn outcome(&self) -> HostCallOutcome {
        match self {
            HostError::Denied(_) => HostCallOutcome::Denied,
            HostError::Forbidden(_) => HostCallOutcome::DeniedByApiServer,
            HostError::Invalid(_) => HostCallOutcome::Invalid,
            HostError::Limited(_) => HostCallOutcome::Limited,
            _ => HostCallOutcome::Error,
        }
    }
}
