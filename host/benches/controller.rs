//! The host against the controllers a Kubernetes user would run instead, on the local control
//! plane, in one run, printed as one table:
//!
//! - **throughput and startup**, at each N of `BENCH_OBJECTS` (default 1,000 and 10,000): N
//!   Widgets without a status exist, a controller starts, and the clock stops when the last
//!   status is written (seen by a watch). Side by side: (a) raw loops of N status patches with
//!   1, 4, 8 and 16 concurrent writers (`BENCH_WRITERS`); (b) `reconciler-host run` with the bench
//!   guest and default settings (its manifest leaves `concurrency` at 0: the adaptive limit on
//!   API writes), and the same guest capped at 4 by its grant; (c) a native kube-rs `Controller`
//!   with the same logic (`guests/testing/bench/src/logic.rs`); (d) the client-go baseline, a
//!   sample-controller on client-go v0.37 (`tools/bench-client-go`); (e) controller-runtime
//!   v0.23 and v0.25 with their defaults, and v0.25 with its read-your-writes mode
//!   (`tools/bench-controller-runtime`; `live/baselines.rs`). The baselines run 4 workers. While each runs, a second
//!   client GETs one ConfigMap every 20 ms on a connection of its own; its p99 is printed against
//!   the same GETs' p99 on the idle server, measured first (no stampede: the host should not
//!   make everyone else's requests slow). Per controller: wall time, its ratio to the best raw
//!   loop's time, the time to a synced cache (the startup figure: list +
//!   sync; the wall time is "every key reconciled once"), API requests (the API server's
//!   `apiserver_request_total`, less the bench's own watch and second client; printed by verb
//!   and resource too), kube-apiserver's and etcd's CPU seconds and the cores the run kept busy
//!   (a CPU-bound run shows near all of them), and CPU seconds of the controller process
//!   (utime + stime), each when the last status is written and once the controller has gone
//!   quiet (no request for 2 s: every controller here reconciles each object again after its own
//!   write), and its resident memory when the last status is written;
//! - **resident memory** with M objects cached, at each M of `BENCH_RSS_OBJECTS` (default
//!   10,000 and 50,000): `VmRSS` from `/proc/<pid>/status` once the controller reports a synced
//!   cache and `BENCH_SETTLE_SECS` (default 5) later, for the host with one guest, the host with
//!   two guests reading the same kind (one shared informer), kube-rs, client-go (as
//!   sample-controller, and with `TransformStripManagedFields`, since the host drops them too)
//!   and the three controller-runtime builds;
//! - **hot reload**: the host runs the ~400 KB widget guest on one Widget it requeues every
//!   10 ms; a new build is renamed into the guest directory and the clock stops when a status
//!   written by the new version is seen.
//!   Cold: a fresh host and an empty compile cache per trial (`BENCH_COLD`, default 3); warm:
//!   both versions compiled before, swapped back and forth (`BENCH_WARM`, default 5). Medians.
//! - with `BENCH_HOSTILE=1`, also (b) next to the hostile test guest (`guests/testing/hostile`)
//!   at the first N, to show what a hostile neighbour costs a good guest.
//! - **fresh-change latency under backlog**, at each N of `BENCH_BACKLOG_OBJECTS` (default
//!   50,000): N status-less Widgets exist, a controller starts, and while it works through them
//!   a probe changes one Widget's spec every second (`BENCH_PROBES`, default 30) and times each
//!   change until that Widget's `status.observedGeneration` reaches it (seen by a watch):
//!   p50, p99 and max, and the wall time until every Widget has a status. The host with its
//!   priority queue, the host with one FIFO (`RECONCILER_HOST_QUEUE=fifo`), client-go's FIFO
//!   work queue, and the three controller-runtime builds (their default priority queue).
//!
//! - **failover** (`BENCH_SECTIONS=failover`), at each N of `BENCH_FAILOVER_OBJECTS` (default
//!   50,000): two leader-elected hosts (`--lease-duration` `BENCH_LEASE`, default 15 s) on N
//!   status-less Widgets; once the leader writes and the standby is ready, the leader is
//!   `SIGKILL`ed, and the clock stops at the standby's first status write (its
//!   `reconciler_host_calls_total` for `patch-status`, polled every 10 ms), with the moment it
//!   took the lease (`reconciler_leader`). A warm standby (`--standby warm`, the default: caches
//!   synced, queue filled, no workers) and a cold one (`--standby cold`: starts its controllers,
//!   and lists, on taking the lease).
//!
//! `BENCH_SECTIONS` (default `throughput,memory,reload,backlog`) picks the sections run.
//! `BENCH_CONTESTANTS` (labels as printed, comma-separated; each part is read as the longest
//! label it starts) runs only those controllers in the throughput section; `BENCH_TRACE_LIMIT=1` prints the host's write limit every 250 ms.
//! `BENCH_RUNS` (default 1) repeats the throughput section's every entrant at every N that many
//! times, in alternating order (forward, then backward), and adds a table of medians with
//! min–max: wall time, its ratio to the best raw loop of the same run, the controller's CPU
//! and kube-apiserver + etcd's CPU per object (until all written, and until the controller's
//! last request), requests and RSS.
//!
//! `cargo bench -p reconciler-host --bench controller` (or `./dev bench controllers`). Prints
//! figures; asserts nothing. Starts (or reuses) a control plane in target/bench-control-plane
//! via tools/control-plane/cp, builds the guests and the release host (`./dev build --release`)
//! and the Go baselines (their `build.sh`). Each run's Widgets are
//! deleted after it, so the API server's cache is the same size for every controller.

#[allow(dead_code)] // each live bench uses part of it
mod live;
#[path = "../../guests/testing/bench/src/logic.rs"]
mod logic;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use kube::api::{
    Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use live::baselines::{Baselines, CLIENT_GO, CLIENT_GO_STRIPPED, ControllerRuntime};
use live::{
    cpu_seconds, create_widgets, env_list, env_usize, http_get, plane_cpu_seconds, proc_status_kib,
    retrying,
};
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{repo_root, widget_resource};
use serde_json::json;

/// The resident-memory section's controllers, in the table's order.
const MEMORY_CONTESTANTS: [Who; 8] = [
    Who::Host { extra_guests: 0 },
    Who::Host { extra_guests: 1 },
    Who::KubeRs,
    Who::ClientGo,
    Who::ClientGoStripped,
    Who::ControllerRuntime(ControllerRuntime::V023),
    Who::ControllerRuntime(ControllerRuntime::V025),
    Who::ControllerRuntime(ControllerRuntime::V025ReadYourWrites),
];

/// The baselines' workers, and the capped host's grant.
const CONCURRENCY: u16 = 4;
/// How often the second client GETs its ConfigMap.
const PROBE_EVERY: Duration = Duration::from_millis(20);
const WAIT_LIMIT: Duration = Duration::from_mins(15);

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

fn main() -> anyhow::Result<()> {
    if std::env::var("BENCH_ROLE").as_deref() == Ok("native") {
        return native_controller_process();
    }
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(orchestrate())
}

/// What the runs share: the control plane, the binaries, a client.
struct Bench {
    kubeconfig: PathBuf,
    client: kube::Client,
    baselines: Baselines,
    run_id: u32,
}

/// Brings up (or reuses) the control plane with the Widget CRD established, and builds the
/// guests, the release host binary and the client-go and controller-runtime baselines.
async fn setup() -> anyhow::Result<Bench> {
    let live::Plane { kubeconfig, client } = live::plane().await?;
    Ok(Bench {
        kubeconfig,
        client,
        baselines: Baselines::build()?,
        run_id: std::process::id(),
    })
}

/// The controllers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Who {
    /// The host with the bench guest, and that many more copies of it under other names (each
    /// its own guest, all reading Widgets through one shared informer).
    Host {
        extra_guests: u8,
    },
    /// As `Host`, with the hostile test guest attacking beside the bench guest.
    HostUnderAttack,
    /// The host with its work queue as one FIFO.
    HostFifo,
    /// The host with the bench guest capped at [`CONCURRENCY`] keys by its grant.
    HostCapped,
    KubeRs,
    ClientGo,
    /// client-go with `cache.TransformStripManagedFields()`, as the host drops them too.
    ClientGoStripped,
    ControllerRuntime(ControllerRuntime),
}

