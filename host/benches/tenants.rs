//! Tenants isolated in time (issue 41, item 4): how long tenant B's changes take to be
//! reconciled while tenant A's guest, on the same host, misbehaves within its grant.
//!
//! One host (`reconciler-host run`, release build) serves a `reconcilers.tenants` rule; three
//! tenant namespaces each run the widget test guest from a `Reconciler` pulled from the local
//! registry: B (the one measured, `BENCH_B_WIDGETS` Widgets, default 8), A (the host's default
//! limits: 2 workers, a 5 s deadline, one core) and A-slow (the same, with `cpuMillicores: 200` in
//! its grant). A is at its quota throughout (a second `Reconciler` there is refused,
//! `TenantQuotaExceeded`). Phases, in one run:
//!
//! - **B alone**: A idle;
//! - **A busy, healthy**: A's `BENCH_A_WIDGETS` (default 8) Widgets changed round-robin every
//!   `BENCH_A_INTERVAL_MS` (default 20), each change reconciled: the API server load of A's
//!   activity, without misbehaviour (the control for the next phases);
//! - **A traps on every change**: the same changes, each reconcile a trap (`mode: trap`);
//! - **A loops to its deadline**: the same, each reconcile a busy loop until the 5 s deadline,
//!   at the default CPU share (one core) and, in A-slow, at 0.2 core.
//!
//! Per phase, `BENCH_SAMPLES` (default 200) changes to B's Widgets one after another, each timed
//! from just before its patch is sent to the moment a watch shows B's status at that generation:
//! p50, p99 and max, and their ratios to "B alone" in the same run; the host's CPU over the phase
//! (utime + stime, in cores); A's reconciles by result (from `/metrics`); the load average.
//!
//! `cargo bench -p reconciler-host --bench tenants` (`./dev bench tenants`). Prints figures;
//! asserts nothing. `BENCH_HOST=debug` runs the debug host instead of the release one (with
//! `BENCH_NO_BUILD=1` and `cargo bench --profile dev`: a quick run while a release build is out
//! of reach; its figures are slower than users get, but the ratios compare within the run). Starts (or reuses) the control plane in target/bench-control-plane and the
//! tests' local registry, and builds the guests and the release host as `controller.rs` does.

#[allow(dead_code)] // each live bench uses part of it
mod live;

use std::collections::BTreeMap;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::watcher;
use live::{cpu_seconds, env_usize, host_profile};
use parking_lot::Mutex;
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::{
    Registry, apply_crd_file, guest_component, host::run_command, test_namespace, wait_until,
    widgets, with_password,
};
use serde_json::{Value, json};

/// A change of B's not seen reconciled within this long counts as this long.
const SAMPLE_LIMIT: Duration = Duration::from_secs(30);

struct Phase {
    name: &'static str,
    /// Which of A's namespaces misbehaves, and its Widgets' spec; none: A idle.
    a: Option<(Tenant, Value)>,
}

#[derive(Clone, Copy)]
enum Tenant {
    A,
    ASlow,
}

fn phases() -> Vec<Phase> {
    vec![
        Phase {
            name: "B alone",
            a: None,
        },
        Phase {
            name: "A busy, healthy",
            a: Some((Tenant::A, json!({}))),
        },
        Phase {
            name: "A traps on every change",
            a: Some((Tenant::A, json!({"mode": "trap"}))),
        },
        Phase {
            name: "A loops to its deadline, 1 core share",
            a: Some((Tenant::A, json!({"mode": "loop"}))),
        },
        Phase {
            name: "A loops to its deadline, 0.2 core share",
            a: Some((Tenant::ASlow, json!({"mode": "loop"}))),
        },
    ]
}

struct Figures {
    /// B's latencies, sorted.
    samples: Vec<Duration>,
    timeouts: usize,
    cores: f64,
    /// A's reconciles over the phase, by result.
    a_results: BTreeMap<String, f64>,
    load: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    let plane = live::plane().await?;
    let client = plane.client.clone();
    let registry = Registry::shared().await?;
    apply_crd_file(&client, "deploy/crds/reconcilers.yaml").await?;
    let samples = env_usize("BENCH_SAMPLES", 200);
    let b_widgets = env_usize("BENCH_B_WIDGETS", 8);
    let a_widgets = env_usize("BENCH_A_WIDGETS", 8);
    let interval = Duration::from_millis(env_usize("BENCH_A_INTERVAL_MS", 20) as u64);

