//! Cosign signatures of guests, checked against keys the operator trusts
//! (`reconcilers.verify.keys`, `--verify-key`).
//!
//! Where cosign 2.x puts a signature of manifest `sha256:HEX`: the tag `sha256-HEX.sig` in the
//! same repository, an image manifest whose layers are each a "simple signing" payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`: JSON naming the signed manifest digest
//! under `critical.image.docker-manifest-digest`) with the signature, base64 ASN.1 DER ECDSA
//! P-256 over the payload's SHA-256, in the layer's `dev.cosignproject.cosign/signature`
//! annotation. A signature counts when one trusted key verifies it *and* its payload names the
//! module's digest: a valid signature of another digest (copied onto this tag) proves nothing.
//!
//! Keys are what `cosign generate-key-pair` writes (`cosign.pub`: PKIX PEM, ECDSA P-256).
//! The crypto is `RustCrypto`'s `p256`; the `sigstore` crate was not taken because it needs
//! OpenSSL or aws-lc's C build for the same two calls and brings a second OCI client.
//!
//! Signatures found are kept beside the module in the cache (`oci/signatures/HEX.json`) and
//! verified again at every load, so a host whose registry is down still runs only what a
//! trusted key signed.

use std::path::{Path, PathBuf};

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;

use super::registry::{self, Session};
use super::{PullError, artifact};

/// The media type of a cosign simple-signing payload layer.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The layer annotation holding the base64 signature.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// At most this many signatures are read per digest; a payload is at most this many bytes.
const MAX_SIGNATURES: usize = 16;
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// The public keys a guest's signature may be made with.
#[derive(Debug, Clone)]
pub struct TrustedKeys(Vec<TrustedKey>);

#[derive(Debug, Clone)]
struct TrustedKey {
    /// The key's file name, as the configuration gives it: what a status names.
    name: String,
    key: VerifyingKey,
}

impl TrustedKeys {
    /// The keys in `files` (relative paths taken from `base`), or which file is not one.
    pub fn load(files: &[PathBuf], base: &Path) -> Result<Self, String> {
        if files.is_empty() {
            return Err("no key is listed: signatures required, and none could be verified".into());
        }
        let mut keys = Vec::new();
        for file in files {
            let path = base.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|e| format!("{}: cannot read the key: {e}", path.display()))?;
            keys.push(Self::key(&file.display().to_string(), &text)?);
        }
        Ok(Self(keys))
    }

    fn key(name: &str, pem: &str) -> Result<TrustedKey, String> {
        let key = VerifyingKey::from_public_key_pem(pem).map_err(|e| {
            format!("{name}: not an ECDSA P-256 public key in PEM, as `cosign generate-key-pair` writes ({e})")
        })?;
        Ok(TrustedKey {
            name: name.to_owned(),
            key,
        })
    }

    /// No key: every signature check fails (a configuration whose keys cannot be read).
    pub fn none() -> Self {
        Self(Vec::new())
    }

    /// The keys in PEM texts, named: for tests and the command line.
    pub fn from_pems(pems: &[(&str, &str)]) -> Result<Self, String> {
        pems.iter()
            .map(|(name, pem)| Self::key(name, pem))
            .collect::<Result<_, _>>()
            .map(Self)
    }
}

/// One signature as cosign stores it: the payload and the signature, both base64.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct Found {
    payload: String,
    signature: String,
}

/// Why no signature admits a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Nothing signed it.
    Missing,
    /// Signatures exist, but none by a trusted key over this digest: why.
    Invalid(String),
}

/// The trusted key that signed `digest` among `found`, or why none did.
pub(super) fn check(keys: &TrustedKeys, digest: &str, found: &[Found]) -> Result<String, Refusal> {
    if found.is_empty() {
        return Err(Refusal::Missing);
    }
    let engine = base64::engine::general_purpose::STANDARD;
    let mut other_digest = None;
    for candidate in found {
        let (Ok(payload), Ok(signature)) = (
            engine.decode(&candidate.payload),
            engine.decode(candidate.signature.trim()),
        ) else {
            continue;
        };
        let Ok(signature) = Signature::from_der(&signature) else {
            continue;
        };
        let Some(key) = keys
            .0
            .iter()
            .find(|k| k.key.verify(&payload, &signature).is_ok())
        else {
            continue;
        };
        match signed_digest(&payload) {
            Some(signed) if signed == digest => return Ok(key.name.clone()),
            signed => other_digest = Some(signed.unwrap_or_else(|| "no digest".into())),
        }
    }
    Err(Refusal::Invalid(match other_digest {
        Some(other) => format!(
            "a trusted key's signature found for {digest} covers {}, not this digest",
            crate::validation::message(&other)
        ),
        None => format!(
            "{} signature(s) found for {digest}, none made by a trusted key",
            found.len()
        ),
    }))
}

