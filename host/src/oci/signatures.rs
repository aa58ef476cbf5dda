//! Cosign signatures of guests, checked against keys the operator trusts
//! (`reconcilers.verify.keys`, `--verify-key`).
//!
//! Where cosign 2.x puts a signature of manifest `sha256:HEX`: the tag `sha256-HEX.sig` in the
//! same repository, an image manifest whose layers are each a "simple signing" payload
//! (`application/vnd.dev.cosign.simplesigning.v1+json`: JSON naming the signed manifest digest
//! under `critical.image.docker-manifest-digest`) with the signature, base64 ASN.1 DER ECDSA
//! P-256 over the payload's SHA-256, in the layer's `dev.cosignproject.cosign/signature`
//! annotation.
//!
//! cosign 3.x writes a Sigstore bundle instead (`application/vnd.dev.sigstore.bundle.v0.3+json`),
//! an OCI artifact whose `subject` is the module's manifest: found through the referrers API,
//! or on registries without it (distribution 2.8) through the referrers tag schema's index at
//! the tag `sha256-HEX`. Its DSSE envelope carries an in-toto statement whose subject is the
//! digest and whose predicate type is cosign's signature (`https://sigstore.dev/cosign/sign/v1`),
//! signed over DSSE's pre-authentication encoding.
//!
//! A signature counts when one trusted key verifies it *and* its payload names the module's
//! digest: a valid signature of another digest (copied onto this tag) proves nothing, nor does
//! an attestation (another predicate type) that a trusted key made about it.
//!
//! Keys are what `cosign generate-key-pair` writes (`cosign.pub`: PKIX PEM, ECDSA P-256). A
//! signature that carries a certificate (keyless, or `cosign sign --certificate`) is checked
//! against the trusted root and identities instead when no trusted key made it ([`Keyless`]).
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

use super::artifact;
use super::error::{PullError, Rejection, TrustError};
use super::keyless::{Keyless, Material, TlogEntry};
use super::registry::{self, Session};

/// The media type of a cosign simple-signing payload layer.
const SIMPLE_SIGNING: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// The media types of a Sigstore bundle (the artifact and its layer), as cosign 3 writes them
/// and as earlier bundle versions are named.
const BUNDLE_TYPES: [&str; 3] = [
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
    "application/vnd.dev.sigstore.bundle+json;version=0.2",
];
/// The in-toto predicate type of cosign's image signature.
const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The layer annotation holding the base64 signature.
const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// The layer annotations of a keyless signature: its certificate and chain (PEM) and its
/// transparency log bundle (JSON).
const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// At most this many signatures are read per digest; a payload is at most this many bytes.
const MAX_SIGNATURES: usize = 16;
const MAX_PAYLOAD_BYTES: u64 = 64 << 10;

/// Whom a guest's signature may be made by: public keys, and keyless identities whose
/// certificates chain to a trusted root ([`Keyless`]).
#[derive(Debug, Clone)]
pub struct TrustPolicy {
    keys: Vec<TrustedKey>,
    keyless: Option<Keyless>,
    /// The setting it was read from, as refusals name it (`reconcilers.verify` by default).
    source: String,
}

/// What a policy is named in refusals unless [`TrustPolicy::named`] says otherwise.
const HOST_WIDE: &str = "reconcilers.verify";

#[derive(Debug, Clone)]
struct TrustedKey {
    /// The key's file name, as the configuration gives it: what a status names.
    name: String,
    key: VerifyingKey,
}

impl TrustPolicy {
    /// The keys in `files` (relative paths taken from `base`) and the keyless policy, or why
    /// they cannot be read; at least one of the two.
    pub(crate) fn load(
        files: &[PathBuf],
        base: &Path,
        keyless: Option<Keyless>,
    ) -> Result<Self, TrustError> {
        if files.is_empty() && keyless.is_none() {
            return Err(TrustError::NothingTrusted);
        }
        let mut keys = Vec::new();
        for file in files {
            let path = base.join(file);
            let text = std::fs::read_to_string(&path)
                .map_err(|source| TrustError::ReadKey { path, source })?;
            keys.push(Self::key(&file.display().to_string(), &text)?);
        }
        Ok(Self {
            keys,
            keyless,
            source: HOST_WIDE.to_owned(),
        })
    }

