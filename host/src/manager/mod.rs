//! `reconciler-host run`: wires the host together and keeps the set of controllers in line with
//! the set of active guests, for what this replica owns.
//!
//! Order of events: load the configuration and backends, join the leader election or the shard
//! ring (if enabled), start the HTTP server, start watching the guest directory and the
//! configuration file, then run controllers for the active guests while this replica owns
//! work. A leader-elected standby (`--standby warm`, the default) runs them too, without
//! workers: its caches stay synced and its queues filled, so that it reconciles the moment it
//! takes the lease instead of listing every kind first. On SIGTERM/SIGINT: stop taking keys, let running reconciles finish, release the lease
//! (or leave the ring), exit.
//!
//! One file per concept:
//! - [`settings`]: what `run` was asked for, resolved once by the command line;
//! - [`ownership`]: what this replica may reconcile (alone, leader-elected or sharded), the
//!   write fence, and the one [`ownership::Change`] event the manager follows;
//! - [`controllers`]: the set of running controllers, one per active guest;
//! - [`orphans`]: finalizers left behind by unloaded guests, and their release;
//! - [`config`]: following the configuration file.
//!
//! Sharded (`--shards auto`, see [`crate::replicas::shards`]): every change of the owned slots stops
//! every controller (drained, then aborted after a grace) and starts them again with the new
//! slots, so each primary informer relists its new share and every key in it is reconciled
//! once. The ring releases a slot only after the controllers have stopped. The other informers
//! are held across the restart, so only the primary caches are rebuilt.

mod config;
mod controllers;
mod orphans;
mod ownership;
pub(crate) mod server;
mod settings;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;

use crate::cluster::informers::{Informers, Options};
use crate::config::HostConfig;
use crate::controller::Shared;
use crate::manager::server::Readiness;
use crate::metrics::Metrics;
use crate::sandbox::backends::NetworkBackend;
use crate::sandbox::providers::http::LiveOutbound;
use crate::sandbox::runtime::{Runtime, RuntimeOptions};
use crate::supply::guest_set::{Directory, FirstPass, GuestEvent, GuestSource, Guests, Sources};
use controllers::{ControllerSet, START_RETRY};
use orphans::Orphans;
use ownership::{Change, Owned, Ownership};
pub(crate) use settings::{
    Lease, Replicas, Settings, Standby, default_cache_dir, default_identity,
};

/// How long a shutdown lets running reconciles finish before cancelling them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Where records are kept: `recordDirectory`, else `records/` in the cache directory.
fn record_directory(config: &HostConfig, cache_dir: Option<&Path>) -> Option<PathBuf> {
    config
        .record_directory
        .clone()
        .or_else(|| cache_dir.map(|d| d.join("records")))
}

/// The task writing the Reconcilers' status, if there are Reconcilers, and its switch: one
/// replica writes them, the one that coordinates (see `Manager::set_owned`).
fn write_statuses(
    status: Option<crate::supply::reconcilers::StatusWriter>,
    writer: &str,
    guests: &Arc<Guests>,
) -> (
    tokio::sync::watch::Sender<bool>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let (switch, on) = tokio::sync::watch::channel(false);
    let task = status.map(|status| tokio::spawn(status.run(guests.clone(), writer.to_owned(), on)));
    (switch, task)
}

/// The host's shared informers: every guest's caches, counted in `metrics`.
fn informers(client: &kube::Client, metrics: &Metrics, settings: &Settings) -> Informers {
    Informers::with_options(
        client.clone(),
        Options {
            metrics: Some(metrics.clone()),
            shard_filter: settings.shard_filter,
            ..Options::default()
        },
    )
}

