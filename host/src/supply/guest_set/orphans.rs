//! Finalizers left behind: a guest that wrote a finalizer and is unloaded leaves it on the
//! objects of its primary kind. The guest set records it here on unload and forgets it when a
//! guest of that name loads again (it handles its objects again); the host's orphan policy
//! (`crate::cluster::finalizer`) counts and releases it, and `/guests` shows it.

use std::collections::BTreeMap;

use serde::Serialize;

use super::grants::ActiveGuest;
use super::source::Origin;

/// A finalizer whose guest was unloaded: objects may still carry it (see `crate::cluster::finalizer`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OrphanedFinalizer {
    pub finalizer: String,
    /// The guest's primary kind, which carries the finalizer.
    pub(crate) kind: crate::cluster::objects::Gvk,
    /// A namespaced `Reconciler`'s namespace, the only one its finalizer may be released in:
    /// another tenant's guest may declare the same finalizer on the same kind and run on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) namespace: Option<String>,
    /// The account the guest wrote as (its grant's, or its tenant namespace's): its finalizer
    /// is released as that account, which holds the write the host may lack.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) service_account: Option<crate::config::ServiceAccountRef>,
    pub(crate) policy: crate::config::OnUnload,
    /// When the guest was unloaded (RFC 3339).
    pub(crate) unloaded_at: String,
    /// Objects carrying it, as cached when the guest was unloaded.
    pub(crate) objects: Option<usize>,
    /// Objects the host released it from (policy `release`, after the grace period).
    pub(crate) released: Option<usize>,
}

/// Unloaded guests that declared a finalizer, by guest name, with the name of their origin.
#[derive(Default)]
pub(super) struct Orphans(BTreeMap<String, (String, OrphanedFinalizer)>);

impl Orphans {
    /// Records what `guest`, unloaded from `origin` now, leaves behind, if anything.
    pub(super) fn record(
        &mut self,
        origin: &Origin,
        guest: &ActiveGuest,
        policy: crate::config::OnUnload,
    ) {
        let manifest = &guest.loaded.manifest;
        // A guest in shadow mode never wrote its finalizer: nothing of it is left behind.
        if guest.grant.mode != crate::config::Mode::Active {
            return;
        }
        let Some(finalizer) = &manifest.finalizer else {
            return;
        };
        let orphan = OrphanedFinalizer {
            finalizer: finalizer.clone(),
            kind: manifest.primary.clone(),
            namespace: origin.tenant().map(|t| t.namespace.clone()),
            service_account: guest.grant.service_account.clone(),
            policy,
            unloaded_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now())
                .to_string(),
            objects: None,
            released: None,
        };
        self.0
            .insert(guest.name().to_owned(), (origin.name().to_owned(), orphan));
    }

    /// A guest of that name is back: it handles its objects (and its finalizer) again.
    pub(super) fn forget(&mut self, guest: &str) {
        self.0.remove(guest);
    }

    pub(super) fn get(&self, guest: &str) -> Option<&OrphanedFinalizer> {
        self.0.get(guest).map(|(_, o)| o)
    }

    pub(super) fn get_mut(&mut self, guest: &str) -> Option<&mut OrphanedFinalizer> {
        self.0.get_mut(guest).map(|(_, o)| o)
    }

    /// Each orphan as (guest name, origin name, finalizer), by guest name.
    pub(super) fn iter(&self) -> impl Iterator<Item = (&str, &str, &OrphanedFinalizer)> {
        self.0
            .iter()
            .map(|(guest, (origin, orphan))| (guest.as_str(), origin.as_str(), orphan))
    }
}