    /// The same policy, named `source` in refusals (a tenant rule's `verify`, a flag).
    #[must_use]
    pub(crate) fn named(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// The setting it was read from.
    pub(crate) fn source(&self) -> &str {
        &self.source
    }

    fn key(name: &str, pem: &str) -> Result<TrustedKey, TrustError> {
        let key = VerifyingKey::from_public_key_pem(pem).map_err(|e| TrustError::NotAKey {
            name: name.to_owned(),
            reason: e.to_string(),
        })?;
        Ok(TrustedKey {
            name: name.to_owned(),
            key,
        })
    }

    /// No key: every signature check fails (a configuration whose keys cannot be read).
    pub(crate) fn none() -> Self {
        Self {
            keys: Vec::new(),
            keyless: None,
            source: HOST_WIDE.to_owned(),
        }
    }

    /// The keys in PEM texts, named: for tests and the command line.
    pub fn from_pems(pems: &[(&str, &str)]) -> Result<Self, TrustError> {
        let keys = pems
            .iter()
            .map(|(name, pem)| Self::key(name, pem))
            .collect::<Result<_, _>>()?;
        Ok(Self {
            keys,
            keyless: None,
            source: HOST_WIDE.to_owned(),
        })
    }

    /// Who made `signature` over `signed`: a trusted key's name (whether or not a certificate
    /// came with it, as `cosign verify --key` reads it), or else a keyless identity.
    fn signer(
        &self,
        candidate: &Found,
        signed: &[u8],
        signature: &Signature,
    ) -> Result<String, Rejection> {
        if let Some(key) = self
            .keys
            .iter()
            .find(|k| k.key.verify(signed, signature).is_ok())
        {
            return Ok(key.name.clone());
        }
        match (candidate.material(), &self.keyless) {
            (None, _) => Err(Rejection::NoTrustedKey),
            (Some(material), Some(keyless)) => {
                keyless.verify(material, signed, signature, candidate.signature())
            }
            (Some(_), None) => Err(Rejection::NoKeylessTrusted),
        }
    }
}

/// One signature as cosign stores it: the payload and the signature, base64.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "format", rename_all = "camelCase")]
pub(super) enum Found {
    /// cosign 2.x: a simple-signing payload, signed as it is.
    #[serde(rename_all = "camelCase")]
    SimpleSigning {
        payload: String,
        signature: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        material: Option<Material>,
    },
    /// cosign 3.x: a DSSE envelope's payload (an in-toto statement) and type, signed over
    /// DSSE's pre-authentication encoding.
    #[serde(rename_all = "camelCase")]
    Dsse {
        payload_type: String,
        payload: String,
        signature: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        material: Option<Material>,
    },
}

impl Found {
    /// A keyless signature's certificate (and log entry); none for a key's signature.
    fn material(&self) -> Option<&Material> {
        match self {
            Self::SimpleSigning { material, .. } | Self::Dsse { material, .. } => material.as_ref(),
        }
    }

    /// The signature, base64 as found.
    fn signature(&self) -> &str {
        match self {
            Self::SimpleSigning { signature, .. } | Self::Dsse { signature, .. } => signature,
        }
    }

    /// The bytes the signature covers, the signature, and the digest the payload vouches for
    /// (none when it names none); `None` if it does not decode.
    fn parts(&self) -> Option<(Vec<u8>, Signature, Option<String>)> {
        let engine = base64::engine::general_purpose::STANDARD;
        let (payload, signature) = match self {
            Self::SimpleSigning {
                payload, signature, ..
            }
            | Self::Dsse {
                payload, signature, ..
            } => (
                engine.decode(payload).ok()?,
                engine.decode(signature.trim()).ok()?,
            ),
        };
        let signature = Signature::from_der(&signature).ok()?;
        Some(match self {
            Self::SimpleSigning { .. } => {
                let digest = simple_signing_digest(&payload);
                (payload, signature, digest)
            }
            Self::Dsse { payload_type, .. } => {
                let digest = statement_digest(&payload);
                (pae(payload_type, &payload), signature, digest)
            }
        })
    }
}

/// DSSE's pre-authentication encoding: `DSSEv1 LEN(type) type LEN(body) body`.
fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// Why no signature admits a digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Nothing signed it.
    Missing,
    /// Signatures exist, but none by a trusted key over this digest: why.
    Invalid(String),
}

