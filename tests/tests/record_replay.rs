//! Record and replay (`docs/guests/replay.md`): a live host against the real kube-apiserver
//! records failing reconciles of guests whose grant sets `record`, and `reconciler-host
//! reconcile --replay` runs each again offline, every host call answered from the record:
//! with the same build it reproduces the calls and the result exactly; with another build it
//! names the first call where that build differs. Outbound HTTP exchanges are recorded and
//! replayed the same way, without the credentials the host added.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::echo::key_echo_server;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, guest_component, test_namespace,
    wait_until,
};
use serde_json::{Value, json};

/// The widget may read Secrets but not write its status, so each reconcile reads a Secret and
/// then fails on the status write: a transient failure, recorded. The Network backend refuses
/// CIDRs outside 10.100.0.0/16; the guest reports that as `Ready=False` without failing, so
/// its grant samples every reconcile.
fn grants(records: &Path) -> String {
    format!(
        r#"
recordDirectory: {}
backends:
  network: {{provider: memory, allowedCidrs: [10.100.0.0/16]}}
guests:
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/Secret, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget]
    record: {{failures: true, maxBytes: 1Mi}}
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]
    backends: [network]
    record: {{failures: false, sample: 1}}
"#,
        records.display()
    )
}

fn api(client: &kube::Client, ns: &str, group: &str, kind: &str) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, "v1", kind));
    Api::namespaced_with(client.clone(), ns, &resource)
}

/// The first record file in `dir` whose name has `key_part`, once one is there.
async fn record_of(dir: &Path, key_part: &str) -> Result<PathBuf> {
    wait_until(
        "a record to be written",
        Duration::from_secs(60),
        || async {
            let found = std::fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name()
                        .is_some_and(|n| n.to_string_lossy().contains(key_part))
                })
                .min();
            found.context("no record yet")
        },
    )
    .await
}

/// `reconciler-host reconcile --replay RECORD [--guest GUEST]`: its JSON and whether it exited 0.
fn replay(record: &Path, guest: Option<&Path>) -> Result<(Value, bool, String)> {
    let mut command = std::process::Command::new(
        reconciler_host_tests::paths::target_dir().join("debug/reconciler-host"),
    );
    command.arg("reconcile").arg("--replay").arg(record);
    if let Some(guest) = guest {
        command.arg("--guest").arg(guest);
    }
    let output = command.output()?;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let json = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("replay printed no JSON: {stderr}"))?;
    Ok((json, output.status.success(), stderr))
}

