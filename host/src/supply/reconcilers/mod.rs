//! Guests declared as objects: `ClusterReconciler` (`clusterreconcilers.reconciler.dev`,
//! cluster-scoped, the operator's) and `Reconciler` (`reconcilers.reconciler.dev`, namespaced,
//! a team's, in namespaces a tenant rule opens). `spec.module` names an `oci://` module,
//! `spec.grant` what it may do (bounded by the host's `reconcilers.allow`), `spec.pullSecretRef`
//! the credentials to pull it with. The host runs them when its configuration has a
//! `reconcilers:` section.
//!
//! [`Objects`] is a [`GuestSource`] beside the guest directory: the same guest set loads,
//! swaps, refuses (keeping the last good version) and unloads its items, so nothing of the
//! directory's state machine is written twice. What it adds is where the item lives:
//!
//! - the objects are followed with a kube-runtime reflector (its lists and watches sent once, a
//!   refusal's `Retry-After` waited out before the next: `crate::cluster::retry_after`, counted in
//!   `reconciler_watch_throttled_total`); each is an item named
//!   `reconciler/NAME` that carries its own grant ([`OriginKind::Reconciler`]), so a changed
//!   `spec.grant` is a changed item and a grant refused keeps the last good version;
//! - reading an item pulls its module (`pulls.rs`) into the content-addressed module cache
//!   (`crate::oci`), once per module reference and pull Secret: a tag is resolved to a digest
//!   then, and again only when the spec changes or the host restarts. A failed pull is retried
//!   with a backoff (5 s doubling to 5 min) while the last good version keeps running;
//! - what happened to each object (its pull, the guest set's verdict) is written to its
//!   `status` and told as events on it (`status.rs`), by one replica (the one that releases
//!   orphaned finalizers).
//!
//! Cost: a rescan lists the reflector's store and names each pulled module by its content hash
//! without reading it, so nothing already judged is read again; a module is read from the
//! module cache (and verified) only when the guest set loads it, and pulled only for a changed
//! module reference or Secret, on the guest set's blocking thread. No module bytes are kept in
//! memory beyond the compiled guest.

mod pulls;
mod resume;
pub(crate) mod spec;
mod status;
mod trust;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt as _, StreamExt};
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use parking_lot::Mutex;
use tokio::sync::Notify;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Namespace;

use crate::cluster::retry_after::{self, Hold, ServerBackoff};
use crate::config::HostConfig;
use crate::oci::{Endpoints, Puller};
use crate::supply::guest_set::{
    Artefact, Changes, GuestSource, Origin, OriginKind, SourceError, Tenant, Verdict,
};
use pulls::Records;
use spec::Spec;

pub(crate) use status::StatusWriter;

/// The `ClusterReconciler` and namespaced `Reconciler` objects of a cluster, as a source of
/// guests.
pub(crate) struct Objects {
    store: Store<DynamicObject>,
    client: kube::Client,
    /// The configuration as last applied (at start, then by each reload).
    config: Mutex<Arc<HostConfig>>,
    /// The namespaced kind, with the namespaces' labels that choose tenant rules; none while
    /// the configuration has no tenant rules and reports nothing about them (a reload that
    /// adds a rule starts following them).
    tenants: Mutex<Option<Tenants>>,
    shared: Arc<Shared>,
    /// Where people's asks about rollouts (`reconciler.dev/rollout` on an object) go.
    rollouts: Mutex<Arc<crate::supply::guest_set::Rollouts>>,
}

/// What choosing and bounding namespaced `Reconciler`s needs.
struct Tenants {
    store: Store<DynamicObject>,
    namespaces: Store<Namespace>,
    /// The configuration as last applied (rules, quotas, defaults): which objects are pulled
    /// at all. The guest set judges every grant against the same configuration.
    config: Arc<HostConfig>,
}

/// What the source, the status writer and the reflector share.
struct Shared {
    records: Arc<Mutex<Records>>,
    /// Something changed that a rescan or the status may need to see.
    changed: Notify,
    /// The status writer's own wake-up (verdicts and pulls), apart from rescans.
    status_changed: Notify,
    /// The namespaced objects, once the host follows them.
    namespaced: Mutex<Option<Store<DynamicObject>>>,
    /// This host, as `status.host` names it: `NAMESPACE/LEASE-NAME`.
    host: String,
    metrics: crate::metrics::Metrics,
}

