//! Guests as OCI artifacts: `reconciler-host push` writes a component to a registry in the CNCF
//! TAG-Runtime Wasm layout, and a guest given as `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`
//! is pulled by the host, verified and kept in a bounded, content-addressed cache.
//!
//! - [`ModuleRef`]: the `oci://` reference; the registry is always explicit (no Docker Hub
//!   default), a digest is `sha256:` and 64 hex digits.
//! - `artifact.rs`: the layout — config `application/vnd.wasm.config.v0+json` (`architecture:
//!   wasm`, `os: wasip2`, `layerDigests`, the component's top-level imports and exports) and
//!   exactly one `application/wasm` layer. Pulls also accept the older
//!   `application/vnd.wasm.content.layer.v1+wasm` layer (and its `config.v1+json`) that
//!   Kubewarden and Spin still push.
//! - `cache.rs`: pulled manifests, configs and layers stored by digest under the host's cache
//!   directory, verified on every read, and bounded (`registries.cacheMaxBytes`: modules no
//!   guest uses are evicted, least recently loaded first; one that cannot fit is refused).
//!   The cache is not authorisation: a digest-pinned reference found there is served once its
//!   registry, asked with its credentials, says it holds the digest (a `HEAD`); with the
//!   registry down, only to the same registry, repository and pull Secret that pulled it
//!   before. A tag remembers the digest it last resolved to, used on the same terms.
//! - `registry.rs`: the distribution API's read path on reqwest: every body capped while it
//!   streams (manifests 4 MiB, tokens and error bodies 64 KiB), redirects and token realms
//!   only to allowed registries and never from HTTPS to HTTP, error bodies summarised.
//! - `credentials.rs`: anonymous, basic or bearer auth, and credentials read from a
//!   `kubernetes.io/dockerconfigjson` document (the imagePullSecret format).
//! - `signatures.rs`: cosign signatures of a module's digest, as cosign 2 (a `.sig` tag) and
//!   cosign 3 (a Sigstore bundle found through the referrers API) write them, checked against
//!   the keys the operator trusts ([`TrustPolicy`]); `keyless.rs`: signatures whose certificate
//!   chains to a trusted root and names an allowed identity, with the transparency log's proof
//!   of the time of signing.
//! - `settings.rs`: the configuration's `registries:` (plain-HTTP registries, the caps on
//!   modules and on the cache).
//!
//! Blobs come from the registry the reference names only: a descriptor's `urls` are never
//! fetched. `oci-client` is used to push only (the command line's `push`, to a registry its
//! user chose).
//!
//! What is verified on a pull: the manifest's digest (against the reference's, when pinned),
//! its media types and single layer, the config's and the layer's digests, and the layer's
//! size — against the manifest's claim before the download and against the cap while it
//! streams, so an oversized artefact is cut off, never held whole — and that the layer begins
//! as a component does; nothing is stored before all of that holds. Plain HTTP only for
//! registries the configuration lists under `registries.insecure` (or `--plain-http` given on
//! the command line).
//!
//! Cost: a cache hit reads and hashes the layer (tens of ms for the 18 MB Python guest, see
//! docs/performance.md) and asks the registry one `HEAD`; a miss adds one manifest request
//! and two blob downloads.

mod artifact;
mod cache;
mod credentials;
mod error;
mod keyless;
mod reference;
mod registry;
mod settings;
mod signatures;

use std::path::Path;
use std::time::Duration;

use std::collections::BTreeSet;

use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor};

pub use artifact::{
    ArtifactError, ComponentInterfaces, WASM_CONFIG, WASM_LAYER, component_interfaces,
};
pub(crate) use cache::ModuleCache;
pub use credentials::{Auth, CredentialsError, DockerConfig};
pub(crate) use error::PullError;
pub use error::{RootProblem, TrustError};
pub(crate) use keyless::{CertificateIdentity, Keyless};
pub use reference::ModuleRef;
pub(crate) use reference::{AllowedRegistry, ModuleRefError};
pub(crate) use registry::Endpoints;
pub use settings::{DEFAULT_CACHE_MAX_BYTES, DEFAULT_MAX_MODULE_BYTES, RegistrySettings};
pub use signatures::TrustPolicy;