    let host_ns = test_namespace(&client, "bench-tenants-host").await?;
    pull_secret(&client, &host_ns, registry).await?;
    let module = push(registry, &format!("teams/{}:v1", unique_name("widget")))?;
    let label = unique_name("tenant");
    let ns_a = tenant_namespace(&client, "bench-a", &label).await?;
    let ns_slow = tenant_namespace(&client, "bench-a-slow", &label).await?;
    let ns_b = tenant_namespace(&client, "bench-b", &label).await?;

    let dir = tempfile::tempdir()?;
    let port = free_port()?;
    let mut host = spawn_host(
        &plane.kubeconfig,
        dir.path(),
        registry,
        &label,
        &host_ns,
        port,
    )?;
    let grant = json!({
        "read": ["test.reconciler.dev/v1/Widget", "v1/ConfigMap"],
        "write": ["test.reconciler.dev/v1/Widget", "test.reconciler.dev/v1/Widget/status", "v1/ConfigMap"],
    });
    let mut slow_grant = grant.clone();
    slow_grant["limits"] = json!({"cpuMillicores": 200});
    for (ns, name, grant, reason) in [
        (&ns_b, "widget", &grant, "Ready"),
        (&ns_a, "widget", &grant, "Ready"),
        (&ns_a, "second", &grant, "TenantQuotaExceeded"),
        (&ns_slow, "widget", &slow_grant, "Ready"),
    ] {
        // The quota serves the oldest first, by creation time in whole seconds (then by name):
        // A's second must be younger than its first.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        reconciler(&client, ns, name, &module, grant).await?;
        ready(&client, ns, name, reason).await?;
    }

    // B's Widgets, watched: the latest generation each has been reconciled at.
    let b_api = widgets(&client, &ns_b);
    let b_names: Vec<String> = (0..b_widgets).map(|i| format!("b-{i}")).collect();
    for name in &b_names {
        b_api
            .create(
                &PostParams::default(),
                &widget(name, &json!({"message": "0"}))?,
            )
            .await?;
    }
    let observed: Arc<Mutex<BTreeMap<String, i64>>> = Arc::default();
    let notify = Arc::new(tokio::sync::Notify::new());
    tokio::spawn(watch_observed(
        b_api.clone(),
        observed.clone(),
        notify.clone(),
    ));
    for name in &b_names {
        wait_observed(&observed, &notify, name, 1).await?;
    }

    let pid = host.id();
    let mut rows: Vec<(&str, Figures)> = Vec::new();
    for phase in phases() {
        eprintln!("phase: {}", phase.name);
        let (ns, guest) = match phase.a.as_ref().map(|(tenant, _)| tenant) {
            Some(Tenant::A) => (Some(&ns_a), Some(format!("widget@{ns_a}.widget"))),
            Some(Tenant::ASlow) => (Some(&ns_slow), Some(format!("widget@{ns_slow}.widget"))),
            None => (None, None),
        };
        let a = match (ns, &phase.a) {
            (Some(ns), Some((_, spec))) => {
                Some(start_a(&client, ns, a_widgets, spec.clone(), interval).await?)
            }
            _ => None,
        };
        // Let A's misbehaviour reach its steady state (the loops need a deadline to fill).
        if a.is_some() {
            tokio::time::sleep(Duration::from_secs(6)).await;
        }
        let probe = Probe {
            api: &b_api,
            names: &b_names,
            observed: &observed,
            notify: &notify,
            samples,
        };
        let figures = run_phase(&probe, pid, port, guest.as_deref()).await?;
        if let Some(a) = a {
            a.stop().await?;
        }
        rows.push((phase.name, figures));
    }
    let _ = host.kill();
    let _ = host.wait();
    print_table(&rows, samples, b_widgets, a_widgets, interval);
    Ok(())
}

fn print_table(
    rows: &[(&str, Figures)],
    samples: usize,
    b_widgets: usize,
    a_widgets: usize,
    interval: Duration,
) {
    // The sample at `per_mille` of the sorted latencies (nearest rank).
    let at = |f: &Figures, per_mille: usize| {
        let i = (f.samples.len() * per_mille)
            .div_ceil(1000)
            .saturating_sub(1);
        f.samples.get(i).copied().unwrap_or_default()
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let alone = &rows[0].1;
    println!();
    println!(
        "tenant B's change-to-reconciled latency: {samples} changes per phase over {b_widgets} Widgets; \
         A's {a_widgets} Widgets changed every {} ms in the phases where A acts",
        interval.as_millis()
    );
    println!(
        "| phase | B p50 | B p99 | B max | p50 / alone | p99 / alone | timeouts | host CPU | A's reconciles | load average |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for (name, f) in rows {
        let results = f
            .a_results
            .iter()
            .map(|(r, n)| format!("{r} {n:.0}"))
            .collect::<Vec<_>>()
            .join(", ");
        println!(
            "| {name} | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x | {:.2}x | {} | {:.2} cores | {} | {} |",
            ms(at(f, 500)),
            ms(at(f, 990)),
            ms(f.samples.last().copied().unwrap_or_default()),
            ms(at(f, 500)) / ms(at(alone, 500)),
            ms(at(f, 990)) / ms(at(alone, 990)),
            f.timeouts,
            f.cores,
            if results.is_empty() {
                "-".into()
            } else {
                results
            },
            f.load,
        );
    }
}

/// What B's latency is measured with.
struct Probe<'a> {
    api: &'a Api<DynamicObject>,
    names: &'a [String],
    observed: &'a Mutex<BTreeMap<String, i64>>,
    notify: &'a tokio::sync::Notify,
    samples: usize,
}

