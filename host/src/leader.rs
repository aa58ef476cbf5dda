//! Leader election on a `coordination.k8s.io/v1` Lease (via kube-lease-manager): several hosts
//! may run, one reconciles. The others take over within the lease duration when the leader
//! dies; a host that sees it lost the lease stops reconciling at once; a host that shuts down
//! releases the lease so a standby takes over without waiting for expiry.

use std::time::Duration;

use kube_lease_manager::{LeaseManagerBuilder, LeaseManagerError};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Debug, Clone)]
pub struct LeaderOptions {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
    /// Renew this long before the lease expires.
    pub grace: Duration,
}

/// A running election: `is_leader` changes as leadership is won and lost.
pub struct Election {
    pub is_leader: watch::Receiver<bool>,
    task: JoinHandle<Result<kube_lease_manager::LeaseManager, LeaseManagerError>>,
}

impl Election {
    pub async fn start(client: kube::Client, options: &LeaderOptions) -> anyhow::Result<Self> {
        let manager = LeaseManagerBuilder::new(client, &options.lease_name)
            .with_namespace(&options.namespace)
            .with_identity(&options.identity)
            .with_duration(options.duration.as_secs().max(2))
            .with_grace(options.grace.as_secs().max(1))
            .with_field_manager("reconciler-host")
            .build()
            .await?;
        let (is_leader, task) = manager.watch().await;
        Ok(Self { is_leader, task })
    }

    /// Releases the lease (if held) and stops the election.
    pub async fn release(self) {
        drop(self.is_leader);
        match self.task.await {
            Ok(Ok(_)) => tracing::info!("lease released"),
            Ok(Err(e)) => tracing::warn!("releasing the lease failed: {e}"),
            Err(e) => tracing::warn!("lease task failed: {e}"),
        }
    }
}
