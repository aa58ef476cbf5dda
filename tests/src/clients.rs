//! The field's registry clients, built once from the Go module proxy by `tools/clients/build.sh`
//! (cached like the control plane): the real `cosign` (2.x and 3.x) the signed-guest tests sign
//! with, and `oras` and `wkg` for interoperability.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};

use crate::paths::repo_root;
use crate::registry::PrivateRegistry;

/// The `cosign` binary, built first if the cache lacks it.
pub fn cosign() -> Result<PathBuf> {
    client("cosign")
}

/// The `wkg` binary (the Bytecode Alliance's wasm-pkg-tools), built first if the cache lacks it.
pub fn wkg() -> Result<PathBuf> {
    client("wkg")
}

/// The `oras` binary, built first if the cache lacks it.
pub fn oras() -> Result<PathBuf> {
    client("oras")
}

fn client(name: &str) -> Result<PathBuf> {
    let script = repo_root().join("tools/clients/build.sh");
    let built = Command::new(&script)
        .arg(name)
        .status()
        .context("tools/clients/build.sh")?;
    ensure!(built.success(), "tools/clients/build.sh {name} failed");
    let out = Command::new(&script).args([name, "--print"]).output()?;
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// A directory holding `config.json` with `registry`'s credentials, as cosign (and every
/// docker-config client) reads them from `DOCKER_CONFIG`.
pub fn docker_config(registry: &PrivateRegistry) -> Result<tempfile::TempDir> {
    use base64::Engine as _;
    let dir = tempfile::tempdir()?;
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        registry.username(),
        registry.password()
    ));
    let config = serde_json::json!({"auths": {registry.address(): {"auth": auth}}});
    std::fs::write(dir.path().join("config.json"), config.to_string())?;
    Ok(dir)
}

/// `cosign generate-key-pair` in `dir` with an empty password: `dir/PREFIX.key` and
/// `dir/PREFIX.pub`; the public key's path.
pub fn generate_key_pair(dir: &Path, prefix: &str) -> Result<PathBuf> {
    let out = Command::new(cosign()?)
        .args(["generate-key-pair", "--output-key-prefix", prefix])
        .current_dir(dir)
        .env("COSIGN_PASSWORD", "")
        .output()?;
    ensure!(
        out.status.success(),
        "cosign generate-key-pair: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(dir.join(format!("{prefix}.pub")))
}

/// `cosign sign` of `image` (`HOST:PORT/REPO@sha256:…`, a plain-HTTP registry) with the private
/// key beside `public` (`PREFIX.key`), no transparency log; `docker_config` is a directory
/// holding the registry's credentials as `config.json`.
pub fn sign(image: &str, public: &Path, docker_config: &Path) -> Result<()> {
    let key = public.with_extension("key");
    let out = Command::new(cosign()?)
        .args([
            "sign",
            "--yes",
            "--tlog-upload=false",
            "--allow-http-registry",
        ])
        .arg("--key")
        .arg(&key)
        .arg(image)
        .env("COSIGN_PASSWORD", "")
        .env("DOCKER_CONFIG", docker_config)
        .output()?;
    ensure!(
        out.status.success(),
        "cosign sign {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}

/// The `cosign` 3.x binary (`tools/clients/build.sh cosign3`).
pub fn cosign3() -> Result<PathBuf> {
    client("cosign3")
}

/// `cosign sign` with cosign 3.x, which writes a Sigstore bundle (an OCI referrer of `image`)
/// where 2.x writes a `.sig` tag: no transparency log or timestamp authority (a signing config
/// listing no service), the key beside `public`.
pub fn sign_with_cosign3(image: &str, public: &Path, docker_config: &Path) -> Result<()> {
    let cosign = cosign3()?;
    let config = docker_config.join("signing-config.json");
    let created = Command::new(&cosign)
        .args(["signing-config", "create", "--out"])
        .arg(&config)
        .output()?;
    ensure!(
        created.status.success(),
        "cosign signing-config create: {}",
        String::from_utf8_lossy(&created.stderr)
    );
    let out = Command::new(&cosign)
        .args(["sign", "--yes", "--allow-http-registry", "--signing-config"])
        .arg(&config)
        .arg("--key")
        .arg(public.with_extension("key"))
        .arg(image)
        .env("COSIGN_PASSWORD", "")
        .env("DOCKER_CONFIG", docker_config)
        .output()?;
    ensure!(
        out.status.success(),
        "cosign (3) sign {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
