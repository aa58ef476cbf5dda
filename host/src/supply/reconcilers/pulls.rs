//! What the source knows of each `Reconciler` object: the spec it last saw, its module's pull
//! (memoised per module reference and pull Secret, failures retried with a backoff) and the
//! guest set's latest verdict, which the status writer turns into the object's status.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::spec::{Spec, SpecError};
use super::trust::{Scope, Trust};
use crate::cluster::validation;
use crate::config::HostConfig;
use crate::oci::{AllowedRegistry, Auth, DockerConfig, ModuleRef, PullError, Puller};
use crate::supply::guest_set::{Artefact, Origin, SourceError, Verdict};

/// The longest one pull (credentials, manifest, config and layer) may take before it is
/// abandoned and retried with the backoff: a registry that answers a byte at a time holds up
/// its own Reconciler for this long, and nothing else.
pub(super) const PULL_DEADLINE: Duration = Duration::from_mins(2);
/// The first retry of a failed pull; doubles up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_secs(5);
const MAX_RETRY: Duration = Duration::from_mins(5);
/// The Secret type a pull Secret must have (the imagePullSecret format).
const DOCKER_CONFIG_JSON: &str = "kubernetes.io/dockerconfigjson";

pub(super) struct Records {
    puller: Arc<Puller>,
    client: kube::Client,
    /// Where pull Secrets are read: the host's namespace.
    namespace: String,
    /// The only Secrets a Reconciler may name (`reconcilers.pullSecrets`).
    allowed_secrets: BTreeSet<String>,
    /// The only registries a Reconciler's module may come from (`reconcilers.allow.registries`).
    allowed_registries: Vec<AllowedRegistry>,
    /// Where refused pulls are counted, by reason.
    metrics: crate::metrics::Metrics,
    /// Whose signatures each scope's modules must carry.
    trust: Arc<Trust>,
    pub objects: BTreeMap<String, Record>,
    /// Objects whose signing policy a reload changed: left out of the next listing once, so
    /// what runs under the old keys stops and is pulled and judged afresh under the new.
    restart: BTreeSet<String>,
}

/// Why the host does not run an object at its generation.
#[derive(Debug, thiserror::Error)]
pub(super) enum Unrunnable {
    /// Its spec cannot run.
    #[error(transparent)]
    Invalid(SpecError),
    /// A tenant rule holds it back (`Record::held` says why).
    #[error("held back by its namespace's tenant rule")]
    Held,
    /// Not read yet (a record just made).
    #[error("not read yet")]
    Unread,
}

/// One object, as the source last saw it.
pub(super) struct Record {
    pub generation: i64,
    /// Its spec at `generation`, or why the host does not run it.
    pub spec: Result<Spec, Unrunnable>,
    /// The item as it last went to the guest set with a spec that could run.
    last_origin: Option<Origin>,
    /// The spec of `last_origin`: what a tenant's kept version is judged by while a newer
    /// spec cannot run.
    last_spec: Option<Spec>,
    pub pull: Pull,
    /// The guest set's latest verdict and the generation it judged.
    pub verdict: Option<(i64, Verdict)>,
    /// The version last loaded, so the status names what runs by the digest a user pushed
    /// (and the key that signed it), also while a newer spec is refused.
    loaded: Option<LoadedVersion>,
    /// The versions loaded before it, the latest first (at most [`PREVIOUS`]): a rollout
    /// (`spec.rollout`) keeps one running beside the new one, or instead of it after a
    /// rollback or a third version, and the status names it by its digest.
    previous: std::collections::VecDeque<LoadedVersion>,
    /// Why the host holds the object back without pulling it (a namespaced Reconciler no
    /// tenant rule selects, or one beyond its namespace's quota): the reason and message.
    pub held: Option<(&'static str, String)>,
    /// Whose signatures its module must carry now (its namespace's rule may change).
    scope: Scope,
    /// The tenant rule that admitted it (by index), none for a `ClusterReconciler`: whose
    /// `verify` (its own, or the host's it inherits) a reload may change.
    rule: Option<usize>,
    /// A rollout its status records, to take up at its first load here (`super::resume`).
    pub resuming: Option<Resuming>,
}

impl Record {
    /// Whether it is held back because no tenant rule of this host selects its namespace.
    pub(super) fn unserved(&self) -> bool {
        matches!(self.held, Some(("NoTenantRule", _)))
    }

    /// Whether a version of it runs (or is being loaded): its spec could run when last seen
    /// valid, and nothing held it back since.
    pub(super) fn runs(&self) -> bool {
        self.last_origin.is_some()
    }

