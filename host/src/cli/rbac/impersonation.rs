//! The RBAC of guests with their own ServiceAccount (`serviceAccount:` in a grant), where the
//! grant's rights move from the host to the guest's account and the host keeps only what it
//! needs to act for it:
//!
//! | object | bound to | rules |
//! |---|---|---|
//! | `ServiceAccount` NAME in NAMESPACE | | |
//! | `ClusterRole` `PREFIX-guest-GUEST` | the guest's account | the grant's reads and writes (module docs), events `create`, `patch` |
//! | `ClusterRole` `PREFIX-guest-GUEST-host` | the host | the grant's reads (the shared informers); constrained: `impersonate-on:serviceaccount:VERB` for each write verb the grant needs and for events |
//! | `Role` `PREFIX-impersonate-GUEST` in NAMESPACE | the host | constrained: `impersonate:serviceaccount` on `authentication.k8s.io` `serviceaccounts`; legacy: `impersonate` on `serviceaccounts`; either with `resourceNames: [NAME]` |
//!
//! Constrained impersonation (KEP-5284, beta and on by default since Kubernetes 1.36) lets the
//! host impersonate exactly these accounts and only for the verbs and resources the grants
//! need. `--impersonation legacy` is the fallback for servers without it: `impersonate` on
//! exactly these accounts, for any verb, so each request is still authorized against the
//! account's RBAC, but a compromised host could act as the account beyond its grant.
//!
//! For `Reconciler` objects, whose grants are not known when this runs, the host may
//! impersonate the accounts `reconcilers.allow.serviceAccounts` lists (a whole namespace for
//! `NAMESPACE/*`), for the verbs `reconcilers.allow.write` needs; the accounts' own RBAC is the
//! Reconciler author's to grant (the access review refuses one that reads beyond it).

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, RoleBinding, Subject};

use super::{
    Object, Options, Resources, bound_cluster_role, bound_role, guest_role_name, meta, rules,
    service_account_subject,
};
use crate::config::{Allow, Grant, HostConfig, ServiceAccountRef};

/// How the host may impersonate guests' ServiceAccounts (`rbac --impersonation`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Impersonation {
    /// KEP-5284: only the accounts named, only for the verbs the grants need.
    #[default]
    Constrained,
    /// Servers before Kubernetes 1.36 (or with `ConstrainedImpersonation` off): the accounts
    /// named, for any verb.
    Legacy,
}

/// Whether any guest may have an identity: the host then makes access reviews.
pub(super) fn any(config: &HostConfig) -> bool {
    config.guests.values().any(|g| g.service_account.is_some())
        || config
            .reconcilers
            .as_ref()
            .is_some_and(|r| !r.allow.service_accounts.is_empty() || !r.tenants.is_empty())
}

/// `create` on `SubjectAccessReview`s, for the reviews of identities' reads.
pub(super) fn access_reviews() -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec!["authorization.k8s.io".into()]),
        resources: Some(vec!["subjectaccessreviews".into()]),
        verbs: vec!["create".into()],
        ..PolicyRule::default()
    }
}

/// Events, which a guest with an identity records as its account.
fn events() -> Vec<((String, String), Vec<&'static str>)> {
    vec![(
        ("events.k8s.io".to_owned(), "events".to_owned()),
        vec!["create", "patch"],
    )]
}

/// The objects of one guest with an identity (see the module docs).
pub(super) fn guest_objects(
    guest: &str,
    grant: &Grant,
    account: &ServiceAccountRef,
    resources: &dyn Resources,
    options: &Options,
) -> Vec<Object> {
    let prefix = &options.prefix;
    let host = options.subject();
    let own = service_account_subject(&account.namespace, &account.name);
    let name = guest_role_name(prefix, guest);
    let mut out = vec![Object::ServiceAccount(ServiceAccount {
        metadata: meta(&account.name, Some(&account.namespace)),
        ..ServiceAccount::default()
    })];
    let writes = grant.write_verbs.each(&grant.write);
    out.extend(bound_cluster_role(
        &name,
        rules(&grant.read, &writes, resources, events()),
        &own,
    ));
    let mut host_rules = rules(&grant.read, &[], resources, Vec::new());
    if options.impersonation == Impersonation::Constrained {
        host_rules.extend(impersonate_on(rules(
            &BTreeSet::new(),
            &writes,
            resources,
            events(),
        )));
    }
    out.extend(bound_cluster_role(
        &format!("{name}-host"),
        host_rules,
        &host,
    ));
    out.extend(bound_role(
        &format!("{prefix}-impersonate-{}", guest.replace('@', "-at-")),
        &account.namespace,
        vec![impersonate(options.impersonation, Some(&account.name))],
        &host,
    ));
    out
}

