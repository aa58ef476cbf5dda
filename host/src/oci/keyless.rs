//! Keyless signatures: a signature made with a short-lived key whose certificate, issued by a
//! certificate authority (Sigstore's Fulcio, or an organisation's own) to an OIDC identity,
//! travels with it. It counts when
//!
//! 1. the certificate's key verifies the signature (as a trusted key's would),
//! 2. the certificate chains, for code signing, to an authority of the operator's trusted root
//!    (`trusted_root.json`, Sigstore's format: what `cosign trusted-root create` writes and
//!    Sigstore's TUF repository serves), valid at the time of signing,
//! 3. the time of signing is proven: when the trusted root lists transparency logs, by a log
//!    entry of this signature and certificate whose signed entry timestamp (the log's promise
//!    to include it) one of them signed; when it lists none (a private authority issuing
//!    long-lived certificates), the certificate must be valid now,
//! 4. the certificate names an allowed identity: its subject (an e-mail or URI subject
//!    alternative name) and the OIDC issuer Fulcio records in its extension
//!    `1.3.6.1.4.1.57264.1.8` (or the older `.1.1`).
//!
//! Not checked: certificate transparency (SCTs, cosign's `--insecure-ignore-sct`), RFC 3161
//! timestamps, log inclusion proofs and checkpoints (the promise is what cosign 2 checks
//! offline too). The signing key must be ECDSA P-256 (cosign's); authorities' chains may use
//! any algorithm the path validator knows (ECDSA P-256/P-384, RSA, Ed25519).

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use p256::ecdsa::signature::Verifier;
use p256::ecdsa::{Signature, VerifyingKey};
use p256::pkcs8::DecodePublicKey;
use regex::Regex;
use rustls_pki_types::{CertificateDer, UnixTime};
use x509_cert::Certificate;
use x509_cert::der::{Decode, DecodePem, Encode};
use x509_cert::ext::pkix::SubjectAltName;
use x509_cert::ext::pkix::name::GeneralName;

use super::error::{Rejection, RootProblem, TrustError};

/// The code-signing extended key usage (1.3.6.1.5.5.7.3.3), DER contents.
const CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];
/// Fulcio's OIDC issuer extensions: `.1.8` (a DER `UTF8String`) and the older `.1.1` (raw).
const ISSUER_V2: &str = "1.3.6.1.4.1.57264.1.8";
const ISSUER_V1: &str = "1.3.6.1.4.1.57264.1.1";

/// An identity a keyless signature may be made by: the certificate's OIDC issuer, and its
/// subject exactly or a pattern that must match the whole subject.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct CertificateIdentity {
    /// `https://accounts.google.com`, `https://token.actions.githubusercontent.com`, …
    pub(crate) issuer: String,
    /// An e-mail address or URI, as the certificate's subject alternative name holds it.
    #[serde(default)]
    pub(crate) subject: Option<String>,
    /// A regular expression the whole subject must match, for a set of workflows or users.
    #[serde(default)]
    pub(crate) subject_reg_exp: Option<String>,
}

/// A keyless signature's certificate, and its log entry when it has one: what cosign 2 puts in
/// a `.sig` layer's annotations and cosign 3 in a bundle's verification material.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Material {
    /// The signing certificate, base64 DER.
    pub(crate) certificate: String,
    /// Intermediates the signature carries, base64 DER (the trusted root's are used too).
    #[serde(default)]
    pub(crate) chain: Vec<String>,
    #[serde(default)]
    pub(crate) tlog: Option<TlogEntry>,
}

/// A transparency log entry with its signed entry timestamp, in Rekor's terms.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct TlogEntry {
    /// The entry as the log canonicalised it, base64.
    pub(crate) body: String,
    pub(crate) integrated_time: i64,
    /// The log's id (SHA-256 of its public key), hex.
    pub(crate) log_id: String,
    pub(crate) log_index: i64,
    /// The log's signature over the entry's canonical JSON, base64 DER.
    pub(crate) signed_entry_timestamp: String,
}

