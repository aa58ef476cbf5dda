//! Running one robustness run: a private control plane with an audit log, host replicas behind
//! relays, the widget guest journalling, a workload that keeps creating, changing and deleting
//! Widgets, the faults of the seed's schedule, then convergence, the history and the check.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::check::{Report, check};
use super::history::{
    COMPETITOR_AGENT, FinalObject, History, Incarnation, Meta, Mode, WORKLOAD_AGENT, read_audit,
    read_journal,
};
use super::relay::{Mode as RelayMode, Relay};
use super::schedule::{Fault, FaultKind, Plan, Target, schedule};
use crate::control_plane::{PrivateControlPlane, Restart};
use crate::host::{build_host_and_guests, deployed_file_name, guest_component};
use crate::manifests::{apply_crd_file, widgets};
use crate::paths::{repo_root, target_dir};
use crate::wait::wait_until;

/// The namespace everything of a run lives in (the audit policy names it).
pub const NAMESPACE: &str = "robustness";
/// The election lease, or the ring's name.
pub const LEASE_NAME: &str = "robustness";
/// Each Widget's reconciles trap this often (`spec.trapPercent`).
pub const TRAP_PERCENT: u64 = 5;

/// Every write to Widgets and Leases in the run's namespace, with request and response bodies
/// (the response's resourceVersion orders writes; its body says what was written); nothing else.
const AUDIT_POLICY: &str = r#"apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: RequestResponse
    verbs: [create, update, patch, delete]
    namespaces: [robustness]
    resources:
      - group: test.reconciler.dev
        resources: [widgets, widgets/status]
      - group: coordination.k8s.io
        resources: [leases]
  - level: None
"#;

/// What to run.
#[derive(Clone, Debug)]
pub struct Profile {
    pub seed: u64,
    pub mode: Mode,
    /// How long faults are injected while the workload runs.
    pub duration: Duration,
    /// Widgets created before the faults begin.
    pub objects: usize,
    /// Workload changes per second (creates, spec changes, deletes).
    pub rate: f64,
    pub lease: Duration,
    /// The fault kinds drawn from.
    pub kinds: Vec<FaultKind>,
    /// How long after the last fault every object must have converged.
    pub convergence_bound: Duration,
    /// Where the run's files go.
    pub out: PathBuf,
    /// The deliberately broken build: the write fence never closes
    /// (`RECONCILER_HOST_TEST_BREAK_FENCE=1`).
    pub break_fence: bool,
}

impl Profile {
    pub fn new(seed: u64, mode: Mode, duration: Duration) -> Self {
        Self {
            seed,
            mode,
            duration,
            objects: 200,
            rate: 20.0,
            lease: Duration::from_secs(6),
            kinds: FaultKind::ALL.to_vec(),
            convergence_bound: Duration::from_secs(120),
            out: target_dir()
                .join("robustness")
                .join(format!("{}-seed-{seed}", mode_name(mode))),
            break_fence: false,
        }
    }

    pub fn replicas(&self) -> Vec<String> {
        match self.mode {
            Mode::Leader => vec!["a".into(), "b".into()],
            Mode::Sharded => vec!["a".into(), "b".into(), "c".into()],
        }
    }

    pub fn plan(&self) -> Plan {
        Plan {
            seed: self.seed,
            mode: self.mode,
            duration: self.duration,
            lease: self.lease,
            replicas: self.replicas(),
            kinds: self.kinds.clone(),
        }
    }
}

pub fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Leader => "leader",
        Mode::Sharded => "sharded",
    }
}