pub(crate) async fn run(settings: Settings) -> anyhow::Result<()> {
    let config = Arc::new(HostConfig::load(&settings.config)?);
    // Before any task starts: an address in use ends the host with that error, and nothing else.
    let listener = crate::manager::server::bind(settings.listen)?;
    let dir = guest_directory(&settings, &config)?;
    let metrics = Metrics::new();
    let ownership = Ownership::join(&settings, &metrics)?;
    let shared = machinery(&settings, &config, &metrics, ownership.fence().clone())?;
    let (sources, reconciler_status) = guest_sources(
        &config,
        dir.as_ref(),
        (&shared.client, &shared.rollouts),
        &settings,
        &metrics,
    )?;
    let guests = Guests::new(
        sources,
        shared.runtime.clone(),
        config.clone(),
        Some(metrics.clone()),
        shared.shadows.clone(),
    );
    guests.set_record_directory(shared.record_directory.clone());
    guests.set_rollouts(shared.rollouts.clone());
    let rechecks = follow_identities(&guests, &shared.client, &shared.informers, &settings);
    let mut guest_events = guests.subscribe();
    let mut watcher = tokio::spawn(guests.clone().watch());
    let config_watcher = tokio::spawn(config::follow_config(
        settings.config.clone(),
        guests.clone(),
    ));

    let readiness = Arc::new(Readiness::default());
    // On a thread of its own: probes are answered whatever guests keep the workers doing.
    let (addr, _server) = crate::manager::server::serve(
        listener,
        metrics.clone(),
        guests.clone(),
        (readiness.clone(), shared.informers.clone()),
        ownership.status(),
    )?;
    tracing::info!(%addr, guests = %dir.as_ref().map_or("-".into(), |d| d.display().to_string()),
        reconcilers = config.reconcilers.is_some(), "reconciler-host serving /healthz /readyz /metrics /guests");
    let (status_writes, status_task) =
        write_statuses(reconciler_status, &settings.status_writer, &guests);

    let mut manager = Manager {
        shared,
        guests: guests.clone(),
        readiness: readiness.clone(),
        controllers: ControllerSet::new(readiness, ownership.status(), guests.clone()),
        orphans: Orphans::new(guests, metrics.clone()),
        owned: Owned::Nothing,
        ownership,
        status_writes,
    };
    let owned = manager.ownership.initially();
    manager.set_owned(owned);
    metrics.set_leader(owned.anything());
    manager.controllers.set_leading(owned.anything());
    if manager.runs_controllers() {
        manager.start_all().await;
    }

    let result = manager
        .run_until_shutdown(&mut guest_events, &mut watcher)
        .await;

    tracing::info!("shutting down: finishing running reconciles");
    watcher.abort();
    config_watcher.abort();
    rechecks.abort();
    status_task.iter().for_each(tokio::task::JoinHandle::abort);
    manager.shutdown().await;
    result
}

/// What every controller shares: the API client behind the adaptive limit on writes, the
/// informers, the runtime, the network backends, outbound HTTP, and the write `fence` of this
/// replica's ownership.
fn machinery(
    settings: &Settings,
    config: &HostConfig,
    metrics: &Metrics,
    fence: crate::replicas::fence::WriteFence,
) -> anyhow::Result<Shared> {
    let networks = network_backends(config, &settings.kube.cluster_url)?;
    // Every write of the host goes through the adaptive limit (the lease's client does not).
    let flow =
        crate::cluster::flowcontrol::FlowControl::new(&config.api_writes, Some(metrics.clone()));
    let client = crate::cluster::flowcontrol::client(&settings.kube, &flow)
        .context("cannot build a Kubernetes client (KUBECONFIG or in-cluster service account)")?;
    let informers = informers(&client, metrics, settings);
    let runtime = Arc::new(Runtime::new(&RuntimeOptions {
        cache_dir: settings.cache_dir.clone(),
        ..RuntimeOptions::default()
    })?);
    Ok(Shared {
        outbound: Arc::new(LiveOutbound::new(
            Some(client.clone()),
            settings.host_namespace.clone(),
        )),
        client,
        informers,
        runtime,
        metrics: metrics.clone(),
        networks,
        namespace: settings.watch_namespace.clone(),
        fence,
        shadows: Arc::new(crate::sandbox::shadow::Shadows::new(Some(metrics.clone()))),
        shard: None,
        record_directory: record_directory(config, settings.cache_dir.as_deref()),
        flow,
        max_concurrency: config.max_concurrency(),
        queue_priorities: settings.queue_priorities,
        rollouts: Arc::default(),
    })
}

