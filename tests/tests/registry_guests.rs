//! Guests from a real OCI registry (Debian's distribution 2.8, started by
//! `tools/registry/registry`, htpasswd basic auth over plain HTTP on loopback): `reconciler-host
//! push` writes a guest as a Wasm artifact, `reconcile --guest oci://…` pulls it into the
//! host's content-addressed cache and runs it, and the cache serves a pinned digest with the
//! registry down. Each test has its own registry and its own cache directory.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{Context, Result, ensure};
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{PrivateRegistry, repo_root, with_password};
use serde_json::Value;

const NOW: &str = "2026-01-02T03:04:05Z";
const FIXTURE: &str = "host/tests/fixtures/greeter-hello";

fn host() -> Command {
    Command::new(target_dir().join("debug/reconciler-host"))
}

fn guest(name: &str) -> PathBuf {
    target_dir().join("guests").join(format!("{name}.wasm"))
}

struct Session<'a> {
    registry: &'a PrivateRegistry,
    cache: tempfile::TempDir,
}

impl<'a> Session<'a> {
    fn new(registry: &'a PrivateRegistry) -> Result<Self> {
        Ok(Self {
            registry,
            cache: tempfile::tempdir()?,
        })
    }

    fn module(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.registry.address())
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut command = host();
        command
            .env("XDG_CACHE_HOME", self.cache.path())
            .args(args)
            .args([
                "--plain-http",
                "--username",
                self.registry.username(),
                "--password-stdin",
            ]);
        command
    }

    /// `push`; the manifest digest it prints last.
    fn push(&self, file: &Path, module: &str) -> Result<String> {
        let file = file.display().to_string();
        let out = with_password(
            self.command(&["push", &file, module]),
            self.registry.password(),
        )?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        ensure!(
            out.status.success(),
            "push failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = stdout.lines().last().unwrap_or("").to_owned();
        ensure!(
            digest.starts_with("sha256:") && digest.len() == 71,
            "push printed {stdout:?}"
        );
        Ok(digest)
    }

    /// `reconcile` of the greeter fixture with `--guest module`.
    fn reconcile(&self, module: &str, password: &str) -> Result<Output> {
        self.reconcile_with(module, password, &[])
    }

    /// As [`Self::reconcile`], with more arguments.
    fn reconcile_with(&self, module: &str, password: &str, more: &[&str]) -> Result<Output> {
        let objects = repo_root().join(FIXTURE).join("objects.yaml");
        let objects = objects.display().to_string();
        let args = [
            "reconcile",
            "--guest",
            module,
            "--objects",
            &objects,
            "--kind",
            "test.reconciler.dev/v1/Widget",
            "--key",
            "demo/w1",
            "--now",
            NOW,
        ];
        let mut command = self.command(&args);
        command.args(more);
        with_password(command, password)
    }

    fn blobs(&self) -> Result<usize> {
        let dir = self.cache.path().join("reconciler-host/oci/blobs/sha256");
        Ok(std::fs::read_dir(dir).map(Iterator::count).unwrap_or(0))
    }
}

