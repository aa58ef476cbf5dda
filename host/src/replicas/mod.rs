//! The replicas wing: what one replica of the host may reconcile when several run.
//!
//! - [`leader`]: the Lease election (client-go's rules), one leader at a time;
//! - [`shards`]: the ring that spreads the keys over replicas by slot, on Leases;
//! - [`fence`]: the write fence both hold to each renewal's deadline, so a replica that lost its
//!   lease stops writing before another takes over.

pub mod fence;
pub mod leader;
pub mod shards;