/// What a refusal of a module over its cap suggests.
const RAISE_MODULE_CAP: &str = "; raise registries.maxModuleBytes if it is meant to be";
/// Configs are a few hundred bytes; a larger one is not a Wasm config.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// A module as pulled: its manifest digest (what runs) and the component's bytes.
#[derive(Debug, Clone)]
pub(crate) struct Pulled {
    pub(crate) digest: String,
    pub(crate) bytes: Vec<u8>,
    /// Loaded from the cache: the registry said it holds the digest (pinned), or could not be
    /// reached and this same reference pulled it before.
    pub(crate) from_cache: bool,
    /// The trusted key that signed the digest, when signatures are required.
    pub(crate) signed_by: Option<String>,
}

/// Who asks for a module: the pull Secret whose credentials go with the request, if any. With
/// the reference's registry and repository it decides what the cache may serve without the
/// registry (only what this same requester pulled before). It also brings whose signatures
/// it accepts: one host checks different Reconcilers against different keys (a tenant rule's
/// own `verify`), over one shared cache.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Requester<'a> {
    pub(crate) auth: &'a Auth,
    /// The pull Secret's `namespace/name`, or none (anonymous, or the command line's).
    pub(crate) secret: Option<&'a str>,
    /// When set, the module is served only if this policy admits a signature of its digest
    /// (checked at every pull, cached or not, before anything of it is downloaded or stored).
    pub(crate) trust: Option<&'a TrustPolicy>,
}

/// Pulls modules into a [`ModuleCache`].
pub(crate) struct Puller {
    settings: RegistrySettings,
    plain_http: bool,
    cache: ModuleCache,
    max_bytes: u64,
    /// Where a registry's redirects and token realms may lead besides the module's own registry.
    endpoints: Endpoints,
    /// Manifest digests guests use now: never evicted.
    in_use: parking_lot::Mutex<BTreeSet<String>>,
}

impl Puller {
    /// `plain_http`: every registry over plain HTTP (the command line's `--plain-http`).
    pub(crate) fn new(settings: &RegistrySettings, cache_dir: &Path, plain_http: bool) -> Self {
        Self {
            settings: settings.clone(),
            plain_http,
            cache: ModuleCache::new(cache_dir),
            max_bytes: settings.max_module_bytes(),
            endpoints: Endpoints::default(),
            in_use: parking_lot::Mutex::default(),
        }
    }

    /// Lets redirects and token realms lead to `endpoints` too (`host[:port]`s: the
    /// registries `reconcilers.allow.registries` lists).
    #[must_use]
    pub(crate) fn redirecting_to(mut self, endpoints: Endpoints) -> Self {
        self.endpoints = endpoints;
        self
    }

    /// The manifest digests guests use now, which the cache never evicts.
    pub(crate) fn set_in_use(&self, digests: BTreeSet<String>) {
        *self.in_use.lock() = digests;
    }

    /// The module `module` names. A pinned digest in the cache is served once the registry,
    /// asked with the requester's credentials, says it holds it; a tag is resolved by the
    /// registry. With the registry unreachable, the cache serves only what this same
    /// reference and requester pulled before (for a tag, what it last resolved to).
    pub(crate) async fn pull(
        &self,
        module: &ModuleRef,
        who: Requester<'_>,
    ) -> Result<Pulled, PullError> {
        let mut session = self.session(module, who.auth)?;
        let cached = match module.digest() {
            Some(digest) => self.cache.load(digest)?.map(|bytes| Pulled {
                digest: digest.to_owned(),
                bytes,
                from_cache: true,
                signed_by: None,
            }),
            None => None,
        };
        let answer = match cached {
            Some(mut cached) => match session.holds(&cached.digest).await {
                Ok(()) => self
                    .verify(&mut session, module, &cached.digest, who.trust)
                    .await
                    .map(|by| {
                        cached.signed_by = by;
                        cached
                    }),
                Err(e) => Err(e),
            },
            None => self.fetch(&mut session, module, who.trust).await,
        };
        let pulled = match answer {
            Err(PullError::Unreachable {
                module: name,
                error,
            }) => match self.pulled_before(module, who)? {
                Some(pulled) => {
                    tracing::warn!(%module, digest = %pulled.digest, "registry unreachable ({error}); loading the digest this reference pulled before from the cache");
                    pulled
                }
                None => {
                    return Err(PullError::Unreachable {
                        module: name,
                        error,
                    });
                }
            },
            other => other?,
        };
        self.cache.note_pull(&pulled.digest, module, who.secret)?;
        Ok(pulled)
    }