/// The offline runner's output for the fixture, pinned by `expected.json`.
fn assert_greets(out: &Output, what: &str) -> Result<()> {
    ensure!(
        out.status.success(),
        "{what}: reconcile failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let actual: Value = serde_json::from_slice(&out.stdout).context("reconcile output")?;
    let expected: Value = serde_json::from_str(&std::fs::read_to_string(
        repo_root().join(FIXTURE).join("expected.json"),
    )?)?;
    ensure!(
        actual == expected,
        "{what}: output differs from {FIXTURE}/expected.json: {actual}"
    );
    Ok(())
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The command failed, saying `said`.
fn refused(out: &Output, said: &str) -> Result<()> {
    ensure!(
        !out.status.success() && stderr(out).contains(said),
        "expected a refusal saying {said:?}: {}",
        stderr(out)
    );
    Ok(())
}

#[tokio::test]
async fn a_pushed_python_and_go_guest_is_pulled_verified_and_reconciles_as_its_file_does()
-> Result<()> {
    let registry = PrivateRegistry::start("pull").await?;
    let s = Session::new(&registry)?;
    for name in ["greeter-python", "greeter-go"] {
        let module = s.module(&format!("guests/{name}:v1"));
        let digest = s.push(&guest(name), &module)?;
        // By tag, by tag and digest, by digest alone: one module.
        assert_greets(&s.reconcile(&module, registry.password())?, &module)?;
        let pinned = format!("{module}@{digest}");
        assert_greets(&s.reconcile(&pinned, registry.password())?, &pinned)?;
        let by_digest = s.module(&format!("guests/{name}@{digest}"));
        assert_greets(&s.reconcile(&by_digest, registry.password())?, &by_digest)?;
    }
    // Each module is a manifest, a config and a layer, stored once however it was named.
    ensure!(s.blobs()? == 6, "{} blobs cached, expected 6", s.blobs()?);
    Ok(())
}

#[tokio::test]
async fn with_the_registry_down_a_pinned_or_known_tag_loads_from_the_cache_and_a_new_one_fails()
-> Result<()> {
    let registry = PrivateRegistry::start("down").await?;
    let s = Session::new(&registry)?;
    let module = s.module("guests/greeter-c:v1");
    let digest = s.push(&guest("greeter-c"), &module)?;
    assert_greets(&s.reconcile(&module, registry.password())?, "first pull")?;

    registry.stop().await?;
    assert_greets(
        &s.reconcile(&format!("{module}@{digest}"), registry.password())?,
        "pinned, registry down",
    )?;
    let by_tag = s.reconcile(&module, registry.password())?;
    assert_greets(&by_tag, "tag, registry down")?;
    ensure!(
        stderr(&by_tag).contains("registry unreachable") && stderr(&by_tag).contains(&digest),
        "the fallback is not said: {}",
        stderr(&by_tag)
    );
    let never_pulled = s.reconcile(&s.module("guests/other:v1"), registry.password())?;
    refused(&never_pulled, "cannot reach the registry")?;

    // A tampered cache is a miss, never a load: with the registry down that is an error.
    let layers = s.cache.path().join("reconciler-host/oci/blobs/sha256");
    for entry in std::fs::read_dir(&layers)? {
        let path = entry?.path();
        if std::fs::metadata(&path)?.len() > 10_000 {
            std::fs::write(&path, b"tampered")?;
        }
    }
    let tampered = s.reconcile(&format!("{module}@{digest}"), registry.password())?;
    refused(&tampered, "cannot reach the registry")?;
    registry.start_again().await?;
    assert_greets(
        &s.reconcile(&format!("{module}@{digest}"), registry.password())?,
        "pinned, registry back",
    )?;
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_an_unknown_digest_and_an_oversized_module_are_refused_with_their_reason()
-> Result<()> {
    let registry = PrivateRegistry::start("refusals").await?;
    let s = Session::new(&registry)?;
    let module = s.module("guests/greeter-js:v1");
    s.push(&guest("greeter-js"), &module)?;

    let denied = s.reconcile(&module, "not-the-password")?;
    refused(&denied, "refused the credentials")?;
    let unknown = format!("{module}@sha256:{}", "0".repeat(64));
    let missing = s.reconcile(&unknown, registry.password())?;
    refused(&missing, "not found in the registry")?;

    // A cap below the module's size: refused from the manifest's claim, nothing cached.
    let config = s.cache.path().join("host.yaml");
    std::fs::write(&config, "registries:\n  maxModuleBytes: 100000\n")?;
    let objects = repo_root().join(FIXTURE).join("objects.yaml");
    let (config, objects) = (config.display().to_string(), objects.display().to_string());
    let command = s.command(&[
        "reconcile",
        "--guest",
        &module,
        "--config",
        &config,
        "--objects",
        &objects,
        "--kind",
        "test.reconciler.dev/v1/Widget",
        "--key",
        "demo/w1",
    ]);
    let too_large = with_password(command, registry.password())?;
    refused(&too_large, "exceeds the cap of 100000 bytes")?;
    ensure!(
        s.blobs()? == 0,
        "an oversized module left {} blobs",
        s.blobs()?
    );
    Ok(())
}

/// `reconcile --verify-key` with the real cosign (built from the Go module proxy): a module
/// runs only when that key signed its digest — with cosign 2 (a `.sig` tag) or cosign 3 (a
/// Sigstore bundle in the referrers tag schema, distribution 2.8 having no referrers API) —
/// also from the cache with the registry down (the signatures kept beside it are verified
/// again, not trusted).
#[tokio::test]
async fn with_a_verify_key_only_a_module_it_signed_runs_also_from_the_cache() -> Result<()> {
    use reconciler_host_tests::clients::{
        docker_config, generate_key_pair, sign, sign_with_cosign3,
    };
    let registry = PrivateRegistry::start("signed").await?;
    let s = Session::new(&registry)?;
    let keys = tempfile::tempdir()?;
    let trusted = generate_key_pair(keys.path(), "trusted")?;
    let other = generate_key_pair(keys.path(), "other")?;
    let signed = s.push(&guest("greeter-c"), &s.module("guests/greeter-c:v1"))?;
    let unsigned = s.push(&guest("greeter-js"), &s.module("guests/greeter-js:v1"))?;
    let bundled = s.push(&guest("greeter-go"), &s.module("guests/greeter-go:v1"))?;
    let config = docker_config(&registry)?;
    sign(
        &format!("{}/guests/greeter-c@{signed}", registry.address()),
        &trusted,
        config.path(),
    )?;
    sign_with_cosign3(
        &format!("{}/guests/greeter-go@{bundled}", registry.address()),
        &trusted,
        config.path(),
    )?;
    let bundled = format!("{}@{bundled}", s.module("guests/greeter-go"));
    let (trusted, other) = (trusted.display().to_string(), other.display().to_string());
    let signed = format!("{}@{signed}", s.module("guests/greeter-c"));
    let unsigned = format!("{}@{unsigned}", s.module("guests/greeter-js"));
    let password = registry.password();
    assert_greets(
        &s.reconcile_with(&signed, password, &["--verify-key", &trusted])?,
        "signed by the trusted key",
    )?;
    refused(
        &s.reconcile_with(&signed, password, &["--verify-key", &other])?,
        "none made by a trusted key",
    )?;
    let blobs = s.blobs()?;
    refused(
        &s.reconcile_with(&unsigned, password, &["--verify-key", &trusted])?,
        "no signature of",
    )?;
    // Checked before any of it is downloaded: the refusal added nothing to the cache.
    ensure!(
        s.blobs()? == blobs,
        "a refused module left blobs in the cache"
    );
    assert_greets(&s.reconcile(&unsigned, password)?, "no key: not checked")?;
    assert_greets(
        &s.reconcile_with(&bundled, password, &["--verify-key", &trusted])?,
        "signed by cosign 3",
    )?;
    refused(
        &s.reconcile_with(&bundled, password, &["--verify-key", &other])?,
        "none made by a trusted key",
    )?;

    registry.stop().await?;
    assert_greets(
        &s.reconcile_with(&signed, password, &["--verify-key", &trusted])?,
        "signed, registry down",
    )?;
    assert_greets(
        &s.reconcile_with(&bundled, password, &["--verify-key", &trusted])?,
        "signed by cosign 3, registry down",
    )?;
    refused(
        &s.reconcile_with(&signed, password, &["--verify-key", &other])?,
        "none made by a trusted key",
    )?;
    refused(
        &s.reconcile_with(&unsigned, password, &["--verify-key", &trusted])?,
        "no signature of",
    )?;
    Ok(())
}

/// `reconcile --guest oci://… --trusted-root … --certificate-identity … --certificate-oidc-issuer
/// …` (cosign's own flags) runs a module signed keyless: its certificate, carried by the real
/// cosign 2 (`.sig` tag annotations) and cosign 3 (bundle), chains to the authority of a trusted
/// root `cosign trusted-root create` wrote and names the identity. Fulcio and Rekor are out of
/// reach here, so an authority of our own issues the certificate as Fulcio would (with its
/// OIDC issuer extension) and the signatures carry no log entry.
#[tokio::test]
async fn a_keyless_signature_counts_when_its_certificate_names_the_identity_and_chains_to_the_root()
-> Result<()> {
    use reconciler_host_tests::clients::{
        Authority, docker_config, sign_with_certificate, trusted_root,
    };
    const ISSUER: &str = "https://issuer.example";
    let registry = PrivateRegistry::start("keyless").await?;
    let s = Session::new(&registry)?;
    let dir = tempfile::tempdir()?;
    let ours = Authority::new("our signing authority")?;
    let theirs = Authority::new("another authority")?;
    let builder = ours.issue(dir.path(), "builder", "builder@example.com", ISSUER)?;
    let stranger = theirs.issue(dir.path(), "stranger", "builder@example.com", ISSUER)?;
    let root = dir.path().join("trusted_root.json");
    trusted_root(&dir.path().join("builder-ca.pem"), None, &root)?;
    // The same authority, and a transparency log: then a signature must carry a log entry.
    let log_key = dir.path().join("log.pub");
    std::fs::write(
        &log_key,
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?.public_key_pem(),
    )?;
    let root_with_log = dir.path().join("trusted_root_with_log.json");
    trusted_root(
        &dir.path().join("builder-ca.pem"),
        Some(&log_key),
        &root_with_log,
    )?;

    let config = docker_config(&registry)?;
    let image = |repo: &str, digest: &str| format!("{}/guests/{repo}@{digest}", registry.address());
    let by_cosign2 = s.push(&guest("greeter-c"), &s.module("guests/greeter-c:v1"))?;
    let by_cosign3 = s.push(&guest("greeter-go"), &s.module("guests/greeter-go:v1"))?;
    let by_stranger = s.push(&guest("greeter-js"), &s.module("guests/greeter-js:v1"))?;
    sign_with_certificate(
        false,
        &image("greeter-c", &by_cosign2),
        &builder,
        config.path(),
    )?;
    sign_with_certificate(
        true,
        &image("greeter-go", &by_cosign3),
        &builder,
        config.path(),
    )?;
    sign_with_certificate(
        false,
        &image("greeter-js", &by_stranger),
        &stranger,
        config.path(),
    )?;

    let module =
        |repo: &str, digest: &str| format!("{}@{digest}", s.module(&format!("guests/{repo}")));
    let (by_cosign2, by_cosign3, by_stranger) = (
        module("greeter-c", &by_cosign2),
        module("greeter-go", &by_cosign3),
        module("greeter-js", &by_stranger),
    );
    let root = root.display().to_string();
    let keyless = |identity: &'static str, root: &str| -> Vec<String> {
        [
            "--trusted-root",
            root,
            identity,
            if identity.ends_with("regexp") {
                ".*@example\\.com"
            } else {
                "builder@example.com"
            },
            "--certificate-oidc-issuer",
            ISSUER,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let run = |module: &str, flags: &[String]| {
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        s.reconcile_with(module, registry.password(), &flags)
    };
    let exact = keyless("--certificate-identity", &root);
    assert_greets(
        &run(&by_cosign2, &exact)?,
        "cosign 2, certificate of the identity",
    )?;
    assert_greets(
        &run(&by_cosign3, &exact)?,
        "cosign 3, certificate of the identity",
    )?;
    assert_greets(
        &run(
            &by_cosign3,
            &keyless("--certificate-identity-regexp", &root),
        )?,
        "an identity pattern",
    )?;
    refused(
        &run(&by_stranger, &exact)?,
        "does not chain to a trusted authority",
    )?;
    let mut someone_else = exact.clone();
    someone_else[3] = "someone@example.com".into();
    refused(&run(&by_cosign2, &someone_else)?, "not an allowed identity")?;
    let mut other_issuer = exact.clone();
    other_issuer[5] = "https://accounts.example".into();
    refused(&run(&by_cosign3, &other_issuer)?, "not an allowed identity")?;
    refused(
        &run(
            &by_cosign2,
            &keyless(
                "--certificate-identity",
                &root_with_log.display().to_string(),
            ),
        )?,
        "has no transparency log entry",
    )?;
    // A trusted key's signature counts with a certificate attached, as `cosign verify --key`
    // reads it; another key's certificate does not stand in for a keyless identity.
    let key = |name: &str| {
        [
            "--verify-key".to_owned(),
            dir.path().join(name).display().to_string(),
        ]
    };
    assert_greets(
        &run(&by_cosign2, &key("builder.pub"))?,
        "the certificate's key trusted",
    )?;
    refused(
        &run(&by_cosign2, &key("stranger.pub"))?,
        "no keyless identity is trusted",
    )?;
    Ok(())
}

/// Interoperability with `oras` (v1.3.6, built from the Go module proxy): what `reconciler-host
/// push` wrote comes out of a plain `oras pull` byte for byte (its layer carries the title
/// annotation oras writes files by), and a guest `oras push` wrote in the CNCF layout is pulled
/// and runs.
#[tokio::test]
async fn oras_pulls_what_the_host_pushed_and_the_host_runs_what_oras_pushed() -> Result<()> {
    let oras = reconciler_host_tests::clients::oras()?;
    let registry = PrivateRegistry::start("oras").await?;
    let s = Session::new(&registry)?;
    let login = [
        "--plain-http".to_owned(),
        "--username".into(),
        registry.username().into(),
        "--password".into(),
        registry.password().into(),
    ];
    let file = guest("greeter-c");
    s.push(&file, &s.module("guests/greeter-c:v1"))?;
    let out = tempfile::tempdir()?;
    let pulled = Command::new(&oras)
        .arg("pull")
        .args(&login)
        .arg(format!("{}/guests/greeter-c:v1", registry.address()))
        .arg("--output")
        .arg(out.path())
        .output()?;
    ensure!(
        pulled.status.success(),
        "oras pull: {}",
        String::from_utf8_lossy(&pulled.stderr)
    );
    ensure!(
        std::fs::read(out.path().join("greeter-c.wasm"))? == std::fs::read(&file)?,
        "oras pull did not write the component byte for byte"
    );

    // oras push in the CNCF layout: a Wasm config naming the layer, one application/wasm layer.
    let work = tempfile::tempdir()?;
    std::fs::copy(&file, work.path().join("greeter.wasm"))?;
    let digest = format!(
        "sha256:{:x}",
        <sha2::Sha256 as sha2::Digest>::digest(std::fs::read(&file)?)
    );
    let config =
        serde_json::json!({"architecture": "wasm", "os": "wasip2", "layerDigests": [digest]});
    std::fs::write(work.path().join("config.json"), config.to_string())?;
    let pushed = Command::new(&oras)
        .current_dir(work.path())
        .arg("push")
        .args(&login)
        .args([
            "--artifact-type",
            "application/vnd.wasm.config.v0+json",
            "--config",
            "config.json:application/vnd.wasm.config.v0+json",
        ])
        .arg(format!("{}/guests/oras-pushed:v1", registry.address()))
        .arg("greeter.wasm:application/wasm")
        .output()?;
    ensure!(
        pushed.status.success(),
        "oras push: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    assert_greets(
        &s.reconcile(&s.module("guests/oras-pushed:v1"), registry.password())?,
        "pushed by oras",
    )?;
    Ok(())
}

/// Interoperability with `wkg` (wasm-pkg-tools 0.16.1, from crates.io): a guest `wkg oci push`
/// wrote is pulled and runs.
#[tokio::test]
async fn the_host_runs_what_wkg_pushed() -> Result<()> {
    let wkg = reconciler_host_tests::clients::wkg()?;
    let registry = PrivateRegistry::start("wkg").await?;
    let s = Session::new(&registry)?;
    let home = tempfile::tempdir()?;
    let pushed = Command::new(&wkg)
        // wkg reads and writes its configuration under HOME: a fresh one per test.
        .env("HOME", home.path())
        .args(["oci", "push", "--insecure", registry.address()])
        .args(["-u", registry.username(), "-p", registry.password()])
        .arg(format!("{}/guests/wkg-pushed:v1", registry.address()))
        .arg(guest("greeter-c"))
        .output()?;
    ensure!(
        pushed.status.success(),
        "wkg oci push: {}",
        String::from_utf8_lossy(&pushed.stderr)
    );
    assert_greets(
        &s.reconcile(&s.module("guests/wkg-pushed:v1"), registry.password())?,
        "pushed by wkg",
    )?;
    Ok(())
}