    /// The tenant rule that admitted it (by index), none for a `ClusterReconciler`.
    pub(super) fn rule(&self) -> Option<usize> {
        self.rule
    }

    /// What its module is pulled by under `spec`.
    fn pull_key(&self, spec: &Spec) -> PullKey {
        (spec.module.clone(), spec.pull_secret.clone(), self.scope)
    }

    /// The pull of its current spec: none while the spec cannot run or is not pulled yet.
    pub(super) fn current_pull(&self) -> Option<&Pull> {
        let spec = self.spec.as_ref().ok()?;
        let key = match &self.pull {
            Pull::Pending => return None,
            Pull::Pulled { key, .. } | Pull::Failed { key, .. } | Pull::InFlight { key } => key,
        };
        (*key == self.pull_key(spec)).then_some(&self.pull)
    }
}

/// A rollout an object's status records, to take up at the object's first load here
/// (`super::resume`).
pub(super) struct Resuming {
    /// As the status records it, versions named by their digests; none for a rollout that
    /// has not begun (the spec changed while no host ran), which begins from `module`.
    pub status: Option<crate::supply::rollout::RolloutStatus>,
    /// The version it rolls out from, pinned by its digest.
    pub module: ModuleRef,
    /// Its pull.
    pub pull: Pull,
}

/// A version of an object's module that the guest set loaded.
/// Versions loaded before the last kept per object, for their digests.
const PREVIOUS: usize = 8;

pub(super) struct LoadedVersion {
    pub hash: String,
    pub digest: String,
    pub signed_by: Option<String>,
    /// The spec it was loaded with: what a tenant rule judges while a newer spec is refused.
    pub spec: Option<Spec>,
    /// The module it was pulled as (its repository is what `status.rollout.fromModule` names).
    pub module: ModuleRef,
}

/// Where a module came from, and whose signatures it needed: its reference, pull Secret and
/// trust scope. Pulled (and its signature checked) again only when one of them changes.
type PullKey = (ModuleRef, Option<String>, Scope);

/// What one pull needs, taken from the records under their lock.
struct PullPlan {
    key: PullKey,
    puller: Arc<Puller>,
    client: kube::Client,
    /// Where the pull Secret is read.
    namespace: String,
    /// The digest, content hash and signer of the last pull of the same key, if it succeeded.
    memo: Option<(String, String, Option<String>)>,
    trust: Arc<Trust>,
}

pub(super) enum Pull {
    /// Not pulled yet for this spec.
    Pending,
    /// Being pulled now, in a task of its own (never under a lock the guest set needs).
    InFlight { key: PullKey },
    /// Pulled into the module cache: its manifest digest and content hash (the bytes are
    /// read from the cache when the guest set needs them).
    Pulled {
        key: PullKey,
        digest: String,
        hash: String,
        from_cache: bool,
        /// The trusted key that signed the digest, when signatures are required.
        signed_by: Option<String>,
    },
    Failed {
        key: PullKey,
        /// The reason word of the object's conditions (`PullFailed`, `DigestMismatch`...).
        cause: &'static str,
        message: String,
        attempts: u32,
        retry_at: Instant,
    },
}

impl Pull {
    /// `key` pulled as `module`, its content hash `hash`.
    fn pulled(key: PullKey, module: crate::oci::Pulled, hash: String) -> Self {
        Self::Pulled {
            key,
            digest: module.digest,
            hash,
            from_cache: module.from_cache,
            signed_by: module.signed_by,
        }
    }
}

impl Records {
    pub(super) fn new(
        puller: Puller,
        client: kube::Client,
        namespace: String,
        allowed_secrets: BTreeSet<String>,
        allowed_registries: Vec<AllowedRegistry>,
        metrics: crate::metrics::Metrics,
        trust: Trust,
    ) -> Self {
        Self {
            puller: Arc::new(puller),
            client,
            namespace,
            allowed_secrets,
            allowed_registries,
            metrics,
            trust: Arc::new(trust),
            objects: BTreeMap::new(),
            restart: BTreeSet::new(),
        }
    }

    /// Takes a reloaded configuration's registries, pull Secrets and signing policies
    /// (`before` is the configuration they came from). An object whose policy changed is
    /// pulled again, its signatures checked under the new one, after it has stopped.
    pub(super) fn reconfigure(&mut self, before: &HostConfig, config: &HostConfig) {
        let settings = config.reconcilers.as_ref();
        self.allowed_secrets = settings.map(|r| r.pull_secrets.clone()).unwrap_or_default();
        self.allowed_registries = settings
            .map(|r| r.allow.registries.clone())
            .unwrap_or_default();
        self.trust = Arc::new(Trust::of(config));
        for (name, record) in &mut self.objects {
            if verify_of(before, record.rule) != verify_of(config, record.rule) {
                record.pull = Pull::Pending;
                self.restart.insert(name.clone());
            }
        }
    }

