//! Tenant rules as they apply to a running host, against the real API server and a real
//! registry, judged by reading the API server (Reconcilers' status, Widgets' status and
//! finalizers):
//!
//! - a rule's own `verify`: its namespaces' modules must be signed by its keys (cosign 2, built
//!   from the Go module proxy), at the pull and at a load from the cache with the registry
//!   down; no other rule's keys, nor the host's, admit one, and a rule without `verify` keeps
//!   the host's;
//! - namespaces that change: one created after the host started, one labelled into a rule,
//!   one labelled out of every rule and one moved to another rule, each started or stopped
//!   without a restart; a stopped guest's finalizers are released by the host's
//!   `finalizerPolicy`, as for any unloaded guest, in its own namespace only;
//! - rules that change: `host.yaml` rewritten under a running host (a rule added, its quota,
//!   registries and pull Secrets narrowed and widened, an invalid file, a rule given keys);
//! - a host without `reportUnmatched` that stops serving a namespace marks the statuses it
//!   wrote (`status.host`) `NoTenantRule`; no host, with `reportUnmatched` or without, marks a
//!   status another host wrote.
//!
//! The host runs as its ServiceAccount bound to exactly what `reconciler-host rbac` prints for
//! its `host.yaml` (printed and applied again before each reload, what it no longer prints
//! deleted), and each namespace's team acts under the team Role of `examples/team-role.yaml`
//! (`reconciler_host_tests::accounts`): neither is the control plane's administrator.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::accounts::{HostAccount, team};
use reconciler_host_tests::namespace::{TEST_NAMESPACE_LABEL, unique_name};
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, PrivateRegistry, apply_crd_file, guest_component,
    test_namespace, wait_until, with_password,
};
use serde_json::{Value, json};

const FINALIZER: &str = "test.reconciler.dev/cleanup";

fn widget_grant() -> Value {
    json!({
        "read": ["test.reconciler.dev/v1/Widget", "v1/ConfigMap"],
        "write": ["test.reconciler.dev/v1/Widget", "test.reconciler.dev/v1/Widget/status", "v1/ConfigMap"],
    })
}

/// A tenant rule's `allow` that covers [`widget_grant`] from `registry`.
fn rule_allow(registry: &str) -> String {
    format!(
        "{{read: [v1/ConfigMap, test.reconciler.dev/v1/Widget], write: [v1/ConfigMap, test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status], registries: [\"{registry}/teams\"]}}"
    )
}

struct World {
    cp: &'static ControlPlane,
    /// The platform administrator's client: namespaces, their labels, Widgets, Secrets.
    client: kube::Client,
    /// Each namespace's team, acting under the team Role only.
    teams: Mutex<BTreeMap<String, kube::Client>>,
    registry: PrivateRegistry,
    host_ns: String,
    /// The host's ServiceAccount, bound to what `rbac` prints for its `host.yaml`.
    account: HostAccount,
    /// The namespace label whose values choose this test's rules.
    label: String,
    host: Option<HostProcess>,
}

