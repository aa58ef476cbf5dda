//! Guests as OCI artifacts: `reconciler-host push` writes a component to a registry in the CNCF
//! TAG-Runtime Wasm layout, and a guest given as `oci://HOST[:PORT]/REPO[:TAG][@sha256:DIGEST]`
//! is pulled by the host with `oci-client`, verified and kept in a content-addressed cache.
//!
//! - [`ModuleRef`]: the `oci://` reference; the registry is always explicit (no Docker Hub
//!   default), a digest is `sha256:` and 64 hex digits.
//! - `artifact.rs`: the layout — config `application/vnd.wasm.config.v0+json` (`architecture:
//!   wasm`, `os: wasip2`, `layerDigests`, the component's top-level imports and exports) and
//!   exactly one `application/wasm` layer. Pulls also accept the older
//!   `application/vnd.wasm.content.layer.v1+wasm` layer (and its `config.v1+json`) that
//!   Kubewarden and Spin still push.
//! - `cache.rs`: pulled manifests, configs and layers stored by digest under the host's cache
//!   directory and verified on every read. A digest-pinned reference found there is loaded
//!   without asking the registry (so a restarted host loads what it ran with the registry
//!   down); a tag remembers the digest it last resolved to, used only when the registry cannot
//!   be reached. Two guests with one digest are stored once.
//! - `credentials.rs`: anonymous, basic or bearer auth, and credentials read from a
//!   `kubernetes.io/dockerconfigjson` document (the imagePullSecret format).
//!
//! Blobs come from the registry the reference names only: a descriptor's `urls` are never
//! fetched.
//!
//! What is verified on a pull: the manifest's digest (against the reference's, when pinned),
//! its media types and single layer, the config's and the layer's digests, and the layer's
//! size — against the manifest's claim before the download and against the cap while it
//! streams, so an oversized artefact is cut off, never held whole. Plain HTTP only for
//! registries the configuration lists under `registries.insecure` (or `--plain-http` given on
//! the command line).
//!
//! Cost: a cache hit reads and hashes the layer (tens of ms for the 18 MB Python guest, see
//! docs/performance.md); a miss adds one manifest request and two blob downloads.

mod artifact;
mod cache;
mod credentials;
mod reference;

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use oci_client::Client;
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::OciDistributionError;
use oci_client::manifest::{IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor};

pub use artifact::{ComponentInterfaces, component_interfaces};
pub use cache::ModuleCache;
pub use credentials::{Auth, CredentialsError, DockerConfig};
pub use reference::{AllowedRegistry, ModuleRef, ModuleRefError};

/// The layer media type this host pushes.
pub const WASM_LAYER: &str = "application/wasm";
/// The config media type this host pushes.
pub const WASM_CONFIG: &str = "application/vnd.wasm.config.v0+json";
/// The largest module pulled when the configuration sets no cap: the Python guest (18.4 MB)
/// fits three times over.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 << 20;
/// Configs are a few hundred bytes; a larger one is not a Wasm config.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Registry settings of the host configuration (`registries:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySettings {
    /// Registries (`host[:port]`) spoken to over plain HTTP; every other one over HTTPS.
    #[serde(default)]
    pub insecure: Vec<String>,
    /// The largest module layer pulled, in bytes (default [`DEFAULT_MAX_MODULE_BYTES`]).
    #[serde(default)]
    pub max_module_bytes: Option<u64>,
}

impl RegistrySettings {
    pub fn max_module_bytes(&self) -> u64 {
        self.max_module_bytes.unwrap_or(DEFAULT_MAX_MODULE_BYTES)
    }
}

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
    #[error(
        "{module}: the module is larger than the cap of {max} bytes ({size}); raise registries.maxModuleBytes if it is meant to be"
    )]
    TooLarge {
        module: String,
        size: String,
        max: u64,
    },
    #[error("{module}: not a Wasm component artifact: {reason}")]
    NotAWasmArtifact { module: String, reason: String },
    #[error("{module}: the registry failed: {error}")]
    Registry { module: String, error: String },
    #[error("module cache: {0}")]
    Cache(#[from] std::io::Error),
}

/// A module as pulled: its manifest digest (what runs) and the component's bytes.
#[derive(Debug, Clone)]
pub struct Pulled {
    pub digest: String,
    pub bytes: Vec<u8>,
    /// Loaded from the cache without asking the registry (pinned digest, or a tag whose
    /// registry could not be reached).
    pub from_cache: bool,
}

/// Pulls modules into a [`ModuleCache`].
pub struct Puller {
    settings: RegistrySettings,
    plain_http: bool,
    cache: ModuleCache,
    max_bytes: u64,
}

impl Puller {
    /// `plain_http`: every registry over plain HTTP (the command line's `--plain-http`).
    pub fn new(settings: &RegistrySettings, cache_dir: &Path, plain_http: bool) -> Self {
        Self {
            settings: settings.clone(),
            plain_http,
            cache: ModuleCache::new(cache_dir),
            max_bytes: settings.max_module_bytes(),
        }
    }

