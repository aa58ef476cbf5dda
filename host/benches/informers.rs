//! What an informer costs in memory, the host against the controllers a Kubernetes user would
//! run instead, on the local control plane, in one run:
//!
//! - **startup** (`BENCH_STARTUP_OBJECTS`, default 100,000): N status-less Widgets exist and a
//!   controller starts. (Their statuses are written first, as the bench guest writes them, so
//!   every controller meets the same objects.) A thread reads its `VmRSS` every 100 ms (`BENCH_SAMPLE_MS`) from its
//!   start until `BENCH_STEADY_SECS` (default 20) after its cache synced. The peak during the
//!   initial sync is the largest sample up to the sync (and `VmHWM`, the kernel's own peak, at
//!   the sync); the steady state is the median of the samples in the window's second half. The
//!   workers reconcile the backlog meanwhile, as in production. Compared: the host (streaming
//!   list), the host in pages (`RECONCILER_INITIAL_LIST=paged`, its fallback), client-go v0.37
//!   (its reflector streams too: `WatchListClient` is on by default since v0.35), a kube-rs
//!   reflector with kube-rs' default list (one list at `resourceVersion=0`, answered in one
//!   response whatever the page size: what the host did before) and controller-runtime v0.23
//!   and v0.25 with their defaults and v0.25 with its read-your-writes mode
//!   (`live/baselines.rs`). With `BENCH_HOST_BEFORE=path`
//!   that binary runs as one more row (e.g. a build of the commit before streaming lists).
//! - **secondaries** (`BENCH_SECONDARY_OBJECTS`, default 50,000, of `BENCH_SECONDARY_KIB`
//!   KiB each, default 2): one Widget owns N `ConfigMap`s. The host runs the widget guest, which
//!   watches `ConfigMap`s by owner reference and reads one only when a Widget's spec asks, so the
//!   host holds them as metadata. `VmRSS` `BENCH_SETTLE_SECS` (default 5) after the sync, for:
//!   the host; the host with `RECONCILER_METADATA_SECONDARIES=0` (whole `ConfigMap`s); client-go
//!   with a typed `ConfigMap` informer (whole objects, as a controller owning `ConfigMap`s has);
//!   the three controller-runtime builds owning `ConfigMap`s with `builder.OnlyMetadata`. Then the host's
//!   guest is made to read a `ConfigMap`: the time until the read is answered (the upgrade to
//!   whole objects) and the host's `VmRSS` after it.
//!
//! `BENCH_SECTIONS` (default `startup,secondaries`) picks the sections run.
//!
//! `cargo bench -p reconciler-host --bench informers` (or `./dev bench informers`). Prints
//! figures; asserts nothing. Starts (or reuses) the control plane in target/bench-control-plane,
//! builds the guests, the release host and the client-go and controller-runtime baselines. Each
//! section's objects are deleted after it.

#[allow(dead_code)] // each live bench uses part of it
mod live;
#[path = "../../guests/testing/bench/src/logic.rs"]
mod logic;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{reflector, watcher};
use live::baselines::{Baselines, CLIENT_GO, ControllerRuntime};
use live::{create_widgets, env_usize, http_get, proc_status_kib, retrying};
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{repo_root, widget_resource};
use serde_json::json;

const WAIT_LIMIT: Duration = Duration::from_mins(20);

fn main() -> anyhow::Result<()> {
    if std::env::var("BENCH_ROLE").as_deref() == Ok("kube-rs") {
        return kube_rs_reflector();
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(orchestrate())
}

/// What the runs share: the control plane, the binaries, a client.
struct Bench {
    kubeconfig: PathBuf,
    client: kube::Client,
    baselines: Baselines,
    host_before: Option<PathBuf>,
    run_id: u32,
}

async fn setup() -> anyhow::Result<Bench> {
    let live::Plane { kubeconfig, client } = live::plane().await?;
    Ok(Bench {
        kubeconfig,
        client,
        baselines: Baselines::build()?,
        host_before: std::env::var_os("BENCH_HOST_BEFORE").map(PathBuf::from),
        run_id: std::process::id(),
    })
}

/// The controllers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    /// The host with the bench guest (startup) or the widget guest (secondaries).
    Host,
    /// The host listing in pages (`RECONCILER_INITIAL_LIST=paged`).
    HostPaged,
    /// The host with whole secondaries (`RECONCILER_METADATA_SECONDARIES=0`).
    HostWhole,
    /// `BENCH_HOST_BEFORE`: another build of the host.
    HostBefore,
    ClientGo,
    /// A kube-rs reflector with kube-rs' default list.
    KubeRs,
    ControllerRuntime(ControllerRuntime),
}