impl Objects {
    /// Starts following the `Reconciler` objects with `client`; pulls through a [`Puller`] on
    /// `cache_dir` with the configuration's registry settings, reading pull Secrets from
    /// `namespace` (the host's) and naming itself `host` in the statuses it writes; pulls
    /// refused are counted in `metrics`. Returns the source and its status writer.
    pub(crate) fn start(
        client: kube::Client,
        config: &HostConfig,
        cache_dir: &Path,
        (namespace, host): (String, String),
        metrics: &crate::metrics::Metrics,
    ) -> (Self, StatusWriter) {
        let (watching, hold) = watch_client(&client, metrics, "ClusterReconciler");
        let api: Api<DynamicObject> = Api::all_with(watching, &spec::api_resource());
        let writer = reflector::store::Writer::new(spec::api_resource());
        let store = writer.as_reader();
        let mut watcher_config = watcher::Config::default();
        if let Some(selector) = config.reconcilers.as_ref().and_then(|r| r.selector.clone()) {
            watcher_config = watcher_config.labels(&selector);
        }
        let allowed = config
            .reconcilers
            .as_ref()
            .map(|r| r.allow.registries.clone())
            .unwrap_or_default();
        // A registry's redirects and token realms may lead only to registries the host allows.
        let endpoints = Endpoints::new(allowed.iter().map(|r| r.registry().to_owned()));
        let shared = Arc::new(Shared {
            records: Arc::new(Mutex::new(Records::new(
                Puller::new(&config.registries, cache_dir, false).redirecting_to(endpoints),
                client.clone(),
                namespace,
                config
                    .reconcilers
                    .as_ref()
                    .map(|r| r.pull_secrets.clone())
                    .unwrap_or_default(),
                allowed,
                metrics.clone(),
                trust::Trust::of(config),
            ))),
            changed: Notify::new(),
            status_changed: Notify::new(),
            namespaced: Mutex::new(None),
            host,
            metrics: metrics.clone(),
        });
        follow(
            watcher(api, watcher_config).reflect(writer),
            hold,
            shared.clone(),
            "Reconciler objects",
        );
        let writer = StatusWriter::new(client.clone(), store.clone(), shared.clone());
        let objects = Self {
            store,
            client,
            config: Mutex::new(Arc::new(config.clone())),
            tenants: Mutex::new(None),
            shared,
            rollouts: Mutex::default(),
        };
        objects.follow_tenants(config);
        (objects, writer)
    }

    /// Where the asks people write on objects about their rollouts go (the controllers'
    /// registry).
    pub(crate) fn set_rollouts(&self, rollouts: Arc<crate::supply::guest_set::Rollouts>) {
        *self.rollouts.lock() = rollouts;
    }

    /// Every object followed, by its record's key (`NAME`, or `NAMESPACE.NAME`).
    fn keyed(&self) -> Vec<(String, Arc<DynamicObject>)> {
        use kube::ResourceExt as _;
        let cluster = self.store.state().into_iter().map(|o| (o.name_any(), o));
        let namespaced: Vec<_> = self
            .shared
            .namespaced
            .lock()
            .iter()
            .flat_map(Store::state)
            .collect();
        let namespaced = namespaced.into_iter().filter_map(|o| {
            let ns = o.metadata.namespace.clone()?;
            Some((format!("{ns}.{}", o.name_any()), o))
        });
        cluster.chain(namespaced).collect()
    }