    /// The objects to leave out of this listing (see `restart`); taken once.
    pub(super) fn take_restarts(&mut self) -> BTreeSet<String> {
        std::mem::take(&mut self.restart)
    }

    /// The manifest digests Reconcilers use now: pulled for their current spec, or loaded
    /// (the last good version, while a newer one is refused). The module cache keeps these.
    fn in_use(&self) -> BTreeSet<String> {
        let mut digests = BTreeSet::new();
        for record in self.objects.values() {
            if let Pull::Pulled { digest, .. } = &record.pull {
                digests.insert(digest.clone());
            }
            if let Some(loaded) = &record.loaded {
                digests.insert(loaded.digest.clone());
            }
        }
        digests
    }

    /// Notes object `name` at `generation` with a spec that can run, listed as `origin`, its
    /// module checked against `scope`'s signatures.
    pub(super) fn observe(
        &mut self,
        name: &str,
        generation: i64,
        spec: Spec,
        origin: &Origin,
        rule: Option<usize>,
    ) {
        let scope = rule.map_or(Scope::Host, |index| self.trust.scope(index));
        let record = self.record(name, generation);
        record.spec = Ok(spec);
        record.scope = scope;
        record.rule = rule;
        record.held = None;
        record.last_origin = Some(origin.clone());
        record.last_spec = record.spec.as_ref().ok().cloned();
    }

    /// Notes object `name` at `generation` as held back (`reason`, `message`): never pulled,
    /// and whatever of it ran is unloaded (its item is no longer listed).
    pub(super) fn observe_held(
        &mut self,
        name: &str,
        generation: i64,
        reason: &'static str,
        message: String,
    ) {
        let record = self.record(name, generation);
        record.spec = Err(Unrunnable::Held);
        record.held = Some((reason, message));
        record.last_origin = None;
        record.last_spec = None;
    }

    /// The spec of the version of object `name` that runs, when it is not `current`: a newer
    /// spec's pull or grant failed and the last good version runs on.
    pub(super) fn running_spec(&self, name: &str, current: &Spec) -> Option<Spec> {
        let record = self.objects.get(name)?;
        record.last_origin.as_ref()?;
        let spec = record.loaded.as_ref()?.spec.as_ref()?;
        (spec != current).then(|| spec.clone())
    }

    /// Whether object `name` at `generation` was held back (its status says why).
    pub(super) fn held_at(&self, name: &str, generation: i64) -> bool {
        self.objects
            .get(name)
            .is_some_and(|r| r.generation == generation && r.held.is_some())
    }

    /// What object `name` last ran as, while its spec cannot run: the item, its spec and the
    /// tenant rule (by index) that admitted it.
    pub(super) fn kept(&self, name: &str) -> Option<(Origin, Spec, Option<usize>)> {
        let record = self.objects.get(name)?;
        Some((
            record.last_origin.clone()?,
            record.last_spec.clone()?,
            record.rule,
        ))
    }

    /// Notes object `name` at `generation` with a spec the host cannot run; the item as it
    /// last ran, which stays.
    pub(super) fn observe_invalid(
        &mut self,
        name: &str,
        generation: i64,
        why: SpecError,
    ) -> Option<Origin> {
        let record = self.record(name, generation);
        record.spec = Err(Unrunnable::Invalid(why));
        record.held = None;
        record.last_origin.clone()
    }

    fn record(&mut self, name: &str, generation: i64) -> &mut Record {
        let record = self.objects.entry(name.to_owned()).or_insert(Record {
            generation,
            spec: Err(Unrunnable::Unread),
            last_origin: None,
            last_spec: None,
            pull: Pull::Pending,
            verdict: None,
            loaded: None,
            previous: std::collections::VecDeque::new(),
            held: None,
            scope: Scope::Host,
            rule: None,
            resuming: None,
        });
        record.generation = generation;
        record
    }

    /// Forgets the objects not in `names` (deleted).
    pub(super) fn retain(&mut self, names: &BTreeSet<String>) {
        self.objects.retain(|name, _| names.contains(name));
    }

