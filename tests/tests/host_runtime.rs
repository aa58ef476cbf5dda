//! The Kubernetes half of the host against the real kube-apiserver: a `reconciler-host run`
//! process with the widget test guest (whose behaviour each Widget's spec drives), one host and
//! one namespace per test.

use std::time::Duration;

use anyhow::{Context, Result};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until,
};
use serde_json::{Value, json};

const GRANTS: &str = r#"
guests:
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
    limits: {deadline: 3s}
"#;

fn widget_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        "test.reconciler.dev",
        "v1",
        "Widget",
    ))
}

struct Setup {
    client: kube::Client,
    ns: String,
    widgets: Api<DynamicObject>,
    host: HostProcess,
}

async fn setup(prefix: &str) -> Result<Setup> {
    setup_with(prefix, "widget", GRANTS).await
}

/// A host running one guest (`target/guests/<guest>.wasm`) with `grants`.
async fn setup_with(prefix: &str, guest: &'static str, grants: &str) -> Result<Setup> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, prefix).await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants.into(),
        guests: vec![guest],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let widgets = Api::namespaced_with(client.clone(), &ns, &widget_resource());
    Ok(Setup {
        client,
        ns,
        widgets,
        host,
    })
}

impl Setup {
    async fn create(&self, name: &str, spec: Value) -> Result<DynamicObject> {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        Ok(self.widgets.create(&PostParams::default(), &object).await?)
    }

    async fn patch_spec(&self, name: &str, spec: Value) -> Result<()> {
        self.widgets
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await?;
        Ok(())
    }

    async fn status(&self, name: &str) -> Result<Value> {
        let object = self.widgets.get(name).await?;
        Ok(object.data.get("status").cloned().unwrap_or(Value::Null))
    }

    /// Waits until the widget's status satisfies `check`, and returns it.
    async fn wait_status(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        check: impl Fn(&Value) -> bool,
    ) -> Result<Value> {
        let result = wait_until(what, timeout, || async {
            let status = self.status(name).await?;
            anyhow::ensure!(check(&status), "status is {status}");
            Ok(status)
        })
        .await;
        result.map_err(|e| e.context(self.host.log_tail()))
    }

    /// Waits until the guest has reconciled `name` at least once.
    async fn reconciled(&self, name: &str, what: &str) -> Result<Value> {
        self.wait_status(name, what, Duration::from_secs(60), |st| {
            reconciles(st) >= 1
        })
        .await
    }

    async fn metric(&self, series: &str) -> Result<f64> {
        self.host.metric(series).await
    }
}

fn reconciles(status: &Value) -> u64 {
    status["reconciles"].as_u64().unwrap_or(0)
}