    /// The asks standing on `objects` (`crate::supply::rollout::ASK_ANNOTATION`), by item, the
    /// version each names resolved to its content hash; an ask that does not read or names a
    /// version this host did not load is left out (and logged at debug).
    fn asks(
        records: &Records,
        objects: &[(String, Arc<DynamicObject>)],
    ) -> BTreeMap<String, crate::supply::rollout::Ask> {
        use crate::supply::guest_set::RECONCILER_PREFIX;
        use crate::supply::rollout::{ASK_ANNOTATION, Ask};
        use kube::ResourceExt as _;
        let mut asks = BTreeMap::new();
        for (key, object) in objects {
            let Some(text) = object.annotations().get(ASK_ANNOTATION) else {
                continue;
            };
            let ask = match text.parse::<Ask>() {
                Ok(ask) => ask,
                Err(e) => {
                    tracing::debug!(reconciler = %key, "{e}");
                    continue;
                }
            };
            let Some(hash) = records.hash_of(key, &ask.to) else {
                tracing::debug!(reconciler = %key, version = %ask.to, "a rollout ask names a version this host did not load");
                continue;
            };
            asks.insert(
                format!("{RECONCILER_PREFIX}{key}"),
                Ask {
                    to: hash.to_owned(),
                    ..ask
                },
            );
        }
        asks
    }

    /// Starts following the namespaced objects when `config` has tenant rules (or reports
    /// the unmatched) and they are not followed yet; hands them `config` otherwise.
    fn follow_tenants(&self, config: &HostConfig) {
        let wanted = config
            .reconcilers
            .as_ref()
            .is_some_and(|r| !r.tenants.is_empty() || r.report_unmatched);
        let mut tenants = self.tenants.lock();
        match &mut *tenants {
            Some(tenants) => tenants.config = Arc::new(config.clone()),
            None if wanted => {
                let started = Tenants::start(&self.client, config, &self.shared);
                *self.shared.namespaced.lock() = Some(started.store.clone());
                *tenants = Some(started);
            }
            None => {}
        }
    }
}

impl Tenants {
    /// Follows the namespaced `Reconciler`s and the namespaces' labels.
    fn start(client: &kube::Client, config: &HostConfig, shared: &Arc<Shared>) -> Self {
        let (watching, hold) = watch_client(client, &shared.metrics, "Reconciler");
        let api: Api<DynamicObject> = Api::all_with(watching, &spec::namespaced_resource());
        let writer = reflector::store::Writer::new(spec::namespaced_resource());
        let store = writer.as_reader();
        follow(
            watcher(api, watcher::Config::default()).reflect(writer),
            hold,
            shared.clone(),
            "namespaced Reconciler objects",
        );
        let (namespaces, writer) = reflector::store::<Namespace>();
        let (watching, hold) = watch_client(client, &shared.metrics, "Namespace");
        follow(
            watcher(Api::<Namespace>::all(watching), watcher::Config::default()).reflect(writer),
            hold,
            shared.clone(),
            "namespaces (their labels choose tenant rules)",
        );
        Self {
            store,
            namespaces,
            config: Arc::new(config.clone()),
        }
    }

    /// The namespaced objects, by namespace.
    fn by_namespace(&self) -> BTreeMap<String, Vec<Arc<DynamicObject>>> {
        let mut by_namespace: BTreeMap<String, Vec<Arc<DynamicObject>>> = BTreeMap::new();
        for object in self.store.state() {
            if let Some(ns) = object.metadata.namespace.clone() {
                by_namespace.entry(ns).or_default().push(object);
            }
        }
        by_namespace
    }

