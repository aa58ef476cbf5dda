//! The set of active guests. Guests come from a source ([`GuestSource`]; today a directory,
//! [`Directory`], where every `*.wasm` is a guest). Items are loaded at start, then the source is
//! followed: a new item is loaded, a changed one is compiled, validated and swapped in
//! (reconciles already running finish on the old version, which they hold), a removed one is
//! unloaded. An item that fails to load is refused with its reason, and if an earlier version
//! of it was good, that version stays active. Every change is broadcast ([`GuestEvent`]).
//!
//! The host configuration can change under a running set ([`Guests::reconfigure`]): every
//! item is judged again against the new grants. A guest whose grant changed (its mode
//! included) is loaded again with it; one whose grant was withdrawn is unloaded, since a
//! revoked grant must take effect.
//!
//! A grant belongs to the item a guest is loaded from, never to the name it declares
//! ([`Origin::resolve`]): `guests.network` is the grant of `network.wasm`, and a file that declares
//! `network` under any other name is refused, so no file takes another guest's grant or pushes
//! the rightful one out. A grant keyed `<manifest name>@<file stem>` (e.g. `network@network-v2`
//! for `network-v2.wasm`) is that file's and names the guest it loads: that is how a second
//! version of a guest runs beside the first (typically in shadow mode) before it is promoted.
//!
//! Cost: a rescan lists the source and reads and hashes every item; only a content not judged
//! before is compiled (or mapped from the compile cache), on the calling thread.
//!
//! The files, one concept each; imports run down this list, never back up:
//!
//! - `mod.rs`: [`Guests`], the set and its state machine (load, refuse and keep the last good
//!   version, unload; reconfigure).
//! - `directory.rs`: [`Directory`], the guest directory as a source.
//! - `events.rs`: what the set tells the host: [`GuestEvent`]s, metrics, refusals.
//! - `status.rs`: what the set knows of each item, and the `/guests` view ([`FileStatus`]).
//! - `orphans.rs`: finalizers unloaded guests left behind ([`OrphanedFinalizer`]).
//! - `rollouts.rs`: where each guest's rollout stands, and the versions rolled back ([`Rollouts`]).
//! - `identity.rs`: access reviews of guests' own ServiceAccounts, and the last of each.
//! - `grants.rs`: judging a loaded guest against its grant ([`ActiveGuest::admit`]).
//! - `source.rs`: the seam, [`GuestSource`], and which grant an item's guest gets ([`Origin`],
//!   [`GrantKey`]).
//!
//! Following a directory's files is [`crate::supply::dir_watch`]'s, shared with the configuration file.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::broadcast;

use crate::config::HostConfig;
use crate::metrics::Metrics;
use crate::sandbox::runtime::Runtime;
use crate::sandbox::shadow::Shadows;

mod access_reviews;
mod directory;
mod events;
mod grants;
mod orphans;
mod rollouts;
mod source;
mod status;

pub use directory::{Directory, WRITING};
pub use events::GuestEvent;
pub(crate) use grants::{ActiveGuest, GrantError, IdentityError, RefusalError};
pub(crate) use orphans::OrphanedFinalizer;
pub(crate) use rollouts::Rollouts;
pub use source::{
    Artefact, Changes, GrantKey, GuestSource, NotItsGrant, Origin, OriginKind, RECONCILER_PREFIX,
    Resume, SourceError, Sources, Tenant, Verdict,
};
pub use status::{FileState, FileStatus};

use access_reviews::Reviews;
use events::Notices;
use status::{Entry, Holder, Ledger};

/// Look again this soon when a load failed for a reason that may pass (no free instance slot).
const TRANSIENT_RETRY: Duration = Duration::from_secs(1);

/// The set of guests loaded from one source.
pub struct Guests {
    source: Box<dyn GuestSource>,
    runtime: Arc<Runtime>,
    config: RwLock<Arc<HostConfig>>,
    shadows: Arc<Shadows>,
    ledger: Mutex<Ledger>,
    notices: Notices,
    reviews: Reviews,
    /// Held by whoever judges items (a rescan, a reconfiguration, an identity recheck), which
    /// run on blocking threads of their own: one at a time.
    judging: Mutex<()>,
    /// A load failed for a transient reason: look again soon rather than on the next change.
    retry_soon: AtomicBool,
    /// A guest that declared a finalizer stopped: items refused for want of that finalizer
    /// are judged again at the end of the pass.
    finalizer_freed: AtomicBool,
    /// Where guests whose grant sets `record` keep their records; `/guests` lists them.
    record_directory: RwLock<Option<PathBuf>>,
    /// Where controllers publish their rollouts; `/guests` shows them.
    rollouts: RwLock<Arc<Rollouts>>,
    /// Whether a pass over the sources has judged every item they held, the operator's
    /// (tenants' `Reconciler`s never hold readiness back); until then, why not.
    first_pass: tokio::sync::watch::Sender<FirstPass>,
}