/// One phase's figures: B's latencies, the host's CPU, A's (`guest`'s) reconciles by result.
async fn run_phase(probe: &Probe<'_>, pid: u32, port: u16, guest: Option<&str>) -> Result<Figures> {
    let before = a_results(port, guest);
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpu = cpu_seconds(pid);
    let started = Instant::now();
    let (samples, timeouts) = measure(
        probe.api,
        probe.names,
        probe.observed,
        probe.notify,
        probe.samples,
    )
    .await?;
    let cores = (cpu_seconds(pid) - cpu) / started.elapsed().as_secs_f64();
    let a_results = a_results(port, guest)
        .into_iter()
        .map(|(result, n)| {
            let delta = n - before.get(&result).copied().unwrap_or(0.0);
            (result, delta)
        })
        .filter(|(_, n)| *n > 0.0)
        .collect();
    Ok(Figures {
        samples,
        timeouts,
        cores,
        a_results,
        load: load
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" "),
    })
}

/// `samples` changes to B's Widgets, one at a time: each timed until the watch shows it
/// reconciled. Sorted latencies, and how many hit [`SAMPLE_LIMIT`].
async fn measure(
    api: &Api<DynamicObject>,
    names: &[String],
    observed: &Mutex<BTreeMap<String, i64>>,
    notify: &tokio::sync::Notify,
    samples: usize,
) -> Result<(Vec<Duration>, usize)> {
    let mut latencies = Vec::with_capacity(samples);
    let mut timeouts = 0;
    for i in 0..samples {
        let name = &names[i % names.len()];
        let started = Instant::now();
        let patched = api
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"message": format!("{i}")}})),
            )
            .await?;
        let generation = patched.metadata.generation.context("no generation")?;
        if wait_observed(observed, notify, name, generation)
            .await
            .is_err()
        {
            timeouts += 1;
            latencies.push(SAMPLE_LIMIT);
            continue;
        }
        latencies.push(started.elapsed());
    }
    latencies.sort();
    Ok((latencies, timeouts))
}

/// Waits (up to [`SAMPLE_LIMIT`]) until `name` is seen reconciled at `generation` or later.
async fn wait_observed(
    observed: &Mutex<BTreeMap<String, i64>>,
    notify: &tokio::sync::Notify,
    name: &str,
    generation: i64,
) -> Result<()> {
    tokio::time::timeout(SAMPLE_LIMIT, async {
        loop {
            let notified = notify.notified();
            if observed.lock().get(name).is_some_and(|g| *g >= generation) {
                return;
            }
            notified.await;
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("{name} not reconciled at generation {generation}"))
}

async fn watch_observed(
    api: Api<DynamicObject>,
    observed: Arc<Mutex<BTreeMap<String, i64>>>,
    notify: Arc<tokio::sync::Notify>,
) {
    let mut events = watcher(api, watcher::Config::default()).boxed();
    while let Some(event) = events.next().await {
        let objects = match event {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => vec![o],
            _ => continue,
        };
        for object in objects {
            let generation = object.data["status"]["observedGeneration"].as_i64();
            if let (Some(name), Some(generation)) = (object.metadata.name, generation) {
                observed.lock().insert(name, generation);
            }
        }
        notify.notify_waiters();
    }
}

/// A's misbehaviour: its Widgets with `spec`, changed round-robin every `interval` until
/// stopped.
struct Acting {
    stop: Arc<AtomicBool>,
    driver: tokio::task::JoinHandle<()>,
    api: Api<DynamicObject>,
}

async fn start_a(
    client: &kube::Client,
    ns: &str,
    n: usize,
    spec: Value,
    interval: Duration,
) -> Result<Acting> {
    let api = widgets(client, ns);
    let names: Vec<String> = (0..n).map(|i| format!("a-{i}")).collect();
    for name in &names {
        api.create(&PostParams::default(), &widget(name, &spec)?)
            .await?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (api, stop) = (api.clone(), stop.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(interval);
            for i in 0.. {
                tick.tick().await;
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let name = &names[i % names.len()];
                let change = json!({"spec": {"message": format!("{i}")}});
                let _ = api
                    .patch(name, &PatchParams::default(), &Patch::Merge(change))
                    .await;
            }
        })
    };
    Ok(Acting { stop, driver, api })
}

impl Acting {
    /// Stops the changes and deletes A's Widgets (the guest lets go of their finalizer).
    async fn stop(self) -> Result<()> {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.driver.await;
        self.api
            .delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        let api = self.api.clone();
        wait_until("A's Widgets gone", Duration::from_mins(2), || async {
            let left = api.list(&ListParams::default()).await?.items.len();
            ensure!(left == 0, "{left} left");
            Ok(())
        })
        .await
    }
}

/// A's reconciles so far, by result, from `/metrics`.
fn a_results(port: u16, guest: Option<&str>) -> BTreeMap<String, f64> {
    let Some(guest) = guest else {
        return BTreeMap::new();
    };
    let prefix = format!("reconciler_reconcile_total{{guest=\"{guest}\",result=\"");
    let text = live::http_get(port, "/metrics").unwrap_or_default();
    text.lines()
        .filter_map(|line| {
            let rest = line.strip_prefix(&prefix)?;
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

fn widget(name: &str, spec: &Value) -> Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": spec,
    }))?)
}