/// Has guests' ServiceAccounts reviewed through the API server, now and every
/// `identity.recheck` (the returned task).
fn follow_identities(
    guests: &Arc<Guests>,
    client: &kube::Client,
    informers: &Informers,
    settings: &Settings,
) -> tokio::task::JoinHandle<()> {
    guests.set_access_review(
        Arc::new(crate::sandbox::identity::ApiServerReview::new(
            client.clone(),
            informers.resolver().clone(),
        )),
        settings.watch_namespace.clone(),
    );
    if crate::sandbox::capabilities::skip_write_grant() {
        tracing::warn!(
            "{} is set: writes of guests with a ServiceAccount skip the host's grant check (a test-only switch); only the API server checks them",
            crate::sandbox::capabilities::SKIP_WRITE_GRANT_ENV
        );
    }
    tokio::spawn(recheck_identities(guests.clone()))
}

/// Reviews the guests' ServiceAccounts again every `identity.recheck`, so an RBAC change takes
/// effect ([`Guests::recheck_identities`]).
async fn recheck_identities(guests: Arc<Guests>) {
    loop {
        tokio::time::sleep(guests.config().identity.recheck()).await;
        let set = guests.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || set.recheck_identities()).await {
            tracing::error!("the identity recheck failed: {e}");
        }
    }
}

/// The guest directory (`--guests`, else `guestDirectory`), which a host running only
/// `Reconciler` objects may do without.
fn guest_directory(settings: &Settings, config: &HostConfig) -> anyhow::Result<Option<PathBuf>> {
    let dir = settings
        .guests
        .clone()
        .or_else(|| config.guest_directory.clone());
    anyhow::ensure!(
        dir.is_some() || config.reconcilers.is_some(),
        "no guests: pass --guests, set guestDirectory, or add a reconcilers: section to the configuration"
    );
    if let Some(dir) = &dir {
        anyhow::ensure!(
            dir.is_dir(),
            "guest directory {} does not exist",
            dir.display()
        );
    }
    Ok(dir)
}