/// One run, start to end: returns the history (also saved as `history.json` in `out`) and the
/// checker's report (`report.json`).
pub async fn run(profile: &Profile) -> Result<(History, Report)> {
    build_host_and_guests()?;
    let faults = schedule(&profile.plan());
    let _ = std::fs::remove_dir_all(&profile.out);
    std::fs::create_dir_all(&profile.out)?;
    let say = |line: String| {
        eprintln!("robustness seed {}: {line}", profile.seed);
    };
    say(format!(
        "{} mode, {} s, {} objects, {} changes/s, lease {} s; schedule:",
        mode_name(profile.mode),
        profile.duration.as_secs(),
        profile.objects,
        profile.rate,
        profile.lease.as_secs()
    ));
    for f in &faults {
        eprintln!("    {f}");
    }
    std::fs::write(
        profile.out.join("schedule.json"),
        serde_json::to_vec_pretty(&faults)?,
    )?;

    let policy = profile.out.join("audit-policy.yaml");
    std::fs::write(&policy, AUDIT_POLICY)?;
    let plane = PrivateControlPlane::start_audited("robustness", &policy).await?;
    let admin = plane.client().await?;
    apply_crd_file(&admin, "guests/testing/widget/crd.yaml").await?;
    Api::<Namespace>::all(admin.clone())
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NAMESPACE}}))?,
        )
        .await?;
    let workload_client = client_as(plane.kubeconfig(), WORKLOAD_AGENT).await?;

    let started = SystemTime::now();
    let mut replicas = Vec::new();
    for identity in profile.replicas() {
        replicas.push(Replica::start(profile, &plane, &identity).await?);
    }
    let widgets = widgets(&workload_client, NAMESPACE);
    let names: Vec<String> = (0..profile.objects).map(|i| format!("w-{i:05}")).collect();
    for name in &names {
        widgets
            .create(&PostParams::default(), &widget(name))
            .await
            .with_context(|| format!("creating Widget {name}"))?;
    }
    let initial = wait_converged(&admin, Duration::from_secs(180)).await;
    if initial.is_none() {
        bail!(
            "the {} initial Widgets did not converge within 180 s (see {})",
            profile.objects,
            profile.out.display()
        );
    }
    for r in &mut replicas {
        r.current.rss_before = r.rss();
    }

    // The faulty phase: the workload and both lanes of faults at once.
    let faults_from = SystemTime::now();
    say(format!(
        "initial objects converged; faults for {} s",
        profile.duration.as_secs()
    ));
    let stop = Arc::new(AtomicBool::new(false));
    let workload = tokio::spawn(run_workload(
        widgets.clone(),
        names,
        profile.seed,
        profile.rate,
        stop.clone(),
    ));
    let dirs: Vec<PathBuf> = replicas.iter().map(|r| r.dir.clone()).collect();
    let origin = Instant::now();
    let mut records = Vec::new();
    let (cluster_lane, replica_lane): (Vec<Fault>, Vec<Fault>) =
        faults.iter().cloned().partition(|f| f.target.is_none());
    let cluster = {
        let plane_ctx = ClusterLane {
            plane: &plane,
            dirs: &dirs,
            profile,
        };
        let replica_ctx = ReplicaLane {
            replicas: &mut replicas,
            admin: &admin,
        };
        let (a, b) = tokio::join!(
            plane_ctx.run(cluster_lane, origin),
            replica_ctx.run(replica_lane, origin)
        );
        let mut a = a?;
        a.extend(b?);
        a
    };
    records.extend(cluster);
    records.sort_by_key(|r: &super::history::FaultRecord| r.index);
    let remaining = profile.duration.saturating_sub(origin.elapsed());
    tokio::time::sleep(remaining).await;
    stop.store(true, Ordering::SeqCst);
    let changes = workload.await.context("the workload task")?;
    let faults_over = SystemTime::now();
    say(format!(
        "faults over ({} injected, {changes} workload changes); waiting for convergence",
        records.len()
    ));

    let converged_at = wait_converged(&admin, profile.convergence_bound).await;
    for r in &mut replicas {
        r.current.rss_after = r.rss();
    }
    let final_objects = final_objects(&admin).await?;
    let mut incarnations = Vec::new();
    for mut r in replicas {
        r.terminate().await;
        incarnations.append(&mut r.past);
    }
    let audit = profile.out.join("audit.log");
    std::fs::copy(plane.audit_log(), &audit).context("copying the audit log")?;
    drop(plane);

    let mut reconciles = Vec::new();
    for i in &mut incarnations {
        let log = profile.out.join(&i.log);
        reconciles.extend(read_journal(&log, i)?);
        i.relists = count_relists(&log);
    }
    let history = History {
        meta: Meta {
            seed: profile.seed,
            mode: profile.mode,
            namespace: NAMESPACE.into(),
            lease_name: LEASE_NAME.into(),
            lease_duration_secs: profile.lease.as_secs(),
            objects: profile.objects,
            started,
            faults_from,
            faults_over,
            converged_at,
            convergence_bound_secs: profile.convergence_bound.as_secs(),
        },
        faults: records,
        incarnations,
        reconciles,
        writes: read_audit(&audit, NAMESPACE)?,
        final_objects,
    };
    std::fs::write(
        profile.out.join("history.json"),
        serde_json::to_vec(&history)?,
    )?;
    let report = check(&history);
    std::fs::write(
        profile.out.join("report.json"),
        serde_json::to_vec_pretty(&report)?,
    )?;
    Ok((history, report))
}

