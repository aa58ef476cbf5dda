//! The host configuration (YAML): where guests come from, what each guest is granted, and the
//! backends that hold actual state. Grants are deny-by-default: a guest without an entry under
//! `guests:` is refused, and every read, write and backend call is checked against its entry.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::cluster::objects::Gvk;

mod backends;
mod http;
mod http_path;
mod queue;
mod record;
mod service_account;
mod writes;

pub use backends::{BackendConfig, DEFAULT_BRIDGE_PREFIX};
pub use http::{HttpRule, KeyRef, UrlPrefix, ValueFrom};
pub use http_path::normalise_path;
pub use queue::QueueConfig;
pub use record::{DEFAULT_RECORD_BYTES, RecordPolicy};
pub use service_account::{AllowedAccount, DEFAULT_RECHECK, IdentitySettings, ServiceAccountRef};
pub use writes::{Verb, WriteTarget, WriteVerbs};

/// How often the engine's epoch advances: the granularity of deadlines and of the CPU share.
pub const EPOCH_TICK: Duration = Duration::from_millis(5);
/// Default deadline of one reconcile (guest CPU time plus host calls).
pub(crate) const DEFAULT_DEADLINE: Duration = Duration::from_secs(5);
/// Default cap on a guest instance's linear memory (all of its memories together).
pub(crate) const DEFAULT_MEMORY_MIB: usize = 64;
/// How long an instance kept by `instanceReuse` may sit unused before it is dropped.
pub(crate) const DEFAULT_INSTANCE_IDLE: Duration = Duration::from_secs(30);
/// Default host-wide cap on one guest's concurrency (`maxConcurrency`).
pub(crate) const DEFAULT_MAX_CONCURRENCY: u32 = 16;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read host configuration {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("host configuration {path} is invalid: {source}")]
    Parse {
        path: PathBuf,
        source: serde_yaml::Error,
    },
    #[error("host configuration {path}: {message}")]
    Invalid { path: PathBuf, message: String },
}

/// The whole host configuration file.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostConfig {
    /// Directory of `*.wasm` guests for `run` (the CLI flag overrides it).
    #[serde(default)]
    pub(crate) guest_directory: Option<PathBuf>,
    /// Limits for guests whose grant does not set their own.
    #[serde(default)]
    pub(crate) defaults: Limits,
    /// Providers of actual state, by name (`network`).
    #[serde(default)]
    pub(crate) backends: BTreeMap<String, BackendConfig>,
    /// What each guest (by manifest name) may do.
    #[serde(default)]
    pub(crate) guests: BTreeMap<String, Grant>,
    /// The most keys any one guest may reconcile at once. A manifest asking for more is
    /// refused at load, so no guest can take a lion's share of the instance slots.
    #[serde(default)]
    pub(crate) max_concurrency: Option<u32>,
    /// What happens to objects still carrying a guest's finalizer once the guest is unloaded.
    #[serde(default)]
    pub(crate) finalizer_policy: FinalizerPolicy,
    /// Registries guests are pulled from: which speak plain HTTP, the module size cap.
    #[serde(default)]
    pub(crate) registries: crate::oci::RegistrySettings,
    /// Present: the host also runs the guests `Reconciler` objects declare, within `allow`.
    #[serde(default)]
    pub(crate) reconcilers: Option<ReconcilerSettings>,
    /// Guests' own ServiceAccounts: whether every guest must name one, how often their reads
    /// are reviewed again.
    #[serde(default)]
    pub(crate) identity: IdentitySettings,
    /// Where `run` writes the records of guests whose grant sets `record` (one directory per
    /// guest). Default: `records/` in the host's cache directory (`run --cache-dir`).
    #[serde(default)]
    pub(crate) record_directory: Option<PathBuf>,
    /// The adaptive limit on the host's API writes in flight (`crate::cluster::flowcontrol`).
    #[serde(default)]
    pub(crate) api_writes: crate::cluster::flowcontrol::Settings,
}

impl HostConfig {
    pub(crate) fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses YAML text; `path` only names the source in messages.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let config: Self = serde_yaml::from_str(text).map_err(|source| ConfigError::Parse {
            path: path.to_owned(),
            source,
        })?;
        let cap = config.max_concurrency();
        for (guest, grant) in &config.guests {
            if let Err(message) = grant.write_verbs.check(&grant.write) {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    message: format!("guests.{guest}.{message}"),
                });
            }
            if let Some(Err(message)) = grant.record.as_ref().map(RecordPolicy::check) {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    message: format!("guests.{guest}.{message}"),
                });
            }
            if grant.limits.concurrency.is_some_and(|c| c > cap) {
                return Err(ConfigError::Invalid {
                    path: path.to_owned(),
                    message: format!(
                        "guests.{guest}.limits.concurrency is above maxConcurrency ({cap})"
                    ),
                });
            }
            for backend in &grant.backends {
                if !config.backends.contains_key(backend) {
                    return Err(ConfigError::Invalid {
                        path: path.to_owned(),
                        message: format!(
                            "guests.{guest}.backends names `{backend}`, which is not configured under backends:"
                        ),
                    });
                }
            }
        }
        config.check_tenant_rules(path)?;
        let mut config = config;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(verify) = config.reconcilers.as_mut().and_then(|r| r.verify.as_mut()) {
            verify.resolve_from(base);
            verify.trust_policy().map_err(|e| ConfigError::Invalid {
                path: path.to_owned(),
                message: format!("reconcilers.verify: {e}"),
            })?;
        }
        if let Some(reconcilers) = config.reconcilers.as_mut() {
            reconcilers.read_tenant_verify(base, path)?;
        }
        if let Some(reconcilers) = &config.reconcilers {
            let allow = &reconcilers.allow;
            allow
                .write_verbs
                .check(&allow.write)
                .map_err(|e| ConfigError::Invalid {
                    path: path.to_owned(),
                    message: format!("reconcilers.allow.{e}"),
                })?;
            for backend in &reconcilers.allow.backends {
                if !config.backends.contains_key(backend) {
                    return Err(ConfigError::Invalid {
                        path: path.to_owned(),
                        message: format!(
                            "reconcilers.allow.backends names `{backend}`, which is not configured under backends:"
                        ),
                    });
                }
            }
        }
        Ok(config)
    }

    /// Each tenant rule selects some namespaces, and not all; its account and verbs are valid.
    fn check_tenant_rules(&self, path: &Path) -> Result<(), ConfigError> {
        for (i, rule) in self
            .reconcilers
            .iter()
            .flat_map(|r| r.tenants.iter())
            .enumerate()
        {
            let invalid = |message: String| ConfigError::Invalid {
                path: path.to_owned(),
                message: format!("{}: {message}", rule.label(i)),
            };
            if let Some(selector) = &rule.namespace_selector {
                let parsed = crate::cluster::selector::parse_selector(selector)
                    .map_err(|e| invalid(format!("namespaceSelector: {e}")))?;
                if parsed.selects_all() {
                    return Err(invalid(
                        "namespaceSelector selects every namespace; name a label the administrator sets".into(),
                    ));
                }
            }
            if rule.namespace_selector.is_none() && rule.namespaces.is_empty() {
                return Err(invalid(
                    "selects no namespace: set namespaceSelector or namespaces".into(),
                ));
            }
            crate::cluster::validation::dns1123_label("serviceAccount", &rule.service_account)
                .map_err(|e| invalid(e.to_string()))?;
            let allow = &rule.allow;
            allow
                .write_verbs
                .check(&allow.write)
                .map_err(|e| invalid(format!("allow.{e}")))?;
        }
        Ok(())
    }

    /// The host-wide cap on one guest's concurrency.
    pub(crate) fn max_concurrency(&self) -> u32 {
        self.max_concurrency
            .unwrap_or(DEFAULT_MAX_CONCURRENCY)
            .max(1)
    }

    /// The grant of a guest, with the host defaults filled in for unset limits.
    pub fn grant(&self, guest: &str) -> Option<Grant> {
        Some(self.with_defaults(self.guests.get(guest)?))
    }

    /// `grant` with the host defaults filled in for unset limits.
    pub(crate) fn with_defaults(&self, grant: &Grant) -> Grant {
        let mut grant = grant.clone();
        grant.limits = grant.limits.or(&self.defaults);
        grant
    }
}

