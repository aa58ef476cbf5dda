//! What the guest set tells the rest of the host when it changes: the [`GuestEvent`] broadcast,
//! on which the host starts, swaps and stops controllers, the per-guest metrics, and the log
//! line of a refusal.

use std::sync::Arc;

use tokio::sync::broadcast;

use super::grants::{ActiveGuest, RefusalError};
use crate::metrics::Metrics;
use crate::sandbox::runtime::LoadError;

/// What changed in the set of active guests.
#[derive(Debug, Clone)]
pub enum GuestEvent {
    /// A guest became active, or a new version of it replaced the old one.
    Loaded(Arc<ActiveGuest>),
    /// The guest's item was removed, or its grant withdrawn (the name is the manifest name).
    Unloaded(String),
}

/// The broadcast and the metrics, for the set's state machine.
pub(super) struct Notices {
    events: broadcast::Sender<GuestEvent>,
    metrics: Option<Metrics>,
}

impl Notices {
    pub(super) fn new(metrics: Option<Metrics>) -> Self {
        // Subscribers that fall this far behind resynchronise from `Guests::active`.
        let (events, _) = broadcast::channel(256);
        Self { events, metrics }
    }

    pub(super) fn subscribe(&self) -> broadcast::Receiver<GuestEvent> {
        self.events.subscribe()
    }

    /// Counts `guest` (this version) as loaded or not.
    pub(super) fn count(&self, guest: &ActiveGuest, loaded: bool) {
        if let Some(metrics) = &self.metrics {
            metrics.guest_loaded(guest.name(), &guest.loaded.hash, loaded);
        }
    }

    pub(super) fn loaded(&self, guest: Arc<ActiveGuest>) {
        let _ = self.events.send(GuestEvent::Loaded(guest));
    }

    /// `guest` no longer runs: uncounted and announced.
    pub(super) fn unloaded(&self, guest: &ActiveGuest) {
        self.count(guest, false);
        let _ = self
            .events
            .send(GuestEvent::Unloaded(guest.name().to_owned()));
    }

    /// The item `file` was refused; `kept`, its last good version, stays active.
    pub(super) fn refused(&self, file: &str, kept: Option<&ActiveGuest>, err: &RefusalError) {
        if let Some(old) = kept {
            tracing::error!(file, keeping = %old.loaded.hash,
                "guest refused, keeping the last good version: {err}");
        } else {
            tracing::error!(file, "guest refused: {err}");
        }
        if let Some(metrics) = &self.metrics {
            metrics.guest_load_failed(file);
            if let RefusalError::Load(LoadError::ManifestDeadline { .. }) = err {
                metrics.deadline_hit(file);
            }
        }
    }
}
