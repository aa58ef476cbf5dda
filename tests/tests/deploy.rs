//! The host deployed into a real single-node cluster (`tools/control-plane/cluster`: kubelet,
//! containerd, scheduler and controller-manager around the control plane), as an operator would:
//! the image from `deploy/image.sh` (buildah, FROM scratch, imported with no registry), the
//! manifests of `deploy/local` (2 replicas, leader election, probes), RBAC printed by
//! `reconciler-host rbac` for the configuration and nothing more, small guests from a ConfigMap
//! and large ones from a registry.
//!
//! One test, in order: the example Networks and a Widget converge through the Pods; deleting
//! the leader Pod hands over and objects created meanwhile converge; a new guest version in the
//! ConfigMap is hot-loaded without a restart (its writes say version 2); a broken `.wasm` keeps
//! the last good version and shows on `/guests`; one RBAC rule removed fails only the affected
//! guest, with a forbidden error in its result and metrics, while the host stays Ready; the
//! guests too large for a ConfigMap (Go, Python), pushed to a registry on the node's address and
//! declared as `Reconciler` objects pinned by digest, run in the Pods (the Python greeter greets
//! a Widget, the Go Network guest reconciles in shadow beside the Rust one); the sharded variant
//! (`deploy/sharded`: three replicas, `--shards auto`) splits the keys between its Pods with no
//! overlap, every Network stays Ready and new ones converge; every manifest passes
//! `kubectl apply --dry-run=server`; with the garbage collector live, a hostile guest cannot
//! make it delete anything through owner references (refused by the host, shown on the API
//! server). Then `cluster down` must leave the machine as it found it.
//!
//! Needs root (kubelet, containerd, interfaces); one such cluster per machine.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::cluster::run;
use reconciler_host_tests::{
    LocalCluster, PrivateRegistry, apply_crd_file, guest_component, repo_root, wait_until,
    with_password,
};
use serde_json::{Value, json};

const NAMESPACE: &str = "reconciler-host";
const WAIT: Duration = Duration::from_secs(180);
/// The registry `./dev deploy` starts, where `deploy/local/host.yaml` names it: the node's
/// address (Pods reach it) and a fixed port.
const DEPLOY_REGISTRY: &str = "10.201.255.1:5050";

fn kubectl(args: &[&str]) -> Result<String> {
    LocalCluster::kubectl(args)
}

fn kubectl_stdin(args: &[&str], input: &str) -> Result<String> {
    LocalCluster::kubectl_stdin(args, input)
}

/// Waits until every replica of the host's Deployment runs the current template and is Ready.
fn rolled_out() -> Result<()> {
    kubectl(&[
        "-n",
        NAMESPACE,
        "rollout",
        "status",
        "deployment/reconciler-host",
        "--timeout=180s",
    ])
    .map(drop)
}

/// The guests ConfigMap with these files (name in the directory → built guest), applied
/// server-side as docs/deploying.md says (a client-side apply cannot hold a guest in an
/// annotation).
fn put_guests(files: &[(&str, &Path)]) -> Result<()> {
    let mut args = vec![
        "-n".to_owned(),
        NAMESPACE.to_owned(),
        "create".to_owned(),
        "configmap".to_owned(),
        "reconciler-host-guests".to_owned(),
        "-o".to_owned(),
        "yaml".to_owned(),
        "--dry-run=client".to_owned(),
    ];
    for (name, path) in files {
        args.push(format!("--from-file={name}={}", path.display()));
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let manifest = kubectl(&args)?;
    kubectl_stdin(&["apply", "--server-side", "--force-conflicts"], &manifest)?;
    Ok(())
}

fn widget_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("test.reconciler.dev", "v1", "Widget");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

fn network_api(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network");
    Api::namespaced_with(client.clone(), "default", &ApiResource::from_gvk(&gvk))
}

async fn network_ready(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    wait_until(&format!("Network {name} Ready"), WAIT, || async {
        let network = api.get(name).await?;
        let ready = network.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
        ensure!(ready, "status {}", network.data["status"]);
        Ok(())
    })
    .await
}

async fn create_network(api: &Api<DynamicObject>, name: &str, octet: u8) -> Result<()> {
    let network: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": name},
        "spec": {"cidr": format!("10.150.{octet}.0/24"), "gateway": format!("10.150.{octet}.1")},
    }))?;
    api.create(&PostParams::default(), &network).await?;
    Ok(())
}