    /// What the cache may serve `module` with the registry down: its pinned digest, or the
    /// digest its tag last resolved to, if this same reference and Secret pulled it before.
    fn pulled_before(
        &self,
        module: &ModuleRef,
        who: Requester<'_>,
    ) -> Result<Option<Pulled>, PullError> {
        let digest = match module.digest() {
            Some(digest) => digest.to_owned(),
            None => match self.cache.resolved(module)? {
                Some(digest) => digest,
                None => return Ok(None),
            },
        };
        if !self.cache.pulled_by(&digest, module, who.secret)? {
            return Ok(None);
        }
        let signed_by = match who.trust {
            Some(keys) => {
                let found = self.cache.signatures(&digest)?;
                Some(Self::judge(module, keys, &digest, &found)?)
            }
            None => None,
        };
        Ok(self.cache.load(&digest)?.map(|bytes| Pulled {
            digest,
            bytes,
            from_cache: true,
            signed_by,
        }))
    }

    /// The trusted key that signed `digest`, asked of the registry (and kept in the cache for
    /// loads with the registry down); `None` when signatures are not required.
    async fn verify(
        &self,
        session: &mut registry::Session,
        module: &ModuleRef,
        digest: &str,
        trust: Option<&TrustPolicy>,
    ) -> Result<Option<String>, PullError> {
        let Some(keys) = trust else {
            return Ok(None);
        };
        let found = signatures::fetch(session, digest).await?;
        let by = Self::judge(module, keys, digest, &found)?;
        self.cache.keep_signatures(digest, &found)?;
        Ok(Some(by))
    }

    fn judge(
        module: &ModuleRef,
        keys: &TrustPolicy,
        digest: &str,
        found: &[signatures::Found],
    ) -> Result<String, PullError> {
        signatures::check(keys, digest, found).map_err(|refusal| match refusal {
            signatures::Refusal::Missing => PullError::SignatureMissing {
                module: module.to_string(),
                digest: digest.to_owned(),
                policy: keys.source().to_owned(),
            },
            signatures::Refusal::Invalid(reason) => PullError::SignatureInvalid {
                module: module.to_string(),
                reason,
                policy: keys.source().to_owned(),
            },
        })
    }

    /// The component of the manifest `digest` that `module` pulled before, if the cache holds
    /// it (verified on read) and, when `trust` requires signatures, the signatures kept beside
    /// it still show one it admits: checked again at this load as at every other, so that no
    /// path loads a module whose signature was not verified by this process, against this
    /// requester's policy (not the one whose pull stored it).
    pub(crate) fn cached(
        &self,
        module: &ModuleRef,
        digest: &str,
        trust: Option<&TrustPolicy>,
    ) -> Result<Option<Vec<u8>>, PullError> {
        if let Some(keys) = trust {
            let found = self.cache.signatures(digest)?;
            Self::judge(module, keys, digest, &found)?;
        }
        Ok(self.cache.load(digest)?)
    }

    fn session(&self, module: &ModuleRef, auth: &Auth) -> Result<registry::Session, PullError> {
        let registry = module.registry();
        let https = !(self.plain_http
            || self
                .settings
                .insecure
                .iter()
                .any(|r| r.eq_ignore_ascii_case(registry)));
        registry::Session::new(module, auth, https, &self.endpoints)
    }

    /// Keeps a pulled module's `blobs` (digest, bytes) in the cache, within its bound.
    fn store(&self, name: &str, blobs: &[(&str, &[u8])]) -> Result<(), PullError> {
        let in_use = self.in_use.lock().clone();
        self.cache
            .store_bounded(blobs, &in_use, self.settings.cache_max_bytes())
            .map_err(|e| match e {
                cache::StoreError::Full {
                    in_use,
                    needed,
                    max,
                } => PullError::CacheFull {
                    module: name.to_owned(),
                    max,
                    in_use,
                    needed,
                },
                cache::StoreError::Io(e) => PullError::Cache(e),
            })
    }

