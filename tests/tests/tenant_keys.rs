//! Issue 52, item 3: no key outside a tenant's namespace reaches its guest, whatever the
//! mapping, and no object outside it reaches the guest through a watch. Against the real API
//! server and a real registry: two tenants' namespaces each run the keylog test guest
//! (`guests/testing/keylog`), which writes every key it is handed into a ledger Widget of its
//! own namespace. It watches ConfigMaps (owner labels; a `map` function) and the cluster-scoped
//! Namespaces (the same two mappings), which the tenant rule lets it read. Team A's objects
//! point at team B's Widget, and team B's Namespace (cluster-scoped) points at team A's
//! Widgets; judged by both ledgers and team B's Widget on the API server. The host runs as its
//! ServiceAccount bound to exactly what `reconciler-host rbac` prints, and each team creates its
//! Reconciler under the team Role of `examples/team-role.yaml` (`reconciler_host_tests::accounts`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{Api, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::accounts::{HostAccount, team};
use reconciler_host_tests::namespace::{TEST_NAMESPACE_LABEL, unique_name};
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, Registry, apply_crd_file, guest_component,
    test_namespace, wait_until, with_password,
};
use serde_json::{Value, json};

/// The keylog guest's labels and annotation (`guests/testing/keylog/src/lib.rs`).
const LEDGER: &str = "keylog.test/ledger";
const OWNER_NAMESPACE: &str = "keylog.test/owner-namespace";
const OWNER_NAME: &str = "keylog.test/owner-name";
const MAPPED: &str = "keylog.test/mapped";
const KEYS: &str = "keylog.test/keys";

/// How long a key that was going to arrive is given, once a later one has.
const GRACE: Duration = Duration::from_secs(3);

fn grant() -> Value {
    json!({
        "read": ["test.reconciler.dev/v1/Widget", "v1/ConfigMap", "v1/Namespace"],
        "write": ["test.reconciler.dev/v1/Widget/status"],
    })
}

struct World {
    cp: &'static ControlPlane,
    /// The platform administrator's client: namespaces, their labels, Widgets, ConfigMaps.
    client: kube::Client,
    /// Each tenant namespace's team, acting under the team Role only.
    teams: std::sync::Mutex<BTreeMap<String, kube::Client>>,
    /// The namespace label the tenant rule selects.
    label: String,
    module: String,
    host: HostProcess,
    _account: HostAccount,
}

