//! Judging a loaded guest against the host configuration: the grant of its source item (the
//! rule of [`super::source`], applied here and nowhere else) and whether that grant and the
//! host's caps cover what its manifest and imports ask. `run` judges every guest this way at
//! load and on every configuration change; `check`, `reconcile` and `rbac` judge a file the
//! same way. Cost: no compilation, a walk over the capabilities' requirements.

use crate::config::{Allow, Grant, HostConfig, WrittenIn};
use crate::sandbox::capabilities::{LoadCheck, Missing, reserved_key};
use crate::sandbox::runtime::{LoadError, LoadedGuest};

use super::source::{GrantKey, NotItsGrant, Origin};

/// A guest that passed every check, with what it was granted. Its manifest name is the name
/// it runs under: its grant key (`name`, or `name@file-stem` for a second version).
#[derive(Debug)]
pub struct ActiveGuest {
    pub loaded: LoadedGuest,
    pub grant: Grant,
    /// The name it declared and the source item it came from, which keyed its grant.
    pub(crate) key: GrantKey,
    /// The item as it was when this version was admitted (a `Reconciler` at the generation
    /// whose grant this is).
    pub(crate) origin: Origin,
    /// The trusted key whose signature admitted it, for a pulled module when signatures are
    /// required.
    pub(crate) signed_by: Option<String>,
}

impl ActiveGuest {
    pub fn name(&self) -> &str {
        &self.loaded.manifest.name
    }

    /// A namespaced `Reconciler`'s namespace, to which its guest is held.
    pub(crate) fn tenant(&self) -> Option<&str> {
        self.origin.tenant().map(|t| t.namespace.as_str())
    }

    /// The same version with its grant in shadow mode (a rollout's shadow step).
    pub(crate) fn in_shadow(&self) -> Self {
        let mut grant = self.grant.clone();
        grant.mode = crate::config::Mode::Shadow;
        Self {
            loaded: self.loaded.clone(),
            grant,
            key: self.key.clone(),
            origin: self.origin.clone(),
            signed_by: self.signed_by.clone(),
        }
    }

    /// Judges a guest freshly loaded from `origin` (its manifest name is the one it declares).
    pub(crate) fn admit(
        origin: &Origin,
        loaded: LoadedGuest,
        config: &HostConfig,
    ) -> Result<Self, GrantError> {
        let declared = loaded.manifest.name.clone();
        judge(origin, &declared, loaded, config)
    }

