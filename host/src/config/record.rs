//! `guests.<name>.record`: which reconciles of a guest `run` writes down for replay
//! (`reconciler-host reconcile --replay`), and how much disk they may take. See
//! `crate::sandbox::records` for what a record holds and docs/guests/replay.md for its use.

use std::collections::BTreeSet;

use serde::{Deserialize, Deserializer};

use crate::cluster::objects::Gvk;

/// Default bound of one guest's record directory.
pub const DEFAULT_RECORD_BYTES: u64 = 64 << 20;

/// Recording of one guest's reconciles: opted in per grant.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RecordPolicy {
    /// Keep every reconcile that failed (an error, a trap, a deadline or memory-cap hit, a
    /// write conflict). Default: true.
    #[serde(default = "yes")]
    pub(crate) failures: bool,
    /// Also keep this fraction of all reconciles, chosen at random (0 to 1). Default: 0.
    #[serde(default)]
    pub(crate) sample: f64,
    /// The guest's record directory is kept at most this large, oldest records dropped first:
    /// bytes, or a Kubernetes quantity (`64Mi`, `1Gi`). Default: 64Mi.
    #[serde(default = "default_bytes", deserialize_with = "quantity")]
    pub(crate) max_bytes: u64,
    /// Kinds whose objects' `data` and `stringData` values are stored redacted wherever they
    /// appear in a record (the request, reads, writes). Default: `[v1/Secret]`.
    #[serde(
        default = "default_sensitive",
        deserialize_with = "crate::cluster::objects::deserialize_kinds"
    )]
    pub(crate) sensitive: BTreeSet<Gvk>,
    /// Store sensitive kinds' data as read. Default: false.
    #[serde(default)]
    pub(crate) include_sensitive: bool,
}

impl RecordPolicy {
    /// `sample` outside 0..=1 is refused where the configuration is read.
    pub(crate) fn check(&self) -> Result<(), SampleOutOfRange> {
        if !(0.0..=1.0).contains(&self.sample) {
            return Err(SampleOutOfRange(self.sample));
        }
        Ok(())
    }
}

/// `record.sample` is a share of reconciles: between 0 and 1.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
#[error("record.sample is {0}, not between 0 and 1")]
pub(crate) struct SampleOutOfRange(f64);

fn yes() -> bool {
    true
}

fn default_bytes() -> u64 {
    DEFAULT_RECORD_BYTES
}

fn default_sensitive() -> BTreeSet<Gvk> {
    BTreeSet::from([Gvk::new("", "v1", "Secret")])
}

/// Bytes as a number or a Kubernetes quantity with a binary or decimal suffix; hand-written
/// because the only quantity parser at hand (k8s-openapi's) keeps the text as it is.
fn quantity<'de, D: Deserializer<'de>>(deserializer: D) -> Result<u64, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Raw {
        Number(u64),
        Text(String),
    }
    match Raw::deserialize(deserializer)? {
        Raw::Number(n) => Ok(n),
        Raw::Text(text) => parse_quantity(&text).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "`{text}` is not a size: bytes or a quantity such as 64Mi, 1Gi, 500M"
            ))
        }),
    }
}

fn parse_quantity(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, suffix) = text.split_at(split);
    let unit: u64 = match suffix {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "k" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        _ => return None,
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_keep_failures_in_64_mib_with_secrets_redacted() {
        let policy: RecordPolicy = serde_yaml::from_str("{}").unwrap();
        assert!(policy.failures);
        assert!((policy.sample - 0.0).abs() < f64::EPSILON);
        assert_eq!(policy.max_bytes, 64 << 20);
        assert!(policy.sensitive.contains(&Gvk::new("", "v1", "Secret")));
        assert!(!policy.include_sensitive);
    }

    #[test]
    fn sizes_are_bytes_or_quantities() {
        for (text, bytes) in [
            ("1000", 1000),
            ("\"64Mi\"", 64 << 20),
            ("\"1Gi\"", 1 << 30),
            ("\"500k\"", 500_000),
        ] {
            let policy: RecordPolicy = serde_yaml::from_str(&format!("maxBytes: {text}")).unwrap();
            assert_eq!(policy.max_bytes, bytes, "{text}");
        }
        let refused = serde_yaml::from_str::<RecordPolicy>("maxBytes: 64 megs").unwrap_err();
        assert!(refused.to_string().contains("is not a size"), "{refused}");
    }

    #[test]
    fn a_sample_outside_zero_to_one_is_refused() {
        let policy: RecordPolicy = serde_yaml::from_str("sample: 1.5").unwrap();
        let refused = policy.check().unwrap_err().to_string();
        assert!(refused.contains("not between 0 and 1"), "{refused}");
    }
}