    pub(super) fn judged(&mut self, name: &str, generation: i64, verdict: &Verdict) {
        if let Some(record) = self.objects.get_mut(name) {
            // A verdict on an older generation (a reconfiguration judging the version kept
            // running) never hides the newer one's.
            if record
                .verdict
                .as_ref()
                .is_none_or(|(g, _)| *g <= generation)
            {
                record.verdict = Some((generation, verdict.clone()));
            }
            // A version loaded from the current pull: its digest is what runs now.
            if let Verdict::Loaded { hash, .. } = verdict
                && let Some(Pull::Pulled {
                    hash: pulled,
                    digest,
                    signed_by,
                    ..
                }) = record.current_pull()
                && pulled == hash
            {
                let spec = record.spec.as_ref().ok().cloned();
                let Some(module) = spec.as_ref().map(|s| s.module.clone()) else {
                    return;
                };
                let now = LoadedVersion {
                    hash: hash.clone(),
                    digest: digest.clone(),
                    signed_by: signed_by.clone(),
                    spec,
                    module,
                };
                // Loaded: a rollout its status kept is taken up (or not) by now.
                record.resuming = None;
                if let Some(before) = record.loaded.replace(now)
                    && before.hash != *hash
                {
                    record.remember(before);
                }
            }
        }
    }

    /// The manifest digest of object `name`'s version with content `hash`, if it was loaded
    /// from a pull of this host.
    pub(super) fn digest_of(&self, name: &str, hash: &str) -> Option<&str> {
        Some(self.version_of(name, hash)?.digest.as_str())
    }

    /// The trusted key that signed object `name`'s version with content `hash`, if one did.
    pub(super) fn signer_of(&self, name: &str, hash: &str) -> Option<&str> {
        self.version_of(name, hash)?.signed_by.as_deref()
    }

    /// The content hash of object `name`'s version with manifest digest `digest` (the last
    /// loaded or one before, or the module pulled for its spec).
    pub(super) fn hash_of(&self, name: &str, digest: &str) -> Option<&str> {
        let record = self.objects.get(name)?;
        let known = record
            .loaded
            .iter()
            .chain(&record.previous)
            .find(|v| v.digest == digest || v.hash == digest)
            .map(|v| v.hash.as_str());
        known.or_else(|| match record.current_pull()? {
            Pull::Pulled {
                digest: pulled,
                hash,
                ..
            } if pulled == digest => Some(hash.as_str()),
            _ => None,
        })
    }

    /// The module of object `name`'s version with content `hash`, pinned by its digest.
    pub(super) fn module_of(&self, name: &str, hash: &str) -> Option<String> {
        let version = self.version_of(name, hash)?;
        let reference = version.module.reference();
        Some(format!(
            "oci://{}/{}@{}",
            reference.registry(),
            reference.repository(),
            version.digest
        ))
    }

    /// Object `name`'s version with content `hash`: the last loaded or the one before.
    fn version_of(&self, name: &str, hash: &str) -> Option<&LoadedVersion> {
        let record = self.objects.get(name)?;
        record
            .loaded
            .iter()
            .chain(&record.previous)
            .find(|v| v.hash == hash)
    }

    /// The content hash of object `name`'s module, if pulled for its current spec.
    pub(super) fn known_hash(&self, name: &str) -> Option<String> {
        match self.objects.get(name)?.current_pull()? {
            Pull::Pulled { hash, .. } => Some(hash.clone()),
            _ => None,
        }
    }

    /// When the earliest failed pull of a current spec (or of the version a recorded rollout
    /// rolls out from) is due again.
    pub(super) fn next_retry(&self) -> Option<Instant> {
        self.objects
            .values()
            .flat_map(|r| {
                let resuming = r
                    .resuming
                    .as_ref()
                    .filter(|_| r.spec.is_ok())
                    .map(|r| &r.pull);
                [r.current_pull(), resuming]
            })
            .filter_map(|pull| match pull? {
                Pull::Failed { retry_at, .. } => Some(*retry_at),
                _ => None,
            })
            .min()
    }