/// Waits until widget `name` has been reconciled by guest version `version` (its status says so)
/// at a generation at least `generation`.
async fn widget_at(
    api: &Api<DynamicObject>,
    name: &str,
    version: &str,
    generation: i64,
) -> Result<()> {
    wait_until(
        &format!("Widget {name} reconciled by guest version {version}"),
        WAIT,
        || async {
            let widget = api.get(name).await?;
            let status = &widget.data["status"];
            ensure!(
                status["guestVersion"] == version
                    && status["observedGeneration"].as_i64() >= Some(generation),
                "status {status}"
            );
            Ok(())
        },
    )
    .await
}

async fn create_widget(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"message": "hello"},
    }))?;
    api.create(&PostParams::default(), &widget).await?;
    Ok(())
}

async fn bump_widget(api: &Api<DynamicObject>, name: &str, message: &str) -> Result<i64> {
    let widget = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": message}})),
        )
        .await?;
    Ok(widget.metadata.generation.unwrap_or_default())
}

async fn lease_holder(client: &kube::Client) -> Result<String> {
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), NAMESPACE);
    let lease = leases.get("reconciler-host").await?;
    lease
        .spec
        .and_then(|s| s.holder_identity)
        .filter(|h| !h.is_empty())
        .context("the lease has no holder")
}

/// GET `path` from one Pod's HTTP server (pods' addresses are reachable from the node).
async fn pod_get(pods: &Api<Pod>, pod: &str, path: &str) -> Result<String> {
    let ip = pods
        .get(pod)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .with_context(|| format!("pod {pod} has no IP"))?;
    let output = tokio::process::Command::new("curl")
        .args(["-sf", "--max-time", "5", &format!("http://{ip}:8080{path}")])
        .output()
        .await?;
    ensure!(
        output.status.success(),
        "GET {path} from {pod} ({ip}) failed"
    );
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn metric(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)
                .and_then(|rest| rest.trim().split(' ').next()?.parse().ok())
        })
        .unwrap_or(0.0)
}

/// The host configuration of this test: deploy/local's plus the widget test guest.
fn test_config() -> Result<String> {
    let local = std::fs::read_to_string(repo_root().join("deploy/local/host.yaml"))?;
    let widget = std::fs::read_to_string(repo_root().join("guests/testing/widget/host.yaml"))?;
    let widget_grant = widget
        .split_once("guests:\n")
        .map(|(_, grant)| grant.to_owned())
        .context("guests/testing/widget/host.yaml has a guests: section")?;
    Ok(format!("{local}{widget_grant}"))
}

