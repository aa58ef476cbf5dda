//! Why a pull failed, in words that name the module and what to change.

/// Why a pull failed.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{module}: cannot reach the registry: {error}")]
    Unreachable { module: String, error: String },
    #[error("{module}: the registry refused the credentials: {error}")]
    Denied { module: String, error: String },
    #[error("{module}: not found in the registry: {error}")]
    NotFound { module: String, error: String },
    #[error("{module}: {what} has digest {got}, expected {expected}")]
    DigestMismatch {
        module: String,
        what: String,
        expected: String,
        got: String,
    },
    #[error("{module}: {size} exceeds the cap of {max} bytes{hint}")]
    TooLarge {
        module: String,
        size: String,
        max: u64,
        /// How to raise the cap, when the configuration sets it (`""` for fixed caps).
        hint: &'static str,
    },
    #[error("{module}: not a Wasm component artifact: {reason}")]
    NotAWasmArtifact { module: String, reason: String },
    #[error("{module}: the registry failed: {error}")]
    Registry { module: String, error: String },
    #[error(
        "{module}: the module cache would exceed registries.cacheMaxBytes ({max} bytes): {in_use} bytes hold modules in use and this one needs {needed}; raise the bound"
    )]
    CacheFull {
        module: String,
        max: u64,
        in_use: u64,
        needed: u64,
    },
    /// `policy` names the setting that requires signatures (`reconcilers.verify`, a tenant
    /// rule's `verify`, `--verify-key`).
    #[error(
        "{module}: no signature of {digest} was found (signatures are required: {policy}); sign it with `cosign sign --key KEY` and a key {policy} trusts"
    )]
    SignatureMissing {
        module: String,
        digest: String,
        policy: String,
    },
    #[error("{module}: {reason} ({policy} lists the keys and keyless identities trusted)")]
    SignatureInvalid {
        module: String,
        reason: String,
        policy: String,
    },
    #[error("module cache: {0}")]
    Cache(#[from] std::io::Error),
}