    /// The same version judged again against `config` as `origin` now is, from the name it
    /// declared, not the key it ran under: its grant (or key) may have changed, or be gone.
    pub(crate) fn regrant(&self, origin: &Origin, config: &HostConfig) -> Result<Self, GrantError> {
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
    if let Some(tenant) = origin.tenant() {
        hold_to_namespace(origin, &mut loaded, &tenant.namespace)?;
    }
    let manifest = &loaded.manifest;
    let grant = match origin.own_grant() {
        Some(own) => Some(object_grant(origin, &manifest.name, own, config)?),
        None => config.grant(&manifest.name),
    };
    let Some(grant) = grant else {
        let mut needs = vec![manifest.primary.to_string()];
        needs.extend(manifest.secondary.iter().map(|s| s.kind.to_string()));
        return Err(GrantError::NoGrant {
            file: origin.name().to_owned(),
            guest: manifest.name.clone(),
            needs: needs.join(", "),
        });
    };
    if config.identity.required && grant.service_account.is_none() {
        return Err(GrantError::IdentityRequired {
            file: origin.name().to_owned(),
            guest: manifest.name.clone(),
            place: grant.place_in_full(&manifest.name, "serviceAccount"),
        });
    }
    check_within_grant(&loaded, &grant, config).map_err(|missing| GrantError::BeyondGrant {
        file: origin.name().to_owned(),
        guest: loaded.manifest.name.clone(),
        missing,
    })?;
    Ok(ActiveGuest {
        loaded,
        grant,
        key,
        origin: origin.clone(),
        signed_by: None,
    })
}

/// The grant a `Reconciler` object gives its guest (running as `guest`), if the host's
/// ceiling (`reconcilers.allow`) covers it and no grant of the host configuration claims the
/// name: the configuration's guests come first, and a Reconciler never overrides one.
fn object_grant(
    origin: &Origin,
    guest: &str,
    own: &Grant,
    config: &HostConfig,
) -> Result<Grant, GrantError> {
    let object = origin.stem().to_owned();
    let Some(settings) = &config.reconcilers else {
        return Err(GrantError::NotWatching { object });
    };
    if config.guests.contains_key(guest) {
        return Err(GrantError::Claimed {
            object,
            guest: guest.to_owned(),
        });
    }
    let (allow, rule, account) = match origin.tenant() {
        None => (&settings.allow, None, None),
        Some(tenant) => {
            let Some((index, rule)) = settings.tenant(&tenant.namespace, &tenant.labels) else {
                return Err(GrantError::NoTenantRule {
                    object,
                    namespace: tenant.namespace.clone(),
                });
            };
            let account = tenant
                .service_account
                .clone()
                .unwrap_or_else(|| rule.service_account.clone());
            let account = format!("{}/{account}", tenant.namespace)
                .parse::<crate::config::ServiceAccountRef>()
                .map_err(|e| GrantError::OutsideNamespace {
                    object: object.clone(),
                    rule: rule.label(index),
                    beyond: format!("spec.serviceAccountName: {e}"),
                })?;
            (&rule.allow, Some(rule.label(index)), Some(account))
        }
    };
    let beyond = beyond_allowed(own, allow, config);
    if let Some(rule) = rule.clone() {
        // A tenant's guest writes as an account of its own namespace, never one it names.
        if own.service_account.is_some() {
            return Err(GrantError::OutsideNamespace {
                object,
                rule,
                beyond: "spec.grant.serviceAccount (a namespaced Reconciler writes as spec.serviceAccountName, an account of its own namespace)".into(),
            });
        }
        let beyond: Vec<String> = beyond
            .into_iter()
            .filter(|b| !b.starts_with("serviceAccount "))
            .collect();
        if !beyond.is_empty() {
            return Err(GrantError::BeyondTenantRule {
                object,
                rule,
                beyond: beyond.join(", "),
            });
        }
    } else if !beyond.is_empty() {
        return Err(GrantError::BeyondAllowed {
            object,
            beyond: beyond.join(", "),
        });
    }
    let mut grant = config.with_defaults(own);
    // What the Reconciler left out takes defaults and built-ins, which the ceiling bounds too.
    grant.limits = grant
        .limits
        .capped_by(&allow.ceiling(&config.defaults), config.max_concurrency());
    if account.is_some() {
        grant.service_account = account;
    }
    grant.written_in = WrittenIn::Reconciler(object);
    Ok(grant)
}

/// Holds a namespaced Reconciler's guest to `namespace`: its primary watch and every
/// secondary watch are in it (a manifest or watch that asks for another namespace is
/// refused), so its informers, its keys and its enqueues are too.
fn hold_to_namespace(
    origin: &Origin,
    loaded: &mut LoadedGuest,
    namespace: &str,
) -> Result<(), GrantError> {
    let manifest = &mut loaded.manifest;
    let outside = |what: String| GrantError::OutsideNamespace {
        object: origin.stem().to_owned(),
        rule: "its namespace".into(),
        beyond: what,
    };
    match manifest.namespace.as_deref() {
        Some(asked) if asked != namespace => {
            return Err(outside(format!("the manifest watches namespace {asked}")));
        }
        _ => manifest.namespace = Some(namespace.to_owned()),
    }
    for (i, watch) in manifest.secondary.iter_mut().enumerate() {
        match watch.namespace.as_deref() {
            Some(asked) if asked != namespace => {
                return Err(outside(format!(
                    "secondary[{i}] ({}) watches namespace {asked}",
                    watch.kind
                )));
            }
            _ => watch.namespace = Some(namespace.to_owned()),
        }
    }
    Ok(())
}

/// Everything `grant` asks beyond `allow`, each entry named as it is written in the grant.
fn beyond_allowed(grant: &Grant, allow: &Allow, config: &HostConfig) -> Vec<String> {
    let mut beyond = Vec::new();
    beyond.extend(
        grant
            .read
            .difference(&allow.read)
            .map(|kind| format!("read {kind}")),
    );
    for (kind, outer) in allow.read_selectors.iter() {
        let within = grant
            .read_selectors
            .get(kind)
            .is_some_and(|inner| crate::config::selector_within(inner, outer));
        if grant.read.contains(kind) && !within {
            beyond.push(format!(
                "read {kind} without readSelectors {kind} carrying {outer:?}"
            ));
        }
    }
    beyond.extend(
        grant
            .write
            .difference(&allow.write)
            .map(|target| format!("write {target}")),
    );
    beyond.extend(
        grant
            .write_verbs
            .beyond(&grant.write, &allow.write_verbs, &allow.write),
    );
    beyond.extend(
        grant
            .backends
            .difference(&allow.backends)
            .map(|backend| format!("backend {backend}")),
    );
    beyond.extend(
        grant
            .http
            .iter()
            .filter(|rule| !allow.http.iter().any(|allowed| allowed.covers(rule)))
            .map(|rule| format!("http {} (methods {:?} and its credentials must lie within one rule of reconcilers.allow.http)", rule.prefix, rule.methods())),
    );
    if let Some(account) = &grant.service_account
        && !allow.service_accounts.iter().any(|a| a.covers(account))
    {
        beyond.push(format!("serviceAccount {account}"));
    }
    for (field, mine, allowed) in [
        ("labels", &grant.labels, &allow.labels),
        ("annotations", &grant.annotations, &allow.annotations),
    ] {
        let entries = mine.iter().flatten();
        beyond.extend(
            entries
                .filter(|entry| may_touch_reserved(entry) && !allowed.contains(entry))
                .map(|entry| format!("{field} {entry}")),
        );
    }
    if let Some(modes) = &allow.modes
        && !modes.contains(&grant.mode)
    {
        let name = |m: &crate::config::Mode| match m {
            crate::config::Mode::Active => "active",
            crate::config::Mode::Shadow => "shadow",
        };
        let allowed: Vec<&str> = modes.iter().map(name).collect();
        beyond.push(format!(
            "mode {} (allowed: {})",
            name(&grant.mode),
            if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed.join(", ")
            }
        ));
    }
    beyond.extend(
        grant
            .limits
            .above(&allow.ceiling(&config.defaults), config.max_concurrency()),
    );
    beyond
}

