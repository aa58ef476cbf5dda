//! What the guest set knows ([`Ledger`]), and the `/guests` view of it: per source item, the
//! content last judged, the verdict and the version active now; per unloaded guest, the
//! finalizer it left behind; per guest, its shadow-mode verdicts. Logs and metrics use the same
//! words ([`FileState`]).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::grants::{ActiveGuest, RefusalError};
use super::orphans::{OrphanedFinalizer, Orphans};
use super::source::Origin;
use crate::sandbox::shadow::Shadows;

/// Status of one file, as logs, metrics and `/guests` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FileStatus {
    pub file: PathBuf,
    /// SHA-256 of the file's current content.
    pub(crate) hash: String,
    pub state: FileState,
    /// The guest name of the active version from this file, if any.
    pub guest: Option<String>,
    /// The content hash of the version that is active (differs from `hash` after a refusal).
    pub active_hash: Option<String>,
    /// For an unloaded guest that declared a finalizer: what is left of it on objects.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub orphaned_finalizer: Option<OrphanedFinalizer>,
    /// The active version's mode (`active` or `shadow`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mode: Option<crate::config::Mode>,
    /// The guest's verdicts in shadow mode, if it ever ran in it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) shadow: Option<crate::sandbox::shadow::ShadowReport>,
    /// The trusted key whose signature admitted the active version (a pulled module, when
    /// signatures are required).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) signed_by: Option<String>,
    /// The ServiceAccount the active version writes as (`NAMESPACE/NAME`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    /// The last access review of a ServiceAccount's reads for this item.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub access_review: Option<crate::sandbox::identity::Review>,
    /// Whether the active version's grant sets `record`.
    #[serde(skip)]
    pub(crate) recording: bool,
    /// The records kept of its reconciles, when its grant sets `record`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) records: Option<crate::sandbox::records::RecordsSummary>,
    /// The guest's last rollout of a new version (`crate::supply::rollout::RolloutView`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rollout: Option<serde_json::Value>,
    /// The content hash of the version that reconciles every key outside a rollout's share,
    /// as the controller runs it (differs from `activeHash` while a rollout is in flight or
    /// after one was rolled back).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) serving_hash: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase", tag = "state", content = "reason")]
pub enum FileState {
    /// The file is gone; its guest left a finalizer behind (`orphanedFinalizer`).
    Unloaded,
    Loaded,
    Failed(String),
}

/// One source item as the guest set last judged it.
pub(super) struct Entry {
    pub(crate) origin: Origin,
    /// The content of the last verdict: the same content is not judged again.
    pub(crate) hash: String,
    pub(crate) state: FileState,
    /// The version running now: this content's, or an earlier one kept after a refusal.
    pub(crate) active: Option<Arc<ActiveGuest>>,
    /// Refused because another guest holds or reserves its finalizer.
    blocked_by_finalizer: bool,
}

/// Who holds or reserves a finalizer another guest declares.
pub(super) struct Holder {
    pub(super) item: String,
    pub(super) guest: String,
    pub(super) origin: Origin,
    pub(super) hash: String,
    /// Whether the holder is a tenant's guest (a namespaced `Reconciler`).
    pub(super) tenant: bool,
}

impl Entry {
    pub(super) fn loaded(origin: Origin, hash: String, active: Arc<ActiveGuest>) -> Self {
        Self {
            origin,
            hash,
            state: FileState::Loaded,
            active: Some(active),
            blocked_by_finalizer: false,
        }
    }

    /// Refused for `err`; `previous`, its last good version, stays active.
    pub(super) fn refused(
        origin: Origin,
        hash: String,
        err: &RefusalError,
        previous: Option<Arc<ActiveGuest>>,
    ) -> Self {
        Self {
            origin,
            hash,
            state: FileState::Failed(err.to_string()),
            active: previous,
            blocked_by_finalizer: matches!(
                err,
                RefusalError::FinalizerConflict { .. } | RefusalError::FinalizerReserved { .. }
            ),
        }
    }
}

/// What the set knows: every item by origin name, and the finalizers unloaded guests left.
#[derive(Default)]
pub(super) struct Ledger {
    pub(crate) entries: BTreeMap<String, Entry>,
    pub(crate) orphans: Orphans,
}

impl Ledger {
    /// Every item with the version of it running now, and whether its last verdict was a
    /// refusal.
    pub(super) fn snapshot(&self) -> Vec<(Origin, Option<Arc<ActiveGuest>>, bool)> {
        self.entries
            .values()
            .map(|e| {
                let refused = matches!(e.state, FileState::Failed(_));
                (e.origin.clone(), e.active.clone(), refused)
            })
            .collect()
    }

    /// The items not in `present`: gone from the source.
    pub(super) fn gone(&self, present: &[Origin]) -> Vec<String> {
        self.entries
            .keys()
            .filter(|name| !present.iter().any(|o| o.name() == *name))
            .cloned()
            .collect()
    }

