//! The registry `tools/registry/registry` starts behaves as the host's OCI pulls need: it
//! refuses anonymous requests with a Basic challenge and accepts the generated credentials,
//! serves a pushed blob back by digest byte for byte, takes a Wasm artifact's manifest and
//! deletes it, refuses connections while stopped, and keeps its storage across a restart. And
//! the host refuses what a registry serves that is not a Wasm component, saying why.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail, ensure};
use reconciler_host::sandbox::runtime::content_hash;
use reconciler_host_tests::{PrivateRegistry, Registry};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

// A tiny HTTP client: the tests crate has no HTTP client of its own (kube's hyper is not
// exposed), and adding one for a handful of requests would grow every test build. It speaks
// HTTP/1.0, so the server closes the connection after the response and never sends it
// chunked: the body is whatever arrives before the close.

struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Who a request claims to be.
#[derive(Clone, Copy)]
enum As<'a> {
    Anonymous,
    User(&'a str, &'a str),
}

struct Request<'a> {
    method: &'a str,
    target: &'a str,
    auth: As<'a>,
    headers: &'a [(&'a str, &'a str)],
    body: &'a [u8],
}

impl<'a> Request<'a> {
    fn new(method: &'a str, target: &'a str, auth: As<'a>) -> Self {
        Self {
            method,
            target,
            auth,
            headers: &[],
            body: &[],
        }
    }

    /// Sends the request to `address` (`host:port`); `target` is a path or an absolute
    /// `http://` URL on that same address (as the registry's `Location` headers are).
    async fn send(&self, address: &str) -> Result<Response> {
        let shown = format!("{} http://{address}{}", self.method, self.target);
        tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(address))
            .await
            .map_err(|_| anyhow::anyhow!("{shown}: no answer within {REQUEST_TIMEOUT:?}"))?
            .with_context(|| shown)
    }

    async fn exchange(&self, address: &str) -> Result<Response> {
        let path = match self.target.strip_prefix("http://") {
            Some(rest) => {
                let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
                ensure!(host == address, "redirected to another server: {host}");
                path
            }
            None => self.target,
        };
        let mut head = format!(
            "{} {path} HTTP/1.0\r\nHost: {address}\r\nContent-Length: {}\r\n",
            self.method,
            self.body.len()
        );
        if let As::User(user, password) = self.auth {
            let credentials = base64(format!("{user}:{password}").as_bytes());
            head.push_str(&format!("Authorization: Basic {credentials}\r\n"));
        }
        for (name, value) in self.headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str("\r\n");
        let mut stream = TcpStream::connect(address).await?;
        stream.write_all(head.as_bytes()).await?;
        stream.write_all(self.body).await?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await?;
        parse_response(&raw)
    }
}

fn parse_response(raw: &[u8]) -> Result<Response> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .context("the response has no end of headers")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("bad status line {status_line:?}"))?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    Ok(Response {
        status,
        headers,
        body: raw[end + 4..].to_vec(),
    })
}

/// Standard base64 with padding, for the Basic `Authorization` header (no base64 crate in the
/// tests' dependencies).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn user(registry: &Registry) -> As<'_> {
    As::User(registry.username(), registry.password())
}

/// A repository name and blob bytes no earlier run used.
fn fresh(what: &str) -> (String, Vec<u8>) {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let unique = format!("{}-{nanos}", std::process::id());
    let mut bytes = b"\0asm\x01\0\0\0".to_vec(); // a Wasm module's header, then padding
    bytes.extend_from_slice(unique.as_bytes());
    bytes.extend((0..4096u32).map(|i| (i % 251) as u8));
    (format!("tests/{what}-{unique}"), bytes)
}

/// Pushes `bytes` as a blob of `repository` the monolithic way (POST an upload, PUT it whole
/// with its digest) and returns the digest.
async fn push_blob(registry: &Registry, repository: &str, bytes: &[u8]) -> Result<String> {
    let digest = format!("sha256:{}", content_hash(bytes));
    let uploads = format!("/v2/{repository}/blobs/uploads/");
    let started = Request::new("POST", &uploads, user(registry))
        .send(registry.address())
        .await?;
    ensure!(
        started.status == 202,
        "POST {uploads} answered {} (expected 202 Accepted): {}",
        started.status,
        started.text()
    );
    let location = started
        .header("Location")
        .context("the upload's answer has no Location")?;
    let separator = if location.contains('?') { '&' } else { '?' };
    let put = format!("{location}{separator}digest={digest}");
    let done = Request {
        headers: &[("Content-Type", "application/octet-stream")],
        body: bytes,
        ..Request::new("PUT", &put, user(registry))
    }
    .send(registry.address())
    .await?;
    ensure!(
        done.status == 201,
        "PUT of the upload answered {} (expected 201 Created): {}",
        done.status,
        done.text()
    );
    ensure!(
        done.header("Docker-Content-Digest") == Some(digest.as_str()),
        "the registry stored the blob as {:?}, not {digest}",
        done.header("Docker-Content-Digest")
    );
    Ok(digest)
}

