//! Which keys this replica reconciles: `reconciler_leader` (the leader lease: all keys or
//! none) and sharded mode's `reconciler_shard_*` (`run --shards auto`: a share of the ring).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use super::family::{FloatGauge, GuestLabels, Registrar, gauge_value};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    direction: &'static str,
}

pub(super) struct ShardFamilies {
    leader: Gauge,
    members: Gauge,
    owned_slots: Gauge,
    owned_ratio: FloatGauge,
    keys: Family<GuestLabels, Gauge>,
    handovers: Family<DirectionLabels, Counter>,
    foreign_keys: Family<GuestLabels, Counter>,
}

impl ShardFamilies {
    pub(super) fn register(r: &mut Registrar) -> Self {
        Self {
            leader: r.add(
                "reconciler_leader",
                "1 while this replica holds the leader lease, else 0",
            ),
            members: r.add(
                "reconciler_shard_members",
                "Live members of this replica's ring (sharded mode)",
            ),
            owned_slots: r.add(
                "reconciler_shard_owned_slots",
                "Slots of the ring (of 256) this replica holds and reconciles",
            ),
            owned_ratio: r.add(
                "reconciler_shard_owned_ratio",
                "Fraction of the metadata.uid hash space this replica reconciles",
            ),
            keys: r.add(
                "reconciler_shard_keys",
                "Primary objects in this replica's share, by guest",
            ),
            handovers: r.add(
                "reconciler_shard_handovers",
                "Slots this replica gained or lost in handovers",
            ),
            foreign_keys: r.add(
                "reconciler_shard_foreign_keys",
                "Keys dropped because another replica owns their object (secondary triggers, guest enqueues)",
            ),
        }
    }

    /// Creates `guest`'s closed-label series at zero: only the foreign-key counter, which is
    /// truthfully 0 in any mode. `reconciler_shard_keys` is a measurement that a 0 would
    /// falsify (an unsharded host owns every key), so it waits for the first count.
    pub(super) fn zero_guest(&self, guest: &str) {
        let _ = self.foreign_keys.get_or_create(&GuestLabels::new(guest));
    }

    pub(super) fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub(super) fn ring(&self, members: usize, owned_slots: usize, owned_ratio: f64) {
        self.members.set(gauge_value(members));
        self.owned_slots.set(gauge_value(owned_slots));
        self.owned_ratio.set(owned_ratio);
    }

    pub(super) fn keys(&self, guest: &str, keys: usize) {
        self.keys
            .get_or_create(&GuestLabels::new(guest))
            .set(gauge_value(keys));
    }

    pub(super) fn handover(&self, gained: bool, slots: usize) {
        let direction = if gained { "gained" } else { "lost" };
        self.handovers
            .get_or_create(&DirectionLabels { direction })
            .inc_by(slots as u64);
    }

    pub(super) fn foreign_key(&self, guest: &str) {
        self.foreign_keys
            .get_or_create(&GuestLabels::new(guest))
            .inc();
    }
}