    /// The content hash of the last verdict on item `name`.
    pub(super) fn judged(&self, name: &str) -> Option<&str> {
        self.entries.get(name).map(|e| e.hash.as_str())
    }

    /// The version of item `name` running now.
    pub(super) fn active_of(&self, name: &str) -> Option<Arc<ActiveGuest>> {
        self.entries.get(name).and_then(|e| e.active.clone())
    }

    pub(super) fn active(&self) -> Vec<Arc<ActiveGuest>> {
        self.entries
            .values()
            .filter_map(|e| e.active.clone())
            .collect()
    }

    /// Another item than `name` whose running guest is called `guest`.
    pub(super) fn running_elsewhere(&self, name: &str, guest: &str) -> Option<&str> {
        self.entries
            .iter()
            .find(|(other, e)| {
                *other != name && e.active.as_ref().is_some_and(|a| a.name() == guest)
            })
            .map(|(other, _)| other.as_str())
    }

    /// The item other than `name` whose guest holds or reserves the finalizer `guest`
    /// declares on the same primary kind, on objects both may reach: the two meet when each
    /// claims it. A guest in active mode claims its finalizer; an operator's guest (a file or a
    /// `ClusterReconciler`) claims it against a tenant's in shadow mode too, so that a trial
    /// promoted later finds it free. So a guest in shadow mode runs beside an active one of
    /// its own side, and a tenant's in shadow mode beside anyone.
    pub(super) fn finalizer_holder(&self, name: &str, guest: &ActiveGuest) -> Option<Holder> {
        let manifest = &guest.loaded.manifest;
        let finalizer = manifest.finalizer.as_ref()?;
        let claims = |g: &ActiveGuest, against: &ActiveGuest| {
            g.grant.mode == crate::config::Mode::Active
                || (g.tenant().is_none() && against.tenant().is_some())
        };
        // Guests held to different namespaces (two tenants' Reconcilers) never meet on an object.
        let overlaps = |theirs: &crate::sandbox::manifest::Manifest| match (
            &manifest.namespace,
            &theirs.namespace,
        ) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.entries.iter().find_map(|(other, e)| {
            let held = e.active.as_ref()?;
            let theirs = &held.loaded.manifest;
            let meet = other != name
                // One kind served at several versions is one set of objects.
                && theirs.primary.group == manifest.primary.group
                && theirs.primary.kind == manifest.primary.kind
                && theirs.finalizer.as_ref() == Some(finalizer)
                && overlaps(theirs);
            (meet && claims(guest, held) && claims(held, guest)).then(|| Holder {
                item: other.clone(),
                guest: held.name().to_owned(),
                origin: e.origin.clone(),
                hash: e.hash.clone(),
                tenant: held.tenant().is_some(),
            })
        })
    }

    /// Items refused because another guest held their finalizer: looked at again when a
    /// guest that declared one goes.
    pub(super) fn blocked_by_finalizers(&self) -> Vec<Origin> {
        self.entries
            .values()
            .filter(|e| e.blocked_by_finalizer)
            .map(|e| e.origin.clone())
            .collect()
    }

    pub(super) fn insert(&mut self, entry: Entry) {
        self.entries.insert(entry.origin.name().to_owned(), entry);
    }

    /// The `/guests` view: every item by name, then every orphaned finalizer by guest name.
    pub(super) fn statuses(&self, shadows: &Shadows) -> Vec<FileStatus> {
        let files = self.entries.values().map(|entry| FileStatus {
            file: PathBuf::from(entry.origin.name()),
            hash: entry.hash.clone(),
            state: entry.state.clone(),
            guest: entry.active.as_ref().map(|a| a.name().to_owned()),
            active_hash: entry.active.as_ref().map(|a| a.loaded.hash.clone()),
            signed_by: entry.active.as_ref().and_then(|a| a.signed_by.clone()),
            orphaned_finalizer: None,
            mode: entry.active.as_ref().map(|a| a.grant.mode),
            shadow: entry.active.as_ref().and_then(|a| {
                let report = shadows.report(a.name())?;
                Some(if a.tenant().is_some() {
                    report.counts_only()
                } else {
                    report
                })
            }),
            service_account: entry
                .active
                .as_ref()
                .and_then(|a| a.grant.service_account.as_ref())
                .map(ToString::to_string),
            access_review: None,
            recording: entry
                .active
                .as_ref()
                .is_some_and(|a| a.grant.record.is_some()),
            records: None,
            rollout: None,
            serving_hash: None,
        });
        let orphans = self
            .orphans
            .iter()
            .map(|(guest, origin, orphan)| FileStatus {
                file: PathBuf::from(origin),
                hash: String::new(),
                state: FileState::Unloaded,
                guest: Some(guest.to_owned()),
                active_hash: None,
                orphaned_finalizer: Some(orphan.clone()),
                mode: None,
                shadow: None,
                signed_by: None,
                service_account: None,
                access_review: None,
                recording: false,
                records: None,
                rollout: None,
                serving_hash: None,
            });
        files.chain(orphans).collect()
    }
}