    async fn fetch(
        &self,
        session: &mut registry::Session,
        module: &ModuleRef,
        trust: Option<&TrustPolicy>,
    ) -> Result<Pulled, PullError> {
        let name = module.to_string();
        let reference = module
            .digest()
            .map(ToOwned::to_owned)
            .or_else(|| module.reference().tag().map(ToOwned::to_owned))
            .unwrap_or_else(|| "latest".to_owned());
        let raw = session.manifest(&reference).await?;
        let digest = artifact::sha256_digest(&raw);
        if let Some(expected) = module.digest()
            && expected != digest
        {
            return Err(PullError::DigestMismatch {
                module: name,
                what: "the manifest".into(),
                expected: expected.to_owned(),
                got: digest,
            });
        }
        let not_wasm = |reason| PullError::NotAWasmArtifact {
            module: name.clone(),
            reason,
        };
        let parts = artifact::parse_manifest(&raw).map_err(not_wasm)?;
        // Before a byte of the module is downloaded or stored.
        let signed_by = self.verify(session, module, &digest, trust).await?;
        let layer_size = u64::try_from(parts.layer.size).unwrap_or(u64::MAX);
        if layer_size > self.max_bytes {
            return Err(PullError::TooLarge {
                module: name.clone(),
                size: format!("the module the manifest describes ({layer_size} bytes)"),
                max: self.max_bytes,
                hint: RAISE_MODULE_CAP,
            });
        }
        let config = blob(
            session,
            module,
            &parts.config,
            MAX_CONFIG_BYTES,
            "the config",
        )
        .await?;
        artifact::check_config(&config, &parts.layer.digest).map_err(not_wasm)?;
        let layer = blob(session, module, &parts.layer, self.max_bytes, "the layer").await?;
        if !layer.starts_with(COMPONENT_PREAMBLE) {
            return Err(not_wasm(artifact::ArtifactError::NotAComponent));
        }
        self.store(
            &name,
            &[
                (digest.as_str(), raw.as_slice()),
                (parts.config.digest.as_str(), config.as_slice()),
                (parts.layer.digest.as_str(), layer.as_slice()),
            ],
        )?;
        if module.digest().is_none() {
            self.cache.remember(module, &digest)?;
        }
        Ok(Pulled {
            digest,
            bytes: layer,
            from_cache: false,
            signed_by,
        })
    }
}

/// A component's first eight bytes: the Wasm magic and the component-model layer version.
const COMPONENT_PREAMBLE: &[u8] = b"\0asm\x0d\0\x01\0";

/// One blob, streamed: cut off past `max` bytes, its digest checked at the end. A descriptor's
/// `urls` are never used: a manifest's author would choose where the host connects.
async fn blob(
    session: &mut registry::Session,
    module: &ModuleRef,
    descriptor: &OciDescriptor,
    max: u64,
    what: &str,
) -> Result<Vec<u8>, PullError> {
    let name = module.to_string();
    let too_large = |size: String| PullError::TooLarge {
        module: name.clone(),
        size,
        max,
        hint: if what == "the layer" {
            RAISE_MODULE_CAP
        } else {
            ""
        },
    };
    if u64::try_from(descriptor.size).unwrap_or(u64::MAX) > max {
        return Err(too_large(format!(
            "{what} ({} bytes, as the manifest says)",
            descriptor.size
        )));
    }
    let mut response = session.blob(&descriptor.digest).await?;
    let bytes = registry::read_capped(&mut response, max)
        .await
        .map_err(|e| match e {
            registry::BodyError::TooLarge => too_large(format!("{what}, as it streamed,")),
            registry::BodyError::Transport(e) => PullError::Unreachable {
                module: name.clone(),
                error: e.to_string(),
            },
        })?;
    let got = artifact::sha256_digest(&bytes);
    if got != descriptor.digest {
        return Err(PullError::DigestMismatch {
            module: name,
            what: what.to_owned(),
            expected: descriptor.digest.clone(),
            got,
        });
    }
    Ok(bytes)
}

/// Pushes `bytes` (a component, validated by the caller) to `module`; returns the manifest's
/// digest. The reference's tag is kept; without tag or digest it is `latest`.
pub async fn push(
    module: &ModuleRef,
    bytes: &[u8],
    interfaces: &ComponentInterfaces,
    auth: &Auth,
    plain_http: bool,
) -> Result<String, PullError> {
    let name = module.to_string();
    let client = client(&RegistrySettings::default(), plain_http, &name)?;
    let reference = module.reference();
    let auth = auth.to_registry_auth();
    let layer_digest = artifact::sha256_digest(bytes);
    let config = artifact::config(&layer_digest, interfaces);
    let config_digest = artifact::sha256_digest(&config);
    // `oras pull` writes a layer under its title: the repository's last segment, as `.wasm`.
    let repository = reference.repository();
    let title = format!(
        "{}.wasm",
        repository.rsplit('/').next().unwrap_or(repository)
    );
    let manifest = artifact::manifest(
        (&config_digest, config.len()),
        (&layer_digest, bytes.len()),
        &title,
    );
    client
        .store_auth_if_needed(reference.resolve_registry(), &auth)
        .await;
    let fail = |e: OciDistributionError| classify(&name, &e);
    client
        .push_blob(reference, bytes.to_vec(), &layer_digest)
        .await
        .map_err(fail)?;
    client
        .push_blob(reference, config, &config_digest)
        .await
        .map_err(fail)?;
    client
        .push_manifest_raw(
            reference,
            manifest.clone(),
            http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE),
        )
        .await
        .map_err(fail)?;
    Ok(artifact::sha256_digest(&manifest))
}