impl World {
    async fn new(cp: &'static ControlPlane, name: &str) -> Result<Self> {
        let client = cp.client().await?;
        apply_crd_file(&client, "deploy/crds/reconcilers.yaml").await?;
        apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
        let registry = PrivateRegistry::start(name).await?;
        let host_ns = test_namespace(&client, &format!("{name}-host")).await?;
        let auth = json!({"auths": {registry.address(): {
            "username": registry.username(), "password": registry.password()}}});
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "registry"},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": auth.to_string()},
        }))?;
        Api::<Secret>::namespaced(client.clone(), &host_ns)
            .create(&PostParams::default(), &secret)
            .await?;
        let account = HostAccount::create(cp, &host_ns).await?;
        Ok(Self {
            cp,
            client,
            teams: Mutex::default(),
            registry,
            host_ns,
            account,
            label: format!("{}.test/tenant", unique_name("rules")),
            host: None,
        })
    }

    /// The host's `host.yaml` with `reconcilers` (YAML, indented as the section's body).
    fn config(&self, reconcilers: &str) -> String {
        format!(
            "registries:\n  insecure: [\"{}\"]\nfinalizerPolicy: {{onUnload: release, grace: 1s}}\nreconcilers:\n{reconcilers}",
            self.registry.address()
        )
    }

    /// Starts the host with `reconcilers`, as its account bound to what `rbac` prints for it.
    async fn start_host(&mut self, reconcilers: &str) -> Result<()> {
        let config = self.config(reconcilers);
        self.account.grant(self.cp, &config).await?;
        self.host = Some(
            HostProcess::start(HostOptions {
                kubeconfig: self.account.kubeconfig(),
                config,
                guests: vec![],
                namespace: None,
                extra_args: vec!["--namespace".into(), self.host_ns.clone()],
            })
            .await?,
        );
        Ok(())
    }

    /// Rewrites the running host's `host.yaml` with `reconcilers` (as [`Self::start_host`]),
    /// its account first bound to what `rbac` prints for the new file, as an operator deploys
    /// both together.
    async fn reload(&self, reconcilers: &str) -> Result<()> {
        let config = self.config(reconcilers);
        self.account.grant(self.cp, &config).await?;
        self.write_config(&config)
    }

    /// Rewrites the running host's `host.yaml` with `config`, by rename as editors and
    /// ConfigMap volumes do.
    fn write_config(&self, config: &str) -> Result<()> {
        let host = self.host.as_ref().context("no host running")?;
        let tmp = host.dir.path().join(".host.yaml.tmp");
        std::fs::write(&tmp, config)?;
        std::fs::rename(&tmp, host.dir.path().join("host.yaml"))?;
        Ok(())
    }

    fn log_tail(&self) -> String {
        self.host
            .as_ref()
            .map(HostProcess::log_tail)
            .unwrap_or_default()
    }

    /// `reconciler-host push` of a built guest to `teams/REPO:TAG`; the reference pinned by
    /// digest, and the digest.
    fn push(&self, guest: &str, repo_tag: &str) -> Result<(String, String)> {
        let file = guest_component(guest)?;
        let module = format!("oci://{}/teams/{repo_tag}", self.registry.address());
        let mut command = std::process::Command::new(target_dir().join("debug/reconciler-host"));
        command.arg("push").arg(&file).arg(&module).args([
            "--plain-http",
            "--username",
            self.registry.username(),
            "--password-stdin",
        ]);
        let out = with_password(command, self.registry.password())?;
        ensure!(
            out.status.success(),
            "push: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_owned();
        let repository = module.rsplit_once(':').map_or(module.as_str(), |(r, _)| r);
        Ok((format!("{repository}@{digest}"), digest))
    }

    /// A namespace with `labels` from its creation on, its team (the team Role), and the
    /// account a tenant's guest writes as (`reconciler`, which may do what [`widget_grant`]
    /// grants there).
    async fn namespace(&self, prefix: &str, labels: &[(&str, &str)]) -> Result<String> {
        let name = unique_name(prefix);
        let mut all = BTreeMap::from([(TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned())]);
        all.extend(
            labels
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned())),
        );
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                labels: Some(all),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        let team = team(self.cp, &name).await?;
        self.teams
            .lock()
            .expect("teams lock")
            .insert(name.clone(), team);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("reconciler".into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        Api::<ServiceAccount>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &account)
            .await?;
        // A Role of its own: `edit` aggregates its rules through the controller-manager,
        // which this control plane does not run.
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "reconciler"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"],
                 "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
                {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets"],
                 "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
                {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets/status"], "verbs": ["patch"]},
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            ],
        }))?;
        Api::<Role>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &role)
            .await?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "reconciler"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reconciler"},
            "subjects": [{"kind": "ServiceAccount", "name": "reconciler", "namespace": name}],
        }))?;
        Api::<RoleBinding>::namespaced(self.client.clone(), &name)
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(name)
    }

    /// Sets the rule label of namespace `ns` to `value`, or removes it.
    async fn relabel(&self, ns: &str, value: Option<&str>) -> Result<()> {
        Api::<Namespace>::all(self.client.clone())
            .patch(
                ns,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {&self.label: value}}})),
            )
            .await?;
        Ok(())
    }

    /// The Reconcilers of `ns`, as its team reaches them.
    fn reconcilers(&self, ns: &str) -> Api<DynamicObject> {
        let team = self
            .teams
            .lock()
            .expect("teams lock")
            .get(ns)
            .cloned()
            .unwrap_or_else(|| panic!("no team in {ns}: make it with World::namespace"));
        Api::namespaced_with(
            team,
            ns,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "Reconciler"),
                "reconcilers",
            ),
        )
    }

    fn widgets(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            ns,
            &ApiResource::from_gvk(&GroupVersionKind::gvk(
                "test.reconciler.dev",
                "v1",
                "Widget",
            )),
        )
    }

    async fn reconciler(&self, ns: &str, name: &str, module: &str) -> Result<()> {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name},
            "spec": {"module": module, "pullSecretRef": {"name": "registry"}, "grant": widget_grant()},
        }))?;
        self.reconcilers(ns)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating Reconciler {ns}/{name}"))?;
        Ok(())
    }

    /// Waits until condition `kind` of `ns/name` is `status` with `reason`; its message and
    /// the object's status.
    async fn condition(
        &self,
        ns: &str,
        name: &str,
        kind: &str,
        status: &str,
        reason: &str,
    ) -> Result<(String, Value)> {
        let api = self.reconcilers(ns);
        wait_until(
            &format!("Reconciler {ns}/{name} {kind}={status} ({reason})"),
            Duration::from_secs(120),
            || async {
                let object = api.get(name).await?;
                let found = object.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == kind)
                    .cloned()
                    .unwrap_or(Value::Null);
                if found["status"] == status && found["reason"] == reason {
                    let message = found["message"].as_str().unwrap_or_default().to_owned();
                    return Ok((message, object.data["status"].clone()));
                }
                bail!("{kind} is {found}")
            },
        )
        .await
        .map_err(|e| e.context(self.log_tail()))
    }

    async fn create_widget(&self, ns: &str, name: &str) -> Result<()> {
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": {},
        }))?;
        self.widgets(ns)
            .create(&PostParams::default(), &widget)
            .await
            .with_context(|| format!("creating Widget {ns}/{name}"))?;
        Ok(())
    }

    /// Waits until a guest reconciled Widget `ns/name`: its status written, its finalizer on.
    async fn reconciled(&self, ns: &str, name: &str) -> Result<()> {
        let api = self.widgets(ns);
        wait_until(
            &format!("Widget {ns}/{name} reconciled"),
            Duration::from_secs(120),
            || async {
                let object = api.get(name).await?;
                ensure!(
                    object.data["status"]["observedGeneration"].is_i64()
                        && finalizers(&object).contains(&FINALIZER.to_owned()),
                    "status {} finalizers {:?}",
                    object.data["status"],
                    finalizers(&object)
                );
                Ok(())
            },
        )
        .await
        .map_err(|e| e.context(self.log_tail()))
    }

    /// Waits until Widget `ns/name` no longer carries the guest's finalizer (released by the
    /// host's `finalizerPolicy` once its guest was unloaded).
    async fn released(&self, ns: &str, name: &str) -> Result<()> {
        let api = self.widgets(ns);
        wait_until(
            &format!("the finalizer of Widget {ns}/{name} released"),
            Duration::from_secs(120),
            || async {
                let object = api.get(name).await?;
                let on = finalizers(&object);
                ensure!(!on.contains(&FINALIZER.to_owned()), "finalizers {on:?}");
                Ok(())
            },
        )
        .await
        .map_err(|e| e.context(self.log_tail()))
    }

    /// Creates Widget `ns/name` and checks that for `wait` no guest touches it.
    async fn untouched(&self, ns: &str, name: &str, wait: Duration) -> Result<()> {
        self.create_widget(ns, name).await?;
        tokio::time::sleep(wait).await;
        let object = self.widgets(ns).get(name).await?;
        ensure!(
            object.data["status"].is_null() && finalizers(&object).is_empty(),
            "Widget {ns}/{name} was reconciled: status {} finalizers {:?}",
            object.data["status"],
            finalizers(&object)
        );
        Ok(())
    }
}

