//! The host against a native kube-rs controller with identical logic, on the local control
//! plane, in one run:
//!   (a) a raw loop of N status patches from one client — the physical limit;
//!   (b) `reconciler-host run` with the bench guest bringing N fresh objects to their status;
//!   (c) a native kube-rs `Controller` (same logic, `guests/testing/bench/src/logic.rs`) doing it;
//!   (d) (b) again, with the hostile test guest attacking in the same host all the while
//!       (guests/testing/hostile: deadline-long spins and WASI sleeps, event, log and write
//!       floods, refused path tricks), to show what a hostile neighbour costs a good guest;
//! and the resident memory of (b) and (c) with M objects cached.
//!
//! `cargo bench -p reconciler-host --bench controller` (or `./dev bench`). Prints figures;
//! asserts nothing. `BENCH_OBJECTS` (N, default 1000), `BENCH_RSS_OBJECTS` (M, default 10000).
//! Starts (or reuses) a control plane in target/bench-control-plane via tools/control-plane/cp.

#[path = "../../guests/testing/bench/src/logic.rs"]
mod logic;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use serde_json::json;

const CONCURRENCY: u16 = 4;

/// kube-rs wants a std error from the reconcile function.
#[derive(Debug)]
struct BenchError(String);

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for BenchError {}