/// What keyless signatures must chain to and be made by.
#[derive(Debug, Clone)]
pub(crate) struct Keyless {
    authorities: Vec<Authority>,
    logs: Vec<Log>,
    identities: Vec<Identity>,
}

#[derive(Debug, Clone)]
struct Authority {
    /// The chain as the trusted root lists it: the issuing certificate first, the root last.
    chain: Vec<CertificateDer<'static>>,
    valid: Window,
}

#[derive(Debug, Clone)]
struct Log {
    id: Vec<u8>,
    key: VerifyingKey,
    valid: Window,
}

#[derive(Debug, Clone, Copy, Default)]
struct Window {
    start: Option<SystemTime>,
    end: Option<SystemTime>,
}

impl Window {
    fn contains(self, at: SystemTime) -> bool {
        self.start.is_none_or(|s| s <= at) && self.end.is_none_or(|e| at <= e)
    }
}

#[derive(Debug, Clone)]
struct Identity {
    issuer: String,
    subject: Subject,
}

#[derive(Debug, Clone)]
enum Subject {
    Exact(String),
    Pattern(Regex),
}

impl Identity {
    fn admits(&self, issuer: &str, subject: &str) -> bool {
        self.issuer == issuer
            && match &self.subject {
                Subject::Exact(s) => s == subject,
                Subject::Pattern(p) => p.is_match(subject),
            }
    }
}

impl Keyless {
    /// The trusted root at `path` (Sigstore's `trusted_root.json`) and the identities allowed.
    pub(crate) fn load(
        path: &Path,
        identities: &[CertificateIdentity],
    ) -> Result<Self, TrustError> {
        let text = std::fs::read(path).map_err(|source| TrustError::ReadRoot {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, identities).map_err(|problem| TrustError::Root {
            path: path.to_owned(),
            problem,
        })
    }

    fn parse(text: &[u8], identities: &[CertificateIdentity]) -> Result<Self, RootProblem> {
        let root: serde_json::Value = serde_json::from_slice(text).map_err(RootProblem::NotJson)?;
        let authorities = root["certificateAuthorities"]
            .as_array()
            .into_iter()
            .flatten()
            .map(authority)
            .collect::<Result<Vec<_>, _>>()?;
        if authorities.is_empty() {
            return Err(RootProblem::NoAuthority);
        }
        let listed = root["tlogs"].as_array().map_or(0, Vec::len);
        let logs: Vec<Log> = root["tlogs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(log)
            .collect();
        if listed > 0 && logs.is_empty() {
            return Err(RootProblem::NoCheckedLog);
        }
        if identities.is_empty() {
            return Err(RootProblem::NoIdentity);
        }
        let identities = identities
            .iter()
            .map(identity)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            authorities,
            logs,
            identities,
        })
    }

    /// Who made `signature` over `signed` (`SUBJECT (ISSUER)`), if `material` proves an allowed
    /// identity did (see the module docs), or why not.
    pub(super) fn verify(
        &self,
        material: &Material,
        signed: &[u8],
        signature: &Signature,
        signature_b64: &str,
    ) -> Result<String, Rejection> {
        let engine = base64::engine::general_purpose::STANDARD;
        let leaf = engine
            .decode(&material.certificate)
            .map_err(|_| Rejection::CertificateNotBase64)?;
        let certificate = Certificate::from_der(&leaf)
            .map_err(|e| Rejection::CertificateNotDer(e.to_string()))?;
        let spki = certificate
            .tbs_certificate
            .subject_public_key_info
            .to_der()
            .map_err(|e| Rejection::CertificateKeyUnreadable(e.to_string()))?;
        let key = VerifyingKey::from_public_key_der(&spki)
            .map_err(|_| Rejection::CertificateKeyNotP256)?;
        key.verify(signed, signature)
            .map_err(|_| Rejection::BadSignature)?;
        let at = self.signing_time(material.tlog.as_ref(), &leaf, signature_b64)?;
        self.chain(&leaf, &material.chain, at)?;
        let (issuer, subjects) = names(&certificate)?;
        match subjects
            .iter()
            .find(|s| self.identities.iter().any(|i| i.admits(&issuer, s)))
        {
            Some(subject) => Ok(format!("{subject} ({issuer})")),
            None => Err(Rejection::NotAllowed {
                subjects: crate::cluster::validation::message(&subjects.join(", ")),
                issuer,
            }),
        }
    }