/// How far the guest set is from having judged what its sources held at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FirstPass {
    /// Not yet, and why.
    Waiting(String),
    Done,
}

impl Guests {
    /// `shadows` is where controllers record shadow-mode verdicts; `/guests` shows them.
    pub fn new(
        source: impl GuestSource + 'static,
        runtime: Arc<Runtime>,
        config: Arc<HostConfig>,
        metrics: Option<Metrics>,
        shadows: Arc<Shadows>,
    ) -> Arc<Self> {
        Arc::new(Self {
            source: Box::new(source),
            runtime,
            config: RwLock::new(config),
            shadows,
            ledger: Mutex::new(Ledger::default()),
            notices: Notices::new(metrics),
            reviews: Reviews::default(),
            judging: Mutex::new(()),
            retry_soon: AtomicBool::new(false),
            finalizer_freed: AtomicBool::new(false),
            record_directory: RwLock::new(None),
            rollouts: RwLock::default(),
            first_pass: tokio::sync::watch::Sender::new(FirstPass::Waiting(
                "the guests have not been read yet".into(),
            )),
        })
    }

    /// Follows [`FirstPass`]: `Done` once a pass over the sources judged (loaded or refused)
    /// every operator's item they listed; every `Loaded` of that pass was broadcast before.
    pub fn first_pass(&self) -> tokio::sync::watch::Receiver<FirstPass> {
        self.first_pass.subscribe()
    }

    /// From now on, a guest naming a ServiceAccount is admitted only once `review` says the
    /// account may make its reads in `namespace` (none: all namespaces). Set before the first
    /// rescan.
    pub fn set_access_review(
        &self,
        review: Arc<dyn crate::sandbox::identity::AccessReview>,
        namespace: Option<String>,
    ) {
        self.reviews.set_reviewer(review, namespace);
    }

    /// Where recorded reconciles are kept (see `crate::sandbox::records`), for `/guests`.
    pub(crate) fn set_record_directory(&self, directory: Option<PathBuf>) {
        *self.record_directory.write() = directory;
    }

    /// Where controllers publish their rollouts, for `/guests` and the Reconcilers' status.
    pub(crate) fn set_rollouts(&self, rollouts: Arc<Rollouts>) {
        *self.rollouts.write() = rollouts;
    }

    /// Where controllers publish their rollouts.
    pub(crate) fn rollouts(&self) -> Arc<Rollouts> {
        self.rollouts.read().clone()
    }

    /// The host configuration guests are checked against (the latest one applied).
    pub(crate) fn config(&self) -> Arc<HostConfig> {
        self.config.read().clone()
    }

    /// Where controllers record their shadow-mode verdicts, and `/guests` reads them.
    pub(crate) fn shadows(&self) -> Arc<Shadows> {
        self.shadows.clone()
    }

    /// Receives every later change; call before the first `rescan` to miss nothing.
    pub fn subscribe(&self) -> broadcast::Receiver<GuestEvent> {
        self.notices.subscribe()
    }

    /// The guests active now.
    pub fn active(&self) -> Vec<Arc<ActiveGuest>> {
        self.ledger.lock().active()
    }

    pub fn statuses(&self) -> Vec<FileStatus> {
        let mut statuses = self.ledger.lock().statuses(&self.shadows);
        let records = self.record_directory.read().clone();
        let rollouts = self.rollouts();
        for status in &mut statuses {
            if let Some(guest) = status
                .guest
                .as_deref()
                .filter(|_| status.active_hash.is_some())
            {
                status.rollout = rollouts
                    .view(guest)
                    .and_then(|view| serde_json::to_value(view).ok());
                status.serving_hash = rollouts.stable(guest).map(|s| s.loaded.hash.clone());
            }
            status.access_review = self.reviews.last(&status.file.to_string_lossy());
            if let (Some(root), Some(guest)) = (&records, &status.guest)
                && status.recording
            {
                status.records = Some(crate::sandbox::records::summary(root, guest));
            }
        }
        statuses
    }

