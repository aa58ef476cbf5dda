//! What `reconciler-host run` was asked for, resolved once at the edge (`crate::cli`): the
//! manager and what it starts take these values and read no command-line argument.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::cluster::informers::ShardFilter;

/// The settings of one `run`.
pub(crate) struct Settings {
    /// The configuration file: loaded at start, then followed for changes.
    pub(crate) config: PathBuf,
    /// The guest directory asked for (`--guests`); the configuration's `guestDirectory` else.
    pub(crate) guests: Option<PathBuf>,
    /// Where `/healthz`, `/readyz`, `/metrics`, `/guests` and `/shards` are served.
    pub(crate) listen: SocketAddr,
    /// Compiled guests, pulled modules and records: `--cache-dir`, else the user's cache
    /// directory ([`default_cache_dir`]).
    pub(crate) cache_dir: Option<PathBuf>,
    /// Watch only this namespace (namespaced kinds).
    pub(crate) watch_namespace: Option<String>,
    /// The host's own namespace, where Reconcilers' pull Secrets and guests' HTTP credentials
    /// are read: `--namespace`, else the client configuration's.
    pub(crate) host_namespace: String,
    /// This replica in leases and in its user agent: `--identity`, else hostname-pid.
    pub(crate) identity: String,
    /// Who the Reconcilers' status writer says it is: `--identity`, else `reconciler-host`.
    pub(crate) status_writer: String,
    /// The lease (or the ring's leases) and what `status.host` names.
    pub(crate) lease: Lease,
    /// Alone, leader-elected, or sharded.
    pub(crate) replicas: Replicas,
    /// Sharded informers: on the server, on the client, or `auto`.
    pub(crate) shard_filter: ShardFilter,
    /// The client configuration (KUBECONFIG or in-cluster), its user agent naming `identity`:
    /// read once, for the host's client, the lease's and the backends' view of the API server.
    pub(crate) kube: kube::Config,
    /// Low-priority keys behind changes (the default); one FIFO with
    /// `RECONCILER_HOST_QUEUE=fifo`, the benches' switch to measure what the priorities buy.
    pub(crate) queue_priorities: bool,
}

/// `--lease-name`, `--lease-namespace`, `--lease-duration`.
pub(crate) struct Lease {
    pub(crate) name: String,
    pub(crate) namespace: String,
    pub(crate) duration: Duration,
}

/// How this replica shares the work with others.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Replicas {
    /// The only replica: it reconciles everything.
    Alone,
    /// Leader election: only the leader reconciles; the others stand by.
    Elected { standby: Standby },
    /// The keys of every guest's primary kind spread over the replicas of a ring.
    Sharded,
}

/// `run --standby`: what a leader-elected replica without the lease keeps running.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Standby {
    /// Caches synced and queues filled; workers start when it takes the lease.
    Warm,
    /// Nothing until it takes the lease (then it lists every kind).
    Cold,
}

/// The default compile cache directory: `$XDG_CACHE_HOME/reconciler-host`, else
/// `~/.cache/reconciler-host`.
pub(crate) fn default_cache_dir() -> Option<PathBuf> {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .map(|base| base.join("reconciler-host"))
}

/// A replica's identity when none is given: the hostname and the process id.
pub(crate) fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "host".into(), |h| h.trim().to_owned());
    format!("{host}-{}", std::process::id())
}