fn finalizers(object: &DynamicObject) -> Vec<String> {
    object.metadata.finalizers.clone().unwrap_or_default()
}

/// `reconcilers.tenants[N].verify`: each rule's namespaces run only modules its own keys
/// signed. Team A's key admits a module in team A's namespace and nowhere else: not in team
/// B's (whose rule names B's key), not in a namespace whose rule inherits the host's; the
/// host's key admits none in team A's. With the registry down, the signatures kept in the
/// cache are judged against the asking rule's keys, not against those of the rule that pulled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_rules_keys_admit_its_namespaces_modules_and_no_others() -> Result<()> {
    use reconciler_host_tests::clients::{docker_config, generate_key_pair, sign};
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-keys").await?;
    let keys = tempfile::tempdir()?;
    let host_key = generate_key_pair(keys.path(), "host")?;
    let a_key = generate_key_pair(keys.path(), "team-a")?;
    let b_key = generate_key_pair(keys.path(), "team-b")?;
    let repo = unique_name("widget");
    let (by_a, a_digest) = world.push("widget", &format!("{repo}:a"))?;
    let (by_host, host_digest) = world.push("widget-v2", &format!("{repo}:host"))?;
    ensure!(a_digest != host_digest, "two modules, two digests");
    let docker = docker_config(&world.registry)?;
    let image = |digest: &str| format!("{}/teams/{repo}@{digest}", world.registry.address());
    sign(&image(&a_digest), &a_key, docker.path())?;
    sign(&image(&host_digest), &host_key, docker.path())?;

    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let allow = rule_allow(&address);
    let rule = |name: &str, value: &str, verify: Option<&std::path::Path>| {
        let verify = verify.map_or(String::new(), |key| {
            format!(
                "\n    verify: {{required: true, keys: [\"{}\"]}}",
                key.display()
            )
        });
        format!(
            "  - name: {name}\n    namespaceSelector: \"{label}={value}\"\n    pullSecrets: [registry]\n    allow: {allow}{verify}\n"
        )
    };
    let reconcilers = format!(
        "  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n  verify: {{required: true, keys: [\"{}\"]}}\n  tenants:\n{}{}{}",
        host_key.display(),
        rule("team-a", "a", Some(&a_key)),
        rule("team-b", "b", Some(&b_key)),
        rule("inherits", "c", None),
    );
    world.start_host(&reconcilers).await?;
    let team_a = world.namespace("keys-a", &[(&label, "a")]).await?;
    let team_b = world.namespace("keys-b", &[(&label, "b")]).await?;
    let team_c = world.namespace("keys-c", &[(&label, "c")]).await?;

    // Team A's key, in team A's namespace: runs, and says by whose key.
    world.reconciler(&team_a, "widget", &by_a).await?;
    let (_, status) = world
        .condition(&team_a, "widget", "Ready", "True", "Ready")
        .await?;
    ensure!(
        status["signedBy"] == a_key.display().to_string(),
        "signed by team A's key: {status}"
    );
    world.create_widget(&team_a, "w").await?;
    world.reconciled(&team_a, "w").await?;

    // The same module in team B's namespace: refused, naming team B's rule.
    world.reconciler(&team_b, "widget", &by_a).await?;
    let (message, _) = world
        .condition(&team_b, "widget", "Pulled", "False", "SignatureInvalid")
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[1] (team-b).verify"),
        "{message}"
    );
    world
        .condition(&team_b, "widget", "Ready", "False", "SignatureInvalid")
        .await?;
    // The host's key admits nothing in a rule with keys of its own.
    world.reconciler(&team_a, "host-signed", &by_host).await?;
    let (message, _) = world
        .condition(
            &team_a,
            "host-signed",
            "Pulled",
            "False",
            "SignatureInvalid",
        )
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[0] (team-a).verify"),
        "{message}"
    );
    // A rule without verify keeps the host's: its key admits, team A's does not.
    world.reconciler(&team_c, "widget", &by_host).await?;
    let (_, status) = world
        .condition(&team_c, "widget", "Ready", "True", "Ready")
        .await?;
    ensure!(
        status["signedBy"] == host_key.display().to_string(),
        "{status}"
    );
    world.reconciler(&team_c, "a-signed", &by_a).await?;
    let (message, _) = world
        .condition(&team_c, "a-signed", "Pulled", "False", "SignatureInvalid")
        .await?;
    ensure!(message.contains("(reconcilers.verify lists"), "{message}");

    // The registry down: team A's module is in the cache, pulled by this same reference and
    // pull Secret, with team A's signature beside it. Asked for in team B's namespace, it is
    // judged by team B's keys.
    world.registry.stop().await?;
    world.reconciler(&team_b, "from-cache", &by_a).await?;
    let (message, _) = world
        .condition(&team_b, "from-cache", "Pulled", "False", "SignatureInvalid")
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[1] (team-b).verify"),
        "{message}"
    );
    // Team A's namespace moved to team B's rule: its running guest stops (its finalizer
    // released by the host's policy) and, loaded again from the cache, is refused by B's keys.
    world.relabel(&team_a, Some("b")).await?;
    world.released(&team_a, "w").await?;
    let (message, _) = world
        .condition(&team_a, "widget", "Pulled", "False", "SignatureInvalid")
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[1] (team-b).verify"),
        "{message}"
    );
    world
        .untouched(&team_a, "after-move", Duration::from_secs(5))
        .await?;
    world.registry.start_again().await?;

    // A reload gives the inheriting rule team A's key: the host-signed guest running there
    // stops, refused by the new keys, and the module team A signed, refused until now, runs.
    world.reload(&format!(
        "  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n  verify: {{required: true, keys: [\"{}\"]}}\n  tenants:\n{}{}{}",
        host_key.display(),
        rule("team-a", "a", Some(&a_key)),
        rule("team-b", "b", Some(&b_key)),
        rule("inherits", "c", Some(&a_key)),
    ))
    .await?;
    let (message, status) = world
        .condition(&team_c, "widget", "Ready", "False", "SignatureInvalid")
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[2] (inherits).verify")
            && !message.contains("keeps running")
            && status["guest"].is_null(),
        "still running under the old keys: {message} {status}"
    );
    world
        .condition(&team_c, "a-signed", "Ready", "True", "Ready")
        .await?;
    Ok(())
}

