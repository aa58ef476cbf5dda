//! Bridge interface names: `<prefix>-<hash of the network id>`, within the kernel's 15 bytes.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use super::contract::{BackendError, Result};

pub use crate::config::DEFAULT_BRIDGE_PREFIX;

/// Interface names are at most 15 bytes (`IFNAMSIZ` 16 with the NUL).
const IFNAME_MAX: usize = 15;

/// Fewer hash bits than this makes collisions likely at a few thousand networks (see
/// [`bridge_name`]); it caps the prefix at 6 characters.
const MIN_HASH_HEX: usize = 8;

/// The interface name for `id`: `<prefix>-` and as many hex digits of SHA-256(id) as fit in
/// 15 bytes (12 digits = 48 bits with the default prefix `rh`; never fewer than 8 = 32 bits).
///
/// Collision odds follow the birthday bound, about n² / 2^(bits+1) for n networks: with 48
/// bits, 10 000 networks collide with probability ~2·10⁻⁷; with a 6-character prefix
/// (32 bits), ~1 %. A collision is never silent: the Linux provider stores the owning id in
/// the interface alias and refuses to adopt a bridge whose alias names another id.
pub fn bridge_name(prefix: &str, id: &str) -> String {
    let digest = Sha256::digest(id.as_bytes());
    let hex_len = IFNAME_MAX.saturating_sub(prefix.len() + 1);
    let mut name = String::with_capacity(IFNAME_MAX);
    name.push_str(prefix);
    name.push('-');
    for byte in &digest {
        let _ = write!(name, "{byte:02x}");
    }
    name.truncate(prefix.len() + 1 + hex_len);
    name
}

/// Whether `name` is one [`bridge_name`] could have produced with `prefix`.
pub fn is_bridge_name(prefix: &str, name: &str) -> bool {
    let Some(hex) = name
        .strip_prefix(prefix)
        .and_then(|rest| rest.strip_prefix('-'))
    else {
        return false;
    };
    hex.len() == IFNAME_MAX - prefix.len() - 1
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Checks a configured bridge prefix: 1 to 6 of `[A-Za-z0-9_]`. No `-`, so the separator in
/// `<prefix>-<hex>` is unambiguous and one prefix never matches another's bridges.
pub fn validate_bridge_prefix(prefix: &str) -> Result<()> {
    let max = IFNAME_MAX - 1 - MIN_HASH_HEX;
    if prefix.is_empty()
        || prefix.len() > max
        || !prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return Err(BackendError::Other(format!(
            "bridge-prefix `{prefix}` is invalid: use 1 to {max} characters of [A-Za-z0-9_] \
             (interface names hold 15 bytes and at least {MIN_HASH_HEX} are needed for the \
             id's hash), e.g. `{DEFAULT_BRIDGE_PREFIX}`"
        )));
    }
    Ok(())
}