/// `reconcilers:`: guests declared as `ClusterReconciler` objects (cluster-scoped) and as
/// `Reconciler` objects in namespaces a tenant rule opens (`reconciler.dev`). Whoever may create
/// one runs code with what it grants, so the operator bounds every such grant here; RBAC on
/// those objects is an administrator's.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct ReconcilerSettings {
    /// The most any Reconciler's `spec.grant` may ask for.
    #[serde(default)]
    pub(crate) allow: Allow,
    /// The `kubernetes.io/dockerconfigjson` Secrets, in the host's namespace, that a
    /// Reconciler may name as `spec.pullSecretRef`; the host reads no other Secret, and
    /// `reconciler-host rbac` grants `get` on exactly these.
    #[serde(default)]
    pub(crate) pull_secrets: BTreeSet<String>,
    /// A label selector (`team=payments`, `tier in (a,b)`): this host runs only the
    /// `ClusterReconciler`s it selects, so several hosts can share a cluster. Default: every
    /// one. Namespaced `Reconciler`s are chosen by `tenants` (namespace labels), never by
    /// labels their authors write.
    #[serde(default)]
    pub(crate) selector: Option<String>,
    /// The namespaces whose own `Reconciler`s this host runs, each rule with its ceiling and
    /// quotas; the first rule that selects a namespace applies. None: namespaced Reconcilers
    /// are not run.
    #[serde(default)]
    pub(crate) tenants: Vec<TenantRule>,
    /// Whether a namespaced `Reconciler` no rule selects gets status `NoTenantRule` from this
    /// host; off by default: where several hosts share a cluster, turn it on for one only.
    #[serde(default)]
    pub(crate) report_unmatched: bool,
    /// Signatures every Reconciler's module must carry.
    #[serde(default)]
    pub(crate) verify: Option<VerifySettings>,
}

/// `reconcilers.tenants[i]`: namespaces a platform team opens to their own `Reconciler`s. A
/// namespace is chosen by its labels (the administrator's, not the tenant's) or its name;
/// a Reconciler there is held to it (its watches, reads, writes, events and enqueues), writes
/// as a ServiceAccount of it, and is bounded by `allow` and `quota`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TenantRule {
    /// Names the rule in refusals (`reconcilers.tenants[N]` otherwise).
    #[serde(default)]
    pub(crate) name: Option<String>,
    /// Namespaces whose labels match this selector (`tenant=true`, `team in (a,b)`).
    #[serde(default)]
    pub(crate) namespace_selector: Option<String>,
    /// Namespaces by name.
    #[serde(default)]
    pub(crate) namespaces: Vec<String>,
    /// The most a tenant's Reconciler may be granted; as `reconcilers.allow`, except that
    /// `serviceAccounts` is ignored (a tenant's guest writes as an account of its namespace).
    #[serde(default)]
    pub(crate) allow: Allow,
    #[serde(default)]
    pub(crate) quota: TenantQuota,
    /// The ServiceAccount of the Reconciler's namespace its guest writes as, when its spec
    /// names none (`spec.serviceAccountName`).
    #[serde(default = "default_tenant_account")]
    pub(crate) service_account: String,
    /// Pull Secrets (in the host's namespace) a tenant's Reconciler may name; none by default.
    #[serde(default)]
    pub(crate) pull_secrets: BTreeSet<String>,
    /// Signatures the rule's Reconcilers' modules must carry, checked instead of
    /// `reconcilers.verify` (whose keys then admit none of them); unset, the host's apply. It
    /// may not require less than the host: with `reconcilers.verify.required`, it must too.
    #[serde(default)]
    pub(crate) verify: Option<VerifySettings>,
}

fn default_tenant_account() -> String {
    "reconciler".to_owned()
}

/// What one namespace's Reconcilers may hold together under a tenant rule.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct TenantQuota {
    /// Reconcilers per namespace (the oldest first).
    #[serde(default)]
    pub(crate) reconcilers: Option<u32>,
    /// Guest memory of the namespace: each Reconciler's `memoryMiB` times its concurrency.
    #[serde(default, rename = "memoryMiB")]
    pub(crate) memory_mib: Option<u64>,
    /// CPU share of the namespace: the sum of its Reconcilers' `cpuMillicores`.
    #[serde(default)]
    pub(crate) cpu_millicores: Option<u64>,
}

impl TenantRule {
    /// How refusals name it.
    pub(crate) fn label(&self, index: usize) -> String {
        match &self.name {
            Some(name) => format!("reconcilers.tenants[{index}] ({name})"),
            None => format!("reconcilers.tenants[{index}]"),
        }
    }

    /// Whether it selects namespace `name` with `labels`.
    pub(crate) fn selects(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        use kube::core::SelectorExt as _;
        if self.namespaces.iter().any(|n| n == name) {
            return true;
        }
        self.namespace_selector
            .as_deref()
            .and_then(|s| crate::cluster::selector::parse_selector(s).ok())
            .is_some_and(|s| !s.selects_all() && s.matches(labels))
    }
}

impl ReconcilerSettings {
    /// Reads each tenant rule's `verify` (keys beside the configuration at `path`, in `base`),
    /// refusing one that cannot be read or that requires less than `reconcilers.verify`.
    fn read_tenant_verify(&mut self, base: &Path, path: &Path) -> Result<(), ConfigError> {
        let host_requires = self.verify.as_ref().is_some_and(|v| v.required);
        for (i, rule) in self.tenants.iter_mut().enumerate() {
            let label = rule.label(i);
            let Some(verify) = rule.verify.as_mut() else {
                continue;
            };
            let invalid = |message: String| ConfigError::Invalid {
                path: path.to_owned(),
                message,
            };
            if host_requires && !verify.required {
                return Err(invalid(format!(
                    "{label}.verify.required is false, but reconcilers.verify.required is true: a tenant rule may name other keys than the host's, never require less; set required: true with the team's keys, or leave the rule's verify out to inherit the host's"
                )));
            }
            verify.resolve_from(base);
            verify
                .trust_policy()
                .map_err(|e| invalid(format!("{label}.verify: {e}")))?;
        }
        Ok(())
    }