    /// When the signature was made: a trusted log's promised time, or now when no log is
    /// trusted.
    fn signing_time(
        &self,
        entry: Option<&TlogEntry>,
        leaf: &[u8],
        signature_b64: &str,
    ) -> Result<SystemTime, Rejection> {
        if self.logs.is_empty() {
            return Ok(SystemTime::now());
        }
        let entry = entry.ok_or(Rejection::NoLogEntry)?;
        let at = UNIX_EPOCH
            + Duration::from_secs(
                u64::try_from(entry.integrated_time).map_err(|_| Rejection::NegativeLogTime)?,
            );
        let log = self
            .logs
            .iter()
            .find(|l| hex(&l.id) == entry.log_id.to_ascii_lowercase() && l.valid.contains(at))
            .ok_or(Rejection::UnknownLog)?;
        // Rekor signs the canonical JSON of these four fields (sorted keys, no spaces).
        let promised = serde_json::to_vec(&serde_json::json!({
            "body": entry.body,
            "integratedTime": entry.integrated_time,
            "logID": entry.log_id.to_ascii_lowercase(),
            "logIndex": entry.log_index,
        }))
        .map_err(|e| Rejection::Canonical(e.to_string()))?;
        let engine = base64::engine::general_purpose::STANDARD;
        let set = engine
            .decode(&entry.signed_entry_timestamp)
            .ok()
            .and_then(|s| Signature::from_der(&s).ok())
            .ok_or(Rejection::TimestampNotSignature)?;
        log.key
            .verify(&promised, &set)
            .map_err(|_| Rejection::TimestampInvalid)?;
        bound(entry, leaf, signature_b64)?;
        Ok(at)
    }