/// Where guests come from: the directory, if any, and the `Reconciler` objects when the
/// configuration has a `reconcilers:` section (with the writer of their status).
fn guest_sources(
    config: &HostConfig,
    dir: Option<&PathBuf>,
    (client, rollouts): (&kube::Client, &Arc<crate::supply::guest_set::Rollouts>),
    settings: &Settings,
    metrics: &Metrics,
) -> anyhow::Result<(Sources, Option<crate::supply::reconcilers::StatusWriter>)> {
    let mut sources: Vec<Box<dyn GuestSource>> = Vec::new();
    if let Some(dir) = dir {
        sources.push(Box::new(Directory::new(dir.clone())));
    }
    let mut status = None;
    if config.reconcilers.is_some() {
        let modules = (settings.cache_dir.clone())
            .context("no cache directory for pulled modules: pass --cache-dir")?;
        let host_namespace = &settings.host_namespace;
        let namespace = host_namespace.clone();
        // What `status.host` names: one for all replicas of a host (they share the lease),
        // another for each host that shares the cluster.
        let host = format!("{host_namespace}/{}", settings.lease.name);
        let (objects, writer) = crate::supply::reconcilers::Objects::start(
            client.clone(),
            config,
            &modules,
            (namespace, host),
            metrics,
        );
        objects.set_rollouts(rollouts.clone());
        sources.push(Box::new(objects));
        status = Some(writer);
    }
    Ok((Sources::new(sources), status))
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
    let api_server = crate::sandbox::backends::api_server_addresses(
        cluster_url.host().unwrap_or(""),
        cluster_url.port_u16(),
    )?;
    for (name, backend) in &config.backends {
        let provider = crate::sandbox::backends::from_config(backend, &api_server)
            .with_context(|| format!("backend `{name}`"))?;
        networks.insert(name.clone(), provider);
    }
    Ok(networks)
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

/// Keeps the controllers in line with the active guests and with what this replica owns.
struct Manager {
    shared: Shared,
    guests: Arc<Guests>,
    ownership: Ownership,
    /// What the controllers run with now.
    owned: Owned,
    controllers: ControllerSet,
    /// What `/readyz` reads: set here once the guest set's first pass is applied.
    readiness: Arc<Readiness>,
    orphans: Orphans,
    /// Whether this replica writes the status of `Reconciler` objects: the one that
    /// coordinates.
    status_writes: tokio::sync::watch::Sender<bool>,
}

impl Manager {
    /// Follows ownership, guest changes and the retry timer until SIGTERM/SIGINT. Errs when
    /// the election, the ring or the guest directory watcher stops, which leaves the host blind.
    async fn run_until_shutdown(
        &mut self,
        guest_events: &mut broadcast::Receiver<GuestEvent>,
        watcher: &mut tokio::task::JoinHandle<Result<(), crate::supply::guest_set::FollowError>>,
    ) -> anyhow::Result<()> {
        let mut retry = tokio::time::interval(START_RETRY);
        let shutdown = shutdown_signal();
        tokio::pin!(shutdown);
        let mut first_pass = self.guests.first_pass();
        // Read at the first turn too: the pass may have ended before this loop began.
        first_pass.mark_changed();
        let mut applied = false;
        loop {
            tokio::select! {
                () = &mut shutdown => return Ok(()),
                Ok(()) = first_pass.changed(), if !applied => {
                    if *first_pass.borrow_and_update() == FirstPass::Done {
                        // Every `Loaded` of the first pass was sent before it ended: apply
                        // those still queued, so `/readyz` then waits for their caches.
                        self.drain(guest_events).await;
                        self.readiness.set_guests_applied();
                        applied = true;
                    }
                }
                change = self.ownership.changed() => self.follow(change?).await,
                event = guest_events.recv() => match event {
                    Ok(event) => self.on_guest_event(event).await,
                    Err(RecvError::Lagged(_)) => self.resync().await,
                    Err(RecvError::Closed) => anyhow::bail!("the guest set stopped"),
                },
                // The watch never ends on its own: if it does, guest changes go unseen.
                stopped = &mut *watcher => {
                    let why = match stopped {
                        Ok(Ok(())) => "it ended".to_owned(),
                        Ok(Err(e)) => format!("{e:#}"),
                        Err(e) => e.to_string(),
                    };
                    anyhow::bail!("the guest directory watcher stopped: {why}");
                }
                _ = retry.tick() => {
                    if self.runs_controllers() {
                        self.controllers.retry_pending(&self.shared).await;
                    }
                    if self.ownership.coordinates(self.owned) {
                        let shared = &self.shared;
                        let (discovery, namespace) = (shared.informers.resolver(), shared.namespace.as_deref());
                        self.orphans.release_due(&shared.client, discovery, namespace).await;
                    }
                }
            }
        }
    }

    /// Applies the guest events already queued.
    async fn drain(&mut self, guest_events: &mut broadcast::Receiver<GuestEvent>) {
        loop {
            match guest_events.try_recv() {
                Ok(event) => self.on_guest_event(event).await,
                Err(broadcast::error::TryRecvError::Lagged(_)) => self.resync().await,
                Err(_) => return,
            }
        }
    }

    async fn on_guest_event(&mut self, event: GuestEvent) {
        match event {
            GuestEvent::Loaded(guest) => {
                self.orphans.loaded(guest.name());
                if self.runs_controllers() {
                    self.controllers.apply(&self.shared, guest).await;
                }
            }
            GuestEvent::Unloaded(name) => {
                let controllers = &self.controllers;
                self.orphans
                    .unloaded(&name, |finalizer| controllers.carrying(&name, finalizer));
                self.controllers.remove(&self.shared, &name).await;
            }
        }
    }

    /// Follows a change of ownership. A lease won starts every controller, a lease lost or a
    /// fence aborts them all at once (the fence is closed first: a reconcile still running
    /// writes nothing more), new slots restart them with the new share.
    async fn follow(&mut self, change: Change) {
        if crate::replicas::fence::disabled_for_tests()
            && matches!(change, Change::Lease(false) | Change::Fenced)
        {
            tracing::warn!(
                ?change,
                "the deliberately broken build ignores losing its lease"
            );
            return;
        }
        match &change {
            Change::Lease(leading) => {
                if *leading == self.owned.anything() {
                    return;
                }
                self.shared.metrics.set_leader(*leading);
                let owned = self.ownership.settle(&change);
                self.set_owned(owned);
                self.controllers.set_leading(owned.anything());
                if owned.anything() {
                    tracing::info!("became the leader; starting controllers");
                    // A warm standby's controllers are running: their workers start now.
                    self.controllers.lead_all();
                    self.start_all().await;
                } else {
                    tracing::warn!("lost the lease; stopping every controller now");
                    let warm = self.controllers.informers();
                    self.controllers.abort_all().await;
                    if self.runs_controllers() {
                        // Back to standby, on the caches held meanwhile.
                        self.start_all().await;
                    }
                    drop(warm);
                }
            }
            Change::Fenced => {
                tracing::warn!("fenced: aborting every controller");
                let owned = self.ownership.settle(&change);
                self.set_owned(owned);
                self.controllers.abort_all().await;
                self.ownership.set_running(owned.slots());
            }
            Change::Slots(state) => self.reshard(&change, state.active).await,
        }
    }

    /// Sharded: the slots the controllers may run with changed. Stops them all (running
    /// reconciles get the grace, then are cancelled), acknowledges, and starts them with the
    /// new slots. The other informers stay warm across the restart.
    async fn reshard(&mut self, change: &Change, active: crate::cluster::shard_ranges::SlotSet) {
        let running = self.ownership.running();
        if self.owned.slots() == active && running == active {
            return;
        }
        let (gained, lost) = (active.difference(&running), running.difference(&active));
        let warm = self.controllers.other_informers();
        if !self.controllers.is_empty() {
            tracing::info!(from = %running, to = %active, "owned slots changed; restarting controllers");
            let grace = self.ownership.handover_grace().unwrap_or(SHUTDOWN_GRACE);
            self.controllers
                .stop_all_within(grace, self.ownership.fence())
                .await;
        }
        self.shared.metrics.shard_handover(true, gained.len());
        self.shared.metrics.shard_handover(false, lost.len());
        self.ownership
            .set_running(crate::cluster::shard_ranges::SlotSet::empty());
        let owned = self.ownership.settle(change);
        self.set_owned(owned);
        // A replica holding slots reconciles them: its controllers start with their workers.
        self.controllers.set_leading(owned.anything());
        self.shared.metrics.set_leader(owned.anything());
        if owned.anything() {
            self.start_all().await;
            self.ownership.set_running(owned.slots());
        }
        drop(warm);
    }

    /// Whether controllers run: while this replica owns work, and, warm, while it stands by.
    fn runs_controllers(&self) -> bool {
        self.owned.anything() || self.ownership.warm_standby()
    }

    /// Records what the controllers run with; sharded, they read their slots from it.
    fn set_owned(&mut self, owned: Owned) {
        self.owned = owned;
        self.shared.shard = self.ownership.is_sharded().then(|| owned.slots());
        let coordinates = self.ownership.coordinates(owned);
        // The replica that writes the Reconcilers' statuses judges their rollouts; the others
        // follow what it writes.
        self.shared.rollouts.set_judging(coordinates);
        self.status_writes.send_replace(coordinates);
    }

    async fn start_all(&mut self) {
        let active = self.guests.active();
        self.controllers.apply_all(&self.shared, active).await;
    }

    /// Brings controllers in line with the directory after missed events.
    async fn resync(&mut self) {
        if self.runs_controllers() {
            let active = self.guests.active();
            self.controllers.resync(&self.shared, active).await;
        }
    }

    /// Stops every controller ([`SHUTDOWN_GRACE`]), then releases the lease or leaves the
    /// ring, so that the others take over at once.
    async fn shutdown(self) {
        let Self {
            mut controllers,
            ownership,
            ..
        } = self;
        controllers
            .stop_all_within(SHUTDOWN_GRACE, ownership.fence())
            .await;
        ownership.leave().await;
    }
}
