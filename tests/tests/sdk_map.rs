//! Each SDK's `map` through the real host: the watcher test guest (`guests/testing/watcher` in
//! Rust, its ports `guests/{go,js,c}/watcher`) maps a `ConfigMap` to the Widgets its annotation
//! `test.reconciler.dev/widgets` names. `tests/sdk_watches.rs` checks what `watches()` declares;
//! this runs `map` in a component as the host calls it, on a ConfigMap event, and follows the
//! keys it returned into the queue.
//!
//! The Widgets named do not exist, on purpose: the watcher writes the status of every Widget it
//! reconciles, whose echo would reconcile it again, so no Widget lives in the namespace the host
//! watches (`--watch-namespace`), and each reconcile counted is one of a key `map` returned.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until,
};

const GRANT: &str = r"
guests:
  watcher:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Secret, v1/Namespace, v1/ServiceAccount]
    write: [test.reconciler.dev/v1/Widget/status]
";

/// Loading the guest (a Go or JavaScript component compiles in a few seconds), the event, the
/// map call, two reconciles.
const WITHIN: Duration = Duration::from_secs(60);

/// A ConfigMap naming the Widgets `w1` and `w2` (and `w1` again) reaches `map` of the build
/// `guest`, which returns without trapping, and its two keys are reconciled.
async fn the_keys_map_returns_are_reconciled(guest: &str) -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "sdk-map").await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: GRANT.to_owned(),
        guests: vec![guest],
        namespace: Some(&ns),
        extra_args: Vec::new(),
    })
    .await?;
    let pointer = ConfigMap {
        metadata: ObjectMeta {
            name: Some("pointer".into()),
            annotations: Some(BTreeMap::from([(
                "test.reconciler.dev/widgets".to_owned(),
                "w1, w2,w1".to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pointer)
        .await?;

    let mapped = r#"reconciler_map_calls_total{guest="watcher",result="success"}"#;
    let reconciled = r#"reconciler_reconcile_total{guest="watcher",result="success"}"#;
    wait_until(
        &format!("{guest}: a map call and two reconciles"),
        WITHIN,
        || async {
            let (maps, reconciles) = (host.metric(mapped).await?, host.metric(reconciled).await?);
            ensure!(
                maps >= 1.0 && reconciles >= 2.0,
                "{maps} map calls, {reconciles} reconciles"
            );
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    for result in ["trap", "deadline", "memory_limit"] {
        let series = format!(r#"reconciler_map_calls_total{{guest="watcher",result="{result}"}}"#);
        let failed = host.metric(&series).await.unwrap_or(0.0);
        ensure!(
            failed == 0.0,
            "{guest}: {series} is {failed}\n{}",
            host.log_tail()
        );
    }
    // One object, two distinct keys: the keys reconciled are exactly those, whole and once
    // each per map call. (A new subscriber may be handed the object twice, in the cache's
    // snapshot and as the watch's event, and then maps it twice: each map call counts.)
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (maps, reconciles) = (host.metric(mapped).await?, host.metric(reconciled).await?);
    ensure!(
        reconciles <= 2.0 * maps,
        "{guest}: {reconciles} reconciles for {maps} map calls of two keys\n{}",
        host.log_tail()
    );
    let keys: std::collections::BTreeSet<String> = host
        .log()
        .lines()
        .filter(|l| l.contains(": reconciled"))
        .filter_map(|l| {
            let key = l.split_once("reconcile{guest=watcher key=")?.1;
            Some(key.split_once(' ')?.0.to_owned())
        })
        .collect();
    let wanted: std::collections::BTreeSet<String> =
        ["w1", "w2"].map(|name| format!("{ns}/{name}")).into();
    ensure!(
        keys == wanted,
        "{guest}: reconciled {keys:?}, not {wanted:?}\n{}",
        host.log_tail()
    );
    Ok(())
}

#[tokio::test]
async fn the_rust_watcher_maps_a_config_map_to_the_widgets_it_names() -> Result<()> {
    the_keys_map_returns_are_reconciled("watcher").await
}

#[tokio::test]
async fn the_go_watcher_maps_a_config_map_to_the_widgets_it_names() -> Result<()> {
    the_keys_map_returns_are_reconciled("watcher-go").await
}

#[tokio::test]
async fn the_javascript_watcher_maps_a_config_map_to_the_widgets_it_names() -> Result<()> {
    the_keys_map_returns_are_reconciled("watcher-js").await
}

#[tokio::test]
async fn the_c_watcher_maps_a_config_map_to_the_widgets_it_names() -> Result<()> {
    the_keys_map_returns_are_reconciled("watcher-c").await
}
