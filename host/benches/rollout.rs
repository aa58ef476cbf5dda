//! What a rollout costs (issue 56): the host's CPU and memory while a new guest version runs in
//! shadow beside the active one (every key reconciled twice, the second time with each write
//! compared against a live read), and while it reconciles a canary share, against the same host
//! with one version, in one run.
//!
//! One host (`reconciler-host run`, release build) runs the widget test guest with a rollout
//! plan; `BENCH_WIDGETS` (default 200) Widgets are `steady` (the same status from either
//! version) and requeue every `BENCH_REQUEUE_MS` (default 1000), a steady load of reconciles.
//! Phases, each measured for `BENCH_SECONDS` (default 20) after 5 s of settling:
//!
//! - **one version**: v1 alone;
//! - **shadow**: `widget-v2.wasm` put in place; the plan's first step runs it in shadow;
//! - **canary 50 %**: the plan's second step, each version on half the keys.
//!
//! Per phase: the host's CPU (utime + stime, in cores) and its ratio to "one version", the
//! reconciles per second of each version (from `/metrics`), the CPU per reconcile of the stable
//! version, the host's RSS and its ratio. Prints figures; asserts nothing.
//!
//! `cargo bench -p reconciler-host --bench rollout` (`./dev bench rollout`); `BENCH_HOST=debug`
//! and `BENCH_NO_BUILD=1` as in `tenants.rs`. Starts (or reuses) the control plane in
//! target/bench-control-plane.

#[allow(dead_code)] // each live bench uses part of it
mod live;

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use live::{cpu_seconds, env_usize, host_profile, http_get, proc_status_kib};
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{guest_component, host::run_command, test_namespace};
use serde_json::{Value, json};

const SETTLE: Duration = Duration::from_secs(5);

/// What one phase measured.
struct Phase {
    name: &'static str,
    cores: f64,
    rss_mib: f64,
    /// Reconciles per second: the guest's (stable and canary, actively) and the shadow runs.
    active: f64,
    shadow: f64,
}

fn main() -> Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(run())
}