    /// The namespaced objects as items: those a tenant rule selects and its quota holds;
    /// the others noted as held back (never pulled), when the host reports them.
    fn list(
        &self,
        host: &str,
        records: &mut Records,
        names: &mut BTreeSet<String>,
        origins: &mut Vec<Origin>,
    ) {
        let Some(settings) = &self.config.reconcilers else {
            return;
        };
        for (namespace, mut objects) in self.by_namespace() {
            // Those served at the last listing first, then the oldest: a quota never evicts a
            // Reconciler for a newer one, not even for one created in the same second (creation
            // times are whole seconds) with a name that sorts first.
            let served = |o: &DynamicObject| {
                let key = format!("{namespace}.{}", o.metadata.name.as_deref().unwrap_or(""));
                records
                    .objects
                    .get(&key)
                    .is_some_and(|r| r.held.is_none() && (r.spec.is_ok() || r.runs()))
            };
            quota_order(&mut objects, served);
            let labels = self
                .namespaces
                .get(&reflector::ObjectRef::new(&namespace))
                .and_then(|n| n.metadata.labels.clone())
                .unwrap_or_default();
            let rule = settings.tenant(&namespace, &labels);
            let mut used = Usage::default();
            for object in objects {
                let Some(name) = object.metadata.name.clone() else {
                    continue;
                };
                let key = format!("{namespace}.{name}");
                let generation = object.metadata.generation.unwrap_or(0);
                let Some((index, rule)) = rule else {
                    if let Some(message) = unmatched(settings, &object, host, &namespace) {
                        records.observe_held(&key, generation, "NoTenantRule", message);
                        names.insert(key);
                    }
                    continue;
                };
                names.insert(key.clone());
                let spec = match Spec::of(&object) {
                    Ok(spec) => spec,
                    Err(why) => {
                        let judged = Judged {
                            config: &self.config,
                            index,
                            rule,
                            labels: &labels,
                        };
                        origins.extend(judged.invalid(records, &key, generation, why, &mut used));
                        continue;
                    }
                };
                // While a newer spec's pull or grant fails, the version that runs is judged
                // too: its registry and pull Secret, and the larger of the two in the quota.
                let running = records.running_spec(&key, &spec);
                let judged: Vec<&Spec> = std::iter::once(&spec).chain(running.as_ref()).collect();
                if let Some(held) = held_back(&self.config, index, rule, &judged, &mut used) {
                    records.observe_held(&key, generation, held.0, held.1);
                    continue;
                }
                let tenant = Tenant {
                    namespace: namespace.clone(),
                    labels: labels.clone(),
                    service_account: spec.service_account_name.clone(),
                };
                let origin =
                    Origin::tenant_reconciler(&name, generation, spec.grant.clone(), tenant);
                records.observe(&key, generation, spec, &origin, Some(index));
                origins.push(origin);
            }
        }
    }
}

/// Why `object`, in a `namespace` no tenant rule selects, is held back, when its status says
/// so: the host reports such objects, or the status is this host's (left as it was, it would
/// say Ready of a guest that no longer runs). None for another host's status: that host serves
/// the namespace (or did, and marks it when it stops), so two hosts never take turns
/// rewriting it.
fn unmatched(
    settings: &crate::config::ReconcilerSettings,
    object: &DynamicObject,
    host: &str,
    namespace: &str,
) -> Option<String> {
    if written_by_another(object, host) {
        None
    } else if settings.report_unmatched {
        Some(format!(
            "no rule of reconcilers.tenants selects namespace {namespace} (by its name or labels): this host neither pulls nor runs its Reconcilers; a platform administrator adds the namespace to a rule"
        ))
    } else if written_by(object, host) {
        Some(format!(
            "host {host} no longer serves namespace {namespace}: no rule of its reconcilers.tenants selects it (by its name or labels), so it stopped this Reconciler; a platform administrator adds the namespace to a rule"
        ))
    } else {
        None
    }
}

/// The namespace's current tenant rule, as a Reconciler whose spec cannot run is judged by.
struct Judged<'a> {
    config: &'a HostConfig,
    index: usize,
    rule: &'a crate::config::TenantRule,
    labels: &'a BTreeMap<String, String>,
}

impl Judged<'_> {
    /// A spec the host cannot run keeps the version that last ran only while that version
    /// passes every check of the namespace's current rule: the same rule with the same labels
    /// (a move to another rule is judged only with a valid spec), and its registry, pull
    /// Secret and quota, where it counts like any other. Otherwise it is stopped, and says why.
    fn invalid(
        &self,
        records: &mut Records,
        key: &str,
        generation: i64,
        why: spec::SpecError,
        used: &mut Usage,
    ) -> Option<Origin> {
        let Some((origin, last, ran_under)) = records.kept(key) else {
            // Stopped at this generation for a reason of the rule: the status keeps saying so.
            if records.held_at(key, generation) {
                return None;
            }
            return records.observe_invalid(key, generation, why);
        };
        let label = self.rule.label(self.index);
        let moved = ran_under != Some(self.index)
            || !matches!(
                origin.kind(),
                OriginKind::Reconciler { tenant: Some(t), .. } if &t.labels == self.labels
            );
        let stopped = if moved {
            Some((
                "InvalidSpec",
                format!(
                    "{why}; its namespace now falls under {label} (or its labels changed), and a version is judged under a rule only with a valid spec, so the last good version stopped"
                ),
            ))
        } else {
            held_back(self.config, self.index, self.rule, &[&last], used).map(|(reason, message)| {
                (
                    reason,
                    format!(
                        "{message}; its spec cannot run ({why}), so the last good version stopped"
                    ),
                )
            })
        };
        if let Some((reason, message)) = stopped {
            records.observe_held(key, generation, reason, message);
            return None;
        }
        records.observe_invalid(key, generation, why)
    }
}