    /// The finalizer an unloaded guest left behind, if any.
    pub fn orphan(&self, guest: &str) -> Option<OrphanedFinalizer> {
        self.ledger.lock().orphans.get(guest).cloned()
    }

    /// Updates what is known of an unloaded guest's finalizer.
    pub(crate) fn update_orphan(&self, guest: &str, update: impl FnOnce(&mut OrphanedFinalizer)) {
        if let Some(orphan) = self.ledger.lock().orphans.get_mut(guest) {
            update(orphan);
        }
    }
}

/// What drives the state machine: the source's changes and the host configuration's.
impl Guests {
    /// Loads everything now, then follows the source until the returned task is
    /// dropped/aborted.
    pub async fn watch(self: Arc<Self>) -> Result<(), FollowError> {
        let mut changes = self.source.watch()?;
        loop {
            let this = self.clone();
            tokio::task::spawn_blocking(move || this.rescan()).await?;
            if self.retry_soon.swap(false, Ordering::Relaxed) {
                changes.retry_in(TRANSIENT_RETRY);
            }
            changes.next().await?;
        }
    }

    /// Brings the set in line with the source. Compiling happens on this thread; call it from
    /// a blocking context.
    pub fn rescan(&self) {
        let _judging = self.judging.lock();
        let present = match self.source.list() {
            Ok(origins) => origins,
            Err(e) => {
                tracing::error!("{e}");
                self.first_pass.send_if_modified(|pass| match pass {
                    FirstPass::Waiting(why) => {
                        *why = format!("the guests cannot be listed: {e}");
                        true
                    }
                    FirstPass::Done => false,
                });
                return;
            }
        };
        let gone = self.ledger.lock().gone(&present);
        for name in &gone {
            self.unload(name);
            self.reviews.forget(name);
        }
        for origin in &present {
            // Its namespace now under another tenant rule: what ran within the old rule's
            // bounds (its ceiling, its signing keys) stops, as a revoked grant does, and
            // starts afresh once the new rule admits it.
            if self.moved_to_another_rule(origin) {
                self.unload(origin.name());
            }
            // A content the source can name without reading it (a pulled module's) and judged
            // already: nothing to read, at most a new grant to apply.
            let known = self.source.known_hash(origin);
            let last = self
                .ledger
                .lock()
                .entries
                .get(origin.name())
                .map(|e| (e.hash.clone(), e.origin == *origin, e.active.clone()));
            if let (Some(known), Some((hash, same_origin, active))) = (&known, &last)
                && known == hash
            {
                match active {
                    _ if *same_origin => continue,
                    Some(active) => {
                        self.regrant(origin, active, Revoked::KeepLastGood);
                        continue;
                    }
                    None => {}
                }
            }
            // Vanished between listing and reading, or not readable now (a registry down): the
            // next change rescans, and what runs keeps running.
            let Some(artefact) = self.read(origin) else {
                continue;
            };
            match last {
                Some((hash, true, _)) if hash == artefact.hash => {}
                // The same content under a changed item (a `Reconciler`'s new grant): judged
                // again as a new version, so a grant that fails keeps the last good one.
                Some((hash, false, Some(active))) if hash == artefact.hash => {
                    self.regrant(origin, &active, Revoked::KeepLastGood);
                }
                _ => self.load(artefact),
            }
        }
        self.retry_freed_finalizers();
        self.note_first_pass(&present);
    }

    /// Ends the first pass once the source is listed whole and every operator's item it
    /// listed has a verdict; an item without one yet (a module still pulling, a file
    /// unreadable, a load refused for a passing reason) holds it until a later pass judges it.
    fn note_first_pass(&self, present: &[Origin]) {
        if *self.first_pass.borrow() == FirstPass::Done {
            return;
        }
        let waiting = self.source.unsettled().or_else(|| {
            let ledger = self.ledger.lock();
            let unread: Vec<&str> = present
                .iter()
                .filter(|o| o.tenant().is_none() && !ledger.entries.contains_key(o.name()))
                .map(Origin::name)
                .collect();
            (!unread.is_empty()).then(|| {
                format!(
                    "not judged yet (a module still pulling, a file unreadable, a load to retry): {}",
                    unread.join(", ")
                )
            })
        });
        self.first_pass
            .send_replace(waiting.map_or(FirstPass::Done, FirstPass::Waiting));
    }

