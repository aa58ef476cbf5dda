//! `reconciler-host run`: wires the host together and keeps the set of controllers in line with
//! the set of active guests, while this replica leads (or, sharded, for the slots it owns).
//!
//! Order of events: load the configuration and backends, start the HTTP server, start watching
//! the guest directory, join the leader election or the shard ring (if enabled), then run
//! controllers for the active guests while leading / owning slots. On SIGTERM/SIGINT: stop
//! taking keys, let running reconciles finish, release the lease (or leave the ring), exit.
//!
//! Sharded (`--shards auto`, see [`crate::shards`]): every change of the owned slots stops
//! every controller (drained, then aborted after a grace) and starts them again with the new
//! slots, so each primary informer relists its new share and every key in it is reconciled
//! once. The ring releases a slot only after the controllers have stopped. The other informers
//! are held across the restart, so only the primary caches are rebuilt.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};

use crate::backends::NetworkBackend;
use crate::config::HostConfig;
use crate::controller::{Controller, Services};
use crate::guests::{ActiveGuest, Directory, GuestEvent, Guests};
use crate::informers::{Informers, Options};
use crate::leader::{Election, LeaderOptions};
use crate::metrics::Metrics;
use crate::runtime::{Runtime, RuntimeOptions};
use crate::server::Readiness;
use crate::shards::{Ring, RingOptions, ShardState, ShardStatus, SlotSet};

/// How often a guest whose controller could not start (e.g. its CRD is not installed yet) is retried.
const START_RETRY: Duration = Duration::from_secs(5);
/// How long a shutdown lets running reconciles finish before cancelling them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Host configuration (grants, limits, backends).
    #[arg(long, env = "RECONCILER_CONFIG")]
    pub config: PathBuf,
    /// Directory of guest components; overrides guestDirectory in the configuration.
    #[arg(long, env = "RECONCILER_GUESTS")]
    pub guests: Option<PathBuf>,
    /// Address of /healthz, /readyz, /metrics and /guests.
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub listen: SocketAddr,
    /// Where compiled guests are cached (default: $XDG_CACHE_HOME/reconciler-host).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Watch only this namespace (namespaced kinds); default: all namespaces.
    #[arg(long)]
    pub watch_namespace: Option<String>,
    /// Take part in leader election; only the leader reconciles.
    #[arg(long)]
    pub leader_elect: bool,
    #[arg(long, default_value = "reconciler-host")]
    pub lease_name: String,
    #[arg(long, default_value = "default")]
    pub lease_namespace: String,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    pub lease_duration: Duration,
    /// This replica's identity in the lease (default: hostname-pid).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// `auto`: spread the keys of every guest's primary kind over the replicas of the ring
    /// named `--lease-name` (each holds a member Lease in `--lease-namespace`). Exclusive with
    /// `--leader-elect`.
    #[arg(long, value_enum, default_value = "off")]
    pub shards: ShardMode,
    /// Sharded mode: filter on the API server (`shardSelector`, needs the `ShardedListAndWatch`
    /// feature gate), on the client, or `auto` (the server when it honours it).
    #[arg(long, default_value = "auto")]
    pub shard_filter: crate::informers::ShardFilter,
}

/// `run --shards`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ShardMode {
    Off,
    Auto,
}

/// The default compile cache directory.
pub fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|base| base.join("reconciler-host"))
}