    /// The module of object `name` for `origin`: the memoised pull when its reference and
    /// Secret are unchanged. Otherwise a pull starts in a task of its own and this answers
    /// that the module is not there yet; `on_end` is called when the pull ends (the source
    /// then rescans). The caller (the guest set, under the lock that revocation, identity
    /// rechecks and the guest directory also need) never waits for a registry: a registry
    /// that trickles holds up only its own Reconciler, for at most [`PULL_DEADLINE`].
    pub(super) fn read(
        records: &Arc<Mutex<Self>>,
        name: &str,
        origin: &Origin,
        on_end: impl FnOnce() + Clone + Send + 'static,
    ) -> Result<Artefact, SourceError> {
        let unreadable = |why: String| SourceError::Unreadable {
            what: origin.name().to_owned(),
            error: why.into(),
        };
        let PullPlan {
            key,
            puller,
            client,
            namespace,
            memo,
            trust,
        } = records.lock().plan(name, &unreadable)?;
        // Pulled before: the bytes are in the module cache (verified as they are read, and
        // their signatures judged again under this record's scope), not kept in memory; a
        // cache emptied since is pulled again.
        if let Some((digest, hash, signed_by)) = memo
            && let Ok(Some(bytes)) = puller.cached(&key.0, &digest, trust.policy(key.2))
        {
            // At a first load, the version a rollout in the status rolls out from is pulled
            // first, so the rollout is taken up rather than skipped.
            Self::resume_ready(records, name, &digest, &unreadable, on_end.clone())?;
            return Ok(Artefact {
                origin: origin.clone(),
                bytes,
                hash,
                signed_by,
            });
        }
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| unreadable(format!("no runtime to pull in: {e}")))?;
        if let Some(record) = records.lock().objects.get_mut(name) {
            record.pull = Pull::InFlight { key: key.clone() };
        }
        let (records, name) = (records.clone(), name.to_owned());
        let message = format!("pulling {} now", key.0);
        handle.spawn(async move {
            let pulled = pull(&puller, &client, &namespace, &key, trust.policy(key.2));
            let outcome = tokio::time::timeout(PULL_DEADLINE, pulled)
                .await
                .unwrap_or_else(|_| {
                    Err((
                        "PullFailed",
                        format!(
                            "{}: the pull took longer than {}s (the registry answers too slowly, or sends too much); retrying with a backoff",
                            key.0,
                            PULL_DEADLINE.as_secs()
                        ),
                    ))
                });
            Self::pull_ended(&records, &name, key, outcome);
            on_end();
        });
        Err(unreadable(message))
    }

    /// What a pull of object `name` needs, taken under the lock; or why it does not start
    /// (`unreadable` says so): the object is gone, cannot run, may not be pulled, or failed
    /// and waits for its retry.
    fn plan(
        &mut self,
        name: &str,
        unreadable: &dyn Fn(String) -> SourceError,
    ) -> Result<PullPlan, SourceError> {
        let Some(record) = self.objects.get_mut(name) else {
            return Err(unreadable("the object is gone".into()));
        };
        let Ok(spec) = &record.spec else {
            return Err(unreadable("its spec cannot run".into()));
        };
        let key = record.pull_key(spec);
        // Before any connection, the cache included: a module of another registry is not
        // this host's to fetch, nor to run from what another Reconciler pulled.
        if !self.allowed_registries.iter().any(|r| r.covers(&key.0)) {
            let message = registry_not_allowed(&key.0, &self.allowed_registries);
            record.failed(key, "RegistryNotAllowed", message.clone());
            return Err(unreadable(message));
        }
        let mut memo = None;
        match record.current_pull() {
            Some(Pull::Pulled {
                digest,
                hash,
                signed_by,
                ..
            }) => {
                memo = Some((digest.clone(), hash.clone(), signed_by.clone()));
            }
            Some(Pull::Failed {
                message, retry_at, ..
            }) if Instant::now() < *retry_at => {
                return Err(unreadable(message.clone()));
            }
            Some(Pull::InFlight { .. }) => {
                return Err(unreadable(format!("pulling {} now", key.0)));
            }
            _ => {}
        }
        if let Some(message) = secret_refused(&key, &self.allowed_secrets) {
            record.failed(key, "PullSecretInvalid", message.clone());
            return Err(unreadable(message));
        }
        let (puller, client) = (self.puller.clone(), self.client.clone());
        puller.set_in_use(self.in_use());
        let trust = self.trust.clone();
        Ok(PullPlan {
            key,
            puller,
            client,
            namespace: self.namespace.clone(),
            memo,
            trust,
        })
    }

