//! A fresh namespace per test.
//!
//! Without kube-controller-manager a deleted namespace stays `Terminating` forever, so tests
//! never delete or reuse one: each gets a new, uniquely named namespace and leaves it behind
//! (it goes away with the control plane). The label below finds them all.

use std::collections::BTreeMap;
use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};

/// Label set on every namespace made by [`test_namespace`].
pub const TEST_NAMESPACE_LABEL: &str = "reconciler-host.test/namespace";

/// Creates a namespace named `<prefix>-<8 random characters>` and returns its name.
/// `prefix` is made DNS-1123 safe (lowercased, other characters turned into `-`, shortened).
pub async fn test_namespace(client: &Client, prefix: &str) -> Result<String> {
    let name = unique_name(prefix);
    let namespace = Namespace {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([(
                TEST_NAMESPACE_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .with_context(|| format!("creating test namespace {name}"))?;
    Ok(name)
}

/// `<prefix>-<suffix>`: a valid DNS-1123 label (at most 63 characters) that is unique across
/// processes and calls.
pub fn unique_name(prefix: &str) -> String {
    const SUFFIX_LEN: usize = 8;
    let mut clean: String = prefix
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '-'
            }
        })
        .take(63 - 1 - SUFFIX_LEN)
        .collect();
    clean = clean.trim_matches('-').to_owned();
    if clean.is_empty() {
        clean.push_str("test");
    }
    format!("{clean}-{}", random_suffix(SUFFIX_LEN))
}

// std's RandomState is seeded from the OS per process; mixing in a counter, the pid and the
// clock makes names unique without pulling in a random-number crate for eight characters.
fn random_suffix(len: usize) -> String {
    static CALLS: AtomicU64 = AtomicU64::new(0);
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(CALLS.fetch_add(1, Ordering::Relaxed));
    hasher.write_u32(std::process::id());
    hasher.write_u128(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    let mut n = hasher.finish();
    const ALPHABET: &[u8; 36] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    (0..len)
        .map(|_| {
            let c = ALPHABET[(n % 36) as usize];
            n /= 36;
            char::from(c)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_dns_label(s: &str) -> bool {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !s.starts_with('-')
            && !s.ends_with('-')
    }

    #[test]
    fn names_are_dns_labels_whatever_the_prefix() {
        for prefix in ["net", "My_Test::case", "--", "", &"x".repeat(100), "ünï"] {
            let name = unique_name(prefix);
            assert!(is_dns_label(&name), "{prefix:?} gave {name:?}");
        }
        assert!(unique_name("My_Test").starts_with("my-test-"));
    }

    #[test]
    fn names_do_not_repeat() {
        let names: std::collections::HashSet<_> = (0..1000).map(|_| unique_name("t")).collect();
        assert_eq!(names.len(), 1000);
    }
}