/// A registry client, or why none can be built. `Client::new` falls back to a default client
/// when its configuration fails, and that one panics without system CA certificates (an image
/// without a bundle): the error is kept instead.
fn client(
    settings: &RegistrySettings,
    plain_http: bool,
    module: &str,
) -> Result<Client, PullError> {
    // reqwest's rustls needs a process-wide provider: ring, the one kube builds. Installing
    // it twice is harmless (the first wins).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let protocol = if plain_http {
        ClientProtocol::Http
    } else if settings.insecure.is_empty() {
        ClientProtocol::Https
    } else {
        ClientProtocol::HttpsExcept(settings.insecure.clone())
    };
    Client::try_from(ClientConfig {
        protocol,
        use_monolithic_push: true,
        connect_timeout: Some(Duration::from_secs(10)),
        read_timeout: Some(Duration::from_mins(1)),
        ..ClientConfig::default()
    })
    .map_err(|e| PullError::Registry {
        module: module.to_owned(),
        error: format!(
            "cannot build a registry client ({e}): most often the TLS stack found no CA certificates (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs); give the host a CA bundle"
        ),
    })
}

fn classify(module: &str, e: &OciDistributionError) -> PullError {
    let module = module.to_owned();
    let error = e.to_string();
    match e {
        OciDistributionError::AuthenticationFailure(_)
        | OciDistributionError::UnauthorizedError { .. } => PullError::Denied { module, error },
        OciDistributionError::ImageManifestNotFoundError(_) => {
            PullError::NotFound { module, error }
        }
        OciDistributionError::RequestError(r) if r.is_connect() || r.is_timeout() => {
            PullError::Unreachable { module, error }
        }
        OciDistributionError::ServerError { code, .. } if *code == 404 => {
            PullError::NotFound { module, error }
        }
        OciDistributionError::ServerError { code, .. } if *code == 401 || *code == 403 => {
            PullError::Denied { module, error }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            use oci_client::errors::OciErrorCode as Code;
            let codes = || envelope.errors.iter().map(|e| &e.code);
            if codes().any(|c| matches!(c, Code::Unauthorized | Code::Denied)) {
                PullError::Denied { module, error }
            } else if codes().any(|c| {
                matches!(
                    c,
                    Code::ManifestUnknown | Code::BlobUnknown | Code::NameUnknown
                )
            }) {
                PullError::NotFound { module, error }
            } else {
                PullError::Registry { module, error }
            }
        }
        _ => PullError::Registry { module, error },
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;

    /// Answers every connection with `answer(path)` (status line and body), counting requests.
    /// Hand-written: the registry here is the attacker, and a few lines of HTTP/1.1 say so.
    async fn server(
        answer: impl Fn(&str) -> (&'static str, Vec<u8>) + Send + Sync + 'static,
    ) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let requests = Arc::new(AtomicUsize::new(0));
        let (count, answer) = (requests.clone(), Arc::new(answer));
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let (count, answer) = (count.clone(), answer.clone());
                tokio::spawn(async move {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        if socket.read(&mut byte).await.unwrap_or(0) == 0 {
                            return;
                        }
                        head.push(byte[0]);
                    }
                    count.fetch_add(1, Ordering::SeqCst);
                    let text = String::from_utf8_lossy(&head);
                    let path = text.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let (status, body) = answer(&path);
                    let type_ = if path.contains("/manifests/") {
                        OCI_IMAGE_MEDIA_TYPE
                    } else {
                        "application/octet-stream"
                    };
                    let reply = format!(
                        "HTTP/1.1 {status}\r\ncontent-type: {type_}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = socket.write_all(reply.as_bytes()).await;
                    let _ = socket.write_all(&body).await;
                });
            }
        });
        (address, requests)
    }

    fn anonymous() -> Requester<'static> {
        Requester {
            auth: &Auth::Anonymous,
            secret: None,
            trust: None,
        }
    }

    /// A module's manifest, config and layer as a registry serves them.
    fn artefact() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        let layer = b"\0asm\x0d\0\x01\0".to_vec();
        let layer_digest = artifact::sha256_digest(&layer);
        let config = artifact::config(&layer_digest, &ComponentInterfaces::default());
        let manifest = artifact::manifest(
            (&artifact::sha256_digest(&config), config.len()),
            (&layer_digest, layer.len()),
            "module.wasm",
        );
        (manifest, config, layer)
    }

    /// A registry that redirects elsewhere (a service on another port of the host's network)
    /// is not followed: the other address is never contacted, and the refusal says why.
    #[tokio::test]
    async fn a_redirect_to_an_address_not_listed_is_never_followed() {
        let (elsewhere, reached) = server(|_| ("200 OK", b"secret".to_vec())).await;
        let to = elsewhere.clone();
        let registry = raw_server(move |path| {
            format!(
                "HTTP/1.1 302 Found\r\nlocation: http://{to}{path}\r\ncontent-length: 0\r\n\r\n"
            )
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let module: ModuleRef = format!("oci://{registry}/team/guest:v1").parse().unwrap();
        let err = puller.pull(&module, anonymous()).await.unwrap_err();
        assert!(
            err.to_string()
                .contains("not a registry reconcilers.allow.registries lists"),
            "{err}"
        );
        assert_eq!(reached.load(Ordering::SeqCst), 0, "never contacted");
        // Listed, the same redirect is followed (and then fails on the bytes it finds there).
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true)
            .redirecting_to(Endpoints::new([elsewhere.clone()]));
        let _ = puller.pull(&module, anonymous()).await;
        assert!(
            reached.load(Ordering::SeqCst) > 0,
            "a listed address is reached"
        );
    }

    /// A token realm is where the host sends the pull Secret's credentials: one the allowed
    /// registries do not include is never contacted.
    #[tokio::test]
    async fn a_token_realm_not_listed_is_never_contacted() {
        let (realm, reached) = server(|_| ("200 OK", br#"{"token":"t"}"#.to_vec())).await;
        let registry = raw_server(move |_| {
            format!("HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://{realm}/token\",service=\"r\"\r\ncontent-length: 0\r\n\r\n")
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let module: ModuleRef = format!("oci://{registry}/team/guest:v1").parse().unwrap();
        let basic = Auth::Basic {
            username: "u".into(),
            password: "p".into(),
        };
        let who = Requester {
            auth: &basic,
            secret: Some("ns/registry"),
            trust: None,
        };
        let err = puller.pull(&module, who).await.unwrap_err();
        assert!(matches!(&err, PullError::Denied { .. }), "{err}");
        assert!(err.to_string().contains("token realm"), "{err}");
        assert_eq!(reached.load(Ordering::SeqCst), 0, "never contacted");
    }

    /// Answers every request with `reply(path)`, written as it is.
    async fn raw_server(reply: impl Fn(&str) -> String + Send + Sync + 'static) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap().to_string();
        let reply = Arc::new(reply);
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let reply = reply.clone();
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let n = socket.read(&mut buffer).await.unwrap_or(0);
                    let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                    let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                    let _ = socket.write_all(reply(&path).as_bytes()).await;
                });
            }
        });
        address
    }

    /// A manifest, a token answer and an error body that never end: each is cut off at its
    /// cap while it streams (no `Content-Length` to refuse it by), so a registry decides
    /// neither how long the host reads nor how much it holds.
    #[tokio::test]
    async fn endless_bodies_are_cut_off_at_their_caps() {
        // The chunked encoding's hex size line: 0x10000 bytes a chunk.
        async fn endless(status: &'static str, headers: &'static str) -> String {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let address = listener.local_addr().unwrap().to_string();
            tokio::spawn(async move {
                while let Ok((mut socket, _)) = listener.accept().await {
                    tokio::spawn(async move {
                        let mut buffer = [0u8; 4096];
                        let _ = socket.read(&mut buffer).await;
                        let head = format!(
                            "HTTP/1.1 {status}\r\ncontent-type: application/json\r\n{headers}transfer-encoding: chunked\r\n\r\n"
                        );
                        let _ = socket.write_all(head.as_bytes()).await;
                        let chunk = format!("10000\r\n{}\r\n", "x".repeat(0x10000));
                        while socket.write_all(chunk.as_bytes()).await.is_ok() {}
                    });
                }
            });
            address
        }
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let manifest = endless("200 OK", "").await;
        let module: ModuleRef = format!("oci://{manifest}/team/guest:v1").parse().unwrap();
        let err = puller.pull(&module, anonymous()).await.unwrap_err();
        assert!(
            matches!(&err, PullError::TooLarge { max, .. } if *max == registry::MAX_MANIFEST_BYTES),
            "{err}"
        );
        // A token answer that never ends, from a realm on the registry itself.
        let token = endless("200 OK", "").await;
        let realm = token.clone();
        let registry = raw_server(move |_| {
            format!("HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer realm=\"http://{realm}/token\"\r\ncontent-length: 0\r\n\r\n")
        })
        .await;
        let module: ModuleRef = format!("oci://{registry}/team/guest:v1").parse().unwrap();
        let err = Puller::new(&RegistrySettings::default(), dir.path(), true)
            .redirecting_to(Endpoints::new([token]))
            .pull(&module, anonymous())
            .await
            .unwrap_err();
        assert!(
            matches!(&err, PullError::TooLarge { size, .. } if size.contains("token answer")),
            "{err}"
        );
        let error_body = endless("500 Internal Server Error", "").await;
        let module: ModuleRef = format!("oci://{error_body}/team/guest:v1").parse().unwrap();
        let err = puller.pull(&module, anonymous()).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("{module}: the registry failed: HTTP 500 Internal Server Error"),
            "an error body past its cap is summarised by its status alone"
        );
    }

    /// A signature tag listing many signatures, each payload larger than its cap: at most 16
    /// payloads are asked for, none is held past its cap, and with nothing valid the module is
    /// refused as unsigned.
    #[tokio::test]
    async fn signature_payloads_are_counted_and_capped() {
        use p256::pkcs8::{EncodePublicKey, LineEnding};
        let (manifest, _, _) = artefact();
        let digest = artifact::sha256_digest(&manifest);
        let layers: Vec<serde_json::Value> = (0..40)
            .map(|i| {
                serde_json::json!({
                    "mediaType": "application/vnd.dev.cosign.simplesigning.v1+json",
                    "digest": artifact::sha256_digest(format!("payload {i}").as_bytes()),
                    "size": 100_000,
                    "annotations": {"dev.cosignproject.cosign/signature": "MEUCIQ=="},
                })
            })
            .collect();
        let signatures = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_MEDIA_TYPE,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                "digest": artifact::sha256_digest(b"{}"), "size": 2},
            "layers": layers,
        }))
        .unwrap();
        let sig_tag = format!("{}.sig", digest.replace(':', "-"));
        let blobs = Arc::new(AtomicUsize::new(0));
        let counted = blobs.clone();
        let (registry, _) = server(move |path| {
            if path.ends_with(&sig_tag) {
                ("200 OK", signatures.clone())
            } else if path.contains("/manifests/sha256-") || path.contains("/referrers/") {
                ("404 Not Found", Vec::new())
            } else if path.contains("/manifests/") {
                ("200 OK", manifest.clone())
            } else {
                counted.fetch_add(1, Ordering::SeqCst);
                ("200 OK", vec![b'x'; 100_000])
            }
        })
        .await;
        let key = p256::ecdsa::SigningKey::from_slice(&[7; 32]).unwrap();
        let pem = key
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        let keys = TrustPolicy::from_pems(&[("k.pub", &pem)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let module: ModuleRef = format!("oci://{registry}/team/guest:v1").parse().unwrap();
        let who = Requester {
            trust: Some(&keys),
            ..anonymous()
        };
        let err = puller.pull(&module, who).await.unwrap_err();
        assert!(matches!(err, PullError::SignatureMissing { .. }), "{err}");
        let asked = blobs.load(Ordering::SeqCst);
        assert!((1..=16).contains(&asked), "{asked} payloads asked for");
    }

    /// A digest in the cache is not a licence: the registry the reference names, asked with
    /// the reference's credentials, must say it holds it; and with the registry down only the
    /// reference that pulled it before is served.
    #[tokio::test]
    async fn a_cached_digest_is_served_only_to_a_reference_the_registry_admits() {
        let (manifest, config, layer) = artefact();
        let digest = artifact::sha256_digest(&manifest);
        let (open, _) = {
            let (manifest, config, layer) = (manifest.clone(), config.clone(), layer.clone());
            let config_digest = artifact::sha256_digest(&config);
            server(move |path| {
                if path.contains("/manifests/") {
                    ("200 OK", manifest.clone())
                } else if path.contains(&config_digest) {
                    ("200 OK", config.clone())
                } else {
                    ("200 OK", layer.clone())
                }
            })
            .await
        };
        let (private, asked) = server(|_| {
            (
                "401 Unauthorized",
                br#"{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}"#
                    .to_vec(),
            )
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let first: ModuleRef = format!("oci://{open}/team/guest@{digest}").parse().unwrap();
        let fresh = puller.pull(&first, anonymous()).await.unwrap();
        assert!(!fresh.from_cache);
        // Another registry, which does not admit this requester, named with the same digest.
        let other: ModuleRef = format!("oci://{private}/team/guest@{digest}")
            .parse()
            .unwrap();
        let err = puller.pull(&other, anonymous()).await.unwrap_err();
        assert!(matches!(err, PullError::Denied { .. }), "{err}");
        assert!(asked.load(Ordering::SeqCst) > 0, "the registry was asked");
        // The same reference again: the registry says it holds it, the cache serves it.
        assert!(puller.pull(&first, anonymous()).await.unwrap().from_cache);
        // Down: only the reference that pulled it before, with the same Secret.
        let down = format!("127.0.0.1:{}", free_port());
        let moved: ModuleRef = format!("oci://{down}/team/guest@{digest}").parse().unwrap();
        let err = puller.pull(&moved, anonymous()).await.unwrap_err();
        assert!(matches!(err, PullError::Unreachable { .. }), "{err}");
        let cache = ModuleCache::new(dir.path());
        cache
            .note_pull(&digest, &moved, Some("ns/registry"))
            .unwrap();
        let err = puller.pull(&moved, anonymous()).await.unwrap_err();
        assert!(
            matches!(err, PullError::Unreachable { .. }),
            "another Secret: {err}"
        );
        let with_secret = Requester {
            secret: Some("ns/registry"),
            ..anonymous()
        };
        assert!(puller.pull(&moved, with_secret).await.unwrap().from_cache);
    }

    fn free_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A manifest may name other addresses for its blobs (`urls`); a registry that answers
    /// 404 for the blob would then have the host connect wherever the manifest says. Without
    /// the fix this test sees the other address contacted.
    #[tokio::test]
    async fn a_descriptors_urls_are_never_fetched() {
        let (elsewhere, reached) = server(|_| ("200 OK", b"\0asm".to_vec())).await;
        let layer = b"\0asm\x0d\0\x01\0".to_vec();
        let layer_digest = artifact::sha256_digest(&layer);
        let config = artifact::config(&layer_digest, &ComponentInterfaces::default());
        let config_digest = artifact::sha256_digest(&config);
        let mut manifest: serde_json::Value = serde_json::from_slice(&artifact::manifest(
            (&config_digest, config.len()),
            (&layer_digest, layer.len()),
            "module.wasm",
        ))
        .unwrap();
        let url = format!("http://{elsewhere}/blob");
        manifest["config"]["urls"] = serde_json::json!([url]);
        manifest["layers"][0]["urls"] = serde_json::json!([url]);
        let manifest = serde_json::to_vec(&manifest).unwrap();
        let (registry, asked) = server(move |path| {
            if path.contains("/manifests/") {
                ("200 OK", manifest.clone())
            } else {
                (
                    "404 Not Found",
                    br#"{"errors":[{"code":"BLOB_UNKNOWN","message":"gone"}]}"#.to_vec(),
                )
            }
        })
        .await;
        let dir = tempfile::tempdir().unwrap();
        let puller = Puller::new(&RegistrySettings::default(), dir.path(), true);
        let module: ModuleRef = format!("oci://{registry}/team/guest:v1").parse().unwrap();
        let err = puller.pull(&module, anonymous()).await.unwrap_err();
        assert!(matches!(err, PullError::NotFound { .. }), "{err}");
        assert!(asked.load(Ordering::SeqCst) >= 2, "the registry was asked");
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the address the manifest named was never contacted"
        );
    }
}
