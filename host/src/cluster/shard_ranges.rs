//! The hash space of sharding, as the API server computes it (KEP-5866, `k8s.io/apimachinery`
//! `pkg/sharding`): 64-bit FNV-1a over `metadata.uid`, ranges `[start, end)` written as
//! `0x`-prefixed 16-digit lowercase hex, `0x10000000000000000` (2^64) as the open top.
//!
//! The ring divides the space into [`SLOTS`] equal slots; a replica owns a set of slots, sent to
//! the API server as one `shardRange` per run of adjacent slots joined with `||`.

use std::fmt;

/// Slots in the ring: the most replicas a ring can spread over. A power of two so that slot
/// boundaries are round hex numbers (`0x5500000000000000`).
pub const SLOTS: usize = 256;

/// The field the ring hashes. Immutable for an object's life, so an object never changes shard.
pub(crate) const SHARD_KEY: &str = "object.metadata.uid";

/// 64-bit FNV-1a, as Go's `hash/fnv` `New64a` (the API server's `sharding.HashField`).
/// Eight lines: not worth a crate.
#[must_use]
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The slot an object with this uid falls in.
#[must_use]
pub fn slot_of(uid: &str) -> usize {
    // SLOTS = 2^8: the top 8 bits of the hash.
    usize::try_from(fnv1a64(uid.as_bytes()) >> 56).unwrap_or(0)
}

/// A set of slots: which part of the hash space a replica owns.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SlotSet([u64; SLOTS / 64]);

impl SlotSet {
    #[must_use]
    pub fn empty() -> Self {
        Self::default()
    }

    /// Every slot: the whole hash space.
    #[must_use]
    pub fn all() -> Self {
        Self([u64::MAX; SLOTS / 64])
    }

    /// Slots `start..end` (clamped to [`SLOTS`]).
    #[must_use]
    pub fn range(start: usize, end: usize) -> Self {
        let mut set = Self::empty();
        for slot in start..end.min(SLOTS) {
            set.insert(slot);
        }
        set
    }

    pub fn insert(&mut self, slot: usize) {
        if slot < SLOTS {
            self.0[slot / 64] |= 1 << (slot % 64);
        }
    }

    #[must_use]
    pub fn contains(&self, slot: usize) -> bool {
        slot < SLOTS && self.0[slot / 64] & (1 << (slot % 64)) != 0
    }

    /// Whether the object with this uid falls in the set.
    #[must_use]
    pub fn owns_uid(&self, uid: &str) -> bool {
        self.contains(slot_of(uid))
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.0.iter().map(|w| w.count_ones() as usize).sum()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|w| *w == 0)
    }

    #[must_use]
    pub fn is_all(&self) -> bool {
        self.len() == SLOTS
    }

    #[must_use]
    pub fn union(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] | other.0[i]))
    }

    #[must_use]
    pub fn intersection(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] & other.0[i]))
    }

    #[must_use]
    pub fn difference(&self, other: &Self) -> Self {
        Self(std::array::from_fn(|i| self.0[i] & !other.0[i]))
    }

    #[must_use]
    pub(crate) fn is_subset(&self, other: &Self) -> bool {
        self.difference(other).is_empty()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        (0..SLOTS).filter(|s| self.contains(*s))
    }

    /// Runs of adjacent slots as `[start, end)` slot indices, in order.
    #[must_use]
    pub(crate) fn runs(&self) -> Vec<(usize, usize)> {
        let mut runs: Vec<(usize, usize)> = Vec::new();
        for slot in self.iter() {
            match runs.last_mut() {
                Some((_, end)) if *end == slot => *end = slot + 1,
                _ => runs.push((slot, slot + 1)),
            }
        }
        runs
    }

    /// The fraction of the hash space owned, 0.0 to 1.0.
    #[must_use]
    pub(crate) fn fraction(&self) -> f64 {
        #[allow(clippy::cast_precision_loss)] // at most 256
        let (owned, all) = (self.len() as f64, SLOTS as f64);
        owned / all
    }

    /// The hash ranges, as the API server writes bounds (`0x0000000000000000`,
    /// `0x10000000000000000`).
    #[must_use]
    pub(crate) fn hash_ranges(&self) -> Vec<(String, String)> {
        self.runs()
            .into_iter()
            .map(|(start, end)| (bound(start), bound(end)))
            .collect()
    }

    /// The `shardSelector` for lists and watches (`ListOptions.shardSelector`): one
    /// `shardRange` per run, joined with `||`. None for the whole space (no selector) and for
    /// the empty set (nothing to select; the caller should not watch at all).
    #[must_use]
    pub(crate) fn selector(&self) -> Option<String> {
        if self.is_empty() || self.is_all() {
            return None;
        }
        Some(
            self.hash_ranges()
                .iter()
                .map(|(start, end)| format!("shardRange({SHARD_KEY}, '{start}', '{end}')"))
                .collect::<Vec<_>>()
                .join(" || "),
        )
    }

    /// Compact text for logs and annotations: `0-84,200-255` (inclusive slot numbers).
    #[must_use]
    pub fn to_text(&self) -> String {
        self.runs()
            .iter()
            .map(|(start, end)| {
                if end - start == 1 {
                    start.to_string()
                } else {
                    format!("{start}-{}", end - 1)
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Reads [`SlotSet::to_text`]'s form back.
    ///
    /// # Errors
    ///
    /// A part that is not `n` or `a-b` with `a <= b < SLOTS`.
    pub fn from_text(text: &str) -> Result<Self, SlotsError> {
        let mut set = Self::empty();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let parse = |s: &str| {
                s.trim()
                    .parse::<usize>()
                    .ok()
                    .filter(|n| *n < SLOTS)
                    .ok_or_else(|| SlotsError::NotASlot(s.to_owned()))
            };
            let (start, end) = match part.split_once('-') {
                Some((a, b)) => (parse(a)?, parse(b)?),
                None => (parse(part)?, parse(part)?),
            };
            if start > end {
                return Err(SlotsError::Backwards(part.to_owned()));
            }
            for slot in start..=end {
                set.insert(slot);
            }
        }
        Ok(set)
    }
}

/// Why a slot list ([`SlotSet::to_text`]'s form) was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SlotsError {
    #[error("slot {0:?} is not a number below {SLOTS}")]
    NotASlot(String),
    #[error("slot range {0:?} runs backwards")]
    Backwards(String),
}

/// Slot boundary `slot` as a hash bound: `slot << 56`, or 2^64 for the top.
fn bound(slot: usize) -> String {
    if slot >= SLOTS {
        "0x10000000000000000".to_owned()
    } else {
        format!("0x{:016x}", (slot as u64) << 56)
    }
}

impl fmt::Debug for SlotSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotSet[{}]", self.to_text())
    }
}