    /// The first tenant rule that selects namespace `name` with `labels`, and its index.
    pub(crate) fn tenant(
        &self,
        name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Option<(usize, &TenantRule)> {
        self.tenants
            .iter()
            .enumerate()
            .find(|(_, rule)| rule.selects(name, labels))
    }
}

/// `reconcilers.verify`: run a module only when a trusted key or a trusted keyless identity
/// signed its manifest digest (cosign 2's `sha256-DIGEST.sig`, cosign 3's bundles), checked at
/// every pull and every load from the cache.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct VerifySettings {
    /// Whether signatures are required (a module without one is refused).
    #[serde(default)]
    pub(crate) required: bool,
    /// PEM public keys as `cosign generate-key-pair` writes them (relative paths are taken
    /// from the configuration file's directory); several at once for key rotation.
    #[serde(default)]
    pub(crate) keys: Vec<PathBuf>,
    /// Keyless signatures: certificates chaining to a trusted root, issued to these identities.
    #[serde(default)]
    pub(crate) keyless: Option<KeylessSettings>,
}

/// `reconcilers.verify.keyless`: signatures whose certificate (Fulcio's, or an organisation's
/// own authority's) chains to `trustedRoot` and names one of `identities`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct KeylessSettings {
    /// Sigstore's `trusted_root.json` (relative paths are taken from the configuration file's
    /// directory): certificate authorities and transparency logs.
    pub(crate) trusted_root: PathBuf,
    /// Who may have signed: an OIDC issuer with a subject, or a pattern of subjects.
    pub(crate) identities: Vec<crate::oci::CertificateIdentity>,
}

impl VerifySettings {
    /// Takes relative key and trusted-root paths from `base` (the configuration's directory).
    fn resolve_from(&mut self, base: &Path) {
        for key in &mut self.keys {
            *key = base.join(&*key);
        }
        if let Some(keyless) = &mut self.keyless {
            keyless.trusted_root = base.join(&keyless.trusted_root);
        }
    }

    /// What signatures must be made by when they are required, or why it cannot be read.
    pub(crate) fn trust_policy(&self) -> Result<Option<crate::oci::TrustPolicy>, String> {
        if !self.required {
            return Ok(None);
        }
        let keyless = self
            .keyless
            .as_ref()
            .map(|k| crate::oci::Keyless::load(&k.trusted_root, &k.identities))
            .transpose()?;
        crate::oci::TrustPolicy::load(&self.keys, Path::new("/"), keyless).map(Some)
    }
}

/// The ceiling on a Reconciler's grant (`reconcilers.allow`). Kinds, write targets and
/// backends are sets the grant's must fit in; label and annotation entries that may touch
/// Kubernetes' own keys (see [`Grant::labels`]) must be listed here as written; every limit
/// may be lowered but not raised above `limits` (default: the host's `defaults`, then the
/// built-in values), and concurrency never above `maxConcurrency`.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub(crate) struct Allow {
    #[serde(
        default,
        deserialize_with = "crate::cluster::objects::deserialize_kinds"
    )]
    pub(crate) read: BTreeSet<Gvk>,
    /// Kinds a Reconciler may read only through a selector that includes this one (its
    /// `spec.grant.readSelectors` entry must carry every requirement written here).
    #[serde(default)]
    pub(crate) read_selectors: ReadSelectors,
    #[serde(default)]
    pub(crate) write: BTreeSet<WriteTarget>,
    /// The verbs a Reconciler may be given on each kind of `write` (every one when unnamed).
    #[serde(default)]
    pub(crate) write_verbs: WriteVerbs,
    #[serde(default)]
    pub(crate) backends: BTreeSet<String>,
    #[serde(default)]
    pub(crate) labels: Vec<String>,
    #[serde(default)]
    pub(crate) annotations: Vec<String>,
    #[serde(default)]
    pub(crate) limits: Option<Limits>,
    /// The ServiceAccounts a Reconciler may name as `spec.grant.serviceAccount`
    /// (`NAMESPACE/NAME` or `NAMESPACE/*`); `reconciler-host rbac` lets the host impersonate
    /// exactly these.
    #[serde(default)]
    pub(crate) service_accounts: Vec<AllowedAccount>,
    /// The modes a Reconciler may run in (`[shadow]`: its guests only ever compare); unset,
    /// both.
    #[serde(default)]
    pub(crate) modes: Option<BTreeSet<Mode>>,
    /// The registries a Reconciler's `spec.module` may name: `HOST[:PORT]`, optionally with a
    /// repository prefix (`HOST[:PORT]/PATH`). None listed: no registry.
    #[serde(default)]
    pub(crate) registries: Vec<crate::oci::AllowedRegistry>,
    /// The HTTP rules a Reconciler's `spec.grant.http` may use: each of its rules must lie
    /// within one of these (prefix, methods) and name only the credentials that one names.
    #[serde(default)]
    pub(crate) http: Vec<HttpRule>,
}

/// A label selector per kind (`readSelectors`), each checked when the configuration is read.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ReadSelectors(BTreeMap<Gvk, String>);

impl ReadSelectors {
    /// The selector for `kind`, if one is set.
    pub(crate) fn get(&self, kind: &Gvk) -> Option<&str> {
        self.0.get(kind).map(String::as_str)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&Gvk, &str)> {
        self.0.iter().map(|(k, v)| (k, v.as_str()))
    }