async fn get_blob(registry: &Registry, repository: &str, digest: &str) -> Result<Vec<u8>> {
    let path = format!("/v2/{repository}/blobs/{digest}");
    let answer = Request::new("GET", &path, user(registry))
        .send(registry.address())
        .await?;
    if answer.status != 200 {
        bail!("GET {path} answered {}: {}", answer.status, answer.text());
    }
    Ok(answer.body)
}

#[test]
fn base64_matches_the_rfc_4648_examples() {
    for (plain, encoded) in [
        ("", ""),
        ("f", "Zg=="),
        ("fo", "Zm8="),
        ("foo", "Zm9v"),
        ("foob", "Zm9vYg=="),
        ("fooba", "Zm9vYmE="),
        ("foobar", "Zm9vYmFy"),
    ] {
        assert_eq!(base64(plain.as_bytes()), encoded, "base64({plain:?})");
    }
}

#[tokio::test]
async fn the_registry_refuses_anonymous_requests_and_accepts_its_credentials() -> Result<()> {
    let registry = Registry::shared().await?;
    let address = registry.address();

    let anonymous = Request::new("GET", "/v2/", As::Anonymous)
        .send(address)
        .await?;
    assert_eq!(
        anonymous.status,
        401,
        "anonymous /v2/: {}",
        anonymous.text()
    );
    // Clients pick basic auth from this challenge.
    assert_eq!(
        anonymous.header("WWW-Authenticate"),
        Some(r#"Basic realm="reconciler-host""#)
    );

    let wrong = Request::new(
        "GET",
        "/v2/",
        As::User(registry.username(), "not-the-password"),
    )
    .send(address)
    .await?;
    assert_eq!(
        wrong.status,
        401,
        "/v2/ with a wrong password: {}",
        wrong.text()
    );

    let authenticated = Request::new("GET", "/v2/", user(registry))
        .send(address)
        .await?;
    assert_eq!(
        authenticated.status,
        200,
        "/v2/ as {}: {}",
        registry.username(),
        authenticated.text()
    );
    assert_eq!(
        authenticated.header("Docker-Distribution-Api-Version"),
        Some("registry/2.0")
    );
    Ok(())
}

#[tokio::test]
async fn a_blob_pushed_by_digest_is_served_back_byte_for_byte() -> Result<()> {
    let registry = Registry::shared().await?;
    let (repository, bytes) = fresh("blob");
    let digest = push_blob(registry, &repository, &bytes).await?;
    let served = get_blob(registry, &repository, &digest).await?;
    assert!(
        served == bytes,
        "GET by digest served {} bytes that differ from the {} pushed",
        served.len(),
        bytes.len()
    );

    let path = format!("/v2/{repository}/blobs/{digest}");
    let anonymous = Request::new("GET", &path, As::Anonymous)
        .send(registry.address())
        .await?;
    assert_eq!(
        anonymous.status,
        401,
        "an anonymous blob GET: {}",
        anonymous.text()
    );
    Ok(())
}

#[tokio::test]
async fn a_wasm_artifact_manifest_is_stored_served_by_digest_and_deleted() -> Result<()> {
    let registry = Registry::shared().await?;
    let (repository, component) = fresh("artifact");
    let config = br#"{"architecture":"wasm","os":"wasip2"}"#;
    let config_digest = push_blob(registry, &repository, config).await?;
    let layer_digest = push_blob(registry, &repository, &component).await?;
    // The CNCF TAG Runtime's Wasm OCI artifact layout: a Wasm config, one application/wasm layer.
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {
            "mediaType": "application/vnd.wasm.config.v0+json",
            "digest": config_digest,
            "size": config.len(),
        },
        "layers": [{
            "mediaType": "application/wasm",
            "digest": layer_digest,
            "size": component.len(),
        }],
    }))?;
    let manifest_digest = format!("sha256:{}", content_hash(&manifest));

    let by_tag = format!("/v2/{repository}/manifests/v1");
    let put = Request {
        headers: &[("Content-Type", OCI_MANIFEST)],
        body: &manifest,
        ..Request::new("PUT", &by_tag, user(registry))
    }
    .send(registry.address())
    .await?;
    assert_eq!(put.status, 201, "PUT {by_tag}: {}", put.text());
    assert_eq!(
        put.header("Docker-Content-Digest"),
        Some(manifest_digest.as_str())
    );

    let by_digest = format!("/v2/{repository}/manifests/{manifest_digest}");
    let accept = [("Accept", OCI_MANIFEST)];
    let got = Request {
        headers: &accept,
        ..Request::new("GET", &by_digest, user(registry))
    }
    .send(registry.address())
    .await?;
    assert_eq!(got.status, 200, "GET {by_digest}: {}", got.text());
    assert_eq!(got.header("Content-Type"), Some(OCI_MANIFEST));
    assert!(got.body == manifest, "the manifest came back changed");
    assert!(get_blob(registry, &repository, &layer_digest).await? == component);

    // Deletes are enabled (docs/registry.md): tests can take an artifact away.
    let deleted = Request::new("DELETE", &by_digest, user(registry))
        .send(registry.address())
        .await?;
    assert_eq!(
        deleted.status,
        202,
        "DELETE {by_digest}: {}",
        deleted.text()
    );
    let gone = Request {
        headers: &accept,
        ..Request::new("GET", &by_tag, user(registry))
    }
    .send(registry.address())
    .await?;
    assert_eq!(
        gone.status,
        404,
        "GET {by_tag} after the delete: {}",
        gone.text()
    );
    Ok(())
}

