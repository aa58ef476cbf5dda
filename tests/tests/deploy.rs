//! The host deployed into a real single-node cluster (`tools/control-plane/cluster`: kubelet,
//! containerd, scheduler and controller-manager around the control plane), as an operator would:
//! the image from `deploy/image.sh` (buildah, FROM scratch, imported with no registry), installed
//! with the real `helm` from the chart `deploy/helm/reconciler-host` with the values of
//! `deploy/local` (2 replicas, leader election, probes), its RBAC exactly what
//! `reconciler-host rbac` prints for the configuration, small guests from values and from a
//! ConfigMap, large ones from a registry.
//!
//! One test, in order: the example Networks and a Widget converge through the Pods; deleting
//! the leader Pod hands over and objects created meanwhile converge; a new guest version in the
//! ConfigMap is hot-loaded without a restart (its writes say version 2); a broken `.wasm` keeps
//! the last good version and shows on `/guests`; one RBAC rule removed fails only the affected
//! guest, with a forbidden error in its result and metrics, while the host stays Ready; the
//! guests too large for a ConfigMap (Go, Python), pushed to a registry on the node's address and
//! declared as `Reconciler` objects pinned by digest, run in the Pods (the Python greeter greets
//! a Widget, the Go Network guest reconciles in shadow beside the Rust one); `helm upgrade` to a
//! new image and a new guest version while Widgets keep changing: the leader hands over to a new
//! Pod, and the journals of every Pod show no Widget reconciled by two at once and every last
//! change reconciled by the new version; `helm rollback` brings back both; `helm upgrade` to the
//! sharded mode (three replicas, `--shards auto`) splits the keys between its Pods with no
//! overlap, every Network stays Ready and new ones converge; `helm uninstall` leaves no object
//! stuck on a guest's finalizer (the chart's drain hook) and nothing of the release behind but
//! its CRD; the chart pushed to the registry as an OCI artifact installs from `oci://` and
//! reconciles; with the garbage collector live, a hostile guest cannot make it delete anything
//! through owner references (refused by the host, shown on the API server). Then `cluster down`
//! must leave the machine as it found it.
//!
//! Needs root (kubelet, containerd, interfaces); one such cluster per machine.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::cluster::run;
use reconciler_host_tests::helm::Chart;
use reconciler_host_tests::journal::{Log, describe, json_line, overlaps};
use reconciler_host_tests::{
    LocalCluster, PrivateRegistry, apply_crd_file, guest_component, repo_root, wait_until,
    with_password,
};
use serde_json::{Value, json};

const NAMESPACE: &str = "reconciler-host";
const WAIT: Duration = Duration::from_secs(180);
/// The registry `./dev deploy` starts, where `deploy/local/values.yaml` names it: the node's
/// address (Pods reach it) and a fixed port.
const DEPLOY_REGISTRY: &str = "10.201.255.1:5050";
/// The release, and so the name of its Deployment, lease, ConfigMaps and roles.
const RELEASE: &str = "reconciler-host";
/// The widget guest's ConfigMap, which the operator manages beside the release.
const WIDGET_GUESTS: &str = "widget-guests";

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