#[tokio::test]
async fn reconciles_sets_finalizer_writes_status_applies_secondary_and_records_events() -> Result<()>
{
    let s = setup("converge").await?;
    s.create("w1", json!({"message": "hello", "configMap": true}))
        .await?;
    let status = s
        .wait_status("w1", "w1 reconciled", Duration::from_secs(60), |st| {
            reconciles(st) >= 1 && st["message"] == "hello"
        })
        .await?;
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["guestVersion"], "1");

    let w1 = s.widgets.get("w1").await?;
    assert!(
        w1.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "test.reconciler.dev/cleanup"),
        "finalizer added before the first reconcile: {:?}",
        w1.metadata.finalizers
    );
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(s.client.clone(), &s.ns);
    // The guest writes its status before it applies the ConfigMap: wait for that too.
    let owned = wait_until(
        "the guest applied its ConfigMap",
        Duration::from_secs(30),
        || async { Ok(config_maps.get("w1-widget").await?) },
    )
    .await?;
    assert_eq!(owned.metadata.owner_references.unwrap()[0].name, "w1");
    assert_eq!(
        owned.metadata.managed_fields.unwrap()[0].manager.as_deref(),
        Some("widget")
    );

    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(s.client.clone(), &s.ns);
    wait_until(
        "a Reconciled event about w1",
        Duration::from_secs(30),
        || async {
            let list = events.list(&Default::default()).await?;
            list.items
                .iter()
                .find(|e| {
                    e.reason.as_deref() == Some("Reconciled")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("w1")
                })
                .map(|_| ())
                .context("no event yet")
        },
    )
    .await?;

    // A change to the secondary (owned ConfigMap) wakes its owner.
    let before = reconciles(&s.status("w1").await?);
    config_maps
        .patch(
            "w1-widget",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"poke": "1"}}})),
        )
        .await?;
    s.wait_status(
        "w1",
        "w1 reconciled after its ConfigMap changed",
        Duration::from_secs(30),
        |st| reconciles(st) > before,
    )
    .await?;

    let metrics = s.host.get("/metrics").await?;
    for family in [
        "workqueue_depth{name=\"widget\"}",
        "workqueue_adds_total{name=\"widget\"}",
        "workqueue_queue_duration_seconds_bucket{",
        "workqueue_work_duration_seconds_bucket{",
        "workqueue_retries_total{name=\"widget\"}",
        "workqueue_unfinished_work_seconds{name=\"widget\"}",
        "workqueue_longest_running_processor_seconds{name=\"widget\"}",
        "reconciler_reconcile_total{guest=\"widget\",result=\"success\"}",
        "reconciler_reconcile_duration_seconds_bucket{",
        "reconciler_instantiate_duration_seconds_bucket{",
        "reconciler_guest_loaded{",
        "reconciler_informer_objects{",
    ] {
        assert!(
            metrics.contains(family),
            "/metrics lacks {family}:\n{metrics}"
        );
    }
    assert!(s.metric("workqueue_adds_total{name=\"widget\"}").await? >= 2.0);
    assert!(
        s.metric("reconciler_reconcile_total{guest=\"widget\",result=\"success\"}")
            .await?
            >= 2.0
    );
    assert_eq!(s.host.get("/readyz").await?, "ok");
    Ok(())
}

/// `/readyz` waits for the guests the directory held at start, not only for the caches of those
/// already running: while one is still being judged (here a guest whose `manifest()` outlasts
/// the 5 s load deadline, judged before `widget.wasm` in name order) it answers 503 and says
/// why; once that one is refused and the widget guest's caches synced, `ok`.
#[tokio::test]
async fn readyz_waits_for_the_guests_present_at_start() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "ready").await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: GRANTS.into(),
        guests: vec!["widget", "slow-manifest"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    // `start` returned on the first `/healthz`, within a second of the host's start.
    let (code, body) = host.get_any("/readyz").await?;
    anyhow::ensure!(
        code == 503 && body.starts_with("guests not loaded yet"),
        "/readyz answered {code} {body:?} while a guest was still being loaded\n{}",
        host.log_tail()
    );
    wait_until("/readyz to answer ok", Duration::from_secs(60), || async {
        let (code, body) = host.get_any("/readyz").await?;
        anyhow::ensure!(code == 200 && body == "ok", "{code} {body}");
        Ok(())
    })
    .await?;
    let guests: Value = serde_json::from_str(&host.get("/guests").await?)?;
    let states: Vec<(&str, &str)> = guests
        .as_array()
        .context("/guests is a list")?
        .iter()
        .filter_map(|g| Some((g["file"].as_str()?, g["state"]["state"].as_str()?)))
        .collect();
    anyhow::ensure!(
        states
            .iter()
            .any(|(f, s)| f.ends_with("slow-manifest.wasm") && *s == "failed")
            && states
                .iter()
                .any(|(f, s)| f.ends_with("widget.wasm") && *s == "loaded"),
        "ready with the guests in these states: {states:?}"
    );
    Ok(())
}

