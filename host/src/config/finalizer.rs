//! `finalizerPolicy:`: what happens to a finalizer whose guest is gone.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What happens to a finalizer whose guest is gone (`finalizerPolicy:` in the configuration).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct FinalizerPolicy {
    #[serde(default)]
    pub(crate) on_unload: OnUnload,
    /// How long an unloaded guest has to come back before `release` removes its finalizer
    /// (default 10m).
    #[serde(
        default,
        with = "humantime_serde",
        skip_serializing_if = "Option::is_none"
    )]
    pub(crate) grace: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) enum OnUnload {
    /// Leave the finalizer on the objects.
    #[default]
    Keep,
    /// Remove it from every object after the grace period.
    Release,
}

impl FinalizerPolicy {
    pub(crate) const DEFAULT_GRACE: Duration = Duration::from_mins(10);

    pub(crate) fn grace(&self) -> Duration {
        self.grace.unwrap_or(Self::DEFAULT_GRACE)
    }
}
