//! Teams' namespaced `Reconciler`s against the real API server and a real registry: one host,
//! a tenant rule selecting namespaces by a label only the administrator sets, two tenants each
//! running the hostile guest (`guests/testing/hostile`) from the same module, and a cluster
//! administrator's `ClusterReconciler` beside them. Each boundary is attacked from a tenant's
//! guest and from tenants' Reconciler specs, and judged by reading the API server: the other
//! tenant's objects, the refused Reconcilers' status. The administrator's guest (the fetcher,
//! cluster-wide) runs on the same host; the tenants' widget guests, which declare the same
//! finalizer on Widgets, are held to their namespaces, so none of them conflicts with another.
//!
//! Nobody here is the control plane's administrator but the platform team: the host runs as its
//! ServiceAccount bound to exactly what `reconciler-host rbac` prints for its configuration, and
//! each tenant acts through an account bound to the team Role of `examples/team-role.yaml`
//! (`reconciler_host_tests::accounts`), so a rule either lacks fails here.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::accounts::{HostAccount, team};
use reconciler_host_tests::echo::key_echo_server;
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, Registry, apply_crd_file, guest_component,
    test_namespace, wait_until, with_password,
};
use serde_json::{Value, json};

const ATTACK: &str = "hostile.reconciler.dev/attack";

/// The API key the tenant rule's `http:` rule adds, from Secret `api` in the host's namespace.
const API_KEY: &str = "tenant-api-key-0123456789";

fn reconcilers(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "Reconciler"),
            "reconcilers",
        ),
    )
}

struct World {
    cp: &'static ControlPlane,
    /// The platform administrator's client: namespaces, their labels, Widgets, Secrets.
    client: kube::Client,
    /// Each tenant namespace's team, acting under the team Role only.
    teams: Mutex<BTreeMap<String, kube::Client>>,
    host_ns: String,
    label: String,
    module: String,
    /// The widget test guest, which declares a finalizer on Widgets.
    widget: String,
    /// The fetcher test guest: the administrator's cluster-wide guest of Widgets.
    fetcher: String,
    /// A server the tenant rule lets guests call under `/api`, with [`API_KEY`] added: its
    /// address, and each request's `METHOD path key`.
    echo: (std::net::SocketAddr, Arc<std::sync::Mutex<Vec<String>>>),
    host: HostProcess,
    account: HostAccount,
}

impl World {
    async fn start(registry: &Registry, cp: &'static ControlPlane) -> Result<Self> {
        let client = cp.client().await?;
        apply_crd_file(&client, "deploy/crds/reconcilers.yaml").await?;
        let host_ns = test_namespace(&client, "tenants-host").await?;
        // The registry's credentials, in the host's namespace: the only pull Secret the rule
        // lets tenants name.
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
        let key: Secret = serde_json::from_value(json!({
            "metadata": {"name": "api"}, "stringData": {"key": API_KEY},
        }))?;
        Api::<Secret>::namespaced(client.clone(), &host_ns)
            .create(&PostParams::default(), &key)
            .await?;
        let (echo, seen, _) = key_echo_server().await?;
        apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
        let repo = unique_name("hostile");
        let module = push(registry, "hostile", &format!("teams/{repo}:v1"))?;
        let widget_repo = unique_name("widget");
        let widget = push(registry, "widget", &format!("teams/{widget_repo}:v1"))?;
        let fetcher_repo = unique_name("fetcher");
        let fetcher = push(registry, "fetcher", &format!("admin/{fetcher_repo}:v1"))?;
        let label = unique_name("tenant");
        let config = format!(
            r#"
registries:
  insecure: ["{registry}"]
reconcilers:
  pullSecrets: [registry]
  selector: "{label}-admin=true"
  allow:
    registries: ["{registry}"]
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
  reportUnmatched: true
  tenants:
  - name: teams
    namespaceSelector: "{label}=true"
    pullSecrets: [registry]
    allow:
      read: [v1/ConfigMap, test.reconciler.dev/v1/Widget]
      write: [v1/ConfigMap, test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status]
      registries: ["{registry}/teams"]
      http:
      - prefix: http://{echo}/api
        headers:
          X-API-Key: {{secretKeyRef: {{name: api, key: key}}}}
    quota: {{reconcilers: 1}}
"#,
            registry = registry.address(),
        );
        let account = HostAccount::create(cp, &host_ns).await?;
        account.grant(cp, &config).await?;
        let host = HostProcess::start(HostOptions {
            kubeconfig: account.kubeconfig(),
            config,
            guests: vec![],
            namespace: None,
            extra_args: vec!["--namespace".into(), host_ns.clone()],
        })
        .await?;
        Ok(Self {
            cp,
            client,
            teams: Mutex::default(),
            host_ns,
            label,
            module,
            widget,
            fetcher,
            echo: (echo, seen),
            host,
            account,
        })
    }