/// Who signed `digest` among `found` (a trusted key or a keyless identity), or why none did.
pub(super) fn check(
    policy: &TrustPolicy,
    digest: &str,
    found: &[Found],
) -> Result<String, Refusal> {
    if found.is_empty() {
        return Err(Refusal::Missing);
    }
    let mut other_digest = None;
    let mut why_not = Vec::new();
    for candidate in found {
        let Some((signed, signature, vouched)) = candidate.parts() else {
            why_not.push(Rejection::Undecodable.to_string());
            continue;
        };
        let by = match policy.signer(candidate, &signed, &signature) {
            Ok(by) => by,
            Err(why) => {
                why_not.push(why.to_string());
                continue;
            }
        };
        match vouched {
            Some(signed) if signed == digest => return Ok(by),
            signed => other_digest = Some(signed.unwrap_or_else(|| "no digest".into())),
        }
    }
    if let Some(other) = other_digest {
        return Err(Refusal::Invalid(format!(
            "a trusted signature found for {digest} covers {}, not this digest",
            crate::cluster::validation::message(&other)
        )));
    }
    why_not.sort();
    why_not.dedup();
    Err(Refusal::Invalid(format!(
        "{} signature(s) found for {digest}, none made by a trusted key or identity: {}",
        found.len(),
        crate::cluster::validation::message(&why_not.join("; "))
    )))
}

/// The manifest digest a simple-signing payload names.
fn simple_signing_digest(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    value
        .pointer("/critical/image/docker-manifest-digest")?
        .as_str()
        .map(ToOwned::to_owned)
}

/// The manifest digest an in-toto statement of cosign's signature predicate names (its one
/// subject); an attestation of another predicate vouches for nothing here.
fn statement_digest(payload: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(payload).ok()?;
    if value["predicateType"] != COSIGN_SIGN_PREDICATE {
        return Some("no image signature (another predicate type)".into());
    }
    let [subject] = value["subject"].as_array()?.as_slice() else {
        return None;
    };
    subject["digest"]["sha256"]
        .as_str()
        .map(|hex| format!("sha256:{hex}"))
}

/// The signatures the registry holds for `digest`: cosign 2.x's and cosign 3.x's.
pub(super) async fn fetch(session: &mut Session, digest: &str) -> Result<Vec<Found>, PullError> {
    let mut found = simple_signing(session, digest).await?;
    found.extend(bundles(session, digest).await?);
    Ok(found)
}

/// cosign 3.x's bundles of `digest`: its referrers (the API, else the referrers tag schema's
/// index) of a bundle artifact type, each manifest's subject checked, each bundle capped.
async fn bundles(session: &mut Session, digest: &str) -> Result<Vec<Found>, PullError> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Ok(Vec::new());
    };
    let index = match session.referrers(digest).await {
        Ok(index) => index,
        // A registry without the referrers API: the referrers tag schema.
        Err(PullError::NotFound { .. } | PullError::Registry { .. }) => {
            match session.index(&format!("sha256-{hex}")).await {
                Ok(index) => index,
                Err(PullError::NotFound { .. }) => return Ok(Vec::new()),
                Err(e) => return Err(e),
            }
        }
        Err(e) => return Err(e),
    };
    let index: serde_json::Value = serde_json::from_slice(&index).unwrap_or_default();
    let referrers = index["manifests"].as_array().cloned().unwrap_or_default();
    let mut found = Vec::new();
    for referrer in referrers
        .iter()
        .filter(|r| {
            r["artifactType"]
                .as_str()
                .is_some_and(|t| BUNDLE_TYPES.contains(&t))
        })
        .take(MAX_SIGNATURES)
    {
        let Some(reference) = referrer["digest"].as_str() else {
            continue;
        };
        let manifest = session.manifest(reference).await?;
        if artifact::sha256_digest(&manifest) != reference {
            continue;
        }
        let manifest: serde_json::Value = serde_json::from_slice(&manifest).unwrap_or_default();
        if manifest["subject"]["digest"] != digest {
            continue;
        }
        let Some(layer) = manifest["layers"].as_array().and_then(|l| l.first()) else {
            continue;
        };
        let (Some(media_type), Some(blob)) =
            (layer["mediaType"].as_str(), layer["digest"].as_str())
        else {
            continue;
        };
        if !BUNDLE_TYPES.contains(&media_type) {
            continue;
        }
        let mut response = session.blob(blob).await?;
        let Ok(bundle) = registry::read_capped(&mut response, MAX_PAYLOAD_BYTES).await else {
            continue;
        };
        if artifact::sha256_digest(&bundle) != blob {
            continue;
        }
        found.extend(dsse(&bundle));
    }
    Ok(found)
}

