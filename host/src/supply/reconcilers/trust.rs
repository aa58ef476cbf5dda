//! Whose signatures a Reconciler's module must carry: the host's (`reconcilers.verify`) for
//! `ClusterReconciler`s and for tenants whose rule says nothing, a tenant rule's own `verify`
//! for the namespaces it selects. Each policy is checked on its own over the one module cache
//! (at the pull and at every load from the cache), so one rule's keys never admit a module in
//! another rule's namespaces, nor the host's keys one in a rule that names its own.

use crate::config::{HostConfig, VerifySettings};
use crate::oci::TrustPolicy;

/// Which policy an object's module is checked against. Part of what a module is pulled by: a
/// namespace that moves to another rule has its module checked again, under the new rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Scope {
    /// `reconcilers.verify`.
    #[default]
    Host,
    /// `reconcilers.tenants[N].verify`.
    Rule(usize),
}

/// The policies of the configuration the source started with, read once.
pub(super) struct Trust {
    host: Option<TrustPolicy>,
    /// Per tenant rule, by index.
    rules: Vec<RuleTrust>,
}

enum RuleTrust {
    /// No `verify`: the host's applies.
    Inherited,
    /// Its own `verify`: the policy, none when it requires no signature.
    Own(Option<TrustPolicy>),
}

impl Trust {
    pub(super) fn of(config: &HostConfig) -> Self {
        let Some(settings) = &config.reconcilers else {
            return Self {
                host: None,
                rules: Vec::new(),
            };
        };
        let host = settings
            .verify
            .as_ref()
            .and_then(|v| policy(v, "reconcilers.verify"));
        let rules = settings
            .tenants
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let source = format!("{}.verify", rule.label(i));
                rule.verify
                    .as_ref()
                    .map_or(RuleTrust::Inherited, |v| RuleTrust::Own(policy(v, &source)))
            })
            .collect();
        Self { host, rules }
    }

    /// The scope of tenant rule `index`: its own when it has a `verify`, else the host's.
    pub(super) fn scope(&self, index: usize) -> Scope {
        match self.rules.get(index) {
            Some(RuleTrust::Own(_)) => Scope::Rule(index),
            _ => Scope::Host,
        }
    }

    /// The policy of `scope`, when it requires signatures.
    pub(super) fn policy(&self, scope: Scope) -> Option<&TrustPolicy> {
        match scope {
            Scope::Host => self.host.as_ref(),
            Scope::Rule(index) => match self.rules.get(index)? {
                RuleTrust::Own(policy) => policy.as_ref(),
                RuleTrust::Inherited => self.host.as_ref(),
            },
        }
    }
}

/// The policy `verify` (named `source`) requires, if any. The configuration's parse read the
/// keys and trusted root already; one unreadable now refuses every module of its scope (fails
/// closed) rather than running unsigned ones.
fn policy(verify: &VerifySettings, source: &str) -> Option<TrustPolicy> {
    match verify.trust_policy() {
        Ok(policy) => policy.map(|p| p.named(source)),
        Err(e) => {
            tracing::error!("{source}: {e}; every module it covers is refused until it is fixed");
            Some(TrustPolicy::none().named(source))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str, dir: &std::path::Path) -> HostConfig {
        HostConfig::parse(text, &dir.join("host.yaml")).unwrap()
    }

    fn key(dir: &std::path::Path, name: &str, seed: u8) {
        use p256::pkcs8::{EncodePublicKey as _, LineEnding};
        let pem = p256::ecdsa::SigningKey::from_slice(&[seed; 32])
            .unwrap()
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap();
        std::fs::write(dir.join(name), pem).unwrap();
    }

    /// A rule with its own `verify` is checked against it alone, named in refusals; a rule
    /// without inherits the host's; `ClusterReconciler`s keep the host's.
    #[test]
    fn a_rule_with_its_own_verify_has_a_scope_of_its_own() {
        let dir = tempfile::tempdir().unwrap();
        key(dir.path(), "host.pub", 1);
        key(dir.path(), "a.pub", 2);
        let trust = Trust::of(&config(
            "reconcilers:\n  verify: {required: true, keys: [host.pub]}\n  tenants:\n  - {name: a, namespaces: [a], verify: {required: true, keys: [a.pub]}}\n  - {namespaces: [b]}\n",
            dir.path(),
        ));
        assert_eq!(trust.scope(0), Scope::Rule(0));
        assert_eq!(trust.scope(1), Scope::Host);
        assert_eq!(
            trust.policy(Scope::Rule(0)).map(TrustPolicy::source),
            Some("reconcilers.tenants[0] (a).verify")
        );
        assert_eq!(
            trust.policy(Scope::Host).map(TrustPolicy::source),
            Some("reconcilers.verify")
        );
        // Without a host-wide requirement, a rule may require signatures of its own tenants
        // only, or none.
        let trust = Trust::of(&config(
            "reconcilers:\n  tenants:\n  - {namespaces: [a], verify: {required: true, keys: [a.pub]}}\n  - {namespaces: [b], verify: {required: false}}\n",
            dir.path(),
        ));
        assert!(trust.policy(Scope::Host).is_none());
        assert!(trust.policy(trust.scope(0)).is_some());
        assert_eq!(trust.scope(1), Scope::Rule(1));
        assert!(trust.policy(trust.scope(1)).is_none());
    }
}
