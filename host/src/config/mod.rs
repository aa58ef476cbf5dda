//! The host configuration (YAML): where guests come from, what each guest is granted, and the
//! backends that hold actual state. Grants are deny-by-default: a guest without an entry under
//! `guests:` is refused, and every read, write and backend call is checked against its entry.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

mod backends;
mod finalizer;
mod grant;
mod http;
mod http_path;
mod limits;
mod queue;
mod reconcilers;
mod record;
mod rollout;
mod selectors;
mod service_account;
mod writes;

pub use backends::{BackendConfig, DEFAULT_BRIDGE_PREFIX};
pub(crate) use finalizer::{FinalizerPolicy, OnUnload};
pub(crate) use grant::Denied;
pub use grant::{Grant, Mode, PrimaryReads, WrittenIn};
pub use http::{HttpRule, KeyRef, UrlPrefix, ValueFrom};
pub use http_path::{PathRefused, normalise_path};
pub(crate) use limits::Rates;
pub use limits::{Limits, Rate, Reuse};
pub use queue::QueueConfig;
pub(crate) use reconcilers::{Allow, ReconcilerSettings, TenantRule, VerifySettings};
pub use record::{DEFAULT_RECORD_BYTES, RecordPolicy};
pub use rollout::{Canary, Gates, Hold, Percent, PercentOutOfRange, PlanError, Rollout, Step};
pub use selectors::ReadSelectors;
pub(crate) use selectors::selector_within;
pub use service_account::{
    AccountError, AllowedAccount, DEFAULT_RECHECK, IdentitySettings, ServiceAccountRef,
};
pub(crate) use writes::UnlistedKind;
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

impl ConfigError {
    /// The configuration at `path` says something the host refuses: `message` names the
    /// setting and what to change.
    pub(crate) fn invalid(path: &Path, message: impl std::fmt::Display) -> Self {
        Self::Invalid {
            path: path.to_owned(),
            message: message.to_string(),
        }
    }
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
                return Err(ConfigError::invalid(
                    path,
                    format!("guests.{guest}.{message}"),
                ));
            }
            if let Some(rollout) = &grant.rollout {
                let paused = rollout
                    .steps
                    .iter()
                    .position(|s| matches!(s, Step::Pause {}));
                let refused = rollout.check().map_err(|e| e.to_string()).and_then(|()| {
                    paused.map_or(Ok(()), |i| {
                        Err(format!(
                            "rollout.steps[{i}]: a pause waits for a person's promote, which only a Reconciler's rollout receives (reconciler-host rollout promote); a guest of the directory takes a step's duration instead"
                        ))
                    })
                });
                if let Err(message) = refused {
                    return Err(ConfigError::invalid(
                        path,
                        format!("guests.{guest}.{message}"),
                    ));
                }
            }
            if let Some(Err(message)) = grant.record.as_ref().map(RecordPolicy::check) {
                return Err(ConfigError::invalid(
                    path,
                    format!("guests.{guest}.{message}"),
                ));
            }
            if grant.limits.concurrency.is_some_and(|c| c > cap) {
                return Err(ConfigError::invalid(
                    path,
                    format!("guests.{guest}.limits.concurrency is above maxConcurrency ({cap})"),
                ));
            }
            for backend in &grant.backends {
                if !config.backends.contains_key(backend) {
                    return Err(ConfigError::invalid(
                        path,
                        format!(
                            "guests.{guest}.backends names `{backend}`, which is not configured under backends:"
                        ),
                    ));
                }
            }
        }
        config.check_tenant_rules(path)?;
        let mut config = config;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(verify) = config.reconcilers.as_mut().and_then(|r| r.verify.as_mut()) {
            verify.resolve_from(base);
            verify
                .trust_policy()
                .map_err(|e| ConfigError::invalid(path, format!("reconcilers.verify: {e}")))?;
        }
        if let Some(reconcilers) = config.reconcilers.as_mut() {
            reconcilers.read_tenant_verify(base, path)?;
        }
        if let Some(reconcilers) = &config.reconcilers {
            let allow = &reconcilers.allow;
            allow
                .write_verbs
                .check(&allow.write)
                .map_err(|e| ConfigError::invalid(path, format!("reconcilers.allow.{e}")))?;
            for backend in &reconcilers.allow.backends {
                if !config.backends.contains_key(backend) {
                    return Err(ConfigError::invalid(
                        path,
                        format!(
                            "reconcilers.allow.backends names `{backend}`, which is not configured under backends:"
                        ),
                    ));
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
            let invalid = |message: String| {
                ConfigError::invalid(path, format!("{}: {message}", rule.label(i)))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::objects::Gvk;

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
        assert_eq!(grant.limits.rates().writes.per_second, 200);
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
            (r.events.per_second, r.log_lines.burst, r.writes.per_second),
            (2, 7, 2000)
        );
    }

    #[test]
    fn a_rollout_in_a_grant_is_checked_and_a_pause_is_for_reconcilers_only() {
        let parse = |rollout: &str| {
            HostConfig::parse(
                &format!("guests:\n  a:\n    rollout: {rollout}\n"),
                Path::new("h.yaml"),
            )
        };
        let plan = parse("{steps: [{shadow: {duration: 1m}}, {canary: {percent: 20}}]}")
            .unwrap()
            .grant("a")
            .unwrap()
            .rollout
            .clone()
            .unwrap();
        assert_eq!(plan.steps.len(), 2);
        for (rollout, refused) in [
            (
                "{steps: [{canary: {percent: 50}}, {canary: {percent: 10}}]}",
                "guests.a.rollout.steps[1]: canary shares must grow",
            ),
            (
                "{steps: [{shadow: {}}, {pause: {}}]}",
                "guests.a.rollout.steps[1]: a pause waits for a person's promote",
            ),
            (
                "{gates: {minAgreement: 2}}",
                "guests.a.rollout.gates.minAgreement is 2",
            ),
        ] {
            let err = parse(rollout).unwrap_err().to_string();
            assert!(err.contains(refused), "{rollout}: {err}");
        }
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
