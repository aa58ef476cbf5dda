//! Sharded replicas (`run --shards auto`, issue 17) on the local control plane: what one
//! replica costs as replicas are added, with the shard filter on the server (`shardSelector`)
//! and on the client.
//!
//! For each count of replicas in `BENCH_REPLICAS` (default 1, 2, 3) and each filter (`server`,
//! `client`): a fresh namespace; the replicas start (the release host with the bench guest,
//! `--shards auto --shard-filter <filter>`) and the bench waits until their ring has split the
//! 256 slots; then `BENCH_OBJECTS` (default 10,000) status-less Widgets are created and the
//! clock stops when every one has its status (seen by a watch). The ring is settled before the
//! Widgets arrive so that no replica holds the whole range for a moment at start-up: the figures
//! are each replica's steady share, not a join transient.
//!
//! Per replica, `BENCH_SETTLE_SECS` (default 5) after the last status: slots and keys owned
//! (`/shards`), `VmRSS` and `VmHWM` (`/proc/<pid>/status`),
//! `reconciler_informer_received_bytes_total` and `reconciler_informer_events_total` of the
//! Widget informer (every bench guest status write comes back as a watch event, and the guest
//! reconciles that once more: about two events per object), when the last of its own keys got
//! its status, and each figure over the one-replica run's with the same filter.
//!
//! `cargo bench -p reconciler-host --bench sharding` (or `./dev bench shards`). Prints figures;
//! asserts nothing. Starts (or reuses) the control plane in target/bench-control-plane and
//! builds the guests and the release host (`./dev build --release`), as `controller.rs` does.

#[allow(dead_code)] // each live bench uses part of it
mod live;

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use live::{create_widgets, env_list, env_usize, http_get, proc_status_kib};
use reconciler_host::cluster::shard_ranges::{SlotSet, slot_of};
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{repo_root, test_namespace, widget_resource};
use serde_json::Value;

/// The bench guest's concurrency per replica (its grant's cap on the adaptive limit).
const CONCURRENCY: u16 = 4;
const LEASE: &str = "10s";
const WAIT_LIMIT: Duration = Duration::from_mins(15);
/// A run with no new status for this long has stalled (e.g. `--shard-filter server` on an API
/// server without the feature gate): it stops with the replicas' logs.
const STALL_LIMIT: Duration = Duration::from_secs(90);
const FILTERS: [&str; 2] = ["server", "client"];

fn main() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(orchestrate())
}

/// One `reconciler-host run --shards auto` process.
struct Replica {
    identity: String,
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Replica {
    fn spawn(
        kubeconfig: &std::path::Path,
        ns: &str,
        ring: &str,
        identity: &str,
        filter: &str,
    ) -> anyhow::Result<Self> {
        let dir = repo_root().join("target/bench-shards").join(identity);
        let guests = dir.join("guests");
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&guests)?;
        std::fs::copy(
            repo_root().join("target/guests/bench.wasm"),
            guests.join("bench.wasm"),
        )?;
        let config = dir.join("host.yaml");
        std::fs::write(
            &config,
            format!(
                "guests:\n  bench:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n    limits: {{concurrency: {CONCURRENCY}}}\n"
            ),
        )?;
        let log = dir.join("host.log");
        let port = free_port()?;
        let cache = repo_root().join("target/bench-shards/compiled");
        let child = live::host_run(&config, &guests, port, ns, &cache, kubeconfig)
            .args(["--shards", "auto", "--shard-filter", filter])
            .args(["--lease-name", ring, "--lease-namespace", ns])
            .args(["--lease-duration", LEASE, "--identity", identity])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()?;
        Ok(Self {
            identity: identity.to_owned(),
            child,
            port,
            log,
        })
    }

    fn shards(&self) -> Option<Value> {
        serde_json::from_str(&http_get(self.port, "/shards")?).ok()
    }

    /// The slots its controllers run with.
    fn active(&self) -> Option<SlotSet> {
        let shards = self.shards()?;
        let text = shards
            .get("active")
            .or_else(|| shards.get("owned"))?
            .as_str()?;
        SlotSet::from_text(text).ok()
    }