impl Who {
    fn label(self) -> &'static str {
        match self {
            Who::Host => "reconciler-host",
            Who::HostPaged => "reconciler-host, paged list",
            Who::HostWhole => "reconciler-host, whole secondaries",
            Who::HostBefore => "reconciler-host, BENCH_HOST_BEFORE",
            Who::ClientGo => CLIENT_GO,
            Who::KubeRs => "kube-rs reflector, list at resourceVersion=0",
            Who::ControllerRuntime(which) => which.label(),
        }
    }
}

/// Which guest a host runs.
#[derive(Clone, Copy)]
enum Guest {
    /// The bench guest on Widgets (4 workers).
    Bench,
    /// The widget guest: Widgets, and the `ConfigMap`s they own.
    Widget,
}

/// One controller process and how to tell it has synced.
struct Running {
    child: Child,
    port: Option<u16>,
    synced: Arc<AtomicBool>,
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The cache holds `objects` of `kind` (the host: its object gauge, with `/readyz` green).
    fn is_synced(&self, kind: &str, objects: usize) -> bool {
        match self.port {
            None => self.synced.load(Ordering::SeqCst),
            Some(port) => host_cached(port, kind).is_some_and(|n| n >= objects),
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bench {
    fn spawn(&self, who: Who, guest: Guest, ns: &str) -> anyhow::Result<Running> {
        let synced = Arc::new(AtomicBool::new(false));
        let (mut child, port) = match who {
            Who::Host | Who::HostPaged | Who::HostWhole | Who::HostBefore => {
                let port = free_port()?;
                (self.spawn_host(who, guest, ns, port)?, Some(port))
            }
            Who::ClientGo => {
                let mut command = Command::new(&self.baselines.client_go);
                command.args(["-namespace", ns, "-workers", "4"]);
                if matches!(guest, Guest::Widget) {
                    command.arg("-configmaps");
                }
                (self.piped(&mut command)?, None)
            }
            Who::ControllerRuntime(which) => {
                let mut command = self.baselines.controller_runtime(which);
                command.args(["-namespace", ns, "-workers", "4"]);
                if matches!(guest, Guest::Widget) {
                    command.arg("-configmaps-metadata");
                }
                (self.piped(&mut command)?, None)
            }
            Who::KubeRs => {
                let mut command = Command::new(std::env::current_exe()?);
                command
                    .env("BENCH_ROLE", "kube-rs")
                    .env("BENCH_NAMESPACE", ns);
                (self.piped(&mut command)?, None)
            }
        };
        if let Some(stdout) = child.stdout.take() {
            let flag = synced.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    if line.is_ok_and(|l| l.trim() == "synced") {
                        flag.store(true, Ordering::SeqCst);
                    }
                }
            });
        }
        Ok(Running {
            child,
            port,
            synced,
        })
    }

    fn piped(&self, command: &mut Command) -> anyhow::Result<Child> {
        Ok(command
            .env("KUBECONFIG", &self.kubeconfig)
            .stdout(Stdio::piped())
            .spawn()?)
    }

