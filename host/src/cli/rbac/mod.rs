//! `reconciler-host rbac`: the RBAC a host configuration needs, derived from its grants —
//! nothing more. One `ClusterRole` (and binding) per guest, so that an operator (or a test) can
//! see and cut exactly what one guest may do; one for the host's own needs (events); a `Role`
//! for the leader-election lease in its namespace. Discovery (`/api`, `/apis`) needs no rule:
//! every authenticated client has it through `system:discovery`.
//!
//! What each grant entry becomes:
//!
//! | grant | verbs on the kind's resource |
//! |---|---|
//! | `read: [Kind]` | `get`, `list`, `watch` |
//! | `write: [Kind]` | `create`, `patch` (server-side apply, finalizers), `delete`; only those `writeVerbs` names for the kind, when it names it |
//! | `write: [Kind/sub]` | `patch` on `resource/sub` (status merge patches) |
//!
//! A kind's resource name comes from discovery with `--discover`, else from the API machinery's
//! guess (lowercase, `-s`, `-es` after `s`, `-ies` for `-y`), which holds for every kind whose
//! CRD does not pick an irregular plural.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::Serialize;

use crate::cluster::objects::Gvk;
use crate::config::{HostConfig, ValueFrom, Verb, WriteTarget};

mod impersonation;

pub(crate) use impersonation::Impersonation;

/// Who the rules are for and where the host's lease lives.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub service_account: String,
    /// The service account's namespace, which is also where the lease is.
    pub namespace: String,
    /// Name prefix of every generated object.
    pub prefix: String,
    /// How the host may impersonate guests' ServiceAccounts.
    pub impersonation: Impersonation,
}

impl Options {
    /// The host's ServiceAccount as a binding's subject.
    fn subject(&self) -> Subject {
        service_account_subject(&self.namespace, &self.service_account)
    }
}

fn service_account_subject(namespace: &str, name: &str) -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: name.to_owned(),
        namespace: Some(namespace.to_owned()),
        ..Subject::default()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self {
            service_account: "reconciler-host".into(),
            namespace: "reconciler-host".into(),
            prefix: "reconciler-host".into(),
            impersonation: Impersonation::default(),
        }
    }
}

/// How a kind's resource (plural) name is found.
pub(crate) trait Resources {
    fn plural(&self, kind: &Gvk) -> String;
}

/// The API machinery's guess (`meta.UnsafeGuessKindToResource`).
pub(crate) struct Guess;

impl Resources for Guess {
    fn plural(&self, kind: &Gvk) -> String {
        let singular = kind.kind.to_lowercase();
        // The machinery's `unpluralizedSuffixes`: a kind already plural.
        if singular.ends_with("endpoints") {
            singular
        } else if singular.ends_with('s') {
            format!("{singular}es")
        } else if let Some(stem) = singular.strip_suffix('y') {
            format!("{stem}ies")
        } else {
            format!("{singular}s")
        }
    }
}

/// Resource names learnt from the API server, falling back to the guess.
pub(crate) struct Discovered(pub BTreeMap<Gvk, String>);

impl Resources for Discovered {
    fn plural(&self, kind: &Gvk) -> String {
        self.0
            .get(kind)
            .cloned()
            .unwrap_or_else(|| Guess.plural(kind))
    }
}

/// One generated object, in the order printed.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub(crate) enum Object {
    ClusterRole(ClusterRole),
    ClusterRoleBinding(ClusterRoleBinding),
    Role(Role),
    RoleBinding(RoleBinding),
    ServiceAccount(ServiceAccount),
}

/// The rules of one guest's grant, merged per API group and resource and sorted.
pub(crate) fn guest_rules(
    config: &HostConfig,
    guest: &str,
    resources: &dyn Resources,
) -> Vec<PolicyRule> {
    let Some(grant) = config.guests.get(guest) else {
        return Vec::new();
    };
    let writes = grant.write_verbs.each(&grant.write);
    rules(&grant.read, &writes, resources, Vec::new())
}

