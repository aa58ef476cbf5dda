//! The network guest end to end: a real kube-apiserver, the host with the `linux` backend in a
//! network namespace this test creates, and the bridges read back from the kernel with `ip`.
//! Needs root (CAP_NET_ADMIN), as the demo does.
//!
//! Every test runs against both builds of the guest: the Rust reference (`guests/network`,
//! `network.wasm`) and its Go port (`guests/go/network`, built as `network-go.wasm`); both call
//! themselves `network` and run from `network.wasm`, so they share the grants, metrics and
//! expectations.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, guest_component, test_namespace,
    wait_until,
};
use serde_json::{Value, json};

/// A network namespace for one test, deleted on drop.
struct Netns(String);

impl Netns {
    fn create(name: &str) -> Result<Self> {
        let status = Command::new("ip").args(["netns", "add", name]).status()?;
        anyhow::ensure!(status.success(), "ip netns add {name} failed (root needed)");
        Ok(Self(name.to_owned()))
    }

    /// The bridges in the namespace: name → (addresses "a.b.c.d/len", up).
    fn bridges(&self) -> Result<Vec<(String, Vec<String>, bool)>> {
        let out = Command::new("ip")
            .args(["-n", &self.0, "-j", "address", "show", "type", "bridge"])
            .output()?;
        anyhow::ensure!(out.status.success(), "ip address show failed");
        let links: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap_or_default();
        Ok(links
            .iter()
            .map(|l| {
                let addrs = l["addr_info"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|a| a["family"] == "inet")
                    .map(|a| format!("{}/{}", a["local"].as_str().unwrap_or(""), a["prefixlen"]))
                    .collect();
                let up = l["flags"]
                    .as_array()
                    .is_some_and(|f| f.iter().any(|x| x == "UP"));
                (l["ifname"].as_str().unwrap_or("").to_owned(), addrs, up)
            })
            .collect())
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

fn grants(netns: &str) -> String {
    format!(
        r#"
backends:
  network: {{provider: linux, netns: {netns}}}
guests:
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]
    backends: [network]
"#
    )
}

fn network_api(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk(&GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network"));
    Api::namespaced_with(client.clone(), ns, &resource)
}

fn ready(object: &DynamicObject) -> Option<(String, String)> {
    let conditions = object.data["status"]["conditions"].as_array()?;
    let ready = conditions.iter().find(|c| c["type"] == "Ready")?;
    Some((
        ready["status"].as_str()?.to_owned(),
        ready["reason"].as_str()?.to_owned(),
    ))
}

/// The guest's builds: the Rust reference and the Go port.
const RUST: &str = "network";
const GO: &str = "network-go";

struct Setup {
    netns: Netns,
    api: Api<DynamicObject>,
    host: HostProcess,
    ns: String,
    build: &'static str,
}

async fn setup(prefix: &str, build: &'static str) -> Result<Setup> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "examples/crds/network.yaml").await?;
    let ns = test_namespace(&client, prefix).await?;
    let netns = Netns::create(&format!("rh-test-{ns}"))?;
    let host = start_host(cp, &ns, &netns, build).await?;
    Ok(Setup {
        api: network_api(&client, &ns),
        netns,
        host,
        ns,
        build,
    })
}

async fn start_host(
    cp: &ControlPlane,
    ns: &str,
    netns: &Netns,
    build: &'static str,
) -> Result<HostProcess> {
    HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(&netns.0),
        guests: vec![build],
        namespace: Some(ns),
        extra_args: vec![],
    })
    .await
}