pub async fn run(args: RunArgs) -> anyhow::Result<()> {
    let config = Arc::new(HostConfig::load(&args.config)?);
    let dir = args
        .guests
        .clone()
        .or_else(|| config.guest_directory.clone())
        .context("no guest directory: pass --guests or set guestDirectory in the configuration")?;
    anyhow::ensure!(
        dir.is_dir(),
        "guest directory {} does not exist",
        dir.display()
    );

    // Read once: the client, the lease's client and the backends' view of the API server.
    let kube_config = kube::Config::infer()
        .await
        .context("cannot read the Kubernetes client configuration (KUBECONFIG or in-cluster service account)")?;
    let networks = network_backends(&config, &kube_config.cluster_url)?;

    let client = kube::Client::try_from(kube_config.clone())
        .context("cannot build a Kubernetes client (KUBECONFIG or in-cluster service account)")?;
    let metrics = Metrics::new();
    let informers = Informers::with_options(
        client.clone(),
        Options {
            metrics: Some(metrics.clone()),
            shard_filter: args.shard_filter,
            ..Options::default()
        },
    );
    let fence = crate::providers::kube::WriteFence::default();
    let sharding = match args.shards {
        ShardMode::Off => None,
        ShardMode::Auto => Some(join_ring(&args, &kube_config, &fence, &metrics)?),
    };
    let runtime = Arc::new(Runtime::new(&RuntimeOptions {
        cache_dir: args.cache_dir.clone().or_else(default_cache_dir),
        ..RuntimeOptions::default()
    })?);
    let directory = Guests::new(
        Directory::new(dir.clone()),
        runtime.clone(),
        config.clone(),
        Some(metrics.clone()),
        Arc::new(crate::shadow::Shadows::new(Some(metrics.clone()))),
    );
    let mut guest_events = directory.subscribe();
    let watcher = tokio::spawn(directory.clone().watch());
    let config_watcher = tokio::spawn(follow_config(args.config.clone(), directory.clone()));

    let readiness: Readiness = Arc::new(Mutex::new(BTreeMap::new()));
    // On a thread of its own: probes are answered whatever guests keep the workers doing.
    let (addr, _server) = crate::server::serve(
        args.listen,
        metrics.clone(),
        directory.clone(),
        readiness.clone(),
        sharding.as_ref().map(|s| s.status.clone()),
    )?;
    tracing::info!(%addr, guests = %dir.display(), "reconciler-host serving /healthz /readyz /metrics /guests");

    let election = if args.leader_elect {
        Some(join_election(&args, &kube_config).await?)
    } else {
        None
    };
    let mut is_leader = election.as_ref().map(|e| e.is_leader.clone());

    let shared = Services {
        client,
        informers,
        runtime,
        metrics: metrics.clone(),
        networks,
        namespace: args.watch_namespace.clone(),
        fence,
        shadows: directory.shadows(),
        shard: sharding.as_ref().map(|_| SlotSet::empty()),
    };
    let mut manager = Manager {
        shared,
        directory: directory.clone(),
        controllers: BTreeMap::new(),
        pending: BTreeMap::new(),
        readiness,
        leading: is_leader.is_none() && sharding.is_none(),
        releases: BTreeMap::new(),
        sharding,
    };
    metrics.set_leader(manager.leading);
    if manager.leading {
        manager.start_all().await;
    }

    manager
        .run_until_shutdown(&mut is_leader, &mut guest_events)
        .await?;

    tracing::info!("shutting down: finishing running reconciles");
    watcher.abort();
    config_watcher.abort();
    manager.shutdown().await;
    // The election releases the lease once every receiver of its channel is gone.
    drop(is_leader);
    if let Some(election) = election {
        election.release().await;
    }
    Ok(())
}

/// How often the configuration file is read again even without a change notification.
const CONFIG_RESCAN: Duration = Duration::from_secs(30);

/// Applies every valid change of the configuration file to the guest directory (grants,
/// limits, modes; see [`Guests::reconfigure`]), without a restart. An invalid file is
/// refused with its error and the running configuration stays. The file's directory is
/// watched, so editors' renames and ConfigMap volumes' `..data` swaps are seen.
async fn follow_config(path: PathBuf, directory: Arc<Guests>) {
    use notify::Watcher;
    let digest = |bytes: &[u8]| crate::runtime::content_hash(bytes);
    let mut applied = std::fs::read(&path).map(|b| digest(&b)).unwrap_or_default();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let _ = tx.send(event.is_ok());
    });
    let parent = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    // Kept alive for the loop; without it, only the periodic rescan sees changes.
    let _watcher = match watcher.and_then(|mut w| {
        w.watch(parent, notify::RecursiveMode::NonRecursive)
            .map(|()| w)
    }) {
        Ok(w) => Some(w),
        Err(e) => {
            tracing::warn!(config = %path.display(), "cannot watch the configuration file, re-reading it every {CONFIG_RESCAN:?}: {e}");
            None
        }
    };
    loop {
        let _ = tokio::time::timeout(CONFIG_RESCAN, rx.recv()).await;
        // Debounce: a save is several events in quick succession.
        while let Ok(Some(_)) = tokio::time::timeout(Duration::from_millis(150), rx.recv()).await {}
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let hash = digest(&bytes);
        if hash == applied {
            continue;
        }
        applied = hash;
        let text = String::from_utf8_lossy(&bytes);
        let result = match HostConfig::parse(&text, &path) {
            // Judging the guests again compiles them (from the cache): off the async workers.
            Ok(config) => {
                let directory = directory.clone();
                tokio::task::spawn_blocking(move || directory.reconfigure(config))
                    .await
                    .unwrap_or_else(|e| Err(format!("reconfiguring panicked: {e}")))
            }
            Err(e) => Err(e.to_string()),
        };
        match result {
            Ok(()) => tracing::info!(config = %path.display(), "configuration change applied"),
            Err(e) => tracing::error!(config = %path.display(),
                "configuration change refused, the running configuration stays: {e}"),
        }
    }
}