#[tokio::test]
async fn failed_live_reconciles_are_recorded_and_replay_offline_exactly_or_name_the_divergence()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    apply_crd_file(&client, "examples/crds/network.yaml").await?;
    let ns = test_namespace(&client, "record").await?;
    let records = tempfile::tempdir()?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(records.path()),
        guests: vec!["widget", "network"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "credentials"},
                "stringData": {"password": "hunter2-live"},
            }))?,
        )
        .await?;
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"message": "hi", "get": {"group": "", "version": "v1", "kind": "Secret",
                 "namespace": ns, "name": "credentials"}},
    }))?;
    api(&client, &ns, "test.reconciler.dev", "Widget")
        .create(&PostParams::default(), &widget)
        .await?;
    let network: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
        "metadata": {"name": "lan"},
        "spec": {"cidr": "192.168.50.0/24", "gateway": "192.168.50.1"},
    }))?;
    api(&client, &ns, "samplecrd.k8s.io", "Network")
        .create(&PostParams::default(), &network)
        .await?;

    // The widget: its status write was denied, after it read the Secret.
    let widget_record = record_of(&records.path().join("widget"), "_w1-")
        .await
        .map_err(|e| e.context(host.log_tail()))?;
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(&widget_record)?)?;
    let functions: Vec<&str> = recorded["calls"]
        .as_array()
        .context("calls")?
        .iter()
        .filter_map(|c| c["function"].as_str())
        .collect();
    assert_eq!(functions, ["get", "patch-status"], "{recorded:#}");
    assert!(
        recorded["result"]["transient"]
            .as_str()
            .is_some_and(|m| m.contains("denied")),
        "{recorded:#}"
    );
    // The Secret's value, read live from the API server, is not on disk.
    let text = std::fs::read_to_string(&widget_record)?;
    assert!(
        !text.contains("hunter2") && !text.contains("aHVudGVyMi1saXZl"),
        "{text}"
    );
    assert_eq!(
        recorded["calls"][0]["returned"]["ok"]["data"]["password"],
        "<redacted>"
    );
    assert_eq!(recorded["redacted"], json!(["v1/Secret"]));
    assert!(
        recorded["guest"]["digest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:"))
    );

    // The same build: the same calls with the same answers, the same result.
    let (same, exited_ok, stderr) = replay(&widget_record, None)?;
    assert!(exited_ok, "{stderr}\n{same:#}");
    assert_eq!(same["replay"]["identical"], true, "{same:#}");
    assert_eq!(same["result"], recorded["result"]);
    assert_eq!(same["calls"], recorded["calls"]);

    // Another build (widget-v2 reports guestVersion "2"): it reads the same Secret, then its
    // status patch differs, so the replay names call 1 and still finishes from the record.
    let (other, exited_ok, stderr) = replay(&widget_record, Some(&guest_component("widget-v2")?))?;
    assert!(!exited_ok, "a divergence exits non-zero: {other:#}");
    assert!(
        stderr.contains("diverged") && stderr.contains("call 1"),
        "{stderr}"
    );
    let divergence = &other["replay"]["firstDivergence"];
    assert_eq!(divergence["call"], 1, "{other:#}");
    assert_eq!(divergence["reason"], "different arguments");
    assert_eq!(divergence["recorded"]["function"], "patch-status");
    assert_eq!(
        divergence["replayed"]["patch"]["status"]["guestVersion"],
        "2"
    );
    assert_eq!(other["replay"]["sameResult"], true, "{other:#}");

    // The Network: the backend refused its CIDR; the guest said so in its status.
    let network_record = record_of(&records.path().join("network"), "_lan-").await?;
    let recorded: Value = serde_json::from_str(&std::fs::read_to_string(&network_record)?)?;
    let ensure = recorded["calls"]
        .as_array()
        .context("calls")?
        .iter()
        .find(|c| c["function"] == "ensure")
        .context("no ensure call recorded")?;
    assert!(
        ensure["returned"]["error"]["invalid"]
            .as_str()
            .is_some_and(|m| m.contains("outside allowed-cidrs")),
        "{recorded:#}"
    );
    let (same, exited_ok, stderr) = replay(&network_record, None)?;
    assert!(exited_ok, "{stderr}\n{same:#}");
    assert_eq!(same["calls"], recorded["calls"]);
    // The Go port of the guest makes exactly the same calls from the same record.
    let (go, exited_ok, stderr) = replay(&network_record, Some(&guest_component("network-go")?))?;
    assert!(exited_ok, "{stderr}\n{go:#}");
    assert_eq!(go["replay"]["identical"], true);

    // /guests lists what each guest has recorded.
    let guests: Value = serde_json::from_str(&host.get("/guests").await?)?;
    let widget_status = guests
        .as_array()
        .context("/guests")?
        .iter()
        .find(|g| g["guest"] == "widget")
        .context("widget in /guests")?;
    assert!(
        widget_status["records"]["count"]
            .as_u64()
            .is_some_and(|n| n >= 1),
        "{guests:#}"
    );
    assert!(
        widget_status["records"]["bytes"]
            .as_u64()
            .is_some_and(|b| b <= 1 << 20),
        "{guests:#}"
    );
    Ok(())
}

/// The API key the host adds to the fetcher's requests, from a Secret in its namespace.
const API_KEY: &str = "recorded-api-key-0123456789";

/// The fetcher may GET under the local server's `/api`, with the key added by the host; every
/// reconcile is recorded.
fn http_grants(records: &Path, server: std::net::SocketAddr) -> String {
    format!(
        r#"
recordDirectory: {}
guests:
  fetcher:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
    http:
    - prefix: http://{server}/api
      headers:
        X-API-Key: {{secretKeyRef: {{name: api, key: key}}}}
    record: {{failures: false, sample: 1}}
"#,
        records.display()
    )
}