    /// The client of `ns`'s team.
    fn team(&self, ns: &str) -> Result<kube::Client> {
        let teams = self.teams.lock().expect("teams lock");
        teams
            .get(ns)
            .cloned()
            .with_context(|| format!("no team in {ns}"))
    }

    /// The Reconcilers of `ns`, as its team reaches them.
    fn reconcilers(&self, ns: &str) -> Result<Api<DynamicObject>> {
        Ok(reconcilers(&self.team(ns)?, ns))
    }

    /// A namespace, labelled as a tenant when `tenant`, with its team (the team Role), the
    /// account a tenant's guest writes as (`reconciler`, which may read and write ConfigMaps
    /// and Widgets there) and a ConfigMap `keep` to attack.
    async fn namespace(&self, prefix: &str, tenant: bool) -> Result<String> {
        let ns = test_namespace(&self.client, prefix).await?;
        let team = team(self.cp, &ns).await?;
        self.teams
            .lock()
            .expect("teams lock")
            .insert(ns.clone(), team);
        if tenant {
            Api::<Namespace>::all(self.client.clone())
                .patch(
                    &ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {&self.label: "true"}}})),
                )
                .await?;
        }
        Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .create(
                &PostParams::default(),
                &ServiceAccount {
                    metadata: ObjectMeta {
                        name: Some("reconciler".into()),
                        ..ObjectMeta::default()
                    },
                    ..ServiceAccount::default()
                },
            )
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
        Api::<Role>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &role)
            .await?;
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": "reconciler"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reconciler"},
            "subjects": [{"kind": "ServiceAccount", "name": "reconciler", "namespace": ns}],
        }))?;
        Api::<RoleBinding>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &binding)
            .await?;
        let keep: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": "keep"}, "data": {"owner": ns},
        }))?;
        self.config_maps(&ns)
            .create(&PostParams::default(), &keep)
            .await?;
        Ok(ns)
    }

    fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn reconciler(&self, ns: &str, name: &str, module: &str, grant: Value) -> Result<()> {
        self.reconciler_with(ns, name, json!({"module": module, "grant": grant}))
            .await
    }

    /// The team of `ns` creates Reconciler `name` with `spec` (its pull Secret added).
    async fn reconciler_with(&self, ns: &str, name: &str, mut spec: Value) -> Result<()> {
        spec["pullSecretRef"] = json!({"name": "registry"});
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        self.reconcilers(ns)?
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating Reconciler {ns}/{name}"))?;
        Ok(())
    }

    /// Waits until `ns/name`'s `Ready` is `status` with `reason`; its message.
    async fn ready(&self, ns: &str, name: &str, status: &str, reason: &str) -> Result<String> {
        let api = self.reconcilers(ns)?;
        wait_until(
            &format!("Reconciler {ns}/{name} Ready={status} ({reason})"),
            Duration::from_secs(120),
            || async {
                let object = api.get(name).await?;
                let conditions = object.data["status"]["conditions"].clone();
                let ready = conditions
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready")
                    .cloned()
                    .unwrap_or(Value::Null);
                if ready["status"] == status && ready["reason"] == reason {
                    return Ok(ready["message"].as_str().unwrap_or_default().to_owned());
                }
                bail!("Ready is {ready}")
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    /// Creates `ns/<attack>`, which the tenant's hostile guest performs against `victim`, and
    /// waits for its result.
    async fn attack(
        &self,
        ns: &str,
        attack: &str,
        victim: &str,
    ) -> Result<BTreeMap<String, String>> {
        self.probe(ns, attack, json!({"attack": attack, "victim": victim}))
            .await
    }

    /// Creates `ns/<name>` with `data` (an attack and its parameters) for the tenant's hostile
    /// guest, and waits for its result.
    async fn probe(&self, ns: &str, name: &str, data: Value) -> Result<BTreeMap<String, String>> {
        self.send_probe(ns, name, data).await?;
        let api = self.config_maps(ns);
        wait_until(
            &format!("the result of {name} in {ns}"),
            Duration::from_secs(60),
            || async {
                match api.get_opt(&format!("result-{name}")).await? {
                    Some(cm) => Ok(cm.data.unwrap_or_default()),
                    None => bail!("no result yet"),
                }
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }
}

impl World {
    /// Creates `ns/<name>` with `data`, an attack for the tenant's hostile guest.
    async fn send_probe(&self, ns: &str, name: &str, data: Value) -> Result<()> {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {ATTACK: "true"}},
            "data": data,
        }))?;
        self.config_maps(ns)
            .create(&PostParams::default(), &object)
            .await?;
        Ok(())
    }

    /// Waits until `ns/name`'s `status.shadow` counts have grown past `before` in total; the new
    /// counts (agreements, differences). A status written while the guest is being swapped
    /// carries no counts (0, 0) for a moment: such a reading is passed over.
    async fn shadow_counts_after(
        &self,
        ns: &str,
        name: &str,
        before: (u64, u64),
    ) -> Result<(u64, u64)> {
        let api = self.reconcilers(ns)?;
        wait_until(
            &format!("a new shadow verdict on Reconciler {ns}/{name}"),
            Duration::from_secs(90),
            || async {
                let counts = shadow_counts(&api.get(name).await?);
                ensure!(
                    counts.0 + counts.1 > before.0 + before.1,
                    "{counts:?}, not past {before:?}"
                );
                Ok(counts)
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }
}

/// A Reconciler's `status.shadow` (agreements, differences), 0 when absent.
fn shadow_counts(object: &DynamicObject) -> (u64, u64) {
    let shadow = &object.data["status"]["shadow"];
    (
        shadow["agreements"].as_u64().unwrap_or(0),
        shadow["differences"].as_u64().unwrap_or(0),
    )
}

/// `reconciler-host push` of a built guest; the module reference, pinned by digest.
fn push(registry: &Registry, guest: &str, repo: &str) -> Result<String> {
    let file = guest_component(guest)?;
    let module = format!("oci://{}/{repo}", registry.address());
    let mut command = std::process::Command::new(target_dir().join("debug/reconciler-host"));
    command.arg("push").arg(&file).arg(&module).args([
        "--plain-http",
        "--username",
        registry.username(),
        "--password-stdin",
    ]);
    let out = with_password(command, registry.password())?;
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
    Ok(format!("{repository}@{digest}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_are_held_to_their_namespaces_by_the_host_and_the_api_server() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let registry = Registry::shared().await?;
    let world = World::start(registry, cp).await?;
    let team_a = world.namespace("team-a", true).await?;
    let team_b = world.namespace("team-b", true).await?;
    let outsider = world.namespace("outsider", false).await?;
    let grant = json!({"read": ["v1/ConfigMap"], "write": ["v1/ConfigMap"]});
    let module = world.module.clone();
    for ns in [&team_a, &team_b] {
        world
            .reconciler(ns, "hostile", &module, grant.clone())
            .await?;
    }
    let message = world.ready(&team_a, "hostile", "True", "Ready").await?;
    ensure!(
        message.contains(&format!("hostile@{team_a}.hostile")),
        "the guest runs under its namespace's name: {message}"
    );
    world.ready(&team_b, "hostile", "True", "Ready").await?;

    // The team Role is no more than that: the team cannot write its Reconciler's status (the
    // host's), declare a ClusterReconciler, or read the host's pull Secret.
    let team = world.team(&team_a)?;
    let forbidden = |what: &str, result: kube::Result<()>| match result {
        Err(kube::Error::Api(status)) if status.code == 403 => Ok(()),
        other => bail!("the team could {what}: {other:?}"),
    };
    forbidden(
        "write its Reconciler's status",
        reconcilers(&team, &team_a)
            .patch_status(
                "hostile",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"host": "me"}})),
            )
            .await
            .map(drop),
    )?;
    let cluster_reconcilers = Api::<DynamicObject>::all_with(
        team.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "ClusterReconciler"),
            "clusterreconcilers",
        ),
    );
    let declared: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "reconciler.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": unique_name("team")}, "spec": {"module": module},
    }))?;
    forbidden(
        "declare a ClusterReconciler",
        cluster_reconcilers
            .create(&PostParams::default(), &declared)
            .await
            .map(drop),
    )?;
    forbidden(
        "read the host's pull Secret",
        Api::<Secret>::namespaced(team, &world.host_ns)
            .get("registry")
            .await
            .map(drop),
    )?;

    // What the specs may not ask for: each refused by name, none pulled or run.
    world
        .reconciler(&team_a, "second", &module, grant.clone())
        .await?;
    world
        .ready(&team_a, "second", "False", "TenantQuotaExceeded")
        .await?;
    world
        .reconciler(&outsider, "hostile", &module, grant.clone())
        .await?;
    world
        .ready(&outsider, "hostile", "False", "NoTenantRule")
        .await?;
    let team_c = world.namespace("team-c", true).await?;
    world
        .reconciler(
            &team_c,
            "greedy",
            &module,
            json!({"read": ["v1/ConfigMap", "v1/Secret"], "write": ["v1/ConfigMap"]}),
        )
        .await?;
    let beyond = world
        .ready(&team_c, "greedy", "False", "GrantBeyondTenantRule")
        .await?;
    ensure!(beyond.contains("read v1/Secret"), "{beyond}");
    // Another namespace's account: refused by the API server at admission (the host refuses
    // it too, behind that: host/src/supply/guest_set/grants.rs).
    let borrowed = world
        .reconciler(
            &team_c,
            "borrowed",
            &module,
            json!({"read": ["v1/ConfigMap"], "serviceAccount": format!("{team_a}/reconciler")}),
        )
        .await;
    let refusal = format!(
        "{:#}",
        borrowed.expect_err("a grant naming an account was admitted")
    );
    ensure!(refusal.contains("spec.serviceAccountName"), "{refusal}");

    // What team-a's guest may not do to team-b, judged by team-b's objects.
    for (attack, outcome) in [
        ("apply-victim-configmap", "denied"),
        ("delete-victim-configmap", "denied"),
        ("event-victim-configmap", "denied"),
        ("enqueue-victim", "invalid"),
    ] {
        let result = world.attack(&team_a, attack, &team_b).await?;
        ensure!(
            result.get("outcome").map(String::as_str) == Some(outcome),
            "{attack}: {result:?}"
        );
    }
    for attack in ["get-victim-configmap", "list-everywhere"] {
        let result = world.attack(&team_a, attack, &team_b).await?;
        let detail = result.get("detail").cloned().unwrap_or_default();
        ensure!(
            !detail.contains(&format!("{team_b}/")) && detail != "present",
            "{attack} saw team-b's objects: {result:?}"
        );
    }
    let keep = world.config_maps(&team_b).get("keep").await?;
    ensure!(
        keep.data.unwrap_or_default().get("owner") == Some(&team_b),
        "team-b's ConfigMap changed"
    );
    let planted: Vec<String> = world
        .config_maps(&team_b)
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .filter(|name| name != "keep" && name != "kube-root-ca.crt")
        .collect();
    ensure!(planted.is_empty(), "objects planted in team-b: {planted:?}");

    // Two tenants' guests declaring the same finalizer on the same kind never meet on an
    // object: both run (on one host, a finalizer of a kind otherwise belongs to one guest).
    let widgets = json!({
        "read": ["test.reconciler.dev/v1/Widget", "v1/ConfigMap"],
        "write": ["test.reconciler.dev/v1/Widget", "test.reconciler.dev/v1/Widget/status", "v1/ConfigMap"],
    });
    let team_e = world.namespace("team-e", true).await?;
    let team_f = world.namespace("team-f", true).await?;
    for ns in [&team_e, &team_f] {
        world
            .reconciler(ns, "widget", &world.widget, widgets.clone())
            .await?;
    }
    world.ready(&team_e, "widget", "True", "Ready").await?;
    world.ready(&team_f, "widget", "True", "Ready").await?;

    // The administrator's ClusterReconciler beside them, cluster-wide, on the same host: it
    // reconciles a Widget in the host's namespace, which no tenant's guest may touch.
    let cluster = Api::<DynamicObject>::all_with(
        world.client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "ClusterReconciler"),
            "clusterreconcilers",
        ),
    );
    let admin = unique_name("admin");
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "reconciler.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": admin, "labels": {format!("{}-admin", world.label): "true"}},
        "spec": {"module": world.fetcher, "pullSecretRef": {"name": "registry"},
                 // Only this test's Widgets: the control plane is shared with other tests.
                 "grant": {"read": ["test.reconciler.dev/v1/Widget"],
                           "readSelectors": {"test.reconciler.dev/v1/Widget": format!("{}-admin=true", world.label)},
                           "write": ["test.reconciler.dev/v1/Widget/status"]}},
    }))?;
    cluster.create(&PostParams::default(), &object).await?;
    let widgets = Api::<DynamicObject>::namespaced_with(
        world.client.clone(),
        &world.host_ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "test.reconciler.dev",
            "v1",
            "Widget",
        )),
    );
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "admins", "labels": {format!("{}-admin", world.label): "true"}},
        "spec": {},
    }))?;
    widgets.create(&PostParams::default(), &widget).await?;
    wait_until(
        "the ClusterReconciler's guest to reconcile the Widget",
        Duration::from_secs(120),
        || async {
            let object = widgets.get("admins").await?;
            ensure!(
                object.data["status"]["observedGeneration"]
                    .as_i64()
                    .is_some(),
                "status: {}",
                object.data["status"]
            );
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(world.host.log_tail()))?;

    // team-b's guest runs on, untouched by team-a's attacks.
    let own = world
        .attack(&team_b, "get-victim-configmap", &team_b)
        .await?;
    ensure!(
        own.get("outcome").map(String::as_str) == Some("ok"),
        "{own:?}"
    );
    Ok(())
}

