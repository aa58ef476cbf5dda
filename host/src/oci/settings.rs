//! The host configuration's `registries:`: plain-HTTP registries and the caps on modules and
//! the cache.

/// The largest module pulled when the configuration sets no cap: the Python guest (18.4 MB)
/// fits three times over.
pub const DEFAULT_MAX_MODULE_BYTES: u64 = 64 << 20;
/// Registry settings of the host configuration (`registries:`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegistrySettings {
    /// Registries (`host[:port]`) spoken to over plain HTTP; every other one over HTTPS.
    #[serde(default)]
    pub(crate) insecure: Vec<String>,
    /// The largest module layer pulled, in bytes (default [`DEFAULT_MAX_MODULE_BYTES`]).
    #[serde(default)]
    pub(crate) max_module_bytes: Option<u64>,
    /// The most the module cache holds, in bytes (default [`DEFAULT_CACHE_MAX_BYTES`]):
    /// modules no guest uses are evicted, least recently used first, to make room.
    #[serde(default)]
    pub(crate) cache_max_bytes: Option<u64>,
}

/// The module cache's bound when the configuration sets none: sixteen modules at the default
/// module cap.
pub const DEFAULT_CACHE_MAX_BYTES: u64 = 1 << 30;

impl RegistrySettings {
    pub(crate) fn max_module_bytes(&self) -> u64 {
        self.max_module_bytes.unwrap_or(DEFAULT_MAX_MODULE_BYTES)
    }

    pub(crate) fn cache_max_bytes(&self) -> u64 {
        self.cache_max_bytes.unwrap_or(DEFAULT_CACHE_MAX_BYTES)
    }
}