/// Namespace labels are followed while the host runs: a namespace created after the start
/// with a rule's label, and one labelled into a rule later, get their Reconcilers started; one
/// labelled out of every rule, or moved to a rule that does not cover its Reconciler's grant,
/// gets them stopped (not kept as the last good version), and the host's `finalizerPolicy`
/// releases what the stopped guest held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespaces_labelled_in_or_out_start_or_stop_their_reconcilers_without_a_restart()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-labels").await?;
    let repo = unique_name("widget");
    let (module, _) = world.push("widget", &format!("{repo}:v1"))?;
    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let allow = rule_allow(&address);
    // The narrow rule lets no Reconciler read ConfigMaps, which the widget's grant asks for.
    let reconcilers = format!(
        "  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n  reportUnmatched: true\n  tenants:\n  - name: teams\n    namespaceSelector: \"{label}=true\"\n    pullSecrets: [registry]\n    allow: {allow}\n  - name: narrow\n    namespaceSelector: \"{label}=narrow\"\n    pullSecrets: [registry]\n    allow: {{read: [test.reconciler.dev/v1/Widget], write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status], registries: [\"{address}/teams\"]}}\n"
    );
    world.start_host(&reconcilers).await?;

    // (b) Created after the start, already labelled.
    let born = world.namespace("born-tenant", &[(&label, "true")]).await?;
    world.reconciler(&born, "widget", &module).await?;
    world
        .condition(&born, "widget", "Ready", "True", "Ready")
        .await?;
    world.create_widget(&born, "w").await?;
    world.reconciled(&born, "w").await?;

    // (a) Labelled into the rule later: from NoTenantRule to running.
    let later = world.namespace("later-tenant", &[]).await?;
    world.reconciler(&later, "widget", &module).await?;
    world
        .condition(&later, "widget", "Ready", "False", "NoTenantRule")
        .await?;
    world
        .untouched(&later, "before", Duration::from_secs(3))
        .await?;
    world.relabel(&later, Some("true")).await?;
    world
        .condition(&later, "widget", "Ready", "True", "Ready")
        .await?;
    world.reconciled(&later, "before").await?;

    // (a) Labelled out of every rule: stopped, its finalizer released, NoTenantRule.
    world.relabel(&later, None).await?;
    world
        .condition(&later, "widget", "Ready", "False", "NoTenantRule")
        .await?;
    world.released(&later, "before").await?;
    world
        .untouched(&later, "after", Duration::from_secs(5))
        .await?;
    // Released in that namespace only: another tenant's guest, declaring the same finalizer on
    // the same kind, runs on and keeps it on its Widget.
    let kept = world.widgets(&born).get("w").await?;
    ensure!(
        finalizers(&kept).contains(&FINALIZER.to_owned()),
        "the running tenant's finalizer was released too: {:?}",
        finalizers(&kept)
    );

    // Moved to a rule that does not cover the grant: stopped, not kept as the last good
    // version under the rule it ran under.
    world.relabel(&born, Some("narrow")).await?;
    let (message, _) = world
        .condition(&born, "widget", "Ready", "False", "GrantBeyondTenantRule")
        .await?;
    ensure!(
        message.contains("reconcilers.tenants[1] (narrow)"),
        "{message}"
    );
    world.released(&born, "w").await?;
    world
        .untouched(&born, "after", Duration::from_secs(5))
        .await?;

    // And back: running again, without a restart.
    world.relabel(&born, Some("true")).await?;
    world
        .condition(&born, "widget", "Ready", "True", "Ready")
        .await?;
    world.reconciled(&born, "after").await?;

    // A host with `reportUnmatched` marks no status another host wrote.
    another_hosts_status_stays(&mut world, &module).await
}