#[tokio::test]
async fn rapid_updates_are_deduplicated_and_each_key_runs_on_one_worker_at_a_time() -> Result<()> {
    let s = setup("dedup").await?;
    // Each reconcile takes ~150 ms, so updates pile up while one runs.
    s.create(
        "w",
        json!({"mode": "sleep", "sleepMs": 150, "message": "m0"}),
    )
    .await?;
    s.reconciled("w", "first reconcile").await?;
    for i in 1..=20 {
        s.patch_spec("w", json!({"message": format!("m{i}")}))
            .await?;
    }
    let status = s
        .wait_status(
            "w",
            "the last update reconciled",
            Duration::from_secs(60),
            |st| st["message"] == "m20",
        )
        .await?;
    let generation = s.widgets.get("w").await?.metadata.generation.unwrap_or(0);
    assert_eq!(status["observedGeneration"], generation);
    // 21 versions of the spec; rapid updates to a queued key collapse into one reconcile.
    assert!(
        reconciles(&status) < 21,
        "no deduplication: {} reconciles for 21 versions",
        reconciles(&status)
    );
    // Exclusivity (and read-your-writes): every reconcile read the status the previous one
    // wrote, so the guest's counter equals the number of successful reconciles. Two workers on
    // one key, or a stale cache read, would both write n+1 and lose a count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let succeeded = s
        .metric("reconciler_reconcile_total{guest=\"widget\",result=\"success\"}")
        .await?;
    assert_eq!(reconciles(&s.status("w").await?) as f64, succeeded);
    Ok(())
}

#[tokio::test]
async fn failures_back_off_and_success_resets_the_backoff() -> Result<()> {
    let s = setup("backoff").await?;
    let started = std::time::Instant::now();
    s.create("w", json!({"failTimes": 4})).await?;
    let status = s.reconciled("w", "success after 4 failures").await?;
    // Attempts 0..3 failed, attempt 4 succeeded: 5 + 10 + 20 + 40 ms of backoff at least.
    assert_eq!(status["lastAttempt"], 4);
    assert!(started.elapsed() >= Duration::from_millis(75));
    assert!(s.metric("workqueue_retries_total{name=\"widget\"}").await? >= 4.0);
    // At least those 4 failures (the guest's own status write wakes it again, and it fails its
    // first attempts again: the widget fails attempts below failTimes whatever the change).
    assert!(
        s.metric("reconciler_reconcile_total{guest=\"widget\",result=\"error\"}")
            .await?
            >= 4.0
    );

    // After the success the key's failures were forgotten: a new change starts again at attempt 0.
    s.patch_spec("w", json!({"failTimes": 2, "message": "again"}))
        .await?;
    let status = s
        .wait_status("w", "second success", Duration::from_secs(60), |st| {
            st["message"] == "again"
        })
        .await?;
    assert_eq!(
        status["lastAttempt"], 2,
        "backoff reset on success: attempts count from 0 again"
    );
    Ok(())
}

#[tokio::test]
async fn requeue_after_reconciles_again_without_changes() -> Result<()> {
    let s = setup("requeue").await?;
    s.create("w", json!({"requeueAfterMs": 200})).await?;
    s.wait_status(
        "w",
        "four reconciles of an unchanged object",
        Duration::from_secs(60),
        |st| reconciles(st) >= 4,
    )
    .await?;
    assert!(
        s.metric("reconciler_reconcile_total{guest=\"widget\",result=\"requeue\"}")
            .await?
            >= 4.0
    );
    Ok(())
}