    /// Whether `leaf` chains to a trusted authority valid at `at`, for code signing.
    fn chain(&self, leaf: &[u8], carried: &[String], at: SystemTime) -> Result<(), Rejection> {
        let engine = base64::engine::general_purpose::STANDARD;
        let leaf = CertificateDer::from(leaf);
        let end_entity = webpki::EndEntityCert::try_from(&leaf)
            .map_err(|e| Rejection::CertificateUnusable(e.to_string()))?;
        let carried: Vec<CertificateDer<'static>> = carried
            .iter()
            .filter_map(|c| engine.decode(c).ok())
            .map(CertificateDer::from)
            .collect();
        let time = UnixTime::since_unix_epoch(at.duration_since(UNIX_EPOCH).unwrap_or_default());
        let mut last = None;
        for authority in self.authorities.iter().filter(|a| a.valid.contains(at)) {
            let Some((root, intermediates)) = authority.chain.split_last() else {
                continue;
            };
            let anchor = webpki::anchor_from_trusted_cert(root)
                .map_err(|e| Rejection::AuthorityUnusable(e.to_string()))?;
            let mut intermediates = intermediates.to_vec();
            intermediates.extend(carried.iter().cloned());
            match end_entity.verify_for_usage(
                webpki::ALL_VERIFICATION_ALGS,
                &[anchor],
                &intermediates,
                time,
                webpki::KeyUsage::required(CODE_SIGNING),
                None,
                None,
            ) {
                Ok(_) => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(match last {
            Some(e) => Rejection::NoChain(format!("{e:?}")),
            None => Rejection::NoAuthorityValid,
        })
    }
}

/// Whether the log entry records this very signature and certificate (Rekor's `hashedrekord`
/// and `dsse` kinds): a log's promise about another signature proves nothing about this one.
fn bound(entry: &TlogEntry, leaf: &[u8], signature_b64: &str) -> Result<(), Rejection> {
    let engine = base64::engine::general_purpose::STANDARD;
    let body: serde_json::Value = engine
        .decode(&entry.body)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or(Rejection::BodyNotJson)?;
    let spec = &body["spec"];
    let recorded: Vec<(&serde_json::Value, &serde_json::Value)> = match body["kind"].as_str() {
        Some("hashedrekord") => vec![(
            &spec["signature"]["content"],
            &spec["signature"]["publicKey"]["content"],
        )],
        Some("dsse") => spec["signatures"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|s| (&s["signature"], &s["verifier"]))
            .collect(),
        other => return Err(Rejection::LogKind(other.map(ToOwned::to_owned))),
    };
    let same_signature = |v: &serde_json::Value| {
        let decode = |s: &str| engine.decode(s.trim()).ok();
        v.as_str().and_then(decode).is_some()
            && v.as_str().and_then(decode) == decode(signature_b64)
    };
    let same_certificate = |v: &serde_json::Value| {
        v.as_str()
            .and_then(|pem| engine.decode(pem).ok())
            .and_then(|pem| Certificate::from_pem(&pem).ok())
            .and_then(|c| c.to_der().ok())
            .is_some_and(|der| der == leaf)
    };
    if recorded
        .iter()
        .any(|(s, c)| same_signature(s) && same_certificate(c))
    {
        Ok(())
    } else {
        Err(Rejection::NotBound)
    }
}

/// The OIDC issuer and the e-mail and URI subjects a certificate names.
fn names(certificate: &Certificate) -> Result<(String, Vec<String>), Rejection> {
    let mut issuer = None;
    let mut subjects = Vec::new();
    for extension in certificate.tbs_certificate.extensions.iter().flatten() {
        let value = extension.extn_value.as_bytes();
        match extension.extn_id.to_string().as_str() {
            ISSUER_V2 => {
                issuer = x509_cert::der::asn1::Utf8StringRef::from_der(value)
                    .ok()
                    .map(|s| s.as_str().to_owned());
            }
            ISSUER_V1 if issuer.is_none() => {
                issuer = std::str::from_utf8(value).ok().map(ToOwned::to_owned);
            }
            "2.5.29.17" => {
                let names = SubjectAltName::from_der(value)
                    .map_err(|e| Rejection::SubjectNames(e.to_string()))?;
                subjects.extend(names.0.into_iter().filter_map(|name| match name {
                    GeneralName::Rfc822Name(s) | GeneralName::UniformResourceIdentifier(s) => {
                        Some(s.to_string())
                    }
                    _ => None,
                }));
            }
            _ => {}
        }
    }
    let issuer = issuer.ok_or(Rejection::NoIssuer)?;
    Ok((issuer, subjects))
}

fn authority(value: &serde_json::Value) -> Result<Authority, RootProblem> {
    let engine = base64::engine::general_purpose::STANDARD;
    let chain = value["certChain"]["certificates"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            c["rawBytes"]
                .as_str()
                .and_then(|b| engine.decode(b).ok())
                .map(CertificateDer::from)
                .ok_or(RootProblem::AuthorityNotBase64)
        })
        .collect::<Result<Vec<_>, _>>()?;
    if chain.is_empty() {
        return Err(RootProblem::AuthorityEmpty(value["uri"].to_string()));
    }
    Ok(Authority {
        chain,
        valid: window(&value["validFor"])?,
    })
}

/// A transparency log the trusted root lists, if its key is one this host checks.
fn log(value: &serde_json::Value) -> Option<Log> {
    let engine = base64::engine::general_purpose::STANDARD;
    let key = engine
        .decode(value["publicKey"]["rawBytes"].as_str()?)
        .ok()?;
    Some(Log {
        id: engine.decode(value["logId"]["keyId"].as_str()?).ok()?,
        key: VerifyingKey::from_public_key_der(&key).ok()?,
        valid: window(&value["publicKey"]["validFor"]).ok()?,
    })
}

fn window(value: &serde_json::Value) -> Result<Window, RootProblem> {
    let time = |field: &'static str| {
        value[field]
            .as_str()
            .map(|t| {
                humantime::parse_rfc3339_weak(t)
                    .map_err(|source| RootProblem::Validity { field, source })
            })
            .transpose()
    };
    Ok(Window {
        start: time("start")?,
        end: time("end")?,
    })
}

