//! Sharded mode (`run --shards auto`): the keys of every guest's primary kind are spread over
//! the host's replicas by a hash of `metadata.uid`, on Kubernetes' own primitives.
//!
//! The hash space, as the API server's `shardRange` computes it, is the cluster's
//! ([`crate::cluster::shard_ranges`]): the informers filter on it too.
//! - [`ring`]: membership and slot ownership on Leases, with handover and fencing.
//! - [`status`]: `/shards`, readiness and the `reconciler_shard_*` gauges.
//!
//! The host (`crate::manager`) restarts its controllers whenever the slots it may reconcile change;
//! the controllers pass the slots to their primary informer's scope (see `informers`), which
//! sends them to the API server as a `shardSelector` or filters on the client.
pub(crate) mod ring;
pub(crate) mod status;

pub(crate) use ring::{FenceProbe, ShardState};
pub use ring::{Ring, RingError, RingOptions};
pub(crate) use status::ShardStatus;