/// Every part of `reconcilers.tenants` follows a reload of `host.yaml`: a rule added to a host
/// that started with none opens its namespace; a quota lowered, a registry or pull Secret no
/// longer listed stops the running Reconciler (its finalizer released, its status saying
/// why) and raising them again starts it; an invalid file changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_of_the_tenant_rules_opens_bounds_and_closes_without_a_restart() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-reload").await?;
    let repo = unique_name("widget");
    let (module, _) = world.push("widget", &format!("{repo}:v1"))?;
    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let allow = rule_allow(&address);
    let host = format!("  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n");
    let rule = |quota: u32, secrets: &str, allow: &str| {
        format!(
            "{host}  tenants:\n  - name: opened\n    namespaceSelector: \"{label}=open\"\n    quota: {{reconcilers: {quota}}}\n    pullSecrets: [{secrets}]\n    allow: {allow}\n"
        )
    };
    // No tenant rule at all: the host does not even follow namespaced Reconcilers.
    world.start_host(&host).await?;
    let ns = world
        .namespace("reload-tenant", &[(&label, "open")])
        .await?;
    world.reconciler(&ns, "widget", &module).await?;
    world
        .untouched(&ns, "closed", Duration::from_secs(3))
        .await?;

    // A reload that adds the rule opens the namespace.
    world.reload(&rule(1, "registry", &allow)).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    world.reconciled(&ns, "closed").await?;

    // The quota lowered below what runs: stopped, released, and said.
    world.reload(&rule(0, "registry", &allow)).await?;
    let (message, _) = world
        .condition(&ns, "widget", "Ready", "False", "TenantQuotaExceeded")
        .await?;
    ensure!(message.contains("quota of 0"), "{message}");
    world.released(&ns, "closed").await?;
    world.reload(&rule(1, "registry", &allow)).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;

    // The rule's registries no longer cover the module.
    let elsewhere = allow.replace(&format!("{address}/teams"), &format!("{address}/elsewhere"));
    world.reload(&rule(1, "registry", &elsewhere)).await?;
    world
        .condition(&ns, "widget", "Ready", "False", "RegistryNotAllowed")
        .await?;
    world
        .untouched(&ns, "fenced", Duration::from_secs(3))
        .await?;

    // Its pull Secret no longer listed.
    world.reload(&rule(1, "", &allow)).await?;
    world
        .condition(&ns, "widget", "Ready", "False", "PullSecretNotAllowed")
        .await?;

    // Back within every bound, then an invalid file: refused, and the guest runs on.
    world.reload(&rule(1, "registry", &allow)).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    world.reconciled(&ns, "fenced").await?;
    // `rbac` refuses the file as the host does: the RBAC stays as it was.
    world.write_config(
        &world.config(&format!("{}    bogus: true\n", rule(0, "registry", &allow))),
    )?;
    wait_until(
        "the invalid configuration refused",
        Duration::from_secs(30),
        || async {
            let log = world
                .host
                .as_ref()
                .map(HostProcess::log)
                .unwrap_or_default();
            ensure!(log.contains("configuration change refused"), "not yet");
            Ok(())
        },
    )
    .await?;
    world.create_widget(&ns, "after-invalid").await?;
    world.reconciled(&ns, "after-invalid").await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    Ok(())
}