/// How many times the incarnation's informers relisted after a 410 Gone (its debug lines).
fn count_relists(log: &Path) -> u32 {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let n = text.matches("(410 Gone); relisting").count();
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The Widget the workload creates: journalling, trapping now and then, writing its status
/// with the resourceVersion it read (so the competing writer makes it conflict).
fn widget(name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1",
        "kind": "Widget",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"journal": true, "trapPercent": TRAP_PERCENT, "optimisticStatus": true, "touch": 0},
    }))
    .expect("a valid Widget")
}

/// A client whose requests carry `agent` as their user agent, so the audit log tells the
/// harness's writers apart.
async fn client_as(kubeconfig: &Path, agent: &'static str) -> Result<kube::Client> {
    let kubeconfig = Kubeconfig::read_from(kubeconfig)?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(agent),
    ));
    Ok(kube::Client::try_from(config)?)
}

/// Polls until every Widget's status shows its generation and none is being deleted; when.
async fn wait_converged(client: &kube::Client, bound: Duration) -> Option<SystemTime> {
    let widgets = widgets(client, NAMESPACE);
    let deadline = Instant::now() + bound;
    while Instant::now() < deadline {
        if let Ok(list) = widgets.list(&ListParams::default()).await
            && list.items.iter().all(|o| {
                o.metadata.deletion_timestamp.is_none()
                    && o.data["status"]["observedGeneration"].as_i64() == o.metadata.generation
            })
        {
            return Some(SystemTime::now());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    None
}

async fn final_objects(client: &kube::Client) -> Result<Vec<FinalObject>> {
    let list = widgets(client, NAMESPACE)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .map(|o| FinalObject {
            name: o.metadata.name.clone().unwrap_or_default(),
            uid: o.metadata.uid.clone().unwrap_or_default(),
            generation: o.metadata.generation.unwrap_or_default(),
            observed_generation: o.data["status"]["observedGeneration"].as_i64(),
            deleting: o.metadata.deletion_timestamp.is_some(),
        })
        .collect())
}

/// Creates, changes and deletes Widgets at `rate` per second until `stop`: 70 % spec changes,
/// 15 % deletions, 15 % new Widgets. Returns how many changes the API server accepted.
async fn run_workload(
    widgets: Api<DynamicObject>,
    mut live: Vec<String>,
    seed: u64,
    rate: f64,
    stop: Arc<AtomicBool>,
) -> usize {
    // Its own stream, apart from the schedule's: the schedule stays the seed's alone.
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x005e_ed0f_10ad);
    let mut next = live.len();
    let mut touch = 0_u64;
    let mut accepted = 0;
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    while !stop.load(Ordering::SeqCst) {
        tick.tick().await;
        let roll: f64 = rng.random();
        let result = if roll < 0.15 || live.is_empty() {
            let name = format!("w-{next:05}");
            next += 1;
            let r = widgets.create(&PostParams::default(), &widget(&name)).await;
            if r.is_ok() {
                live.push(name);
            }
            r.map(drop)
        } else if roll < 0.30 {
            let name = live.swap_remove(rng.random_range(0..live.len()));
            widgets
                .delete(&name, &DeleteParams::default())
                .await
                .map(drop)
        } else {
            let name = &live[rng.random_range(0..live.len())];
            touch += 1;
            widgets
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"spec": {"touch": touch}})),
                )
                .await
                .map(drop)
        };
        if result.is_ok() {
            accepted += 1;
        }
    }
    accepted
}