#[tokio::test]
async fn status_and_label_writes_do_not_wake_a_generation_changed_only_guest() -> Result<()> {
    let s = setup("generation").await?;
    s.create("w", json!({"message": "m0"})).await?;
    s.reconciled("w", "first reconcile").await?;
    let success = "reconciler_reconcile_total{guest=\"widget\",result=\"success\"}";
    // Someone else's status write and a label change: neither changes metadata.generation.
    s.widgets
        .patch_status(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"external": "written by someone else"}})),
        )
        .await?;
    s.widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await?;
    // Both events reach the host's informer within milliseconds; give a reconcile they would
    // have caused ample time to show up in the guest's counter and in the metric.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let status = s.status("w").await?;
    assert_eq!(status["external"], "written by someone else");
    assert_eq!(
        reconciles(&status),
        1,
        "woken by a status or label write: {status}"
    );
    assert_eq!(s.metric(success).await?, 1.0);
    // A spec change bumps the generation and does reconcile.
    s.patch_spec("w", json!({"message": "m1"})).await?;
    let status = s
        .wait_status(
            "w",
            "the spec change reconciled",
            Duration::from_secs(60),
            |st| st["message"] == "m1",
        )
        .await?;
    assert_eq!(reconciles(&status), 2, "{status}");
    Ok(())
}

#[tokio::test]
async fn a_python_guest_reconciles_through_the_same_contract() -> Result<()> {
    let grants = r#"
guests:
  greeter:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
"#;
    let s = setup_with("python", "greeter-python", grants).await?;
    s.create("w", json!({"message": "from Kubernetes"})).await?;
    let status = s
        .wait_status("w", "greeted", Duration::from_secs(120), |st| {
            st["greeting"] == "hello, from Kubernetes"
        })
        .await?;
    assert_eq!(status["observedGeneration"], 1);
    s.patch_spec("w", json!({"message": 7})).await?;
    wait_until(
        "the permanent error counted",
        Duration::from_secs(60),
        || async {
            let failed = s
                .metric("reconciler_reconcile_total{guest=\"greeter\",result=\"permanent_error\"}")
                .await?;
            anyhow::ensure!(failed >= 1.0, "{failed}");
            Ok(())
        },
    )
    .await?;
    assert_eq!(s.status("w").await?["greeting"], "hello, from Kubernetes");
    Ok(())
}

#[tokio::test]
async fn a_write_conflict_retries_the_reconcile() -> Result<()> {
    let s = setup("conflict").await?;
    // The guest busy-waits 1.5 s, then writes status with the resourceVersion it read.
    s.create(
        "w",
        json!({"mode": "sleep", "sleepMs": 1500, "optimisticStatus": true}),
    )
    .await?;
    tokio::time::sleep(Duration::from_millis(600)).await;
    // Changing the object while the guest sleeps makes its write stale: 409.
    s.widgets
        .patch(
            "w",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"touched": "yes"}}})),
        )
        .await?;
    let status = s.reconciled("w", "success after the conflict").await?;
    assert!(
        status["lastAttempt"].as_u64().unwrap_or(0) >= 1,
        "the conflicted reconcile was retried: {status}"
    );
    let conflicts = s
        .metric("reconciler_host_calls_total{guest=\"widget\",interface=\"cluster\",function=\"patch-status\",outcome=\"error\"}")
        .await?;
    assert!(conflicts >= 1.0, "the 409 reached the guest as an error");
    Ok(())
}

#[tokio::test]
async fn the_finalizer_holds_deletion_until_the_guest_cleaned_up() -> Result<()> {
    let s = setup("finalizer").await?;
    s.create("w", json!({})).await?;
    s.reconciled("w", "reconciled").await?;
    s.widgets.delete("w", &DeleteParams::default()).await?;
    wait_until(
        "w deleted after its finalizer was removed",
        Duration::from_secs(60),
        || async {
            match s.widgets.get_opt("w").await? {
                None => Ok(()),
                Some(o) => anyhow::bail!("still there, finalizers {:?}", o.metadata.finalizers),
            }
        },
    )
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(s.client.clone(), &s.ns);
    let finalized = events
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .any(|e| e.reason.as_deref() == Some("Finalized"));
    assert!(
        finalized,
        "the guest ran with deleting = true before the finalizer went"
    );
    Ok(())
}