/// The network providers named in the configuration, each kept off the API server's
/// addresses (the cluster URL's host as it resolves now).
fn network_backends(
    config: &HostConfig,
    cluster_url: &hyper::Uri,
) -> anyhow::Result<BTreeMap<String, Arc<dyn NetworkBackend>>> {
    let mut networks: BTreeMap<String, Arc<dyn NetworkBackend>> = BTreeMap::new();
    if config.backends.is_empty() {
        return Ok(networks);
    }
    let api_server = crate::backends::api_server_addresses(
        cluster_url.host().unwrap_or(""),
        cluster_url.port_u16(),
    )?;
    for (name, backend) in &config.backends {
        let provider = crate::backends::from_config(backend, &api_server)
            .with_context(|| format!("backend `{name}`"))?;
        networks.insert(name.clone(), provider);
    }
    Ok(networks)
}

async fn join_election(args: &RunArgs, kube_config: &kube::Config) -> anyhow::Result<Election> {
    let identity = args.identity.clone().unwrap_or_else(default_identity);
    let options = LeaderOptions {
        lease_name: args.lease_name.clone(),
        namespace: args.lease_namespace.clone(),
        identity: identity.clone(),
        duration: args.lease_duration,
        grace: args.lease_duration / 3,
    };
    tracing::info!(%identity, lease = %options.lease_name, "joining leader election");
    // A client of its own (its own connections): guests' writes, however many, never
    // queue ahead of a lease renewal.
    let lease_client = kube::Client::try_from(kube_config.clone())
        .context("cannot build the leader election's Kubernetes client")?;
    Election::start(lease_client, &options).await
}

/// Sharded mode: the ring membership and what the manager follows of it.
struct Sharding {
    ring: Ring,
    state: watch::Receiver<ShardState>,
    fences: watch::Receiver<u64>,
    /// The slots the controllers run with now: the ring releases a slot only once it is out.
    running: watch::Sender<SlotSet>,
    status: Arc<ShardStatus>,
    /// How long a handover lets running reconciles finish before cancelling them.
    grace: Duration,
}

fn join_ring(
    args: &RunArgs,
    kube_config: &kube::Config,
    fence: &crate::providers::kube::WriteFence,
    metrics: &Metrics,
) -> anyhow::Result<Sharding> {
    anyhow::ensure!(
        !args.leader_elect,
        "--leader-elect and --shards auto exclude each other: a sharded host shares the work, a leader-elected one keeps a standby"
    );
    let identity = args
        .identity
        .clone()
        .unwrap_or_else(default_identity)
        .to_lowercase();
    let options = RingOptions::new(
        &args.lease_name,
        &args.lease_namespace,
        &identity,
        args.lease_duration,
    )
    .map_err(anyhow::Error::msg)?;
    tracing::info!(%identity, ring = %options.name, namespace = %options.namespace, "joining the shard ring");
    // As for the election: renewals never queue behind guests' writes.
    let client = kube::Client::try_from(kube_config.clone())
        .context("cannot build the shard ring's Kubernetes client")?;
    let (running, running_rx) = watch::channel(SlotSet::empty());
    // Nothing is written until the ring says which slots are ours.
    fence.close();
    let write_fence = fence.clone();
    let grace = options.fence_margin / 2;
    let ring = Ring::join(
        client,
        options,
        running_rx,
        Arc::new(move || write_fence.close()),
    );
    let state = ring.state();
    Ok(Sharding {
        status: ShardStatus::new(identity, state.clone(), metrics),
        fences: ring.fences(),
        state,
        ring,
        running,
        grace,
    })
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "host".into(), |h| h.trim().to_owned());
    format!("{host}-{}", std::process::id())
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(term) => term,
        Err(e) => {
            tracing::warn!("cannot listen for SIGTERM: {e}");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
}

