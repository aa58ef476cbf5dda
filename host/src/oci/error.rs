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
    NotAWasmArtifact {
        module: String,
        reason: super::artifact::ArtifactError,
    },
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

/// Why the keys and keyless identities a setting trusts cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum TrustError {
    #[error(
        "no key and no keyless identity is listed: signatures required, and none could be verified"
    )]
    NothingTrusted,
    #[error("{}: cannot read the key: {source}", path.display())]
    ReadKey {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{name}: not an ECDSA P-256 public key in PEM, as `cosign generate-key-pair` writes ({reason})"
    )]
    NotAKey { name: String, reason: String },
    #[error("{}: cannot read the trusted root: {source}", path.display())]
    ReadRoot {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {problem}", path.display())]
    Root {
        path: std::path::PathBuf,
        problem: RootProblem,
    },
}

/// What is wrong in a trusted root (Sigstore's `trusted_root.json`) or the identities beside it.
#[derive(Debug, thiserror::Error)]
pub enum RootProblem {
    #[error("not a trusted root (JSON): {0}")]
    NotJson(serde_json::Error),
    #[error("the trusted root lists no certificate authority")]
    NoAuthority,
    #[error("a certificate authority's certificate is not base64")]
    AuthorityNotBase64,
    #[error("certificate authority {0} has no certificate")]
    AuthorityEmpty(String),
    #[error("validFor.{field}: {source}")]
    Validity {
        field: &'static str,
        source: humantime::TimestampError,
    },
    #[error(
        "the trusted root lists transparency logs, none with an ECDSA P-256 key (the only kind checked)"
    )]
    NoCheckedLog,
    #[error("keyless: no identity is listed (issuer and subject)")]
    NoIdentity,
    #[error("subjectRegExp {pattern:?}: {source}")]
    SubjectPattern {
        pattern: String,
        source: regex::Error,
    },
    #[error("identity of issuer {0}: give exactly one of subject and subjectRegExp")]
    SubjectChoice(String),
}

/// Why one signature does not count: what about it a trusted key, root or log refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Rejection {
    #[error("does not decode")]
    Undecodable,
    #[error("made by no trusted key")]
    NoTrustedKey,
    #[error("keyless (a certificate's key), and no keyless identity is trusted")]
    NoKeylessTrusted,
    #[error("its certificate is not base64")]
    CertificateNotBase64,
    #[error("its certificate is not X.509 DER: {0}")]
    CertificateNotDer(String),
    #[error("its certificate's key cannot be read: {0}")]
    CertificateKeyUnreadable(String),
    #[error("its certificate's key is not ECDSA P-256")]
    CertificateKeyNotP256,
    #[error("it does not verify with its certificate's key")]
    BadSignature,
    #[error("its certificate names {subjects} (issuer {issuer}), not an allowed identity")]
    NotAllowed { subjects: String, issuer: String },
    #[error("its certificate's subject names do not parse: {0}")]
    SubjectNames(String),
    #[error("its certificate names no OIDC issuer (Fulcio's extension)")]
    NoIssuer,
    #[error("its certificate cannot be used: {0}")]
    CertificateUnusable(String),
    #[error("a trusted authority's certificate cannot be used: {0}")]
    AuthorityUnusable(String),
    #[error("its certificate does not chain to a trusted authority ({0})")]
    NoChain(String),
    #[error("no trusted authority was valid when it was signed")]
    NoAuthorityValid,
    #[error("it has no transparency log entry, and the trusted root requires one")]
    NoLogEntry,
    #[error("its log entry has a negative time")]
    NegativeLogTime,
    #[error("its log entry is from no log the trusted root lists")]
    UnknownLog,
    #[error("its log entry cannot be written as canonical JSON: {0}")]
    Canonical(String),
    #[error("its signed entry timestamp is not a signature")]
    TimestampNotSignature,
    #[error("its signed entry timestamp does not verify with the log's key")]
    TimestampInvalid,
    #[error("its log entry's body is not JSON")]
    BodyNotJson,
    #[error("its log entry is of a kind not checked: {0:?}")]
    LogKind(Option<String>),
    #[error("its log entry records another signature or certificate")]
    NotBound,
}
