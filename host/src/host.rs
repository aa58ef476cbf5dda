//! `reconciler-host run`: wires the host together and keeps the set of controllers in line with
//! the set of active guests, while this replica leads.
//!
//! Order of events: load the configuration and backends, start the HTTP server, start watching
//! the guest directory, join the leader election (if enabled), then run controllers for the
//! active guests while leading. On SIGTERM/SIGINT: stop taking keys, let running reconciles
//! finish, release the lease, exit.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use parking_lot::Mutex;
use tokio::sync::broadcast::error::RecvError;

use crate::backends::NetworkBackend;
use crate::config::HostConfig;
use crate::controller::{Controller, Shared};
use crate::guests::{ActiveGuest, GuestDirectory, GuestEvent};
use crate::informers::{Informers, Options};
use crate::leader::{Election, LeaderOptions};
use crate::metrics::Metrics;
use crate::runtime::{Runtime, RuntimeOptions};
use crate::server::Readiness;

/// How often a guest whose controller could not start (e.g. its CRD is not installed yet) is retried.
const START_RETRY: Duration = Duration::from_secs(5);

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

    let mut networks: BTreeMap<String, Arc<dyn NetworkBackend>> = BTreeMap::new();
    for (name, backend) in &config.backends {
        let provider =
            crate::backends::from_config(backend).with_context(|| format!("backend `{name}`"))?;
        networks.insert(name.clone(), provider);
    }

    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (KUBECONFIG or in-cluster service account)")?;
    let metrics = Metrics::new();
    let informers = Informers::with_options(
        client.clone(),
        Options {
            metrics: Some(metrics.clone()),
            ..Options::default()
        },
    );
    let runtime = Arc::new(Runtime::new(RuntimeOptions {
        cache_dir: args.cache_dir.clone().or_else(default_cache_dir),
        ..RuntimeOptions::default()
    })?);
    let directory = GuestDirectory::new(
        dir.clone(),
        runtime.clone(),
        config.clone(),
        Some(metrics.clone()),
    );
    let mut guest_events = directory.subscribe();
    let watcher = tokio::spawn(directory.clone().watch());

    let readiness: Readiness = Arc::new(Mutex::new(BTreeMap::new()));
    let (addr, _server) = crate::server::serve(
        args.listen,
        metrics.clone(),
        directory.clone(),
        readiness.clone(),
    )
    .await?;
    tracing::info!(%addr, guests = %dir.display(), "reconciler-host serving /healthz /readyz /metrics /guests");

    let election = if args.leader_elect {
        let identity = args.identity.clone().unwrap_or_else(default_identity);
        let options = LeaderOptions {
            lease_name: args.lease_name.clone(),
            namespace: args.lease_namespace.clone(),
            identity: identity.clone(),
            duration: args.lease_duration,
            grace: args.lease_duration / 3,
        };
        tracing::info!(%identity, lease = %options.lease_name, "joining leader election");
        Some(Election::start(client.clone(), &options).await?)
    } else {
        None
    };
    let mut is_leader = election.as_ref().map(|e| e.is_leader.clone());

    let shared = Shared {
        client,
        informers,
        runtime,
        metrics: metrics.clone(),
        networks,
        namespace: args.watch_namespace.clone(),
    };
    let mut manager = Manager {
        shared,
        directory: directory.clone(),
        controllers: BTreeMap::new(),
        pending: BTreeMap::new(),
        readiness,
        leading: is_leader.is_none(),
    };
    metrics.set_leader(manager.leading);
    if manager.leading {
        manager.start_all().await;
    }

    let mut retry = tokio::time::interval(START_RETRY);
    let shutdown = shutdown_signal();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            changed = async {
                match &mut is_leader {
                    Some(rx) => rx.changed().await.map(|()| *rx.borrow()),
                    None => std::future::pending().await,
                }
            } => {
                let Ok(leading) = changed else { anyhow::bail!("leader election stopped") };
                if leading != manager.leading {
                    manager.leading = leading;
                    metrics.set_leader(leading);
                    if leading {
                        tracing::info!("became the leader; starting controllers");
                        manager.start_all().await;
                    } else {
                        tracing::warn!("lost the lease; stopping every controller now");
                        manager.abort_all().await;
                    }
                }
            }
            event = guest_events.recv() => match event {
                Ok(event) => manager.on_guest_event(event).await,
                Err(RecvError::Lagged(_)) => manager.resync().await,
                Err(RecvError::Closed) => anyhow::bail!("the guest directory watcher stopped"),
            },
            _ = retry.tick() => manager.retry_pending().await,
        }
    }

    tracing::info!("shutting down: finishing running reconciles");
    watcher.abort();
    manager.stop_all().await;
    // The election releases the lease once every receiver of its channel is gone.
    drop(is_leader);
    if let Some(election) = election {
        election.release().await;
    }
    Ok(())
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .unwrap_or_else(|_| "host".into());
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
    shared: Shared,
    directory: Arc<GuestDirectory>,
    controllers: BTreeMap<String, Controller>,
    /// Guests whose controller failed to start, retried every `START_RETRY`.
    pending: BTreeMap<String, Arc<ActiveGuest>>,
    readiness: Readiness,
    leading: bool,
}

impl Manager {
    async fn on_guest_event(&mut self, event: GuestEvent) {
        match event {
            GuestEvent::Loaded(guest) => {
                if self.leading {
                    self.apply(guest).await;
                }
            }
            GuestEvent::Unloaded(name) => {
                self.pending.remove(&name);
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
        }
    }

    async fn start_all(&mut self) {
        for guest in self.directory.active() {
            self.apply(guest).await;
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

    async fn stop_all(&mut self) {
        self.readiness.lock().clear();
        for (_, controller) in std::mem::take(&mut self.controllers) {
            controller.stop().await;
        }
    }
}