    /// `selector` with this kind's requirement added (both as written when either is unset).
    pub(crate) fn narrow(&self, kind: &Gvk, selector: Option<&str>) -> Option<String> {
        match (self.get(kind), selector) {
            (Some(mine), Some(theirs)) => Some(format!("{mine},{theirs}")),
            (Some(one), None) | (None, Some(one)) => Some(one.to_owned()),
            (None, None) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ReadSelectors {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let written = BTreeMap::<String, String>::deserialize(deserializer)?;
        let mut selectors = BTreeMap::new();
        for (kind, selector) in written {
            let kind: Gvk = kind.parse().map_err(serde::de::Error::custom)?;
            crate::cluster::selector::parse_selector(&selector)
                .map_err(|e| serde::de::Error::custom(format!("readSelectors {kind}: {e}")))?;
            selectors.insert(kind, selector);
        }
        Ok(Self(selectors))
    }
}

/// Whether selector `inner` selects only objects `outer` selects: it carries each of
/// `outer`'s requirements (the parser sorts and removes repeats, so adding `outer`'s to
/// `inner`'s changes nothing exactly then).
pub(crate) fn selector_within(inner: &str, outer: &str) -> bool {
    let parse = crate::cluster::selector::parse_selector;
    match (parse(&format!("{inner},{outer}")), parse(inner)) {
        (Ok(both), Ok(inner)) => both == inner,
        _ => false,
    }
}

/// Per-guest limits. Unset fields fall back to `defaults:` and then to built-in values.
#[derive(Debug, Default, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Limits {
    /// Wall-clock deadline of one reconcile, e.g. `2s`, `500ms`.
    #[serde(default, with = "humantime_serde")]
    pub deadline: Option<Duration>,
    /// Linear memory cap of one instance in MiB.
    #[serde(rename = "memoryMiB", alias = "memoryMib")]
    pub memory_mib: Option<u64>,
    /// Keys reconciled at once (overrides the manifest's concurrency when lower).
    pub concurrency: Option<u32>,
    /// Overall retry rate of the guest's queue (token bucket).
    pub qps: Option<u32>,
    pub burst: Option<u32>,
    /// API writes per second the guest may make (status patches, applies, deletes); a write
    /// beyond the rate waits, within the reconcile's deadline.
    pub writes_per_second: Option<u32>,
    pub write_burst: Option<u32>,
    /// Events per second; beyond the rate an event is refused with `unavailable`.
    pub events_per_second: Option<u32>,
    pub event_burst: Option<u32>,
    /// Log lines per second; beyond the rate lines are dropped and counted.
    pub log_lines_per_second: Option<u32>,
    pub log_burst: Option<u32>,
    /// CPU the guest's running instances may use together, in thousandths of a core
    /// (`500` = half a core); beyond it they are paused at their next epoch tick until the
    /// budget refills. Default: one core. Host work done for the guest (label selectors
    /// evaluated over a cache, bodies parsed) is taken from the same share.
    pub cpu_millicores: Option<u32>,
    /// JSON body bytes (status patches, applies) per second the host parses for the guest;
    /// beyond the rate a body waits, within the reconcile's deadline. Default: 8 MiB/s (see
    /// [`Rates::default`]).
    pub body_bytes_per_second: Option<u32>,
    /// Outbound HTTP requests per second (`http:` in the grant); a request beyond the rate
    /// waits, within the reconcile's deadline.
    pub http_per_second: Option<u32>,
    pub http_burst: Option<u32>,
    /// Opt-in instance reuse: one instance serves up to this many reconciles of the guest on
    /// one worker (1, the default: a fresh instance per reconcile). State can then survive
    /// from one key to the next of the same guest; guests stay apart (see docs/security.md).
    pub instance_reuse: Option<u32>,
    /// A kept instance unused this long is dropped (default 30 s).
    #[serde(default, with = "humantime_serde")]
    pub instance_idle: Option<Duration>,
}

impl Limits {
    /// Unset fields taken from `fallback`.
    #[must_use]
    pub(crate) fn or(&self, fallback: &Limits) -> Limits {
        Limits {
            deadline: self.deadline.or(fallback.deadline),
            memory_mib: self.memory_mib.or(fallback.memory_mib),
            concurrency: self.concurrency.or(fallback.concurrency),
            qps: self.qps.or(fallback.qps),
            burst: self.burst.or(fallback.burst),
            writes_per_second: self.writes_per_second.or(fallback.writes_per_second),
            write_burst: self.write_burst.or(fallback.write_burst),
            events_per_second: self.events_per_second.or(fallback.events_per_second),
            event_burst: self.event_burst.or(fallback.event_burst),
            log_lines_per_second: self.log_lines_per_second.or(fallback.log_lines_per_second),
            log_burst: self.log_burst.or(fallback.log_burst),
            cpu_millicores: self.cpu_millicores.or(fallback.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .or(fallback.body_bytes_per_second),
            http_per_second: self.http_per_second.or(fallback.http_per_second),
            http_burst: self.http_burst.or(fallback.http_burst),
            instance_reuse: self.instance_reuse.or(fallback.instance_reuse),
            instance_idle: self.instance_idle.or(fallback.instance_idle),
        }
    }

    /// The reuse policy, if the guest opted in (`instanceReuse` above 1).
    pub(crate) fn reuse(&self) -> Option<Reuse> {
        let uses = self.instance_reuse.filter(|n| *n > 1)?;
        Some(Reuse {
            uses,
            idle: self.instance_idle.unwrap_or(DEFAULT_INSTANCE_IDLE),
        })
    }

    /// The limits this one sets above `ceiling` (unset there: the built-in value), and a
    /// concurrency above `max_concurrency`: one entry per limit, naming both values. A limit
    /// left unset here takes the host's default, which is not above the ceiling's own source.
    pub(crate) fn above(&self, ceiling: &Limits, max_concurrency: u32) -> Vec<String> {
        let mut above = Vec::new();
        let mut check = |name: &str, mine: Option<u64>, cap: u64| {
            if let Some(mine) = mine.filter(|m| *m > cap) {
                above.push(format!("limits.{name} {mine} (at most {cap})"));
            }
        };
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        check(
            "deadline (ms)",
            self.deadline.map(ms),
            ms(ceiling.deadline()),
        );
        check(
            "memoryMiB",
            self.memory_mib,
            ceiling.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB as u64),
        );
        let concurrency = ceiling
            .concurrency
            .map_or(max_concurrency, |c| c.min(max_concurrency));
        check(
            "concurrency",
            self.concurrency.map(u64::from),
            u64::from(concurrency),
        );
        let u32s = self.rate_limits(ceiling);
        // No reuse unless the ceiling allows it: it lets state pass between keys.
        check(
            "instanceReuse",
            self.instance_reuse.map(u64::from),
            u64::from(ceiling.instance_reuse.unwrap_or(1)),
        );
        for (name, mine, cap, built_in) in u32s {
            check(
                name,
                mine.map(u64::from),
                u64::from(cap.unwrap_or(built_in)),
            );
        }
        above
    }