/// Sorts one namespace's Reconcilers into the order they take its quota in: those `served`
/// first, then by creation time, then by name.
fn quota_order(objects: &mut [Arc<DynamicObject>], served: impl Fn(&DynamicObject) -> bool) {
    objects.sort_by_cached_key(|o| {
        (
            !served(o),
            o.metadata.creation_timestamp.clone().map(|t| t.0),
            o.metadata.name.clone(),
        )
    });
}

/// Whether `object`'s status was last written by `host`.
fn written_by(object: &DynamicObject, host: &str) -> bool {
    status_host(object) == Some(host)
}

/// Whether the object's status names a host other than `host`.
fn written_by_another(object: &DynamicObject, host: &str) -> bool {
    status_host(object).is_some_and(|writer| writer != host)
}

fn status_host(object: &DynamicObject) -> Option<&str> {
    object
        .data
        .pointer("/status/host")
        .and_then(serde_json::Value::as_str)
}

/// What one namespace's Reconcilers hold so far, against its rule's quota.
#[derive(Default)]
struct Usage {
    reconcilers: u32,
    memory_mib: u64,
    cpu_millicores: u64,
}

/// Why a tenant's Reconciler is not pulled: beyond its namespace's quota (counted in `used`
/// otherwise), a pull Secret or registry its rule does not allow. `specs` are its spec and,
/// while that one fails to load, the spec of the version still running: each must pass, and
/// the larger counts in the quota.
fn held_back(
    config: &HostConfig,
    index: usize,
    rule: &crate::config::TenantRule,
    specs: &[&Spec],
    used: &mut Usage,
) -> Option<(&'static str, String)> {
    let label = rule.label(index);
    let (mut memory, mut cpu) = (0, 0);
    for spec in specs {
        if let Some(refused) = outside_rule(&label, rule, spec) {
            return Some(refused);
        }
        let limits = config.with_defaults(&spec.grant).limits;
        memory = memory.max(
            limits
                .memory_mib
                .unwrap_or(crate::config::DEFAULT_MEMORY_MIB as u64)
                // Unset, a guest may run up to the host's maxConcurrency instances at once.
                * u64::from(limits.concurrency.unwrap_or(config.max_concurrency())),
        );
        cpu = cpu.max(u64::from(limits.cpu_millicores.unwrap_or(1000)));
    }
    let quota = &rule.quota;
    let beyond = [
        (
            quota.reconcilers.map(u64::from),
            u64::from(used.reconcilers) + 1,
            "Reconcilers",
        ),
        (
            quota.memory_mib,
            used.memory_mib + memory,
            "MiB of guest memory (memoryMiB x concurrency)",
        ),
        (
            quota.cpu_millicores,
            used.cpu_millicores + cpu,
            "millicores of CPU share",
        ),
    ]
    .into_iter()
    .find_map(|(limit, would, what)| {
        limit
            .filter(|l| would > *l)
            .map(|l| format!("{would} {what} in the namespace, above {label}'s quota of {l}"))
    });
    if let Some(beyond) = beyond {
        return Some(("TenantQuotaExceeded", beyond));
    }
    used.reconcilers += 1;
    used.memory_mib += memory;
    used.cpu_millicores += cpu;
    None
}