/// The controllers `list` (`BENCH_CONTESTANTS`) names among `labels`. Labels hold commas too
/// ("reconciler-host, grant concurrency 4"), so the list is read part by part, each time taking
/// the longest label whose parts come next: "reconciler-host, grant concurrency 4" names the
/// capped host alone, not also "reconciler-host".
fn named(list: &str, labels: &[&'static str]) -> Vec<&'static str> {
    let parts =
        |text: &str| -> Vec<String> { text.split(',').map(|p| p.trim().to_owned()).collect() };
    let tokens = parts(list);
    let mut chosen = Vec::new();
    let mut at = 0;
    while at < tokens.len() {
        let longest = labels
            .iter()
            .map(|&label| (label, parts(label)))
            .filter(|(_, label)| tokens[at..].starts_with(label))
            .max_by_key(|(_, label)| label.len());
        if let Some((label, label_parts)) = longest {
            chosen.push(label);
            at += label_parts.len();
        } else {
            eprintln!(
                "BENCH_CONTESTANTS: no controller is labelled {:?}",
                tokens[at]
            );
            at += 1;
        }
    }
    chosen
}

/// The throughput section's controllers, in the order they run.
fn throughput_contestants() -> impl Iterator<Item = Who> {
    [
        Who::Host { extra_guests: 0 },
        Who::HostCapped,
        Who::KubeRs,
        Who::ClientGo,
    ]
    .into_iter()
    .chain(ControllerRuntime::ALL.map(Who::ControllerRuntime))
}

impl Who {
    fn label(self) -> &'static str {
        match self {
            Who::Host { extra_guests: 0 } => "reconciler-host",
            Who::Host { .. } => "reconciler-host, 2 guests",
            Who::HostUnderAttack => "reconciler-host + hostile guest",
            Who::HostFifo => "reconciler-host, FIFO queue",
            Who::HostCapped => "reconciler-host, grant concurrency 4",
            Who::KubeRs => "kube-rs",
            Who::ClientGo => CLIENT_GO,
            Who::ClientGoStripped => CLIENT_GO_STRIPPED,
            Who::ControllerRuntime(which) => which.label(),
        }
    }

    /// What its namespaces are named after.
    fn slug(self) -> &'static str {
        match self {
            Who::Host { .. } | Who::HostFifo => "host",
            Who::HostCapped => "host-capped",
            Who::HostUnderAttack => "hostile",
            Who::KubeRs => "kube-rs",
            Who::ClientGo | Who::ClientGoStripped => "client-go",
            Who::ControllerRuntime(which) => which.slug(),
        }
    }
}

/// One entrant of the throughput section: a raw loop with that many writers, or a controller.
#[derive(Clone, Copy)]
enum Entrant {
    Raw(usize),
    Controller(Who),
}

impl Entrant {
    fn label(self) -> String {
        match self {
            Entrant::Raw(1) => "raw loop, one writer".to_owned(),
            Entrant::Raw(writers) => format!("raw loop, {writers} writers"),
            Entrant::Controller(who) => who.label().to_owned(),
        }
    }
}

/// One entrant's figures in one run (0-based) of the throughput section.
struct Row {
    label: String,
    run: usize,
    figures: Figures,
}

/// One controller process and how to tell it has synced.
struct Running {
    child: Child,
    /// The host's `--listen` port (its `/metrics` tells the cache size).
    port: Option<u16>,
    /// Set when a baseline prints `synced`.
    synced: Arc<AtomicBool>,
}