struct Manager {
    shared: Services,
    directory: Arc<Guests>,
    controllers: BTreeMap<String, Controller>,
    /// Guests whose controller failed to start, retried every `START_RETRY`.
    pending: BTreeMap<String, Arc<ActiveGuest>>,
    readiness: Readiness,
    leading: bool,
    /// Unloaded guests whose finalizer the `release` policy removes at the given time.
    releases: BTreeMap<String, tokio::time::Instant>,
    sharding: Option<Sharding>,
}

impl Manager {
    /// Follows leadership, guest changes and the retry timer until SIGTERM/SIGINT. Errs when
    /// the election or the guest directory watcher stops, which leaves the host blind.
    async fn run_until_shutdown(
        &mut self,
        is_leader: &mut Option<watch::Receiver<bool>>,
        guest_events: &mut broadcast::Receiver<GuestEvent>,
    ) -> anyhow::Result<()> {
        let mut retry = tokio::time::interval(START_RETRY);
        let shutdown = shutdown_signal();
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                changed = async {
                    match is_leader {
                        Some(rx) => rx.changed().await.map(|()| *rx.borrow()),
                        None => std::future::pending().await,
                    }
                } => {
                    let Ok(leading) = changed else { anyhow::bail!("leader election stopped") };
                    self.set_leading(leading).await;
                }
                ring = async {
                    match &mut self.sharding {
                        Some(s) => tokio::select! {
                            biased;
                            r = s.fences.changed() => r.map(|()| None),
                            r = s.state.changed() => r.map(|()| Some(())),
                        },
                        None => std::future::pending().await,
                    }
                } => {
                    match ring {
                        Err(_) => anyhow::bail!("the shard ring stopped"),
                        Ok(None) => self.fenced().await,
                        Ok(Some(())) => {
                            let state = self
                                .sharding
                                .as_mut()
                                .map(|s| s.state.borrow_and_update().clone())
                                .unwrap_or_default();
                            self.reshard(&state).await;
                        }
                    }
                }
                event = guest_events.recv() => match event {
                    Ok(event) => self.on_guest_event(event).await,
                    Err(RecvError::Lagged(_)) => self.resync().await,
                    Err(RecvError::Closed) => anyhow::bail!("the guest directory watcher stopped"),
                },
                _ = retry.tick() => {
                    self.retry_pending().await;
                    self.release_due().await;
                }
            }
        }
    }

    async fn on_guest_event(&mut self, event: GuestEvent) {
        match event {
            GuestEvent::Loaded(guest) => {
                if self.releases.remove(guest.name()).is_some() {
                    self.shared.metrics.finalizer_orphaned(guest.name(), 0);
                }
                if self.leading {
                    self.apply(guest).await;
                }
            }
            GuestEvent::Unloaded(name) => {
                self.pending.remove(&name);
                self.orphaned(&name);
                self.stop(&name).await;
            }
        }
    }

    /// Starts, swaps or restarts the controller of `guest`.
    async fn apply(&mut self, guest: Arc<ActiveGuest>) {
        let name = guest.name().to_owned();
        if let Some(controller) = self.controllers.get(&name)
            && controller.can_swap_to(&guest)
        {
            controller.swap(&self.shared, guest);
            tracing::info!(guest = %name, "new guest version swapped in");
            return;
        }
        self.stop(&name).await;
        self.start(guest).await;
    }

    async fn start(&mut self, guest: Arc<ActiveGuest>) {
        let name = guest.name().to_owned();
        match Controller::start(&self.shared, guest.clone()).await {
            Ok(controller) => {
                self.pending.remove(&name);
                self.readiness
                    .lock()
                    .insert(name.clone(), controller.synced());
                self.controllers.insert(name, controller);
                self.report_primaries();
            }
            Err(e) => {
                tracing::error!(guest = %name, "controller cannot start, retrying every {START_RETRY:?}: {e:#}");
                self.pending.insert(name, guest);
            }
        }
    }

    async fn stop(&mut self, name: &str) {
        self.readiness.lock().remove(name);
        if let Some(controller) = self.controllers.remove(name) {
            controller.stop().await;
            self.report_primaries();
        }
    }

    /// Notes what an unloaded guest's finalizer leaves behind, and schedules its release when
    /// the policy says so.
    fn orphaned(&mut self, name: &str) {
        let Some(orphan) = self.directory.orphan(name) else {
            return;
        };
        let objects = self
            .controllers
            .get(name)
            .map(|c| c.carrying(&orphan.finalizer));
        if let Some(objects) = objects {
            self.shared.metrics.finalizer_orphaned(name, objects);
            self.directory
                .update_orphan(name, |o| o.objects = Some(objects));
        }
        let config = self.directory.config();
        let policy = &config.finalizer_policy;
        tracing::warn!(guest = %name, finalizer = %orphan.finalizer, ?objects, policy = ?policy.on_unload,
            "guest unloaded while objects may still carry its finalizer");
        if policy.on_unload == crate::finalizer::OnUnload::Release {
            self.releases.insert(
                name.to_owned(),
                tokio::time::Instant::now() + policy.grace(),
            );
        }
    }

    /// Releases the finalizers of guests unloaded longer than the grace period ago.
    async fn release_due(&mut self) {
        // Sharded: one replica does it, the owner of slot 0.
        let coordinator = self
            .sharding
            .as_ref()
            .is_none_or(|s| s.state.borrow().active.contains(0));
        if !self.leading || !coordinator {
            return;
        }
        let now = tokio::time::Instant::now();
        let due: Vec<String> = self
            .releases
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            let Some(orphan) = self.directory.orphan(&name) else {
                self.releases.remove(&name);
                continue;
            };
            match self.release(&orphan).await {
                Ok(released) => {
                    self.releases.remove(&name);
                    tracing::info!(guest = %name, finalizer = %orphan.finalizer, released, "finalizer released");
                    self.shared.metrics.finalizer_released(&name, released);
                    self.shared.metrics.finalizer_orphaned(&name, 0);
                    self.directory.update_orphan(&name, |o| {
                        o.released = Some(released);
                        o.objects = Some(0);
                    });
                }
                Err(e) => {
                    tracing::warn!(guest = %name, "releasing the finalizer failed, will retry: {e}");
                }
            }
        }
    }

    async fn release(
        &self,
        orphan: &crate::guests::OrphanedFinalizer,
    ) -> Result<usize, kube::Error> {
        let client = &self.shared.client;
        let gvk = crate::providers::kube::to_kube_gvk(&orphan.kind);
        let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk).await?;
        let api = match (&self.shared.namespace, capabilities.scope) {
            (Some(ns), kube::discovery::Scope::Namespaced) => {
                kube::Api::namespaced_with(client.clone(), ns, &resource)
            }
            _ => kube::Api::all_with(client.clone(), &resource),
        };
        crate::finalizer::release_all(&api, &orphan.finalizer).await
    }

    /// Follows a change of leadership: a new leader starts every controller, a replica that
    /// lost the lease stops them all at once.
    async fn set_leading(&mut self, leading: bool) {
        if leading == self.leading {
            return;
        }
        self.leading = leading;
        self.shared.metrics.set_leader(leading);
        if leading {
            tracing::info!("became the leader; starting controllers");
            self.shared.fence.open();
            self.start_all().await;
        } else {
            // The fence closes first: a reconcile still running writes nothing more.
            tracing::warn!("lost the lease; stopping every controller now");
            self.shared.fence.close();
            self.abort_all().await;
        }
    }

    async fn start_all(&mut self) {
        for guest in self.directory.active() {
            self.apply(guest).await;
        }
        self.report_primaries();
    }

    /// Sharded: the slots the controllers may run with changed. Stops them all (running
    /// reconciles get the grace, then are cancelled), acknowledges, and starts them with the
    /// new slots. The other informers stay warm across the restart.
    async fn reshard(&mut self, state: &ShardState) {
        let Some(sharding) = &self.sharding else {
            return;
        };
        let running = *sharding.running.borrow();
        if self.shared.shard == Some(state.active) && running == state.active {
            return;
        }
        let (gained, lost) = (
            state.active.difference(&running),
            running.difference(&state.active),
        );
        let grace = sharding.grace;
        let warm: Vec<_> = self
            .controllers
            .values()
            .flat_map(Controller::other_informers)
            .collect();
        if !self.controllers.is_empty() {
            tracing::info!(from = %running, to = %state.active, "owned slots changed; restarting controllers");
            self.stop_all_within(grace).await;
        }
        self.shared.metrics.shard_handover(true, gained.len());
        self.shared.metrics.shard_handover(false, lost.len());
        self.shared.shard = Some(state.active);
        self.leading = !state.active.is_empty();
        if let Some(sharding) = &self.sharding {
            sharding.running.send_replace(SlotSet::empty());
        }
        if self.leading {
            self.shared.fence.open();
            // A fence raised meanwhile wins: never reopen what the ring closed.
            if self.sharding.as_ref().is_some_and(|s| s.ring.is_fenced()) {
                self.shared.fence.close();
                self.leading = false;
                self.shared.shard = Some(SlotSet::empty());
                return;
            }
            self.start_all().await;
            if let Some(sharding) = &self.sharding {
                sharding.running.send_replace(state.active);
            }
        }
        drop(warm);
    }

    /// Sharded: the member lease was not renewed in time (or was taken): every controller is
    /// aborted now. The write fence is already closed.
    async fn fenced(&mut self) {
        tracing::warn!("fenced: aborting every controller");
        self.leading = false;
        self.abort_all().await;
        self.shared.shard = Some(SlotSet::empty());
        if let Some(sharding) = &self.sharding {
            sharding.running.send_replace(SlotSet::empty());
        }
        self.report_primaries();
    }

    /// Tells `/shards` and the keys gauge which caches hold each guest's share.
    fn report_primaries(&self) {
        if let Some(sharding) = &self.sharding {
            sharding.status.set_primaries(
                self.controllers
                    .iter()
                    .map(|(name, c)| {
                        let share: Arc<dyn crate::shards::Share> = Arc::new(c.primary().clone());
                        (name.clone(), share)
                    })
                    .collect(),
            );
        }
    }

    /// Brings controllers in line with the directory after missed events.
    async fn resync(&mut self) {
        if !self.leading {
            return;
        }
        let active = self.directory.active();
        let names: Vec<String> = self.controllers.keys().cloned().collect();
        for name in names {
            if !active.iter().any(|g| g.name() == name) {
                self.stop(&name).await;
            }
        }
        for guest in active {
            self.apply(guest).await;
        }
    }

    async fn retry_pending(&mut self) {
        if !self.leading {
            return;
        }
        let pending: Vec<_> = self.pending.values().cloned().collect();
        for guest in pending {
            self.start(guest).await;
        }
    }

    async fn abort_all(&mut self) {
        self.readiness.lock().clear();
        for (_, controller) in std::mem::take(&mut self.controllers) {
            controller.abort().await;
        }
    }

    /// Stops every controller: running reconciles get [`SHUTDOWN_GRACE`] to finish, then
    /// they are cancelled (a guest waiting in a WASI sleep included) and nothing more is
    /// written.
    async fn stop_all(&mut self) {
        self.stop_all_within(SHUTDOWN_GRACE).await;
    }

    /// Stops every controller, then leaves the shard ring (if sharded) so that the others
    /// take this replica's slots at once.
    async fn shutdown(&mut self) {
        self.stop_all().await;
        if let Some(sharding) = self.sharding.take() {
            sharding.running.send_replace(SlotSet::empty());
            sharding.ring.leave().await;
        }
    }

    async fn stop_all_within(&mut self, grace: Duration) {
        self.readiness.lock().clear();
        let controllers = std::mem::take(&mut self.controllers);
        let drain = futures::future::join_all(controllers.values().map(Controller::drain));
        if tokio::time::timeout(grace, drain).await.is_err() {
            tracing::warn!("reconciles still running after {grace:?}; cancelling them");
        }
        self.shared.fence.close();
        for (_, controller) in controllers {
            controller.abort().await;
        }
        self.report_primaries();
    }
}
