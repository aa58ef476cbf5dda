//! `reconciler-host run`'s arguments, resolved once into the manager's
//! [`Settings`](crate::manager::Settings): defaults filled in, the client configuration read,
//! the host's namespace and this replica's identity decided here and nowhere else.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;

use crate::manager::{Lease, Replicas, Settings, Standby, default_cache_dir, default_identity};

#[derive(clap::Args, Debug)]
pub(crate) struct RunArgs {
    /// Host configuration (grants, limits, backends).
    #[arg(long, env = "RECONCILER_CONFIG")]
    config: PathBuf,
    /// Directory of guest components; overrides guestDirectory in the configuration.
    #[arg(long, env = "RECONCILER_GUESTS")]
    guests: Option<PathBuf>,
    /// Address of /healthz, /readyz, /metrics and /guests.
    #[arg(long, default_value = "0.0.0.0:8080")]
    listen: SocketAddr,
    /// Where compiled guests are cached (default: $XDG_CACHE_HOME/reconciler-host).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Watch only this namespace (namespaced kinds); default: all namespaces.
    #[arg(long)]
    watch_namespace: Option<String>,
    /// The host's own namespace, where Reconcilers' pull Secrets are read (default: the
    /// in-cluster service account's, or the kubeconfig context's).
    #[arg(long, env = "POD_NAMESPACE")]
    namespace: Option<String>,
    /// Take part in leader election; only the leader reconciles, and only while its last
    /// renewal is younger than the lease duration less a third (`docs/reliability.md`).
    #[arg(long)]
    leader_elect: bool,
    #[arg(long, default_value = "reconciler-host")]
    lease_name: String,
    #[arg(long, default_value = "default")]
    lease_namespace: String,
    #[arg(long, default_value = "15s", value_parser = humantime::parse_duration)]
    lease_duration: Duration,
    /// With `--leader-elect`: `warm`, a replica without the lease keeps its caches synced and
    /// its queues filled, and only starts its workers when it takes the lease; `cold`, it
    /// starts nothing until then (and lists every kind after taking over).
    #[arg(long, value_enum, default_value = "warm")]
    standby: Standby,
    /// This replica's identity in the lease (default: hostname-pid).
    #[arg(long, env = "POD_NAME")]
    identity: Option<String>,
    /// `auto`: spread the keys of every guest's primary kind over the replicas of the ring
    /// named `--lease-name` (each holds a member Lease in `--lease-namespace`). Exclusive with
    /// `--leader-elect`.
    #[arg(long, value_enum, default_value = "off")]
    shards: ShardMode,
    /// Sharded mode: filter on the API server (`shardSelector`, needs the `ShardedListAndWatch`
    /// feature gate), on the client, or `auto` (the server when it honours it).
    #[arg(long, default_value = "auto")]
    shard_filter: crate::cluster::informers::ShardFilter,
}

/// `run --shards`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ShardMode {
    Off,
    Auto,
}

impl RunArgs {
    /// The settings these arguments ask for. Reads the client configuration (KUBECONFIG or the
    /// in-cluster service account), once.
    pub(crate) async fn resolve(self) -> anyhow::Result<Settings> {
        let replicas = match (self.shards, self.leader_elect) {
            (ShardMode::Auto, true) => anyhow::bail!(
                "--leader-elect and --shards auto exclude each other: a sharded host shares the work, a leader-elected one keeps a standby"
            ),
            (ShardMode::Auto, false) => Replicas::Sharded,
            (ShardMode::Off, true) => Replicas::Elected {
                standby: self.standby,
            },
            (ShardMode::Off, false) => Replicas::Alone,
        };
        let identity = self.identity.clone().unwrap_or_else(default_identity);
        let kube = kube_config(&identity).await?;
        Ok(Settings {
            host_namespace: self
                .namespace
                .unwrap_or_else(|| kube.default_namespace.clone()),
            status_writer: self.identity.unwrap_or_else(|| "reconciler-host".into()),
            identity,
            kube,
            config: self.config,
            guests: self.guests,
            listen: self.listen,
            cache_dir: self.cache_dir.or_else(default_cache_dir),
            watch_namespace: self.watch_namespace,
            lease: Lease {
                name: self.lease_name,
                namespace: self.lease_namespace,
                duration: self.lease_duration,
            },
            replicas,
            shard_filter: self.shard_filter,
            queue_priorities: std::env::var_os(crate::controller::QUEUE_ENV)
                .is_none_or(|v| v != "fifo"),
        })
    }
}

/// The client configuration (KUBECONFIG or in-cluster), every request carrying the user agent
/// `reconciler-host/VERSION (IDENTITY)`: the API server's audit log then tells replicas apart
/// (the robustness checker attributes every write with it).
async fn kube_config(identity: &str) -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::infer()
        .await
        .context("cannot read the Kubernetes client configuration (KUBECONFIG or in-cluster service account)")?;
    let agent = format!("reconciler-host/{} ({identity})", env!("CARGO_PKG_VERSION"));
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_str(&agent)
            .unwrap_or_else(|_| http::HeaderValue::from_static("reconciler-host")),
    ));
    Ok(config)
}