    /// A counter of the Widget informer (`<family>{group,version,kind="Widget"}`).
    fn widget_series(&self, family: &str) -> f64 {
        let Some(metrics) = http_get(self.port, "/metrics") else {
            return 0.0;
        };
        metrics
            .lines()
            .filter(|l| l.starts_with(&format!("{family}{{")) && l.contains("kind=\"Widget\""))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        format!(
            "{} log (last 20 lines):\n{}",
            self.identity,
            lines[lines.len().saturating_sub(20)..].join("\n")
        )
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn tails(replicas: &[Replica]) -> String {
    replicas
        .iter()
        .map(Replica::log_tail)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Waits until every replica sees all of them as members and their slots split the ring.
async fn settled(replicas: &[Replica]) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let mut covered = SlotSet::empty();
        let mut ok = true;
        for replica in replicas {
            let members = replica
                .shards()
                .and_then(|s| s["members"].as_array().map(Vec::len));
            match (members, replica.active()) {
                (Some(m), Some(active))
                    if m == replicas.len()
                        && !active.is_empty()
                        && covered.intersection(&active).is_empty() =>
                {
                    covered = covered.union(&active);
                }
                _ => ok = false,
            }
        }
        if ok && covered.is_all() {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < Duration::from_mins(2),
            "{} replicas did not split the ring within 2 minutes\n{}",
            replicas.len(),
            tails(replicas)
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// When each Widget (by uid) was first seen with a status.
struct Tracker {
    done: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    fn start(api: Api<DynamicObject>) -> Self {
        let done: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let seen = done.clone();
        let task = tokio::spawn(async move {
            let mut objects = watcher(api, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(object) = objects.next().await {
                let Ok(object) = object else { continue };
                if object.data.get("status").is_some_and(|s| !s.is_null()) {
                    let uid = object.metadata.uid.unwrap_or_default();
                    seen.lock().unwrap().entry(uid).or_insert_with(Instant::now);
                }
            }
        });
        Self { done, task }
    }

    fn count(&self) -> usize {
        self.done.lock().unwrap().len()
    }

    fn times(&self) -> HashMap<String, Instant> {
        self.done.lock().unwrap().clone()
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct ReplicaFigures {
    identity: String,
    slots: usize,
    keys: u64,
    filter: String,
    rss_kib: u64,
    hwm_kib: u64,
    bytes: f64,
    events: f64,
    /// When the last Widget in its slots got its status, from the first creation.
    own_done: Option<Duration>,
}

struct Run {
    replicas: usize,
    filter: &'static str,
    created: Duration,
    wall: Duration,
    rows: Vec<ReplicaFigures>,
}

// Counts and KiB, far below 2^52, become f64 only to be printed.
#[allow(clippy::cast_precision_loss)]
async fn run(
    plane: &live::Plane,
    n: usize,
    count: usize,
    filter: &'static str,
    settle: Duration,
) -> anyhow::Result<Run> {
    let ns = test_namespace(&plane.client, &format!("bench-shards-{count}-{filter}")).await?;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(plane.client.clone(), &ns, &widget_resource());
    let replicas = (1..=count)
        .map(|i| Replica::spawn(&plane.kubeconfig, &ns, "bench", &format!("r{i}"), filter))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let result = async {
        settled(&replicas).await?;
        let tracker = Tracker::start(widgets.clone());
        let started = Instant::now();
        create_widgets(&widgets, n).await?;
        let created = started.elapsed();
        let (mut last, mut progress) = (0, Instant::now());
        loop {
            let done = tracker.count();
            if done >= n {
                break;
            }
            if done > last {
                (last, progress) = (done, Instant::now());
            }
            anyhow::ensure!(
                progress.elapsed() < STALL_LIMIT && started.elapsed() < WAIT_LIMIT,
                "{count} replicas, --shard-filter {filter}: {done} of {n} reconciled, none more for {:.0} s\n{}",
                progress.elapsed().as_secs_f64(),
                tails(&replicas)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let wall = started.elapsed();
        // The second, no-op pass over every key (the guest's own status writes come back).
        tokio::time::sleep(settle).await;
        let times = tracker.times();
        let mut rows = Vec::new();
        for replica in &replicas {
            let shards = replica.shards().unwrap_or(Value::Null);
            let active = replica.active().unwrap_or_default();
            let pid = replica.child.id();
            rows.push(ReplicaFigures {
                identity: replica.identity.clone(),
                slots: active.len(),
                keys: shards["keys"]["bench"].as_u64().unwrap_or(0),
                // None when the replica owns every slot: its informer is not sharded.
                filter: shards["filter"]["bench"]
                    .as_str()
                    .unwrap_or("none")
                    .to_owned(),
                rss_kib: proc_status_kib(pid, "VmRSS:"),
                hwm_kib: proc_status_kib(pid, "VmHWM:"),
                bytes: replica.widget_series("reconciler_informer_received_bytes_total"),
                events: replica.widget_series("reconciler_informer_events_total"),
                own_done: times
                    .iter()
                    .filter(|(uid, _)| active.contains(slot_of(uid)))
                    .map(|(_, at)| at.saturating_duration_since(started))
                    .max(),
            });
        }
        anyhow::Ok(Run {
            replicas: count,
            filter,
            created,
            wall,
            rows,
        })
    }
    .await;
    for replica in replicas {
        replica.stop();
    }
    // Nothing collects a namespace's contents here (no controller-manager): later runs meet an
    // API server with the same number of objects.
    widgets
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await?;
    result
}

async fn orchestrate() -> anyhow::Result<()> {
    let n = env_usize("BENCH_OBJECTS", 10_000);
    let counts = env_list("BENCH_REPLICAS", &[1, 2, 3]);
    let settle = Duration::from_secs(env_usize("BENCH_SETTLE_SECS", 5) as u64);
    let plane = live::plane().await?;
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "sharding benchmark, N = {n} Widgets, on this machine ({cpus} cores, shared by etcd, kube-apiserver, every replica and the bench)"
    );
    let mut runs: Vec<Run> = Vec::new();
    let mut failed = Vec::new();
    for &count in &counts {
        for filter in FILTERS {
            // One configuration that cannot run (the server filter on a server that does not
            // honour it) does not hide the others' figures.
            match run(&plane, n, count, filter, settle).await {
                Ok(run) => {
                    eprintln!(
                        "{count} replica(s), --shard-filter {filter}: all {n} reconciled after {:.2} s",
                        run.wall.as_secs_f64()
                    );
                    runs.push(run);
                }
                Err(e) => {
                    eprintln!("{count} replica(s), --shard-filter {filter} failed: {e:#}");
                    failed.push((count, filter, e));
                }
            }
        }
    }

    print_tables(n, &runs, &failed);
    Ok(())
}

// KiB and counters, far below 2^52, become f64 only to be printed as MiB and ratios.
#[allow(clippy::cast_precision_loss)]
fn print_tables(n: usize, runs: &[Run], failed: &[(usize, &str, anyhow::Error)]) {
    let mib = |kib: u64| kib as f64 / 1024.0;
    println!();
    println!(
        "| replicas | filter | replica | slots | keys | VmRSS | VmHWM | Widget bytes received | Widget events received | own keys done after | vs 1 replica: RSS / bytes / events |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for run in runs {
        let one = runs
            .iter()
            .find(|r| r.replicas == 1 && r.filter == run.filter)
            .and_then(|r| r.rows.first());
        for row in &run.rows {
            let ratio = |mine: f64, base: f64| {
                if base > 0.0 {
                    format!("{:.2}", mine / base)
                } else {
                    "–".into()
                }
            };
            let ratios = one.map_or("–".into(), |b| {
                format!(
                    "{} / {} / {}",
                    ratio(row.rss_kib as f64, b.rss_kib as f64),
                    ratio(row.bytes, b.bytes),
                    ratio(row.events, b.events)
                )
            });
            println!(
                "| {} | {} ({}) | {} | {} | {} | {:.1} MiB | {:.1} MiB | {:.1} MiB | {:.0} | {} | {ratios} |",
                run.replicas,
                run.filter,
                row.filter,
                row.identity,
                row.slots,
                row.keys,
                mib(row.rss_kib),
                mib(row.hwm_kib),
                row.bytes / 1024.0 / 1024.0,
                row.events,
                row.own_done
                    .map_or("–".into(), |d| format!("{:.2} s", d.as_secs_f64())),
            );
        }
    }
    println!(
        "(filter: asked for, and in parentheses what /shards reports the informer uses; none: all slots, unsharded)"
    );
    println!();
    println!(
        "| replicas | filter | creations took | all {n} reconciled after | mean VmRSS per replica | mean bytes per replica | mean events per replica |"
    );
    println!("|---|---|---|---|---|---|---|");
    for run in runs {
        let k = run.rows.len().max(1) as f64;
        println!(
            "| {} | {} | {:.2} s | {:.2} s | {:.1} MiB | {:.1} MiB | {:.0} |",
            run.replicas,
            run.filter,
            run.created.as_secs_f64(),
            run.wall.as_secs_f64(),
            run.rows.iter().map(|r| mib(r.rss_kib)).sum::<f64>() / k,
            run.rows.iter().map(|r| r.bytes).sum::<f64>() / k / 1024.0 / 1024.0,
            run.rows.iter().map(|r| r.events).sum::<f64>() / k,
        );
    }
    for (count, filter, e) in failed {
        let first = e.to_string();
        println!(
            "| {count} | {filter} | did not complete: {} | | | | |",
            first.lines().next().unwrap_or_default()
        );
    }
}