/// The manifest digest a simple-signing payload names.
fn signed_digest(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value
        .pointer("/critical/image/docker-manifest-digest")?
        .as_str()
        .map(ToOwned::to_owned)
}

/// The signatures the registry holds for `digest` (cosign 2.x's `.sig` tag), each payload read
/// against its cap and its digest checked; none when the tag does not exist.
pub(super) async fn fetch(session: &mut Session, digest: &str) -> Result<Vec<Found>, PullError> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Ok(Vec::new());
    };
    let manifest = match session.manifest(&format!("sha256-{hex}.sig")).await {
        Ok(manifest) => manifest,
        Err(PullError::NotFound { .. }) => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let manifest: serde_json::Value = serde_json::from_slice(&manifest)
        .map_err(|e| session.failed(format!("the signature manifest is not JSON: {e}")))?;
    let layers = manifest["layers"].as_array().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for layer in layers.iter().take(MAX_SIGNATURES) {
        let (Some(media_type), Some(blob), Some(signature)) = (
            layer["mediaType"].as_str(),
            layer["digest"].as_str(),
            layer["annotations"][SIGNATURE_ANNOTATION].as_str(),
        ) else {
            continue;
        };
        if media_type != SIMPLE_SIGNING {
            continue;
        }
        let mut response = session.blob(blob).await?;
        let Ok(payload) = registry::read_capped(&mut response, MAX_PAYLOAD_BYTES).await else {
            continue;
        };
        if artifact::sha256_digest(&payload) != blob {
            continue;
        }
        found.push(Found {
            payload: base64::engine::general_purpose::STANDARD.encode(&payload),
            signature: signature.to_owned(),
        });
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer;
    use p256::pkcs8::{EncodePublicKey, LineEnding};

    use super::*;

    fn signed(key: &SigningKey, digest: &str) -> Found {
        let payload = serde_json::to_vec(&serde_json::json!({
            "critical": {"identity": {"docker-reference": "r/g"},
                "image": {"docker-manifest-digest": digest},
                "type": "cosign container image signature"},
            "optional": null}))
        .unwrap();
        let signature: Signature = key.sign(&payload);
        let engine = base64::engine::general_purpose::STANDARD;
        Found {
            payload: engine.encode(&payload),
            signature: engine.encode(signature.to_der().as_bytes()),
        }
    }

    fn keys(named: &[(&str, &SigningKey)]) -> TrustedKeys {
        let pems: Vec<(String, String)> = named
            .iter()
            .map(|(name, k)| {
                let pem = k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
                ((*name).to_owned(), pem)
            })
            .collect();
        let refs: Vec<(&str, &str)> = pems.iter().map(|(n, p)| (n.as_str(), p.as_str())).collect();
        TrustedKeys::from_pems(&refs).unwrap()
    }

    #[test]
    fn only_a_trusted_keys_signature_of_this_very_digest_counts() {
        let key = |n: u8| SigningKey::from_slice(&[n; 32]).unwrap();
        let (ours, old, theirs) = (key(1), key(2), key(3));
        let trusted = keys(&[("ours.pub", &ours), ("old.pub", &old)]);
        let digest = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        assert_eq!(check(&trusted, &digest, &[]), Err(Refusal::Missing));
        assert_eq!(
            check(&trusted, &digest, &[signed(&ours, &digest)]),
            Ok("ours.pub".into())
        );
        // Several keys at once (rotation): either verifies.
        assert_eq!(
            check(
                &trusted,
                &digest,
                &[signed(&theirs, &digest), signed(&old, &digest)]
            ),
            Ok("old.pub".into())
        );
        assert!(matches!(
            check(&trusted, &digest, &[signed(&theirs, &digest)]),
            Err(Refusal::Invalid(why)) if why.contains("none made by a trusted key")
        ));
        assert!(matches!(
            check(&trusted, &digest, &[signed(&ours, &other)]),
            Err(Refusal::Invalid(why)) if why.contains("not this digest")
        ));
        // A payload altered after signing.
        let mut altered = signed(&ours, &digest);
        altered.payload = signed(&ours, &other).payload;
        assert!(matches!(
            check(&trusted, &digest, &[altered]),
            Err(Refusal::Invalid(_))
        ));
        assert!(TrustedKeys::from_pems(&[("bad.pub", "not a key")]).is_err());
    }
}