async fn run() -> Result<()> {
    let widgets = env_usize("BENCH_WIDGETS", 200);
    let requeue = env_usize("BENCH_REQUEUE_MS", 1000);
    let seconds = env_usize("BENCH_SECONDS", 20);
    let window = Duration::from_secs(u64::try_from(seconds)?);
    let plane = live::plane().await?;
    let ns = test_namespace(&plane.client, "bench-rollout").await?;
    let api: Api<DynamicObject> = Api::namespaced_with(
        plane.client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "test.reconciler.dev",
            "v1",
            "Widget",
        )),
    );
    for i in 0..widgets {
        let widget: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("w-{i:05}")},
            "spec": {"steady": true, "message": "same", "requeueAfterMs": requeue},
        }))?;
        api.create(&PostParams::default(), &widget).await?;
    }

    // The shadow step lasts long enough to measure it, then the canary holds.
    let shadow_for = SETTLE * 3 + window * 2;
    let dir = tempfile::tempdir()?;
    let guests = dir.path().join("guests");
    std::fs::create_dir(&guests)?;
    std::fs::copy(guest_component("widget")?, guests.join("widget.wasm"))?;
    let config = dir.path().join("host.yaml");
    std::fs::write(
        &config,
        format!(
            "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    \
             write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status]\n    \
             rollout:\n      steps: [{{shadow: {{duration: {}s, minReconciles: 1}}}}, {{canary: {{percent: 50, duration: 1h}}}}]\n      \
             gates: {{minSample: 1, minAgreement: 0, maxErrorRateIncrease: 1, maxP99Ratio: 100, p99Slack: 1h}}\n",
            shadow_for.as_secs()
        ),
    )?;
    let port = free_port()?;
    let mut child = run_command(host_profile(), &config, &guests, port, &plane.kubeconfig)
        .args(["--watch-namespace", &ns])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("host.log"))?)
        .spawn()
        .context("starting the host")?;
    let pid = child.id();
    let result = phases(port, pid, &guests, window).await;
    let _ = child.kill();
    let _ = child.wait();
    let phases = result.map_err(|e| {
        let log = std::fs::read_to_string(dir.path().join("host.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        e.context(format!(
            "host log, last lines:\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ))
    })?;
    report(&phases, widgets, requeue, seconds);
    Ok(())
}

async fn phases(
    port: u16,
    pid: u32,
    guests: &std::path::Path,
    window: Duration,
) -> Result<Vec<Phase>> {
    let until = Instant::now() + Duration::from_mins(2);
    while scrape(
        port,
        "reconciler_reconcile_total{guest=\"widget\",result=\"requeue\"}",
    ) == 0.0
    {
        if Instant::now() > until {
            bail!("v1 did not reconcile within two minutes");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let mut phases = vec![measure("one version", port, pid, window).await];
    let tmp = guests.join(".widget.wasm.tmp");
    std::fs::copy(guest_component("widget-v2")?, &tmp)?;
    std::fs::rename(&tmp, guests.join("widget.wasm"))?;
    wait_for(port, "the shadow step", |r| r["share"] == "shadow").await?;
    phases.push(measure("shadow", port, pid, window).await);
    wait_for(port, "the canary at 50%", |r| r["share"] == "50%").await?;
    phases.push(measure("canary 50%", port, pid, window).await);
    Ok(phases)
}

/// Settles, then measures the host for `window`.
async fn measure(name: &'static str, port: u16, pid: u32, window: Duration) -> Phase {
    tokio::time::sleep(SETTLE).await;
    let reconciles = || {
        let text = http_get(port, "/metrics").unwrap_or_default();
        let sum = |prefix: &str| -> f64 {
            text.lines()
                .filter(|l| l.starts_with(prefix))
                .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        };
        (
            sum("reconciler_reconcile_total{guest=\"widget\""),
            sum("reconciler_rollout_reconciles_total{guest=\"widget\",version=\"new\""),
        )
    };
    let (cpu, started, before) = (cpu_seconds(pid), Instant::now(), reconciles());
    tokio::time::sleep(window).await;
    let (elapsed, after) = (started.elapsed().as_secs_f64(), reconciles());
    let cores = (cpu_seconds(pid) - cpu) / elapsed;
    // The new version's runs in the rollout's counter are shadow runs in the shadow step and
    // active ones in the canary (which the guest's own counter counts too).
    let new_runs = (after.1 - before.1) / elapsed;
    let active = (after.0 - before.0) / elapsed;
    let shadow = if name == "shadow" { new_runs } else { 0.0 };
    #[allow(clippy::cast_precision_loss)] // KiB of one process
    let rss_mib = proc_status_kib(pid, "VmRSS:") as f64 / 1024.0;
    Phase {
        name,
        cores,
        rss_mib,
        active,
        shadow,
    }
}

fn scrape(port: u16, series: &str) -> f64 {
    http_get(port, "/metrics")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits (up to two minutes) until `done` holds of the widget guest's rollout on `/guests`
/// (`Null` before one began).
async fn wait_for(port: u16, what: &str, done: impl Fn(&Value) -> bool) -> Result<()> {
    let until = Instant::now() + Duration::from_mins(2);
    while Instant::now() < until {
        let guests: Value = http_get(port, "/guests")
            .and_then(|t| serde_json::from_str(&t).ok())
            .unwrap_or(Value::Null);
        let rollout = guests
            .as_array()
            .into_iter()
            .flatten()
            .find(|g| g["guest"] == "widget")
            .map_or(Value::Null, |g| g["rollout"].clone());
        if done(&rollout) {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!("timed out waiting for {what}")
}

fn report(phases: &[Phase], widgets: usize, requeue: usize, seconds: usize) {
    println!(
        "rollout cost: {widgets} steady Widgets requeued every {requeue} ms, {seconds} s per phase (host: {:?})",
        host_profile()
    );
    println!(
        "{:<12} {:>8} {:>8} {:>12} {:>12} {:>14} {:>9} {:>8}",
        "phase",
        "cores",
        "x one",
        "reconciles/s",
        "shadow runs/s",
        "us CPU/reconc",
        "RSS MiB",
        "x one"
    );
    let base = &phases[0];
    for phase in phases {
        let runs = phase.active + phase.shadow;
        let per = if runs > 0.0 {
            phase.cores * 1e6 / runs
        } else {
            0.0
        };
        println!(
            "{:<12} {:>8.3} {:>8.2} {:>12.1} {:>12.1} {:>14.0} {:>9.1} {:>8.2}",
            phase.name,
            phase.cores,
            phase.cores / base.cores,
            phase.active,
            phase.shadow,
            per,
            phase.rss_mib,
            phase.rss_mib / base.rss_mib
        );
    }
}
