//! Teams' namespaced `Reconciler`s against the real API server and a real registry: one host,
//! a tenant rule selecting namespaces by a label only the administrator sets, two tenants each
//! running the hostile guest (`guests/testing/hostile`) from the same module, and a cluster
//! administrator's `ClusterReconciler` beside them. Each boundary is attacked from a tenant's
//! guest and from tenants' Reconciler specs, and judged by reading the API server: the other
//! tenant's objects, the refused Reconcilers' status. The administrator's guest (the fetcher,
//! cluster-wide) runs on the same host; the tenants' widget guests, which declare the same
//! finalizer on Widgets, are held to their namespaces, so none of them conflicts with another.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, Registry, apply_crd_file, guest_component,
    test_namespace, wait_until, with_password,
};
use serde_json::{Value, json};

const ATTACK: &str = "hostile.reconciler.dev/attack";

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
    client: kube::Client,
    host_ns: String,
    label: String,
    module: String,
    /// The widget test guest, which declares a finalizer on Widgets.
    widget: String,
    /// The fetcher test guest: the administrator's cluster-wide guest of Widgets.
    fetcher: String,
    host: HostProcess,
}

impl World {
    async fn start(registry: &Registry, cp: &ControlPlane) -> Result<Self> {
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
    quota: {{reconcilers: 1}}
"#,
            registry = registry.address(),
        );
        let host = HostProcess::start(HostOptions {
            kubeconfig: cp.kubeconfig(),
            config,
            guests: vec![],
            namespace: None,
            extra_args: vec!["--namespace".into(), host_ns.clone()],
        })
        .await?;
        Ok(Self {
            client,
            host_ns,
            label,
            module,
            widget,
            fetcher,
            host,
        })
    }

    /// A namespace, labelled as a tenant when `tenant`, with the account a tenant's guest writes
    /// as (`reconciler`, which may read and write ConfigMaps and Widgets there) and a
    /// ConfigMap `keep` to attack.
    async fn namespace(&self, prefix: &str, tenant: bool) -> Result<String> {
        let ns = test_namespace(&self.client, prefix).await?;
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
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": name},
            "spec": {"module": module, "pullSecretRef": {"name": "registry"}, "grant": grant},
        }))?;
        reconcilers(&self.client, ns)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating Reconciler {ns}/{name}"))?;
        Ok(())
    }

    /// Waits until `ns/name`'s `Ready` is `status` with `reason`; its message.
    async fn ready(&self, ns: &str, name: &str, status: &str, reason: &str) -> Result<String> {
        let api = reconcilers(&self.client, ns);
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
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": attack, "labels": {ATTACK: "true"}},
            "data": {"attack": attack, "victim": victim},
        }))?;
        self.config_maps(ns)
            .create(&PostParams::default(), &object)
            .await?;
        let api = self.config_maps(ns);
        wait_until(
            &format!("the result of {attack} in {ns}"),
            Duration::from_secs(60),
            || async {
                match api.get_opt(&format!("result-{attack}")).await? {
                    Some(cm) => Ok(cm.data.unwrap_or_default()),
                    None => bail!("no result yet"),
                }
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }
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
    // it too, behind that: host/src/guest_set/grants.rs).
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