    fn spawn_host(&self, who: Who, guest: Guest, ns: &str, port: u16) -> anyhow::Result<Child> {
        let dir = repo_root().join("target/bench-informers");
        let guests = dir.join("guests");
        let _ = std::fs::remove_dir_all(&guests);
        std::fs::create_dir_all(&guests)?;
        let built = |name: &str| repo_root().join("target/guests").join(name);
        let grants = match guest {
            Guest::Bench => {
                std::fs::copy(built("bench.wasm"), guests.join("bench.wasm"))?;
                "guests:\n  bench:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n    limits: {concurrency: 4}\n"
            }
            Guest::Widget => {
                std::fs::copy(built("widget.wasm"), guests.join("widget.wasm"))?;
                "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n    limits: {deadline: 60s}\n"
            }
        };
        let config = dir.join("host.yaml");
        std::fs::write(&config, grants)?;
        let mut command = live::host_run(
            &config,
            &guests,
            port,
            ns,
            &dir.join("compiled"),
            &self.kubeconfig,
        );
        match who {
            Who::HostPaged => {
                command.env(
                    reconciler_host::cluster::informers::INITIAL_LIST_ENV,
                    "paged",
                );
            }
            Who::HostWhole => {
                command.env(
                    reconciler_host::cluster::informers::METADATA_SECONDARIES_ENV,
                    "0",
                );
            }
            Who::HostBefore => {
                let before = self.host_before.as_ref().expect("BENCH_HOST_BEFORE");
                let mut old = Command::new(before);
                old.args(command.get_args()).env("RUST_LOG", "warn");
                command = old;
            }
            _ => {}
        }
        Ok(command.stdout(Stdio::null()).spawn()?)
    }

    async fn namespace(&self, what: &str) -> anyhow::Result<String> {
        let name = format!("bench-{what}-{}", self.run_id);
        let api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(self.client.clone());
        let ns = serde_json::from_value(json!({"metadata": {"name": name}}))?;
        let params = PostParams::default();
        retrying("namespace create", || api.create(&params, &ns)).await?;
        Ok(name)
    }

    fn widgets(&self, ns: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.client.clone(), ns, &widget_resource())
    }

    fn config_maps(&self, ns: &str) -> Api<k8s_openapi::api::core::v1::ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Deletes the namespace's Widgets and `ConfigMap`s (no controller-manager here collects a
    /// namespace), finalizers first.
    async fn clean(&self, ns: &str) -> anyhow::Result<()> {
        let widgets = self.widgets(ns);
        let (params, all) = (DeleteParams::default(), ListParams::default());
        let listed = retrying("list", || widgets.list(&all)).await?;
        for w in listed
            .items
            .iter()
            .filter(|w| w.metadata.finalizers.is_some())
        {
            let name = w.metadata.name.clone().unwrap_or_default();
            let patch = Patch::Merge(json!({"metadata": {"finalizers": null}}));
            let patch_params = PatchParams::default();
            retrying("finalizer", || widgets.patch(&name, &patch_params, &patch)).await?;
        }
        retrying("delete widgets", || {
            widgets.delete_collection(&params, &all)
        })
        .await?;
        let config_maps = self.config_maps(ns);
        retrying("delete configmaps", || {
            config_maps.delete_collection(&params, &all)
        })
        .await?;
        Ok(())
    }
}

/// `VmRSS` samples of one process, every `every`, from a thread of their own (so that no
/// request the bench makes delays one): `(since start, KiB)`.
struct Sampler {
    samples: Arc<parking_lot::Mutex<Vec<(Duration, u64)>>>,
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Sampler {
    fn start(pid: u32, every: Duration) -> Self {
        let samples: Arc<parking_lot::Mutex<Vec<(Duration, u64)>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (into, stopped) = (samples.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut next = started;
            while !stopped.load(Ordering::SeqCst) {
                let rss = proc_status_kib(pid, "VmRSS:");
                if rss > 0 {
                    into.lock().push((started.elapsed(), rss));
                }
                next += every;
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
            }
        });
        Self {
            samples,
            stop,
            thread,
        }
    }

    fn finish(self) -> Vec<(Duration, u64)> {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
        std::mem::take(&mut *self.samples.lock())
    }
}

