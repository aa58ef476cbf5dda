//! The sandbox wing: a guest compiled, instantiated and called, and everything it may reach.
//!
//! Read in this order: [`runtime`] (engine, pool, the reconcile call under a deadline and a
//! memory cap) links [`capabilities`] (one module per imported WIT interface: validate, grant,
//! budget), which call the traits that [`providers`] implement (`kube` against the API server,
//! `offline` for the offline runner); [`backends`] are the network providers behind the
//! network capability. Beside them: [`manifest`] (what a guest asks for), [`wit`] (the
//! generated bindings), [`identity`] (each guest's own ServiceAccount), [`shadow`] (writes
//! compared, not sent), [`records`] (reconciles written down for replay) and
//! [`compile_cache`] (compiled guests on disk).

pub mod backends;
pub mod capabilities;
pub(crate) mod compile_cache;
pub mod identity;
pub(crate) mod manifest;
pub mod providers;
pub(crate) mod records;
pub mod runtime;
pub mod shadow;
pub(crate) mod wit;
