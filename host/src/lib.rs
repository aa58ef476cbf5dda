pub mod metrics;
pub mod queue;
