//! The Kubernetes release before the default (n−1, the second of `K8S_SUPPORTED_VERSIONS` in
//! `tools/control-plane/version.env`) still runs the host: a control plane of its own at that
//! version (`cp up` with `K8S_VERSION`, built first if this machine has not built it), a guest
//! from the host's directory reconciling a Network, and a `ClusterReconciler` whose guest the
//! host pulls from a real OCI registry greeting a Widget. Everything is read back from the API
//! server. The rest of the suite runs on the default release.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::control_plane::supported_kubernetes_versions;
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    HostOptions, HostProcess, PrivateControlPlane, PrivateRegistry, apply_crd_file,
    guest_component, test_namespace, wait_until, widgets, with_password,
};
use serde_json::{Value, json};

const APPLY: &str = "previous-kubernetes-test";

fn api(
    client: &kube::Client,
    ns: Option<&str>,
    gvk: &GroupVersionKind,
    plural: &str,
) -> Api<DynamicObject> {
    let resource = ApiResource::from_gvk_with_plural(gvk, plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// `reconciler-host push` of a built guest to `oci://<registry>/<repo>`; the manifest digest.
fn push(registry: &PrivateRegistry, guest: &str, repo: &str) -> Result<String> {
    let mut command = std::process::Command::new(target_dir().join("debug/reconciler-host"));
    command
        .arg("push")
        .arg(guest_component(guest)?)
        .arg(format!("oci://{}/{repo}", registry.address()))
        .args([
            "--plain-http",
            "--username",
            registry.username(),
            "--password-stdin",
        ]);
    let out = with_password(command, registry.password())?;
    ensure!(
        out.status.success(),
        "push {guest}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_owned())
}

/// Waits until `object`'s condition `kind` is `True`; the object's status then.
async fn condition_true(
    api: &Api<DynamicObject>,
    name: &str,
    kind: &str,
    host: &HostProcess,
) -> Result<Value> {
    wait_until(
        &format!("{name} {kind}=True"),
        Duration::from_secs(90),
        || async {
            let status = api.get(name).await?.data["status"].clone();
            let found = status["conditions"].as_array().is_some_and(|all| {
                all.iter()
                    .any(|c| c["type"] == kind && c["status"] == "True")
            });
            ensure!(found, "status is {status}");
            Ok(status)
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}

#[tokio::test]
async fn on_the_previous_release_a_directory_guest_and_a_pulled_reconciler_both_reconcile()
-> Result<()> {
    let versions = supported_kubernetes_versions()?;
    let previous = versions
        .get(1)
        .context("version.env names no release before the default")?;
    let cp = PrivateControlPlane::start_version("previous-kubernetes", previous).await?;
    let client = cp.client().await?;
    let server = client.apiserver_version().await?;
    assert_eq!(
        &server.git_version, previous,
        "the API server says {server:?}"
    );

    for crd in [
        "deploy/crds/reconcilers.yaml",
        "guests/testing/widget/crd.yaml",
        "examples/crds/network.yaml",
    ] {
        apply_crd_file(&client, crd).await?;
    }
    let ns = test_namespace(&client, "previous-k8s").await?;
    let registry = PrivateRegistry::start("previous-kubernetes").await?;
    let digest = push(&registry, "greeter-c", "guests/greeter:v1")?;
    let auth = json!({"auths": {registry.address(): {
        "username": registry.username(), "password": registry.password()}}});
    let secret = serde_json::from_value(json!({
        "metadata": {"name": "registry"}, "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": auth.to_string()},
    }))?;
    Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &secret)
        .await?;

    let cache = tempfile::tempdir()?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: format!(
            r#"
backends:
  network: {{provider: memory}}
guests:
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]
    backends: [network]
registries:
  insecure: ["{registry}"]
reconcilers:
  selector: test={ns}
  pullSecrets: [registry]
  allow:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
    registries: ["{registry}/guests"]
"#,
            registry = registry.address()
        ),
        guests: vec!["network"],
        namespace: Some(&ns),
        extra_args: vec![
            "--namespace".into(),
            ns.clone(),
            "--cache-dir".into(),
            cache.path().display().to_string(),
        ],
    })
    .await?;

    // The guest from the directory.
    let networks = api(
        &client,
        Some(&ns),
        &GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network"),
        "networks",
    );
    let network = json!({
        "apiVersion": "samplecrd.k8s.io/v1", "kind": "Network", "metadata": {"name": "n"},
        "spec": {"cidr": "10.78.0.0/24", "gateway": "10.78.0.1"},
    });
    networks
        .patch("n", &PatchParams::apply(APPLY), &Patch::Apply(network))
        .await?;
    condition_true(&networks, "n", "Ready", &host).await?;

    // The guest pulled from the registry by the Reconciler's tag.
    let reconcilers = api(
        &client,
        None,
        &GroupVersionKind::gvk("reconciler.dev", "v1alpha1", "ClusterReconciler"),
        "clusterreconcilers",
    );
    let name = format!("greeter-{ns}");
    let reconciler = json!({
        "apiVersion": "reconciler.dev/v1alpha1", "kind": "ClusterReconciler",
        "metadata": {"name": name, "labels": {"test": ns}},
        "spec": {
            "module": format!("oci://{}/guests/greeter:v1", registry.address()),
            "pullSecretRef": {"name": "registry"},
            "grant": {"read": ["test.reconciler.dev/v1/Widget"],
                      "write": ["test.reconciler.dev/v1/Widget/status"]},
        },
    });
    reconcilers
        .patch(&name, &PatchParams::apply(APPLY), &Patch::Apply(reconciler))
        .await?;
    let status = condition_true(&reconcilers, &name, "Ready", &host).await?;
    assert_eq!(status["digest"], digest.as_str(), "{status}");
    let widget = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget", "metadata": {"name": "w"},
        "spec": {"message": "n-1"},
    });
    let widgets = widgets(&client, &ns);
    widgets
        .patch("w", &PatchParams::apply(APPLY), &Patch::Apply(widget))
        .await?;
    wait_until("Widget w greeted", Duration::from_secs(60), || async {
        let greeting = widgets.get("w").await?.data["status"]["greeting"].clone();
        ensure!(greeting == "hello, n-1", "greeting is {greeting}");
        Ok(())
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    Ok(())
}