/// Why `spec`'s pull Secret or registry is outside `rule`.
fn outside_rule(
    label: &str,
    rule: &crate::config::TenantRule,
    spec: &Spec,
) -> Option<(&'static str, String)> {
    if let Some(secret) = &spec.pull_secret
        && !rule.pull_secrets.contains(secret)
    {
        return Some((
            "PullSecretNotAllowed",
            format!("spec.pullSecretRef {secret} is not one of {label}'s pullSecrets"),
        ));
    }
    if !rule.allow.registries.iter().any(|r| r.covers(&spec.module)) {
        let listed: Vec<String> = rule
            .allow
            .registries
            .iter()
            .map(ToString::to_string)
            .collect();
        return Some((
            "RegistryNotAllowed",
            format!(
                "spec.module: registry {} is not one {label} allows (allow.registries: {})",
                spec.module.registry(),
                if listed.is_empty() {
                    "none".to_owned()
                } else {
                    listed.join(", ")
                }
            ),
        ));
    }
    None
}

/// `client` for one of this source's watches, `watch` in `reconciler_watch_throttled_total`:
/// its requests go out once, and the hold it returns sets the watch's backoff.
fn watch_client(
    client: &kube::Client,
    metrics: &crate::metrics::Metrics,
    watch: &str,
) -> (kube::Client, Hold) {
    let hold = Hold::default();
    let watching =
        retry_after::watch_client(client.clone(), hold.clone(), metrics.watch_throttled(watch));
    (watching, hold)
}