/// A spec the host cannot run (a module the CRD admits and the host refuses) keeps the version
/// that last ran only while that version passes every check of the namespace's current rule:
/// it keeps its quota slot (a second Reconciler is held, not run beside it), a reload that
/// narrows the rule's registries stops it, and so does a move of its namespace to another rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_spec_keeps_its_last_good_version_only_within_the_current_rule() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-invalid").await?;
    let repo = unique_name("widget");
    let (module, _) = world.push("widget", &format!("{repo}:v1"))?;
    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let allow = rule_allow(&address);
    let elsewhere = allow.replace(&format!("{address}/teams"), &format!("{address}/elsewhere"));
    let rules = |first: &str| {
        format!(
            "  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n  tenants:\n  - name: first\n    namespaceSelector: \"{label}=first\"\n    quota: {{reconcilers: 1}}\n    pullSecrets: [registry]\n    allow: {first}\n  - name: second\n    namespaceSelector: \"{label}=second\"\n    quota: {{reconcilers: 1}}\n    pullSecrets: [registry]\n    allow: {allow}\n"
        )
    };
    world.start_host(&rules(&allow)).await?;
    let ns = world
        .namespace("invalid-tenant", &[(&label, "first")])
        .await?;
    let set_module = |module: String| {
        let api = world.reconcilers(&ns);
        async move {
            api.patch(
                "widget",
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"module": module}})),
            )
            .await
        }
    };
    world.reconciler(&ns, "widget", &module).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;

    // Made invalid: the last good version runs on, and still holds the namespace's one slot.
    set_module("oci://nohost/x".into()).await?;
    world
        .condition(&ns, "widget", "Ready", "False", "InvalidSpec")
        .await?;
    world.create_widget(&ns, "kept").await?;
    world.reconciled(&ns, "kept").await?;
    world.reconciler(&ns, "beside", &module).await?;
    world
        .condition(&ns, "beside", "Ready", "False", "TenantQuotaExceeded")
        .await?;

    // A reload that narrows the rule's registries stops the kept version too.
    world.reload(&rules(&elsewhere)).await?;
    let (message, _) = world
        .condition(&ns, "widget", "Ready", "False", "RegistryNotAllowed")
        .await?;
    ensure!(message.contains("last good version stopped"), "{message}");
    world.released(&ns, "kept").await?;
    world
        .untouched(&ns, "fenced", Duration::from_secs(3))
        .await?;

    // Back within the rule, valid again, then invalid again and moved to another rule: stopped.
    world
        .reconcilers(&ns)
        .delete("beside", &Default::default())
        .await?;
    world.reload(&rules(&allow)).await?;
    set_module(module.clone()).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    set_module("oci://nohost/y".into()).await?;
    world
        .condition(&ns, "widget", "Ready", "False", "InvalidSpec")
        .await?;
    world.reconciled(&ns, "fenced").await?;
    world.relabel(&ns, Some("second")).await?;
    world.released(&ns, "fenced").await?;
    let (message, _) = world
        .condition(&ns, "widget", "Ready", "False", "InvalidSpec")
        .await?;
    ensure!(message.contains("now falls under"), "{message}");
    world
        .untouched(&ns, "moved", Duration::from_secs(3))
        .await?;
    Ok(())
}