fn identity(settings: &CertificateIdentity) -> Result<Identity, RootProblem> {
    let subject = match (&settings.subject, &settings.subject_reg_exp) {
        (Some(subject), None) => Subject::Exact(subject.clone()),
        (None, Some(pattern)) => {
            Subject::Pattern(Regex::new(&format!("^(?:{pattern})$")).map_err(|source| {
                RootProblem::SubjectPattern {
                    pattern: pattern.clone(),
                    source,
                }
            })?)
        }
        _ => return Err(RootProblem::SubjectChoice(settings.issuer.clone())),
    };
    Ok(Identity {
        issuer: settings.issuer.clone(),
        subject,
    })
}

pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

#[cfg(test)]
mod tests {
    use p256::ecdsa::SigningKey;
    use p256::ecdsa::signature::Signer;
    use p256::pkcs8::{DecodePrivateKey, EncodePublicKey};
    use rcgen::{
        BasicConstraints, CertificateParams, CustomExtension, ExtendedKeyUsagePurpose, IsCa,
        Issuer, KeyPair, KeyUsagePurpose, PKCS_ECDSA_P256_SHA256, SanType, date_time_ymd,
    };
    use sha2::Digest;

    use super::*;

    const ISSUER: &str = "https://issuer.example";
    const SUBJECT: &str = "builder@example.com";

    fn b64(bytes: &[u8]) -> String {
        base64::engine::general_purpose::STANDARD.encode(bytes)
    }

    /// A certificate authority: its parameters and key, and its certificate.
    struct Ca {
        params: CertificateParams,
        key: KeyPair,
        der: Vec<u8>,
    }

