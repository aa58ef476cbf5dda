//! The host under attack within a guest's grant (issue 24, class 3), on the local control
//! plane: what the host spends for a guest that makes it parse, copy and scan as much as its
//! grant lets it, and whether `/healthz` still answers.
//!
//! One host (`reconciler-host run`, release build) runs the hostile test guest
//! (`guests/testing/hostile`, the attacks of its `costs.rs`) with the limits an operator gets by
//! default (64 MiB, one core, 8 MiB/s of bodies; its manifest's 4 workers) in a namespace holding
//! `BENCH_LARGE` (default 100) `ConfigMap`s of ~0.9 MiB in four parts and `BENCH_SMALL` (default
//! 20,000) small ones. Phases of `BENCH_ATTACK_SECS` (default 20) each, in one run:
//!
//! - **baseline**: no attack;
//! - **large bodies**: 3 MiB bodies of small values and bodies whose tree would outgrow the
//!   guest's cap (both refused), and 1.6 MB bodies the host parses and sends, at the guest's
//!   full concurrency, each repeated every 10 ms;
//! - **large lists**: a list of every ConfigMap (~90 MiB, refused) and lists of one part
//!   (~22 MiB, copied), at full concurrency;
//! - **slow selectors**: lists over the 20,000 small ones with a 400-term selector.
//!
//! Per phase: the host's `VmRSS` before it, its peak (`VmHWM`, reset when the phase starts) and
//! the growth; `/healthz` latency p50 / p99 / max, requested every 100 ms on a fresh connection
//! (a request that fails or takes over 10 s counts as 10 s); the host's CPU time over the phase
//! in cores (utime + stime); the hostile guest's reconciles (from `/metrics`). The attack's
//! objects are deleted after each phase, and the host given 5 s to settle.
//!
//! `cargo bench -p reconciler-host --bench host_costs`. Prints figures; asserts nothing. Starts
//! (or reuses) the control plane in target/bench-control-plane and builds the guests and the
//! release host (`./dev build --release`), as `controller.rs` does.

#[allow(dead_code)] // each live bench uses part of it
mod live;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use live::{cpu_seconds, env_usize, proc_status_kib};
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{repo_root, test_namespace, wait_until};
use serde_json::{Value, json};

const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
/// A `/healthz` that takes longer than this counts as this long (a kubelet gives up at 1 s by
/// default).
const PROBE_LIMIT: Duration = Duration::from_secs(10);

/// One phase: its name and the attacks it runs (attack, copies).
struct Phase {
    name: &'static str,
    attacks: &'static [(&'static str, usize)],
}

const PHASES: &[Phase] = &[
    Phase {
        name: "baseline (no attack)",
        attacks: &[],
    },
    Phase {
        name: "large bodies",
        attacks: &[
            ("cost-body-values", 2),
            ("cost-body-tree", 1),
            ("cost-body-heavy", 4),
        ],
    },
    Phase {
        name: "large lists",
        attacks: &[("cost-list-all", 1), ("cost-list-part", 4)],
    },
    Phase {
        name: "slow selectors",
        attacks: &[("cost-selector-slow", 4)],
    },
];

/// What one phase measured.
struct Figures {
    rss_before_kib: u64,
    peak_kib: u64,
    /// `/healthz` latencies, sorted.
    probes: Vec<Duration>,
    reconciles: f64,
    /// The host's CPU time over the phase, in cores.
    cores: f64,
}

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(orchestrate())
}

async fn orchestrate() -> anyhow::Result<()> {
    let plane = live::plane().await?;
    let client = plane.client.clone();
    let large = env_usize("BENCH_LARGE", 100);
    let small = env_usize("BENCH_SMALL", 20_000);
    let phase_time = Duration::from_secs(env_usize("BENCH_ATTACK_SECS", 20) as u64);

    let ns = test_namespace(&client, "bench-costs").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    eprintln!("filling {ns}: {large} ConfigMaps of ~0.9 MiB, {small} small ones");
    fill(&config_maps, large, small).await?;

    let port = free_port()?;
    let mut host = spawn_host(&plane.kubeconfig, &ns, port)?;
    wait_until("the host to be ready", Duration::from_mins(5), || async {
        live::http_get(port, "/readyz").ok_or_else(|| anyhow::anyhow!("/readyz is not ok"))
    })
    .await?;
    // Let the initial list's garbage go.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let pid = host.id();

    let mut rows = Vec::new();
    for phase in PHASES {
        eprintln!("phase: {}", phase.name);
        let figures = run_phase(&config_maps, pid, port, phase, phase_time).await;
        clear_attacks(&config_maps).await?;
        tokio::time::sleep(Duration::from_secs(5)).await;
        rows.push((phase.name, figures?));
    }
    let _ = host.kill();
    let _ = host.wait();
    // Nothing collects a namespace's contents here (no controller-manager).
    config_maps
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;

    println!();
    println!(
        "host under attack within its grant: {large} ConfigMaps of ~0.9 MiB and {small} small ones cached, \
         the hostile guest at its defaults (64 MiB, 1 core, 8 MiB/s of bodies, 4 workers), {}s per phase",
        phase_time.as_secs()
    );
    println!(
        "| phase | VmRSS before | VmHWM during | growth | /healthz p50 | p99 | max | host CPU | hostile reconciles |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (name, f) in &rows {
        let at = |q: f64| percentile(&f.probes, q);
        println!(
            "| {name} | {:.1} MiB | {:.1} MiB | {:+.1} MiB | {:.1} ms | {:.1} ms | {:.1} ms | {:.2} cores | {:.0} |",
            mib(f.rss_before_kib),
            mib(f.peak_kib),
            mib(f.peak_kib) - mib(f.rss_before_kib),
            ms(at(0.5)),
            ms(at(0.99)),
            ms(f.probes.last().copied().unwrap_or_default()),
            f.cores,
            f.reconciles,
        );
    }
    Ok(())
}