    /// Judges again the items refused because a guest now gone held their finalizer (a
    /// tenant's Reconciler deleted, an operator's guest removed), without waiting for an
    /// unrelated change.
    fn retry_freed_finalizers(&self) {
        if !self.finalizer_freed.swap(false, Ordering::Relaxed) {
            return;
        }
        let blocked = self.ledger.lock().blocked_by_finalizers();
        for origin in blocked {
            if let Some(artefact) = self.read(&origin) {
                self.load(artefact);
            }
        }
    }

    /// Applies a new host configuration: every item is judged again against it (see the
    /// module docs). Backends cannot change while the host runs: such a configuration is
    /// refused whole and the current one stays.
    pub fn reconfigure(&self, config: HostConfig) -> Result<(), BackendsChanged> {
        if config.backends != self.config().backends {
            return Err(BackendsChanged);
        }
        let _judging = self.judging.lock();
        self.source.reconfigured(&config);
        *self.config.write() = Arc::new(config);
        let entries = self.ledger.lock().snapshot();
        for (origin, active, refused) in entries {
            // The running version is judged again as it was admitted, whatever the item holds
            // now (a newer content that was refused stays refused).
            if let Some(active) = &active {
                self.regrant(&active.origin, active, Revoked::Unload);
            }
            // An item refused so far (e.g. for want of a grant) may pass now; a `Reconciler`'s
            // refusal may have been the host's ceiling, which may have just risen.
            let retry = active.is_none() || matches!(origin.kind(), OriginKind::Reconciler { .. });
            if refused
                && retry
                && let Some(artefact) = self.read(&origin)
            {
                self.load(artefact);
            }
        }
        self.retry_freed_finalizers();
        Ok(())
    }

    /// Reviews every running guest's ServiceAccount again (RBAC may have changed): a guest whose
    /// account lost a read its grant allows is unloaded, as a withdrawn grant is; one whose
    /// review fails keeps running on its last verdict; an item refused for its account's reads
    /// is loaded again. Makes API calls: call from a blocking context.
    pub fn recheck_identities(&self) {
        let _judging = self.judging.lock();
        let retry = self.reviews.not_allowed();
        // Bound first: the ledger's lock must be released before an item is unloaded.
        let entries = self.ledger.lock().snapshot();
        for (origin, active, refused) in entries {
            // Refused for its account's reads (a newer content or grant, perhaps, while an
            // older version runs): judged again whole, as a load.
            if refused && retry.contains(origin.name()) {
                if let Some(artefact) = self.read(&origin) {
                    self.load(artefact);
                }
                continue;
            }
            match active {
                Some(active) if active.grant.service_account.is_some() => {
                    match self.reviews.check(origin.name(), &active) {
                        Ok(()) => {}
                        Err(e @ IdentityError::ReviewFailed { .. }) => {
                            tracing::warn!(file = %origin.name(), "{e}");
                        }
                        Err(e) => {
                            let hash = self.ledger.lock().judged(origin.name()).map(str::to_owned);
                            self.unload(origin.name());
                            self.refuse(&origin, hash.unwrap_or_default(), None, &e.into());
                        }
                    }
                }
                _ => {}
            }
        }
    }

    /// Whether `origin`'s running version was admitted under another tenant rule than the one
    /// that selects its namespace now (the namespace was relabelled).
    fn moved_to_another_rule(&self, origin: &Origin) -> bool {
        let Some(now) = origin.tenant() else {
            return false;
        };
        let active = self
            .ledger
            .lock()
            .entries
            .get(origin.name())
            .and_then(|e| e.active.clone());
        let Some(before) = active.as_ref().and_then(|a| a.origin.tenant()) else {
            return false;
        };
        let config = self.config();
        let Some(settings) = &config.reconcilers else {
            return false;
        };
        let rule = |t: &Tenant| settings.tenant(&t.namespace, &t.labels).map(|(i, _)| i);
        rule(before) != rule(now)
    }

    /// `origin`'s content now, if it can be read.
    fn read(&self, origin: &Origin) -> Option<Artefact> {
        match self.source.read(origin) {
            Ok(artefact) => Some(artefact),
            Err(e) => {
                tracing::debug!(file = %origin.name(), "skipping unreadable file: {e}");
                None
            }
        }
    }
}