/// The host's rules to impersonate Reconcilers' accounts for the writes the ceiling allows.
pub(super) fn reconciler_impersonation(
    allow: &Allow,
    resources: &dyn Resources,
    options: &Options,
) -> Vec<PolicyRule> {
    if allow.service_accounts.is_empty() || options.impersonation == Impersonation::Legacy {
        return Vec::new();
    }
    let writes = allow.write_verbs.each(&allow.write);
    impersonate_on(rules(&BTreeSet::new(), &writes, resources, events()))
}

/// One Role per namespace of `reconcilers.allow.serviceAccounts`, letting the host impersonate
/// the accounts listed there (all of the namespace's for `NAMESPACE/*`).
pub(super) fn reconciler_accounts(allow: &Allow, options: &Options) -> Vec<Object> {
    let host = options.subject();
    let namespaces: BTreeSet<&str> = allow
        .service_accounts
        .iter()
        .map(|a| a.namespace.as_str())
        .collect();
    let mut out = Vec::new();
    for namespace in namespaces {
        let entries = allow
            .service_accounts
            .iter()
            .filter(|a| a.namespace == namespace);
        let names: Option<Vec<&str>> = entries.map(|a| a.name.as_deref()).collect();
        let rule = match names {
            Some(names) => {
                let mut rule = impersonate(options.impersonation, None);
                rule.resource_names = Some(names.into_iter().map(str::to_owned).collect());
                rule
            }
            // A `NAMESPACE/*` entry: every account there.
            None => impersonate(options.impersonation, None),
        };
        out.extend(bound_role(
            &format!("{}-impersonate-reconcilers", options.prefix),
            namespace,
            vec![rule],
            &host,
        ));
    }
    out
}

/// The rule that lets the host impersonate ServiceAccount `name` (every one of the Role's
/// namespace when none).
fn impersonate(mode: Impersonation, name: Option<&str>) -> PolicyRule {
    let (group, verb) = match mode {
        Impersonation::Constrained => ("authentication.k8s.io", "impersonate:serviceaccount"),
        Impersonation::Legacy => ("", "impersonate"),
    };
    PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec!["serviceaccounts".into()]),
        verbs: vec![verb.to_owned()],
        resource_names: name.map(|n| vec![n.to_owned()]),
        ..PolicyRule::default()
    }
}

/// `rules` with each verb as constrained impersonation asks for it on the target resource.
fn impersonate_on(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    rules
        .into_iter()
        .map(|mut rule| {
            rule.verbs = rule
                .verbs
                .iter()
                .map(|verb| format!("impersonate-on:serviceaccount:{verb}"))
                .collect();
            rule
        })
        .collect()
}

/// What each rule of `reconcilers.tenants` needs: the host reads the kinds the rule allows
/// (its informers are shared) and impersonates the rule's account, by name, in any namespace,
/// only for the writes the rule allows (constrained impersonation); the account of each tenant
/// namespace gets the rule's reads and writes through a `ClusterRole` `PREFIX-tenant-N` that a
/// `RoleBinding` in the namespace grants it. A Reconciler naming `spec.serviceAccountName`
/// writes as another account of its namespace: `PREFIX-tenant-N-accounts` lets the host
/// impersonate every account of a namespace where a `RoleBinding` grants it, never
/// cluster-wide. Both bindings are emitted here for the namespaces the rule names; for those
/// its selector chooses, the administrator binds them the same way.
pub(super) fn tenant_objects(
    config: &HostConfig,
    resources: &dyn Resources,
    options: &Options,
) -> Vec<Object> {
    let Some(reconcilers) = &config.reconcilers else {
        return Vec::new();
    };
    let host = options.subject();
    let prefix = &options.prefix;
    let mut out = Vec::new();
    for (i, rule) in reconcilers.tenants.iter().enumerate() {
        let allow = &rule.allow;
        let writes = allow.write_verbs.each(&allow.write);
        let mut host_rules = rules(&allow.read, &[], resources, Vec::new());
        let account = impersonate(options.impersonation, Some(&rule.service_account));
        if options.impersonation == Impersonation::Constrained {
            host_rules.extend(impersonate_on(rules(
                &BTreeSet::new(),
                &writes,
                resources,
                events(),
            )));
        }
        host_rules.push(account);
        out.extend(bound_cluster_role(
            &format!("{prefix}-tenant-{i}-host"),
            host_rules,
            &host,
        ));
        let tenant_role = format!("{prefix}-tenant-{i}");
        out.push(cluster_role(
            &tenant_role,
            rules(&allow.read, &writes, resources, events()),
        ));
        let accounts = format!("{tenant_role}-accounts");
        out.push(cluster_role(
            &accounts,
            vec![impersonate(options.impersonation, None)],
        ));
        for namespace in &rule.namespaces {
            out.push(Object::ServiceAccount(ServiceAccount {
                metadata: meta(&rule.service_account, Some(namespace)),
                ..ServiceAccount::default()
            }));
            out.push(role_binding(
                &tenant_role,
                namespace,
                service_account_subject(namespace, &rule.service_account),
            ));
            out.push(role_binding(&accounts, namespace, host.clone()));
        }
    }
    out
}