/// An overlay of deploy/local whose configuration is the test's.
fn overlay(config: &str) -> Result<PathBuf> {
    let dir = repo_root().join("target/deploy-test");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("host.yaml"), config)?;
    std::fs::write(
        dir.join("kustomization.yaml"),
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [../../deploy/local]\n\
         configMapGenerator:\n  - name: reconciler-host-config\n    namespace: reconciler-host\n    behavior: replace\n    files: [host.yaml]\n    options: {disableNameSuffixHash: true}\n",
    )?;
    Ok(dir)
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, step by step, on one machine-wide cluster
async fn the_host_runs_as_a_deployment_with_generated_rbac_and_hot_loads_guests_from_a_configmap()
-> Result<()> {
    let cluster = LocalCluster::up()?;
    let client = cluster.client().await?;
    // The debug build the other tests use, with its libraries: no second build of the host in
    // release for this test (`./dev deploy` and releases build the static one).
    run(Command::new(repo_root().join("deploy/image.sh")).args(["--debug", "--import"]))?;
    apply_crd_file(&client, "examples/crds/network.yaml").await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    apply_crd_file(&client, "deploy/crds/reconcilers.yaml").await?;

    // The configuration, the RBAC `reconciler-host rbac` prints for it, the guests.
    let config = test_config()?;
    let overlay = overlay(&config)?;
    let rbac = run(Command::new(
        reconciler_host_tests::paths::target_dir().join("debug/reconciler-host"),
    )
    .args(["rbac", "--config"])
    .arg(overlay.join("host.yaml")))?;
    kubectl(&[
        "apply",
        "-f",
        &repo_root()
            .join("deploy/base/namespace.yaml")
            .display()
            .to_string(),
    ])?;
    put_guests(&[
        ("network.wasm", &guest_component("network")?),
        ("widget.wasm", &guest_component("widget")?),
    ])?;
    kubectl(&["apply", "-k", &overlay.display().to_string()])?;
    kubectl_stdin(&["apply"], &rbac)?;
    rolled_out()?;

    // Exactly the generated RBAC: every object it printed is there as printed, and no other
    // role carries the host's label.
    let docs: Vec<serde_yaml::Value> = rbac
        .split("---\n")
        .map(serde_yaml::from_str::<serde_yaml::Value>)
        .filter(|doc| !matches!(doc, Ok(serde_yaml::Value::Null)))
        .collect::<Result<_, _>>()?;
    let names = |accounts: bool| -> Result<BTreeSet<String>> {
        docs.iter()
            .filter(|doc| (doc["kind"] == "ServiceAccount") == accounts)
            .map(|doc| {
                doc["metadata"]["name"]
                    .as_str()
                    .map(str::to_owned)
                    .context("a generated object without a name")
            })
            .collect()
    };
    let printed = names(false)?;
    // The network guest's own account is among them (deploy/local/host.yaml).
    ensure!(
        names(true)? == BTreeSet::from(["network".to_owned()]),
        "{rbac}"
    );
    kubectl(&["-n", NAMESPACE, "get", "serviceaccount", "network"])?;
    let live = kubectl(&[
        "get",
        "clusterroles,clusterrolebindings,roles,rolebindings",
        "-A",
        "-l",
        "app.kubernetes.io/part-of=reconciler-host",
        "-o",
        "jsonpath={.items[*].metadata.name}",
    ])?;
    let live: BTreeSet<String> = live.split_whitespace().map(str::to_owned).collect();
    ensure!(
        live == printed,
        "live RBAC {live:?} != generated {printed:?}"
    );

    // The example Networks and a Widget converge through the Pods.
    kubectl(&[
        "apply",
        "-f",
        &repo_root()
            .join("examples/networks.yaml")
            .display()
            .to_string(),
    ])?;
    let networks = network_api(&client);
    for name in ["frontend", "backend", "storage"] {
        network_ready(&networks, name).await?;
    }
    // The network guest wrote those statuses as its own account, which may read what it reads.
    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let holder = lease_holder(&client).await?;
    let guests: Value = serde_json::from_str(&pod_get(&pods, &holder, "/guests").await?)?;
    let network = guests
        .as_array()
        .and_then(|files| files.iter().find(|f| f["guest"] == "network"))
        .context("the network guest on /guests")?;
    ensure!(
        network["serviceAccount"] == "reconciler-host/network"
            && network["accessReview"]["result"] == "allowed",
        "{network}"
    );
    let widgets = widget_api(&client);
    create_widget(&widgets, "w1").await?;
    widget_at(&widgets, "w1", "1", 1).await?;
    let logs = kubectl(&[
        "-n",
        NAMESPACE,
        "logs",
        "deployment/reconciler-host",
        "--tail=20",
    ])?;
    for line in logs.lines() {
        serde_json::from_str::<Value>(line)
            .with_context(|| format!("a log line that is not JSON: {line}"))?;
    }

    // The leader's Pod deleted: the other replica takes over; objects created meanwhile converge.
    let leader = lease_holder(&client).await?;
    kubectl(&["-n", NAMESPACE, "delete", "pod", &leader, "--wait=false"])?;
    create_network(&networks, "late", 7).await?;
    create_widget(&widgets, "w2").await?;
    let new_leader = wait_until("another replica to lead", WAIT, || async {
        let holder = lease_holder(&client).await?;
        ensure!(holder != leader, "still {holder}");
        Ok(holder)
    })
    .await?;
    network_ready(&networks, "late").await?;
    widget_at(&widgets, "w2", "1", 1).await?;

    // A new guest version through the ConfigMap: hot-loaded, no Pod restarts.
    rolled_out()?;
    let before: Vec<(String, i32)> = restarts(&pods).await?;
    put_guests(&[
        ("network.wasm", &guest_component("network")?),
        ("widget.wasm", &guest_component("widget-v2")?),
    ])?;
    wait_until("the new widget version on the leader", WAIT, || async {
        let guests = pod_get(&pods, &new_leader, "/guests").await?;
        let v2 =
            reconciler_host::runtime::content_hash(&std::fs::read(guest_component("widget-v2")?)?);
        ensure!(guests.contains(&v2), "{guests}");
        Ok(())
    })
    .await?;
    let generation = bump_widget(&widgets, "w1", "again").await?;
    widget_at(&widgets, "w1", "2", generation).await?;
    ensure!(
        restarts(&pods).await? == before,
        "no Pod restarted or was replaced"
    );

    // A broken .wasm: the last good version stays, and /guests says why.
    let broken = repo_root().join("target/deploy-test/broken.wasm");
    std::fs::write(&broken, b"\0asm not really")?;
    put_guests(&[
        ("network.wasm", &guest_component("network")?),
        ("widget.wasm", &broken),
    ])?;
    wait_until("the broken guest reported on /guests", WAIT, || async {
        let guests: Value = serde_json::from_str(&pod_get(&pods, &new_leader, "/guests").await?)?;
        let widget = guests
            .as_array()
            .and_then(|files| {
                files.iter().find(|f| {
                    f["file"]
                        .as_str()
                        .is_some_and(|p| p.ends_with("widget.wasm"))
                })
            })
            .context("widget.wasm on /guests")?;
        ensure!(
            widget["state"]["state"] == "failed" && widget["guest"] == "widget",
            "{widget}"
        );
        Ok(())
    })
    .await?;
    let generation = bump_widget(&widgets, "w2", "still").await?;
    widget_at(&widgets, "w2", "2", generation).await?;

    // One rule less: only the widget guest fails, with `forbidden`; the host stays Ready. The
    // rule goes from each role that grants it: the guest's, and the `reconcilers.allow` ceiling's
    // (RBAC adds up over the host's one ServiceAccount). Both come back below.
    for role in [
        "reconciler-host-guest-widget",
        "reconciler-host-reconcilers",
    ] {
        let rules = kubectl(&["get", "clusterrole", role, "-o", "json"])?;
        let mut role_json: Value = serde_json::from_str(&rules)?;
        let kept: Vec<Value> = role_json["rules"]
            .as_array()
            .context("rules")?
            .iter()
            .filter(|r| !r["resources"].to_string().contains("widgets/status"))
            .cloned()
            .collect();
        ensure!(kept.len() + 1 == role_json["rules"].as_array().map_or(0, Vec::len));
        role_json["rules"] = Value::Array(kept);
        kubectl_stdin(&["replace"], &role_json.to_string())?;
    }
    let generation = bump_widget(&widgets, "w1", "forbidden").await?;
    wait_until("the widget guest's status write refused", WAIT, || async {
        let text = pod_get(&pods, &new_leader, "/metrics").await?;
        let refused = metric(
            &text,
            "reconciler_host_calls_total{guest=\"widget\",interface=\"cluster\",function=\"patch-status\",outcome=\"denied\"}",
        ) + metric(
            &text,
            "reconciler_host_calls_total{guest=\"widget\",interface=\"cluster\",function=\"patch-status\",outcome=\"error\"}",
        );
        ensure!(refused >= 1.0, "no refused status write yet");
        Ok(())
    })
    .await?;
    let logs = kubectl(&["-n", NAMESPACE, "logs", &new_leader, "--tail=200"])?;
    ensure!(
        logs.lines()
            .any(|l| l.contains("widget") && l.contains("forbidden")),
        "a forbidden error in the widget guest's reconcile result"
    );
    let widget = widgets.get("w1").await?;
    ensure!(
        widget.data["status"]["observedGeneration"].as_i64() < Some(generation),
        "the status was not written"
    );
    create_network(&networks, "unaffected", 8).await?;
    network_ready(&networks, "unaffected").await?;
    ensure!(pod_get(&pods, &new_leader, "/readyz").await?.contains("ok"));

    // After the step above (the greeter writes a Widget's observedGeneration too), with the
    // rule it took restored (a client-side apply would not see it gone).
    kubectl_stdin(&["replace"], &rbac)?;
    let registry = guests_from_a_registry(&client).await?;

    sharded_replicas_split_the_networks(&networks, &pods).await?;

    // Every manifest passes the API server's validation.
    for dir in ["deploy/local", "deploy/linux", "deploy/sharded"] {
        kubectl(&[
            "apply",
            "--dry-run=server",
            "-k",
            &repo_root().join(dir).display().to_string(),
        ])?;
    }

    garbage_collection_never_acts_on_a_guests_word(&cluster, &client).await?;

    // Stopped before the node's address goes.
    drop(registry);
    let clean = cluster.down()?;
    ensure!(clean.trim() == "clean", "left on the machine: {clean}");
    Ok(())
}