impl World {
    async fn start(cp: &'static ControlPlane, registry: &Registry) -> Result<Self> {
        let client = cp.client().await?;
        apply_crd_file(&client, "deploy/crds/reconcilers.yaml").await?;
        apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
        let host_ns = test_namespace(&client, "tenant-keys-host").await?;
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
        let module = push(registry, &format!("teams/{}:v1", unique_name("keylog")))?;
        let label = format!("{}.test/tenant", unique_name("keys"));
        // The rule lets its teams read Namespaces: a cluster-scoped kind, which a tenant's
        // guest may name in its grant and watches but never sees.
        let config = format!(
            r#"
registries:
  insecure: ["{registry}"]
reconcilers:
  pullSecrets: [registry]
  allow: {{registries: ["{registry}"]}}
  tenants:
  - name: teams
    namespaceSelector: "{label}=true"
    pullSecrets: [registry]
    allow:
      read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Namespace]
      write: [test.reconciler.dev/v1/Widget/status]
      registries: ["{registry}/teams"]
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
            extra_args: vec!["--namespace".into(), host_ns],
        })
        .await?;
        Ok(Self {
            cp,
            client,
            teams: std::sync::Mutex::default(),
            label,
            module,
            host,
            _account: account,
        })
    }

    /// The Reconcilers of `ns`, as its team reaches them.
    fn reconcilers(&self, ns: &str) -> Result<Api<DynamicObject>> {
        let teams = self.teams.lock().expect("teams lock");
        let team = teams.get(ns).with_context(|| format!("no team in {ns}"))?;
        Ok(reconcilers(team, ns))
    }

    /// A tenant namespace with its team (the team Role), the account its guest runs as
    /// (`reconciler`: it reads Widgets and ConfigMaps there and, through the ClusterRole `reader`,
    /// Namespaces, and writes Widgets' status there), a ledger Widget, and the keylog Reconciler,
    /// created by the team and running.
    async fn tenant(&self, prefix: &str, reader: &str) -> Result<String> {
        let ns = unique_name(prefix);
        let namespace = Namespace {
            metadata: ObjectMeta {
                name: Some(ns.clone()),
                labels: Some(BTreeMap::from([
                    (TEST_NAMESPACE_LABEL.to_owned(), "true".to_owned()),
                    (self.label.clone(), "true".to_owned()),
                ])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        };
        Api::<Namespace>::all(self.client.clone())
            .create(&PostParams::default(), &namespace)
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
        let team = team(self.cp, &ns).await?;
        self.teams
            .lock()
            .expect("teams lock")
            .insert(ns.clone(), team);
        let account = ServiceAccount {
            metadata: ObjectMeta {
                name: Some("reconciler".into()),
                ..ObjectMeta::default()
            },
            ..ServiceAccount::default()
        };
        Api::<ServiceAccount>::namespaced(self.client.clone(), &ns)
            .create(&PostParams::default(), &account)
            .await?;
        let role: Role = serde_json::from_value(json!({
            "metadata": {"name": "reconciler"},
            "rules": [
                {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["test.reconciler.dev"], "resources": ["widgets/status"], "verbs": ["patch"]},
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
        // Namespaces are cluster-scoped: the account reads them through a ClusterRoleBinding.
        let cluster_binding: ClusterRoleBinding = serde_json::from_value(json!({
            "metadata": {"name": format!("{ns}-namespaces")},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": reader},
            "subjects": [{"kind": "ServiceAccount", "name": "reconciler", "namespace": ns}],
        }))?;
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(&PostParams::default(), &cluster_binding)
            .await?;
        self.widget(&ns, "ledger", &[(LEDGER, "true")]).await?;
        let reconciler: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
            "metadata": {"name": "keylog"},
            "spec": {"module": self.module, "pullSecretRef": {"name": "registry"}, "grant": grant()},
        }))?;
        self.reconcilers(&ns)?
            .create(&PostParams::default(), &reconciler)
            .await
            .with_context(|| format!("creating Reconciler {ns}/keylog"))?;
        self.ready(&ns).await?;
        Ok(ns)
    }

    /// A ClusterRole that reads Namespaces; its name.
    async fn namespace_reader(&self) -> Result<String> {
        let name = unique_name("tenant-keys-namespaces");
        let role: ClusterRole = serde_json::from_value(json!({
            "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}],
        }))?;
        Api::<ClusterRole>::all(self.client.clone())
            .create(&PostParams::default(), &role)
            .await?;
        Ok(name)
    }

    async fn ready(&self, ns: &str) -> Result<()> {
        let api = self.reconcilers(ns)?;
        wait_until(
            &format!("Reconciler {ns}/keylog Ready"),
            Duration::from_secs(120),
            || async {
                let object = api.get("keylog").await?;
                let ready = object.data["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|c| c["type"] == "Ready")
                    .cloned()
                    .unwrap_or(Value::Null);
                ensure!(ready["status"] == "True", "Ready is {ready}");
                Ok(())
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    fn widgets(&self, ns: &str) -> Api<DynamicObject> {
        reconciler_host_tests::widgets(&self.client, ns)
    }

    async fn widget(&self, ns: &str, name: &str, labels: &[(&str, &str)]) -> Result<()> {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "labels": labels}, "spec": {},
        }))?;
        self.widgets(ns)
            .create(&PostParams::default(), &widget)
            .await
            .with_context(|| format!("creating Widget {ns}/{name}"))?;
        Ok(())
    }

    /// A ConfigMap in `ns` with `labels` and `annotations`.
    async fn config_map(
        &self,
        ns: &str,
        name: &str,
        labels: &[(&str, &str)],
        annotations: &[(&str, &str)],
    ) -> Result<()> {
        let labels: BTreeMap<&str, &str> = labels.iter().copied().collect();
        let annotations: BTreeMap<&str, &str> = annotations.iter().copied().collect();
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels, "annotations": annotations},
        }))?;
        Api::<ConfigMap>::namespaced(self.client.clone(), ns)
            .create(&PostParams::default(), &object)
            .await?;
        Ok(())
    }

    /// The keys the guest of `ns` wrote into its ledger.
    async fn handed(&self, ns: &str) -> Result<BTreeSet<String>> {
        let ledger = self.widgets(ns).get("ledger").await?;
        Ok(ledger.data["status"]["handed"]
            .as_object()
            .map(|keys| keys.keys().cloned().collect())
            .unwrap_or_default())
    }

    /// Waits until the ledger of `ns` holds every key of `wanted`; what it holds then.
    async fn handed_at_least(&self, ns: &str, wanted: &[String]) -> Result<BTreeSet<String>> {
        wait_until(
            &format!("the ledger of {ns} to hold {wanted:?}"),
            Duration::from_secs(60),
            || async {
                let handed = self.handed(ns).await?;
                if wanted.iter().all(|k| handed.contains(k)) {
                    return Ok(handed);
                }
                bail!("it holds {handed:?}")
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }
}

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

/// `reconciler-host push` of the keylog guest to `repo`; the module reference, by digest.
fn push(registry: &Registry, repo: &str) -> Result<String> {
    let file = guest_component("keylog")?;
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

/// Team A's ConfigMaps name team B's Widget through owner labels and through `map`; team B's
/// Namespace, cluster-scoped, names team A's Widgets (and its own) through the same two
/// mappings. Keys of team A's own Widgets sent the same ways afterwards arrive; nothing else
/// does, in either ledger, and nobody writes team B's Widget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_guest_is_handed_keys_of_its_namespace_only_whatever_the_mapping() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let registry = Registry::shared().await?;
    let world = World::start(cp, registry).await?;
    let reader = world.namespace_reader().await?;
    let team_a = world.tenant("keys-a", &reader).await?;
    let team_b = world.tenant("keys-b", &reader).await?;
    world.widget(&team_b, "theirs", &[]).await?;
    let key = |ns: &str, name: &str| format!("{ns}/{name}");
    world
        .handed_at_least(&team_a, &[key(&team_a, "ledger")])
        .await?;
    world
        .handed_at_least(&team_b, &[key(&team_b, "ledger"), key(&team_b, "theirs")])
        .await?;

    // From team A's namespace, at team B's Widget.
    world
        .config_map(
            &team_a,
            "points-away",
            &[(OWNER_NAMESPACE, &team_b), (OWNER_NAME, "theirs")],
            &[],
        )
        .await?;
    world
        .config_map(
            &team_a,
            "maps-away",
            &[(MAPPED, "true")],
            &[(KEYS, &key(&team_b, "theirs"))],
        )
        .await?;
    // From team B's Namespace, a cluster-scoped object outside every tenant's namespace, at
    // team A's Widgets and team B's own.
    let listed = format!(
        "{} {}",
        key(&team_a, "via-namespace-map"),
        key(&team_b, "via-namespace-map")
    );
    Api::<Namespace>::all(world.client.clone())
        .patch(
            &team_b,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {
                "labels": {OWNER_NAMESPACE: team_a, OWNER_NAME: "via-namespace-labels", MAPPED: "true"},
                "annotations": {KEYS: listed},
            }})),
        )
        .await?;
    // Then team A's own keys, the same ways: once they arrive, what was sent before had its
    // chance.
    world
        .config_map(
            &team_a,
            "points-home",
            &[(OWNER_NAMESPACE, &team_a), (OWNER_NAME, "home")],
            &[],
        )
        .await?;
    world
        .config_map(
            &team_a,
            "maps-home",
            &[(MAPPED, "true")],
            &[(KEYS, &key(&team_a, "home-by-map"))],
        )
        .await?;
    let own = [
        key(&team_a, "ledger"),
        key(&team_a, "home"),
        key(&team_a, "home-by-map"),
    ];
    world.handed_at_least(&team_a, &own).await?;
    tokio::time::sleep(GRACE).await;

    let handed_a = world.handed(&team_a).await?;
    ensure!(
        handed_a == own.iter().cloned().collect(),
        "team A's guest was handed {handed_a:?}, not only its own keys {own:?}\n{}",
        world.host.log_tail()
    );
    let handed_b = world.handed(&team_b).await?;
    let own_b: BTreeSet<String> = [key(&team_b, "ledger"), key(&team_b, "theirs")].into();
    ensure!(
        handed_b == own_b,
        "team B's guest was handed {handed_b:?}, not only {own_b:?}\n{}",
        world.host.log_tail()
    );
    let theirs = world.widgets(&team_b).get("theirs").await?;
    ensure!(
        theirs.data.get("status").is_none_or(Value::is_null),
        "team B's Widget was written: {}",
        theirs.data["status"]
    );
    // The owner-labels key of team B was named, and dropped where every key is let in.
    let dropped =
        format!(r#"reconciler_keys_outside_namespace_total{{guest="keylog@{team_a}.keylog"}}"#);
    let count = world.host.metric(&dropped).await?;
    ensure!(count >= 1.0, "{dropped} is {count}");
    Ok(())
}