    /// Before object `name`'s module `digest` loads where it does not run yet: whether the
    /// version a rollout in its status rolls out from is there. Ok when it is, or when there is
    /// nothing to wait for (no such rollout, or one to another version). Otherwise its pull
    /// starts (under the same registries, pull Secret and signatures as the spec's module), or
    /// waits for its backoff after a failure, and this answers that the module is not there yet:
    /// the spec's version does not run without it. `on_end` is called when the pull ends.
    pub(super) fn resume_ready(
        records: &Arc<Mutex<Self>>,
        name: &str,
        digest: &str,
        unreadable: &dyn Fn(String) -> SourceError,
        on_end: impl FnOnce() + Send + 'static,
    ) -> Result<(), SourceError> {
        let mut this = records.lock();
        let (allowed_registries, allowed_secrets) = (
            this.allowed_registries.clone(),
            this.allowed_secrets.clone(),
        );
        let (puller, client, namespace, trust) = (
            this.puller.clone(),
            this.client.clone(),
            this.namespace.clone(),
            this.trust.clone(),
        );
        let Some(record) = this.objects.get_mut(name) else {
            return Ok(());
        };
        let Ok(spec) = &record.spec else {
            record.resuming = None;
            return Ok(());
        };
        // A version of the object runs here already: this process holds its rollouts.
        let runs = matches!(
            &record.verdict,
            Some((
                _,
                Verdict::Loaded { .. } | Verdict::Refused { kept: Some(_), .. }
            ))
        );
        let key = (
            record.resuming.as_ref().map(|r| r.module.clone()),
            spec.pull_secret.clone(),
            record.scope,
        );
        let Some(resuming) = record.resuming.as_mut() else {
            return Ok(());
        };
        let other = match &resuming.status {
            Some(status) => status.to != digest,
            None => resuming.module.digest() == Some(digest),
        };
        if other || runs {
            return Ok(());
        }
        let (Some(module), secret, scope) = key else {
            return Ok(());
        };
        let key: PullKey = (module, secret, scope);
        let waiting = |why: &str| {
            unreadable(format!(
                "{why} {}, the version the rollout in its status rolls out from; the spec's version waits for it (a change of the spec starts over)",
                key.0
            ))
        };
        // Refused or failed: the spec's version does not run without it (a rollout is not
        // skipped by a restart); a failed pull is tried again after its backoff.
        let refused = match &resuming.pull {
            Pull::Pulled { .. } => return Ok(()),
            Pull::InFlight { .. } => return Err(waiting("pulling")),
            Pull::Failed {
                message, retry_at, ..
            } if Instant::now() < *retry_at => Some(message.clone()),
            Pull::Failed { .. } | Pull::Pending => {
                if allowed_registries.iter().any(|r| r.covers(&key.0)) {
                    secret_refused(&key, &allowed_secrets)
                } else {
                    Some(registry_not_allowed(&key.0, &allowed_registries))
                }
            }
        };
        if let Some(why) = refused {
            return Err(waiting(&format!("cannot pull ({why})")));
        }
        let handle = tokio::runtime::Handle::try_current()
            .map_err(|e| unreadable(format!("no runtime to pull in: {e}")))?;
        resuming.pull = Pull::InFlight { key: key.clone() };
        drop(this);
        let message = format!(
            "pulling {}, the version the rollout in its status rolls out from",
            key.0
        );
        let plan = PullPlan {
            key,
            puller,
            client,
            namespace,
            memo: None,
            trust,
        };
        handle.spawn(Self::pull_resumed(
            records.clone(),
            name.to_owned(),
            plan,
            on_end,
        ));
        Err(unreadable(message))
    }

    /// Pulls the version object `name`'s rollout rolls out from, and records how it ended.
    async fn pull_resumed(
        records: Arc<Mutex<Self>>,
        name: String,
        plan: PullPlan,
        on_end: impl FnOnce() + Send + 'static,
    ) {
        let PullPlan {
            key,
            puller,
            client,
            namespace,
            trust,
            ..
        } = plan;
        let fetching = pull(&puller, &client, &namespace, &key, trust.policy(key.2));
        let outcome = tokio::time::timeout(PULL_DEADLINE, fetching)
            .await
            .unwrap_or_else(|_| Err(("PullFailed", "the pull took too long".to_owned())));
        let mut this = records.lock();
        if let Some(record) = this.objects.get_mut(&name)
            && record
                .resuming
                .as_ref()
                .is_some_and(|r| matches!(&r.pull, Pull::InFlight { key: k } if *k == key))
        {
            let pull = match outcome {
                Ok((module, hash)) => {
                    tracing::info!(reconciler = name, module = %key.0, "pulled the version the rollout in the status rolls out from");
                    record.remember(LoadedVersion {
                        hash: hash.clone(),
                        digest: module.digest.clone(),
                        signed_by: module.signed_by.clone(),
                        spec: None,
                        module: key.0.clone(),
                    });
                    Pull::pulled(key, module, hash)
                }
                Err((cause, message)) => {
                    let attempts = match record.resuming.as_ref().map(|r| &r.pull) {
                        Some(Pull::Failed { attempts, .. }) => attempts + 1,
                        _ => 1,
                    };
                    tracing::warn!(reconciler = name, module = %key.0, cause, attempts, "cannot pull the version the rollout in the status rolls out from: {message}");
                    Pull::Failed {
                        key,
                        cause,
                        message,
                        attempts,
                        retry_at: Instant::now() + backoff(attempts),
                    }
                }
            };
            if let Some(resuming) = record.resuming.as_mut() {
                resuming.pull = pull;
            }
        }
        drop(this);
        on_end();
    }