/// The guests too large for a ConfigMap, as `./dev deploy` runs them: pushed to a registry on
/// the node's address, declared by the manifests of `deploy/local/reconcilers` pinned to the
/// digests pushed, pulled with the Secret `reconciler-host-registry` by the host in the Pods.
/// Each Reconciler is Ready at that digest; the Python greeter greets a Widget; the Go Network
/// guest, in shadow beside the Rust one, reconciles the live Networks without writing.
async fn guests_from_a_registry(client: &kube::Client) -> Result<PrivateRegistry> {
    use k8s_openapi::api::core::v1::Secret;
    let registry = PrivateRegistry::start_at("deploy", DEPLOY_REGISTRY).await?;
    let entry = json!({"username": registry.username(), "password": registry.password()});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "reconciler-host-registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": json!({"auths": {registry.address(): entry}}).to_string()},
    }))?;
    Api::<Secret>::namespaced(client.clone(), NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await?;

    let reconcilers = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "ClusterReconciler"),
            "clusterreconcilers",
        ),
    );
    let declared = [
        ("network-go", "network-go", "network@network-go", "shadow"),
        ("greeter-python", "greeter", "greeter", "active"),
    ];
    let mut digests = Vec::new();
    for (guest, name, _, _) in declared {
        let mut push =
            Command::new(reconciler_host_tests::paths::target_dir().join("debug/reconciler-host"));
        push.arg("push")
            .arg(guest_component(guest)?)
            .arg(format!("oci://{}/guests/{guest}:dev", registry.address()))
            .args([
                "--plain-http",
                "--username",
                registry.username(),
                "--password-stdin",
            ]);
        let out = with_password(push, registry.password())?;
        ensure!(
            out.status.success(),
            "push {guest}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let digest = String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .unwrap_or("")
            .to_owned();
        ensure!(
            digest.starts_with("sha256:"),
            "push {guest} printed no digest: {digest}"
        );
        let manifest = repo_root().join(format!("deploy/local/reconcilers/{name}.yaml"));
        let mut object: Value = serde_yaml::from_str(&std::fs::read_to_string(&manifest)?)?;
        let module = object["spec"]["module"].as_str().context("spec.module")?;
        ensure!(
            module.starts_with(&format!("oci://{DEPLOY_REGISTRY}/guests/{guest}:")),
            "{}: spec.module {module} is not the deploy registry's {guest}",
            manifest.display()
        );
        object["spec"]["module"] = format!("{module}@{digest}").into();
        kubectl_stdin(&["apply"], &object.to_string())?;
        digests.push(digest);
    }
    for ((_, name, guest, mode), digest) in declared.iter().zip(&digests) {
        wait_until(&format!("Reconciler {name} Ready"), WAIT, || async {
            let status = reconcilers.get(name).await?.data["status"].clone();
            let ready = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Ready" && c["status"] == "True")
            });
            ensure!(
                ready
                    && status["digest"] == digest.as_str()
                    && status["guest"] == *guest
                    && status["mode"] == *mode,
                "status {status}"
            );
            Ok(())
        })
        .await?;
    }

    let widgets = widget_api(client);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "greeted"}, "spec": {"message": "from python"},
    }))?;
    widgets.create(&PostParams::default(), &widget).await?;
    wait_until("Widget greeted by the Python guest", WAIT, || async {
        let greeting = widgets.get("greeted").await?.data["status"]["greeting"].clone();
        ensure!(greeting == "hello, from python", "greeting {greeting}");
        Ok(())
    })
    .await?;
    // Its verdicts differ from what the Rust guest did: a guest sees only its own networks in
    // the backend, and `network@network-go` has none (docs/registry.md, "The deploy registry").
    wait_until(
        "the Go Network guest's verdicts in shadow",
        WAIT,
        || async {
            let status = reconcilers.get("network-go").await?.data["status"].clone();
            let shadow = &status["shadow"];
            let verdicts = shadow["agreements"].as_u64().unwrap_or(0)
                + shadow["differences"].as_u64().unwrap_or(0);
            ensure!(verdicts > 0, "status {status}");
            Ok(())
        },
    )
    .await?;
    Ok(registry)
}

