//! `reconcilers:`: guests declared as objects, and what bounds them: the grant ceiling
//! (`allow`), signatures (`verify`), and the tenant rules that open namespaces to teams.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{
    AllowedAccount, ConfigError, HttpRule, Limits, Mode, ReadSelectors, WriteTarget, WriteVerbs,
};
use crate::cluster::objects::Gvk;

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
    pub(super) fn read_tenant_verify(
        &mut self,
        base: &Path,
        path: &Path,
    ) -> Result<(), ConfigError> {
        let host_requires = self.verify.as_ref().is_some_and(|v| v.required);
        for (i, rule) in self.tenants.iter_mut().enumerate() {
            let label = rule.label(i);
            let Some(verify) = rule.verify.as_mut() else {
                continue;
            };
            let invalid = |message: String| ConfigError::invalid(path, message);
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
    pub(super) fn resolve_from(&mut self, base: &Path) {
        for key in &mut self.keys {
            *key = base.join(&*key);
        }
        if let Some(keyless) = &mut self.keyless {
            keyless.trusted_root = base.join(&keyless.trusted_root);
        }
    }

    /// What signatures must be made by when they are required, or why it cannot be read.
    pub(crate) fn trust_policy(
        &self,
    ) -> Result<Option<crate::oci::TrustPolicy>, crate::oci::TrustError> {
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

impl Allow {
    /// The most a Reconciler's limits may be under this ceiling: its `limits`, `defaults`
    /// (the host configuration's) where it is silent.
    pub(crate) fn ceiling(&self, defaults: &Limits) -> Limits {
        self.limits
            .as_ref()
            .map_or_else(|| defaults.clone(), |l| l.or(defaults))
    }
}