/// The state machine, one item at a time: load (or refuse, keeping the last good version),
/// regrant, unload.
impl Guests {
    fn load(&self, artefact: Artefact) {
        let Artefact {
            origin,
            bytes,
            hash,
            signed_by,
        } = artefact;
        let result = self.validate(&origin, &bytes).and_then(|mut active| {
            self.reviews.check(origin.name(), &active)?;
            active.signed_by = signed_by;
            Ok(active)
        });
        let mut ledger = self.ledger.lock();
        let previous = ledger.active_of(origin.name());
        let active = match result {
            Ok(active) => Arc::new(active),
            Err(e) if e.is_transient() => {
                drop(ledger);
                // Not recorded as this content's verdict: the next rescan loads it again.
                tracing::warn!(file = %origin.name(), "{e}");
                self.retry_soon.store(true, Ordering::Relaxed);
                return;
            }
            Err(err) => {
                drop(ledger);
                return self.refuse(&origin, hash, previous, &err);
            }
        };
        let name = active.name().to_owned();
        // A running name encodes its item's stem (`source`), so two files of one directory
        // never meet here; kept for sources to come (`Reconciler` objects).
        if let Some(other) = ledger.running_elsewhere(origin.name(), &name) {
            let err = RefusalError::DuplicateName {
                file: origin.name().to_owned(),
                guest: name,
                other: other.to_owned(),
            };
            drop(ledger);
            return self.refuse(&origin, hash, previous, &err);
        }
        match finalizer_conflict(&ledger, origin.name(), &active) {
            None => {}
            Some(Finalizer::Refused(err)) => {
                drop(ledger);
                return self.refuse(&origin, hash, previous, &err);
            }
            Some(Finalizer::Evict(holder, err)) => {
                drop(ledger);
                tracing::warn!(file = %holder.item, guest = %holder.guest, "{err}");
                self.stop(&holder.item, false);
                self.refuse(&holder.origin, holder.hash, None, &err);
                // Judged again whole: the ledger changed while it was not held.
                return self.load(Artefact {
                    origin,
                    bytes,
                    hash,
                    signed_by: active.signed_by.clone(),
                });
            }
        }
        if let Some(old) = previous.as_ref().filter(|old| old.name() != name) {
            self.notices.unloaded(old);
        }
        tracing::info!(
            file = %origin.name(), guest = %name, hash = %active.loaded.hash,
            replaced = previous.is_some(), "guest loaded"
        );
        // Back before its finalizer was released: it handles its objects again.
        ledger.orphans.forget(&name);
        self.notices.count(&active, true);
        let first = previous.is_none();
        ledger.insert(Entry::loaded(origin.clone(), hash.clone(), active.clone()));
        drop(ledger);
        if first {
            self.resume(&origin, &hash, &active);
        } else if let Some(previous) = previous.filter(|p| p.name() == name)
            && active.grant.rollout.is_some()
            && self.rollouts().stable(&name).is_none()
        {
            // No controller ran the version it replaces (a standby that runs none): that
            // version is the stable one a rollout starts from when this replica takes over.
            self.rollouts().set_stable(&previous);
        }
        self.source.judged(&origin, &Self::loaded_verdict(&active));
        self.notices.loaded(active);
    }

    /// At an item's first load here (a host started afresh, a failover), takes up the rollout
    /// its source kept, if any: the version it rolls out from is judged like any content and,
    /// admitted, reconciles the keys outside the share while `active` walks on from the step
    /// the rollout stood at. A version that cannot be admitted leaves `active` alone.
    fn resume(&self, origin: &Origin, hash: &str, active: &ActiveGuest) {
        if self.rollouts().stable(active.name()).is_some() {
            return;
        }
        let Some(Resume { from, status }) = self.source.resumes(origin, hash) else {
            return;
        };
        // Named by a status, not by a spec the host admitted before: it runs only where the
        // spec's version could (same name, same watches and finalizer, so no finalizer or kind
        // the spec's version was not admitted with) and its ServiceAccount review passes.
        let admitted = self.validate(origin, &from.bytes).and_then(|stable| {
            self.reviews.check(origin.name(), &stable)?;
            Ok(stable)
        });
        match admitted {
            Ok(stable)
                if stable.name() != active.name()
                    || !stable.loaded.manifest.watches_like(&active.loaded.manifest) =>
            {
                tracing::warn!(file = %origin.name(), guest = %active.name(), other = %stable.name(),
                    "the version the rollout rolls out from names another guest or watches other kinds or a finalizer; the rollout is not taken up and the new version takes every key");
            }
            Ok(mut stable) => {
                stable.signed_by = from.signed_by;
                match &status {
                    Some(status) => {
                        tracing::info!(file = %origin.name(), guest = %active.name(), from = %from.hash,
                            step = status.step, phase = status.phase.as_str(), "taking up the rollout the source kept");
                    }
                    None => {
                        tracing::info!(file = %origin.name(), guest = %active.name(), from = %from.hash,
                            "the version that served before the item changed is the stable one; the new one is rolled out from it");
                    }
                }
                self.rollouts().resume(&Arc::new(stable), active, status);
            }
            Err(e) => {
                tracing::warn!(file = %origin.name(), guest = %active.name(),
                    "the version the rollout rolled out from cannot run here ({e}); the new version takes every key");
            }
        }
    }