    /// The rates and bursts, each as (name, this value, the ceiling's, the built-in value).
    fn rate_limits(&self, ceiling: &Limits) -> [(&'static str, Option<u32>, Option<u32>, u32); 12] {
        let (rates, queue) = (Rates::default(), QueueConfig::default());
        [
            (
                "httpPerSecond",
                self.http_per_second,
                ceiling.http_per_second,
                rates.http_per_second,
            ),
            (
                "httpBurst",
                self.http_burst,
                ceiling.http_burst,
                rates.http_burst,
            ),
            ("qps", self.qps, ceiling.qps, queue.qps.get()),
            ("burst", self.burst, ceiling.burst, queue.burst.get()),
            (
                "writesPerSecond",
                self.writes_per_second,
                ceiling.writes_per_second,
                rates.writes_per_second,
            ),
            (
                "writeBurst",
                self.write_burst,
                ceiling.write_burst,
                rates.write_burst,
            ),
            (
                "eventsPerSecond",
                self.events_per_second,
                ceiling.events_per_second,
                rates.events_per_second,
            ),
            (
                "eventBurst",
                self.event_burst,
                ceiling.event_burst,
                rates.event_burst,
            ),
            (
                "logLinesPerSecond",
                self.log_lines_per_second,
                ceiling.log_lines_per_second,
                rates.log_lines_per_second,
            ),
            (
                "logBurst",
                self.log_burst,
                ceiling.log_burst,
                rates.log_burst,
            ),
            (
                "cpuMillicores",
                self.cpu_millicores,
                ceiling.cpu_millicores,
                rates.cpu_millicores.unwrap_or(u32::MAX),
            ),
            (
                "bodyBytesPerSecond",
                self.body_bytes_per_second,
                ceiling.body_bytes_per_second,
                rates.body_bytes_per_second,
            ),
        ]
    }

    /// These limits with none above `ceiling`, set or not: a limit left unset would take a
    /// default or a built-in value that may exceed the ceiling, so every limit the ceiling (or
    /// its built-in) bounds is set to at most that bound, and concurrency to at most the
    /// ceiling's (or `max_concurrency`), so that the manifest's own concurrency cannot exceed
    /// it either. [`Self::above`] refuses what is set above; this bounds what is not.
    #[must_use]
    pub(crate) fn capped_by(&self, ceiling: &Limits, max_concurrency: u32) -> Limits {
        fn cap<T: Ord + Copy>(mine: Option<T>, ceiling: Option<T>, built_in: T) -> Option<T> {
            match (mine, ceiling) {
                (None, None) => None,
                (mine, ceiling) => Some(mine.unwrap_or(built_in).min(ceiling.unwrap_or(built_in))),
            }
        }
        let (rates, queue) = (Rates::default(), QueueConfig::default());
        let concurrency = ceiling
            .concurrency
            .map_or(max_concurrency, |c| c.min(max_concurrency));
        Limits {
            deadline: cap(self.deadline, ceiling.deadline, DEFAULT_DEADLINE),
            memory_mib: cap(
                self.memory_mib,
                ceiling.memory_mib,
                DEFAULT_MEMORY_MIB as u64,
            ),
            concurrency: Some(self.concurrency.map_or(concurrency, |c| c.min(concurrency))),
            qps: cap(self.qps, ceiling.qps, queue.qps.get()),
            burst: cap(self.burst, ceiling.burst, queue.burst.get()),
            writes_per_second: cap(
                self.writes_per_second,
                ceiling.writes_per_second,
                rates.writes_per_second,
            ),
            write_burst: cap(self.write_burst, ceiling.write_burst, rates.write_burst),
            events_per_second: cap(
                self.events_per_second,
                ceiling.events_per_second,
                rates.events_per_second,
            ),
            event_burst: cap(self.event_burst, ceiling.event_burst, rates.event_burst),
            log_lines_per_second: cap(
                self.log_lines_per_second,
                ceiling.log_lines_per_second,
                rates.log_lines_per_second,
            ),
            log_burst: cap(self.log_burst, ceiling.log_burst, rates.log_burst),
            cpu_millicores: cap(
                self.cpu_millicores,
                ceiling.cpu_millicores,
                rates.cpu_millicores.unwrap_or(u32::MAX),
            ),
            body_bytes_per_second: cap(
                self.body_bytes_per_second,
                ceiling.body_bytes_per_second,
                rates.body_bytes_per_second,
            ),
            http_per_second: cap(
                self.http_per_second,
                ceiling.http_per_second,
                rates.http_per_second,
            ),
            http_burst: cap(self.http_burst, ceiling.http_burst, rates.http_burst),
            // No reuse unless the ceiling allows it: it lets state pass between keys.
            instance_reuse: cap(self.instance_reuse, ceiling.instance_reuse, 1),
            instance_idle: self.instance_idle,
        }
    }

    /// The guest's per-guest rates, defaults filled in.
    pub(crate) fn rates(&self) -> Rates {
        let d = Rates::default();
        Rates {
            writes_per_second: self.writes_per_second.unwrap_or(d.writes_per_second),
            write_burst: self.write_burst.unwrap_or(d.write_burst),
            events_per_second: self.events_per_second.unwrap_or(d.events_per_second),
            event_burst: self.event_burst.unwrap_or(d.event_burst),
            log_lines_per_second: self.log_lines_per_second.unwrap_or(d.log_lines_per_second),
            log_burst: self.log_burst.unwrap_or(d.log_burst),
            cpu_millicores: self.cpu_millicores.or(d.cpu_millicores),
            body_bytes_per_second: self
                .body_bytes_per_second
                .unwrap_or(d.body_bytes_per_second),
            http_per_second: self.http_per_second.unwrap_or(d.http_per_second),
            http_burst: self.http_burst.unwrap_or(d.http_burst),
            host_memory_bytes: self.memory_bytes(),
        }
    }

    pub(crate) fn deadline(&self) -> Duration {
        self.deadline.unwrap_or(DEFAULT_DEADLINE)
    }

    pub(crate) fn memory_bytes(&self) -> usize {
        let mib = self.memory_mib.unwrap_or(DEFAULT_MEMORY_MIB as u64);
        usize::try_from(mib.saturating_mul(1 << 20)).unwrap_or(usize::MAX)
    }
}

/// How an instance may be reused (`limits.instanceReuse`): for up to `uses` reconciles, none
/// after `idle` unused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reuse {
    pub uses: u32,
    pub idle: Duration,
}

/// A guest's per-guest rates (`capabilities::Budget`), from its limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rates {
    pub(crate) writes_per_second: u32,
    pub(crate) write_burst: u32,
    pub(crate) events_per_second: u32,
    pub(crate) event_burst: u32,
    pub(crate) log_lines_per_second: u32,
    pub(crate) log_burst: u32,
    /// None: no CPU quota.
    pub(crate) cpu_millicores: Option<u32>,
    /// See [`Limits::body_bytes_per_second`].
    pub(crate) body_bytes_per_second: u32,
    /// See [`Limits::http_per_second`].
    pub(crate) http_per_second: u32,
    pub(crate) http_burst: u32,
    /// Host memory held on the guest's behalf at once (bodies being parsed and sent, list
    /// results being copied), over all its reconciles: its instance memory cap
    /// (`memoryMiB`), so the host never holds more for a guest than the guest could hold.
    pub(crate) host_memory_bytes: usize,
}

impl Default for Rates {
    /// Writes: above what one API server takes from one client here (raw patch loops of 4 to
    /// 16 writers manage ~800/s on the dev machine; at the old default of 500/s the host was
    /// held under the server's pace), so a well-behaved guest is never slowed by default; the
    /// API server is protected by the adaptive limit on writes in flight
    /// (`crate::cluster::flowcontrol`), not by this rate. Give an untrusted guest less in its grant.
    ///
    /// Body bytes: 8 MiB/s, far above what an honest guest sends (the controller bench's
    /// guest writes ~0.2 KB status patches, under 0.1 MiB/s even at the full write rate; the
    /// widget guest's applies are smaller still), and low enough that a guest cannot make the
    /// host parse more than a fraction of a core's worth (`serde_json` builds trees at tens to
    /// hundreds of MiB/s, by shape), which is taken from its CPU share besides. A largest body
    /// (3 MiB) always fits in the bucket.
    fn default() -> Self {
        Self {
            writes_per_second: 2000,
            write_burst: 4000,
            events_per_second: 5,
            event_burst: 25,
            log_lines_per_second: 100,
            log_burst: 500,
            cpu_millicores: Some(1000),
            body_bytes_per_second: 8 << 20,
            http_per_second: 20,
            http_burst: 50,
            host_memory_bytes: DEFAULT_MEMORY_MIB << 20,
        }
    }
}

impl Rates {
    /// No practical limit: the offline runner without a configuration, benches.
    pub(crate) fn unlimited() -> Self {
        Self {
            writes_per_second: u32::MAX,
            write_burst: u32::MAX,
            events_per_second: u32::MAX,
            event_burst: u32::MAX,
            log_lines_per_second: u32::MAX,
            log_burst: u32::MAX,
            cpu_millicores: None,
            body_bytes_per_second: u32::MAX,
            http_per_second: u32::MAX,
            http_burst: u32::MAX,
            host_memory_bytes: usize::MAX,
        }
    }
}

/// `guests.<name>.primaryReads`: see [`Grant::primary_reads`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PrimaryReads {
    #[default]
    Share,
    Whole,
}