/// With the garbage collector running (this cluster has a controller-manager), a guest tries
/// to make it delete things: a status patch of a CRD naming an owner that does not exist (the
/// API server would keep it, and the collector would then delete the CRD and every custom
/// resource of it), and applies naming a missing owner or a stale uid. The host refuses each
/// (`guests/testing/hostile/src/boundary.rs`); a control object the test itself gives a
/// dangling owner is collected meanwhile, so the collector was live; the CRD, its custom
/// resource and the guest's targets are still on the API server afterwards.
async fn garbage_collection_never_acts_on_a_guests_word(
    cluster: &LocalCluster,
    client: &kube::Client,
) -> Result<()> {
    use k8s_openapi::api::core::v1::ConfigMap;
    const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
    const ATTACKS: &[(&str, &str, &str)] = &[
        (
            "status-crd-owner",
            "invalid",
            "patch.metadata.ownerReferences:",
        ),
        (
            "apply-owner-dangling",
            "invalid",
            "object.metadata.ownerReferences[0]:",
        ),
        (
            "apply-owner-stale-uid",
            "invalid",
            "object.metadata.ownerReferences[0].uid:",
        ),
    ];
    let namespace = reconciler_host_tests::test_namespace(client, "gc").await?;
    apply_crd_file(client, "guests/testing/hostile/victim-crd.yaml").await?;
    let victims = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "hostile.reconciler.dev",
            "v1",
            "Victim",
        )),
    );
    let victim: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "hostile.reconciler.dev/v1", "kind": "Victim", "metadata": {"name": "precious"},
    }))?;
    victims.create(&PostParams::default(), &victim).await?;
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &namespace);
    let keep: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "keep"}}))?;
    config_maps.create(&PostParams::default(), &keep).await?;

    let config = "guests:\n  hostile:\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap, apiextensions.k8s.io/v1/CustomResourceDefinition/status]\n";
    let kubeconfig = cluster.kubeconfig();
    let host = reconciler_host_tests::HostProcess::start(reconciler_host_tests::HostOptions {
        kubeconfig: &kubeconfig,
        config: config.to_owned(),
        guests: vec!["hostile"],
        namespace: Some(&namespace),
        extra_args: vec![],
    })
    .await?;
    for (attack, _, _) in ATTACKS {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": attack, "labels": {ATTACK_LABEL: "true"}},
            "data": {"attack": attack, "victim": namespace},
        }))?;
        config_maps.create(&PostParams::default(), &object).await?;
    }
    // The control: a dangling owner the test writes itself is collected.
    let control: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "control",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "nobody",
            "uid": "00000000-0000-4000-8000-00000000dead"}]}}))?;
    config_maps.create(&PostParams::default(), &control).await?;
    for (attack, outcome, starts) in ATTACKS {
        let result = wait_until(&format!("the result of {attack}"), WAIT, || async {
            config_maps
                .get_opt(&format!("result-{attack}"))
                .await?
                .and_then(|cm| cm.data)
                .context("no result yet")
        })
        .await
        .map_err(|e| e.context(host.log_tail()))?;
        ensure!(
            result.get("outcome").map(String::as_str) == Some(*outcome)
                && result.get("message").is_some_and(|m| m.starts_with(starts)),
            "{attack}: expected {outcome} starting with {starts}; observed {result:?}"
        );
    }
    wait_until(
        "the garbage collector to delete the control",
        WAIT,
        || async {
            ensure!(
                config_maps.get_opt("control").await?.is_none(),
                "still there"
            );
            Ok(())
        },
    )
    .await?;
    let crds = Api::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>::all(client.clone());
    let crd = crds.get("victims.hostile.reconciler.dev").await?;
    ensure!(
        crd.metadata.owner_references.unwrap_or_default().is_empty()
            && crd.metadata.deletion_timestamp.is_none(),
        "the victim CRD was given an owner or is being deleted"
    );
    ensure!(
        victims.get_opt("precious").await?.is_some(),
        "the Victim is gone"
    );
    ensure!(
        config_maps.get_opt("keep").await?.is_some(),
        "ConfigMap keep is gone"
    );
    ensure!(
        config_maps.get_opt("owned").await?.is_none(),
        "ConfigMap owned was written"
    );
    Ok(())
}