/// Runs the host once with `guest` on the (still empty) namespace, so that no measured host
/// pays for compiling it: Cranelift's memory would stay in the first one's figures.
async fn warm_compile_cache(bench: &Bench, guest: Guest, ns: &str) -> anyhow::Result<()> {
    let running = bench.spawn(Who::Host, guest, ns)?;
    let port = running.port.unwrap_or_default();
    let started = Instant::now();
    while http_get(port, "/readyz").is_none() {
        if started.elapsed() > Duration::from_mins(2) {
            running.stop();
            anyhow::bail!("the host never became ready with its guest");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.stop();
    Ok(())
}

/// One controller's memory around its initial sync.
struct Startup {
    who: Who,
    synced_after: Duration,
    /// The largest sample up to the sync.
    peak_kib: u64,
    /// `VmHWM` when the sync was seen.
    hwm_kib: u64,
    /// The median sample of the window's second half.
    steady_kib: u64,
    samples: usize,
}

/// Starts `who` on `ns` (`n` Widgets) and samples its memory through the sync and `steady`
/// after it.
async fn startup(
    bench: &Bench,
    who: Who,
    ns: &str,
    n: usize,
    every: Duration,
    steady: Duration,
) -> anyhow::Result<Startup> {
    let started = Instant::now();
    let running = bench.spawn(who, Guest::Bench, ns)?;
    let sampler = Sampler::start(running.pid(), every);
    let synced_after = loop {
        if running.is_synced("Widget", n) {
            break started.elapsed();
        }
        if started.elapsed() > WAIT_LIMIT {
            running.stop();
            anyhow::bail!("{}: not synced after {WAIT_LIMIT:?}", who.label());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let hwm_kib = proc_status_kib(running.pid(), "VmHWM:");
    tokio::time::sleep(steady).await;
    let trace = sampler.finish();
    running.stop();
    let peak_kib = trace
        .iter()
        .filter(|(at, _)| *at <= synced_after)
        .map(|(_, kib)| *kib)
        .max()
        .unwrap_or(0);
    let from = synced_after + steady / 2;
    let mut tail: Vec<u64> = trace
        .iter()
        .filter(|(at, _)| *at >= from)
        .map(|(_, kib)| *kib)
        .collect();
    tail.sort_unstable();
    Ok(Startup {
        who,
        synced_after,
        peak_kib,
        hwm_kib,
        steady_kib: tail.get(tail.len() / 2).copied().unwrap_or(0),
        samples: trace.len(),
    })
}

/// One Widget `w-00000` and `n` `ConfigMap`s of `kib` KiB it owns, 16 creations in flight.
async fn create_owned_config_maps(
    bench: &Bench,
    ns: &str,
    n: usize,
    kib: usize,
) -> anyhow::Result<()> {
    create_widgets(&bench.widgets(ns), 1).await?;
    let owner = bench.widgets(ns).get("w-00000").await?;
    let uid = owner.metadata.uid.unwrap_or_default();
    let api = bench.config_maps(ns);
    // Printable and incompressible enough: etcd and the API server see 2 KiB of data.
    let payload: String = (0..kib * 1024)
        .map(|i| char::from(b'a' + u8::try_from((i * 7 + i / 13) % 26).unwrap_or(0)))
        .collect();
    futures::stream::iter(0..n)
        .map(|i| {
            let (api, payload, uid) = (api.clone(), payload.clone(), uid.clone());
            async move {
                let object = serde_json::from_value(json!({
                    "metadata": {
                        "name": format!("cm-{i:05}"),
                        "labels": {"app.kubernetes.io/managed-by": "widget"},
                        "ownerReferences": [{
                            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                            "name": "w-00000", "uid": uid, "controller": true,
                        }],
                    },
                    "data": {"payload": payload},
                }))?;
                let params = PostParams::default();
                let mut retried = false;
                retrying("create configmap", || {
                    let retry = std::mem::replace(&mut retried, true);
                    let (api, params, object) = (&api, &params, &object);
                    async move {
                        match api.create(params, object).await {
                            Err(kube::Error::Api(e)) if e.code == 409 && retry => Ok(()),
                            other => other.map(drop),
                        }
                    }
                })
                .await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// A process's resident memory, and how much of it is file-backed (its code, mostly).
#[derive(Clone, Copy, Default)]
struct Resident {
    rss_kib: u64,
    file_kib: u64,
}

impl Resident {
    fn of(pid: u32) -> Self {
        Self {
            rss_kib: proc_status_kib(pid, "VmRSS:"),
            file_kib: proc_status_kib(pid, "RssFile:"),
        }
    }
}

/// `who`'s memory `settle` after its caches hold the namespace's `n` `ConfigMap`s; for the
/// host with a read to come, also after that read.
async fn secondaries(
    bench: &Bench,
    who: Who,
    ns: &str,
    n: usize,
    settle: Duration,
) -> anyhow::Result<(Resident, Option<Upgrade>)> {
    let started = Instant::now();
    let running = bench.spawn(who, Guest::Widget, ns)?;
    while !running.is_synced("ConfigMap", n) {
        if started.elapsed() > WAIT_LIMIT {
            running.stop();
            anyhow::bail!("{}: not synced after {WAIT_LIMIT:?}", who.label());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(settle).await;
    let rss = Resident::of(running.pid());
    let upgrade = match (who, running.port) {
        (Who::Host, Some(port)) if n > 0 => {
            Some(upgrade(bench, ns, port, running.pid(), settle).await?)
        }
        _ => None,
    };
    running.stop();
    Ok((rss, upgrade))
}

/// The host after its guest first read a `ConfigMap`.
struct Upgrade {
    /// From the spec change to the status that reports the read.
    read_after: Duration,
    resident: Resident,
    metadata_only_after: f64,
}

/// Makes the widget guest read a `ConfigMap` (`spec.get`) and times it until the status says
/// `found`; then the host's memory, `settle` later.
async fn upgrade(
    bench: &Bench,
    ns: &str,
    port: u16,
    pid: u32,
    settle: Duration,
) -> anyhow::Result<Upgrade> {
    let widgets = bench.widgets(ns);
    let get = json!({"spec": {"get": {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": ns, "name": "cm-00000"}}});
    let started = Instant::now();
    widgets
        .patch("w-00000", &PatchParams::default(), &Patch::Merge(&get))
        .await?;
    loop {
        let w = widgets.get("w-00000").await?;
        if w.data.pointer("/status/get").and_then(|v| v.as_str()) == Some("found") {
            break;
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_mins(5),
            "the widget guest never read its ConfigMap"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read_after = started.elapsed();
    tokio::time::sleep(settle).await;
    let metrics = http_get(port, "/metrics").unwrap_or_default();
    let gauge = r#"reconciler_informer_metadata_only{group="",version="v1",kind="ConfigMap"}"#;
    Ok(Upgrade {
        read_after,
        resident: Resident::of(pid),
        metadata_only_after: metrics
            .lines()
            .find_map(|l| l.strip_prefix(gauge)?.trim().parse().ok())
            .unwrap_or(0.0),
    })
}

// KiB and seconds, far below 2^52, become f64 only to be printed.
#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
async fn orchestrate() -> anyhow::Result<()> {
    let sections = std::env::var("BENCH_SECTIONS").unwrap_or_else(|_| "startup,secondaries".into());
    let section = |name: &str| sections.split(',').any(|s| s.trim() == name);
    let n = env_usize("BENCH_STARTUP_OBJECTS", 100_000);
    let every = Duration::from_millis(env_usize("BENCH_SAMPLE_MS", 100) as u64);
    let steady = Duration::from_secs(env_usize("BENCH_STEADY_SECS", 20) as u64);
    let m = env_usize("BENCH_SECONDARY_OBJECTS", 50_000);
    let kib = env_usize("BENCH_SECONDARY_KIB", 2);
    let settle = Duration::from_secs(env_usize("BENCH_SETTLE_SECS", 5) as u64);
    let bench = setup().await?;
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "informer benchmark on this machine ({cpus} cores, shared by etcd, kube-apiserver, the controller and the bench)"
    );
    let mib = |kib: u64| kib as f64 / 1024.0;

    let mut startups = Vec::new();
    if section("startup") {
        let ns = bench.namespace("startup").await?;
        warm_compile_cache(&bench, Guest::Bench, &ns).await?;
        let created = Instant::now();
        create_widgets(&bench.widgets(&ns), n).await?;
        write_statuses(&bench, &ns).await?;
        eprintln!(
            "{n} Widgets created, their statuses written, in {:.0} s",
            created.elapsed().as_secs_f64()
        );
        let mut whos = vec![Who::Host, Who::HostPaged, Who::ClientGo, Who::KubeRs];
        whos.extend(ControllerRuntime::ALL.map(Who::ControllerRuntime));
        if bench.host_before.is_some() {
            whos.insert(2, Who::HostBefore);
        }
        for who in whos {
            let figures = startup(&bench, who, &ns, n, every, steady).await?;
            eprintln!(
                "startup N={n} {}: synced after {:.1} s, peak {:.1} MiB, steady {:.1} MiB",
                who.label(),
                figures.synced_after.as_secs_f64(),
                mib(figures.peak_kib),
                mib(figures.steady_kib)
            );
            startups.push(figures);
        }
        bench.clean(&ns).await?;
    }

    let mut secondary = Vec::new();
    let mut empty: Vec<(Who, Resident)> = Vec::new();
    let mut upgraded = None;
    if section("secondaries") {
        let ns = bench.namespace("secondaries").await?;
        warm_compile_cache(&bench, Guest::Widget, &ns).await?;
        // What each costs with nothing to cache: the per-object cost is the difference.
        for who in [Who::Host, Who::ClientGo]
            .into_iter()
            .chain(ControllerRuntime::ALL.map(Who::ControllerRuntime))
        {
            let (none, _) = secondaries(&bench, who, &ns, 0, settle).await?;
            empty.push((who, none));
        }
        let created = Instant::now();
        create_owned_config_maps(&bench, &ns, m, kib).await?;
        eprintln!(
            "{m} ConfigMaps of {kib} KiB created in {:.0} s",
            created.elapsed().as_secs_f64()
        );
        for who in [Who::Host, Who::HostWhole, Who::ClientGo]
            .into_iter()
            .chain(ControllerRuntime::ALL.map(Who::ControllerRuntime))
        {
            let (rss, upgrade) = secondaries(&bench, who, &ns, m, settle).await?;
            eprintln!(
                "secondaries M={m} {}: {:.1} MiB",
                who.label(),
                mib(rss.rss_kib)
            );
            secondary.push((who, rss));
            if let Some(upgrade) = upgrade {
                // Back to a Widget that reads nothing, for the next controller.
                let patch = Patch::Merge(json!({"spec": {"get": null}}));
                bench
                    .widgets(&ns)
                    .patch("w-00000", &PatchParams::default(), &patch)
                    .await?;
                upgraded = Some(upgrade);
            }
        }
        bench.clean(&ns).await?;
    }

    if !startups.is_empty() {
        println!();
        println!(
            "| N = {n} Widgets, controller starts | cache synced after | peak RSS during the sync (sampled every {} ms) | VmHWM at sync | steady RSS ({}–{} s after sync, median) | peak / steady | peak / client-go's peak |",
            every.as_millis(),
            steady.as_secs() / 2,
            steady.as_secs()
        );
        println!("|---|---|---|---|---|---|---|");
        let go = startups
            .iter()
            .find(|s| s.who == Who::ClientGo)
            .map_or(0, |s| s.peak_kib);
        for s in &startups {
            println!(
                "| {} | {:.1} s | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.2}x | {:.2}x |",
                s.who.label(),
                s.synced_after.as_secs_f64(),
                mib(s.peak_kib),
                mib(s.hwm_kib),
                mib(s.steady_kib),
                s.peak_kib as f64 / s.steady_kib.max(1) as f64,
                s.peak_kib as f64 / go.max(1) as f64,
            );
        }
        println!(
            "({} samples per controller on average)",
            startups.iter().map(|s| s.samples).sum::<usize>() / startups.len().max(1)
        );
    }
    if !secondary.is_empty() {
        print_secondaries(m, kib, settle, &secondary, &empty, upgraded.as_ref());
    }
    Ok(())
}

/// The secondaries table: each controller's memory with `m` `ConfigMap`s, its file-backed part,
/// its memory with none, the difference per `ConfigMap`, and its ratios to client-go's and
/// controller-runtime v0.25's (metadata only, its defaults).
// KiB far below 2^52.
#[allow(clippy::cast_precision_loss)]
fn print_secondaries(
    m: usize,
    kib: usize,
    settle: Duration,
    rows: &[(Who, Resident)],
    empty: &[(Who, Resident)],
    upgraded: Option<&Upgrade>,
) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    let of = |who: Who| {
        rows.iter()
            .find(|(w, _)| *w == who)
            .map_or(1, |(_, r)| r.rss_kib.max(1))
    };
    let (go, cr) = (
        of(Who::ClientGo),
        of(Who::ControllerRuntime(ControllerRuntime::V025)),
    );
    let none = |who: Who| {
        let base = match who {
            Who::HostWhole | Who::HostBefore | Who::HostPaged => Who::Host,
            other => other,
        };
        empty.iter().find(|(w, _)| *w == base).map(|(_, r)| *r)
    };
    println!();
    println!(
        "| M = {m} ConfigMaps of {kib} KiB owned by one Widget (VmRSS {}s after sync) | VmRSS | of which file-backed | with no ConfigMap | per ConfigMap | vs client-go (whole objects) | vs controller-runtime v0.25 (metadata only) |",
        settle.as_secs()
    );
    println!("|---|---|---|---|---|---|---|");
    let row = |label: &str, who: Who, r: Resident| {
        let base = none(who);
        let per = base.map_or_else(
            || "–".to_owned(),
            |b| {
                format!(
                    "{:.0} B",
                    (r.rss_kib.saturating_sub(b.rss_kib) * 1024) as f64 / m.max(1) as f64
                )
            },
        );
        println!(
            "| {label} | {:.1} MiB | {:.1} MiB | {} | {per} | {:.2}x | {:.2}x |",
            mib(r.rss_kib),
            mib(r.file_kib),
            base.map_or_else(|| "–".to_owned(), |b| format!("{:.1} MiB", mib(b.rss_kib))),
            r.rss_kib as f64 / go as f64,
            r.rss_kib as f64 / cr as f64,
        );
    };
    for (who, r) in rows {
        if matches!(who, Who::ControllerRuntime(_)) {
            row(&format!("{}, metadata only", who.label()), *who, *r);
        } else {
            row(who.label(), *who, *r);
        }
    }
    if let Some(u) = upgraded {
        let label = format!(
            "reconciler-host, after its guest read a ConfigMap (read answered {:.2} s after the spec change; metadata-only gauge {})",
            u.read_after.as_secs_f64(),
            u.metadata_only_after,
        );
        row(&label, Who::Host, u.resident);
    }
}

/// Writes every Widget's status as the bench guest would (16 patches in flight), so that each
/// controller meets the same objects and its reconciles are writes the API server finds
/// unchanged.
async fn write_statuses(bench: &Bench, ns: &str) -> anyhow::Result<()> {
    let api = bench.widgets(ns);
    let params = ListParams::default();
    let listed = retrying("list", || api.list(&params)).await?;
    let patches: Vec<(String, serde_json::Value)> = listed
        .items
        .iter()
        .map(|w| {
            let patch =
                logic::status_patch(&serde_json::to_string(w)?).map_err(anyhow::Error::msg)?;
            Ok((
                w.metadata.name.clone().unwrap_or_default(),
                serde_json::from_str(&patch)?,
            ))
        })
        .collect::<anyhow::Result<_>>()?;
    drop(listed);
    futures::stream::iter(patches.iter())
        .map(|(name, patch)| {
            let api = api.clone();
            async move {
                let (params, patch) = (PatchParams::default(), Patch::Merge(patch));
                retrying("status", || api.patch_status(name, &params, &patch)).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// The host's cache size for `kind` (`reconciler_informer_objects`), once `/readyz` says synced.
fn host_cached(port: u16, kind: &str) -> Option<usize> {
    http_get(port, "/readyz")?;
    let metrics = http_get(port, "/metrics")?;
    let series = format!("kind=\"{kind}\"}}");
    metrics
        .lines()
        .find(|l| l.starts_with("reconciler_informer_objects{") && l.contains(&series))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The kube-rs reference: a reflector over the namespace's Widgets with kube-rs' default
/// watcher configuration (its list at `resourceVersion=0`), its store of `DynamicObject`s.
/// Prints `synced` once the store is ready, then follows the watch until killed.
fn kube_rs_reflector() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let client = kube::Client::try_default().await?;
        let ns = std::env::var("BENCH_NAMESPACE")?;
        let api: Api<DynamicObject> = Api::namespaced_with(client, &ns, &widget_resource());
        let writer = reflector::store::Writer::new(widget_resource());
        let reader = writer.as_reader();
        let events = reflector::reflector(writer, watcher(api, watcher::Config::default()));
        tokio::spawn(async move {
            if reader.wait_until_ready().await.is_ok() {
                println!("synced");
            }
            // Keeps the store alive.
            std::future::pending::<()>().await;
        });
        events.for_each(|_| async {}).await;
        anyhow::Ok(())
    })
}