async fn run_phase(
    config_maps: &Api<ConfigMap>,
    pid: u32,
    port: u16,
    phase: &Phase,
    phase_time: Duration,
) -> anyhow::Result<Figures> {
    let reconciles_before = hostile_reconciles(port);
    let rss_before_kib = proc_status_kib(pid, "VmRSS:");
    // Linux >= 4.0: resets VmHWM to the current RSS.
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let stop = Arc::new(AtomicBool::new(false));
    let healthz_sampler = {
        let stop = stop.clone();
        std::thread::spawn(move || probe_until(port, &stop))
    };
    let mut objects = Vec::new();
    for (attack, copies) in phase.attacks {
        for i in 0..*copies {
            objects.push(json!({
                "metadata": {"name": format!("{attack}-{i}"), "labels": {ATTACK_LABEL: "bench"}},
                "data": {"attack": attack, "repeat-ms": "10"},
            }));
        }
    }
    create_all(config_maps, objects).await?;
    let started = Instant::now();
    let cpu_started = cpu_seconds(pid);
    let mut peak_kib = 0;
    while started.elapsed() < phase_time {
        peak_kib = peak_kib.max(proc_status_kib(pid, "VmRSS:"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cores = (cpu_seconds(pid) - cpu_started) / started.elapsed().as_secs_f64();
    stop.store(true, Ordering::SeqCst);
    let mut probes = healthz_sampler
        .join()
        .map_err(|_| anyhow::anyhow!("the /healthz prober panicked"))?;
    probes.sort();
    Ok(Figures {
        rss_before_kib,
        peak_kib: peak_kib.max(proc_status_kib(pid, "VmHWM:")),
        probes,
        reconciles: hostile_reconciles(port) - reconciles_before,
        cores,
    })
}

/// `/healthz` every 100 ms until `stop`; each request's latency (a failure counts as
/// [`PROBE_LIMIT`]).
fn probe_until(port: u16, stop: &AtomicBool) -> Vec<Duration> {
    let mut latencies = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        let answered = healthz(port);
        let took = started.elapsed();
        latencies.push(if answered { took } else { PROBE_LIMIT });
        std::thread::sleep(Duration::from_millis(100).saturating_sub(took));
    }
    latencies
}

/// One `/healthz` on a fresh connection, as a kubelet probes: whether it answered `ok`.
fn healthz(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(PROBE_LIMIT));
    if stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut answer = String::new();
    stream.read_to_string(&mut answer).is_ok()
        && answer.starts_with("HTTP/1.1 200")
        && answer.ends_with("ok")
}

/// `reconciler_reconcile_total{guest="hostile"}`, every result.
fn hostile_reconciles(port: u16) -> f64 {
    live::http_get(port, "/metrics").map_or(0.0, |text| {
        text.lines()
            .filter(|l| {
                l.starts_with("reconciler_reconcile_total{") && l.contains(r#"guest="hostile""#)
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    })
}

async fn create_all(api: &Api<ConfigMap>, objects: Vec<Value>) -> anyhow::Result<()> {
    futures::stream::iter(objects)
        .map(|object| async move {
            let object: ConfigMap = serde_json::from_value(object)?;
            api.create(&PostParams::default(), &object).await?;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// Large `ConfigMap`s labelled `cost.reconciler.dev/part` a to d, and small ones.
async fn fill(api: &Api<ConfigMap>, large: usize, small: usize) -> anyhow::Result<()> {
    let filler = "x".repeat(900 << 10);
    let parts = ["a", "b", "c", "d"];
    let objects = (0..large)
        .map(|i| {
            json!({
                "metadata": {"name": format!("large-{i:04}"), "labels": {"cost.reconciler.dev/part": parts[i % 4]}},
                "data": {"filler": filler},
            })
        })
        .collect();
    create_all(api, objects).await?;
    let objects = (0..small)
        .map(|i| {
            json!({
                "metadata": {"name": format!("small-{i:05}"), "labels": {"cost.reconciler.dev/filler": "true"}},
                "data": {"n": i.to_string()},
            })
        })
        .collect();
    create_all(api, objects).await
}

/// Deletes the attack objects and their results, so the next phase starts from the same cache.
async fn clear_attacks(api: &Api<ConfigMap>) -> anyhow::Result<()> {
    api.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(ATTACK_LABEL),
    )
    .await?;
    let results: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .filter(|name| name.starts_with("result-") || name == "heavy")
        .collect();
    for name in results {
        let _ = api.delete(&name, &DeleteParams::default()).await;
    }
    Ok(())
}

fn spawn_host(kubeconfig: &std::path::Path, ns: &str, port: u16) -> anyhow::Result<Child> {
    let dir = repo_root().join("target/bench-host-costs");
    let guests = dir.join("guests");
    let _ = std::fs::remove_dir_all(&guests);
    std::fs::create_dir_all(&guests)?;
    std::fs::copy(
        repo_root().join("target/guests/hostile.wasm"),
        guests.join("hostile.wasm"),
    )?;
    let config = dir.join("host.yaml");
    std::fs::write(
        &config,
        "guests:\n  hostile:\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap]\n",
    )?;
    Ok(live::host_run(
        &config,
        &guests,
        port,
        ns,
        &dir.join("compiled"),
        kubeconfig,
    )
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()?)
}

fn percentile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // An index into a short list.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

// KiB counts far below 2^52.
#[allow(clippy::cast_precision_loss)]
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}