/// `(label, value)` of every label of one exposition line (`name{a="x",b="y"} 1`).
fn label_pairs(line: &str) -> Vec<(String, String)> {
    let Some(inner) = line
        .split_once('{')
        .and_then(|(_, rest)| rest.rsplit_once('}'))
        .map(|(inner, _)| inner)
    else {
        return Vec::new();
    };
    inner
        .split("\",")
        .filter_map(|pair| pair.split_once("=\""))
        .map(|(label, value)| (label.to_owned(), value.trim_end_matches('"').to_owned()))
        .collect()
}

/// Item 4 of issue 41, "nothing shared that leaks": two tenants' hostile guests on one host,
/// and a third tenant's in shadow mode, probe every channel through which one tenant could
/// learn about another's objects. Judged by what the guests were answered (their results on
/// the API server), the API server's events and Reconciler status, and the host's `/guests`
/// and `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_a_tenant_can_reach_tells_it_anything_of_another() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let registry = Registry::shared().await?;
    let world = World::start(registry, cp).await?;
    let team_a = world.namespace("leak-a", true).await?;
    let team_b = world.namespace("leak-b", true).await?;
    let team_s = world.namespace("leak-s", true).await?;
    let module = world.module.clone();
    let grant = json!({"read": ["v1/ConfigMap"], "write": ["v1/ConfigMap"]});
    for ns in [&team_a, &team_b] {
        world
            .reconciler(ns, "hostile", &module, grant.clone())
            .await?;
    }
    let mut shadow_grant = grant.clone();
    shadow_grant["mode"] = json!("shadow");
    world
        .reconciler(&team_s, "hostile", &module, shadow_grant)
        .await?;
    for ns in [&team_a, &team_b, &team_s] {
        world.ready(ns, "hostile", "True", "Ready").await?;
    }
    // What must never reach another tenant: a labelled ConfigMap in each namespace, whose
    // name and value carry this run's marker.
    let marker = unique_name("marker");
    let tier = "leak.reconciler.dev/tier";
    for ns in [&team_a, &team_b] {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": format!("gold-{marker}"), "labels": {tier: "gold"}},
            "data": {"secret": format!("{marker}-{ns}")},
        }))?;
        world
            .config_maps(ns)
            .create(&PostParams::default(), &object)
            .await?;
    }
    let nowhere = unique_name("no-such-namespace");

    // Reads: another namespace's object reads as absent, and an object that exists there, one
    // that does not and a namespace that does not exist answer alike.
    let get =
        |victim: &str, name: &str| json!({"attack": "probe-get", "victim": victim, "name": name});
    let own = world
        .probe(&team_a, "get-own", get(&team_a, "keep"))
        .await?;
    ensure!(
        own.get("detail").map(String::as_str) == Some("found"),
        "{own:?}"
    );
    let existing = world
        .probe(&team_a, "get-existing", get(&team_b, "keep"))
        .await?;
    let missing = world
        .probe(&team_a, "get-missing", get(&team_b, "no-such-object"))
        .await?;
    let elsewhere = world
        .probe(&team_a, "get-nowhere", get(&nowhere, "keep"))
        .await?;
    ensure!(
        existing.get("detail").map(String::as_str) == Some("absent"),
        "{existing:?}"
    );
    ensure!(
        existing == missing && existing == elsewhere,
        "a read tells existing from missing: {existing:?} / {missing:?} / {elsewhere:?}"
    );

    // Writes: refused before the API server is asked, in words that do not depend on what is
    // there (only on the namespace the guest named itself).
    for attack in ["probe-delete", "probe-apply"] {
        let probe = |victim: &str, name: &str| json!({"attack": attack, "victim": victim, "name": name, "owner": "x"});
        let existing = world
            .probe(
                &team_a,
                &format!("{attack}-existing"),
                probe(&team_b, "keep"),
            )
            .await?;
        let missing = world
            .probe(
                &team_a,
                &format!("{attack}-missing"),
                probe(&team_b, "no-such-object"),
            )
            .await?;
        let elsewhere = world
            .probe(
                &team_a,
                &format!("{attack}-nowhere"),
                probe(&nowhere, "keep"),
            )
            .await?;
        ensure!(
            existing.get("outcome").map(String::as_str) == Some("denied"),
            "{existing:?}"
        );
        let unnamed = |r: &BTreeMap<String, String>| {
            let mut r = r.clone();
            for text in r.values_mut() {
                *text = text.replace(&team_b, "NS").replace(&nowhere, "NS");
            }
            r
        };
        ensure!(
            existing == missing && unnamed(&existing) == unnamed(&elsewhere),
            "{attack} tells existing from missing: {existing:?} / {missing:?} / {elsewhere:?}"
        );
    }

    // Lists: a selector matching the other tenant's objects finds none of them, in its
    // namespace or in every namespace; the same selector finds the guest's own.
    let gold = format!("{tier}=gold");
    let theirs = world
        .probe(
            &team_a,
            "list-theirs",
            json!({"attack": "probe-list", "victim": team_b, "selector": gold}),
        )
        .await?;
    ensure!(
        theirs.get("outcome").map(String::as_str) == Some("ok")
            && theirs.get("detail").map(String::as_str) == Some(""),
        "{theirs:?}"
    );
    for (ns, other) in [(&team_a, &team_b), (&team_b, &team_a)] {
        for (name, selector) in [
            ("list-all-gold", gold.as_str()),
            ("list-all-attacks", ATTACK),
        ] {
            let seen = world
                .probe(
                    ns,
                    name,
                    json!({"attack": "probe-list", "victim": ns, "everywhere": "true", "selector": selector}),
                )
                .await?;
            let detail = seen.get("detail").cloned().unwrap_or_default();
            ensure!(
                !detail.is_empty() && detail.split(' ').all(|o| o.starts_with(&format!("{ns}/"))),
                "{ns}'s guest listed outside its namespace, or nothing: {seen:?}"
            );
            ensure!(!detail.contains(other.as_str()), "{seen:?}");
        }
    }

    // Events: the guest's own reach its namespace; none about, or from, team-a lands in
    // team-b's. The event's object is named by the marker, which nothing else may show.
    let event = world
        .probe(&team_a, &marker, json!({"attack": "event-own"}))
        .await?;
    ensure!(
        event.get("outcome").map(String::as_str) == Some("ok"),
        "{event:?}"
    );
    let foreign = world
        .attack(&team_a, "event-victim-configmap", &team_b)
        .await?;
    ensure!(
        foreign.get("outcome").map(String::as_str) == Some("denied"),
        "{foreign:?}"
    );
    let events = |ns: &str| Api::<Event>::namespaced(world.client.clone(), ns);
    let events_a = events(&team_a);
    wait_until("team-a's own event", Duration::from_secs(30), || async {
        let list = events_a.list(&Default::default()).await?;
        ensure!(
            list.items
                .iter()
                .any(|e| e.reason.as_deref() == Some("Probe")),
            "no Probe event yet"
        );
        Ok(())
    })
    .await?;
    for event in events(&team_b).list(&Default::default()).await?.items {
        let text = serde_json::to_string(&event)?;
        ensure!(
            !text.contains(team_a.as_str()),
            "an event in team-b names team-a: {text}"
        );
    }

    // Shadow verdicts: the counts on a tenant's own Reconciler. A write elsewhere is refused
    // before anything is read, so its verdict does not depend on what the other namespace
    // holds; in its own namespace the same probe can agree or differ (the control).
    let shadow_status = world.reconcilers(&team_s)?;
    let mut counts = shadow_counts(&shadow_status.get("hostile").await?);
    let apply = |victim: &str, name: &str, owner: &str| json!({"attack": "probe-apply", "victim": victim, "name": name, "owner": owner, "record": "no"});
    let differing = format!("{marker}-differs");
    for (name, probe, agrees) in [
        ("shadow-own-same", apply(&team_s, "keep", &team_s), true),
        (
            "shadow-own-other",
            apply(&team_s, "keep", &differing),
            false,
        ),
        ("shadow-theirs-same", apply(&team_b, "keep", &team_b), true),
        (
            "shadow-theirs-other",
            apply(&team_b, "keep", &differing),
            true,
        ),
        (
            "shadow-theirs-missing",
            apply(&team_b, "no-such-object", &team_b),
            true,
        ),
    ] {
        world.send_probe(&team_s, name, probe).await?;
        let next = world
            .shadow_counts_after(&team_s, "hostile", counts)
            .await?;
        let expected = if agrees {
            (counts.0 + 1, counts.1)
        } else {
            (counts.0, counts.1 + 1)
        };
        ensure!(
            next == expected,
            "{name}: shadow counts {counts:?} -> {next:?}, expected {expected:?}"
        );
        counts = next;
    }

    // `/guests` and `/metrics` are the operator's (docs/security.md: who can reach them), but
    // they answer whoever reaches the host's port: neither quotes a tenant's objects or names
    // its keys. `/guests` counts the shadow verdicts.
    let guests = world.host.get("/guests").await?;
    ensure!(
        !guests.contains(&marker) && !guests.contains("shadow-own-other"),
        "/guests shows a tenant's keys or values: {guests}"
    );
    let listed: Value = serde_json::from_str(&guests)?;
    let shadow_guest = format!("hostile@{team_s}.hostile");
    let entry = listed
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["guest"] == shadow_guest.as_str())
        .with_context(|| format!("{shadow_guest} in /guests: {guests}"))?;
    ensure!(
        entry["shadow"]["diffs"] == 1 && entry["recording"] != true,
        "{entry}"
    );
    let metrics = world.host.get("/metrics").await?;
    ensure!(!metrics.contains(&marker), "/metrics names a tenant's key");
    let mut carrying = std::collections::BTreeSet::new();
    for line in metrics.lines().filter(|l| !l.starts_with('#')) {
        for (label, value) in label_pairs(line) {
            if [&team_a, &team_b, &team_s]
                .iter()
                .any(|ns| value.contains(ns.as_str()))
            {
                carrying.insert(label);
            }
        }
    }
    ensure!(
        carrying.iter().all(|l| l == "guest" || l == "name"),
        "labels carrying a tenant's namespace: {carrying:?}"
    );

    // Records: a tenant's grant cannot ask for them (the CRD has no `record`; the API server
    // drops it), and `/guests` says no tenant's guest records.
    let team_r = world.namespace("leak-r", true).await?;
    let mut recorded = grant.clone();
    recorded["record"] = json!({"sample": 1.0});
    if world
        .reconciler(&team_r, "hostile", &module, recorded)
        .await
        .is_ok()
    {
        let object = world.reconcilers(&team_r)?.get("hostile").await?;
        ensure!(
            object.data["spec"]["grant"].get("record").is_none(),
            "the API server kept grant.record: {}",
            object.data["spec"]
        );
    }
    Ok(())
}