    /// The version object `name`'s rollout rolls out from, read from the module cache, with
    /// the rollout (by digests), once its module `hash` loads for the first time; taken once.
    pub(super) fn take_resume(
        records: &Mutex<Self>,
        name: &str,
        origin: &Origin,
        hash: &str,
    ) -> Option<(Artefact, Option<crate::supply::rollout::RolloutStatus>)> {
        let mut this = records.lock();
        let trust = this.trust.clone();
        let puller = this.puller.clone();
        let record = this.objects.get_mut(name)?;
        let to = match record.current_pull()? {
            Pull::Pulled { hash: current, .. } if current == hash => hash.to_owned(),
            _ => return None,
        };
        let resuming = record.resuming.take()?;
        let Pull::Pulled {
            key,
            digest,
            hash: from,
            signed_by,
            ..
        } = resuming.pull
        else {
            return None;
        };
        drop(this);
        let bytes = match puller.cached(&key.0, &digest, trust.policy(key.2)) {
            Ok(Some(bytes)) => bytes,
            Ok(None) => {
                tracing::warn!(reconciler = name, module = %key.0, "the version the rollout rolls out from left the module cache; the spec's version takes every key");
                return None;
            }
            Err(e) => {
                tracing::warn!(reconciler = name, module = %key.0, "cannot read the version the rollout rolls out from ({e}); the spec's version takes every key");
                return None;
            }
        };
        let status = resuming
            .status
            .map(|status| crate::supply::rollout::RolloutStatus {
                from: from.clone(),
                to,
                ..status
            });
        let artefact = Artefact {
            origin: origin.clone(),
            bytes,
            hash: from,
            signed_by,
        };
        Some((artefact, status))
    }

    /// Records how the pull of `key` for object `name` ended, unless its spec moved on.
    fn pull_ended(
        records: &Mutex<Self>,
        name: &str,
        key: PullKey,
        outcome: Result<(crate::oci::Pulled, String), (&'static str, String)>,
    ) {
        let mut this = records.lock();
        let Some(record) = this.objects.get_mut(name) else {
            return;
        };
        if !matches!(&record.pull, Pull::InFlight { key: k } if *k == key) {
            return;
        }
        match outcome {
            Ok((module, hash)) => {
                tracing::info!(reconciler = name, module = %key.0, digest = %module.digest,
                    from_cache = module.from_cache, "module pulled");
                record.pull = Pull::pulled(key, module, hash);
            }
            Err((cause, message)) => {
                tracing::error!(reconciler = name, module = %key.0, cause, "{message}");
                this.metrics.module_refused(cause);
                if let Some(record) = this.objects.get_mut(name) {
                    record.failed(key, cause, message);
                }
            }
        }
    }
}

/// Why `module` may not be pulled, and how to allow it.
/// The `verify` tenant rule `rule` (none: a `ClusterReconciler`) is held to in `config`: its
/// own, else the host's.
fn verify_of(config: &HostConfig, rule: Option<usize>) -> Option<&crate::config::VerifySettings> {
    let settings = config.reconcilers.as_ref()?;
    rule.and_then(|index| settings.tenants.get(index)?.verify.as_ref())
        .or(settings.verify.as_ref())
}

/// Why `key`'s pull Secret is not one the host may read for Reconcilers, if it is not.
fn secret_refused(key: &PullKey, secrets: &BTreeSet<String>) -> Option<String> {
    let secret = key.1.as_ref().filter(|s| !secrets.contains(*s))?;
    Some(format!(
        "spec.pullSecretRef: Secret {secret} is not one the host may read for Reconcilers (reconcilers.pullSecrets in the host configuration)"
    ))
}

fn registry_not_allowed(module: &ModuleRef, allowed: &[AllowedRegistry]) -> String {
    let listed = if allowed.is_empty() {
        "none is listed".to_owned()
    } else {
        let names: Vec<String> = allowed.iter().map(ToString::to_string).collect();
        format!("it lists {}", names.join(", "))
    };
    format!(
        "spec.module: registry {} (repository {}) is not one Reconcilers may pull from: reconcilers.allow.registries in the host configuration decides, and {listed}; add \"{}\" (or HOST[:PORT]/PATH for one repository prefix) to allow it",
        module.registry(),
        module.reference().repository(),
        module.registry()
    )
}

impl Record {
    /// Keeps `version` among the versions loaded before (the latest first).
    pub(super) fn remember(&mut self, version: LoadedVersion) {
        self.previous.retain(|v| v.hash != version.hash);
        self.previous.push_front(version);
        self.previous.truncate(PREVIOUS);
    }