/// Whether a grant's label or annotation entry (a key, or a prefix ending in `*`) may match a
/// key of Kubernetes' own domains: a prefix is safe only once its domain is complete.
fn may_touch_reserved(entry: &str) -> bool {
    match entry.strip_suffix('*') {
        Some(prefix) => !prefix.contains('/') || reserved_key(prefix),
        None => reserved_key(entry),
    }
}

/// Checks a loaded guest against its grant and the host's caps; lists everything missing at
/// once. Each capability states its own requirement (`capabilities::check_grant`).
fn check_within_grant(
    loaded: &LoadedGuest,
    grant: &Grant,
    config: &HostConfig,
) -> Result<(), Missing> {
    let manifest = &loaded.manifest;
    let mut missing = Vec::new();
    let cap = config.max_concurrency();
    if manifest.concurrency > cap {
        missing.push(format!(
            "concurrency {} (the host allows at most {cap} per guest: maxConcurrency)",
            manifest.concurrency
        ));
    }
    if let Err(more) = crate::sandbox::capabilities::check_grant(&LoadCheck {
        manifest,
        imports: &loaded.imports,
        grant,
        config,
    }) {
        missing.extend(more.0);
    }
    if missing.is_empty() {
        Ok(())
    } else {
        Err(Missing(missing))
    }
}