/// `deploy/sharded` as an operator switches to it: scaled to zero first (a leader-elected
/// replica and sharded ones must not run side by side), then applied. Its three Pods hold
/// disjoint shares covering every slot, filtered on the API server, and hold every Network
/// between them; Networks created now converge.
async fn sharded_replicas_split_the_networks(
    networks: &Api<DynamicObject>,
    pods: &Api<Pod>,
) -> Result<()> {
    kubectl(&[
        "-n",
        NAMESPACE,
        "scale",
        "deployment/reconciler-host",
        "--replicas=0",
    ])?;
    wait_until("the leader-elected Pods to go", WAIT, || async {
        ensure!(restarts(pods).await?.is_empty(), "host Pods still running");
        Ok(())
    })
    .await?;
    kubectl(&[
        "apply",
        "-k",
        &repo_root().join("deploy/sharded").display().to_string(),
    ])?;
    rolled_out()?;
    for (i, name) in ["sharded-a", "sharded-b", "sharded-c", "sharded-d"]
        .iter()
        .enumerate()
    {
        create_network(networks, name, 20 + u8::try_from(i)?).await?;
    }
    let total = networks.list(&ListParams::default()).await?.items.len();
    let split = wait_until(
        "three Pods to split the ring and every Network",
        WAIT,
        || async {
            let mut owned: Vec<(String, String, u64)> = Vec::new();
            for (pod, _) in restarts(pods).await? {
                let report: Value = serde_json::from_str(&pod_get(pods, &pod, "/shards").await?)?;
                ensure!(
                    report["members"].as_array().map(Vec::len) == Some(3),
                    "{pod}: {report}"
                );
                ensure!(
                    report["filter"]["network"] == "server",
                    "{pod} filters on the client: {report}"
                );
                let keys = report["keys"]["network"].as_u64().unwrap_or(0);
                owned.push((
                    pod,
                    report["active"].as_str().unwrap_or("").to_owned(),
                    keys,
                ));
            }
            ensure!(owned.len() == 3, "{} Pods", owned.len());
            let mut all = reconciler_host::shards::SlotSet::empty();
            for (pod, active, _) in &owned {
                let set = reconciler_host::shards::SlotSet::from_text(active)
                    .map_err(anyhow::Error::msg)?;
                ensure!(!set.is_empty(), "{pod} owns nothing yet");
                ensure!(
                    set.intersection(&all).is_empty(),
                    "{pod} overlaps another Pod"
                );
                all = all.union(&set);
            }
            ensure!(all.is_all(), "slots {} unowned", all.to_text());
            let keys: u64 = owned.iter().map(|(_, _, k)| k).sum();
            ensure!(
                keys == total as u64,
                "the Pods hold {keys} of {total} Networks"
            );
            Ok(owned)
        },
    )
    .await?;
    println!("sharded split of {total} Networks (pod, slots, keys): {split:?}");
    for network in networks.list(&ListParams::default()).await?.items {
        network_ready(networks, &network.metadata.name.unwrap_or_default()).await?;
    }
    Ok(())
}

/// (pod name, restart count) of every host Pod, sorted.
async fn restarts(pods: &Api<Pod>) -> Result<Vec<(String, i32)>> {
    let mut all: Vec<(String, i32)> = pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=reconciler-host"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let restarts = p
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
                .iter()
                .map(|c| c.restart_count)
                .sum();
            (p.metadata.name.unwrap_or_default(), restarts)
        })
        .collect();
    all.sort();
    Ok(all)
}