/// What one guest may do. Everything not listed is denied.
#[derive(Debug, Default, Clone, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Grant {
    /// `active` (default) or `shadow`: in shadow mode the guest runs with this grant but
    /// changes nothing; each intended change is compared with the live state
    /// (see `crate::sandbox::shadow`). Changing it reloads the guest, without a restart.
    #[serde(default)]
    pub mode: Mode,
    /// Kinds the guest may watch and read through the lister (and record events about).
    #[serde(
        default,
        deserialize_with = "crate::cluster::objects::deserialize_kinds"
    )]
    pub read: BTreeSet<Gvk>,
    /// A label selector per read kind (`{v1/ConfigMap: "app=web"}`): the guest reads and
    /// watches only objects of the kind that match it, and the host caches only those. Every
    /// watch of the kind gets the selector added to its own.
    #[serde(default)]
    pub read_selectors: ReadSelectors,
    /// Sharded hosts (`run --shards auto`): what the lister shows of the guest's primary kind.
    /// `share` (default): this replica's share, the cache its controller runs on (objects of
    /// other shares read as absent), so each replica caches only its share. `whole`: every
    /// object, for guests that look up other objects of their own kind (the naming guest lists
    /// a group's CRDs); every replica then caches the whole kind. Other kinds are always whole.
    #[serde(default)]
    pub primary_reads: PrimaryReads,
    /// Kinds (apply, delete, finalizers) and subresources (`.../status`) it may write.
    #[serde(default)]
    pub write: BTreeSet<WriteTarget>,
    /// The verbs it gets on a kind of `write` (`{apps/v1/Deployment: [patch]}`): `create`,
    /// `patch`, `delete` (see `writes`); a kind not named here gets every one.
    #[serde(default)]
    pub write_verbs: WriteVerbs,
    /// Label keys the guest may set on objects it applies: each a key or a prefix ending in
    /// `*` (`example.com/*`). A list is the complete set. Unset: every key outside Kubernetes'
    /// own domains (`kubernetes.io`, `k8s.io` and their subdomains), whose keys act
    /// cluster-wide (`pod-security.kubernetes.io/enforce` on a Namespace, node roles...) and
    /// so are set only where listed here.
    #[serde(default)]
    pub labels: Option<Vec<String>>,
    /// Annotation keys the guest may set on objects it applies, as for `labels`
    /// (`kubernetes.io/service-account.name` on a Secret makes the API server mint a token).
    #[serde(default)]
    pub annotations: Option<Vec<String>>,
    /// Backends (by name under `backends:`) it may call.
    #[serde(default)]
    pub backends: BTreeSet<String>,
    /// Environment variables the guest sees through WASI; none by default.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// URL prefixes the guest may call through `wasi:http/outgoing-handler`, with the methods
    /// and the credentials the host adds (docs/http.md); none by default.
    #[serde(default)]
    pub http: Vec<HttpRule>,
    #[serde(default)]
    pub limits: Limits,
    /// The ServiceAccount (`NAMESPACE/NAME`) every API write of the guest is sent as, so the
    /// API server checks it against that account's RBAC too; its reads are reviewed against
    /// the same account at load and periodically (see `crate::sandbox::identity`).
    #[serde(default)]
    pub service_account: Option<ServiceAccountRef>,
    /// Record reconciles for offline replay (`reconcile --replay`); none by default. Only the
    /// host configuration sets it: a `Reconciler`'s grant cannot (its schema has no such field).
    #[serde(default)]
    pub record: Option<RecordPolicy>,
    /// Allows every read, write and backend: only the offline runner uses this, when it is
    /// given no host configuration.
    #[serde(skip)]
    pub unrestricted: bool,
    /// Where the grant was written, so a refusal says where to add what is missing.
    #[serde(skip)]
    pub written_in: WrittenIn,
}

/// Where a grant was written.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WrittenIn {
    /// `guests.<name>` of the host configuration.
    #[default]
    HostConfig,
    /// `spec.grant` of the `Reconciler` object of this name.
    Reconciler(String),
}

/// A call outside the grant. The message names the guest, the missing right and where to add it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("guest `{guest}` may not {what}: add it to {place}")]
pub(crate) struct Denied {
    pub(crate) guest: String,
    pub(crate) what: String,
    pub(crate) field: &'static str,
    /// Where to add it ([`Grant::place_in_full`]).
    pub(crate) place: String,
}

impl Grant {
    /// Where `field` of this grant of `guest` is written, in short: `guests.NAME.FIELD`, or
    /// `spec.grant.FIELD of Reconciler NAME`.
    pub(crate) fn place(&self, guest: &str, field: &str) -> String {
        match &self.written_in {
            WrittenIn::HostConfig => format!("guests.{guest}.{field}"),
            WrittenIn::Reconciler(name) => format!("spec.grant.{field} of Reconciler {name}"),
        }
    }

    /// [`Self::place`] with the document it is in.
    pub(crate) fn place_in_full(&self, guest: &str, field: &str) -> String {
        let place = self.place(guest, field);
        match &self.written_in {
            WrittenIn::HostConfig => format!("{place} in the host configuration"),
            WrittenIn::Reconciler(_) => {
                format!("{place} (within reconcilers.allow of the host configuration)")
            }
        }
    }

    pub fn unrestricted() -> Self {
        Self {
            unrestricted: true,
            ..Self::default()
        }
    }

    pub(crate) fn may_read(&self, guest: &str, kind: &Gvk) -> Result<(), Denied> {
        if self.unrestricted || self.read.contains(kind) {
            return Ok(());
        }
        Err(Denied {
            guest: guest.to_owned(),
            what: format!("read {kind}"),
            field: "read",
            place: self.place_in_full(guest, "read"),
        })
    }

    /// Whether `verb` on `kind` (or its `subresource`, whose one write is `patch`) is granted.
    pub(crate) fn may_write(
        &self,
        guest: &str,
        kind: &Gvk,
        subresource: Option<&str>,
        verb: Verb,
    ) -> Result<(), Denied> {
        if self.unrestricted || self.write_verbs.allow(&self.write, kind, subresource, verb) {
            return Ok(());
        }
        let wanted = WriteTarget {
            kind: kind.clone(),
            subresource: subresource.map(str::to_owned),
        };
        let listed = self.write.contains(&wanted);
        let (what, field) = if listed {
            (format!("{verb} {wanted}"), "writeVerbs")
        } else {
            (format!("write {wanted}"), "write")
        };
        Err(Denied {
            guest: guest.to_owned(),
            what,
            field,
            place: self.place_in_full(guest, field),
        })
    }

    /// Whether an apply may create `kind`'s objects, not only change existing ones.
    pub(crate) fn may_create(&self, kind: &Gvk) -> bool {
        self.unrestricted || self.write_verbs.of(kind).contains(&Verb::Create)
    }

    pub(crate) fn may_call_backend(&self, guest: &str, backend: &str) -> Result<(), Denied> {
        if self.unrestricted || self.backends.contains(backend) {
            return Ok(());
        }
        Err(Denied {
            guest: guest.to_owned(),
            what: format!("call the `{backend}` backend"),
            field: "backends",
            place: self.place_in_full(guest, "backends"),
        })
    }
}

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

/// How a guest's changes reach the world (`guests.<name>.mode` in the host configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Writes, events and backend calls are made.
    #[default]
    Active,
    /// Nothing is changed; intended changes are compared with the live state.
    Shadow,
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST_YAML: &str = r"
defaults:
  deadline: 3s
  memoryMiB: 48
backends:
  network: {provider: memory}
guests:
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status, v1/Pod/status]
    backends: [network]
    limits: {deadline: 250ms}