/// A guests ConfigMap of the operator's with these files (name in the directory → built
/// guest), applied server-side as docs/deploying.md says (a client-side apply cannot hold a
/// guest in an annotation).
fn put_guests(config_map: &str, files: &[(&str, &Path)]) -> Result<()> {
    let mut args = vec![
        "-n".to_owned(),
        NAMESPACE.to_owned(),
        "create".to_owned(),
        "configmap".to_owned(),
        config_map.to_owned(),
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

/// Waits until `pod`'s `/guests` lists the widget guest built as `component`, by its digest.
async fn widget_loaded(pods: &Api<Pod>, pod: &str, component: &str) -> Result<()> {
    let digest = reconciler_host::sandbox::runtime::content_hash(&std::fs::read(guest_component(
        component,
    )?)?);
    wait_until(&format!("{component} loaded on {pod}"), WAIT, || async {
        let guests = pod_get(pods, pod, "/guests").await?;
        ensure!(guests.contains(&digest), "{guests}");
        Ok(())
    })
    .await
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

/// The chart's values for this test: deploy/local's, the widget test guest's grant beside the
/// network guest's (with log rates no journal line exceeds: a dropped `end` line would read as a
/// reconcile that never finished), the widget from the operator's ConfigMap.
fn test_values() -> Result<Value> {
    let mut values: Value = serde_yaml::from_str(&std::fs::read_to_string(
        repo_root().join("deploy/local/values.yaml"),
    )?)?;
    let widget: Value = serde_yaml::from_str(&std::fs::read_to_string(
        repo_root().join("guests/testing/widget/host.yaml"),
    )?)?;
    let mut grant = widget["guests"]["widget"].clone();
    grant["limits"] = json!({"logLinesPerSecond": 100_000, "logBurst": 100_000});
    values["config"]["guests"]["widget"] = grant;
    values["guests"]["configMaps"] = json!([WIDGET_GUESTS]);
    Ok(values)
}

/// Where the test keeps its files: values, the base64 guest, helm's own state.
fn work_dir() -> Result<PathBuf> {
    let dir = repo_root().join("target/deploy-test");
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `helm ARGS` against the cluster (its kubeconfig), with its state in the test's directory;
/// its stdout.
fn helm(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let home = work_dir()?.join("helm");
    let mut command = reconciler_host_tests::helm::command(&home)?;
    command.env("KUBECONFIG", kubeconfig).args(args);
    let output = reconciler_host_tests::helm::run(&mut command)?;
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// `helm install` (or `upgrade`, with `args`) of the chart at `chart` with the test's values
/// and the network guest from a base64 file, waiting for the workload; how long it took.
fn helm_release(kubeconfig: &Path, verb: &str, chart: &str, args: &[&str]) -> Result<Duration> {
    let dir = work_dir()?;
    std::fs::write(dir.join("values.json"), test_values()?.to_string())?;
    let network = dir.join("network.wasm.b64");
    {
        use base64::Engine as _;
        let bytes = std::fs::read(guest_component("network")?)?;
        std::fs::write(
            &network,
            base64::engine::general_purpose::STANDARD.encode(bytes),
        )?;
    }
    let values = dir.join("values.json").display().to_string();
    let file = format!("guests.files.network\\.wasm={}", network.display());
    let mut all = vec![
        verb,
        RELEASE,
        chart,
        "--namespace",
        NAMESPACE,
        "--values",
        &values,
        "--set-file",
        &file,
        "--wait",
        "--timeout",
        "5m",
    ];
    all.extend_from_slice(args);
    let started = Instant::now();
    helm(kubeconfig, &all)?;
    Ok(started.elapsed())
}

#[tokio::test]
#[allow(clippy::too_many_lines)] // one scenario, step by step, on one machine-wide cluster
async fn the_host_installs_with_helm_hot_loads_guests_upgrades_rolls_back_and_uninstalls_clean()
-> Result<()> {
    let test_started = Instant::now();
    let cluster = LocalCluster::up()?;
    let client = cluster.client().await?;
    println!(
        "phase cluster up: {:.0} s",
        test_started.elapsed().as_secs_f64()
    );
    // The debug build the other tests use, with its libraries: no second build of the host in
    // release for this test (`./dev deploy` and releases build the static one).
    let started = Instant::now();
    run(Command::new(repo_root().join("deploy/image.sh")).args(["--debug", "--import"]))?;
    println!(
        "image built and imported in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    apply_crd_file(&client, "examples/crds/network.yaml").await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;

    // The configuration, the RBAC `reconciler-host rbac` prints for it, the guests: the network
    // guest in the chart's values, the widget in a ConfigMap of the operator's. The chart brings
    // the Reconciler CRD (crds/).
    let config = serde_yaml::to_string(&test_values()?["config"])?;
    let config_file = work_dir()?.join("host.yaml");
    std::fs::write(&config_file, &config)?;
    let rbac = run(Command::new(
        reconciler_host_tests::paths::target_dir().join("debug/reconciler-host"),
    )
    .args(["rbac", "--config"])
    .arg(&config_file))?;
    kubectl_stdin(
        &["apply"],
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            .to_string(),
    )?;
    put_guests(
        WIDGET_GUESTS,
        &[("widget.wasm", &guest_component("widget")?)],
    )?;
    let chart = Chart::dir().display().to_string();
    let kubeconfig = cluster.kubeconfig();
    let took = helm_release(&kubeconfig, "install", &chart, &[])?;
    println!(
        "helm install: Pods ready {:.0} s after it began",
        took.as_secs_f64()
    );
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
    put_guests(
        WIDGET_GUESTS,
        &[("widget.wasm", &guest_component("widget-v2")?)],
    )?;
    widget_loaded(&pods, &new_leader, "widget-v2").await?;
    let generation = bump_widget(&widgets, "w1", "again").await?;
    widget_at(&widgets, "w1", "2", generation).await?;
    ensure!(
        restarts(&pods).await? == before,
        "no Pod restarted or was replaced"
    );

    // A broken .wasm: the last good version stays, and /guests says why.
    let broken = repo_root().join("target/deploy-test/broken.wasm");
    std::fs::write(&broken, b"\0asm not really")?;
    put_guests(WIDGET_GUESTS, &[("widget.wasm", &broken)])?;
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
    // rule it took restored as the release holds it (a client-side apply would not see it gone).
    let manifest = reconciler_host_tests::helm::Rendered::parse(&helm(
        &kubeconfig,
        &["get", "manifest", RELEASE, "--namespace", NAMESPACE],
    )?)?;
    for role in manifest.of_kind("ClusterRole") {
        kubectl_stdin(&["replace"], &role.to_string())?;
    }
    let registry = guests_from_a_registry(&client).await?;

    // The widget guest's ConfigMap back to version 1, for the upgrade below.
    put_guests(
        WIDGET_GUESTS,
        &[("widget.wasm", &guest_component("widget")?)],
    )?;
    // The kubelet refreshes a mounted ConfigMap within its sync period (a minute or more on a
    // busy machine): until the leader has loaded version 1, new Widgets get version 2.
    widget_loaded(&pods, &lease_holder(&client).await?, "widget").await?;
    // Each phase's time, printed: what the helm lifecycle costs the suite.
    println!(
        "phase install to registry guests: {:.0} s since the test began",
        test_started.elapsed().as_secs_f64()
    );
    let phase = Instant::now();
    upgrade_hands_over_and_no_reconcile_is_lost_or_doubled(&kubeconfig, &client, &pods).await?;
    println!("phase upgrade: {:.0} s", phase.elapsed().as_secs_f64());
    let phase = Instant::now();
    rollback_brings_back_the_image_and_the_guest(&kubeconfig, &pods, &widgets).await?;
    println!("phase rollback: {:.0} s", phase.elapsed().as_secs_f64());

    let phase = Instant::now();
    sharded_replicas_split_the_networks(&kubeconfig, &networks, &pods).await?;
    println!("phase sharded: {:.0} s", phase.elapsed().as_secs_f64());

    let phase = Instant::now();
    uninstall_leaves_nothing_stuck(&kubeconfig, &client).await?;
    println!("phase uninstall: {:.0} s", phase.elapsed().as_secs_f64());
    let phase = Instant::now();
    the_chart_installs_from_a_registry(&kubeconfig, &client, &registry, &networks).await?;
    println!("phase oci: {:.0} s", phase.elapsed().as_secs_f64());

    let phase = Instant::now();
    garbage_collection_never_acts_on_a_guests_word(&cluster, &client).await?;
    println!(
        "phase garbage collection: {:.0} s",
        phase.elapsed().as_secs_f64()
    );

    // Stopped before the node's address goes.
    drop(registry);
    let clean = cluster.down()?;
    ensure!(clean.trim() == "clean", "left on the machine: {clean}");
    Ok(())
}

/// Every host Pod's log, followed from its start until its container ends (`kubectl logs -f`),
/// with the time each stream ended: the journals of the Pods a rolling update replaces.
struct PodLogs {
    logs: Arc<Mutex<BTreeMap<String, PodLog>>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct PodLog {
    lines: Vec<(SystemTime, Value)>,
    ended: Option<SystemTime>,
}

impl PodLogs {
    fn follow(pods: Api<Pod>) -> Self {
        let logs: Arc<Mutex<BTreeMap<String, PodLog>>> = Arc::default();
        let shared = logs.clone();
        let task = tokio::spawn(async move {
            let mut followed = BTreeSet::new();
            loop {
                let selector =
                    ListParams::default().labels("app.kubernetes.io/name=reconciler-host");
                if let Ok(list) = pods.list(&selector).await {
                    for pod in list.items {
                        let name = pod.metadata.name.clone().unwrap_or_default();
                        let running =
                            pod.status
                                .and_then(|s| s.container_statuses)
                                .is_some_and(|c| {
                                    c.iter().any(|c| {
                                        c.state.as_ref().is_some_and(|s| s.running.is_some())
                                    })
                                });
                        if running && followed.insert(name.clone()) {
                            tokio::spawn(follow_pod(name, shared.clone()));
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        });
        Self { logs, task }
    }

    /// Stops following; each Pod's lines and when its stream ended (none: still running).
    fn stop(self) -> BTreeMap<String, PodLog> {
        self.task.abort();
        std::mem::take(
            &mut *self
                .logs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}

async fn follow_pod(pod: String, logs: Arc<Mutex<BTreeMap<String, PodLog>>>) {
    use tokio::io::AsyncBufReadExt as _;
    let Ok(mut child) =
        tokio::process::Command::new(repo_root().join("tools/control-plane/cluster"))
            .args([
                "kubectl", "-n", NAMESPACE, "logs", "--follow", &pod, "-c", "host",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .kill_on_drop(true)
            .spawn()
    else {
        return;
    };
    let Some(stdout) = child.stdout.take() else {
        return;
    };
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if let Some(parsed) = json_line(&line) {
            let mut logs = logs
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            logs.entry(pod.clone()).or_default().lines.push(parsed);
        }
    }
    let _ = child.wait().await;
    let mut logs = logs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    logs.entry(pod).or_default().ended = Some(SystemTime::now());
}

/// Bumps `spec.touch` of the Widgets in turn, one every `every`, until aborted.
fn touch_widgets(
    widgets: Api<DynamicObject>,
    names: Vec<String>,
    every: Duration,
) -> (
    tokio::task::JoinHandle<()>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let touched = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let count = touched.clone();
    let task = tokio::spawn(async move {
        for (i, name) in names.iter().cycle().enumerate() {
            let patch = Patch::Merge(json!({"spec": {"touch": i}}));
            if widgets
                .patch(name, &PatchParams::default(), &patch)
                .await
                .is_ok()
            {
                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            tokio::time::sleep(every).await;
        }
    });
    (task, touched)
}

/// `helm upgrade` to a new image (the same build in a new image, tag `upgrade`) and a new
/// version of the widget guest (a new ConfigMap of the operator's, `widget-guests-v2`), while
/// journalling Widgets keep changing: a Pod of the new ReplicaSet takes the lease, every
/// Widget's last change is reconciled by the new version, and the journals of all Pods, old and
/// new, show no Widget reconciled by two Pods at once.
async fn upgrade_hands_over_and_no_reconcile_is_lost_or_doubled(
    kubeconfig: &Path,
    client: &kube::Client,
    pods: &Api<Pod>,
) -> Result<()> {
    let started = Instant::now();
    run(Command::new(repo_root().join("deploy/image.sh"))
        .args(["--debug", "--import"])
        .env("IMAGE", "localhost/reconciler-host:upgrade"))?;
    println!(
        "second image built and imported in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    put_guests(
        "widget-guests-v2",
        &[("widget.wasm", &guest_component("widget-v2")?)],
    )?;
    let ns = reconciler_host_tests::test_namespace(client, "upgrade").await?;
    let widgets = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "test.reconciler.dev",
            "v1",
            "Widget",
        )),
    );
    let names: Vec<String> = (0..20).map(|i| format!("j-{i:02}")).collect();
    for name in &names {
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget", "metadata": {"name": name},
            "spec": {"message": "journal", "journal": true, "mode": "sleep", "sleepMs": 20},
        }))?;
        widgets.create(&PostParams::default(), &widget).await?;
    }
    for name in &names {
        widget_at(&widgets, name, "1", 1).await?;
    }
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), NAMESPACE);
    let transitions = |lease: k8s_openapi::api::coordination::v1::Lease| {
        lease.spec.and_then(|s| s.lease_transitions).unwrap_or(0)
    };
    let before = lease_holder(client).await?;
    let transitions_before = transitions(leases.get(RELEASE).await?);

    let logs = PodLogs::follow(pods.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (toucher, touched) =
        touch_widgets(widgets.clone(), names.clone(), Duration::from_millis(50));
    let kubeconfig_owned = kubeconfig.to_owned();
    let chart = Chart::dir().display().to_string();
    // helm blocks; the toucher and the log followers keep running meanwhile.
    let took = tokio::task::spawn_blocking(move || {
        helm_release(
            &kubeconfig_owned,
            "upgrade",
            &chart,
            &[
                "--reuse-values",
                "--set",
                "image.tag=upgrade",
                "--set",
                "guests.configMaps={widget-guests-v2}",
            ],
        )
    })
    .await??;
    println!(
        "helm upgrade: new Pods ready {:.0} s after it began",
        took.as_secs_f64()
    );
    let leader = wait_until("a Pod of the new image to lead", WAIT, || async {
        let holder = lease_holder(client).await?;
        let image = pods
            .get(&holder)
            .await?
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        ensure!(
            holder != before && image.ends_with(":upgrade"),
            "{holder} ({image}) leads"
        );
        Ok(holder)
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    toucher.abort();
    let touches = touched.load(std::sync::atomic::Ordering::Relaxed);
    // The last change of each Widget, reconciled by the new version.
    let mut last = BTreeMap::new();
    for name in &names {
        last.insert(
            name.clone(),
            bump_widget(&widgets, name, "after the upgrade").await?,
        );
    }
    for (name, generation) in &last {
        widget_at(&widgets, name, "2", *generation).await?;
    }
    ensure!(
        transitions(leases.get(RELEASE).await?) > transitions_before,
        "the lease never changed hands"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let followed = logs.stop();
    let now = SystemTime::now();
    let pod_logs: Vec<Log<'_>> = followed
        .iter()
        .map(|(pod, log)| Log {
            replica: pod.clone(),
            lines: &log.lines,
            until: log.ended.unwrap_or(now),
        })
        .collect();
    let journal: BTreeMap<String, Vec<reconciler_host_tests::journal::Interval>> =
        reconciler_host_tests::journal::journal(&pod_logs, "widget")
            .into_iter()
            .filter(|(key, _)| key.starts_with(&format!("{ns}/")))
            .collect();
    let mut per_pod: BTreeMap<&str, usize> = BTreeMap::new();
    for interval in journal.values().flatten() {
        *per_pod.entry(interval.replica.as_str()).or_default() += 1;
    }
    let unfinished: Vec<String> = journal
        .iter()
        .flat_map(|(key, i)| {
            i.iter()
                .filter(|i| i.unfinished)
                .map(move |i| format!("{key}: {}", describe(i)))
        })
        .collect();
    println!(
        "upgrade: {touches} spec changes meanwhile; lease {before} -> {leader}; journal of {} Pods: {} reconciles of {} keys ({per_pod:?}); {} begun and not finished",
        followed.len(),
        journal.values().map(Vec::len).sum::<usize>(),
        journal.len(),
        unfinished.len()
    );
    ensure!(
        names
            .iter()
            .all(|n| journal.contains_key(&format!("{ns}/{n}"))),
        "Widgets without a journal line (is the Pods' JSON log read?): {:?}",
        names
            .iter()
            .filter(|n| !journal.contains_key(&format!("{ns}/{n}")))
            .collect::<Vec<_>>()
    );
    ensure!(
        per_pod.len() >= 2,
        "the journals of one Pod only: {per_pod:?}"
    );
    let found = overlaps(&journal);
    if !found.is_empty() {
        bail!(
            "{} Widgets reconciled by two Pods at once:\n{}",
            found.len(),
            found.join("\n")
        );
    }
    Ok(())
}

/// `helm rollback` to the first revision: the Pods run the first image again, and a changed
/// Widget is reconciled by the first version of the guest.
async fn rollback_brings_back_the_image_and_the_guest(
    kubeconfig: &Path,
    pods: &Api<Pod>,
    widgets: &Api<DynamicObject>,
) -> Result<()> {
    let started = Instant::now();
    helm(
        kubeconfig,
        &[
            "rollback",
            RELEASE,
            "1",
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    )?;
    rolled_out()?;
    println!(
        "helm rollback: Pods ready in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for (pod, _) in restarts(pods).await? {
        let image = pods
            .get(&pod)
            .await?
            .spec
            .and_then(|s| s.containers.first().and_then(|c| c.image.clone()))
            .unwrap_or_default();
        ensure!(
            image == "localhost/reconciler-host:dev",
            "{pod} runs {image} after the rollback"
        );
    }
    let generation = bump_widget(widgets, "w1", "rolled back").await?;
    widget_at(widgets, "w1", "1", generation).await?;
    let history: Value = serde_json::from_str(&helm(
        kubeconfig,
        &[
            "history",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--output",
            "json",
        ],
    )?)?;
    let last = history
        .as_array()
        .and_then(|h| h.last())
        .context("helm history")?;
    ensure!(last["description"] == "Rollback to 1", "{last}");
    Ok(())
}

/// The names of the objects `kubectl get KINDS ARGS` lists.
fn listed(kinds: &str, args: &[&str]) -> Result<Vec<String>> {
    let mut all = vec!["get", kinds, "-o", "name"];
    all.extend_from_slice(args);
    Ok(kubectl(&all)?.lines().map(str::to_owned).collect())
}

/// `helm uninstall`: the drain hook unloads every guest and removes their finalizers, so no
/// Network or Widget is left carrying one, and deleting one now completes; nothing of the
/// release is left but the CRD its crds/ brought, as Helm keeps CRDs.
async fn uninstall_leaves_nothing_stuck(kubeconfig: &Path, client: &kube::Client) -> Result<()> {
    let started = Instant::now();
    helm(
        kubeconfig,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    )?;
    println!(
        "helm uninstall (the drain hook included): {:.0} s",
        started.elapsed().as_secs_f64()
    );
    for (group, kind) in [
        ("samplecrd.k8s.io", "Network"),
        ("test.reconciler.dev", "Widget"),
    ] {
        let api = Api::<DynamicObject>::all_with(
            client.clone(),
            &ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind)),
        );
        let list = api.list(&ListParams::default()).await?;
        ensure!(!list.items.is_empty(), "no {kind} to look at");
        let held: Vec<String> = list
            .items
            .iter()
            .filter(|o| {
                o.metadata
                    .finalizers
                    .as_ref()
                    .is_some_and(|f| !f.is_empty())
            })
            .map(|o| {
                format!(
                    "{}/{}: {:?}",
                    o.metadata.namespace.clone().unwrap_or_default(),
                    o.metadata.name.clone().unwrap_or_default(),
                    o.metadata.finalizers
                )
            })
            .collect();
        ensure!(
            held.is_empty(),
            "{kind}s still carrying a finalizer after the uninstall: {held:?}"
        );
    }
    let networks = network_api(client);
    networks.delete("late", &Default::default()).await?;
    wait_until(
        "Network late to be deleted",
        Duration::from_secs(30),
        || async {
            ensure!(networks.get_opt("late").await?.is_none(), "still there");
            Ok(())
        },
    )
    .await?;
    let instance = format!("app.kubernetes.io/instance={RELEASE}");
    wait_until("nothing of the release left in its namespace", WAIT, || async {
        let left = listed(
            "all,configmaps,serviceaccounts,roles,rolebindings,poddisruptionbudgets,jobs,leases",
            &["-n", NAMESPACE, "-l", &instance],
        )?;
        ensure!(left.is_empty(), "{left:?}");
        Ok(())
    })
    .await?;
    let cluster_wide = listed(
        "clusterroles,clusterrolebindings",
        &["-l", "app.kubernetes.io/part-of=reconciler-host"],
    )?;
    ensure!(
        cluster_wide.is_empty(),
        "left cluster-wide: {cluster_wide:?}"
    );
    ensure!(
        listed(
            "serviceaccounts",
            &["-n", NAMESPACE, "--field-selector", "metadata.name=network"]
        )?
        .is_empty(),
        "the network guest's ServiceAccount is left"
    );
    listed("customresourcedefinitions", &["reconcilers.reconciler.dev"])
        .context("the Reconciler CRD is gone, which Helm keeps")?;
    Ok(())
}

/// The chart as an OCI artifact: `helm package`, `helm push` to the registry on the node, and
/// `helm install oci://…` of that version; the host it runs reconciles a new Network, and
/// uninstalls clean again.
async fn the_chart_installs_from_a_registry(
    kubeconfig: &Path,
    client: &kube::Client,
    registry: &PrivateRegistry,
    networks: &Api<DynamicObject>,
) -> Result<()> {
    use base64::Engine as _;
    let dir = work_dir()?;
    let packaged = helm(
        kubeconfig,
        &[
            "package",
            &Chart::dir().display().to_string(),
            "--destination",
            &dir.display().to_string(),
        ],
    )?;
    let package = packaged
        .trim()
        .rsplit(' ')
        .next()
        .context("helm package printed no path")?
        .to_owned();
    ensure!(
        Path::new(&package).exists(),
        "helm package said: {packaged}"
    );
    let chart: Value =
        serde_yaml::from_str(&std::fs::read_to_string(Chart::dir().join("Chart.yaml"))?)?;
    let version = chart["version"]
        .as_str()
        .context("Chart.yaml version")?
        .to_owned();
    // Helm reads registry credentials from its registry config, a docker config.json.
    let auth = base64::engine::general_purpose::STANDARD.encode(format!(
        "{}:{}",
        registry.username(),
        registry.password()
    ));
    std::fs::create_dir_all(dir.join("helm"))?;
    std::fs::write(
        dir.join("helm/registry.json"),
        json!({"auths": {registry.address(): {"auth": auth}}}).to_string(),
    )?;
    let repository = format!("oci://{}/charts", registry.address());
    helm(kubeconfig, &["push", &package, &repository, "--plain-http"])?;
    let reference = format!("{repository}/reconciler-host");
    helm_release(
        kubeconfig,
        "install",
        &reference,
        &["--version", &version, "--plain-http"],
    )?;
    rolled_out()?;
    let releases: Value = serde_json::from_str(&helm(
        kubeconfig,
        &["list", "--namespace", NAMESPACE, "--output", "json"],
    )?)?;
    ensure!(
        releases[0]["chart"] == format!("reconciler-host-{version}"),
        "{releases}"
    );
    create_network(networks, "from-oci", 30).await?;
    network_ready(networks, "from-oci").await?;
    helm(
        kubeconfig,
        &[
            "uninstall",
            RELEASE,
            "--namespace",
            NAMESPACE,
            "--wait",
            "--timeout",
            "5m",
        ],
    )?;
    let held = network_api(client)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| !f.is_empty())
        })
        .count();
    ensure!(
        held == 0,
        "{held} Networks keep a finalizer after the second uninstall"
    );
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

/// The sharded mode as an operator switches to it with helm: scaled to zero first (a
/// leader-elected replica and sharded ones must not run side by side), then upgraded to
/// `mode=sharded`. Its three Pods hold disjoint shares covering every slot, filtered on the API
/// server, and hold every Network between them; Networks created now converge.
async fn sharded_replicas_split_the_networks(
    kubeconfig: &Path,
    networks: &Api<DynamicObject>,
    pods: &Api<Pod>,
) -> Result<()> {
    let chart = Chart::dir().display().to_string();
    helm_release(
        kubeconfig,
        "upgrade",
        &chart,
        &["--reuse-values", "--set", "replicas=0"],
    )?;
    wait_until("the leader-elected Pods to go", WAIT, || async {
        ensure!(restarts(pods).await?.is_empty(), "host Pods still running");
        Ok(())
    })
    .await?;
    helm_release(
        kubeconfig,
        "upgrade",
        &chart,
        &["--reuse-values", "--set", "mode=sharded,replicas=3"],
    )?;
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
            let mut all = reconciler_host::cluster::shard_ranges::SlotSet::empty();
            for (pod, active, _) in &owned {
                let set = reconciler_host::cluster::shard_ranges::SlotSet::from_text(active)
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