fn fail(e: impl std::fmt::Display) -> BenchError {
    BenchError(e.to_string())
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "test.reconciler.dev",
        "v1",
        "Widget",
    ))
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() -> anyhow::Result<()> {
    if std::env::var("BENCH_ROLE").as_deref() == Ok("native") {
        return native_controller_process();
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(orchestrate())
}

fn sh(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output()?;
    anyhow::ensure!(out.status.success(), "{cmd:?} failed");
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Brings up (or reuses) the control plane with the Widget CRD established, and builds the
/// guests and the release host binary; returns its kubeconfig and a client of it.
async fn control_plane() -> anyhow::Result<(PathBuf, kube::Client)> {
    let cp_dir = repo().join("target/bench-control-plane");
    let cp = repo().join("tools/control-plane/cp");
    sh(Command::new(&cp)
        .arg("up")
        .arg("--dir")
        .arg(&cp_dir)
        .arg("--reuse"))?;
    // Guests and the release host binary, without the variables cargo set for this bench.
    sh(Command::new(repo().join("dev"))
        .args(["build", "--release"])
        .stdout(Stdio::null()))?;
    let kubeconfig = cp_dir.join("kubeconfig");
    sh(Command::new(&cp)
        .arg("--dir")
        .arg(&cp_dir)
        .args(["kubectl", "apply", "--server-side", "-f"])
        .arg(repo().join("guests/testing/widget/crd.yaml")))?;
    sh(Command::new(&cp).arg("--dir").arg(&cp_dir).args([
        "kubectl",
        "wait",
        "--for=condition=Established",
        "crd/widgets.test.reconciler.dev",
    ]))?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok((kubeconfig, kube::Client::try_from(config)?))
}

// Counts and KiB figures, far below 2^52, become f64 only to be printed as rates and ratios.
#[allow(clippy::cast_precision_loss)]
async fn orchestrate() -> anyhow::Result<()> {
    let n = env_usize("BENCH_OBJECTS", 1000);
    let m = env_usize("BENCH_RSS_OBJECTS", 10_000);
    let (kubeconfig, client) = control_plane().await?;
    let run_id = std::process::id();

    println!(
        "controller benchmark, N = {n} objects, on this machine (2 cores shared by apiserver, etcd and the controller)"
    );

    // (a) The physical limit: one client patching N statuses in a row.
    let ns = namespace(&client, &format!("bench-raw-{run_id}")).await?;
    create_widgets(&client, &ns, n).await?;
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource());
    let objects = api.list(&ListParams::default()).await?.items;
    let started = Instant::now();
    for object in &objects {
        let patch: serde_json::Value = serde_json::from_str(
            &logic::status_patch(&serde_json::to_string(object)?).map_err(anyhow::Error::msg)?,
        )?;
        api.patch_status(
            object.metadata.name.as_deref().unwrap(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    }
    let raw = started.elapsed();
    println!(
        "  (a) raw loop, {n} status patches from one client:      {:8.2} s  ({:7.0} patches/s)",
        raw.as_secs_f64(),
        n as f64 / raw.as_secs_f64()
    );

    // (b) The host with the Rust bench guest.
    let ns = namespace(&client, &format!("bench-host-{run_id}")).await?;
    create_widgets(&client, &ns, n).await?;
    let (host_time, _) =
        run_until_reconciled(&client, &ns, n, || spawn_host(&kubeconfig, &ns, false)).await?;
    println!(
        "  (b) reconciler-host + Rust guest, N fresh objects:     {:8.2} s  ({:.2}x the raw loop's speed)",
        host_time.as_secs_f64(),
        raw.as_secs_f64() / host_time.as_secs_f64()
    );

    // (c) The native kube-rs controller, same logic.
    let ns = namespace(&client, &format!("bench-native-{run_id}")).await?;
    create_widgets(&client, &ns, n).await?;
    let (native_time, _) =
        run_until_reconciled(&client, &ns, n, || spawn_native(&kubeconfig, &ns)).await?;
    println!(
        "  (c) native kube-rs controller, N fresh objects:        {:8.2} s  ({:.2}x the raw loop's speed)",
        native_time.as_secs_f64(),
        raw.as_secs_f64() / native_time.as_secs_f64()
    );
    println!(
        "      host vs native: {:.2}x the native time",
        host_time.as_secs_f64() / native_time.as_secs_f64()
    );

    // (d) The same host and guest next to a hostile guest.
    let ns = namespace(&client, &format!("bench-hostile-{run_id}")).await?;
    create_widgets(&client, &ns, n).await?;
    start_attacks(&client, &ns).await?;
    let (contested, _) =
        run_until_reconciled(&client, &ns, n, || spawn_host(&kubeconfig, &ns, true)).await?;
    println!(
        "  (d) as (b), a hostile guest attacking meanwhile:       {:8.2} s  ({:.0} % of (b)'s throughput)",
        contested.as_secs_f64(),
        100.0 * host_time.as_secs_f64() / contested.as_secs_f64()
    );

    // Memory with M objects cached.
    let ns = namespace(&client, &format!("bench-rss-{run_id}")).await?;
    create_widgets(&client, &ns, m).await?;
    let (_, host_rss) =
        run_until_reconciled(&client, &ns, m, || spawn_host(&kubeconfig, &ns, false)).await?;
    clear_status(&client, &ns).await?;
    let (_, native_rss) =
        run_until_reconciled(&client, &ns, m, || spawn_native(&kubeconfig, &ns)).await?;
    println!(
        "  RSS with {m} objects cached: host {:.1} MiB, native {:.1} MiB ({:.2}x)",
        host_rss as f64 / 1024.0,
        native_rss as f64 / 1024.0,
        host_rss as f64 / native_rss as f64
    );
    Ok(())
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<String> {
    let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
    api.create(&PostParams::default(), &ns).await?;
    Ok(name.to_owned())
}

async fn create_widgets(client: &kube::Client, ns: &str, n: usize) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource());
    let items: Vec<String> = (0..24).map(|i| format!("item-{i:03}-abcdef")).collect();
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                "metadata": {"name": format!("w-{i:05}")},
                "spec": {"items": items, "message": "a typical spec of a typical custom resource"},
            }))
            .unwrap();
            async move {
                api.create(&PostParams::default(), &object)
                    .await
                    .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// The hostile guest's attacks for (d), each repeated for as long as the bench runs: the
/// expensive ones (a spin or a WASI sleep up to its deadline, floods up to its rates) and cheap
/// refusals at a high rate.
async fn start_attacks(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client.clone(), ns);
    let attacks = [
        ("spin", 4, 0),
        ("sleep", 4, 0),
        ("alloc", 2, 0),
        ("event-flood", 1, 100),
        ("log-flood", 1, 100),
        ("enqueue-victim", 2, 10),
        ("ns-path-delete", 2, 10),
        ("apply-secret", 2, 10),
        ("patch-oversized", 1, 50),
    ];
    for (attack, copies, repeat_ms) in attacks {
        for i in 0..copies {
            let object = serde_json::from_value(json!({
                "metadata": {"name": format!("{attack}-{i}"), "labels": {"hostile.reconciler.dev/attack": "bench"}},
                "data": {"attack": attack, "victim": "bench-victim", "repeat-ms": repeat_ms.to_string()},
            }))?;
            api.create(&PostParams::default(), &object).await?;
        }
    }
    Ok(())
}