";

    /// `reconcilers.verify.keyless`: the trusted root is found beside the configuration file,
    /// and a root or identity that cannot be used stops the host at start, naming it.
    #[test]
    fn a_keyless_policy_reads_its_trusted_root_beside_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let root = r#"{"certificateAuthorities": [{"certChain": {"certificates": [{"rawBytes": "AA=="}]}}]}"#;
        std::fs::write(dir.path().join("trusted_root.json"), root).unwrap();
        let host_yaml = dir.path().join("host.yaml");
        let config = |identity: &str| {
            format!(
                "reconcilers:\n  verify:\n    required: true\n    keyless:\n      trustedRoot: trusted_root.json\n      identities: [{identity}]\n"
            )
        };
        let parsed = HostConfig::parse(
            &config("{issuer: 'https://issuer.example', subject: builder@example.com}"),
            &host_yaml,
        )
        .unwrap();
        let verify = parsed.reconcilers.unwrap().verify.unwrap();
        assert_eq!(
            verify.keyless.as_ref().unwrap().trusted_root,
            dir.path().join("trusted_root.json")
        );
        assert!(verify.trust_policy().unwrap().is_some());
        for (identity, said) in [
            (
                "{issuer: 'https://issuer.example'}",
                "exactly one of subject",
            ),
            ("{issuer: x, subjectRegExp: '('}", "subjectRegExp"),
        ] {
            let e = HostConfig::parse(&config(identity), &host_yaml).unwrap_err();
            assert!(e.to_string().contains(said), "{e}");
        }
        std::fs::remove_file(dir.path().join("trusted_root.json")).unwrap();
        let e = HostConfig::parse(&config("{issuer: x, subject: y}"), &host_yaml).unwrap_err();
        assert!(e.to_string().contains("trusted_root.json"), "{e}");
    }

    /// `reconcilers.tenants[N].verify`: its keys are read beside the file as the host's are;
    /// one that cannot be read, or a rule requiring less than the host, stops the host at
    /// start, naming the rule.
    #[test]
    fn a_tenant_rules_verify_reads_its_keys_beside_the_file_and_never_weakens_the_hosts() {
        use p256::pkcs8::{EncodePublicKey as _, LineEnding};
        let dir = tempfile::tempdir().unwrap();
        let pem = p256::ecdsa::SigningKey::from_slice(&[3; 32])
            .unwrap()
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        std::fs::create_dir(dir.path().join("keys")).unwrap();
        std::fs::write(dir.path().join("keys/a.pub"), &pem).unwrap();
        std::fs::write(dir.path().join("keys/host.pub"), &pem).unwrap();
        let host_yaml = dir.path().join("host.yaml");
        let config = |host: &str, rule: &str| {
            format!(
                "reconcilers:\n  {host}\n  tenants:\n  - {{namespaces: [x]}}\n  - {{name: team-a, namespaces: [a], verify: {rule}}}\n"
            )
        };
        let parsed = HostConfig::parse(
            &config(
                "reportUnmatched: false",
                "{required: true, keys: [keys/a.pub]}",
            ),
            &host_yaml,
        )
        .unwrap();
        let settings = parsed.reconcilers.unwrap();
        let verify = settings.tenants[1].verify.as_ref().unwrap();
        assert_eq!(verify.keys, [dir.path().join("keys/a.pub")]);
        assert!(verify.trust_policy().unwrap().is_some());
        assert!(settings.tenants[0].verify.is_none(), "inherits the host's");

        let host = "verify: {required: true, keys: [keys/host.pub]}";
        for (rule, said) in [
            (
                "{required: false}",
                "reconcilers.tenants[1] (team-a).verify.required is false",
            ),
            ("{}", "reconcilers.tenants[1] (team-a).verify.required"),
            (
                "{required: true, keys: [keys/gone.pub]}",
                "reconcilers.tenants[1] (team-a).verify: ",
            ),
            (
                "{required: true}",
                "reconcilers.tenants[1] (team-a).verify: no key and no keyless identity",
            ),
        ] {
            let e = HostConfig::parse(&config(host, rule), &host_yaml).unwrap_err();
            assert!(e.to_string().contains(said), "{rule}: {e}");
        }
        let e = HostConfig::parse(
            &config(host, "{required: true, keys: [keys/gone.pub]}"),
            &host_yaml,
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .contains(&dir.path().join("keys/gone.pub").display().to_string()),
            "the path as resolved: {e}"
        );
        // Stronger or different keys under a host that requires signatures: accepted.
        HostConfig::parse(
            &config(host, "{required: true, keys: [keys/a.pub]}"),
            &host_yaml,
        )
        .unwrap();
        // Under a host that requires none, a rule may say so too.
        HostConfig::parse(
            &config("reportUnmatched: false", "{required: false}"),
            &host_yaml,
        )
        .unwrap();
    }

    #[test]
    fn a_selector_is_within_another_when_it_carries_each_of_its_requirements() {
        assert!(selector_within("app=web,tier=db", "app=web"));
        assert!(selector_within("tier=db, app=web", "app=web"));
        assert!(selector_within("app=web", "app=web"));
        assert!(!selector_within("tier=db", "app=web"));
        assert!(!selector_within("app=other", "app=web"));
        assert!(
            !selector_within("", "app=web"),
            "everything is not within app=web"
        );
        assert!(
            !selector_within("a in (", "app=web"),
            "an unparsable selector"
        );
    }

    #[test]
    fn a_tenant_rule_must_select_some_namespaces_and_not_all() {
        for (rule, says) in [
            ("{namespaceSelector: 'a in ('}", "namespaceSelector:"),
            ("{namespaceSelector: ''}", "selects every namespace"),
            ("{allow: {}}", "selects no namespace"),
            (
                "{namespaces: [a], serviceAccount: 'Bad_Name'}",
                "serviceAccount",
            ),
        ] {
            let text = format!("reconcilers:\n  tenants: [{rule}]\n");
            let err = HostConfig::parse(&text, Path::new("h.yaml"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("reconcilers.tenants[0]") && err.contains(says),
                "{rule}: {err}"
            );
        }
        let ok = "reconcilers:\n  tenants: [{namespaceSelector: tenant=true}, {namespaces: [x]}]\n";
        let config = HostConfig::parse(ok, Path::new("h.yaml")).unwrap();
        let settings = config.reconcilers.unwrap();
        let labels = BTreeMap::from([("tenant".to_owned(), "true".to_owned())]);
        assert_eq!(settings.tenant("any", &labels).map(|(i, _)| i), Some(0));
        assert_eq!(
            settings.tenant("x", &BTreeMap::new()).map(|(i, _)| i),
            Some(1)
        );
        assert!(settings.tenant("y", &BTreeMap::new()).is_none());
    }

    #[test]
    fn read_selectors_are_parsed_per_kind_and_narrow_a_watch() {
        let config = HostConfig::parse(
            "guests:\n  a:\n    read: [v1/ConfigMap]\n    readSelectors: {v1/ConfigMap: 'app=web'}\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let grant = &config.guests["a"];
        let config_map: Gvk = "v1/ConfigMap".parse().unwrap();
        let secret: Gvk = "v1/Secret".parse().unwrap();
        assert_eq!(grant.read_selectors.get(&config_map), Some("app=web"));
        assert_eq!(
            grant
                .read_selectors
                .narrow(&config_map, Some("tier=db"))
                .as_deref(),
            Some("app=web,tier=db")
        );
        assert_eq!(grant.read_selectors.narrow(&secret, None), None);
        let bad = HostConfig::parse(
            "guests:\n  a:\n    readSelectors: {v1/ConfigMap: 'a in ('}\n",
            Path::new("host.yaml"),
        )
        .unwrap_err();
        assert!(
            bad.to_string().contains("readSelectors v1/ConfigMap"),
            "{bad}"
        );
    }

    #[test]
    fn parses_grants_and_fills_limits_from_defaults() {
        let config = HostConfig::parse(HOST_YAML, Path::new("host.yaml")).unwrap();
        let grant = config.grant("network").unwrap();
        assert_eq!(grant.limits.deadline(), Duration::from_millis(250));
        assert_eq!(grant.limits.memory_bytes(), 48 << 20);
        let network = Gvk::new("samplecrd.k8s.io", "v1", "Network");
        assert!(grant.may_read("network", &network).is_ok());
        for verb in Verb::ALL {
            assert!(grant.may_write("network", &network, None, verb).is_ok());
        }
        assert!(
            grant
                .may_write("network", &network, Some("status"), Verb::Patch)
                .is_ok()
        );
        assert!(
            grant
                .may_write(
                    "network",
                    &Gvk::new("", "v1", "Pod"),
                    Some("status"),
                    Verb::Patch
                )
                .is_ok()
        );
        assert!(grant.may_call_backend("network", "network").is_ok());
        assert!(config.grant("other").is_none());
    }

    #[test]
    fn denials_say_what_is_missing_and_where_to_add_it() {
        let config = HostConfig::parse(HOST_YAML, Path::new("host.yaml")).unwrap();
        let grant = config.grant("network").unwrap();
        let secret = Gvk::new("", "v1", "Secret");
        assert_eq!(
            grant.may_read("network", &secret).unwrap_err().to_string(),
            "guest `network` may not read v1/Secret: add it to guests.network.read in the host configuration"
        );
        let pod = Gvk::new("", "v1", "Pod");
        assert_eq!(
            grant
                .may_write("network", &pod, None, Verb::Patch)
                .unwrap_err()
                .what,
            "write v1/Pod"
        );
    }

    #[test]
    fn write_verbs_narrow_a_kind_and_are_checked_against_write_where_they_are_written() {
        let yaml = "guests:\n  reloader:\n    write: [apps/v1/Deployment]\n    writeVerbs: {apps/v1/Deployment: [patch]}\n";
        let config = HostConfig::parse(yaml, Path::new("host.yaml")).unwrap();
        let grant = config.grant("reloader").unwrap();
        let deployment = Gvk::new("apps", "v1", "Deployment");
        assert!(
            grant
                .may_write("reloader", &deployment, None, Verb::Patch)
                .is_ok()
        );
        assert!(!grant.may_create(&deployment));
        assert_eq!(
            grant
                .may_write("reloader", &deployment, None, Verb::Delete)
                .unwrap_err()
                .to_string(),
            "guest `reloader` may not delete apps/v1/Deployment: add it to guests.reloader.writeVerbs in the host configuration"
        );
        for (yaml, says) in [
            (
                "guests:\n  a:\n    write: [v1/ConfigMap]\n    writeVerbs: {v1/Secret: [patch]}\n",
                "guests.a.writeVerbs names v1/Secret, which write does not list",
            ),
            (
                "reconcilers:\n  allow:\n    writeVerbs: {v1/Secret: [delete]}\n",
                "reconcilers.allow.writeVerbs names v1/Secret",
            ),
            (
                "reconcilers:\n  tenants:\n  - namespaces: [a]\n    allow:\n      writeVerbs: {v1/Secret: [delete]}\n",
                "reconcilers.tenants[0]: allow.writeVerbs names v1/Secret",
            ),
        ] {
            let error = HostConfig::parse(yaml, Path::new("host.yaml"))
                .unwrap_err()
                .to_string();
            assert!(error.contains(says), "{error}");
        }
    }

    #[test]
    fn refuses_unknown_fields_and_unconfigured_backends() {
        let typo = "guests:\n  a:\n    reads: [v1/Pod]\n";
        let err = HostConfig::parse(typo, Path::new("h.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("unknown field `reads`"), "{err}");
        let missing = "guests:\n  a:\n    backends: [network]\n";
        let err = HostConfig::parse(missing, Path::new("h.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("`network`, which is not configured"), "{err}");
        let bad_kind = "guests:\n  a:\n    read: [Network]\n";
        let err = HostConfig::parse(bad_kind, Path::new("h.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("group/version/Kind"), "{err}");
    }

    #[test]
    fn the_example_configuration_parses() {
        let path = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../examples/host.yaml"
        ));
        let config = HostConfig::load(path).unwrap();
        assert_eq!(config.max_concurrency(), 16);
        let grant = config.grant("network").unwrap();
        assert_eq!(grant.limits.rates().writes_per_second, 200);
    }

    #[test]
    fn a_grant_above_the_host_concurrency_cap_is_refused() {
        let text = "maxConcurrency: 4\nguests:\n  a:\n    limits: {concurrency: 8}\n";
        let err = HostConfig::parse(text, Path::new("h.yaml"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("above maxConcurrency (4)"), "{err}");
        let rates = "guests:\n  a:\n    limits: {eventsPerSecond: 2, logBurst: 7}\n";
        let grant = HostConfig::parse(rates, Path::new("h.yaml"))
            .unwrap()
            .grant("a")
            .unwrap();
        let r = grant.limits.rates();
        assert_eq!(
            (r.events_per_second, r.log_burst, r.writes_per_second),
            (2, 7, 2000)
        );
    }

    #[test]
    fn instance_reuse_is_opt_in_and_beyond_a_ceiling_that_does_not_allow_it() {
        let text = "guests:\n  a:\n    limits: {instanceReuse: 50, instanceIdle: 5s}\n  b: {}\n";
        let config = HostConfig::parse(text, Path::new("h.yaml")).unwrap();
        let a = config.grant("a").unwrap().limits.reuse();
        assert_eq!(
            a,
            Some(Reuse {
                uses: 50,
                idle: Duration::from_secs(5)
            })
        );
        assert_eq!(config.grant("b").unwrap().limits.reuse(), None);
        let one = Limits {
            instance_reuse: Some(1),
            ..Limits::default()
        };
        assert_eq!(one.reuse(), None, "1 is a fresh instance per reconcile");
        // A Reconciler's grant: no reuse unless the ceiling allows it.
        let asks = Limits {
            instance_reuse: Some(50),
            ..Limits::default()
        };
        let above = asks.above(&Limits::default(), 16);
        assert_eq!(above, ["limits.instanceReuse 50 (at most 1)"]);
        let allows = Limits {
            instance_reuse: Some(100),
            ..Limits::default()
        };
        assert!(asks.above(&allows, 16).is_empty());
    }

    #[test]
    fn policy_parses_with_a_default_grace() {
        let p: FinalizerPolicy = serde_yaml::from_str("onUnload: release\ngrace: 30s").unwrap();
        assert_eq!(
            (p.on_unload, p.grace()),
            (OnUnload::Release, Duration::from_secs(30))
        );
        let p = FinalizerPolicy::default();
        assert_eq!(
            (p.on_unload, p.grace()),
            (OnUnload::Keep, FinalizerPolicy::DEFAULT_GRACE)
        );
        assert!(serde_yaml::from_str::<FinalizerPolicy>("onUnload: drop").is_err());
    }
}