    fn loaded_verdict(active: &ActiveGuest) -> Verdict {
        Verdict::Loaded {
            guest: active.name().to_owned(),
            hash: active.loaded.hash.clone(),
        }
    }

    fn validate(&self, origin: &Origin, bytes: &[u8]) -> Result<ActiveGuest, RefusalError> {
        let file = std::path::Path::new(origin.name());
        let loaded = self.runtime.load(bytes, file)?;
        Ok(ActiveGuest::admit(origin, loaded, &self.config())?)
    }

    /// Records `err` as the verdict on this content of `origin`; `previous` stays active.
    fn refuse(
        &self,
        origin: &Origin,
        hash: String,
        previous: Option<Arc<ActiveGuest>>,
        err: &RefusalError,
    ) {
        self.notices
            .refused(origin.name(), previous.as_deref(), err);
        let verdict = Verdict::Refused {
            cause: err.cause(),
            message: err.to_string(),
            kept: previous
                .as_ref()
                .map(|p| (p.name().to_owned(), p.loaded.hash.clone())),
        };
        let entry = Entry::refused(origin.clone(), hash, err, previous);
        self.ledger.lock().insert(entry);
        self.source.judged(origin, &verdict);
    }

    /// The active version of `origin` under the current configuration: unchanged, reloaded
    /// with its new grant (or name), or, when its grant no longer covers it, unloaded
    /// ([`Revoked::Unload`]: the configuration revoked it) or kept while the change is refused
    /// ([`Revoked::KeepLastGood`]: the item's own new grant failed).
    fn regrant(&self, origin: &Origin, active: &Arc<ActiveGuest>, revoked: Revoked) {
        let judged = active
            .regrant(origin, &self.config())
            .map_err(RefusalError::from)
            .and_then(|new| {
                // Reviewed again only when the account or its reads changed.
                let (was, is) = (&active.grant, &new.grant);
                if was.service_account != is.service_account || was.read != is.read {
                    self.reviews.check(origin.name(), &new)?;
                }
                // A guest switched from shadow to active mode takes up its finalizer now.
                let conflict = finalizer_conflict(&self.ledger.lock(), origin.name(), &new);
                match conflict {
                    None => {}
                    Some(Finalizer::Refused(err)) => return Err(err),
                    Some(Finalizer::Evict(holder, err)) => {
                        tracing::warn!(file = %holder.item, guest = %holder.guest, "{err}");
                        self.stop(&holder.item, false);
                        self.refuse(&holder.origin, holder.hash, None, &err);
                    }
                }
                Ok(new)
            });
        match judged {
            Ok(new) => {
                let new = Arc::new(new);
                let same = new.grant == active.grant && new.name() == active.name();
                if !same && new.name() != active.name() {
                    self.notices.unloaded(active);
                    self.notices.count(&new, true);
                }
                if !same {
                    tracing::info!(file = %origin.name(), guest = %new.name(), mode = ?new.grant.mode,
                        "guest reloaded with its new grant");
                }
                if let Some(entry) = self.ledger.lock().entries.get_mut(origin.name()) {
                    // Reconfigured, the entry may describe a newer content refused earlier,
                    // which stays its verdict; changed, the entry is this version now.
                    if let Revoked::KeepLastGood = revoked {
                        entry.origin = origin.clone();
                        entry.state = FileState::Loaded;
                    }
                    // The same grant and name: the running version stays the one controllers hold.
                    if !same {
                        entry.active = Some(new.clone());
                    }
                }
                self.source.judged(origin, &Self::loaded_verdict(&new));
                if !same {
                    self.notices.loaded(new);
                }
            }
            Err(err) => {
                let hash = self.ledger.lock().judged(origin.name()).map(str::to_owned);
                let hash = hash.unwrap_or_default();
                match revoked {
                    // A revoked grant must take effect: the guest stops now.
                    Revoked::Unload => {
                        self.unload(origin.name());
                        self.refuse(origin, hash, None, &err);
                    }
                    Revoked::KeepLastGood => {
                        self.refuse(origin, hash, Some(active.clone()), &err);
                    }
                }
            }
        }
    }