/// The rules of `read` and `write` entries with their verbs (see the module docs), after
/// `extra` rules keyed by group and resource, merged per API group and resource and sorted.
fn rules(
    read: &BTreeSet<Gvk>,
    write: &[(WriteTarget, Vec<Verb>)],
    resources: &dyn Resources,
    extra: Vec<((String, String), Vec<&'static str>)>,
) -> Vec<PolicyRule> {
    let mut verbs: BTreeMap<(String, String), BTreeSet<&'static str>> = BTreeMap::new();
    for (key, more) in extra {
        verbs.entry(key).or_default().extend(more);
    }
    for kind in read {
        verbs
            .entry((kind.group.clone(), resources.plural(kind)))
            .or_default()
            .extend(["get", "list", "watch"]);
    }
    for (target, granted) in write {
        let plural = resources.plural(&target.kind);
        let resource = match &target.subresource {
            None => plural,
            Some(sub) => format!("{plural}/{sub}"),
        };
        verbs
            .entry((target.kind.group.clone(), resource))
            .or_default()
            .extend(granted.iter().map(|v| v.as_str()));
    }
    // Rules with the same verbs in the same group share one entry, as people write them.
    let mut grouped: BTreeMap<(String, Vec<&str>), Vec<String>> = BTreeMap::new();
    for ((group, resource), verbs) in verbs {
        grouped
            .entry((group, verbs.into_iter().collect()))
            .or_default()
            .push(resource);
    }
    grouped
        .into_iter()
        .map(|((group, verbs), resources)| PolicyRule {
            api_groups: Some(vec![group]),
            resources: Some(resources),
            verbs: verbs.into_iter().map(str::to_owned).collect(),
            ..PolicyRule::default()
        })
        .collect()
}

/// Every object for `guests` (all of the configuration's when none), in print order.
pub(crate) fn objects(
    config: &HostConfig,
    guests: Option<&BTreeSet<String>>,
    resources: &dyn Resources,
    options: &Options,
) -> Vec<Object> {
    let host = options.subject();
    let prefix = &options.prefix;
    let mut out = Vec::new();
    out.extend(host_objects(config, options));
    for (guest, grant) in &config.guests {
        if guests.is_some_and(|only| !only.contains(guest)) {
            continue;
        }
        if let Some(account) = &grant.service_account {
            out.extend(impersonation::guest_objects(
                guest, grant, account, resources, options,
            ));
            continue;
        }
        let rules = guest_rules(config, guest, resources);
        if rules.is_empty() {
            continue;
        }
        out.extend(bound_cluster_role(
            &guest_role_name(prefix, guest),
            rules,
            &host,
        ));
    }
    if let Some(reconcilers) = &config.reconcilers {
        out.extend(reconciler_objects(config, reconcilers, resources, options));
    }
    out.extend(http_credentials(config, guests, options));
    out
}

/// The host's own roles: events about any object a guest without an identity may read, the
/// access reviews of guests' identities, and the leader election's lease.
fn host_objects(config: &HostConfig, options: &Options) -> Vec<Object> {
    let host = options.subject();
    let prefix = &options.prefix;
    let mut objects = Vec::new();
    // The host itself: events about any object a guest without an identity may read, written
    // by the host's aggregating recorder (create, then patch for repeats); with identities, the
    // access reviews of their reads.
    let mut own = vec![PolicyRule {
        api_groups: Some(vec!["events.k8s.io".into()]),
        resources: Some(vec!["events".into()]),
        verbs: vec!["create".into(), "patch".into()],
        ..PolicyRule::default()
    }];
    if impersonation::any(config) {
        own.push(impersonation::access_reviews());
    }
    objects.extend(bound_cluster_role(prefix, own, &host));
    objects.extend(bound_role(
        &format!("{prefix}-leader-election"),
        &options.namespace,
        vec![PolicyRule {
            api_groups: Some(vec!["coordination.k8s.io".into()]),
            resources: Some(vec!["leases".into()]),
            // The lease manager reads and watches the lease, creates it once, then patches it.
            // Sharded mode also lists the ring's leases and deletes a member's that expired.
            verbs: [
                "get", "list", "watch", "create", "update", "patch", "delete",
            ]
            .map(str::to_owned)
            .to_vec(),
            ..PolicyRule::default()
        }],
        &host,
    ));
    objects
}

/// The roles for Reconciler objects: their kinds followed and status written; the most any of
/// them may be granted (`reconcilers.allow`); their accounts; the tenants'; the pull Secrets.
fn reconciler_objects(
    config: &HostConfig,
    reconcilers: &crate::config::ReconcilerSettings,
    resources: &dyn Resources,
    options: &Options,
) -> Vec<Object> {
    let host = options.subject();
    let prefix = &options.prefix;
    let mut objects = Vec::new();
    // Reconciler objects: followed, their status written; the most any of them may be
    // granted (`reconcilers.allow`): reads for the shared informers, writes unless every
    // guest writes as its own account.
    let own = reconciler_objects_rules(reconcilers);
    let allow = &reconcilers.allow;
    let writes = if config.identity.required {
        Vec::new()
    } else {
        allow.write_verbs.each(&allow.write)
    };
    let mut role_rules = rules(&allow.read, &writes, resources, own);
    role_rules.extend(impersonation::reconciler_impersonation(
        allow, resources, options,
    ));
    objects.extend(bound_cluster_role(
        &format!("{prefix}-reconcilers"),
        role_rules,
        &host,
    ));
    objects.extend(impersonation::reconciler_accounts(allow, options));
    objects.extend(impersonation::tenant_objects(config, resources, options));
    // Only the pull Secrets a Reconciler may name, only `get`: the host lists no Secret.
    if !reconcilers.pull_secrets.is_empty() {
        objects.extend(bound_role(
            &format!("{prefix}-pull-secrets"),
            &options.namespace,
            vec![PolicyRule {
                api_groups: Some(vec![String::new()]),
                resources: Some(vec!["secrets".into()]),
                resource_names: Some(reconcilers.pull_secrets.iter().cloned().collect()),
                verbs: vec!["get".into()],
                ..PolicyRule::default()
            }],
            &host,
        ));
    }
    objects
}

/// The host's rules on the Reconciler objects themselves: both kinds followed and their
/// status written; the namespaces' labels read when the host follows namespaced Reconcilers
/// (tenant rules choose by them; `reportUnmatched` reports those no rule selects).
fn reconciler_objects_rules(
    reconcilers: &crate::config::ReconcilerSettings,
) -> Vec<((String, String), Vec<&'static str>)> {
    use crate::cluster::objects::reconciler_kind::{CLUSTER_PLURAL, GROUP, PLURAL};
    let mut own = Vec::new();
    for plural in [CLUSTER_PLURAL, PLURAL] {
        own.push((
            (GROUP.to_owned(), plural.to_owned()),
            vec!["get", "list", "watch"],
        ));
        own.push((
            (GROUP.to_owned(), format!("{plural}/status")),
            vec!["patch"],
        ));
    }
    if !reconcilers.tenants.is_empty() || reconcilers.report_unmatched {
        own.push((
            (String::new(), "namespaces".to_owned()),
            vec!["get", "list", "watch"],
        ));
    }
    own
}

/// A Role in the host's namespace to `get`, by name, exactly the Secrets and `ConfigMaps` that
/// the `http:` rules of the grants (and of the Reconcilers' ceilings: `reconcilers.allow` and
/// each tenant rule's) take credentials and CA bundles from: the host lists none, and reads no
/// other.
fn http_credentials(
    config: &HostConfig,
    guests: Option<&BTreeSet<String>>,
    options: &Options,
) -> Vec<Object> {
    let granted = config
        .guests
        .iter()
        .filter(|(guest, _)| guests.is_none_or(|only| only.contains(*guest)))
        .flat_map(|(_, grant)| &grant.http);
    // A Reconciler's `http:` rules lie within its ceiling's, credentials included: the host
    // reads those of `reconcilers.allow` and of every tenant rule's `allow`.
    let allowed = config.reconcilers.iter().flat_map(|r| {
        r.allow
            .http
            .iter()
            .chain(r.tenants.iter().flat_map(|t| &t.allow.http))
    });
    let (mut secrets, mut config_maps) = (BTreeSet::new(), BTreeSet::new());
    for rule in granted.chain(allowed) {
        let named = rule
            .headers
            .values()
            .chain(&rule.bearer_token)
            .chain(&rule.ca_bundle);
        for from in named {
            match from {
                ValueFrom::SecretKeyRef(r) => secrets.insert(r.name.clone()),
                ValueFrom::ConfigMapKeyRef(r) => config_maps.insert(r.name.clone()),
            };
        }
    }
    let get = |resource: &str, names: BTreeSet<String>| {
        (!names.is_empty()).then(|| PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec![resource.into()]),
            resource_names: Some(names.into_iter().collect()),
            verbs: vec!["get".into()],
            ..PolicyRule::default()
        })
    };
    let rules: Vec<PolicyRule> = [get("secrets", secrets), get("configmaps", config_maps)]
        .into_iter()
        .flatten()
        .collect();
    if rules.is_empty() {
        return Vec::new();
    }
    bound_role(
        &format!("{}-http-credentials", options.prefix),
        &options.namespace,
        rules,
        &options.subject(),
    )
    .to_vec()
}