/// The DSSE envelope of a Sigstore bundle, one candidate per signature.
fn dsse(bundle: &[u8]) -> Vec<Found> {
    let Ok(bundle) = serde_json::from_slice::<serde_json::Value>(bundle) else {
        return Vec::new();
    };
    let envelope = &bundle["dsseEnvelope"];
    let (Some(payload_type), Some(payload)) = (
        envelope["payloadType"].as_str(),
        envelope["payload"].as_str(),
    ) else {
        return Vec::new();
    };
    envelope["signatures"]
        .as_array()
        .into_iter()
        .flatten()
        .take(MAX_SIGNATURES)
        .filter_map(|s| s["sig"].as_str())
        .map(|signature| Found::Dsse {
            payload_type: payload_type.to_owned(),
            payload: payload.to_owned(),
            signature: signature.to_owned(),
            material: bundle_material(&bundle),
        })
        .collect()
}

/// A bundle's certificate (first of its chain, or alone) and first log entry, if it was signed
/// keyless; none when a key signed it.
fn bundle_material(bundle: &serde_json::Value) -> Option<Material> {
    let material = &bundle["verificationMaterial"];
    let mut chain: Vec<String> = match material["certificate"]["rawBytes"].as_str() {
        Some(certificate) => vec![certificate.to_owned()],
        None => material["x509CertificateChain"]["certificates"]
            .as_array()?
            .iter()
            .filter_map(|c| c["rawBytes"].as_str().map(ToOwned::to_owned))
            .collect(),
    };
    if chain.is_empty() {
        return None;
    }
    let certificate = chain.remove(0);
    let tlog = material["tlogEntries"].as_array().and_then(|entries| {
        let entry = entries.first()?;
        let number = |v: &serde_json::Value| v.as_str()?.parse().ok().or(v.as_i64());
        let log_id = base64::engine::general_purpose::STANDARD
            .decode(entry["logId"]["keyId"].as_str()?)
            .ok()?;
        Some(TlogEntry {
            body: entry["canonicalizedBody"].as_str()?.to_owned(),
            integrated_time: number(&entry["integratedTime"])?,
            log_id: super::keyless::hex(&log_id),
            log_index: number(&entry["logIndex"])?,
            signed_entry_timestamp: entry["inclusionPromise"]["signedEntryTimestamp"]
                .as_str()?
                .to_owned(),
        })
    });
    Some(Material {
        certificate,
        chain,
        tlog,
    })
}

/// A cosign 2 signature layer's certificate, chain and log bundle (its annotations), if it was
/// signed keyless or with a certificate; none when a bare key signed it.
fn annotated_material(annotations: &serde_json::Value) -> Option<Material> {
    let der = |pem: &str| -> Vec<String> {
        x509_cert::Certificate::load_pem_chain(pem.as_bytes())
            .unwrap_or_default()
            .iter()
            .filter_map(|c| x509_cert::der::Encode::to_der(c).ok())
            .map(|d| base64::engine::general_purpose::STANDARD.encode(d))
            .collect()
    };
    let certificate = der(annotations[CERTIFICATE_ANNOTATION].as_str()?)
        .into_iter()
        .next()?;
    let chain = annotations[CHAIN_ANNOTATION]
        .as_str()
        .map(der)
        .unwrap_or_default();
    let tlog = annotations[BUNDLE_ANNOTATION]
        .as_str()
        .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
        .and_then(|bundle| {
            let payload = &bundle["Payload"];
            Some(TlogEntry {
                body: payload["body"].as_str()?.to_owned(),
                integrated_time: payload["integratedTime"].as_i64()?,
                log_id: payload["logID"].as_str()?.to_owned(),
                log_index: payload["logIndex"].as_i64()?,
                signed_entry_timestamp: bundle["SignedEntryTimestamp"].as_str()?.to_owned(),
            })
        });
    Some(Material {
        certificate,
        chain,
        tlog,
    })
}

