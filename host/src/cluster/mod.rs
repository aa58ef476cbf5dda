//! The cluster wing: the host's side of the API server, shared by every guest.
//!
//! - [`informers`]: shared, ref-counted dynamic caches (list + watch), read-your-writes;
//! - [`flowcontrol`]: the adaptive limit on API writes in flight, and the client behind it;
//! - [`objects`], [`validation`], [`selector`]: kinds, references, keys, the names a guest may
//!   use, label and field selectors;
//! - [`discovery`], [`finalizer`], [`retry_after`], [`shard_ranges`]: kind discovery with one
//!   cache, finalizer patches, `Retry-After` for list and watch loops, the hash space of
//!   sharded lists and watches.

pub(crate) mod discovery;
pub(crate) mod finalizer;
pub mod flowcontrol;
pub mod informers;
pub mod objects;
pub(crate) mod retry_after;
pub(crate) mod selector;
pub mod shard_ranges;
pub(crate) mod validation;