/// Drives a reflector's stream, waking the source on each change, backing off after errors as
/// `hold` says (the `Retry-After` of a refusal, else the default backoff); a failing watch is
/// said once per outage.
fn follow<S, K>(events: S, hold: Hold, shared: Arc<Shared>, what: &'static str)
where
    S: futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    K: Send + 'static,
{
    tokio::spawn(async move {
        let events = events.backoff(ServerBackoff::new(hold));
        futures::pin_mut!(events);
        let mut failing = false;
        while let Some(event) = events.next().await {
            match event {
                Ok(_) => {
                    failing = false;
                    shared.changed.notify_one();
                    shared.status_changed.notify_one();
                }
                Err(e) if !failing => {
                    failing = true;
                    if retry_after::overloaded(&e).is_some() {
                        tracing::warn!(
                            "the API server holds back the watch of {what} ({e}); trying again after its Retry-After"
                        );
                    } else {
                        tracing::error!(
                            "cannot watch {what} ({e}); is the CRD installed? kubectl apply -f deploy/crds/reconcilers.yaml"
                        );
                    }
                }
                Err(_) => {}
            }
        }
    });
}

impl GuestSource for Objects {
    fn list(&self) -> Result<Vec<Origin>, SourceError> {
        let objects = self.store.state();
        let mut records = self.shared.records.lock();
        let mut origins = Vec::with_capacity(objects.len());
        let mut names = BTreeSet::new();
        for object in &objects {
            let Some(name) = object.metadata.name.clone() else {
                continue;
            };
            let generation = object.metadata.generation.unwrap_or(0);
            let origin = match Spec::of(object) {
                Ok(spec) => {
                    let origin = Origin::reconciler(&name, generation, spec.grant.clone());
                    records.observe(&name, generation, spec, &origin, None);
                    Some(origin)
                }
                // A spec the host cannot run keeps the item as it last ran, if it did.
                Err(why) => records.observe_invalid(&name, generation, why),
            };
            names.insert(name);
            origins.extend(origin);
        }
        if let Some(tenants) = &*self.tenants.lock() {
            tenants.list(&self.shared.host, &mut records, &mut names, &mut origins);
        }
        records.retain(&names);
        let objects = self.keyed();
        let rollouts = self.rollouts.lock().clone();
        rollouts.set_asks(Self::asks(&records, &objects));
        let config = self.config.lock().clone();
        let recorded = resume::recorded(
            objects.iter().map(|(key, o)| (key.clone(), &**o)),
            &mut records,
            &config,
        );
        rollouts.set_recorded(recorded);
        let restarts = records.take_restarts();
        drop(records);
        if !restarts.is_empty() {
            // Left out once, so the guest set stops them; listed again at the next rescan.
            origins.retain(|o| !restarts.contains(o.stem()));
            self.shared.changed.notify_one();
        }
        self.shared.status_changed.notify_one();
        Ok(origins)
    }

    fn read(&self, origin: &Origin) -> Result<Artefact, SourceError> {
        let shared = self.shared.clone();
        let result = Records::read(&self.shared.records, origin.stem(), origin, move || {
            // The pull ended: judge its module (or its failure) now.
            shared.changed.notify_one();
            shared.status_changed.notify_one();
        });
        self.shared.status_changed.notify_one();
        result
    }

    fn watch(&self) -> Result<Box<dyn Changes>, SourceError> {
        Ok(Box::new(Watching {
            shared: self.shared.clone(),
            retry: None,
        }))
    }

    fn holds(&self, origin: &Origin) -> bool {
        matches!(origin.kind(), OriginKind::Reconciler { .. })
    }

    fn unsettled(&self) -> Option<String> {
        // Polled once: ready is a future that resolves when the reflector's first list landed.
        let listed = self.store.wait_until_ready().now_or_never();
        (!matches!(listed, Some(Ok(())))).then(|| {
            "the ClusterReconciler objects are not listed yet (is the CRD installed? see the log)"
                .to_owned()
        })
    }

    fn reconfigured(&self, config: &HostConfig) {
        let before = std::mem::replace(&mut *self.config.lock(), Arc::new(config.clone()));
        self.follow_tenants(config);
        self.shared.records.lock().reconfigure(&before, config);
        self.shared.changed.notify_one();
        self.shared.status_changed.notify_one();
    }

    fn known_hash(&self, origin: &Origin) -> Option<String> {
        self.shared.records.lock().known_hash(origin.stem())
    }

    fn resumes(&self, origin: &Origin, hash: &str) -> Option<crate::supply::guest_set::Resume> {
        let (from, status) =
            Records::take_resume(&self.shared.records, origin.stem(), origin, hash)?;
        Some(crate::supply::guest_set::Resume { from, status })
    }

    fn judged(&self, origin: &Origin, verdict: &Verdict) {
        let OriginKind::Reconciler { generation, .. } = origin.kind() else {
            return;
        };
        self.shared
            .records
            .lock()
            .judged(origin.stem(), *generation, verdict);
        self.shared.status_changed.notify_one();
    }
}

/// The objects' changes, and the time a failed pull is due again.
struct Watching {
    shared: Arc<Shared>,
    retry: Option<tokio::time::Instant>,
}

#[async_trait::async_trait]
impl Changes for Watching {
    async fn next(&mut self) -> Result<(), SourceError> {
        let due = self.shared.records.lock().next_retry();
        let retry = match (due, self.retry.take()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let changed = self.shared.changed.notified();
        match retry {
            Some(at) => {
                tokio::select! {
                    () = changed => {}
                    () = tokio::time::sleep_until(at) => {}
                }
            }
            None => changed.await,
        }
        Ok(())
    }

    fn retry_in(&mut self, after: Duration) {
        self.retry = Some(tokio::time::Instant::now() + after);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reconciler(name: &str, created: &str) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
                "metadata": {"name": name, "namespace": "team", "creationTimestamp": created},
            }))
            .expect("a Reconciler"),
        )
    }

    fn names(objects: &[Arc<DynamicObject>]) -> Vec<&str> {
        objects
            .iter()
            .map(|o| o.metadata.name.as_deref().unwrap_or(""))
            .collect()
    }

    #[test]
    fn a_served_reconciler_keeps_its_quota_slot_against_one_created_in_the_same_second() {
        let (b, a) = (
            reconciler("b", "2026-11-28T08:00:00Z"),
            reconciler("a", "2026-11-28T08:00:00Z"),
        );
        let older = reconciler("z", "2026-11-28T07:59:59Z");
        // Nothing served yet (a host starting): the oldest, then by name.
        let mut objects = vec![b.clone(), a.clone(), older.clone()];
        quota_order(&mut objects, |_| false);
        assert_eq!(names(&objects), ["z", "a", "b"]);
        // `b` was served at the last listing; `a`, created in the same second, was not: `b`
        // stays first whatever the names say.
        let mut objects = vec![a.clone(), b.clone(), older.clone()];
        quota_order(&mut objects, |o| o.metadata.name.as_deref() == Some("b"));
        assert_eq!(names(&objects), ["b", "z", "a"]);
        // Among the served, the oldest first.
        let mut objects = vec![a, b, older];
        quota_order(&mut objects, |o| o.metadata.name.as_deref() != Some("a"));
        assert_eq!(names(&objects), ["z", "b", "a"]);
    }
}
