//! Judging a loaded guest against the host configuration: the grant of its source item (the
//! rule of [`super::source`], applied here and nowhere else) and whether that grant and the
//! host's caps cover what its manifest and imports ask. `run` judges every guest this way at
//! load and on every configuration change; `check`, `reconcile` and `rbac` judge a file the
//! same way. Cost: no compilation, a walk over the capabilities' requirements.

use crate::capabilities::LoadCheck;
use crate::config::{Grant, HostConfig};
use crate::runtime::{LoadError, LoadedGuest};

use super::source::{GrantKey, NotItsGrant, Origin};

/// A guest that passed every check, with what it was granted. Its manifest name is the name
/// it runs under: its grant key (`name`, or `name@file-stem` for a second version).
#[derive(Debug)]
pub struct ActiveGuest {
    pub loaded: LoadedGuest,
    pub grant: Grant,
    /// The name it declared and the source item it came from, which keyed its grant.
    pub key: GrantKey,
}

impl ActiveGuest {
    pub fn name(&self) -> &str {
        &self.loaded.manifest.name
    }

    /// Judges a guest freshly loaded from `origin` (its manifest name is the one it declares).
    pub fn admit(
        origin: &Origin,
        loaded: LoadedGuest,
        config: &HostConfig,
    ) -> Result<Self, GrantError> {
        let declared = loaded.manifest.name.clone();
        judge(origin, &declared, loaded, config)
    }

    /// The same version judged again against `config`, from the name it declared, not the
    /// key it ran under: its grant (or key) may have changed, or be gone.
    pub fn regrant(&self, origin: &Origin, config: &HostConfig) -> Result<Self, GrantError> {
        judge(origin, self.key.declared(), self.loaded.clone(), config)
    }
}

/// The grant of `origin` for a guest declaring `declared`, checked against what its manifest
/// asks. The guest is renamed to its grant key (`<name>@<stem>` for an item not named after
/// it), the name capabilities' messages and the running controller use.
fn judge(
    origin: &Origin,
    declared: &str,
    mut loaded: LoadedGuest,
    config: &HostConfig,
) -> Result<ActiveGuest, GrantError> {
    let key = origin.resolve(declared, config)?;
    loaded.manifest.name = key.to_string();
    let manifest = &loaded.manifest;
    let Some(grant) = config.grant(&manifest.name) else {
        let mut needs = vec![manifest.primary.to_string()];
        needs.extend(manifest.secondary.iter().map(|s| s.kind.to_string()));
        return Err(GrantError::NoGrant {
            file: origin.name().to_owned(),
            guest: manifest.name.clone(),
            needs: needs.join(", "),
        });
    };
    check_within_grant(&loaded, &grant, config).map_err(|missing| GrantError::BeyondGrant {
        file: origin.name().to_owned(),
        guest: loaded.manifest.name.clone(),
        missing,
    })?;
    Ok(ActiveGuest { loaded, grant, key })
}

/// Checks a loaded guest against its grant and the host's caps; lists everything missing at
/// once. Each capability states its own requirement (`capabilities::check_grant`).
fn check_within_grant(
    loaded: &LoadedGuest,
    grant: &Grant,
    config: &HostConfig,
) -> Result<(), String> {
    let manifest = &loaded.manifest;
    let mut missing = Vec::new();
    let cap = config.max_concurrency();
    if manifest.concurrency > cap {
        missing.push(format!(
            "concurrency {} (the host allows at most {cap} per guest: maxConcurrency)",
            manifest.concurrency
        ));
    }
    if let Err(more) = crate::capabilities::check_grant(&LoadCheck {
        manifest,
        imports: &loaded.imports,
        grant,
        config,
    }) {
        missing.push(more);
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(missing.join(", "))
    }
}

/// Why the configuration does not admit a guest.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    #[error(transparent)]
    NotItsGrant(#[from] NotItsGrant),
    #[error(
        "{file}: guest `{guest}` has no grant: add guests.{guest} to the host configuration with what it needs (read: {needs})"
    )]
    NoGrant {
        file: String,
        guest: String,
        needs: String,
    },
    #[error("{file}: guest `{guest}` asks for more than its grant: {missing}")]
    BeyondGrant {
        file: String,
        guest: String,
        missing: String,
    },
}

/// Why a guest set refused a guest.
#[derive(Debug, thiserror::Error)]
pub enum RefusalError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error(
        "{file}: guest name `{guest}` is already used by {other}; each guest needs a unique manifest name"
    )]
    DuplicateName {
        file: String,
        guest: String,
        other: String,
    },
}