impl fmt::Display for SlotSet {
    /// Hash ranges, as in the selector: `[0x0000000000000000, 0x5500000000000000)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("(none)");
        }
        let ranges = self.hash_ranges();
        for (i, (start, end)) in ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            write!(f, "[{start}, {end})")?;
        }
        Ok(())
    }
}

/// Splits the slots among `members` (sorted by the caller): member `i` of `n` gets the `i`-th
/// of `n` contiguous, equal (±1 slot) runs. Contiguous runs keep each replica's selector to one
/// `shardRange`; the cost is that a membership change moves up to about half the keys, where a
/// ring of virtual nodes would move 1/n. Handover is paid per membership change, a selector per
/// request, so we take the simpler selector.
#[must_use]
pub fn partition(members: usize, index: usize) -> SlotSet {
    if members == 0 || index >= members {
        return SlotSet::empty();
    }
    let start = index * SLOTS / members;
    let end = (index + 1) * SLOTS / members;
    SlotSet::range(start, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_matches_go_hash_fnv() {
        // Reference values of Go's fnv.New64a (and the published FNV test vectors).
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn slots_follow_the_top_byte_of_the_hash() {
        let uid = "6a4c5e5e-8f39-4a5b-9a0e-0c2b8d3e1f00";
        let hash = fnv1a64(uid.as_bytes());
        assert_eq!(slot_of(uid), (hash >> 56) as usize);
        // The slot's hash range contains the hash, as the API server compares bounds.
        let slot = slot_of(uid);
        let ranges = SlotSet::range(slot, slot + 1).hash_ranges();
        let (start, end) = &ranges[0];
        let hex = format!("0x{hash:016x}");
        assert!(start.as_str() <= hex.as_str());
        assert!(end.len() > hex.len() || hex.as_str() < end.as_str());
    }

    #[test]
    fn a_partition_covers_every_slot_exactly_once() {
        for members in 1..=7 {
            let mut seen = SlotSet::empty();
            for index in 0..members {
                let part = partition(members, index);
                assert!(part.intersection(&seen).is_empty(), "{members}: overlap");
                assert!(part.len().abs_diff(SLOTS / members) <= 1);
                assert_eq!(part.runs().len(), 1);
                seen = seen.union(&part);
            }
            assert!(seen.is_all(), "{members}: gap");
        }
        assert!(partition(3, 3).is_empty());
    }

    #[test]
    fn selectors_are_written_as_the_api_server_documents_them() {
        assert_eq!(
            SlotSet::range(0, 128).selector().as_deref(),
            Some("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')")
        );
        assert_eq!(
            SlotSet::range(128, 256).selector().as_deref(),
            Some("shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')")
        );
        let two = SlotSet::range(0, 1).union(&SlotSet::range(255, 256));
        assert_eq!(
            two.selector().as_deref(),
            Some(
                "shardRange(object.metadata.uid, '0x0000000000000000', '0x0100000000000000') || \
                 shardRange(object.metadata.uid, '0xff00000000000000', '0x10000000000000000')"
            )
        );
        assert_eq!(SlotSet::all().selector(), None);
        assert_eq!(SlotSet::empty().selector(), None);
    }

    #[test]
    fn text_form_round_trips_and_rejects_nonsense() {
        let set = SlotSet::range(0, 85).union(&SlotSet::range(200, 201));
        assert_eq!(set.to_text(), "0-84,200");
        assert_eq!(SlotSet::from_text(&set.to_text()).unwrap(), set);
        assert_eq!(SlotSet::from_text("").unwrap(), SlotSet::empty());
        assert!(SlotSet::from_text("5-2").is_err());
        assert!(SlotSet::from_text("256").is_err());
        assert!(SlotSet::from_text("x").is_err());
    }

    #[test]
    fn set_algebra() {
        let a = SlotSet::range(0, 100);
        let b = SlotSet::range(50, 150);
        assert_eq!(a.intersection(&b), SlotSet::range(50, 100));
        assert_eq!(a.difference(&b), SlotSet::range(0, 50));
        assert_eq!(a.union(&b), SlotSet::range(0, 150));
        assert!(SlotSet::range(10, 20).is_subset(&a));
        assert!(!b.is_subset(&a));
        assert!((SlotSet::range(0, 64).fraction() - 0.25).abs() < f64::EPSILON);
    }
}