#[tokio::test]
async fn reads_outside_the_grant_are_denied_at_call_time() -> Result<()> {
    let s = setup("denied").await?;
    s.create(
        "w",
        json!({"get": {"group": "", "version": "v1", "kind": "Secret", "name": "x"}}),
    )
    .await?;
    let status = s.reconciled("w", "reconciled").await?;
    assert_eq!(
        status["get"],
        "denied: guest `widget` may not read v1/Secret: add it to guests.widget.read in the host configuration"
    );
    assert!(
        s.metric("reconciler_host_calls_total{guest=\"widget\",interface=\"lister\",function=\"get\",outcome=\"denied\"}")
            .await?
            >= 1.0
    );
    Ok(())
}

#[tokio::test]
async fn a_trapping_guest_is_retried_and_the_host_keeps_serving() -> Result<()> {
    let s = setup("trap").await?;
    s.create("bad", json!({"mode": "trap", "journal": true}))
        .await?;
    s.create("good", json!({"message": "fine"})).await?;
    s.wait_status(
        "good",
        "the good widget reconciled",
        Duration::from_secs(60),
        |st| st["message"] == "fine",
    )
    .await?;
    wait_until("the trap counted", Duration::from_secs(30), || async {
        let traps = s
            .metric("reconciler_reconcile_total{guest=\"widget\",result=\"trap\"}")
            .await?;
        anyhow::ensure!(traps >= 2.0, "{traps} traps so far");
        Ok(())
    })
    .await?;
    let log = s.host.log();
    assert!(
        log.contains("widget was asked to trap"),
        "the log says what happened"
    );
    // A line the guest logs (target `guest`: `journal begin <key>`, before it traps) names
    // guest and key once, in the reconcile span.
    let lines: Vec<String> = log
        .lines()
        .map(reconciler_host_tests::host::strip_ansi)
        .filter(|l| l.contains(" guest: journal begin "))
        .collect();
    anyhow::ensure!(!lines.is_empty(), "no guest line in the log:\n{log}");
    for line in &lines {
        anyhow::ensure!(
            line.matches("guest=").count() == 1 && line.matches("key=").count() == 1,
            "a guest line names its guest or key other than once: {line}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn replacing_the_guest_file_swaps_versions_while_objects_exist() -> Result<()> {
    let s = setup("swap").await?;
    s.create("w", json!({"requeueAfterMs": 100})).await?;
    s.wait_status("w", "v1 reconciled", Duration::from_secs(60), |st| {
        st["guestVersion"] == "1"
    })
    .await?;
    s.host.put_guest("widget.wasm", "widget-v2")?;
    s.wait_status("w", "v2 reconciling", Duration::from_secs(60), |st| {
        st["guestVersion"] == "2"
    })
    .await?;
    let errors = s
        .metric("reconciler_reconcile_total{guest=\"widget\",result=\"error\"}")
        .await?;
    let traps = s
        .metric("reconciler_reconcile_total{guest=\"widget\",result=\"trap\"}")
        .await?;
    assert_eq!(
        (errors, traps),
        (0.0, 0.0),
        "the swap caused no failed reconcile"
    );

    // A broken file does not replace the good version.
    std::fs::write(s.host.dir.path().join("guests/widget.wasm"), b"broken")?;
    wait_until(
        "the refusal reported on /guests",
        Duration::from_secs(30),
        || async {
            let guests = s.host.get("/guests").await?;
            anyhow::ensure!(guests.contains("not a WebAssembly component"), "{guests}");
            Ok(())
        },
    )
    .await?;
    let before = reconciles(&s.status("w").await?);
    s.wait_status("w", "v2 still reconciling", Duration::from_secs(30), |st| {
        reconciles(st) > before + 2 && st["guestVersion"] == "2"
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn an_unloaded_guests_finalizer_is_released_after_the_grace_period() -> Result<()> {
    let grants = format!("{GRANTS}finalizerPolicy: {{onUnload: release, grace: 1s}}\n");
    let s = setup_with("release", "widget", &grants).await?;
    s.create("w", json!({"message": "hi"})).await?;
    s.wait_status("w", "w reconciled", Duration::from_secs(60), |st| {
        reconciles(st) >= 1
    })
    .await?;
    let carries = |w: &DynamicObject| {
        w.metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "test.reconciler.dev/cleanup")
    };
    assert!(carries(&s.widgets.get("w").await?), "finalizer added");

    // The guest goes for good: its finalizer would block deletion forever.
    std::fs::remove_file(s.host.dir.path().join("guests/widget.wasm"))?;
    wait_until(
        "the orphaned finalizer shown on /guests",
        Duration::from_secs(30),
        || async {
            let guests: Value = serde_json::from_str(&s.host.get("/guests").await?)?;
            let orphan = &guests[0]["orphanedFinalizer"];
            anyhow::ensure!(
                guests[0]["state"]["state"] == "unloaded"
                    && orphan["finalizer"] == "test.reconciler.dev/cleanup"
                    && orphan["policy"] == "release",
                "{guests}"
            );
            Ok(())
        },
    )
    .await?;
    // Released on the server after the grace period (checked every 5 s).
    wait_until(
        "the finalizer released from w",
        Duration::from_secs(60),
        || async {
            let w = s.widgets.get("w").await?;
            anyhow::ensure!(!carries(&w), "still {:?}", w.metadata.finalizers);
            Ok(())
        },
    )
    .await?;
    assert_eq!(
        s.metric("reconciler_finalizer_released_total{guest=\"widget\"}")
            .await?,
        1.0
    );
    assert_eq!(
        s.metric("reconciler_finalizer_orphaned{guest=\"widget\"}")
            .await?,
        0.0
    );
    Ok(())
}

#[tokio::test]
async fn a_guest_in_shadow_mode_changes_nothing_until_switched_to_active_without_a_restart()
-> Result<()> {
    let shadow = GRANTS.replace("  widget:\n", "  widget:\n    mode: shadow\n");
    assert_ne!(shadow, GRANTS, "the grant changed");
    let s = setup_with("shadow", "widget", &shadow).await?;
    s.create("w1", json!({"message": "hello", "configMap": true}))
        .await?;
    wait_until(
        "a shadow verdict for w1",
        Duration::from_secs(60),
        || async {
            let diffs = s
                .metric("reconciler_shadow_diffs_total{guest=\"widget\"}")
                .await?;
            anyhow::ensure!(diffs >= 1.0, "no difference counted yet");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;

    // Nothing was written: no status, no finalizer, no ConfigMap, no event.
    let w1 = s.widgets.get("w1").await?;
    assert!(w1.data.get("status").is_none(), "{:?}", w1.data);
    assert!(w1.metadata.finalizers.unwrap_or_default().is_empty());
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(s.client.clone(), &s.ns);
    assert!(config_maps.get_opt("w1-widget").await?.is_none());
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(s.client.clone(), &s.ns);
    assert!(events.list(&Default::default()).await?.items.is_empty());

    // /guests names what the guest would have changed.
    let guests: Value = serde_json::from_str(&s.host.get("/guests").await?)?;
    let latest = &guests[0]["shadow"]["recentDiffs"][0];
    assert_eq!(latest["key"], format!("{}/w1", s.ns), "{guests}");
    let shown = latest["differences"].to_string();
    for part in [
        "status patch of",
        "apply of v1/ConfigMap",
        "metadata.finalizers",
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }

    // Switched to active in the configuration: the same process writes what it held back.
    std::fs::write(s.host.dir.path().join("host.yaml"), GRANTS)?;
    s.reconciled("w1", "w1 reconciled once active").await?;
    // The guest writes status before it applies the ConfigMap: wait for the second write.
    wait_until(
        "the ConfigMap applied once active",
        Duration::from_secs(30),
        || async {
            anyhow::ensure!(
                config_maps.get_opt("w1-widget").await?.is_some(),
                "no ConfigMap yet"
            );
            Ok(())
        },
    )
    .await?;
    assert!(s.host.log().contains("configuration change applied"));
    Ok(())
}