#[tokio::test]
async fn a_stopped_registry_refuses_connections_and_keeps_its_blobs_across_a_restart() -> Result<()>
{
    let registry = PrivateRegistry::start("restart").await?;
    let (repository, bytes) = fresh("kept");
    let digest = push_blob(&registry, &repository, &bytes).await?;

    registry.stop().await?;
    match TcpStream::connect(registry.address()).await {
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {}
        Err(e) => bail!("connecting to the stopped registry failed otherwise: {e}"),
        Ok(_) => bail!("the stopped registry still accepts connections"),
    }

    let address = registry.address().to_owned();
    registry.start_again().await?;
    assert_eq!(
        registry.address(),
        address,
        "start_again moved the registry"
    );
    let served = get_blob(&registry, &repository, &digest)
        .await
        .context("the blob pushed before the restart")?;
    assert!(
        served == bytes,
        "the blob came back changed after the restart"
    );
    Ok(())
}

/// Pushes a manifest of one layer (`layer_type`, `bytes`) and a v0 Wasm config under `:v1`.
async fn push_artifact(
    registry: &Registry,
    repository: &str,
    layer_type: &str,
    bytes: &[u8],
) -> Result<()> {
    let layer_digest = push_blob(registry, repository, bytes).await?;
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "wasm", "os": "wasip2", "layerDigests": [layer_digest],
    }))?;
    let config_digest = push_blob(registry, repository, &config).await?;
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": "application/vnd.wasm.config.v0+json", "digest": config_digest, "size": config.len()},
        "layers": [{"mediaType": layer_type, "digest": layer_digest, "size": bytes.len()}],
    }))?;
    let path = format!("/v2/{repository}/manifests/v1");
    let put = Request {
        headers: &[("Content-Type", OCI_MANIFEST)],
        body: &manifest,
        ..Request::new("PUT", &path, user(registry))
    }
    .send(registry.address())
    .await?;
    ensure!(put.status == 201, "PUT {path}: {}", put.text());
    Ok(())
}

/// `reconcile --guest oci://…:v1` of `repository`; its stderr, having checked that it failed.
fn host_refuses(registry: &Registry, repository: &str) -> Result<String> {
    let cache = tempfile::tempdir()?;
    let module = format!("oci://{}/{repository}:v1", registry.address());
    let objects =
        reconciler_host_tests::repo_root().join("host/tests/fixtures/greeter-hello/objects.yaml");
    let mut command = std::process::Command::new(
        reconciler_host_tests::paths::target_dir().join("debug/reconciler-host"),
    );
    command
        .env("XDG_CACHE_HOME", cache.path())
        .args(["reconcile", "--guest", &module, "--objects"])
        .arg(&objects)
        .args([
            "--kind",
            "test.reconciler.dev/v1/Widget",
            "--key",
            "demo/w1",
            "--plain-http",
        ])
        .args(["--username", registry.username(), "--password-stdin"]);
    let out = reconciler_host_tests::with_password(command, registry.password())?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(!out.status.success(), "{module} was accepted: {stderr}");
    Ok(stderr)
}

#[tokio::test]
async fn the_host_refuses_an_artifact_that_is_not_a_wasm_component_with_the_reason() -> Result<()> {
    let registry = Registry::shared().await?;
    // A container image's layer type: not a Wasm artifact, refused before the layer is read.
    let (tar, bytes) = fresh("tar-layer");
    push_artifact(
        registry,
        &tar,
        "application/vnd.oci.image.layer.v1.tar",
        &bytes,
    )
    .await?;
    let said = host_refuses(registry, &tar)?;
    ensure!(
        said.contains(
            "not a Wasm component artifact: layer media type application/vnd.oci.image.layer.v1.tar"
        ),
        "{said}"
    );
    // The right layer type around a core module's bytes: pulled and verified, then refused
    // by the runtime as not a component.
    let (core, bytes) = fresh("core-module");
    push_artifact(registry, &core, "application/wasm", &bytes).await?;
    let said = host_refuses(registry, &core)?;
    ensure!(said.contains("not a WebAssembly component"), "{said}");
    Ok(())
}