/// cosign 2.x's signatures of `digest` (the `.sig` tag), each payload read against its cap and
/// its digest checked; none when the tag does not exist.
async fn simple_signing(session: &mut Session, digest: &str) -> Result<Vec<Found>, PullError> {
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
        found.push(Found::SimpleSigning {
            payload: base64::engine::general_purpose::STANDARD.encode(&payload),
            signature: signature.to_owned(),
            material: annotated_material(&layer["annotations"]),
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
        Found::SimpleSigning {
            payload: engine.encode(&payload),
            signature: engine.encode(signature.to_der().as_bytes()),
            material: None,
        }
    }

    /// A cosign 3 bundle's candidate: an in-toto statement of `predicate` about `digest`.
    fn bundled(key: &SigningKey, digest: &str, predicate: &str) -> Found {
        let payload = serde_json::to_vec(&serde_json::json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"digest": {"sha256": digest.trim_start_matches("sha256:")}}],
            "predicateType": predicate, "predicate": {}}))
        .unwrap();
        let payload_type = "application/vnd.in-toto+json";
        let signature: Signature = key.sign(&pae(payload_type, &payload));
        let engine = base64::engine::general_purpose::STANDARD;
        Found::Dsse {
            payload_type: payload_type.into(),
            payload: engine.encode(&payload),
            signature: engine.encode(signature.to_der().as_bytes()),
            material: None,
        }
    }

    #[test]
    fn a_cosign_3_bundle_counts_only_as_a_signature_of_this_digest() {
        let key = |n: u8| SigningKey::from_slice(&[n; 32]).unwrap();
        let (ours, theirs) = (key(1), key(3));
        let trusted = keys(&[("ours.pub", &ours)]);
        let digest = format!("sha256:{}", "a".repeat(64));
        let other = format!("sha256:{}", "b".repeat(64));
        assert_eq!(
            check(
                &trusted,
                &digest,
                &[bundled(&ours, &digest, COSIGN_SIGN_PREDICATE)]
            ),
            Ok("ours.pub".into())
        );
        for (found, why) in [
            (
                bundled(&theirs, &digest, COSIGN_SIGN_PREDICATE),
                "none made by a trusted key",
            ),
            (
                bundled(&ours, &other, COSIGN_SIGN_PREDICATE),
                "not this digest",
            ),
            (
                bundled(&ours, &digest, "https://slsa.dev/provenance/v1"),
                "another predicate type",
            ),
        ] {
            assert!(
                matches!(check(&trusted, &digest, &[found]), Err(Refusal::Invalid(w)) if w.contains(why)),
                "{why}"
            );
        }
        // The envelope's type is signed too: the same signature under another type fails.
        let Found::Dsse {
            payload, signature, ..
        } = bundled(&ours, &digest, COSIGN_SIGN_PREDICATE)
        else {
            unreachable!()
        };
        let retyped = Found::Dsse {
            payload_type: "text/plain".into(),
            payload,
            signature,
            material: None,
        };
        assert!(check(&trusted, &digest, &[retyped]).is_err());
    }

    fn keys(named: &[(&str, &SigningKey)]) -> TrustPolicy {
        let pems: Vec<(String, String)> = named
            .iter()
            .map(|(name, k)| {
                let pem = k.verifying_key().to_public_key_pem(LineEnding::LF).unwrap();
                ((*name).to_owned(), pem)
            })
            .collect();
        let refs: Vec<(&str, &str)> = pems.iter().map(|(n, p)| (n.as_str(), p.as_str())).collect();
        TrustPolicy::from_pems(&refs).unwrap()
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
        let (Found::SimpleSigning { signature, .. }, Found::SimpleSigning { payload, .. }) =
            (signed(&ours, &digest), signed(&ours, &other))
        else {
            unreachable!()
        };
        let altered = Found::SimpleSigning {
            payload,
            signature,
            material: None,
        };
        assert!(matches!(
            check(&trusted, &digest, &[altered]),
            Err(Refusal::Invalid(_))
        ));
        assert!(TrustPolicy::from_pems(&[("bad.pub", "not a key")]).is_err());
    }
}