/// Why the configuration does not admit a guest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrantError {
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
        missing: Missing,
    },
    #[error(
        "Reconciler {object}: spec.grant asks for more than the host allows any Reconciler (reconcilers.allow in the host configuration): {beyond}"
    )]
    BeyondAllowed { object: String, beyond: String },
    #[error(
        "Reconciler {object}: guest `{guest}` is granted by the host configuration (guests.{guest}), which comes first; rename the Reconciler or remove that grant"
    )]
    Claimed { object: String, guest: String },
    #[error(
        "Reconciler {object}: the host configuration has no reconcilers: section, so no Reconciler runs"
    )]
    NotWatching { object: String },
    #[error(
        "Reconciler {object}: spec.grant asks for more than {rule} allows a Reconciler of its namespace: {beyond}"
    )]
    BeyondTenantRule {
        object: String,
        rule: String,
        beyond: String,
    },
    #[error(
        "Reconciler {object}: a namespaced Reconciler acts only in its own namespace ({rule}); beyond it: {beyond}"
    )]
    OutsideNamespace {
        object: String,
        rule: String,
        beyond: String,
    },
    #[error(
        "Reconciler {object}: no rule of reconcilers.tenants selects namespace {namespace}; the host runs no Reconciler of it"
    )]
    NoTenantRule { object: String, namespace: String },
    #[error(
        "{file}: guest `{guest}` names no ServiceAccount and the host requires one for every guest (identity.required): add serviceAccount: NAMESPACE/NAME to {place}"
    )]
    IdentityRequired {
        file: String,
        guest: String,
        place: String,
    },
}

/// Why a guest's own ServiceAccount does not admit it (the API server's access review).
#[derive(Debug, thiserror::Error)]
pub(crate) enum IdentityError {
    #[error(
        "{file}: guest `{guest}` is granted reads its ServiceAccount {account} may not make: {missing}; bind the account to a role with them (reconciler-host rbac prints it) or narrow the grant's read"
    )]
    ReadsBeyondIdentity {
        file: String,
        guest: String,
        account: String,
        missing: String,
    },
    #[error("{file}: the access review of ServiceAccount {account} failed, trying again: {error}")]
    ReviewFailed {
        file: String,
        account: String,
        error: String,
    },
}

/// Why a guest set refused a guest.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RefusalError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Grant(#[from] GrantError),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error(
        "{file}: guest name `{guest}` is already used by {other}; each guest needs a unique manifest name"
    )]
    DuplicateName {
        file: String,
        guest: String,
        other: String,
    },
    #[error(
        "{file}: finalizer `{finalizer}` on {kind} is held by guest `{holder}` ({other}); a finalizer belongs to one guest, which alone may remove it: choose another finalizer name, or run this guest in shadow mode"
    )]
    FinalizerConflict {
        file: String,
        finalizer: String,
        kind: String,
        holder: String,
        other: String,
    },
    #[error(
        "{file}: finalizer `{finalizer}` on {kind} is reserved by a guest of the host's operator; a tenant's guest may not declare it (nor hold it while that guest runs, in any mode): choose a finalizer name of your own domain"
    )]
    FinalizerReserved {
        file: String,
        finalizer: String,
        kind: String,
    },
}