    /// The module `module` names: from the cache when its digest is pinned and cached, else
    /// from the registry (verified, then cached).
    pub async fn pull(&self, module: &ModuleRef, auth: &Auth) -> Result<Pulled, PullError> {
        if let Some(digest) = module.digest()
            && let Some(bytes) = self.cache.load(digest)?
        {
            return Ok(Pulled {
                digest: digest.to_owned(),
                bytes,
                from_cache: true,
            });
        }
        match self.fetch(module, auth).await {
            Err(PullError::Unreachable {
                module: name,
                error,
            }) => {
                // A tag may still be served from what it last resolved to.
                let remembered = match module.digest() {
                    None => self.cache.resolved(module)?,
                    Some(_) => None,
                };
                match remembered {
                    Some(digest) => match self.cache.load(&digest)? {
                        Some(bytes) => {
                            tracing::warn!(%module, %digest, "registry unreachable ({error}); loading the digest this tag last resolved to from the cache");
                            Ok(Pulled {
                                digest,
                                bytes,
                                from_cache: true,
                            })
                        }
                        None => Err(PullError::Unreachable {
                            module: name,
                            error,
                        }),
                    },
                    None => Err(PullError::Unreachable {
                        module: name,
                        error,
                    }),
                }
            }
            other => other,
        }
    }

    /// The component of the manifest `digest` if the cache holds it (verified on read).
    pub fn cached(&self, digest: &str) -> Result<Option<Vec<u8>>, PullError> {
        Ok(self.cache.load(digest)?)
    }

    async fn fetch(&self, module: &ModuleRef, auth: &Auth) -> Result<Pulled, PullError> {
        let name = module.to_string();
        let reference = module.reference();
        let auth = auth.to_registry_auth();
        // A client per pull: `oci-client` keeps the first credentials (and tokens) it was given
        // for a registry, which would let one guest's pull use another's pull Secret.
        let client = client(&self.settings, self.plain_http, &name)?;
        let (raw, _) = client
            .pull_manifest_raw(
                reference,
                &auth,
                &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
            )
            .await
            .map_err(|e| classify(&name, &e))?;
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
        let parts =
            artifact::parse_manifest(&raw).map_err(|reason| PullError::NotAWasmArtifact {
                module: name.clone(),
                reason,
            })?;
        let layer_size = u64::try_from(parts.layer.size).unwrap_or(u64::MAX);
        if layer_size > self.max_bytes {
            return Err(PullError::TooLarge {
                module: name,
                size: format!("the manifest says {layer_size} bytes"),
                max: self.max_bytes,
            });
        }
        let config = self
            .blob(
                &client,
                module,
                &parts.config,
                MAX_CONFIG_BYTES,
                "the config",
            )
            .await?;
        artifact::check_config(&config, &parts.layer.digest).map_err(|reason| {
            PullError::NotAWasmArtifact {
                module: name.clone(),
                reason,
            }
        })?;
        let layer = self
            .blob(&client, module, &parts.layer, self.max_bytes, "the layer")
            .await?;
        self.cache.store(&[
            (&digest, &raw),
            (&parts.config.digest, &config),
            (&parts.layer.digest, &layer),
        ])?;
        if module.digest().is_none() {
            self.cache.remember(module, &digest)?;
        }
        Ok(Pulled {
            digest,
            bytes: layer,
            from_cache: false,
        })
    }

    /// One blob, streamed: cut off past `max` bytes, its digest checked at the end.
    async fn blob(
        &self,
        client: &Client,
        module: &ModuleRef,
        descriptor: &OciDescriptor,
        max: u64,
        what: &str,
    ) -> Result<Vec<u8>, PullError> {
        let name = module.to_string();
        // A descriptor's `urls` would have the client try other addresses when the registry
        // answers an error: a manifest's author would choose where the host connects. The blob
        // comes from the registry the reference names, or not at all.
        let descriptor = &OciDescriptor {
            urls: None,
            ..descriptor.clone()
        };
        let mut stream = client
            .pull_blob_stream(module.reference(), descriptor)
            .await
            .map_err(|e| classify(&name, &e))?;
        let mut bytes = Vec::new();
        while let Some(chunk) = stream.stream.next().await {
            let chunk = chunk.map_err(|e| PullError::Unreachable {
                module: name.clone(),
                error: e.to_string(),
            })?;
            if bytes.len() as u64 + chunk.len() as u64 > max {
                return Err(PullError::TooLarge {
                    module: name,
                    size: format!("{what} streamed past it"),
                    max,
                });
            }
            bytes.extend_from_slice(&chunk);
        }
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
    let manifest = artifact::manifest((&config_digest, config.len()), (&layer_digest, bytes.len()));
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
        let err = puller.pull(&module, &Auth::Anonymous).await.unwrap_err();
        assert!(matches!(err, PullError::NotFound { .. }), "{err}");
        assert!(asked.load(Ordering::SeqCst) >= 2, "the registry was asked");
        assert_eq!(
            reached.load(Ordering::SeqCst),
            0,
            "the address the manifest named was never contacted"
        );
    }
}