    /// Records a failed pull of `key`, due again after a backoff that doubles per attempt.
    fn failed(&mut self, key: PullKey, cause: &'static str, message: String) {
        let attempts = match &self.pull {
            Pull::Failed {
                key: before,
                attempts,
                ..
            } if *before == key => attempts + 1,
            _ => 1,
        };
        self.pull = Pull::Failed {
            key,
            cause,
            message,
            attempts,
            retry_at: Instant::now() + backoff(attempts),
        };
    }
}

/// How long after its `attempts`th failure a pull is tried again: doubling from
/// [`FIRST_RETRY`] to [`MAX_RETRY`].
fn backoff(attempts: u32) -> Duration {
    FIRST_RETRY
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(MAX_RETRY)
}

/// Pulls `key`'s module with its Secret's credentials; the pull and the content hash, or the
/// cause word and the message.
async fn pull(
    puller: &Puller,
    client: &kube::Client,
    namespace: &str,
    (module, secret, _): &PullKey,
    trust: Option<&crate::oci::TrustPolicy>,
) -> Result<(crate::oci::Pulled, String), (&'static str, String)> {
    let auth = match secret {
        Some(secret) => credentials(client, namespace, secret, module).await?,
        None => Auth::Anonymous,
    };
    // A registry's error text is the registry's: bounded and escaped before it is kept,
    // logged and written to the object's status.
    let secret = secret.as_ref().map(|s| format!("{namespace}/{s}"));
    let who = crate::oci::Requester {
        auth: &auth,
        secret: secret.as_deref(),
        trust,
    };
    let fetched = puller
        .pull(module, who)
        .await
        .map_err(|e| (cause(&e), validation::message(&e.to_string())))?;
    let hash = crate::sandbox::runtime::content_hash(&fetched.bytes);
    Ok((fetched, hash))
}

/// The credentials for `module`'s registry in the dockerconfigjson Secret `name`.
async fn credentials(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    module: &ModuleRef,
) -> Result<Auth, (&'static str, String)> {
    let invalid = |why: String| {
        (
            "PullSecretInvalid",
            format!("spec.pullSecretRef: Secret {namespace}/{name} {why}"),
        )
    };
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let secret = match secrets.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(invalid("does not exist".into())),
        Err(e) => {
            return Err((
                "PullFailed",
                format!("cannot read Secret {namespace}/{name}: {e}"),
            ));
        }
    };
    if secret.type_.as_deref() != Some(DOCKER_CONFIG_JSON) {
        return Err(invalid(format!(
            "has type {}, not {DOCKER_CONFIG_JSON}",
            secret.type_.as_deref().unwrap_or("Opaque")
        )));
    }
    let document = secret
        .data
        .as_ref()
        .and_then(|d| d.get(".dockerconfigjson"))
        .ok_or_else(|| invalid("has no .dockerconfigjson key".into()))?;
    DockerConfig::parse(&document.0)
        .and_then(|config| config.auth_for(module.registry()))
        .map_err(|e| invalid(e.to_string()))
}

/// The reason word of a failed pull.
fn cause(e: &PullError) -> &'static str {
    match e {
        PullError::DigestMismatch { .. } => "DigestMismatch",
        PullError::TooLarge { .. } => "TooLarge",
        PullError::NotAWasmArtifact { .. } => "NotAComponent",
        PullError::Denied { .. } => "PullDenied",
        PullError::NotFound { .. } => "ModuleNotFound",
        PullError::CacheFull { .. } => "CacheFull",
        PullError::SignatureMissing { .. } => "SignatureMissing",
        PullError::SignatureInvalid { .. } => "SignatureInvalid",
        PullError::Unreachable { .. } | PullError::Registry { .. } | PullError::Cache(_) => {
            "PullFailed"
        }
    }
}