impl Setup {
    async fn create(&self, name: &str, cidr: &str, gateway: &str) -> Result<()> {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
            "metadata": {"name": name}, "spec": {"cidr": cidr, "gateway": gateway},
        }))?;
        self.api.create(&PostParams::default(), &object).await?;
        Ok(())
    }

    async fn wait_ready(&self, name: &str, status: &str, reason: &str) -> Result<DynamicObject> {
        wait_until(
            &format!("{name} Ready={status} ({reason})"),
            Duration::from_secs(90),
            || async {
                let object = self.api.get(name).await?;
                let generation = object.metadata.generation;
                let observed = object.data["status"]["observedGeneration"].as_i64();
                match ready(&object) {
                    Some((s, r)) if s == status && r == reason && observed == generation => {
                        Ok(object)
                    }
                    other => bail!(
                        "Ready is {other:?}, observedGeneration {observed:?} of {generation:?}"
                    ),
                }
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    /// The bridge of a Network as the kernel reports it.
    fn bridge(&self, object: &DynamicObject) -> Result<Option<(Vec<String>, bool)>> {
        let name = object.data["status"]["interfaceName"]
            .as_str()
            .context("status.interfaceName")?;
        Ok(self
            .netns
            .bridges()?
            .into_iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, a, up)| (a, up)))
    }
}

#[tokio::test]
async fn create_update_repair_and_delete_a_bridge() -> Result<()> {
    create_update_repair_and_delete(RUST).await
}

#[tokio::test]
async fn create_update_repair_and_delete_a_bridge_in_go() -> Result<()> {
    create_update_repair_and_delete(GO).await
}

async fn create_update_repair_and_delete(build: &'static str) -> Result<()> {
    let s = setup(&format!("net-lifecycle-{build}"), build).await?;
    s.create("frontend", "10.210.1.0/24", "10.210.1.1").await?;
    let object = s.wait_ready("frontend", "True", "Synced").await?;
    assert_eq!(
        s.bridge(&object)?,
        Some((vec!["10.210.1.1/24".to_owned()], true))
    );
    assert_eq!(object.data["status"]["actualGateway"], "10.210.1.1");

    // Update the gateway: the address changes, observedGeneration follows.
    s.api
        .patch(
            "frontend",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gateway": "10.210.1.254"}})),
        )
        .await?;
    let object = s.wait_ready("frontend", "True", "Synced").await?;
    assert_eq!(object.metadata.generation, Some(2));
    assert_eq!(
        s.bridge(&object)?,
        Some((vec!["10.210.1.254/24".to_owned()], true))
    );

    // Delete the bridge by hand: drift, repaired on the guest's next resync (30 s).
    let name = object.data["status"]["interfaceName"]
        .as_str()
        .unwrap()
        .to_owned();
    let status = Command::new("ip")
        .args(["-n", &s.netns.0, "link", "del", &name])
        .status()?;
    assert!(status.success());
    wait_until("the bridge repaired", Duration::from_secs(60), || async {
        match s.bridge(&object)? {
            Some((addrs, true)) if addrs == ["10.210.1.254/24"] => Ok(()),
            other => bail!("bridge is {other:?}"),
        }
    })
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;

    // Delete the Network: the bridge goes, then the finalizer, then the object.
    s.api.delete("frontend", &DeleteParams::default()).await?;
    wait_until("frontend gone", Duration::from_secs(60), || async {
        anyhow::ensure!(s.api.get_opt("frontend").await?.is_none(), "still there");
        Ok(())
    })
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    assert!(
        s.netns.bridges()?.iter().all(|(n, _, _)| *n != name),
        "bridge removed"
    );
    Ok(())
}

#[tokio::test]
async fn invalid_and_overlapping_specs_are_not_ready_with_a_reason() -> Result<()> {
    invalid_and_overlapping_specs(RUST).await
}

#[tokio::test]
async fn invalid_and_overlapping_specs_are_not_ready_with_a_reason_in_go() -> Result<()> {
    invalid_and_overlapping_specs(GO).await
}

