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

pub(crate) fn client(name: &str) -> Result<PathBuf> {
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

/// A certificate authority of one's own, standing in for Fulcio (which this machine cannot
/// reach), and a signing certificate it issued: what a keyless signature carries.
pub struct Authority {
    params: rcgen::CertificateParams,
    key: rcgen::KeyPair,
    /// The authority's certificate, PEM.
    pub pem: String,
}

impl Authority {
    pub fn new(name: &str) -> Result<Self> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign];
        let pem = params.self_signed(&key)?.pem();
        Ok(Self { params, key, pem })
    }

    /// A code-signing certificate for `subject` (an e-mail subject alternative name) and the
    /// OIDC `issuer` (Fulcio's extension), as Fulcio issues one, with its key; written into
    /// `dir` as `PREFIX.pem` (certificate), `PREFIX-ca.pem` (this authority) and the key as
    /// cosign imports it (`cosign import-key-pair`: `PREFIX.key`, `PREFIX.pub`). The
    /// certificate's path.
    pub fn issue(&self, dir: &Path, prefix: &str, subject: &str, issuer: &str) -> Result<PathBuf> {
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.subject_alt_names = vec![rcgen::SanType::Rfc822Name(subject.try_into()?)];
        params.key_usages = vec![rcgen::KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::CodeSigning];
        // Fulcio's OIDC issuer extension, a DER UTF8String.
        let mut issuer_der = vec![0x0c, u8::try_from(issuer.len())?];
        issuer_der.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![rcgen::CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            issuer_der,
        )];
        let authority = rcgen::Issuer::from_params(&self.params, &self.key);
        let certificate = params.signed_by(&key, &authority)?;
        let pkcs8 = dir.join(format!("{prefix}-pkcs8.key"));
        std::fs::write(&pkcs8, key.serialize_pem())?;
        let out = Command::new(cosign()?)
            .args(["import-key-pair", "--key"])
            .arg(&pkcs8)
            .args(["--output-key-prefix", prefix])
            .current_dir(dir)
            .env("COSIGN_PASSWORD", "")
            .output()?;
        ensure!(
            out.status.success(),
            "cosign import-key-pair: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.join(format!("{prefix}-ca.pem")), &self.pem)?;
        let path = dir.join(format!("{prefix}.pem"));
        std::fs::write(&path, certificate.pem())?;
        Ok(path)
    }
}

/// `cosign trusted-root create` (cosign 3): a Sigstore trusted root at `out` whose one
/// certificate authority is the PEM chain `chain`, and whose one transparency log has the
/// public key `log_key` when given.
pub fn trusted_root(chain: &Path, log_key: Option<&Path>, out: &Path) -> Result<()> {
    let mut command = Command::new(cosign3()?);
    command
        .args(["trusted-root", "create", "--fulcio"])
        .arg(format!(
            "url=https://ca.example,certificate-chain={}",
            chain.display()
        ));
    if let Some(key) = log_key {
        command.arg("--rekor").arg(format!(
            "url=https://log.example,public-key={},start-time=2020-01-01T00:00:00Z",
            key.display()
        ));
    }
    let out_ = command.arg("--out").arg(out).output()?;
    ensure!(
        out_.status.success(),
        "cosign trusted-root create: {}",
        String::from_utf8_lossy(&out_.stderr)
    );
    Ok(())
}

/// `cosign sign` of `image` with the certificate `certificate` (`PREFIX.pem`, from
/// [`Authority::issue`]) and its key and authority beside it, no transparency log: with
/// cosign 2 (a `.sig` tag carrying the certificate) or cosign 3 (a bundle carrying it).
pub fn sign_with_certificate(
    cosign3: bool,
    image: &str,
    certificate: &Path,
    docker_config: &Path,
) -> Result<()> {
    let stem = certificate.with_extension("");
    let chain = PathBuf::from(format!("{}-ca.pem", stem.display()));
    let mut command = Command::new(if cosign3 { self::cosign3()? } else { cosign()? });
    command.args(["sign", "--yes", "--allow-http-registry"]);
    if cosign3 {
        let config = docker_config.join("signing-config.json");
        let created = Command::new(self::cosign3()?)
            .args(["signing-config", "create", "--out"])
            .arg(&config)
            .output()?;
        ensure!(created.status.success(), "cosign signing-config create");
        command.arg("--signing-config").arg(config);
    } else {
        command.arg("--tlog-upload=false");
    }
    let out = command
        .arg("--key")
        .arg(stem.with_extension("key"))
        .arg("--certificate")
        .arg(certificate)
        .arg("--certificate-chain")
        .arg(chain)
        .arg(image)
        .env("COSIGN_PASSWORD", "")
        .env("DOCKER_CONFIG", docker_config)
        .output()?;
    ensure!(
        out.status.success(),
        "cosign sign --certificate {image}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(())
}