    fn unload(&self, name: &str) {
        self.stop(name, true);
    }

    /// Unloads item `name`; its finalizer is left to the host's `finalizerPolicy` when
    /// `orphaned`, or kept where it is (the operator's guest that evicted it takes it over).
    fn stop(&self, name: &str, orphaned: bool) {
        let Some(entry) = self.ledger.lock().entries.remove(name) else {
            return;
        };
        if let Some(active) = entry.active {
            tracing::info!(file = name, guest = %active.name(), "guest unloaded");
            if orphaned {
                let policy = self.config().finalizer_policy.on_unload;
                self.ledger
                    .lock()
                    .orphans
                    .record(&entry.origin, &active, policy);
            }
            if active.loaded.manifest.finalizer.is_some() {
                self.finalizer_freed.store(true, Ordering::Relaxed);
            }
            self.notices.unloaded(&active);
        }
        self.source.judged(&entry.origin, &Verdict::Unloaded);
    }
}

/// Who holds the finalizer `guest` declares, and what follows: the newcomer refused
/// ([`Finalizer::Refused`]), or, when the newcomer is the operator's and the holder a tenant's,
/// the holder evicted ([`Finalizer::Evict`]): a tenant's guest never takes a finalizer from,
/// blocks or unloads an operator's.
fn finalizer_conflict(ledger: &Ledger, name: &str, guest: &ActiveGuest) -> Option<Finalizer> {
    let holder = ledger.finalizer_holder(name, guest)?;
    let manifest = &guest.loaded.manifest;
    let finalizer = manifest.finalizer.clone().unwrap_or_default();
    let kind = manifest.primary.to_string();
    if holder.tenant && guest.tenant().is_none() {
        let err = RefusalError::FinalizerReserved {
            file: holder.item.clone(),
            finalizer,
            kind,
        };
        return Some(Finalizer::Evict(holder, err));
    }
    if !holder.tenant && guest.tenant().is_some() {
        return Some(Finalizer::Refused(RefusalError::FinalizerReserved {
            file: name.to_owned(),
            finalizer,
            kind,
        }));
    }
    // A tenant's Reconciler is told that the finalizer is taken, not by whom: the holder is
    // another namespace's or the administrator's.
    let (holder, other) = if guest.tenant().is_some() {
        (
            "another guest of this host".to_owned(),
            "its item is not shown to a tenant".to_owned(),
        )
    } else {
        (holder.guest, holder.item)
    };
    Some(Finalizer::Refused(RefusalError::FinalizerConflict {
        file: name.to_owned(),
        finalizer,
        kind,
        holder,
        other,
    }))
}

/// What a finalizer held by another guest does to a guest being loaded.
enum Finalizer {
    Refused(RefusalError),
    /// The holder (a tenant's guest) stops and is refused; the operator's guest loads.
    Evict(Holder, RefusalError),
}

/// What a grant that no longer covers a running version does to it.
#[derive(Debug, Clone, Copy)]
enum Revoked {
    /// The host configuration changed: the guest stops.
    Unload,
    /// The item's own grant changed (a `Reconciler`'s spec): the change is refused and the
    /// version admitted before keeps running.
    KeepLastGood,
}

/// Why a guest set stopped following its source.
#[derive(Debug, thiserror::Error)]
pub enum FollowError {
    #[error(transparent)]
    Source(#[from] SourceError),
    #[error("judging the guests panicked: {0}")]
    Panicked(#[from] tokio::task::JoinError),
}

/// A new configuration whose backends differ from the running one's: refused whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "backends: differ from the running configuration; backends change only with a restart, so nothing of the new configuration was applied"
)]
pub struct BackendsChanged;