impl RefusalError {
    /// The refusal's cause in one word, as a `Reconciler`'s `Ready` condition gives it.
    pub(crate) fn cause(&self) -> &'static str {
        match self {
            RefusalError::Load(LoadError::Compile { .. }) => "NotAComponent",
            RefusalError::Load(LoadError::WrongWorld { .. }) => "WrongWorld",
            RefusalError::Load(
                LoadError::Manifest { .. }
                | LoadError::ManifestDeadline { .. }
                | LoadError::InvalidManifest { .. },
            ) => "ManifestRefused",
            RefusalError::Load(LoadError::Busy { .. }) => "Busy",
            RefusalError::Grant(GrantError::BeyondAllowed { .. }) => "GrantBeyondAllowed",
            RefusalError::Grant(GrantError::BeyondGrant { .. }) => "BeyondGrant",
            RefusalError::Grant(GrantError::NoGrant { .. }) => "NoGrant",
            RefusalError::Grant(GrantError::NotItsGrant(_)) => "NotItsGrant",
            RefusalError::Grant(GrantError::NotWatching { .. }) => "ReconcilersOff",
            RefusalError::Grant(GrantError::BeyondTenantRule { .. }) => "GrantBeyondTenantRule",
            RefusalError::Grant(GrantError::OutsideNamespace { .. }) => "OutsideNamespace",
            RefusalError::Grant(GrantError::NoTenantRule { .. }) => "NoTenantRule",
            RefusalError::Grant(GrantError::Claimed { .. })
            | RefusalError::DuplicateName { .. } => "NameConflict",
            RefusalError::FinalizerConflict { .. } => "FinalizerConflict",
            RefusalError::FinalizerReserved { .. } => "FinalizerReserved",
            RefusalError::Grant(GrantError::IdentityRequired { .. }) => "IdentityRequired",
            RefusalError::Identity(IdentityError::ReadsBeyondIdentity { .. }) => {
                "ReadsBeyondIdentity"
            }
            RefusalError::Identity(IdentityError::ReviewFailed { .. }) => "AccessReviewFailed",
        }
    }

    /// A refusal that may pass by itself (no free instance slot, the API server unreachable
    /// for an access review): not this content's verdict; the item is looked at again soon.
    pub(crate) fn is_transient(&self) -> bool {
        match self {
            RefusalError::Load(e) => e.is_transient(),
            RefusalError::Identity(IdentityError::ReviewFailed { .. }) => true,
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(text: &str) -> HostConfig {
        HostConfig::parse(text, Path::new("host.yaml")).unwrap()
    }

    fn grant(yaml: &str) -> Grant {
        serde_yaml::from_str(yaml).unwrap()
    }

    const HOST: &str = r"
defaults: {memoryMiB: 48}
maxConcurrency: 4
backends:
  network: {provider: memory}
reconcilers:
  allow:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget/status]
    backends: [network]
    labels: [app.kubernetes.io/name]
";

    #[test]
    fn a_grant_within_the_ceiling_passes_and_each_excess_is_named_as_written() {
        let config = config(HOST);
        let allow = &config.reconcilers.as_ref().unwrap().allow;
        let within = grant(
            "{read: [v1/ConfigMap], write: [test.reconciler.dev/v1/Widget/status], backends: [network], labels: [app.kubernetes.io/name, example.com/*], limits: {memoryMiB: 32, concurrency: 4}}",
        );
        assert_eq!(
            beyond_allowed(&within, allow, &config),
            Vec::<String>::new()
        );

        let beyond = grant(
            "{read: [v1/Secret], write: [v1/ConfigMap], labels: [kubernetes.io/*, team], annotations: [kub*], limits: {memoryMiB: 64, concurrency: 5, cpuMillicores: 2000}}",
        );
        assert_eq!(
            beyond_allowed(&beyond, allow, &config),
            vec![
                "read v1/Secret",
                "write v1/ConfigMap",
                "labels kubernetes.io/*",
                "annotations kub*",
                "limits.memoryMiB 64 (at most 48)",
                "limits.concurrency 5 (at most 4)",
                "limits.cpuMillicores 2000 (at most 1000)",
            ]
        );
    }

    #[test]
    fn a_reconciler_gets_no_verb_on_a_kind_beyond_those_the_ceiling_names() {
        let config = config(
            &format!("{HOST}    writeVerbs: {{apps/v1/Deployment: [patch]}}\n").replace(
                "write: [test.reconciler.dev/v1/Widget/status]",
                "write: [test.reconciler.dev/v1/Widget/status, apps/v1/Deployment]",
            ),
        );
        let allow = &config.reconcilers.as_ref().unwrap().allow;
        let patch =
            grant("{write: [apps/v1/Deployment], writeVerbs: {apps/v1/Deployment: [patch]}}");
        assert_eq!(beyond_allowed(&patch, allow, &config), Vec::<String>::new());
        // Unchanged grants keep their meaning: every verb, so beyond this ceiling.
        let every = grant("{write: [apps/v1/Deployment]}");
        assert_eq!(
            beyond_allowed(&every, allow, &config),
            [
                "writeVerbs create apps/v1/Deployment",
                "writeVerbs delete apps/v1/Deployment"
            ]
        );
    }

    #[test]
    fn a_reconcilers_http_rules_must_lie_within_one_of_the_ceiling_with_its_credentials() {
        let config = config(&format!(
            "{HOST}    http:\n    - prefix: http://127.0.0.1:8081/api/v1\n      methods: [GET, PATCH]\n      headers:\n        X-API-Key: {{secretKeyRef: {{name: pdns, key: api-key}}}}\n    limits: {{httpPerSecond: 10}}\n"
        ));
        let allow = &config.reconcilers.as_ref().unwrap().allow;
        let within = grant(
            "{http: [{prefix: 'http://127.0.0.1:8081/api/v1/servers/localhost', methods: [PATCH], headers: {X-API-Key: {secretKeyRef: {name: pdns, key: api-key}}}}], limits: {httpPerSecond: 5}}",
        );
        assert_eq!(
            beyond_allowed(&within, allow, &config),
            Vec::<String>::new()
        );
        let beyond = grant(
            "{http: [{prefix: 'http://127.0.0.1:8081/api/v1', methods: [DELETE]}, {prefix: 'http://127.0.0.1:8081/api/v1', methods: [GET], headers: {X-API-Key: {secretKeyRef: {name: other-team, key: api-key}}}}, {prefix: 'https://evil.example/', methods: [GET]}], limits: {httpPerSecond: 50}}",
        );
        let refused = beyond_allowed(&beyond, allow, &config);
        assert_eq!(refused.len(), 4, "{refused:?}");
        assert!(
            refused[0].starts_with("http http://127.0.0.1:8081/api/v1 (methods {\"DELETE\"}"),
            "{refused:?}"
        );
        assert!(
            refused[1].starts_with("http http://127.0.0.1:8081/api/v1 (methods {\"GET\"}"),
            "a Secret the ceiling does not name: {refused:?}"
        );
        assert!(
            refused[2].starts_with("http https://evil.example:443/"),
            "{refused:?}"
        );
        assert_eq!(refused[3], "limits.httpPerSecond 50 (at most 10)");
    }

    #[test]
    fn a_kind_the_ceiling_selects_is_read_only_through_a_selector_within_it() {
        let config = config(
            "reconcilers:\n  allow:\n    read: [v1/ConfigMap, v1/Namespace]\n    readSelectors: {v1/ConfigMap: 'team=a'}\n",
        );
        let allow = config.reconcilers.as_ref().unwrap().allow.clone();
        let within = grant(
            "{read: [v1/ConfigMap, v1/Namespace], readSelectors: {v1/ConfigMap: 'team=a,app=web'}}",
        );
        assert!(beyond_allowed(&within, &allow, &config).is_empty());
        let unselected = grant("{read: [v1/ConfigMap]}");
        let other = grant("{read: [v1/ConfigMap], readSelectors: {v1/ConfigMap: 'team=b'}}");
        for refused in [unselected, other] {
            assert_eq!(
                beyond_allowed(&refused, &allow, &config),
                vec![
                    "read v1/ConfigMap without readSelectors v1/ConfigMap carrying \"team=a\""
                        .to_owned()
                ]
            );
        }
    }

    #[test]
    fn a_reconcilers_account_must_be_one_the_ceiling_lists() {
        let listing = config(&format!(
            "{HOST}    serviceAccounts: [team-a/*, team-b/reconciler]\n"
        ));
        let allow = &listing.reconcilers.as_ref().unwrap().allow;
        for within in ["team-a/anyone", "team-b/reconciler"] {
            let own = grant(&format!("{{serviceAccount: {within}}}"));
            assert_eq!(beyond_allowed(&own, allow, &listing), Vec::<String>::new());
        }
        let beyond = grant("{serviceAccount: team-b/other}");
        assert_eq!(
            beyond_allowed(&beyond, allow, &listing),
            vec!["serviceAccount team-b/other"]
        );
        // None listed: no Reconciler may name one.
        let none = config(HOST);
        let allow = &none.reconcilers.as_ref().unwrap().allow;
        assert_eq!(
            beyond_allowed(&grant("{serviceAccount: team-a/x}"), allow, &none),
            vec!["serviceAccount team-a/x"]
        );
    }

    #[test]
    fn the_ceilings_limits_bound_the_host_defaults_further() {
        let config = config(&format!("{HOST}    limits: {{deadline: 1s, qps: 5}}\n"));
        let allow = &config.reconcilers.as_ref().unwrap().allow;
        let asks = grant("{limits: {deadline: 2s, qps: 5, memoryMiB: 48}}");
        assert_eq!(
            beyond_allowed(&asks, allow, &config),
            vec!["limits.deadline (ms) 2000 (at most 1000)"]
        );
    }

    /// A Reconciler that sets no limits under a 16 MiB ceiling once ran at the built-in
    /// 64 MiB, and at the manifest's concurrency: what it leaves out is bounded too.
    #[test]
    fn limits_a_reconciler_leaves_out_are_bounded_by_the_ceiling_too() {
        let config = config(
            "maxConcurrency: 8\nreconcilers:\n  allow:\n    limits: {memoryMiB: 16, concurrency: 2, deadline: 500ms, instanceReuse: 1}\n",
        );
        let origin = Origin::reconciler("widget", 1, Grant::default());
        let silent = object_grant(&origin, "widget", &Grant::default(), &config).unwrap();
        let limits = &silent.limits;
        assert_eq!(limits.memory_mib, Some(16));
        assert_eq!(limits.memory_bytes(), 16 << 20);
        assert_eq!(
            limits.concurrency,
            Some(2),
            "the manifest's concurrency is capped"
        );
        assert_eq!(limits.deadline(), std::time::Duration::from_millis(500));
        assert_eq!(limits.reuse(), None);
        // Lower limits it sets stay as set; the unbounded ones stay unset (built-ins).
        let own = grant("{limits: {memoryMiB: 8, concurrency: 1}}");
        let set = object_grant(&origin, "widget", &own, &config).unwrap();
        assert_eq!(set.limits.memory_mib, Some(8));
        assert_eq!(set.limits.concurrency, Some(1));
        assert_eq!(set.limits.queue.per_second, None);
        // Without a ceiling on concurrency, the host's maxConcurrency bounds it.
        let open = object_grant(&origin, "widget", &Grant::default(), &config_open()).unwrap();
        assert_eq!(open.limits.concurrency, Some(3));
        assert_eq!(
            open.limits.memory_mib, None,
            "no ceiling: the built-in applies"
        );
    }

    #[test]
    fn the_ceiling_may_allow_shadow_mode_only() {
        let config = config("reconcilers:\n  allow:\n    modes: [shadow]\n");
        let allow = &config.reconcilers.as_ref().unwrap().allow;
        assert_eq!(
            beyond_allowed(&grant("{mode: shadow}"), allow, &config),
            Vec::<String>::new()
        );
        assert_eq!(
            beyond_allowed(&Grant::default(), allow, &config),
            vec!["mode active (allowed: shadow)"],
            "a Reconciler that says nothing runs active, which this ceiling refuses"
        );
        let open = config_open();
        let allow = &open.reconcilers.as_ref().unwrap().allow;
        assert!(beyond_allowed(&Grant::default(), allow, &open).is_empty());
    }

    fn config_open() -> HostConfig {
        config("maxConcurrency: 3\nreconcilers: {}\n")
    }

    #[test]
    fn a_reconciler_is_refused_a_name_the_configuration_grants_or_a_host_without_reconcilers() {
        let origin = Origin::reconciler("network", 1, Grant::default());
        let with_grant = config(&format!("{HOST}guests:\n  network: {{}}\n"));
        let err = object_grant(&origin, "network", &Grant::default(), &with_grant).unwrap_err();
        assert!(matches!(err, GrantError::Claimed { .. }), "{err}");
        assert_eq!(RefusalError::from(err).cause(), "NameConflict");

        let without = config("guests: {}\n");
        let err = object_grant(&origin, "network", &Grant::default(), &without).unwrap_err();
        assert_eq!(RefusalError::from(err).cause(), "ReconcilersOff");

        // Within the ceiling: its own grant, unset limits from the host's defaults.
        let own = grant("{read: [v1/ConfigMap]}");
        let granted = object_grant(&origin, "network", &own, &config(HOST)).unwrap();
        assert_eq!(granted.read, own.read);
        assert_eq!(granted.limits.memory_mib, Some(48));
        // A refusal at run time says where its grant is written.
        let secret = crate::cluster::objects::Gvk::new("", "v1", "Secret");
        assert_eq!(
            granted
                .may_read("network", &secret)
                .unwrap_err()
                .to_string(),
            "guest `network` may not read v1/Secret: add it to spec.grant.read of Reconciler network (within reconcilers.allow of the host configuration)"
        );
    }

    const TENANTS: &str = r"
reconcilers:
  allow:
    read: [v1/Secret]
  tenants:
  - name: teams
    namespaceSelector: tenant=true
    allow:
      read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
      write: [test.reconciler.dev/v1/Widget/status]
  - namespaces: [legacy]
    serviceAccount: runner
    allow: {read: [v1/ConfigMap]}
";

    fn tenant_origin(
        namespace: &str,
        labels: &[(&str, &str)],
        account: Option<&str>,
        own: &Grant,
    ) -> Origin {
        Origin::tenant_reconciler(
            "mirror",
            1,
            own.clone(),
            super::super::Tenant {
                namespace: namespace.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
                service_account: account.map(str::to_owned),
            },
        )
    }

    #[test]
    fn a_namespaced_reconciler_is_bounded_by_its_namespaces_rule_and_writes_as_its_account() {
        let config = config(TENANTS);
        let own = grant("{read: [v1/ConfigMap], write: [test.reconciler.dev/v1/Widget/status]}");
        let origin = tenant_origin("team-a", &[("tenant", "true")], None, &own);
        assert_eq!(origin.name(), "reconciler/team-a.mirror");
        let granted = object_grant(&origin, "mirror@team-a.mirror", &own, &config).unwrap();
        assert_eq!(
            granted
                .service_account
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("team-a/reconciler"),
            "the rule's account of its own namespace"
        );
        let named = tenant_origin("team-a", &[("tenant", "true")], Some("mirror-sa"), &own);
        let granted = object_grant(&named, "g", &own, &config).unwrap();
        assert_eq!(
            granted
                .service_account
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("team-a/mirror-sa")
        );
        // By name, the second rule, its own account name.
        let legacy = grant("{read: [v1/ConfigMap]}");
        let by_name = tenant_origin("legacy", &[], None, &legacy);
        let granted = object_grant(&by_name, "g", &legacy, &config).unwrap();
        assert_eq!(
            granted
                .service_account
                .as_ref()
                .map(ToString::to_string)
                .as_deref(),
            Some("legacy/runner")
        );
    }

    #[test]
    fn a_namespaced_reconciler_beyond_its_rule_or_outside_every_rule_is_refused_by_name() {
        let config = config(TENANTS);
        // Secrets are the cluster ceiling's, not the tenants' rule's.
        let greedy = grant("{read: [v1/Secret, v1/ConfigMap]}");
        let origin = tenant_origin("team-a", &[("tenant", "true")], None, &greedy);
        let err = object_grant(&origin, "g", &greedy, &config).unwrap_err();
        assert!(matches!(err, GrantError::BeyondTenantRule { .. }), "{err}");
        assert!(
            err.to_string().contains("reconcilers.tenants[0] (teams)")
                && err.to_string().contains("read v1/Secret"),
            "{err}"
        );
        // Its labels are the administrator's: a namespace without the label has no rule.
        let plain = grant("{read: [v1/ConfigMap]}");
        let unlabelled = tenant_origin("team-b", &[("tenant", "false")], None, &plain);
        let err = object_grant(&unlabelled, "g", &plain, &config).unwrap_err();
        assert!(matches!(err, GrantError::NoTenantRule { .. }), "{err}");
        // An account of another namespace, named in the grant, is never taken.
        let elsewhere = grant("{read: [v1/ConfigMap], serviceAccount: kube-system/admin}");
        let origin = tenant_origin("team-a", &[("tenant", "true")], None, &elsewhere);
        let err = object_grant(&origin, "g", &elsewhere, &config).unwrap_err();
        assert!(matches!(err, GrantError::OutsideNamespace { .. }), "{err}");
        // A bad account name is refused, not turned into another namespace's.
        let origin = tenant_origin("team-a", &[("tenant", "true")], Some("x/y"), &plain);
        let err = object_grant(&origin, "g", &plain, &config).unwrap_err();
        assert!(matches!(err, GrantError::OutsideNamespace { .. }), "{err}");
    }
}