/// Item 4 of issue 41, the cost half: tenant A's widget guest traps on every reconcile of its
/// Widgets and spins to its deadline on one, and A is at its quota (a second Reconciler is
/// refused), while tenant B's widget guest on the same host reconciles every change to its
/// Widgets. Counts, not times: the latency figures are `./dev bench tenants`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_trapping_at_its_quota_leaves_another_reconciling_every_change() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let registry = Registry::shared().await?;
    let world = World::start(registry, cp).await?;
    let team_a = world.namespace("cost-a", true).await?;
    let team_b = world.namespace("cost-b", true).await?;
    let grant = json!({
        "read": ["test.reconciler.dev/v1/Widget", "v1/ConfigMap"],
        "write": ["test.reconciler.dev/v1/Widget", "test.reconciler.dev/v1/Widget/status", "v1/ConfigMap"],
    });
    let widget_module = world.widget.clone();
    for ns in [&team_a, &team_b] {
        world
            .reconciler(ns, "widget", &widget_module, grant.clone())
            .await?;
        world.ready(ns, "widget", "True", "Ready").await?;
    }
    world
        .reconciler(&team_a, "second", &widget_module, grant.clone())
        .await?;
    world
        .ready(&team_a, "second", "False", "TenantQuotaExceeded")
        .await?;

    let widget = |name: &str, spec: Value| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec,
        }))?)
    };
    let theirs = reconciler_host_tests::widgets(&world.client, &team_a);
    for i in 0..6 {
        theirs
            .create(
                &PostParams::default(),
                &widget(&format!("trap-{i}"), json!({"mode": "trap"}))?,
            )
            .await?;
    }
    theirs
        .create(
            &PostParams::default(),
            &widget("loop", json!({"mode": "loop"}))?,
        )
        .await?;
    let guest_a = format!("widget@{team_a}.widget");
    let traps = format!(r#"reconciler_reconcile_total{{guest="{guest_a}",result="trap"}}"#);
    let deadlines = format!(r#"reconciler_reconcile_total{{guest="{guest_a}",result="deadline"}}"#);
    wait_until(
        "tenant A's guest trapping",
        Duration::from_secs(60),
        || async {
            let n = world.host.metric(&traps).await?;
            ensure!(n >= 6.0, "{n} traps");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(world.host.log_tail()))?;
    let traps_before = world.host.metric(&traps).await?;

    // Tenant B: every Widget changed three times while A traps; each must end reconciled at
    // its last generation with its last message.
    let ours = reconciler_host_tests::widgets(&world.client, &team_b);
    let names: Vec<String> = (0..8).map(|i| format!("w-{i}")).collect();
    for name in &names {
        ours.create(
            &PostParams::default(),
            &widget(name, json!({"message": "v0"}))?,
        )
        .await?;
    }
    for version in 1..=3 {
        for name in &names {
            ours.patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"message": format!("v{version}")}})),
            )
            .await?;
        }
    }
    wait_until(
        "tenant B's Widgets reconciled at their last change",
        Duration::from_secs(120),
        || async {
            let mut behind = Vec::new();
            for name in &names {
                let object = ours.get(name).await?;
                let generation = object.metadata.generation;
                let status = &object.data["status"];
                if status["observedGeneration"].as_i64() != generation || status["message"] != "v3"
                {
                    behind.push(format!("{name}: {status}"));
                }
            }
            ensure!(behind.is_empty(), "behind: {behind:?}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(world.host.log_tail()))?;

    // A trapped throughout, and spun to its deadline.
    let traps_after = world.host.metric(&traps).await?;
    ensure!(
        traps_after > traps_before,
        "A stopped trapping: {traps_before} -> {traps_after}"
    );
    wait_until(
        "tenant A's guest at its deadline",
        Duration::from_secs(30),
        || async {
            let n = world.host.metric(&deadlines).await?;
            ensure!(n >= 1.0, "{n} deadlines");
            Ok(())
        },
    )
    .await?;
    Ok(())
}

/// Issue 52, item 4: a tenant's guest makes the credentialed HTTP call its rule allows, the
/// key read by the host from a Secret of its namespace under the RBAC `rbac` prints, and writes
/// as the account its spec names (`spec.serviceAccountName`), which the host impersonates once
/// the administrator binds the printed `PREFIX-tenant-N-accounts` in the namespace, as
/// docs/reconcilers.md says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_guest_calls_with_its_rules_credentials_as_the_account_its_spec_names()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let registry = Registry::shared().await?;
    let world = World::start(registry, cp).await?;
    let ns = world.namespace("http", true).await?;
    let module = push(
        registry,
        "fetcher",
        &format!("teams/{}:v1", unique_name("fetcher")),
    )?;
    // The administrator's part: the account, its rights, and the host's leave to act as it.
    Api::<ServiceAccount>::namespaced(world.client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "fetcher"}}))?,
        )
        .await?;
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": "fetcher"},
        "rules": [
            {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets/status"], "verbs": ["patch"]},
            {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
        ],
    }))?;
    Api::<Role>::namespaced(world.client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await?;
    let prefix = &world.account.prefix;
    for (name, kind, role, subject) in [
        (
            "fetcher".to_owned(),
            "Role",
            "fetcher".to_owned(),
            json!({"kind": "ServiceAccount", "name": "fetcher", "namespace": ns}),
        ),
        (
            format!("{prefix}-tenant-0-accounts"),
            "ClusterRole",
            format!("{prefix}-tenant-0-accounts"),
            json!({"kind": "ServiceAccount", "name": "reconciler-host", "namespace": world.host_ns}),
        ),
    ] {
        let binding: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role},
            "subjects": [subject],
        }))?;
        Api::<RoleBinding>::namespaced(world.client.clone(), &ns)
            .create(&PostParams::default(), &binding)
            .await?;
    }
    let (echo, seen) = &world.echo;
    world
        .reconciler_with(
            &ns,
            "fetcher",
            json!({
                "module": module,
                "serviceAccountName": "fetcher",
                "grant": {
                    "read": ["test.reconciler.dev/v1/Widget"],
                    "write": ["test.reconciler.dev/v1/Widget/status"],
                    "http": [{"prefix": format!("http://{echo}/api"),
                              "headers": {"X-API-Key": {"secretKeyRef": {"name": "api", "key": "key"}}}}],
                },
            }),
        )
        .await?;
    world.ready(&ns, "fetcher", "True", "Ready").await?;

    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "calls"},
        "spec": {"http": [{"url": format!("http://{echo}/api/zones/example.org")}]},
    }))?;
    let widgets = reconciler_host_tests::widgets(&world.client, &ns);
    widgets.create(&PostParams::default(), &widget).await?;
    let status = wait_until(
        "the tenant's guest to report its call",
        Duration::from_secs(60),
        || async {
            let status = widgets.get("calls").await?.data["status"].clone();
            ensure!(status["http"][0]["status"] == 200, "status {status}");
            Ok(status)
        },
    )
    .await
    .map_err(|e| e.context(world.host.log_tail()))?;
    let sent = seen.lock().expect("seen lock").clone();
    ensure!(
        sent.contains(&format!("GET /api/zones/example.org {API_KEY}")),
        "the server was not sent the key: {sent:?}"
    );
    ensure!(
        !status.to_string().contains(API_KEY),
        "the key reached the status: {status}"
    );
    let guests: Value = serde_json::from_str(&world.host.get("/guests").await?)?;
    let guest = format!("fetcher@{ns}.fetcher");
    let entry = guests
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["guest"] == guest.as_str())
        .with_context(|| format!("{guest} in /guests: {guests}"))?;
    ensure!(
        entry["serviceAccount"] == format!("{ns}/fetcher"),
        "{entry}"
    );
    Ok(())
}
