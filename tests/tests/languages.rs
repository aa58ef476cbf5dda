//! The greeter written in JavaScript, C and Go (`guests/js/greeter`, `guests/c/greeter`,
//! `guests/go/greeter`), each built by `guests/build.sh`, running in `reconciler-host run`
//! against the real kube-apiserver: the same behaviour as the Python guest
//! (`host_runtime.rs`), through the same contract, grants and limits. Their offline behaviour is
//! pinned by the shared fixtures (`host/tests/fixtures/greeter-*`); this shows the components also
//! work in the host's Kubernetes half (informers, queue, status writes, events, metrics).
//!
//! And the quickstarts (`docs/guests/<lang>.md`) are followed as written, from an empty directory
//! to a guest greeting a Widget on this control plane (`docs/guests/quickstarts.sh`).

use std::time::Duration;

use anyhow::Result;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, guest_component, kubectl, repo_root,
    test_namespace, wait_until,
};
use serde_json::{Value, json};

const GRANTS: &str = r#"
guests:
  greeter:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
"#;

/// Greets a Widget, records the `Greeted` event, then turns a non-string `spec.message` into a
/// permanent error that leaves the status as it was.
async fn greets(guest: &'static str) -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, guest).await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: GRANTS.into(),
        guests: vec![guest],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let widgets: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &ApiResource::from_gvk(&GroupVersionKind::gvk(
            "test.reconciler.dev",
            "v1",
            "Widget",
        )),
    );
    let widget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"message": format!("from {guest}")},
    }))?;
    widgets.create(&PostParams::default(), &widget).await?;
    let status = |widgets: Api<DynamicObject>| async move {
        let object = widgets.get("w").await?;
        anyhow::Ok(object.data.get("status").cloned().unwrap_or(Value::Null))
    };

    let greeted = wait_until("w greeted", Duration::from_secs(60), || async {
        let st = status(widgets.clone()).await?;
        anyhow::ensure!(
            st["greeting"] == format!("hello, from {guest}"),
            "status is {st}"
        );
        Ok(st)
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    assert_eq!(greeted["observedGeneration"], 1, "{greeted}");

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), &ns);
    wait_until("the Greeted event", Duration::from_secs(30), || async {
        let found = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("Greeted")
                    && e.note.as_deref() == Some(&format!("hello, from {guest}"))
            });
        anyhow::ensure!(found, "no Greeted event yet");
        Ok(())
    })
    .await?;

    widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"message": 7}})),
        )
        .await?;
    wait_until(
        "the permanent error counted",
        Duration::from_secs(60),
        || async {
            let failed = host
                .metric("reconciler_reconcile_total{guest=\"greeter\",result=\"permanent_error\"}")
                .await?;
            anyhow::ensure!(failed >= 1.0, "{failed}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    let after = status(widgets.clone()).await?;
    assert_eq!(after["greeting"], format!("hello, from {guest}"), "{after}");
    assert_eq!(after["observedGeneration"], 1, "{after}");
    Ok(())
}

#[tokio::test]
async fn a_javascript_guest_greets_through_the_same_contract() -> Result<()> {
    greets("greeter-js").await
}

#[tokio::test]
async fn a_c_guest_greets_through_the_same_contract() -> Result<()> {
    greets("greeter-c").await
}

#[tokio::test]
async fn a_go_guest_greets_through_the_same_contract() -> Result<()> {
    greets("greeter-go").await
}

/// `reconciler-host new` → `build.sh` → `check` → `reconcile` against the fixture → `run` against
/// this control plane, for every language, exactly as the pages say.
#[tokio::test]
async fn every_quickstart_works_as_written() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    // Builds the host binary (guests/build.sh), which the pages use; it also builds C and Go
    // guests (`reconciler-host componentize`).
    guest_component("greeter-c")?;
    let kubectl_dir = kubectl()?
        .parent()
        .map(ToOwned::to_owned)
        .unwrap_or_default();
    let path = std::env::join_paths(std::iter::once(kubectl_dir).chain(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    )))?;
    let output = tokio::process::Command::new(repo_root().join("docs/guests/quickstarts.sh"))
        .env("KUBECONFIG", cp.kubeconfig())
        .env(
            "CARGO_TARGET_DIR",
            reconciler_host_tests::paths::target_dir(),
        )
        .env("PATH", path)
        .output()
        .await?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(output.status.success(), "quickstarts.sh failed:\n{stderr}");
    for lang in ["rust", "python", "js", "c", "go"] {
        assert!(stderr.contains(&format!("{lang}: ok")), "{stderr}");
    }
    Ok(())
}