/// The ClusterRole of one guest's grant: `name@file` trial grants become `name-at-file` (RBAC
/// names are DNS subdomains).
fn guest_role_name(prefix: &str, guest: &str) -> String {
    format!("{prefix}-guest-{}", guest.replace('@', "-at-"))
}

/// Metadata of a generated object: its name, namespace and the label that marks it ours.
fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/part-of".to_owned(),
            "reconciler-host".to_owned(),
        )])),
        ..ObjectMeta::default()
    }
}

/// A ClusterRole of `rules` and its binding to `subject`.
fn bound_cluster_role(name: &str, rules: Vec<PolicyRule>, subject: &Subject) -> [Object; 2] {
    [
        Object::ClusterRole(ClusterRole {
            metadata: meta(name, None),
            rules: Some(rules),
            ..ClusterRole::default()
        }),
        Object::ClusterRoleBinding(ClusterRoleBinding {
            metadata: meta(name, None),
            role_ref: role_ref("ClusterRole", name),
            subjects: Some(vec![subject.clone()]),
        }),
    ]
}

/// A Role of `rules` in `namespace` and its binding to `subject`.
fn bound_role(
    name: &str,
    namespace: &str,
    rules: Vec<PolicyRule>,
    subject: &Subject,
) -> [Object; 2] {
    [
        Object::Role(Role {
            metadata: meta(name, Some(namespace)),
            rules: Some(rules),
        }),
        Object::RoleBinding(RoleBinding {
            metadata: meta(name, Some(namespace)),
            role_ref: role_ref("Role", name),
            subjects: Some(vec![subject.clone()]),
        }),
    ]
}

