pub mod backends;
pub mod metrics;
pub mod queue;