    fn ca(name: &str) -> Ca {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign];
        let der = params.self_signed(&key).unwrap().der().to_vec();
        Ca { params, key, der }
    }

    /// A signing certificate `ca` issued for `subject` and `issuer`, valid in the years given
    /// (for code signing when `code_signing`), and its key.
    fn leaf(
        ca: &Ca,
        subject: &str,
        issuer: &str,
        years: (i32, i32),
        code_signing: bool,
    ) -> (SigningKey, Vec<u8>) {
        let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.not_before = date_time_ymd(years.0, 1, 1);
        params.not_after = date_time_ymd(years.1, 1, 1);
        params.subject_alt_names = vec![SanType::Rfc822Name(subject.try_into().unwrap())];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        if code_signing {
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
        }
        let mut utf8 = vec![0x0c, u8::try_from(issuer.len()).unwrap()];
        utf8.extend_from_slice(issuer.as_bytes());
        params.custom_extensions = vec![CustomExtension::from_oid_content(
            &[1, 3, 6, 1, 4, 1, 57264, 1, 8],
            utf8,
        )];
        let authority = Issuer::from_params(&ca.params, &ca.key);
        let der = params.signed_by(&key, &authority).unwrap().der().to_vec();
        (
            SigningKey::from_pkcs8_der(&key.serialize_der()).unwrap(),
            der,
        )
    }

    fn root(authorities: &[&Ca], log: Option<&SigningKey>) -> serde_json::Value {
        let authorities: Vec<_> = authorities
            .iter()
            .map(|ca| {
                serde_json::json!({"uri": "https://ca.example",
                    "certChain": {"certificates": [{"rawBytes": b64(&ca.der)}]},
                    "validFor": {"start": "2001-01-01T00:00:00Z"}})
            })
            .collect();
        let tlogs: Vec<_> = log
            .into_iter()
            .map(|key| {
                let spki = key.verifying_key().to_public_key_der().unwrap();
                serde_json::json!({"baseUrl": "https://log.example",
                    "publicKey": {"rawBytes": b64(spki.as_bytes()),
                        "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                        "validFor": {"start": "2001-01-01T00:00:00Z"}},
                    "logId": {"keyId": b64(&sha2::Sha256::digest(spki.as_bytes()))}})
            })
            .collect();
        serde_json::json!({"certificateAuthorities": authorities, "tlogs": tlogs})
    }

    fn keyless(root: &serde_json::Value, identities: &[CertificateIdentity]) -> Keyless {
        Keyless::parse(root.to_string().as_bytes(), identities).unwrap()
    }

    fn exactly(subject: &str) -> CertificateIdentity {
        CertificateIdentity {
            issuer: ISSUER.into(),
            subject: Some(subject.into()),
            subject_reg_exp: None,
        }
    }

    /// A log's entry for `signature` by `certificate`, promised at `time` by `log`.
    fn logged(log: &SigningKey, certificate: &[u8], signature: &str, time: i64) -> TlogEntry {
        let pem = x509_cert::der::pem::encode_string(
            "CERTIFICATE",
            x509_cert::der::pem::LineEnding::LF,
            certificate,
        )
        .unwrap();
        let body = b64(
            serde_json::json!({"apiVersion": "0.0.1", "kind": "hashedrekord",
            "spec": {"signature": {"content": signature,
                "publicKey": {"content": b64(pem.as_bytes())}}}})
            .to_string()
            .as_bytes(),
        );
        let spki = log.verifying_key().to_public_key_der().unwrap();
        let log_id = hex(&sha2::Sha256::digest(spki.as_bytes()));
        let promised = serde_json::json!({"body": body, "integratedTime": time,
            "logID": log_id, "logIndex": 7});
        let set: Signature = log.sign(&serde_json::to_vec(&promised).unwrap());
        TlogEntry {
            body,
            integrated_time: time,
            log_id,
            log_index: 7,
            signed_entry_timestamp: b64(set.to_der().as_bytes()),
        }
    }

    /// Signs `signed` with `key`: the signature and its base64.
    fn sign(key: &SigningKey, signed: &[u8]) -> (Signature, String) {
        let signature: Signature = key.sign(signed);
        let text = b64(signature.to_der().as_bytes());
        (signature, text)
    }

    fn material(certificate: &[u8], tlog: Option<TlogEntry>) -> Material {
        Material {
            certificate: b64(certificate),
            chain: Vec::new(),
            tlog,
        }
    }

    #[test]
    fn without_a_log_a_certificate_valid_now_for_an_allowed_identity_counts() {
        let ours = ca("ours");
        let policy = keyless(&root(&[&ours], None), &[exactly(SUBJECT)]);
        let (key, certificate) = leaf(&ours, SUBJECT, ISSUER, (2001, 4000), true);
        let (signature, text) = sign(&key, b"payload");
        let m = material(&certificate, None);
        assert_eq!(
            policy.verify(&m, b"payload", &signature, &text),
            Ok(format!("{SUBJECT} ({ISSUER})"))
        );
        // The whole subject must match a pattern; a pattern of others refuses it.
        let pattern = |p: &str| CertificateIdentity {
            issuer: ISSUER.into(),
            subject: None,
            subject_reg_exp: Some(p.into()),
        };
        let by_pattern = keyless(&root(&[&ours], None), &[pattern(".*@example\\.com")]);
        assert!(by_pattern.verify(&m, b"payload", &signature, &text).is_ok());
        let prefix_only = keyless(&root(&[&ours], None), &[pattern("builder")]);
        assert!(
            prefix_only
                .verify(&m, b"payload", &signature, &text)
                .is_err()
        );

        for (why, policy, signed) in [
            (
                "another subject",
                keyless(&root(&[&ours], None), &[exactly("x@example.com")]),
                &b"payload"[..],
            ),
            (
                "another issuer",
                keyless(
                    &root(&[&ours], None),
                    &[CertificateIdentity {
                        issuer: "https://other.example".into(),
                        ..exactly(SUBJECT)
                    }],
                ),
                b"payload",
            ),
            (
                "another authority",
                keyless(&root(&[&ca("theirs")], None), &[exactly(SUBJECT)]),
                b"payload",
            ),
            (
                "another payload",
                keyless(&root(&[&ours], None), &[exactly(SUBJECT)]),
                b"altered",
            ),
        ] {
            assert!(
                policy.verify(&m, signed, &signature, &text).is_err(),
                "{why}"
            );
        }
    }

    #[test]
    fn a_certificate_expired_or_not_for_code_signing_does_not_count_without_a_log() {
        let ours = ca("ours");
        let policy = keyless(&root(&[&ours], None), &[exactly(SUBJECT)]);
        for (years, code_signing, why) in [
            ((2001, 2002), true, "expired"),
            ((2001, 4000), false, "not for code signing"),
        ] {
            let (key, certificate) = leaf(&ours, SUBJECT, ISSUER, years, code_signing);
            let (signature, text) = sign(&key, b"payload");
            let refused =
                policy.verify(&material(&certificate, None), b"payload", &signature, &text);
            assert!(
                matches!(&refused, Err(e) if e.to_string().contains("does not chain")),
                "{why}: {refused:?}"
            );
        }
    }

    /// Fulcio's certificates live ten minutes: a trusted log's promise of when the signature
    /// was made is what makes an expired one count, and only for this signature.
    #[test]
    fn with_a_log_its_promised_time_of_this_signature_is_the_time_checked() {
        let ours = ca("ours");
        let log = SigningKey::from_slice(&[7; 32]).unwrap();
        let policy = keyless(&root(&[&ours], Some(&log)), &[exactly(SUBJECT)]);
        let (key, certificate) = leaf(&ours, SUBJECT, ISSUER, (2001, 2002), true);
        let (signature, text) = sign(&key, b"payload");
        let in_2001 = 1_000_000_000; // 2001-09-09
        let entry = logged(&log, &certificate, &text, in_2001);
        assert_eq!(
            policy.verify(
                &material(&certificate, Some(entry.clone())),
                b"payload",
                &signature,
                &text
            ),
            Ok(format!("{SUBJECT} ({ISSUER})"))
        );
        let (_, other_text) = sign(&key, b"another payload");
        let impostor = SigningKey::from_slice(&[9; 32]).unwrap();
        let refusals = [
            (None, "has no transparency log entry"),
            (
                Some(TlogEntry {
                    integrated_time: in_2001 + 1,
                    ..entry.clone()
                }),
                "does not verify with the log's key",
            ),
            (
                Some(logged(&impostor, &certificate, &text, in_2001)),
                "from no log",
            ),
            (
                Some(logged(&log, &certificate, &other_text, in_2001)),
                "records another signature",
            ),
            (
                Some(logged(&log, &certificate, &text, 1_700_000_000)),
                "does not chain",
            ),
        ];
        for (entry, why) in refusals {
            let refused = policy.verify(
                &material(&certificate, entry),
                b"payload",
                &signature,
                &text,
            );
            assert!(
                matches!(&refused, Err(e) if e.to_string().contains(why)),
                "{why}: {refused:?}"
            );
        }
    }

    #[test]
    fn a_trusted_root_or_identity_that_cannot_be_used_is_an_error() {
        let ours = ca("ours");
        let good = root(&[&ours], None);
        assert!(Keyless::parse(b"{", &[exactly(SUBJECT)]).is_err());
        assert!(Keyless::parse(br#"{"certificateAuthorities": []}"#, &[exactly(SUBJECT)]).is_err());
        assert!(Keyless::parse(good.to_string().as_bytes(), &[]).is_err());
        let neither = CertificateIdentity {
            subject: None,
            ..exactly(SUBJECT)
        };
        assert!(Keyless::parse(good.to_string().as_bytes(), &[neither]).is_err());
        let bad_pattern = CertificateIdentity {
            subject: None,
            subject_reg_exp: Some("(".into()),
            ..exactly(SUBJECT)
        };
        assert!(Keyless::parse(good.to_string().as_bytes(), &[bad_pattern]).is_err());
        let mut ed25519_log = root(&[&ours], None);
        ed25519_log["tlogs"] = serde_json::json!([{"publicKey": {"rawBytes": "MCowBQYDK2VwAyEA"}, "logId": {"keyId": "AA=="}}]);
        assert!(Keyless::parse(ed25519_log.to_string().as_bytes(), &[exactly(SUBJECT)]).is_err());
    }
}