/// A `ClusterRole` of `rules`, bound where a `RoleBinding` grants it.
fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> Object {
    Object::ClusterRole(ClusterRole {
        metadata: meta(name, None),
        rules: Some(rules),
        ..ClusterRole::default()
    })
}

/// A `RoleBinding` named as the `ClusterRole` `role` it grants `subject` in `namespace`.
fn role_binding(role: &str, namespace: &str, subject: Subject) -> Object {
    Object::RoleBinding(RoleBinding {
        metadata: meta(role, Some(namespace)),
        role_ref: super::role_ref("ClusterRole", role),
        subjects: Some(vec![subject]),
    })
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role};

    use super::super::Guess;
    use super::*;

    const CONFIG: &str = r"
guests:
  widget:
    serviceAccount: guests/widget
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
  plain:
    read: [v1/ConfigMap]
";

    /// Each object as `Kind/namespace/name`, with its rules or subjects in short.
    fn described_objects(objects: &[Object]) -> Vec<String> {
        let rules = |rules: &Option<Vec<PolicyRule>>| {
            rules
                .iter()
                .flatten()
                .map(|r| {
                    let names = r.resource_names.clone().unwrap_or_default().join(",");
                    format!(
                        "{}:{}:{}{}",
                        r.api_groups.clone().unwrap_or_default().join(","),
                        r.resources.clone().unwrap_or_default().join(","),
                        r.verbs.join(","),
                        if names.is_empty() {
                            String::new()
                        } else {
                            format!("[{names}]")
                        }
                    )
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let subject = |s: &Option<Vec<k8s_openapi::api::rbac::v1::Subject>>| {
            s.iter()
                .flatten()
                .map(|s| format!("{}/{}", s.namespace.clone().unwrap_or_default(), s.name))
                .collect::<Vec<_>>()
                .join(",")
        };
        objects
            .iter()
            .map(|o| match o {
                Object::ServiceAccount(a) => format!(
                    "ServiceAccount {}/{}",
                    a.metadata.namespace.clone().unwrap_or_default(),
                    a.metadata.name.clone().unwrap_or_default()
                ),
                Object::ClusterRole(ClusterRole {
                    metadata, rules: r, ..
                }) => format!(
                    "ClusterRole {} {}",
                    metadata.name.clone().unwrap_or_default(),
                    rules(r)
                ),
                Object::Role(Role { metadata, rules: r }) => format!(
                    "Role {}/{} {}",
                    metadata.namespace.clone().unwrap_or_default(),
                    metadata.name.clone().unwrap_or_default(),
                    rules(r)
                ),
                Object::ClusterRoleBinding(ClusterRoleBinding {
                    metadata, subjects, ..
                }) => format!(
                    "ClusterRoleBinding {} -> {}",
                    metadata.name.clone().unwrap_or_default(),
                    subject(subjects)
                ),
                Object::RoleBinding(RoleBinding {
                    metadata, subjects, ..
                }) => format!(
                    "RoleBinding {}/{} -> {}",
                    metadata.namespace.clone().unwrap_or_default(),
                    metadata.name.clone().unwrap_or_default(),
                    subject(subjects)
                ),
            })
            .collect()
    }

    #[test]
    fn a_guests_rights_move_to_its_account_and_the_host_keeps_reads_and_impersonation() {
        let config = HostConfig::parse(CONFIG, Path::new("host.yaml")).unwrap();
        let objects = super::super::objects(&config, None, &Guess, &Options::default());
        let described = described_objects(&objects);
        let expected = [
            "ClusterRole reconciler-host events.k8s.io:events:create,patch authorization.k8s.io:subjectaccessreviews:create",
            "ClusterRoleBinding reconciler-host -> reconciler-host/reconciler-host",
            "Role reconciler-host/reconciler-host-leader-election coordination.k8s.io:leases:get,list,watch,create,update,patch,delete",
            "RoleBinding reconciler-host/reconciler-host-leader-election -> reconciler-host/reconciler-host",
            "ClusterRole reconciler-host-guest-plain :configmaps:get,list,watch",
            "ClusterRoleBinding reconciler-host-guest-plain -> reconciler-host/reconciler-host",
            "ServiceAccount guests/widget",
            "ClusterRole reconciler-host-guest-widget :configmaps:create,delete,get,list,patch,watch events.k8s.io:events:create,patch test.reconciler.dev:widgets:get,list,watch test.reconciler.dev:widgets/status:patch",
            "ClusterRoleBinding reconciler-host-guest-widget -> guests/widget",
            "ClusterRole reconciler-host-guest-widget-host :configmaps:get,list,watch test.reconciler.dev:widgets:get,list,watch \
             :configmaps:impersonate-on:serviceaccount:create,impersonate-on:serviceaccount:delete,impersonate-on:serviceaccount:patch \
             events.k8s.io:events:impersonate-on:serviceaccount:create,impersonate-on:serviceaccount:patch \
             test.reconciler.dev:widgets/status:impersonate-on:serviceaccount:patch",
            "ClusterRoleBinding reconciler-host-guest-widget-host -> reconciler-host/reconciler-host",
            "Role guests/reconciler-host-impersonate-widget authentication.k8s.io:serviceaccounts:impersonate:serviceaccount[widget]",
            "RoleBinding guests/reconciler-host-impersonate-widget -> reconciler-host/reconciler-host",
        ];
        assert_eq!(described, expected);

        // Legacy: `impersonate` on exactly the account, and no per-verb rules.
        let legacy = Options {
            impersonation: Impersonation::Legacy,
            ..Options::default()
        };
        let legacy = described_objects(&super::super::objects(&config, None, &Guess, &legacy));
        assert!(legacy.contains(&"Role guests/reconciler-host-impersonate-widget :serviceaccounts:impersonate[widget]".to_owned()));
        assert!(legacy.contains(&"ClusterRole reconciler-host-guest-widget-host :configmaps:get,list,watch test.reconciler.dev:widgets:get,list,watch".to_owned()));
    }

    #[test]
    fn reconcilers_accounts_are_impersonated_as_the_ceiling_lists_them() {
        let config = HostConfig::parse(
            "identity: {required: true}\nreconcilers:\n  allow:\n    serviceAccounts: [team-a/*, team-b/one, team-b/two]\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap]\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let described = described_objects(&super::super::objects(
            &config,
            None,
            &Guess,
            &Options::default(),
        ));
        let find = |prefix: &str| {
            described
                .iter()
                .find(|d| d.starts_with(prefix))
                .cloned()
                .unwrap_or_else(|| panic!("{prefix} in {described:#?}"))
        };
        // Every guest writes as its account: the host reads and impersonates, never writes.
        assert_eq!(
            find("ClusterRole reconciler-host-reconcilers "),
            "ClusterRole reconciler-host-reconcilers :configmaps:get,list,watch reconciler.dev:clusterreconcilers,reconcilers:get,list,watch reconciler.dev:clusterreconcilers/status,reconcilers/status:patch \
             :configmaps:impersonate-on:serviceaccount:create,impersonate-on:serviceaccount:delete,impersonate-on:serviceaccount:patch \
             events.k8s.io:events:impersonate-on:serviceaccount:create,impersonate-on:serviceaccount:patch"
        );
        assert_eq!(
            find("Role team-a/"),
            "Role team-a/reconciler-host-impersonate-reconcilers authentication.k8s.io:serviceaccounts:impersonate:serviceaccount"
        );
        assert_eq!(
            find("Role team-b/"),
            "Role team-b/reconciler-host-impersonate-reconcilers authentication.k8s.io:serviceaccounts:impersonate:serviceaccount[one,two]"
        );
    }
}