// ---------------------------------------------------------------------------------------------
// Replicas

/// One host replica: its directory, its relay, its process and its incarnations.
struct Replica {
    identity: String,
    dir: PathBuf,
    relay: Arc<Relay>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    port: u16,
    current: Incarnation,
    past: Vec<Incarnation>,
    out: PathBuf,
}

impl Replica {
    async fn start(profile: &Profile, plane: &PrivateControlPlane, identity: &str) -> Result<Self> {
        let relay = Arc::new(Relay::start(plane.apiserver_addr()?).await?);
        let dir = profile.out.join(format!("replica-{identity}"));
        let guests = dir.join("guests");
        std::fs::create_dir_all(&guests)?;
        std::fs::copy(
            guest_component("widget")?,
            guests.join(deployed_file_name("widget").await?),
        )?;
        std::fs::write(dir.join("host.yaml"), host_config(0, false))?;
        // The replica reaches kube-apiserver only through its relay.
        let kubeconfig = std::fs::read_to_string(plane.kubeconfig())?;
        let api = plane.apiserver_addr()?;
        let relayed = kubeconfig.replace(
            &format!("https://{api}"),
            &format!("https://127.0.0.1:{}", relay.port()),
        );
        anyhow::ensure!(relayed != kubeconfig, "the kubeconfig does not name {api}");
        std::fs::write(dir.join("kubeconfig"), relayed)?;
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let mut args: Vec<String> = [
            "run",
            "--config",
            &dir.join("host.yaml").to_string_lossy(),
            "--guests",
            &guests.to_string_lossy(),
            "--listen",
            &format!("127.0.0.1:{port}"),
            "--watch-namespace",
            NAMESPACE,
            "--identity",
            identity,
            "--lease-name",
            LEASE_NAME,
            "--lease-namespace",
            NAMESPACE,
            "--lease-duration",
            &format!("{}s", profile.lease.as_secs()),
            "--cache-dir",
            &target_dir().join("test-compile-cache").to_string_lossy(),
        ]
        .map(String::from)
        .to_vec();
        match profile.mode {
            Mode::Leader => args.push("--leader-elect".into()),
            Mode::Sharded => args.extend(["--shards".into(), "auto".into()]),
        }
        let mut env = vec![
            (
                "KUBECONFIG".to_owned(),
                dir.join("kubeconfig").to_string_lossy().into_owned(),
            ),
            ("RECONCILER_LOG_FORMAT".to_owned(), "json".to_owned()),
            // The informers' watch lines say when a 410 Gone made them relist.
            (
                "RUST_LOG".to_owned(),
                "info,reconciler_host::cluster::informers::watch=debug".to_owned(),
            ),
        ];
        if profile.break_fence {
            env.push((
                reconciler_host::replicas::fence::BREAK_FENCE_ENV.to_owned(),
                "1".to_owned(),
            ));
        }
        let mut replica = Self {
            identity: identity.to_owned(),
            dir,
            relay,
            args,
            env,
            child: None,
            port,
            current: Incarnation::new(identity, 0, String::new()),
            past: Vec::new(),
            out: profile.out.clone(),
        };
        replica.spawn()?;
        replica.wait_healthy().await?;
        Ok(replica)
    }

    /// Starts a new incarnation (the first, or after a kill).
    fn spawn(&mut self) -> Result<()> {
        let index = u32::try_from(self.past.len())?;
        let log_name = format!("replica-{}.{index}.log", self.identity);
        let log = std::fs::File::create(self.out.join(&log_name))?;
        let child = Command::new(host_binary()?)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .current_dir(repo_root())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting reconciler-host")?;
        self.child = Some(child);
        self.current = Incarnation::new(&self.identity, index, log_name);
        Ok(())
    }