#[tokio::test]
async fn an_http_exchange_is_recorded_without_its_key_and_replays_with_the_server_gone()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "record-http").await?;
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "api"},
                "stringData": {"key": API_KEY},
            }))?,
        )
        .await?;
    let (server, seen, serving) = key_echo_server().await?;
    let records = tempfile::tempdir()?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: http_grants(records.path(), server),
        guests: vec!["fetcher"],
        namespace: Some(&ns),
        // The host's own namespace: where the grant's Secret is read.
        extra_args: vec!["--namespace".into(), ns.clone()],
    })
    .await?;
    let url = format!("http://{server}/api/zones/example.org");
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"http": [{"url": url}]},
    }))?;
    api(&client, &ns, "test.reconciler.dev", "Widget")
        .create(&PostParams::default(), &widget)
        .await?;

    let record = record_of(&records.path().join("fetcher"), "_w1-")
        .await
        .map_err(|e| e.context(host.log_tail()))?;
    // The server was sent the key, by the host.
    let lines = seen.lock().unwrap().clone();
    let sent = format!("GET /api/zones/example.org {API_KEY}");
    assert!(
        !lines.is_empty() && lines.iter().all(|l| *l == sent),
        "{lines:?}"
    );
    // Not on disk: neither as sent nor as the server reflected it, nor base64-encoded.
    let bytes = std::fs::read(&record)?;
    let text = String::from_utf8_lossy(&bytes);
    use base64::Engine as _;
    let encoded = base64::engine::general_purpose::STANDARD.encode(API_KEY);
    assert!(
        !text.contains(API_KEY) && !text.contains(&encoded),
        "{text}"
    );
    let recorded: Value = serde_json::from_slice(&bytes)?;
    let calls = recorded["calls"].as_array().context("calls")?;
    let functions: Vec<&str> = calls
        .iter()
        .filter_map(|c| c["function"].as_str())
        .collect();
    assert_eq!(functions, ["patch-status", "handle"], "{recorded:#}");
    let exchange = &calls[1];
    assert_eq!(exchange["interface"], "wasi:http/outgoing-handler");
    assert_eq!(exchange["args"]["url"], url.as_str());
    assert_eq!(exchange["returned"]["status"], 200, "{recorded:#}");
    let masked = "*".repeat(API_KEY.len());
    let status = &calls[0]["args"]["patch"]["status"];
    assert_eq!(
        status["http"][0]["body"],
        format!(r#"{{"path":"/api/zones/example.org","seenKey":"{masked}"}}"#),
        "the guest was given the answer with the key masked: {recorded:#}"
    );

    // The server gone, the replay answers the exchange from the record: the same status
    // patch, the same calls and result, no divergence.
    serving.abort();
    let _ = serving.await;
    assert!(
        std::net::TcpStream::connect(server).is_err(),
        "the server still listens"
    );
    let (same, exited_ok, stderr) = replay(&record, None)?;
    assert!(exited_ok, "{stderr}\n{same:#}");
    assert_eq!(same["replay"]["identical"], true, "{same:#}");
    assert_eq!(same["replay"]["firstDivergence"], Value::Null);
    assert_eq!(same["result"], recorded["result"]);
    assert_eq!(same["calls"], recorded["calls"]);

    // A guest that asks another URL (here: the same build given an object that names one)
    // is answered from the record all the same, and the replay names the HTTP divergence.
    let mut other: Value = recorded.clone();
    let other_url = format!("http://{server}/api/zones/other.org");
    other["request"]["object"]["spec"]["http"][0]["url"] = json!(other_url);
    let other_record = records.path().join("other-url.json");
    std::fs::write(&other_record, serde_json::to_vec_pretty(&other)?)?;
    let (diverged, exited_ok, stderr) = replay(&other_record, None)?;
    assert!(!exited_ok, "a divergence exits non-zero: {diverged:#}");
    let divergence = &diverged["replay"]["firstDivergence"];
    assert_eq!(
        divergence["reason"], "a different HTTP request",
        "{diverged:#}"
    );
    let told = divergence["replayed"].as_str().context("replayed")?;
    assert!(told.contains(&url) && told.contains(&other_url), "{told}");
    assert!(
        stderr.contains("a different HTTP request") && stderr.contains(&other_url),
        "{stderr}"
    );
    assert_eq!(diverged["replay"]["sameResult"], true, "{diverged:#}");
    drop(host);
    Ok(())
}