fn role_ref(kind: &str, name: &str) -> RoleRef {
    RoleRef {
        api_group: Some("rbac.authorization.k8s.io".into()),
        kind: kind.to_owned(),
        name: name.to_owned(),
    }
}

/// The objects as one YAML stream, each with its apiVersion and kind.
pub(crate) fn to_yaml(objects: &[Object]) -> anyhow::Result<String> {
    let mut text = String::new();
    for object in objects {
        let (api_version, kind) = match object {
            Object::ClusterRole(_) => ("rbac.authorization.k8s.io/v1", "ClusterRole"),
            Object::ClusterRoleBinding(_) => ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"),
            Object::Role(_) => ("rbac.authorization.k8s.io/v1", "Role"),
            Object::RoleBinding(_) => ("rbac.authorization.k8s.io/v1", "RoleBinding"),
            Object::ServiceAccount(_) => ("v1", "ServiceAccount"),
        };
        let mut value = serde_json::to_value(object)?;
        if let Some(map) = value.as_object_mut() {
            map.insert("apiVersion".into(), api_version.into());
            map.insert("kind".into(), kind.into());
        }
        text.push_str("---\n");
        text.push_str(&serde_yaml::to_string(&value)?);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const CONFIG: &str = r"
guests:
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
  naming:
    read: [apiextensions.k8s.io/v1/CustomResourceDefinition]
    write: [apiextensions.k8s.io/v1/CustomResourceDefinition/status]
  empty: {}
";

    fn config() -> HostConfig {
        HostConfig::parse(CONFIG, Path::new("host.yaml")).unwrap()
    }

    fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            api_groups: Some(vec![group.into()]),
            resources: Some(resources.iter().map(|r| (*r).to_owned()).collect()),
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            ..PolicyRule::default()
        }
    }

    #[test]
    fn each_grant_becomes_exactly_its_verbs() {
        let config = config();
        assert_eq!(
            guest_rules(&config, "network", &Guess),
            vec![
                rule(
                    "samplecrd.k8s.io",
                    &["networks"],
                    &["create", "delete", "get", "list", "patch", "watch"]
                ),
                rule("samplecrd.k8s.io", &["networks/status"], &["patch"]),
            ]
        );
        assert_eq!(
            guest_rules(&config, "widget", &Guess),
            vec![
                rule(
                    "",
                    &["configmaps"],
                    &["create", "delete", "get", "list", "patch", "watch"]
                ),
                rule(
                    "test.reconciler.dev",
                    &["widgets"],
                    &["get", "list", "watch"]
                ),
                rule("test.reconciler.dev", &["widgets/status"], &["patch"]),
            ]
        );
        assert_eq!(
            guest_rules(&config, "naming", &Guess),
            vec![
                rule(
                    "apiextensions.k8s.io",
                    &["customresourcedefinitions"],
                    &["get", "list", "watch"]
                ),
                rule(
                    "apiextensions.k8s.io",
                    &["customresourcedefinitions/status"],
                    &["patch"]
                ),
            ]
        );
        assert!(guest_rules(&config, "empty", &Guess).is_empty());
    }

    #[test]
    fn write_verbs_print_only_the_verbs_they_name() {
        let config = HostConfig::parse(
            "guests:\n  reloader:\n    read: [apps/v1/Deployment]\n    write: [apps/v1/Deployment, v1/ConfigMap]\n    writeVerbs: {apps/v1/Deployment: [patch], v1/ConfigMap: [delete]}\n",
            std::path::Path::new("host.yaml"),
        )
        .unwrap();
        assert_eq!(
            guest_rules(&config, "reloader", &Guess),
            vec![
                rule("", &["configmaps"], &["delete"]),
                rule("apps", &["deployments"], &["get", "list", "patch", "watch"]),
            ]
        );
    }

    #[test]
    fn plurals_follow_the_api_machinerys_guess_unless_discovered() {
        let kind = |k: &str| Gvk::new("g", "v1", k);
        assert_eq!(Guess.plural(&kind("Policy")), "policies");
        assert_eq!(Guess.plural(&kind("Ingress")), "ingresses");
        assert_eq!(Guess.plural(&kind("Network")), "networks");
        assert_eq!(Guess.plural(&kind("Endpoints")), "endpoints");
        let found = Discovered(BTreeMap::from([(kind("Octopus"), "octopodes".to_owned())]));
        assert_eq!(found.plural(&kind("Octopus")), "octopodes");
        assert_eq!(found.plural(&kind("Network")), "networks");
    }

    #[test]
    fn objects_bind_one_role_per_guest_and_the_hosts_own() {
        let config = config();
        let only: BTreeSet<String> = ["widget".to_owned()].into();
        let objects = objects(&config, Some(&only), &Guess, &Options::default());
        let yaml = to_yaml(&objects).unwrap();
        let names: Vec<String> = objects
            .iter()
            .map(|o| match o {
                Object::ClusterRole(r) => {
                    format!("ClusterRole/{}", r.metadata.name.clone().unwrap())
                }
                Object::ClusterRoleBinding(b) => {
                    format!("ClusterRoleBinding/{}", b.metadata.name.clone().unwrap())
                }
                Object::Role(r) => format!("Role/{}", r.metadata.name.clone().unwrap()),
                Object::RoleBinding(b) => {
                    format!("RoleBinding/{}", b.metadata.name.clone().unwrap())
                }
                Object::ServiceAccount(a) => {
                    format!("ServiceAccount/{}", a.metadata.name.clone().unwrap())
                }
            })
            .collect();
        assert_eq!(
            names,
            vec![
                "ClusterRole/reconciler-host",
                "ClusterRoleBinding/reconciler-host",
                "Role/reconciler-host-leader-election",
                "RoleBinding/reconciler-host-leader-election",
                "ClusterRole/reconciler-host-guest-widget",
                "ClusterRoleBinding/reconciler-host-guest-widget",
            ]
        );
        assert!(yaml.contains("kind: ClusterRole\n"), "{yaml}");
        assert!(
            yaml.contains("apiVersion: rbac.authorization.k8s.io/v1"),
            "{yaml}"
        );
        assert!(
            !yaml.contains("networks"),
            "only the guests asked for: {yaml}"
        );
    }

    #[test]
    fn the_host_gets_exactly_the_secrets_and_config_maps_http_rules_name() {
        let config: HostConfig = serde_yaml::from_str(
            "guests:\n  dns:\n    http:\n    - prefix: http://127.0.0.1:8081/api\n      headers:\n        X-API-Key: {secretKeyRef: {name: pdns, key: api-key}}\n      caBundle: {configMapKeyRef: {name: pdns-ca, key: ca.crt}}\n  other:\n    http:\n    - prefix: https://api.example.com/\n      bearerToken: {secretKeyRef: {name: example-token, key: token}}\n",
        )
        .unwrap();
        let role = objects_of(&config)
            .into_iter()
            .find_map(|o| match o {
                Object::Role(r)
                    if r.metadata.name.as_deref() == Some("reconciler-host-http-credentials") =>
                {
                    Some(r)
                }
                _ => None,
            })
            .expect("a Role for the HTTP credentials");
        let rules = role.rules.unwrap();
        assert_eq!(
            rules,
            [
                PolicyRule {
                    resource_names: Some(vec!["example-token".into(), "pdns".into()]),
                    ..rule("", &["secrets"], &["get"])
                },
                PolicyRule {
                    resource_names: Some(vec!["pdns-ca".into()]),
                    ..rule("", &["configmaps"], &["get"])
                },
            ]
        );
        let only_dns = BTreeSet::from(["dns".to_owned()]);
        let objects = objects(&config, Some(&only_dns), &Guess, &Options::default());
        let text = to_yaml(&objects).unwrap();
        assert!(
            text.contains("pdns") && !text.contains("example-token"),
            "{text}"
        );
        let none: HostConfig = serde_yaml::from_str("guests: {}\n").unwrap();
        let text = to_yaml(&objects_of(&none)).unwrap();
        assert!(!text.contains("http-credentials"), "{text}");
    }

    fn objects_of(config: &HostConfig) -> Vec<Object> {
        objects(config, None, &Guess, &Options::default())
    }

    /// The rules of the ClusterRole or Role `name` among `objects`.
    fn rules_named(objects: &[Object], name: &str) -> Option<Vec<PolicyRule>> {
        objects.iter().find_map(|o| match o {
            Object::ClusterRole(ClusterRole {
                metadata, rules, ..
            })
            | Object::Role(Role { metadata, rules }) => {
                (metadata.name.as_deref() == Some(name)).then(|| rules.clone())?
            }
            _ => None,
        })
    }

    /// Issue 52, item 4: a tenant's guest may be granted an `http:` rule only within its
    /// rule's `allow.http`, credentials included, and the host reads those credentials.
    #[test]
    fn the_host_reads_the_credentials_a_tenant_rules_http_allows() {
        let config = HostConfig::parse(
            "reconcilers:\n  allow:\n    http:\n    - prefix: https://api.example.com/\n      bearerToken: {secretKeyRef: {name: host-wide, key: token}}\n  tenants:\n  - namespaces: [team-a]\n    allow:\n      http:\n      - prefix: https://dns.example.com/api\n        headers:\n          X-API-Key: {secretKeyRef: {name: team-key, key: api-key}}\n        bearerToken: {secretKeyRef: {name: team-token, key: token}}\n        caBundle: {configMapKeyRef: {name: team-ca, key: ca.crt}}\n  - namespaceSelector: tenant=b\n    allow:\n      http:\n      - prefix: https://b.example.com/\n        headers:\n          X-Other: {configMapKeyRef: {name: b-header, key: v}}\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let rules = rules_named(&objects_of(&config), "reconciler-host-http-credentials")
            .expect("a Role for the HTTP credentials");
        assert_eq!(
            rules,
            [
                PolicyRule {
                    resource_names: Some(vec![
                        "host-wide".into(),
                        "team-key".into(),
                        "team-token".into()
                    ]),
                    ..rule("", &["secrets"], &["get"])
                },
                PolicyRule {
                    resource_names: Some(vec!["b-header".into(), "team-ca".into()]),
                    ..rule("", &["configmaps"], &["get"])
                },
            ]
        );
    }

    /// A host that reports Reconcilers no rule selects follows the namespaced ones and the
    /// namespaces' labels (to know that none selects them) even without a tenant rule.
    #[test]
    fn reporting_the_unmatched_reads_the_namespaces_without_a_tenant_rule() {
        let config = HostConfig::parse(
            "reconcilers:\n  reportUnmatched: true\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let rules = rules_named(&objects_of(&config), "reconciler-host-reconcilers").unwrap();
        assert!(
            rules.contains(&rule("", &["namespaces"], &["get", "list", "watch"])),
            "{rules:?}"
        );
        let quiet = HostConfig::parse("reconcilers: {}\n", Path::new("host.yaml")).unwrap();
        let rules = rules_named(&objects_of(&quiet), "reconciler-host-reconcilers").unwrap();
        assert!(
            rules
                .iter()
                .all(|r| r.resources.as_deref() != Some(&["namespaces".to_owned()][..])),
            "{rules:?}"
        );
    }

    /// A tenant's Reconciler writes as `spec.serviceAccountName`, any account of its own
    /// namespace: the host may impersonate every account of the namespaces a rule names (a
    /// Role there), and a ClusterRole is printed for the administrator to bind in those a
    /// selector chooses; never an account of another namespace.
    #[test]
    fn the_host_may_impersonate_any_account_of_a_tenant_namespace_and_no_other() {
        let config = HostConfig::parse(
            "reconcilers:\n  tenants:\n  - namespaces: [team-a, team-b]\n    allow: {write: [v1/ConfigMap]}\n  - namespaceSelector: tenant=true\n    allow: {read: [v1/ConfigMap]}\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let objects = objects_of(&config);
        let accounts = rule(
            "authentication.k8s.io",
            &["serviceaccounts"],
            &["impersonate:serviceaccount"],
        );
        for i in 0..2 {
            assert_eq!(
                rules_named(&objects, &format!("reconciler-host-tenant-{i}-accounts")),
                Some(vec![accounts.clone()]),
                "tenant {i}"
            );
        }
        let bound: Vec<(String, String)> = objects
            .iter()
            .filter_map(|o| match o {
                Object::RoleBinding(b) if b.role_ref.name.ends_with("-accounts") => Some((
                    b.metadata.namespace.clone().unwrap_or_default(),
                    format!("{} -> {:?}", b.role_ref.name, b.subjects),
                )),
                _ => None,
            })
            .collect();
        let host = format!("{:?}", Some(vec![Options::default().subject()]));
        assert_eq!(
            bound,
            [
                (
                    "team-a".to_owned(),
                    format!("reconciler-host-tenant-0-accounts -> {host}")
                ),
                (
                    "team-b".to_owned(),
                    format!("reconciler-host-tenant-0-accounts -> {host}")
                ),
            ],
            "bound in the named namespaces only, to the host"
        );
        assert!(
            objects.iter().all(|o| !matches!(o,
                Object::ClusterRoleBinding(b) if b.role_ref.name.ends_with("-accounts"))),
            "never bound cluster-wide"
        );
    }

    #[test]
    fn reconcilers_get_their_objects_the_ceiling_and_only_the_named_pull_secrets() {
        let config = HostConfig::parse(
            "reconcilers:\n  pullSecrets: [registry]\n  allow:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let objects = objects(&config, None, &Guess, &Options::default());
        let rules_of = |name: &str| {
            objects.iter().find_map(|o| match o {
                Object::ClusterRole(ClusterRole {
                    metadata, rules, ..
                })
                | Object::Role(Role { metadata, rules }) => {
                    (metadata.name.as_deref() == Some(name)).then(|| rules.clone())?
                }
                _ => None,
            })
        };
        let role =
            rules_of("reconciler-host-reconcilers").expect("a ClusterRole for the Reconcilers");
        assert_eq!(
            role,
            vec![
                rule(
                    "reconciler.dev",
                    &["clusterreconcilers", "reconcilers"],
                    &["get", "list", "watch"]
                ),
                rule(
                    "reconciler.dev",
                    &["clusterreconcilers/status", "reconcilers/status"],
                    &["patch"]
                ),
                rule(
                    "test.reconciler.dev",
                    &["widgets"],
                    &["get", "list", "watch"]
                ),
                rule("test.reconciler.dev", &["widgets/status"], &["patch"]),
            ]
        );
        let secrets =
            rules_of("reconciler-host-pull-secrets").expect("a Role for the pull Secrets");
        assert_eq!(
            secrets,
            vec![PolicyRule {
                resource_names: Some(vec!["registry".into()]),
                ..rule("", &["secrets"], &["get"])
            }]
        );
    }

    #[test]
    fn a_tenant_rule_lets_the_host_impersonate_only_its_account_and_prints_the_tenants_role() {
        let config = HostConfig::parse(
            "reconcilers:\n  tenants:\n  - namespaces: [team-a]\n    namespaceSelector: tenant=true\n    allow: {read: [v1/ConfigMap], write: [v1/ConfigMap]}\n",
            Path::new("host.yaml"),
        )
        .unwrap();
        let objects = objects(&config, None, &Guess, &Options::default());
        let yaml = to_yaml(&objects).unwrap();
        let host = objects
            .iter()
            .find_map(|o| match o {
                Object::ClusterRole(r)
                    if r.metadata.name.as_deref() == Some("reconciler-host-tenant-0-host") =>
                {
                    r.rules.clone()
                }
                _ => None,
            })
            .expect("the host's rules for the tenant rule");
        let impersonation = host
            .iter()
            .find(|r| r.resources.as_deref() == Some(&["serviceaccounts".to_owned()][..]))
            .expect("impersonation of the tenants' account");
        assert_eq!(
            impersonation.resource_names.as_deref(),
            Some(&["reconciler".to_owned()][..]),
            "only the rule's account name"
        );
        assert!(
            host.iter()
                .all(|r| !r.verbs.iter().any(|v| v == "create" || v == "delete")),
            "the host writes for tenants only by impersonation: {host:?}"
        );
        assert!(
            yaml.contains("kind: RoleBinding") && yaml.contains("namespace: team-a"),
            "the tenant's role bound in the namespace the rule names: {yaml}"
        );
        let reconcilers = objects
            .iter()
            .find_map(|o| match o {
                Object::ClusterRole(r)
                    if r.metadata.name.as_deref() == Some("reconciler-host-reconcilers") =>
                {
                    r.rules.clone()
                }
                _ => None,
            })
            .unwrap();
        assert!(
            reconcilers
                .iter()
                .any(|r| r.resources.as_deref() == Some(&["namespaces".to_owned()][..])),
            "namespace labels are read: {reconcilers:?}"
        );
    }
}