    async fn wait_healthy(&self) -> Result<()> {
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        wait_until(
            &format!("replica {} to serve /healthz", self.identity),
            Duration::from_secs(60),
            || async {
                let out = tokio::process::Command::new("curl")
                    .args(["-sf", "--max-time", "2", &url])
                    .output()
                    .await?;
                anyhow::ensure!(out.status.success(), "not yet");
                Ok(())
            },
        )
        .await
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn signal(&self, signal: &str) {
        if let Some(pid) = self.pid() {
            let _ = Command::new("kill")
                .args([&format!("-{signal}"), &pid.to_string()])
                .status();
        }
    }

    /// Ends the current incarnation with SIGKILL.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.current.ended = Some(SystemTime::now());
        self.past.push(self.current.clone());
    }

    /// SIGTERM at the end of the run (a replica still paused is resumed first).
    async fn terminate(&mut self) {
        self.signal("CONT");
        self.signal("TERM");
        if let Some(mut child) = self.child.take() {
            let waited = tokio::task::spawn_blocking(move || {
                for _ in 0..300 {
                    if let Ok(Some(_)) = child.try_wait() {
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            });
            let _ = waited.await;
        }
        self.current.ended = Some(SystemTime::now());
        self.past.push(self.current.clone());
    }

    /// Resident memory, from /proc.
    fn rss(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()?;
        Some(kib * 1024)
    }
}

/// The host binary this process's runs use: a copy taken once, so that a build during a long
/// campaign never changes the host under it.
fn host_binary() -> Result<PathBuf> {
    static COPY: std::sync::OnceLock<std::result::Result<PathBuf, String>> =
        std::sync::OnceLock::new();
    COPY.get_or_init(|| {
        let dir = target_dir().join("robustness");
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        // Copies left by earlier processes that are gone.
        for entry in std::fs::read_dir(&dir)
            .map_err(|e| e.to_string())?
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(pid) = name.strip_prefix(".reconciler-host-")
                && !Path::new(&format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        let copy = dir.join(format!(".reconciler-host-{}", std::process::id()));
        std::fs::copy(target_dir().join("debug/reconciler-host"), &copy)
            .map_err(|e| format!("copying the host binary: {e}"))?;
        Ok(copy)
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

impl Drop for Replica {
    /// A run that ends early (an error, a panic) leaves no replica behind.
    fn drop(&mut self) {
        self.signal("CONT");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The replicas' host.yaml; `variant` changes the limits (a configuration reload restarts the
/// guest's controller). Log and event rates no journal line can exceed. With `rollout`, a plan
/// that walks a new version through a shadow step and a canary of 50 % (3 s each; the p99 gate
/// loosened for a loaded machine): a swap of the guest file then rolls out. The two builds
/// write different statuses (`guestVersion`), so an odd variant's agreement gate rolls the new
/// one back in shadow and an even variant's (agreement off) lets it through to a promotion.
fn host_config(variant: u32, rollout: bool) -> String {
    let plan = if rollout {
        let agreement = if variant.is_multiple_of(2) { 0.0 } else { 0.99 };
        format!(
            "    rollout:\n      steps: [{{shadow: {{duration: 3s, minReconciles: 5}}}}, {{canary: {{percent: 50, duration: 3s, minReconciles: 5}}}}]\n      gates: {{minSample: 5, minAgreement: {agreement}, maxP99Ratio: 10, p99Slack: 1s}}\n"
        )
    } else {
        String::new()
    };
    format!(
        r"guests:
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
    limits: {{logLinesPerSecond: 100000, logBurst: {}, eventsPerSecond: 10000, eventBurst: 10000}}
{plan}",
        100_000 + variant
    )
}

// ---------------------------------------------------------------------------------------------
// The lanes

struct ClusterLane<'a> {
    plane: &'a PrivateControlPlane,
    dirs: &'a [PathBuf],
    profile: &'a Profile,
}

impl ClusterLane<'_> {
    async fn run(
        &self,
        faults: Vec<Fault>,
        origin: Instant,
    ) -> Result<Vec<super::history::FaultRecord>> {
        let mut records = Vec::new();
        let mut version = 1;
        let mut variant = 0;
        for fault in faults {
            tokio::time::sleep_until((origin + fault.at).into()).await;
            let start = SystemTime::now();
            let detail = match fault.kind {
                FaultKind::ApiserverKill => {
                    self.plane
                        .restart_apiserver(Restart {
                            hard: true,
                            pause: fault.hold,
                            compact: false,
                        })
                        .await?;
                    "kube-apiserver SIGKILL, restarted".to_owned()
                }
                FaultKind::EtcdKill => {
                    self.plane
                        .restart_etcd(Restart {
                            hard: true,
                            pause: fault.hold,
                            compact: false,
                        })
                        .await?;
                    "etcd SIGKILL, restarted".to_owned()
                }
                FaultKind::Compaction => {
                    // Compacted while kube-apiserver is down, after one write of its own: the
                    // restarted watch cache starts past every watch's last revision, so each
                    // one gets 410 Gone and relists. (With the cache up, a compaction alone is
                    // invisible to watches within its window.)
                    self.plane
                        .restart_apiserver(Restart {
                            compact: true,
                            ..Restart::default()
                        })
                        .await?;
                    "kube-apiserver stopped, etcd compacted, kube-apiserver started (watch cache rebuilt)".to_owned()
                }
                FaultKind::Competitor => {
                    let n = compete(self.plane.kubeconfig(), fault.hold, self.profile.seed).await?;
                    format!("{n} competing status patches")
                }
                FaultKind::HotSwap => {
                    version = 3 - version;
                    let component = if version == 2 { "widget-v2" } else { "widget" };
                    for dir in self.dirs {
                        put_guest(dir, component).await?;
                    }
                    format!("every replica's guest replaced by {component}")
                }
                FaultKind::ConfigReload => {
                    variant += 1;
                    for dir in self.dirs {
                        write_atomically(&dir.join("host.yaml"), &host_config(variant, false))?;
                    }
                    format!("host.yaml rewritten (variant {variant})")
                }
                FaultKind::Rollout => {
                    // The plan first (a new grant restarts the controller), then the other
                    // build: the swap rolls out instead of switching.
                    variant += 1;
                    for dir in self.dirs {
                        write_atomically(&dir.join("host.yaml"), &host_config(variant, true))?;
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    version = 3 - version;
                    let component = if version == 2 { "widget-v2" } else { "widget" };
                    for dir in self.dirs {
                        put_guest(dir, component).await?;
                    }
                    format!(
                        "host.yaml with a rollout plan (variant {variant}), then every replica's guest replaced by {component}"
                    )
                }
                other => bail!("{} is not a cluster fault", other.name()),
            };
            records.push(super::history::FaultRecord {
                index: fault.index,
                kind: fault.kind.name().into(),
                target: None,
                start,
                end: SystemTime::now(),
                detail,
            });
        }
        Ok(records)
    }
}

struct ReplicaLane<'a> {
    replicas: &'a mut Vec<Replica>,
    admin: &'a kube::Client,
}

impl ReplicaLane<'_> {
    async fn run(
        self,
        faults: Vec<Fault>,
        origin: Instant,
    ) -> Result<Vec<super::history::FaultRecord>> {
        let mut records = Vec::new();
        for fault in faults {
            tokio::time::sleep_until((origin + fault.at).into()).await;
            let target = self.resolve(fault.target.as_ref()).await;
            let Some(i) = self.replicas.iter().position(|r| r.identity == target) else {
                bail!("no replica {target}");
            };
            let start = SystemTime::now();
            let detail = {
                let replica = &mut self.replicas[i];
                match fault.kind {
                    FaultKind::ReplicaKill => {
                        replica.kill();
                        tokio::time::sleep(fault.hold).await;
                        replica.spawn()?;
                        replica.wait_healthy().await?;
                        format!("{target} SIGKILL, restarted")
                    }
                    FaultKind::ReplicaPause => {
                        replica.signal("STOP");
                        let stopped = SystemTime::now();
                        tokio::time::sleep(fault.hold).await;
                        replica.signal("CONT");
                        replica.current.pauses.push((stopped, SystemTime::now()));
                        format!("{target} SIGSTOP, SIGCONT")
                    }
                    FaultKind::Blackhole => {
                        replica.relay.set_mode(RelayMode::Blackhole);
                        tokio::time::sleep(fault.hold).await;
                        replica.relay.set_mode(RelayMode::Pass);
                        format!("{target} cut off from kube-apiserver")
                    }
                    FaultKind::Delay => {
                        replica.relay.set_mode(RelayMode::Delay(fault.delay));
                        tokio::time::sleep(fault.hold).await;
                        replica.relay.set_mode(RelayMode::Pass);
                        format!("{target}'s traffic delayed {} ms", fault.delay.as_millis())
                    }
                    FaultKind::Drop => {
                        replica.relay.cut_all();
                        tokio::time::sleep(fault.hold).await;
                        replica.relay.cut_all();
                        format!("{target}'s connections cut, twice")
                    }
                    other => bail!("{} is not a replica fault", other.name()),
                }
            };
            records.push(super::history::FaultRecord {
                index: fault.index,
                kind: fault.kind.name().into(),
                target: Some(target),
                start,
                end: SystemTime::now(),
                detail,
            });
        }
        Ok(records)
    }

    /// The replica a fault hits: in leader mode, whoever holds the lease now (or does not).
    async fn resolve(&self, target: Option<&Target>) -> String {
        let holder = async {
            Api::<Lease>::namespaced(self.admin.clone(), NAMESPACE)
                .get_opt(LEASE_NAME)
                .await
                .ok()
                .flatten()
                .and_then(|l| l.spec?.holder_identity)
        };
        match target {
            Some(Target::Replica(r)) => r.clone(),
            Some(Target::Leader) => match holder.await {
                Some(h) => h,
                None => self.replicas[0].identity.clone(),
            },
            Some(Target::Standby) | None => {
                let holder = holder.await;
                self.replicas
                    .iter()
                    .find(|r| Some(&r.identity) != holder.as_ref())
                    .map_or_else(|| self.replicas[0].identity.clone(), |r| r.identity.clone())
            }
        }
    }
}

/// Writes a file by rename, as deployments do: a reader never sees it half-written.
fn write_atomically(path: &Path, text: &str) -> Result<()> {
    let tmp = path.with_extension("tmp");
    let mut file = std::fs::File::create(&tmp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    std::fs::rename(&tmp, path)?;
    Ok(())
}

async fn put_guest(dir: &Path, component: &str) -> Result<()> {
    let guests = dir.join("guests");
    let name = deployed_file_name("widget").await?;
    let tmp = guests.join(format!(".{name}.tmp"));
    std::fs::copy(guest_component(component)?, &tmp)?;
    std::fs::rename(&tmp, guests.join(name))?;
    Ok(())
}

/// Patches `status.competitor` of random Widgets for `hold` (about 20 a second), with a client
/// of its own; returns how many the API server accepted.
async fn compete(kubeconfig: &Path, hold: Duration, seed: u64) -> Result<usize> {
    let client = client_as(kubeconfig, COMPETITOR_AGENT).await?;
    let widgets = widgets(&client, NAMESPACE);
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x00c0_4e7e);
    let names: Vec<String> = widgets
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter_map(|o| o.metadata.name)
        .collect();
    if names.is_empty() {
        return Ok(0);
    }
    let accepted = AtomicUsize::new(0);
    let until = Instant::now() + hold;
    let mut n = 0_u64;
    while Instant::now() < until {
        n += 1;
        let name = &names[rng.random_range(0..names.len())];
        if widgets
            .patch_status(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"competitor": n}})),
            )
            .await
            .is_ok()
        {
            accepted.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(accepted.into_inner())
}