/// A valid spec whose change fails (a module that cannot be pulled) keeps the version that
/// runs only while that version passes the rule too: the larger of the two counts in the
/// quota, and a reload that takes the running version's registry away stops it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_change_is_judged_by_the_version_that_still_runs() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-failed").await?;
    let repo = unique_name("widget");
    let (module, _) = world.push("widget", &format!("{repo}:v1"))?;
    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let rules = |registries: &str| {
        let allow = rule_allow(&address).replace(&format!("[\"{address}/teams\"]"), registries);
        format!(
            "  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n  tenants:\n  - name: first\n    namespaceSelector: \"{label}=first\"\n    quota: {{memoryMiB: 100}}\n    pullSecrets: [registry]\n    allow: {allow}\n"
        )
    };
    let both = format!("[\"{address}/teams\"]");
    world.start_host(&rules(&both)).await?;
    let ns = world
        .namespace("failed-tenant", &[(&label, "first")])
        .await?;
    let spec = |module: &str, memory: u32| {
        let mut grant = widget_grant();
        grant["limits"] = json!({"memoryMiB": memory, "concurrency": 1});
        json!({"module": module, "pullSecretRef": {"name": "registry"}, "grant": grant})
    };
    let create = |name: &str, memory: u32| {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name}, "spec": spec(&module, memory),
        }))
        .unwrap();
        let api = world.reconcilers(&ns);
        async move { api.create(&PostParams::default(), &object).await }
    };
    create("widget", 64).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;

    // Asked for 1 MiB from a module that does not exist: the 64 MiB version runs on, and is
    // what the quota counts, so a second of 64 MiB does not fit in 100.
    let missing = format!("oci://{address}/teams/next/{repo}-missing:v1");
    world
        .reconcilers(&ns)
        .patch(
            "widget",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec(&missing, 1)})),
        )
        .await?;
    let api = world.reconcilers(&ns);
    wait_until(
        "the failed change refused, the last good version running",
        Duration::from_secs(120),
        || async {
            let object = api.get("widget").await?;
            let ready = object.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == "Ready")
                .cloned()
                .unwrap_or(Value::Null);
            ensure!(
                ready["status"] == "False"
                    && ready["message"]
                        .as_str()
                        .is_some_and(|m| m.contains("last good version keeps running")),
                "Ready is {ready}"
            );
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(world.log_tail()))?;
    world.create_widget(&ns, "kept").await?;
    world.reconciled(&ns, "kept").await?;
    create("beside", 64).await?;
    let (message, _) = world
        .condition(&ns, "beside", "Ready", "False", "TenantQuotaExceeded")
        .await?;
    ensure!(message.contains("128 MiB"), "{message}");

    // A reload that allows the new spec's registry but no longer the running version's.
    world
        .reload(&rules(&format!("[\"{address}/teams/next\"]")))
        .await?;
    world
        .condition(&ns, "widget", "Ready", "False", "RegistryNotAllowed")
        .await?;
    world.released(&ns, "kept").await?;
    Ok(())
}

