//! Which network provider the host uses (`backend:` and `backends:` of the host
//! configuration); the providers themselves are `crate::sandbox::backends`.

use std::path::PathBuf;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// The bridge prefix when the configuration names none.
pub const DEFAULT_BRIDGE_PREFIX: &str = "rh";

/// Which provider the host uses, from the host configuration (YAML):
///
/// ```yaml
/// backend:
///   provider: linux
///   netns: rh-demo        # a name under /var/run/netns; omit for the host's own netns
///   bridge-prefix: rh     # optional, 1-6 of [A-Za-z0-9_], default `rh`
///   allowed-cidrs: [10.100.0.0/16, fd00:100::/48]   # optional, see `crate::sandbox::backends::policy`
/// ```
///
/// or `provider: memory` with an optional `state-file: <path>` (loaded if present, rewritten
/// after every change) and the same optional `allowed-cidrs`. The camelCase spellings
/// `bridgePrefix`, `stateFile` and `allowedCidrs` are accepted too, matching the rest of the
/// host configuration.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
// Unknown keys are errors: a misspelt `bridge_prefix:` must not silently mean the default.
#[serde(tag = "provider", rename_all = "kebab-case", deny_unknown_fields)]
pub enum BackendConfig {
    Memory {
        #[serde(
            default,
            rename = "state-file",
            alias = "stateFile",
            skip_serializing_if = "Option::is_none"
        )]
        state_file: Option<PathBuf>,
        #[serde(
            default,
            rename = "allowed-cidrs",
            alias = "allowedCidrs",
            skip_serializing_if = "Option::is_none"
        )]
        allowed_cidrs: Option<Vec<IpNet>>,
    },
    Linux {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        netns: Option<String>,
        #[serde(
            default = "default_bridge_prefix",
            rename = "bridge-prefix",
            alias = "bridgePrefix"
        )]
        bridge_prefix: String,
        #[serde(
            default,
            rename = "allowed-cidrs",
            alias = "allowedCidrs",
            skip_serializing_if = "Option::is_none"
        )]
        allowed_cidrs: Option<Vec<IpNet>>,
    },
}

impl BackendConfig {
    /// The configured `allowed-cidrs`, whichever the provider.
    pub(crate) fn allowed_cidrs(&self) -> Option<&[IpNet]> {
        match self {
            BackendConfig::Memory { allowed_cidrs, .. }
            | BackendConfig::Linux { allowed_cidrs, .. } => allowed_cidrs.as_deref(),
        }
    }
}

fn default_bridge_prefix() -> String {
    DEFAULT_BRIDGE_PREFIX.to_owned()
}

impl Default for BackendConfig {
    fn default() -> Self {
        BackendConfig::Memory {
            state_file: None,
            allowed_cidrs: None,
        }
    }
}