fn reconciler_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        ns,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "Reconciler"),
            "reconcilers",
        ),
    )
}

async fn reconciler(
    client: &kube::Client,
    ns: &str,
    name: &str,
    module: &str,
    grant: &Value,
) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "reconciler.dev/v1alpha1", "kind": "Reconciler",
        "metadata": {"name": name},
        "spec": {"module": module, "pullSecretRef": {"name": "registry"}, "grant": grant},
    }))?;
    reconciler_api(client, ns)
        .create(&PostParams::default(), &object)
        .await?;
    Ok(())
}

async fn ready(client: &kube::Client, ns: &str, name: &str, reason: &str) -> Result<()> {
    let api = reconciler_api(client, ns);
    wait_until(
        &format!("Reconciler {ns}/{name} {reason}"),
        Duration::from_mins(3),
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
            if ready["reason"] == reason {
                return Ok(());
            }
            bail!("Ready is {ready}")
        },
    )
    .await
}

/// The registry's credentials in the host's namespace: the pull Secret the rule names.
async fn pull_secret(client: &kube::Client, ns: &str, registry: &Registry) -> Result<()> {
    let auth = json!({"auths": {registry.address(): {
        "username": registry.username(), "password": registry.password()}}});
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "registry"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": auth.to_string()},
    }))?;
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &secret)
        .await?;
    Ok(())
}

/// A tenant namespace (labelled for the rule) whose account `reconciler` may do what the
/// widget guest does there.
async fn tenant_namespace(client: &kube::Client, prefix: &str, label: &str) -> Result<String> {
    let ns = test_namespace(client, prefix).await?;
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {label: "true"}}})),
        )
        .await?;
    let account: ServiceAccount =
        serde_json::from_value(json!({"metadata": {"name": "reconciler"}}))?;
    Api::<ServiceAccount>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &account)
        .await?;
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
    Api::<Role>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &role)
        .await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "reconciler"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reconciler"},
        "subjects": [{"kind": "ServiceAccount", "name": "reconciler", "namespace": ns}],
    }))?;
    Api::<RoleBinding>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await?;
    Ok(ns)
}

/// `reconciler-host push` of the built widget guest to `repo`; the module pinned by digest.
fn push(registry: &Registry, repo: &str) -> Result<String> {
    let file = guest_component("widget")?;
    let module = format!("oci://{}/{repo}", registry.address());
    let mut command = std::process::Command::new(host_profile().host_binary());
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

/// The release host with one tenant rule (namespaces labelled `label`, one Reconciler each).
fn spawn_host(
    kubeconfig: &std::path::Path,
    dir: &std::path::Path,
    registry: &Registry,
    label: &str,
    host_ns: &str,
    port: u16,
) -> Result<Child> {
    let config = dir.join("host.yaml");
    std::fs::write(
        &config,
        format!(
            r#"
registries:
  insecure: ["{registry}"]
reconcilers:
  pullSecrets: [registry]
  allow:
    registries: ["{registry}"]
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
        ),
    )?;
    let guests = dir.join("guests");
    std::fs::create_dir_all(&guests)?;
    let log = std::fs::File::create(dir.join("host.log"))?;
    let child = run_command(host_profile(), &config, &guests, port, kubeconfig)
        .args(["--namespace", host_ns])
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting the host")?;
    Ok(child)
}