impl Running {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every object of the watched namespace (at least `objects` of them) is cached.
    fn is_synced(&self, objects: usize) -> bool {
        match self.port {
            None => self.synced.load(Ordering::SeqCst),
            Some(port) => host_cached_widgets(port).is_some_and(|n| n >= objects),
        }
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Bench {
    fn spawn(&self, who: Who, ns: &str) -> anyhow::Result<Running> {
        let synced = Arc::new(AtomicBool::new(false));
        let (mut child, port) = match who {
            Who::Host { .. } | Who::HostUnderAttack | Who::HostFifo | Who::HostCapped => {
                let (guests, fifo) = match who {
                    Who::Host { extra_guests } => (HostGuests::Bench(extra_guests), false),
                    Who::HostFifo => (HostGuests::Bench(0), true),
                    Who::HostCapped => (HostGuests::BenchCapped, false),
                    _ => (HostGuests::BenchAndHostile, false),
                };
                let port = free_port()?;
                let child = spawn_host(&self.kubeconfig, ns, port, &guests, fifo)?;
                (child, Some(port))
            }
            Who::KubeRs => (
                Command::new(std::env::current_exe()?)
                    .env("BENCH_ROLE", "native")
                    .env("BENCH_NAMESPACE", ns)
                    .env("KUBECONFIG", &self.kubeconfig)
                    .stdout(Stdio::piped())
                    .spawn()?,
                None,
            ),
            Who::ControllerRuntime(which) => (
                self.baselines
                    .controller_runtime(which)
                    .args(["-namespace", ns, "-workers", &CONCURRENCY.to_string()])
                    .env("KUBECONFIG", &self.kubeconfig)
                    .stdout(Stdio::piped())
                    .spawn()?,
                None,
            ),
            Who::ClientGo | Who::ClientGoStripped => (
                Command::new(&self.baselines.client_go)
                    .args(["-namespace", ns, "-workers", &CONCURRENCY.to_string()])
                    .args((who == Who::ClientGoStripped).then_some("-strip-managed-fields"))
                    .env("KUBECONFIG", &self.kubeconfig)
                    .stdout(Stdio::piped())
                    .spawn()?,
                None,
            ),
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

    /// A namespace with `n` status-less Widgets.
    async fn populated(&self, what: &str, n: usize) -> anyhow::Result<String> {
        let ns = self.namespace(what).await?;
        create_widgets(&self.widgets(&ns), n).await?;
        Ok(ns)
    }

    /// Deletes the namespace's Widgets (nothing collects a namespace's contents here: no
    /// controller-manager), so later runs meet an API server with the same number of objects.
    async fn clean(&self, ns: &str) -> anyhow::Result<()> {
        let api = self.widgets(ns);
        let (params, all) = (DeleteParams::default(), ListParams::default());
        retrying("delete collection", || api.delete_collection(&params, &all)).await?;
        Ok(())
    }

    /// `apiserver_request_total`, summed per verb and resource (`PATCH widgets/status`).
    async fn apiserver_requests(&self) -> anyhow::Result<Requests> {
        let text = retrying("metrics", || {
            let request = hyper::Request::get("/metrics").body(Vec::new());
            async move {
                let request = request.map_err(kube::Error::HttpError)?;
                self.client.request_text(request).await
            }
        })
        .await?;
        let mut requests = Requests::default();
        for line in text.lines() {
            let Some(labels) = line.strip_prefix("apiserver_request_total{") else {
                continue;
            };
            let Some((labels, value)) = labels.rsplit_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|l| l.strip_prefix(name)?.strip_prefix("=\""))
                    .map_or("", |v| v.trim_end_matches('"'))
            };
            let mut kind = format!("{} {}", label("verb"), label("resource"));
            if !label("subresource").is_empty() {
                kind = format!("{kind}/{}", label("subresource"));
            }
            // Counts, far below 2^52.
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let count = value.trim().parse::<f64>().unwrap_or(0.0) as u64;
            *requests.0.entry(kind).or_default() += count;
        }
        Ok(requests)
    }

    /// Starts `who` on `ns`, whose `n` Widgets have no status yet, and measures until every
    /// one has its status.
    async fn throughput(&self, who: Who, ns: &str, n: usize) -> anyhow::Result<Figures> {
        let tracker = Tracker::start(self.widgets(ns), has_status).await?;
        let before = self.apiserver_requests().await?;
        let own_before = tracker.requests();
        let prober = Prober::start(&self.kubeconfig, ns).await?;
        let plane_before = plane_cpu_seconds();
        let started = Instant::now();
        let running = self.spawn(who, ns)?;
        let mut synced = None;
        let mut limits = Vec::new();
        let mut last_scrape = Instant::now();
        loop {
            if synced.is_none() && running.is_synced(n) {
                synced = Some(started.elapsed());
            }
            if tracker.done() >= n {
                break;
            }
            if let Some(port) = running.port
                && last_scrape.elapsed() >= Duration::from_millis(250)
            {
                last_scrape = Instant::now();
                limits.extend(host_metric(port, "reconciler_api_write_limit "));
                if std::env::var_os("BENCH_TRACE_LIMIT").is_some() {
                    eprintln!(
                        "{:6.2} s: limit {:?}, in flight {:?}, done {}",
                        started.elapsed().as_secs_f64(),
                        limits.last(),
                        host_metric(port, "reconciler_api_writes_in_flight "),
                        tracker.done()
                    );
                }
            }
            anyhow::ensure!(
                started.elapsed() < WAIT_LIMIT,
                "{}: only {} of {n} reconciled after {WAIT_LIMIT:?}",
                who.label(),
                tracker.done()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let wall = started.elapsed();
        let plane_cpu = plane_cpu_seconds() - plane_before;
        let (gets, probe_requests) = prober.stop().await;
        let cpu_done = cpu_seconds(running.pid());
        let rss = rss_kib(running.pid());
        // Every controller here reconciles each object a second time when it sees its own
        // status write, and writes again (a no-op for the API server). With a FIFO queue that
        // pass comes after the first, so it is not in the wall time: let it run until no
        // request has been made for 2 s, and count it.
        // (Scrapes of /metrics are not in `apiserver_request_total`.)
        let at_done = self.apiserver_requests().await?;
        let (mut last, mut quiet_since) = (at_done.total(), Instant::now());
        // The control plane's CPU until the poll that saw the last request: its idle 2 s after
        // it are left out.
        let mut plane_cpu_quiet = plane_cpu_seconds() - plane_before;
        while quiet_since.elapsed() < Duration::from_secs(2) && started.elapsed() < WAIT_LIMIT {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = self.apiserver_requests().await?.total();
            if now > last {
                quiet_since = Instant::now();
                plane_cpu_quiet = plane_cpu_seconds() - plane_before;
            }
            last = now;
        }
        let cpu = cpu_seconds(running.pid());
        running.stop();
        // The controller's watches are counted when they end.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = self.apiserver_requests().await?;
        // The bench's own: any re-watch meanwhile, and the second client's GETs.
        let own = tracker.requests() - own_before + probe_requests;
        tracker.stop();
        let kinds = at_done.since(&before);
        Ok(Figures {
            wall,
            synced,
            requests: Some(at_done.total().saturating_sub(before.total() + own)),
            requests_quiet: Some(after.total().saturating_sub(before.total() + own)),
            request_kinds: kinds,
            cpu: Some(cpu_done),
            cpu_quiet: Some(cpu),
            plane_cpu,
            plane_cpu_quiet: Some(plane_cpu_quiet),
            rss_kib: rss,
            gets,
            limits,
        })
    }

    /// The raw loop: every status patched by `writers` concurrent requests on one client, each
    /// writer one request after another (1: the classic loop; 4, 8, 16: where the API server's
    /// pace lies).
    async fn raw_loop(&self, ns: &str, writers: usize) -> anyhow::Result<Figures> {
        let api = self.widgets(ns);
        let objects = api.list(&ListParams::default()).await?.items;
        let prober = Prober::start(&self.kubeconfig, ns).await?;
        let plane_before = plane_cpu_seconds();
        let started = Instant::now();
        futures::stream::iter(&objects)
            .map(|object| {
                let api = api.clone();
                async move {
                    let patch: serde_json::Value = serde_json::from_str(
                        &logic::status_patch(&serde_json::to_string(object)?)
                            .map_err(anyhow::Error::msg)?,
                    )?;
                    api.patch_status(
                        object.metadata.name.as_deref().unwrap(),
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(writers)
            .try_collect::<Vec<()>>()
            .await?;
        let wall = started.elapsed();
        let plane_cpu = plane_cpu_seconds() - plane_before;
        Ok(Figures {
            wall,
            synced: None,
            requests: Some(objects.len() as u64 + 1),
            requests_quiet: None,
            request_kinds: Requests::default(),
            cpu: None,
            cpu_quiet: None,
            plane_cpu,
            plane_cpu_quiet: None,
            rss_kib: 0,
            gets: prober.stop().await.0,
            limits: Vec::new(),
        })
    }

    /// The second client's GET latencies on the idle server (no controller, no loop), for
    /// `secs` seconds.
    async fn idle_gets(&self, ns: &str, secs: u64) -> anyhow::Result<Vec<Duration>> {
        let prober = Prober::start(&self.kubeconfig, ns).await?;
        tokio::time::sleep(Duration::from_secs(secs)).await;
        Ok(prober.stop().await.0)
    }

    /// Starts `who` on `ns`, whose `n` Widgets have no status yet, and once it has written
    /// its first status changes Widget `w-00000`'s spec every second, `probes` times, timing
    /// each change until that Widget's `status.observedGeneration` reaches it. Returns each
    /// probe's latency and the time until every Widget had a status.
    async fn backlog(
        &self,
        who: Who,
        ns: &str,
        n: usize,
        probes: usize,
    ) -> anyhow::Result<(Vec<Duration>, Duration)> {
        const PROBE: &str = "w-00000";
        let api = self.widgets(ns);
        let tracker = Tracker::start(api.clone(), has_status).await?;
        // Every observed generation of the probe, with when the watch delivered it.
        let seen: Arc<parking_lot::Mutex<Vec<(i64, Instant)>>> = Arc::default();
        let watch = {
            let (api, seen) = (api.clone(), seen.clone());
            tokio::spawn(async move {
                let config = watcher::Config::default().fields(&format!("metadata.name={PROBE}"));
                let mut events = watcher(api, config).boxed();
                while let Some(event) = events.next().await {
                    if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event
                        && let Some(g) = o.data.pointer("/status/observedGeneration")
                    {
                        seen.lock().push((g.as_i64().unwrap_or(0), Instant::now()));
                    }
                }
            })
        };
        let started = Instant::now();
        let running = self.spawn(who, ns)?;
        while tracker.done() == 0 {
            anyhow::ensure!(
                started.elapsed() < WAIT_LIMIT,
                "{}: no status written",
                who.label()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let mut sent: Vec<(i64, Instant)> = Vec::with_capacity(probes);
        let mut all_done = None;
        let first = Instant::now();
        for i in 0..probes {
            let patch = json!({"spec": {"message": format!("probe {i}")}});
            let (params, patch) = (PatchParams::default(), Patch::Merge(&patch));
            let patched = retrying("probe patch", || api.patch(PROBE, &params, &patch)).await?;
            sent.push((patched.metadata.generation.unwrap_or(0), Instant::now()));
            let next = first + Duration::from_secs(i as u64 + 1);
            while Instant::now() < next {
                if all_done.is_none() && tracker.done() >= n {
                    all_done = Some(started.elapsed());
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        let latencies = loop {
            if all_done.is_none() && tracker.done() >= n {
                all_done = Some(started.elapsed());
            }
            let seen = seen.lock().clone();
            let latencies: Option<Vec<Duration>> = sent
                .iter()
                .map(|(generation, at)| {
                    seen.iter()
                        .find(|(g, when)| g >= generation && when >= at)
                        .map(|(_, when)| *when - *at)
                })
                .collect();
            if let (Some(latencies), Some(_)) = (latencies, all_done) {
                break latencies;
            }
            anyhow::ensure!(
                started.elapsed() < WAIT_LIMIT,
                "{}: probes or Widgets unreconciled after {WAIT_LIMIT:?}",
                who.label()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        running.stop();
        watch.abort();
        tracker.stop();
        Ok((latencies, all_done.unwrap_or_default()))
    }

    /// Two leader-elected hosts with the bench guest on `ns` (`n` Widgets), the standby `warm`
    /// or `cold`: once the leader has written a status and the standby is ready (warm: its
    /// cache synced), the leader is `SIGKILL`ed. Returns, from the kill, when the standby took the
    /// lease and when it wrote its first status.
    async fn failover(
        &self,
        ns: &str,
        n: usize,
        standby: &str,
        lease: Duration,
    ) -> anyhow::Result<(Duration, Duration)> {
        let dir = repo_root().join("target/bench-failover");
        let guests = dir.join("guests");
        let _ = std::fs::remove_dir_all(&guests);
        std::fs::create_dir_all(&guests)?;
        std::fs::copy(
            repo_root().join("target/guests/bench.wasm"),
            guests.join("bench.wasm"),
        )?;
        let config = dir.join("host.yaml");
        std::fs::write(
            &config,
            "guests:\n  bench:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n",
        )?;
        let lease_name = format!("failover-{standby}");
        let spawn = |identity: &str, port: u16| {
            live::host_run(
                &config,
                &guests,
                port,
                ns,
                &dir.join("compiled"),
                &self.kubeconfig,
            )
            .args(["--leader-elect", "--lease-namespace", ns, "--lease-name"])
            .arg(&lease_name)
            .arg("--lease-duration")
            .arg(format!("{}s", lease.as_secs()))
            .args(["--identity", identity, "--standby", standby])
            .stdout(Stdio::null())
            .spawn()
        };
        let writes = |port: u16| {
            host_metric(
                port,
                "reconciler_host_calls_total{guest=\"bench\",interface=\"cluster\",function=\"patch-status\",outcome=\"ok\"} ",
            )
            .unwrap_or(0.0)
        };
        let leads = |port: u16| host_metric(port, "reconciler_leader ") == Some(1.0);
        let (port_a, port_b) = (free_port()?, free_port()?);
        let mut a = spawn("a", port_a)?;
        let mut b: Option<Child> = None;
        let result = async {
            let started = Instant::now();
            while !(leads(port_a) && writes(port_a) > 0.0) {
                anyhow::ensure!(started.elapsed() < WAIT_LIMIT, "the leader never wrote");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            b = Some(spawn("b", port_b)?);
            let ready = |port: u16| match standby {
                "warm" => host_cached_widgets(port).is_some_and(|c| c >= n),
                _ => http_get(port, "/healthz").is_some(),
            };
            while !ready(port_b) {
                anyhow::ensure!(
                    started.elapsed() < WAIT_LIMIT,
                    "the standby never got ready"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            anyhow::ensure!(!leads(port_b), "the standby leads before the leader died");
            // A few renewals seen by the standby.
            tokio::time::sleep(Duration::from_secs(3)).await;
            let killed = Instant::now();
            a.kill()?;
            a.wait()?;
            let mut led = None;
            loop {
                if led.is_none() && leads(port_b) {
                    led = Some(killed.elapsed());
                }
                if writes(port_b) > 0.0 {
                    let wrote = killed.elapsed();
                    return Ok((led.unwrap_or(wrote), wrote));
                }
                anyhow::ensure!(
                    killed.elapsed() < WAIT_LIMIT,
                    "the standby never wrote after the leader died"
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        .await;
        let _ = a.kill();
        let _ = a.wait();
        if let Some(mut b) = b {
            let _ = b.kill();
            let _ = b.wait();
        }
        result
    }

    /// Resident memory of `who` on `ns` (`m` Widgets), `settle` after its cache synced.
    async fn memory(&self, who: Who, ns: &str, m: usize, settle: Duration) -> anyhow::Result<u64> {
        let started = Instant::now();
        let running = self.spawn(who, ns)?;
        while !running.is_synced(m) {
            anyhow::ensure!(
                started.elapsed() < WAIT_LIMIT,
                "{}: cache not synced with {m} objects after {WAIT_LIMIT:?}",
                who.label()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(settle).await;
        let rss = rss_kib(running.pid());
        running.stop();
        Ok(rss)
    }
}

/// `apiserver_request_total` by verb and resource.
#[derive(Default, Clone)]
struct Requests(BTreeMap<String, u64>);

impl Requests {
    fn total(&self) -> u64 {
        self.0.values().sum()
    }

    /// What was sent since `before`, by kind, the kinds that grew only.
    fn since(&self, before: &Self) -> Self {
        Self(
            self.0
                .iter()
                .filter_map(|(kind, n)| {
                    let grew = n.saturating_sub(before.0.get(kind).copied().unwrap_or(0));
                    (grew > 0).then(|| (kind.clone(), grew))
                })
                .collect(),
        )
    }
}

struct Figures {
    wall: Duration,
    synced: Option<Duration>,
    /// When the last status was written.
    requests: Option<u64>,
    /// Once no more requests came (the second, no-op pass included).
    requests_quiet: Option<u64>,
    /// The requests until the last status was written, by verb and resource (the bench's own
    /// included: its watch and the second client's GETs).
    request_kinds: Requests,
    cpu: Option<f64>,
    cpu_quiet: Option<f64>,
    /// CPU seconds of kube-apiserver and etcd until the last status was written.
    plane_cpu: f64,
    /// The same until the controller's last request (the second pass included).
    plane_cpu_quiet: Option<f64>,
    rss_kib: u64,
    /// The second client's GET latencies during the run.
    gets: Vec<Duration>,
    /// The host's `reconciler_api_write_limit`, sampled every 250 ms.
    limits: Vec<f64>,
}

/// The nearest-rank quantile `q` of `values` (sorted here), 0 when empty.
fn quantile(values: &[Duration], q: f64) -> Duration {
    let mut sorted = values.to_vec();
    sorted.sort();
    // Counts far below 2^52.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1)) - 1;
    sorted.get(i).copied().unwrap_or_default()
}

/// A second client, on a connection of its own, sending `GET`s for one `ConfigMap` every [`PROBE_EVERY`]
/// and timing each answer: what the controller under test does to everyone else's requests.
struct Prober {
    latencies: Arc<parking_lot::Mutex<Vec<Duration>>>,
    /// Its requests (the create included), which the controllers' request figures leave out.
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Prober {
    async fn start(kubeconfig: &Path, ns: &str) -> anyhow::Result<Self> {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig)?,
            &kube::config::KubeConfigOptions::default(),
        )
        .await?;
        let client = kube::Client::try_from(config)?;
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, ns);
        let probe = serde_json::from_value(json!({
            "metadata": {"name": "get-probe"}, "data": {"probe": "a small object"},
        }))?;
        match api.create(&PostParams::default(), &probe).await {
            Ok(_) | Err(kube::Error::Api(_)) => {}
            Err(e) => return Err(e.into()),
        }
        let latencies: Arc<parking_lot::Mutex<Vec<Duration>>> = Arc::default();
        let requests = Arc::new(AtomicU64::new(1));
        let (seen, sent_count) = (latencies.clone(), requests.clone());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(PROBE_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                sent_count.fetch_add(1, Ordering::SeqCst);
                let sent = Instant::now();
                if api.get("get-probe").await.is_ok() {
                    seen.lock().push(sent.elapsed());
                }
            }
        });
        Ok(Self {
            latencies,
            requests,
            task,
        })
    }

    /// Its latencies, and how many requests it sent.
    async fn stop(self) -> (Vec<Duration>, u64) {
        self.task.abort();
        let _ = self.task.await;
        let latencies = std::mem::take(&mut *self.latencies.lock());
        (latencies, self.requests.load(Ordering::SeqCst))
    }
}

fn has_status(o: &DynamicObject) -> bool {
    o.data.get("status").is_some_and(|s| !s.is_null())
}

/// Follows a namespace's Widgets with one list and a watch, counting those `done` holds for.
/// Counts its own requests, which the request figures leave out.
struct Tracker {
    done: Arc<AtomicUsize>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Tracker {
    async fn start(
        api: Api<DynamicObject>,
        done: impl Fn(&DynamicObject) -> bool + Send + 'static,
    ) -> anyhow::Result<Self> {
        let count = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(AtomicU64::new(1));
        let params = ListParams::default();
        let list = retrying("list", || api.list(&params)).await?;
        let mut state: HashMap<String, bool> = list
            .items
            .iter()
            .map(|o| (o.metadata.name.clone().unwrap_or_default(), done(o)))
            .collect();
        count.store(state.values().filter(|d| **d).count(), Ordering::SeqCst);
        let mut version = list.metadata.resource_version.unwrap_or_default();
        let (counter, sent) = (count.clone(), requests.clone());
        let task = tokio::spawn(async move {
            loop {
                sent.fetch_add(1, Ordering::SeqCst);
                let Ok(stream) = api
                    .watch(&WatchParams::default().timeout(290), &version)
                    .await
                else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let mut stream = stream.boxed();
                while let Some(Ok(event)) = stream.next().await {
                    match event {
                        WatchEvent::Added(o) | WatchEvent::Modified(o) => {
                            version = o.metadata.resource_version.clone().unwrap_or_default();
                            state.insert(o.metadata.name.clone().unwrap_or_default(), done(&o));
                        }
                        WatchEvent::Deleted(o) => {
                            state.remove(&o.metadata.name.clone().unwrap_or_default());
                        }
                        WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                        WatchEvent::Error(_) => break,
                    }
                    counter.store(state.values().filter(|d| **d).count(), Ordering::SeqCst);
                }
            }
        });
        Ok(Self {
            done: count,
            requests,
            task,
        })
    }

    fn done(&self) -> usize {
        self.done.load(Ordering::SeqCst)
    }

    fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }

    fn stop(self) {
        self.task.abort();
    }
}

// Counts, KiB and seconds, far below 2^52, become f64 only to be printed as rates and ratios.
#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
async fn orchestrate() -> anyhow::Result<()> {
    let sizes = env_list("BENCH_OBJECTS", &[1000, 10_000]);
    let rss_sizes = env_list("BENCH_RSS_OBJECTS", &[10_000, 50_000]);
    let settle = Duration::from_secs(env_usize("BENCH_SETTLE_SECS", 5) as u64);
    let hostile = std::env::var("BENCH_HOSTILE").as_deref() == Ok("1");
    let backlog_sizes = env_list("BENCH_BACKLOG_OBJECTS", &[50_000]);
    let probes = env_usize("BENCH_PROBES", 30);
    let sections = std::env::var("BENCH_SECTIONS")
        .unwrap_or_else(|_| "throughput,memory,reload,backlog".into());
    let section = |name: &str| sections.split(',').any(|s| s.trim() == name);
    let contestants = std::env::var("BENCH_CONTESTANTS").ok().map(|list| {
        named(
            &list,
            &throughput_contestants().map(Who::label).collect::<Vec<_>>(),
        )
    });
    let contestant = |label: &str| contestants.as_ref().is_none_or(|c| c.contains(&label));
    let bench = setup().await?;
    let cpus = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
    println!(
        "controller benchmark on this machine ({cpus} cores, shared by etcd, kube-apiserver, the controller and the bench)"
    );

    let writer_counts = env_list("BENCH_WRITERS", &[1, 4, 8, 16]);
    let runs = env_usize("BENCH_RUNS", 1).max(1);
    let mut table = Vec::new();
    for &n in sizes.iter().filter(|_| section("throughput")) {
        let mut whos: Vec<Who> = throughput_contestants()
            .filter(|who| contestant(who.label()))
            .collect();
        if hostile && n == sizes[0] {
            whos.push(Who::HostUnderAttack);
        }
        let entrants: Vec<Entrant> = writer_counts
            .iter()
            .map(|&w| Entrant::Raw(w))
            .chain(whos.into_iter().map(Entrant::Controller))
            .collect();
        let mut rows = Vec::new();
        let mut idle = Vec::new();
        for run in 0..runs {
            // Alternating order: a drift of the machine over a run favours no one.
            let order: Vec<&Entrant> = if run % 2 == 0 {
                entrants.iter().collect()
            } else {
                entrants.iter().rev().collect()
            };
            for entrant in order {
                let label = entrant.label();
                let figures = match *entrant {
                    Entrant::Raw(writers) => {
                        let ns = bench
                            .populated(&format!("raw-{writers}-{n}-r{run}"), n)
                            .await?;
                        if idle.is_empty() {
                            idle = bench.idle_gets(&ns, 10).await?;
                        }
                        let raw = bench.raw_loop(&ns, writers).await?;
                        bench.clean(&ns).await?;
                        raw
                    }
                    Entrant::Controller(who) => {
                        let ns = bench
                            .populated(&format!("{}-{n}-r{run}", who.slug()), n)
                            .await?;
                        if who == Who::HostUnderAttack {
                            start_attacks(&bench.client, &ns).await?;
                        }
                        let figures = bench.throughput(who, &ns, n).await?;
                        bench.clean(&ns).await?;
                        figures
                    }
                };
                eprintln!(
                    "N={n} run {} of {runs}: {label}: {:.2} s",
                    run + 1,
                    figures.wall.as_secs_f64()
                );
                rows.push(Row {
                    label,
                    run,
                    figures,
                });
            }
        }
        table.push((n, rows, idle));
    }

    let mut failovers = Vec::new();
    let lease = Duration::from_secs(env_usize("BENCH_LEASE", 15) as u64);
    for &n in env_list("BENCH_FAILOVER_OBJECTS", &[50_000])
        .iter()
        .filter(|_| section("failover"))
    {
        let ns = bench.populated(&format!("failover-{n}"), n).await?;
        for standby in ["warm", "cold"] {
            let figures = bench.failover(&ns, n, standby, lease).await?;
            eprintln!(
                "N={n} failover, {standby} standby: led after {:.2} s, first status after {:.2} s",
                figures.0.as_secs_f64(),
                figures.1.as_secs_f64()
            );
            failovers.push((n, standby, figures));
        }
        bench.clean(&ns).await?;
    }

    let mut memory = Vec::new();
    for &m in rss_sizes.iter().filter(|_| section("memory")) {
        let ns = bench.populated(&format!("rss-{m}"), m).await?;
        let mut row = Vec::new();
        for who in MEMORY_CONTESTANTS {
            let rss = bench.memory(who, &ns, m, settle).await?;
            eprintln!("RSS M={m} {}: {:.1} MiB", who.label(), rss as f64 / 1024.0);
            row.push((who, rss));
        }
        bench.clean(&ns).await?;
        memory.push((m, row));
    }

    let reload = if section("reload") {
        hot_reload(&bench).await?
    } else {
        Vec::new()
    };
    let mut backlog = Vec::new();
    for &n in backlog_sizes.iter().filter(|_| section("backlog")) {
        for (i, who) in [Who::Host { extra_guests: 0 }, Who::HostFifo, Who::ClientGo]
            .into_iter()
            .chain(ControllerRuntime::ALL.map(Who::ControllerRuntime))
            .enumerate()
        {
            let ns = bench.populated(&format!("backlog-{i}-{n}"), n).await?;
            let (latencies, wall) = bench.backlog(who, &ns, n, probes).await?;
            bench.clean(&ns).await?;
            eprintln!(
                "N={n} backlog {}: all reconciled in {:.1} s",
                who.label(),
                wall.as_secs_f64()
            );
            backlog.push((n, who, latencies, wall));
        }
    }

    println!();
    println!(
        "| N objects, no status yet → every status written | wall time | time vs best raw loop | second client's GET p99 (vs idle) | cache synced after | API requests: all written / until quiet | controller CPU: all written / until quiet | kube-apiserver + etcd CPU | cores busy | RSS when all written | host's write limit: median / max |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for (n, rows, idle) in &table {
        let idle_p99 = quantile(idle, 0.99).as_secs_f64();
        for Row {
            label,
            run,
            figures: f,
        } in rows
        {
            let label = if runs > 1 {
                format!("{label} (run {})", run + 1)
            } else {
                label.clone()
            };
            let p99 = quantile(&f.gets, 0.99).as_secs_f64();
            let mut limits = f.limits.clone();
            limits.sort_by(f64::total_cmp);
            println!(
                "| N = {n}: {label} | {:.2} s | {:.2}x | {:.1} ms ({:.1}x) | {} | {} | {} | {:.2} s | {:.2} of {cpus} | {} | {} |",
                f.wall.as_secs_f64(),
                f.wall.as_secs_f64() / best_raw(rows, *run),
                p99 * 1000.0,
                p99 / idle_p99,
                f.synced
                    .map_or("–".into(), |s| format!("{:.2} s", s.as_secs_f64())),
                match (f.requests, f.requests_quiet) {
                    (Some(r), Some(q)) => format!("{r} / {q}"),
                    (Some(r), None) => r.to_string(),
                    _ => "–".into(),
                },
                match (f.cpu, f.cpu_quiet) {
                    (Some(c), Some(q)) => format!("{c:.2} / {q:.2} s"),
                    _ => "–".into(),
                },
                f.plane_cpu,
                // The controller's and the control plane's CPU over the wall time (a raw
                // loop's own, in the bench process, is not counted).
                (f.plane_cpu + f.cpu.unwrap_or(0.0)) / f.wall.as_secs_f64(),
                if f.rss_kib == 0 {
                    "–".into()
                } else {
                    format!("{:.1} MiB", f.rss_kib as f64 / 1024.0)
                },
                match (limits.get(limits.len() / 2), limits.last()) {
                    (Some(median), Some(max)) => format!("{median:.0} / {max:.0}"),
                    _ => "–".into(),
                },
            );
        }
        for Row {
            label,
            run,
            figures: f,
        } in rows
        {
            if f.request_kinds.0.is_empty() {
                continue;
            }
            let kinds: Vec<String> = f
                .request_kinds
                .0
                .iter()
                .map(|(kind, count)| format!("{kind} {count}"))
                .collect();
            println!(
                "(N = {n}: {label}, run {}: requests until all written, by kind, the bench's own included: {})",
                run + 1,
                kinds.join(", ")
            );
        }
        println!(
            "(N = {n}: time vs best raw loop is this time over the fastest raw loop's of the same run; cores busy is the controller's and the control plane's CPU seconds over the wall time; the second client's GETs on the idle server: p50 {:.1} ms, p99 {:.1} ms, {} GETs)",
            quantile(idle, 0.5).as_secs_f64() * 1000.0,
            idle_p99 * 1000.0,
            idle.len()
        );
    }
    if runs > 1 {
        print_spread(&table, runs);
    }
    print_memory(&memory, settle);
    // Without the reload section (`BENCH_SECTIONS`), no table, not an empty one.
    if !reload.is_empty() {
        println!();
        println!(
            "| hot reload: new .wasm renamed into the guest directory → first status written by it | median | all trials |"
        );
        println!("|---|---|---|");
    }
    for (label, times) in &reload {
        let mut sorted = times.clone();
        sorted.sort();
        let all: Vec<String> = times
            .iter()
            .map(|t| format!("{:.0}", t.as_secs_f64() * 1000.0))
            .collect();
        println!(
            "| {label} | {:.0} ms | {} ms |",
            sorted
                .get(sorted.len() / 2)
                .map_or(0.0, |t| t.as_secs_f64() * 1000.0),
            all.join(", ")
        );
    }
    print_backlog(&backlog, probes);
    if !failovers.is_empty() {
        println!();
        println!(
            "| N objects; leader SIGKILLed (lease {} s) | standby | standby took the lease after | its first status write after | first write − lease |",
            lease.as_secs()
        );
        println!("|---|---|---|---|---|");
        for (n, standby, (led, wrote)) in &failovers {
            println!(
                "| N = {n} | {standby} | {:.2} s | {:.2} s | {:+.2} s |",
                led.as_secs_f64(),
                wrote.as_secs_f64(),
                wrote.as_secs_f64() - lease.as_secs_f64()
            );
        }
    }
    Ok(())
}

/// The fastest raw loop's wall time in run `run`.
fn best_raw(rows: &[Row], run: usize) -> f64 {
    rows.iter()
        .filter(|r| r.run == run && r.label.starts_with("raw loop"))
        .map(|r| r.figures.wall.as_secs_f64())
        .fold(f64::INFINITY, f64::min)
}

/// `median (min–max)` of `values`, each shown by `show`; the median of an even count is the
/// mean of the middle two.
fn spread(values: &[f64], show: impl Fn(f64) -> String) -> String {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return "–".into();
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    let median = if sorted.len().is_multiple_of(2) {
        f64::midpoint(sorted[mid - 1], sorted[mid])
    } else {
        sorted[mid]
    };
    format!(
        "**{}** ({}–{})",
        show(median),
        show(sorted[0]),
        show(sorted[sorted.len() - 1])
    )
}

/// The rows of each entrant, entrants in the order they first ran.
fn by_entrant(rows: &[Row]) -> Vec<(&str, Vec<&Row>)> {
    let mut entrants: Vec<(&str, Vec<&Row>)> = Vec::new();
    for row in rows {
        match entrants.iter_mut().find(|(label, _)| *label == row.label) {
            Some((_, mine)) => mine.push(row),
            None => entrants.push((&row.label, vec![row])),
        }
    }
    entrants
}

/// The repeated runs, one line per entrant and N: medians with min–max.
#[allow(clippy::cast_precision_loss)] // counts and sizes far below 2^52
fn print_spread(table: &[(usize, Vec<Row>, Vec<Duration>)], runs: usize) {
    println!();
    println!(
        "| N, entrant ({runs} runs in alternating order: median (min–max)) | wall time | vs best raw loop of its run | controller CPU per object, all written | until quiet | kube-apiserver + etcd CPU per written object, all written | until quiet | API requests, all written / until quiet | RSS when all written |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (n, rows, _) in table {
        let per_object = 1e6 / *n as f64;
        for (label, mine) in by_entrant(rows) {
            let of = |f: &dyn Fn(&Row) -> Option<f64>| -> Vec<f64> {
                mine.iter().filter_map(|r| f(r)).collect()
            };
            let secs = |v: f64| format!("{v:.2} s");
            let micros = |v: f64| format!("{v:.0} µs");
            let count = |v: f64| format!("{v:.0}");
            let requests = format!(
                "{} / {}",
                spread(&of(&|r| r.figures.requests.map(|q| q as f64)), count),
                spread(&of(&|r| r.figures.requests_quiet.map(|q| q as f64)), count)
            );
            println!(
                "| N = {n}: {label} | {} | {} | {} | {} | {} | {} | {requests} | {} |",
                spread(&of(&|r| Some(r.figures.wall.as_secs_f64())), secs),
                spread(
                    &of(&|r| Some(r.figures.wall.as_secs_f64() / best_raw(rows, r.run))),
                    |v| format!("{v:.2}x")
                ),
                spread(&of(&|r| r.figures.cpu.map(|c| c * per_object)), micros),
                spread(
                    &of(&|r| r.figures.cpu_quiet.map(|c| c * per_object)),
                    micros
                ),
                spread(&of(&|r| Some(r.figures.plane_cpu * per_object)), micros),
                spread(
                    &of(&|r| r.figures.plane_cpu_quiet.map(|c| c * per_object)),
                    micros
                ),
                spread(
                    &of(&|r| (r.figures.rss_kib > 0).then(|| r.figures.rss_kib as f64 / 1024.0)),
                    |v| format!("{v:.1} MiB")
                ),
            );
        }
    }
    print_requests_by_kind(table, runs);
}

/// The requests until all was written, by verb and resource, one line per entrant and N:
/// medians with min–max, the bench's own included (its watch, the second client's GETs).
#[allow(clippy::cast_precision_loss)] // counts far below 2^52
fn print_requests_by_kind(table: &[(usize, Vec<Row>, Vec<Duration>)], runs: usize) {
    println!();
    println!(
        "| N, entrant ({runs} runs: median (min–max)) | API requests until all written, by verb and resource (the bench's own included: its watch, the second client's GETs of a ConfigMap) |"
    );
    println!("|---|---|");
    for (n, rows, _) in table {
        for (label, mine) in by_entrant(rows) {
            let kinds: BTreeSet<&String> = mine
                .iter()
                .flat_map(|r| r.figures.request_kinds.0.keys())
                .collect();
            if kinds.is_empty() {
                continue;
            }
            // A kind a run did not send counts 0 in that run.
            let cells: Vec<String> = kinds
                .into_iter()
                .map(|kind| {
                    let counts: Vec<f64> = mine
                        .iter()
                        .map(|r| r.figures.request_kinds.0.get(kind).copied().unwrap_or(0) as f64)
                        .collect();
                    format!("{kind} {}", spread(&counts, |v| format!("{v:.0}")))
                })
                .collect();
            println!("| N = {n}: {label} | {} |", cells.join(", "));
        }
    }
}

/// The resident-memory table: a row per M, a column per contestant, and the host's ratio to
/// client-go's.
// KiB, far below 2^52.
#[allow(clippy::cast_precision_loss)]
fn print_memory(rows: &[(usize, Vec<(Who, u64)>)], settle: Duration) {
    if rows.is_empty() {
        return;
    }
    let labels: Vec<&str> = MEMORY_CONTESTANTS.iter().map(|w| w.label()).collect();
    println!();
    println!(
        "| objects cached (VmRSS {}s after sync) | {} | host / client-go |",
        settle.as_secs(),
        labels.join(" | ")
    );
    println!("|---|{}---|", "---|".repeat(labels.len()));
    for (m, row) in rows {
        let mib = |who: Who| {
            row.iter()
                .find(|(w, _)| *w == who)
                .map_or(0.0, |(_, kib)| *kib as f64 / 1024.0)
        };
        let cells: Vec<String> = MEMORY_CONTESTANTS
            .iter()
            .map(|&who| format!("{:.1} MiB", mib(who)))
            .collect();
        println!(
            "| {m} | {} | {:.2}x |",
            cells.join(" | "),
            mib(Who::Host { extra_guests: 0 }) / mib(Who::ClientGo)
        );
    }
}

/// The latency-under-backlog table: per controller, its probes' p50, p99 and max, and its
/// wall time against the host FIFO's at the same N.
fn print_backlog(rows: &[(usize, Who, Vec<Duration>, Duration)], probes: usize) {
    if rows.is_empty() {
        return;
    }
    println!();
    println!(
        "| N objects, no status yet; a spec change every 1 s ({probes} probes) → its status | p50 | p99 | max | every object reconciled | wall vs host FIFO |"
    );
    println!("|---|---|---|---|---|---|");
    for (n, who, latencies, wall) in rows {
        let mut sorted = latencies.clone();
        sorted.sort();
        let at = |q: f64| {
            // The nearest rank.
            #[allow(
                clippy::cast_possible_truncation,
                clippy::cast_sign_loss,
                clippy::cast_precision_loss
            )]
            let i = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
            sorted.get(i).map_or(0.0, Duration::as_secs_f64)
        };
        let fifo = rows
            .iter()
            .find(|(m, w, ..)| m == n && *w == Who::HostFifo)
            .map_or(1.0, |(.., w)| w.as_secs_f64());
        println!(
            "| N = {n}: {} | {:.3} s | {:.3} s | {:.3} s | {:.1} s | {:.2}x |",
            who.label(),
            at(0.5),
            at(0.99),
            at(1.0),
            wall.as_secs_f64(),
            wall.as_secs_f64() / fifo,
        );
    }
}

/// Hot reload of the widget guest: cold (fresh host, empty compile cache) and warm trials.
async fn hot_reload(bench: &Bench) -> anyhow::Result<Vec<(String, Vec<Duration>)>> {
    let cold_trials = env_usize("BENCH_COLD", 3);
    let warm_trials = env_usize("BENCH_WARM", 5);
    let ns = bench.namespace("reload").await?;
    let api = bench.widgets(&ns);
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        // Requeued every 10 ms: the host does not re-run every key when a version is swapped
        // in, so the new version's first reconcile is this object's next one (≤ 10 ms late).
        "metadata": {"name": "reload"}, "spec": {"requeueAfterMs": 10},
    }))?;
    api.create(&PostParams::default(), &widget).await?;
    let build = |v: u8| {
        repo_root().join(if v == 1 {
            "target/guests/widget.wasm"
        } else {
            "target/guests/widget-v2.wasm"
        })
    };
    let size = std::fs::metadata(build(2))?.len();
    let mut cold = Vec::new();
    let mut warm = Vec::new();
    for trial in 0..cold_trials.max(1) {
        let dir = repo_root().join("target/bench-host-reload");
        let _ = std::fs::remove_dir_all(&dir);
        let guests = dir.join("guests");
        std::fs::create_dir_all(&guests)?;
        std::fs::copy(build(1), guests.join("widget.wasm"))?;
        let port = free_port()?;
        let mut host = spawn_host(&bench.kubeconfig, &ns, port, &HostGuests::Widget, false)?;
        let result = async {
            // The first version's status first (its reconcile count grows with every trial).
            wait_version(&api, "1").await?;
            cold.push(swap(&api, &guests, &build(2), "2").await?);
            if trial == 0 {
                // Both versions now compiled: warm swaps, back and forth.
                for i in 0..warm_trials {
                    let v = if i % 2 == 0 { 1 } else { 2 };
                    warm.push(swap(&api, &guests, &build(v), &v.to_string()).await?);
                }
            }
            anyhow::Ok(())
        }
        .await;
        let _ = host.kill();
        let _ = host.wait();
        result?;
    }
    bench.clean(&ns).await?;
    Ok(vec![
        (
            format!("cold compile cache ({} KB guest, fresh host)", size / 1000),
            cold,
        ),
        (
            "warm compile cache (both versions compiled before)".into(),
            warm,
        ),
    ])
}

/// Follows the Widgets until one carries `status.guestVersion == version`.
async fn version_tracker(api: &Api<DynamicObject>, version: &str) -> anyhow::Result<Tracker> {
    let want = version.to_owned();
    Tracker::start(api.clone(), move |o| {
        o.data
            .pointer("/status/guestVersion")
            .and_then(|v| v.as_str())
            == Some(want.as_str())
    })
    .await
}

/// Polls `tracker` every `every` until it has seen its version, for at most two minutes.
async fn until_seen(tracker: &Tracker, every: Duration, what: &str) -> anyhow::Result<()> {
    let started = Instant::now();
    while tracker.done() == 0 {
        anyhow::ensure!(started.elapsed() < Duration::from_mins(2), "{what}");
        tokio::time::sleep(every).await;
    }
    Ok(())
}

async fn wait_version(api: &Api<DynamicObject>, version: &str) -> anyhow::Result<()> {
    let tracker = version_tracker(api, version).await?;
    let what = format!("the widget guest never wrote guestVersion {version}");
    until_seen(&tracker, Duration::from_millis(2), &what).await?;
    tracker.stop();
    Ok(())
}

/// Renames `build` into the guest directory as `widget.wasm` and times the first status
/// written by `version`.
async fn swap(
    api: &Api<DynamicObject>,
    guests: &Path,
    build: &Path,
    version: &str,
) -> anyhow::Result<Duration> {
    let tracker = version_tracker(api, version).await?;
    anyhow::ensure!(tracker.done() == 0, "already at version {version}");
    let staged = guests.join(".widget.wasm.new");
    std::fs::copy(build, &staged)?;
    let started = Instant::now();
    std::fs::rename(&staged, guests.join("widget.wasm"))?;
    let what = format!("version {version} never reconciled after the swap");
    until_seen(&tracker, Duration::from_millis(1), &what).await?;
    let took = started.elapsed();
    tracker.stop();
    Ok(took)
}

/// The hostile guest's attacks, each repeated for as long as the bench runs: the expensive ones
/// (a spin or a WASI sleep up to its deadline, floods up to its rates) and cheap refusals at a
/// high rate.
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

fn rss_kib(pid: u32) -> u64 {
    proc_status_kib(pid, "VmRSS:")
}

/// The value of the host's series that starts with `prefix` (name and labels, then a space).
fn host_metric(port: u16, prefix: &str) -> Option<f64> {
    http_get(port, "/metrics")?
        .lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The host's Widget cache size (`reconciler_informer_objects`), once `/readyz` says synced.
fn host_cached_widgets(port: u16) -> Option<usize> {
    http_get(port, "/readyz")?;
    let metrics = http_get(port, "/metrics")?;
    metrics
        .lines()
        .find(|l| l.starts_with("reconciler_informer_objects{") && l.contains("Widget"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

enum HostGuests {
    /// The bench guest, and that many copies of it under other names.
    Bench(u8),
    /// The bench guest, its concurrency capped at [`CONCURRENCY`] by its grant.
    BenchCapped,
    /// The bench guest and the hostile test guest, granted what an operator would give an
    /// untrusted guest: its own kind, two workers, tight limits.
    BenchAndHostile,
    /// The widget test guest (hot reload).
    Widget,
}

/// `fifo`: the host's work queues as one FIFO (`RECONCILER_HOST_QUEUE=fifo`).
fn spawn_host(
    kubeconfig: &Path,
    ns: &str,
    port: u16,
    which: &HostGuests,
    fifo: bool,
) -> anyhow::Result<Child> {
    let built = |name: &str| repo_root().join("target/guests").join(name);
    // The reload bench prepares its own directory; the others start from an empty one.
    let dir = repo_root().join(if matches!(which, HostGuests::Widget) {
        "target/bench-host-reload"
    } else {
        "target/bench-host"
    });
    let guests = dir.join("guests");
    if !matches!(which, HostGuests::Widget) {
        let _ = std::fs::remove_dir_all(&guests);
        std::fs::create_dir_all(&guests)?;
    }
    // Default settings: no limits in the grant, so the guest's concurrency is the adaptive
    // limit (its manifest leaves it at 0).
    let bench_grant = |name: &str| {
        format!(
            "  {name}:\n    read: [test.reconciler.dev/v1/Widget]\n    write: [test.reconciler.dev/v1/Widget/status]\n"
        )
    };
    let mut grants = "guests:\n".to_owned();
    match which {
        HostGuests::Bench(extra) => {
            std::fs::copy(built("bench.wasm"), guests.join("bench.wasm"))?;
            grants.push_str(&bench_grant("bench"));
            for i in 0..*extra {
                // A grant keyed `name@file-stem` runs that file as a guest of its own.
                let stem = format!("bench-copy-{i}");
                std::fs::copy(built("bench.wasm"), guests.join(format!("{stem}.wasm")))?;
                grants.push_str(&bench_grant(&format!("bench@{stem}")));
            }
        }
        HostGuests::BenchCapped => {
            std::fs::copy(built("bench.wasm"), guests.join("bench.wasm"))?;
            grants.push_str(&bench_grant("bench").replace(
                "/status]\n",
                &["/status]\n    limits: {concurrency: ", &CONCURRENCY.to_string(), "}\n"].concat(),
            ));
        }
        HostGuests::BenchAndHostile => {
            std::fs::copy(built("bench.wasm"), guests.join("bench.wasm"))?;
            std::fs::copy(built("hostile.wasm"), guests.join("hostile.wasm"))?;
            grants.push_str(&bench_grant("bench"));
            grants.push_str("  hostile:\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap]\n    limits: {concurrency: 2, deadline: 1s, memoryMiB: 32, writesPerSecond: 20, cpuMillicores: 200}\n");
        }
        HostGuests::Widget => grants.push_str(
            "  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n",
        ),
    }
    let config = dir.join("host.yaml");
    std::fs::write(&config, grants)?;
    let mut command = live::host_run(
        &config,
        &guests,
        port,
        ns,
        &dir.join("compiled"),
        kubeconfig,
    );
    if fifo {
        command.env(reconciler_host::controller::QUEUE_ENV, "fifo");
    }
    Ok(command.stdout(Stdio::null()).spawn()?)
}

/// The kube-rs baseline: a `Controller` over the same kind, the same logic, the same write.
/// Prints `synced` once its store has the initial list.
fn native_controller_process() -> anyhow::Result<()> {
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let client = kube::Client::try_default().await?;
        let ns = std::env::var("BENCH_NAMESPACE")?;
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &widget_resource());
        let context = Arc::new(api.clone());
        let controller = Controller::new_with(api, watcher::Config::default(), widget_resource())
            .with_config(Config::default().concurrency(CONCURRENCY));
        let store = controller.store();
        // Polled, not awaited once: the store's readiness is a oneshot that keeps one waker, and
        // the controller itself waits on it too.
        tokio::spawn(async move {
            while !matches!(
                tokio::time::timeout(Duration::from_millis(20), store.wait_until_ready()).await,
                Ok(Ok(()))
            ) {}
            println!("synced");
        });
        controller
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