async fn clear_status(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource());
    let names: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    futures::stream::iter(names)
        .map(|name| {
            let api = api.clone();
            async move {
                api.patch_status(
                    &name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": null})),
                )
                .await
                .map(|_| ())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// Starts a controller process and polls until every object has its status; returns the time
/// from spawn and the process's resident memory at that moment (KiB).
async fn run_until_reconciled(
    client: &kube::Client,
    ns: &str,
    n: usize,
    spawn: impl FnOnce() -> anyhow::Result<Child>,
) -> anyhow::Result<(Duration, u64)> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &resource());
    let started = Instant::now();
    let mut child = spawn()?;
    let result = loop {
        let list = api.list(&ListParams::default()).await?;
        let done = list
            .items
            .iter()
            .filter(|o| o.data.get("status").is_some_and(|s| !s.is_null()))
            .count();
        if done >= n {
            break Ok((started.elapsed(), rss_kib(child.id())));
        }
        if started.elapsed() > Duration::from_mins(10) {
            break Err(anyhow::anyhow!(
                "only {done} of {n} reconciled after 10 minutes"
            ));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let _ = child.kill();
    let _ = child.wait();
    result
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// The host with the bench guest, and with `hostile` the hostile test guest beside it, granted
/// what an operator would give an untrusted guest: its own kind, two workers, tight limits.
fn spawn_host(kubeconfig: &Path, ns: &str, hostile: bool) -> anyhow::Result<Child> {
    let dir = repo().join("target/bench-host");
    let guests = dir.join("guests");
    let _ = std::fs::remove_dir_all(&guests);
    std::fs::create_dir_all(&guests)?;
    std::fs::copy(
        repo().join("target/guests/bench.wasm"),
        guests.join("bench.wasm"),
    )?;
    let mut grants = format!(
        "guests:\n  bench:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n    limits: {{concurrency: {CONCURRENCY}}}\n"
    );
    if hostile {
        std::fs::copy(
            repo().join("target/guests/hostile.wasm"),
            guests.join("hostile.wasm"),
        )?;
        grants.push_str("  hostile:\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap]\n    limits: {concurrency: 2, deadline: 1s, memoryMiB: 32, writesPerSecond: 20, cpuMillicores: 200}\n");
    }
    let config = dir.join("host.yaml");
    std::fs::write(&config, grants)?;
    Ok(Command::new(repo().join("target/release/reconciler-host"))
        .arg("run")
        .arg("--config")
        .arg(&config)
        .arg("--guests")
        .arg(&guests)
        .args(["--listen", "127.0.0.1:0", "--watch-namespace", ns])
        .arg("--cache-dir")
        .arg(dir.join("compiled"))
        .env("KUBECONFIG", kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()?)
}

fn spawn_native(kubeconfig: &Path, ns: &str) -> anyhow::Result<Child> {
    Ok(Command::new(std::env::current_exe()?)
        .env("BENCH_ROLE", "native")
        .env("BENCH_NAMESPACE", ns)
        .env("KUBECONFIG", kubeconfig)
        .stdout(Stdio::null())
        .spawn()?)
}

/// The baseline: a kube-rs controller over the same kind, the same logic, the same write.
fn native_controller_process() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let client = kube::Client::try_default().await?;
        let ns = std::env::var("BENCH_NAMESPACE")?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource());
        let context = Arc::new(api.clone());
        Controller::new_with(api, watcher::Config::default(), resource())
            .with_config(Config::default().concurrency(CONCURRENCY))
            .run(
                |object: Arc<DynamicObject>, api: Arc<Api<DynamicObject>>| async move {
                    let text = serde_json::to_string(&*object).map_err(fail)?;
                    let patch: serde_json::Value =
                        serde_json::from_str(&logic::status_patch(&text).map_err(fail)?)
                            .map_err(fail)?;
                    let name = object.metadata.name.clone().unwrap_or_default();
                    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(fail)?;
                    Ok::<_, BenchError>(Action::await_change())
                },
                |_, _, _| Action::requeue(Duration::from_millis(100)),
                context,
            )
            .for_each(|_| async {})
            .await;
        anyhow::Ok(())
    })
}
