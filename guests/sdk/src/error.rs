//! Failures of host calls ([`HostError`]) and of a reconcile ([`ReconcileError`]).
//!
//! `?` on a host call inside `reconcile` converts with this mapping:
//!
//! | host error | reconcile error | why |
//! |---|---|---|
//! | `conflict` | transient | the object moved on; a retry reads the new version |
//! | `unavailable` | transient | the API server or backend is down or overloaded; backoff helps |
//! | `other` | transient | unknown cause; retrying with backoff is the safe default |
//! | `invalid` | permanent | the same request would be rejected again; the object must change |
//! | `denied` | permanent | the grant is missing; retrying cannot help until the operator changes the configuration (which reloads the guest) |
//! | `not-found` | permanent | a write hit an object that is gone; its deletion or re-creation triggers a new reconcile |
//!
//! Handle an error yourself (match on [`HostError`]) where the guest knows better, e.g. to
//! record a condition before giving up.

use crate::{HostError, ReconcileError};

/// A reconcile failure worth retrying with backoff.
pub fn transient(message: impl Into<String>) -> ReconcileError {
    ReconcileError::Transient(message.into())
}

/// A reconcile failure that waits for the next change of the object.
pub fn permanent(message: impl Into<String>) -> ReconcileError {
    ReconcileError::Permanent(message.into())
}

impl HostError {
    /// The contract's name for the failure: `denied`, `not-found`, `conflict`, `invalid`,
    /// `unavailable` or `other`.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            HostError::Denied(_) => "denied",
            HostError::NotFound(_) => "not-found",
            HostError::Conflict(_) => "conflict",
            HostError::Invalid(_) => "invalid",
            HostError::Unavailable(_) => "unavailable",
            HostError::Other(_) => "other",
        }
    }

    /// The host's text: what failed and where.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            HostError::Denied(m)
            | HostError::NotFound(m)
            | HostError::Conflict(m)
            | HostError::Invalid(m)
            | HostError::Unavailable(m)
            | HostError::Other(m) => m,
        }
    }

    /// `kind: message`, e.g. `denied: no read grant for v1/Secret`. (The generated `Display`
    /// prints the Rust debug form instead.)
    #[must_use]
    pub fn describe(&self) -> String {
        format!("{}: {}", self.kind(), self.message())
    }

    /// Whether a retry of the same call could succeed (see the table in [`crate::error`]).
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            HostError::Conflict(_) | HostError::Unavailable(_) | HostError::Other(_)
        )
    }
}

impl From<HostError> for ReconcileError {
    fn from(e: HostError) -> Self {
        if e.is_transient() {
            ReconcileError::Transient(e.describe())
        } else {
            ReconcileError::Permanent(e.describe())
        }
    }
}

impl ReconcileError {
    /// The text without the retry classification.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            ReconcileError::Transient(m) | ReconcileError::Permanent(m) => m,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_host_errors_become_transient_and_the_rest_permanent() {
        let cases = [
            (HostError::Conflict("c".into()), true),
            (HostError::Unavailable("u".into()), true),
            (HostError::Other("o".into()), true),
            (HostError::Invalid("i".into()), false),
            (HostError::Denied("d".into()), false),
            (HostError::NotFound("n".into()), false),
        ];
        for (host, transient) in cases {
            let text = host.describe();
            let mapped = ReconcileError::from(host);
            assert_eq!(
                matches!(mapped, ReconcileError::Transient(_)),
                transient,
                "{text}"
            );
            assert_eq!(mapped.message(), text);
        }
    }

    #[test]
    fn describe_reads_like_the_contract() {
        assert_eq!(
            HostError::NotFound("ConfigMap ns/a".into()).describe(),
            "not-found: ConfigMap ns/a"
        );
    }
}
