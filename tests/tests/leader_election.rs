//! The host's leader election (`host/src/replicas/leader.rs`) alone, against the real kube-apiserver: one
//! candidate leads and holds its write fence to each renewal's deadline; a leader cut off from
//! the API server (a relay blackholed) stops writing before the standby takes over; a healed
//! former leader stays standby; a graceful release hands over at once.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use reconciler_host::replicas::fence::WriteFence;
use reconciler_host::replicas::leader::{Election, LeaderOptions};
use reconciler_host_tests::robustness::relay::{Mode, Relay};
use reconciler_host_tests::{ControlPlane, test_namespace, wait_until};

const LEASE: Duration = Duration::from_secs(4);

fn options(namespace: &str, identity: &str) -> LeaderOptions {
    LeaderOptions {
        lease_name: "election".into(),
        namespace: namespace.into(),
        identity: identity.into(),
        duration: LEASE,
        grace: LEASE / 3,
    }
}

/// A client that reaches kube-apiserver through `relay`.
async fn relayed_client(plane: &ControlPlane, relay: &Relay) -> Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    config.cluster_url = format!("https://127.0.0.1:{}", relay.port()).parse()?;
    Ok(kube::Client::try_from(config)?)
}

/// When a condition first held, polled every 5 ms by a task of its own.
fn first_time(check: impl Fn() -> bool + Send + 'static) -> Arc<Mutex<Option<Instant>>> {
    let seen = Arc::new(Mutex::new(None));
    let out = seen.clone();
    tokio::spawn(async move {
        loop {
            if check() {
                *out.lock().unwrap() = Some(Instant::now());
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_off_leader_stops_writing_before_the_standby_takes_over() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let client = plane.client().await?;
    let ns = test_namespace(&client, "election").await?;
    let addr = {
        let url = client_url(plane).await?;
        tokio::net::lookup_host(url)
            .await?
            .next()
            .expect("an address")
    };
    let relay = Relay::start(addr).await?;

    let fence_a = WriteFence::default();
    fence_a.close();
    let a = Election::start(
        relayed_client(plane, &relay).await?,
        &options(&ns, "a"),
        fence_a.clone(),
    );
    let mut a_leads = a.is_leader.clone();
    tokio::time::timeout(Duration::from_secs(20), a_leads.wait_for(|l| *l)).await??;
    fence_a.open();
    let deadline = fence_a.deadline().expect("a leader's fence has a deadline");
    ensure!(deadline > Instant::now() && fence_a.is_open());
    // Renewals move the deadline on.
    wait_until(
        "a renewal to move the deadline",
        Duration::from_secs(10),
        || async {
            ensure!(fence_a.deadline() > Some(deadline), "not yet");
            Ok(())
        },
    )
    .await?;

    let fence_b = WriteFence::default();
    let b = Election::start(client.clone(), &options(&ns, "b"), fence_b.clone());
    tokio::time::sleep(LEASE).await;
    ensure!(
        !*b.is_leader.borrow(),
        "the standby must not lead while a renews"
    );

    // Cut a off: it must stop writing (its fence shut by the deadline alone, as the election
    // cannot reach the server) before b leads.
    relay.set_mode(Mode::Blackhole);
    let a_shut = first_time({
        let fence = fence_a.clone();
        move || !fence.is_open()
    });
    let b_leads = first_time({
        let leads = b.is_leader.clone();
        move || *leads.borrow()
    });
    wait_until("b takes over", Duration::from_secs(30), || async {
        ensure!(b_leads.lock().unwrap().is_some(), "not yet");
        Ok(())
    })
    .await?;
    let (a_shut, b_leads) = (
        a_shut.lock().unwrap().expect("a's fence shut"),
        b_leads.lock().unwrap().expect("b leads"),
    );
    ensure!(
        a_shut < b_leads,
        "a could still write when b began to lead ({:?} later)",
        a_shut.duration_since(b_leads)
    );
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let holder = leases
        .get("election")
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    ensure!(holder.as_deref() == Some("b"), "the lease names {holder:?}");

    // Healed, a sees b's lease and stays standby.
    relay.set_mode(Mode::Pass);
    tokio::time::timeout(Duration::from_secs(20), a_leads.wait_for(|l| !*l)).await??;
    tokio::time::sleep(LEASE).await;
    ensure!(
        !*a.is_leader.borrow(),
        "a took the lease back from a live b"
    );

    // b leaves gracefully: its fence shuts, the lease is released, a leads at once (well
    // within a lease duration of watching it unchanged: a sees the release on its watch of
    // the Lease and may hold it already when it is read here).
    b.release().await;
    ensure!(!fence_b.is_open(), "a released leader must not write");
    let holder = leases
        .get("election")
        .await?
        .spec
        .and_then(|s| s.holder_identity);
    ensure!(
        holder.as_deref() != Some("b"),
        "released, the lease still names {holder:?}"
    );
    tokio::time::timeout(Duration::from_secs(10), a_leads.wait_for(|l| *l)).await??;
    a.release().await;
    Ok(())
}

/// `host:port` of the control plane's kube-apiserver.
async fn client_url(plane: &ControlPlane) -> Result<String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(plane.kubeconfig())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let url = &config.cluster_url;
    Ok(format!(
        "{}:{}",
        url.host().unwrap_or("127.0.0.1"),
        url.port_u16().unwrap_or(443)
    ))
}