/// A host without `reportUnmatched` that stops serving a namespace (labelled out of every rule,
/// or its rule removed by a reload) marks the Reconcilers whose status it wrote `NoTenantRule`
/// instead of leaving their `Ready=True` behind; a status another host wrote stays as it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_stops_serving_a_namespace_leaves_no_stale_ready() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut world = World::new(cp, "rule-stale").await?;
    let repo = unique_name("widget");
    let (module, _) = world.push("widget", &format!("{repo}:v1"))?;
    let (address, label) = (world.registry.address().to_owned(), world.label.clone());
    let allow = rule_allow(&address);
    let host = format!("  pullSecrets: [registry]\n  allow: {{registries: [\"{address}\"]}}\n");
    let with_rule = format!(
        "{host}  tenants:\n  - name: teams\n    namespaceSelector: \"{label}=true\"\n    pullSecrets: [registry]\n    allow: {allow}\n"
    );
    world.start_host(&with_rule).await?;
    let me = format!("{}/reconciler-host", world.host_ns);

    let ns = world.namespace("stale-tenant", &[(&label, "true")]).await?;
    world.reconciler(&ns, "widget", &module).await?;
    let (_, status) = world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    ensure!(
        status["host"] == me.as_str(),
        "status.host {}",
        status["host"]
    );
    world.create_widget(&ns, "w").await?;
    world.reconciled(&ns, "w").await?;

    // Labelled out of every rule.
    world.relabel(&ns, None).await?;
    let (message, _) = world
        .condition(&ns, "widget", "Ready", "False", "NoTenantRule")
        .await?;
    ensure!(
        message.contains(&format!("host {me} no longer serves namespace {ns}")),
        "{message}"
    );
    world.released(&ns, "w").await?;

    // Back in, then the rule removed by a reload.
    world.relabel(&ns, Some("true")).await?;
    world
        .condition(&ns, "widget", "Ready", "True", "Ready")
        .await?;
    let elsewhere = test_namespace(&world.client, "somewhere-else").await?;
    world
        .reload(&format!(
            "{host}  tenants:\n  - name: others\n    namespaces: [{elsewhere}]\n    allow: {allow}\n"
        ))
        .await?;
    world
        .condition(&ns, "widget", "Ready", "False", "NoTenantRule")
        .await?;

    // A status another host wrote, in a namespace this host does not serve: not this host's.
    another_hosts_status_stays(&mut world, &module).await
}

/// A Reconciler in a namespace no rule of the world's host selects, whose status another host
/// wrote: read back from the API server after 5 s, that status is still the other host's, so
/// two hosts sharing a cluster never take turns rewriting it (with `reportUnmatched` or not).
async fn another_hosts_status_stays(world: &mut World, module: &str) -> Result<()> {
    let foreign = world.namespace("foreign-tenant", &[]).await?;
    world.reconciler(&foreign, "widget", module).await?;
    let theirs = json!({"status": {"host": "elsewhere/other-host", "conditions": [{
        "type": "Ready", "status": "True", "reason": "Ready", "message": "runs elsewhere",
        "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}]}});
    let another_host = Api::<DynamicObject>::namespaced_with(
        world.client.clone(),
        &foreign,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "Reconciler"),
            "reconcilers",
        ),
    );
    another_host
        .patch_status("widget", &PatchParams::default(), &Patch::Merge(theirs))
        .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let object = world.reconcilers(&foreign).get("widget").await?;
    ensure!(
        object.data["status"]["host"] == "elsewhere/other-host"
            && object.data["status"]["conditions"][0]["status"] == "True",
        "another host's status was overwritten: {}",
        object.data["status"]
    );
    Ok(())
}