async fn invalid_and_overlapping_specs(build: &'static str) -> Result<()> {
    let s = setup(&format!("net-invalid-{build}"), build).await?;
    // The CRD's CEL rules accept this (the gateway is inside the CIDR) but the guest does not:
    // the network address cannot be a gateway.
    s.create("zero", "10.211.0.0/24", "10.211.0.0").await?;
    let object = s.wait_ready("zero", "False", "InvalidSpec").await?;
    let conditions = object.data["status"]["conditions"].to_string();
    assert!(
        conditions.contains("gateway"),
        "the message names the field: {conditions}"
    );

    s.create("first", "10.212.0.0/24", "10.212.0.1").await?;
    s.wait_ready("first", "True", "Synced").await?;
    s.create("later", "10.212.0.0/16", "10.212.1.1").await?;
    let later = s.wait_ready("later", "False", "BackendRejected").await?;
    assert!(
        later.data["status"]["conditions"]
            .to_string()
            .contains("10.212.0.0/24"),
        "names the other network"
    );
    assert_eq!(
        s.netns.bridges()?.len(),
        1,
        "only the first network is realised"
    );

    // No retry storm: settled objects are not reconciled again and again.
    let settled = s
        .host
        .metric("reconciler_reconcile_total{guest=\"network\",result=\"success\"}")
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let later_count = s
        .host
        .metric("reconciler_reconcile_total{guest=\"network\",result=\"success\"}")
        .await?;
    assert!(
        later_count - settled <= 1.0,
        "{settled} -> {later_count} reconciles while nothing changed"
    );
    assert_eq!(
        s.host
            .metric("reconciler_reconcile_total{guest=\"network\",result=\"error\"}")
            .await?,
        0.0
    );
    Ok(())
}

#[tokio::test]
async fn converges_after_a_host_kill_and_across_a_guest_replacement() -> Result<()> {
    converges_after_a_host_kill(RUST).await
}

#[tokio::test]
async fn converges_after_a_host_kill_and_across_a_guest_replacement_in_go() -> Result<()> {
    converges_after_a_host_kill(GO).await
}

async fn converges_after_a_host_kill(build: &'static str) -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let mut s = setup(&format!("net-restart-{build}"), build).await?;
    for i in 0..3 {
        s.create(
            &format!("n{i}"),
            &format!("10.213.{i}.0/24"),
            &format!("10.213.{i}.1"),
        )
        .await?;
    }
    s.wait_ready("n0", "True", "Synced").await?;
    s.host.kill()?;
    for i in 3..6 {
        s.create(
            &format!("n{i}"),
            &format!("10.213.{i}.0/24"),
            &format!("10.213.{i}.1"),
        )
        .await?;
    }
    s.api.delete("n1", &DeleteParams::default()).await?;
    s.host = start_host(cp, &s.ns, &s.netns, build).await?;
    for i in [0, 2, 3, 4, 5] {
        s.wait_ready(&format!("n{i}"), "True", "Synced").await?;
    }
    wait_until(
        "n1 deleted while the host was down, cleaned up after",
        Duration::from_secs(60),
        || async {
            anyhow::ensure!(s.api.get_opt("n1").await?.is_none(), "n1 still there");
            Ok(())
        },
    )
    .await?;
    assert_eq!(s.netns.bridges()?.len(), 5);

    // Replace the guest's file with a different file of the same guest (an extra custom
    // section changes its hash, not its behaviour) while the objects exist.
    let mut bytes = std::fs::read(guest_component(s.build)?)?;
    bytes.extend_from_slice(&[0x00, 0x06, 0x05, b'b', b'u', b'i', b'l', b'd']);
    let guests = s.host.dir.path().join("guests");
    let file = reconciler_host_tests::host::deployed_file_name(s.build).await?;
    std::fs::write(guests.join(format!(".{file}.tmp")), &bytes)?;
    std::fs::rename(guests.join(format!(".{file}.tmp")), guests.join(&file))?;
    wait_until(
        "the new version loaded",
        Duration::from_secs(30),
        || async {
            let log = s.host.log();
            anyhow::ensure!(log.matches("guest loaded").count() >= 2, "not yet");
            Ok(())
        },
    )
    .await?;
    s.api
        .patch(
            "n0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"gateway": "10.213.0.2"}})),
        )
        .await?;
    s.wait_ready("n0", "True", "Synced").await?;
    assert_eq!(
        s.host
            .metric("reconciler_reconcile_total{guest=\"network\",result=\"error\"}")
            .await?,
        0.0
    );
    assert_eq!(
        s.host
            .metric("reconciler_reconcile_total{guest=\"network\",result=\"trap\"}")
            .await?,
        0.0
    );
    Ok(())
}
