//! What the benches on the local control plane share (`mod live;` in `controller.rs`,
//! `sharding.rs` and `host_costs.rs`): their control plane and its Widgets, the processes'
//! memory, their HTTP endpoints. Bringing up the control plane, building and starting the host
//! are the tests' support library's (`reconciler-host-tests`), with the benches' own directory
//! and release build as arguments; what is here is what only a bench needs. The in-process
//! benches share `common/` instead. The Go baselines are in `baselines`.

pub mod baselines;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use kube::api::{Api, DynamicObject, PostParams};
use reconciler_host_tests::host::{Profile, build_host_and_guests_as, run_command};
use reconciler_host_tests::{ControlPlane, apply_crd_file, repo_root};
use serde_json::json;

/// The host build a bench runs (`BENCH_HOST=debug`: the debug one, for a quick run while a
/// release build is out of reach).
pub fn host_profile() -> Profile {
    if std::env::var("BENCH_HOST").is_ok_and(|p| p == "debug") {
        Profile::Debug
    } else {
        Profile::Release
    }
}

pub fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A comma-separated list of counts (`1000,10_000`), or `default`.
pub fn env_list(name: &str, default: &[usize]) -> Vec<usize> {
    std::env::var(name).ok().map_or_else(
        || default.to_vec(),
        |v| {
            v.split(',')
                .filter_map(|n| n.trim().replace('_', "").parse().ok())
                .collect()
        },
    )
}

/// Runs `cmd`, its stderr shown; its stdout.
pub fn sh(cmd: &mut Command) -> anyhow::Result<String> {
    let out = cmd.stderr(Stdio::inherit()).output()?;
    anyhow::ensure!(out.status.success(), "{cmd:?} failed");
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The control plane the benches run on, with the Widget CRD established.
pub struct Plane {
    pub kubeconfig: PathBuf,
    pub client: kube::Client,
}

/// Brings up (or reuses) the control plane in `target/bench-control-plane`, not the tests'
/// shared one, builds the guests and the release host (`./dev build --release`; not with
/// `BENCH_NO_BUILD=1`) and establishes the Widget CRD.
pub async fn plane() -> anyhow::Result<Plane> {
    let plane =
        ControlPlane::reuse_or_start(&repo_root().join("target/bench-control-plane")).await?;
    // `BENCH_NO_BUILD=1`: run what is built (a tree shared with others' edits in progress).
    if std::env::var_os("BENCH_NO_BUILD").is_none() {
        build_host_and_guests_as(Profile::Release)?;
    }
    let client = plane.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    Ok(Plane {
        kubeconfig: plane.kubeconfig().to_owned(),
        client,
    })
}

/// `n` status-less Widgets `w-00000`.. with a typical spec, 16 creations in flight.
pub async fn create_widgets(api: &Api<DynamicObject>, n: usize) -> anyhow::Result<()> {
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
            async move { create_retrying(&api, &object).await }
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await?;
    Ok(())
}

/// Creates `object`, retrying as [`retrying`] does; 409 (`AlreadyExists`) after a retry means an
/// earlier attempt landed.
async fn create_retrying(api: &Api<DynamicObject>, object: &DynamicObject) -> anyhow::Result<()> {
    let mut retried = false;
    let created = retrying("create", || {
        let retry = std::mem::replace(&mut retried, true);
        async move {
            match api.create(&PostParams::default(), object).await {
                Err(kube::Error::Api(e)) if e.code == 409 && retry => Ok(()),
                other => other.map(drop),
            }
        }
    });
    Ok(created.await?)
}

/// Runs one bench request, retrying what a loaded API server may answer at 50,000 objects (a
/// dropped connection, 429, 5xx) up to 5 times with backoff. The bench's own requests are not
/// what it measures, so a transient failure of one must not end a 25-minute run.
pub async fn retrying<T, F, Fut>(what: &str, mut request: F) -> kube::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = kube::Result<T>>,
{
    let mut delay = Duration::from_millis(200);
    for attempt in 0.. {
        match request().await {
            Ok(t) => return Ok(t),
            Err(kube::Error::Api(e)) if attempt < 5 && (e.code == 429 || e.code >= 500) => {
                eprintln!("bench: {what} answered {}, retrying", e.code);
            }
            Err(e @ kube::Error::Api(_)) => return Err(e),
            Err(e) if attempt < 5 => eprintln!("bench: {what} failed, retrying: {e}"),
            Err(e) => return Err(e),
        }
        tokio::time::sleep(delay).await;
        delay *= 2;
    }
    unreachable!("the loop returns")
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`), 0 if unreadable.
pub fn proc_status_kib(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// GET over plain HTTP on loopback; the body, if the answer is 200.
pub fn http_get(port: u16, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_owned())
}

/// `reconciler-host run` from the release build against `kubeconfig`, serving on `port`,
/// watching namespace `ns`, with its compile cache in `cache_dir`; logging at `warn`. The
/// caller adds its own flags and output, then spawns it.
pub fn host_run(
    config: &Path,
    guests: &Path,
    port: u16,
    ns: &str,
    cache_dir: &Path,
    kubeconfig: &Path,
) -> Command {
    let mut command = run_command(Profile::Release, config, guests, port, kubeconfig);
    command
        .args(["--watch-namespace", ns])
        .arg("--cache-dir")
        .arg(cache_dir)
        .env("RUST_LOG", "warn");
    command
}

/// CPU seconds (utime + stime) the bench control plane's kube-apiserver and etcd have used
/// since they started, from the pid files `tools/control-plane/cp` keeps.
pub fn plane_cpu_seconds() -> f64 {
    let dir = repo_root().join("target/bench-control-plane");
    ["kube-apiserver.pid", "etcd.pid"]
        .iter()
        .filter_map(|file| {
            std::fs::read_to_string(dir.join(file))
                .ok()?
                .trim()
                .parse::<u32>()
                .ok()
        })
        .map(cpu_seconds)
        .sum()
}

/// utime + stime of the whole process (every thread), from `/proc/<pid>/stat`.
// Clock ticks, far below 2^52.
#[allow(clippy::cast_precision_loss)]
pub fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return 0.0;
    };
    // Fields after the command name, which may hold spaces, closed by the last ')'.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or("", |(_, rest)| rest)
        .split_whitespace()
        .collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<u64>().ok())
            .unwrap_or(0)
    };
    // utime and stime are fields 14 and 15 of the line; `fields` starts at field 3.
    let ticks_per_second = 100.0; // USER_HZ on Linux
    (ticks(11) + ticks(12)) as f64 / ticks_per_second
}
