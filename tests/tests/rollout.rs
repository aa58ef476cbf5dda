//! Rollouts of a new guest version against the real kube-apiserver: a `reconciler-host run`
//! process with the widget test guest and a `rollout:` in its grant; `widget.wasm` is then
//! replaced by `widget-v2.wasm`. Widgets run `steady` (the same status from either version, an
//! event whose reason names the version) and `byVersion` makes v2 behave differently where a test
//! needs it. What the versions did is read from the API server (statuses, events); where the
//! rollout stands, from `/guests` and the metrics.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until,
};
use serde_json::{Value, json};

struct Setup {
    client: kube::Client,
    ns: String,
    widgets: Api<DynamicObject>,
    host: HostProcess,
}

/// The host configuration: the widget's grant with `rollout` as its plan and `deadline`.
fn config(rollout: &str, deadline: &str) -> String {
    format!(
        "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    \
         write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]\n    \
         limits: {{deadline: {deadline}, eventsPerSecond: 200, eventBurst: 400}}\n    rollout: {rollout}\n"
    )
}

/// A host running `widget.wasm` (v1) with `rollout` as its grant's plan.
async fn setup(prefix: &str, rollout: &str) -> Result<Setup> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, prefix).await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: config(rollout, "3s"),
        guests: vec!["widget"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "test.reconciler.dev",
        "v1",
        "Widget",
    ));
    let widgets = Api::namespaced_with(client.clone(), &ns, &resource);
    Ok(Setup {
        client,
        ns,
        widgets,
        host,
    })
}

fn name(i: usize) -> String {
    format!("w-{i:02}")
}

impl Setup {
    /// Creates `count` widgets with `spec(i)` and waits until v1 reconciled each.
    async fn widgets(&self, count: usize, spec: impl Fn(usize) -> Value) -> Result<()> {
        for i in 0..count {
            let object: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                "metadata": {"name": name(i)}, "spec": spec(i),
            }))?;
            self.widgets.create(&PostParams::default(), &object).await?;
        }
        self.wait_all("v1 reconciled every widget", |o| {
            o.data["status"]["observedGeneration"] == o.metadata.generation.unwrap_or(0)
        })
        .await
    }

    async fn wait_all(&self, what: &str, done: impl Fn(&DynamicObject) -> bool) -> Result<()> {
        let result = wait_until(what, Duration::from_secs(90), || async {
            let list = self.widgets.list(&ListParams::default()).await?;
            let waiting: Vec<String> = list
                .items
                .iter()
                .filter(|o| !done(o))
                .map(|o| {
                    format!(
                        "{} {}",
                        o.metadata.name.clone().unwrap_or_default(),
                        o.data["status"]
                    )
                })
                .collect();
            anyhow::ensure!(waiting.is_empty(), "not yet: {waiting:?}");
            Ok(())
        })
        .await;
        result.map_err(|e| e.context(self.host.log_tail()))
    }

    /// The widget guest's rollout as `/guests` shows it.
    async fn rollout(&self) -> Result<Value> {
        let text = self.host.get("/guests").await?;
        let guests: Value = serde_json::from_str(&text).context("/guests is not JSON")?;
        Ok(guests
            .as_array()
            .into_iter()
            .flatten()
            .find(|g| g["guest"] == "widget" && g["state"]["state"] == "loaded")
            .map(|g| g["rollout"].clone())
            .unwrap_or(Value::Null))
    }

    /// Waits until the rollout reaches `phase`, noting every share seen on the way.
    async fn until_phase(&self, phase: &str, shares: &mut Vec<String>) -> Result<Value> {
        let seen = std::cell::RefCell::new(std::mem::take(shares));
        let result = wait_until(
            &format!("the rollout {phase}"),
            Duration::from_secs(120),
            || async {
                let rollout = self.rollout().await?;
                if let Some(share) = rollout["share"].as_str() {
                    let mut seen = seen.borrow_mut();
                    if seen.last().map(String::as_str) != Some(share) {
                        seen.push(share.to_owned());
                    }
                }
                anyhow::ensure!(rollout["phase"] == phase, "rollout is {rollout}");
                Ok(rollout)
            },
        )
        .await;
        *shares = seen.into_inner();
        result.map_err(|e| e.context(self.host.log_tail()))
    }

    /// Puts v2 in place and waits until it is rolled back from its shadow step, never having
    /// reached a canary; the rollout's message.
    async fn rolled_back_in_shadow(&self) -> Result<String> {
        self.host.put_guest("widget.wasm", "widget-v2")?;
        let mut shares = Vec::new();
        let rollout = self.until_phase("RolledBack", &mut shares).await?;
        assert_eq!(shares, ["shadow", "0%"], "{rollout}");
        Ok(rollout["message"].as_str().unwrap_or_default().to_owned())
    }

    /// The widgets an event with `reason` regards, as the API server has them.
    async fn noted(&self, reason: &str) -> Result<BTreeSet<String>> {
        let events: Api<Event> = Api::namespaced(self.client.clone(), &self.ns);
        Ok(events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.regarding?.name)
            .collect())
    }

    async fn metric(&self, series: &str) -> Result<f64> {
        self.host.metric(series).await
    }
}

/// Steps short enough for a test; the p99 gate loosened, as this machine's timings are noisy
/// (the gate itself is tested without a cluster).
const GATES: &str = "{minSample: 10, maxP99Ratio: 4, p99Slack: 200ms}";

/// A shadow step of 2 s and 20 reconciles, then a canary of 50 %.
fn shadow_then_half() -> String {
    format!(
        "{{steps: [{{shadow: {{duration: 2s, minReconciles: 20}}}}, \
         {{canary: {{percent: 50, duration: 2s}}}}], gates: {GATES}}}"
    )
}

#[tokio::test]
async fn a_good_version_is_promoted_through_shadow_and_canaries_by_itself() -> Result<()> {
    let s = setup(
        "rollout-good",
        &format!(
            "{{steps: [{{shadow: {{duration: 2s, minReconciles: 20}}}}, \
             {{canary: {{percent: 10, duration: 2s, minReconciles: 2}}}}, \
             {{canary: {{percent: 50, duration: 2s, minReconciles: 10}}}}], gates: {GATES}}}"
        ),
    )
    .await?;
    let count = 30;
    s.widgets(
        count,
        |_| json!({"steady": true, "message": "same", "requeueAfterMs": 1000}),
    )
    .await?;
    assert!(s.noted("ReconciledByVersion2").await?.is_empty());

    s.host.put_guest("widget.wasm", "widget-v2")?;
    let mut shares = Vec::new();
    let rollout = s.until_phase("Promoted", &mut shares).await?;
    assert_eq!(
        shares,
        ["shadow", "10%", "50%", "100%"],
        "the shares the rollout walked through; finally {rollout}"
    );

    // Every widget is reconciled by v2 now, as its events on the API server say.
    wait_until(
        "v2 reconciled every widget",
        Duration::from_secs(30),
        || async {
            let by_v2 = s.noted("ReconciledByVersion2").await?;
            anyhow::ensure!(by_v2.len() == count, "v2 reconciled {by_v2:?}");
            Ok(())
        },
    )
    .await?;
    let agreed = s
        .metric("reconciler_rollout_compared_total{guest=\"widget\",verdict=\"agreed\"}")
        .await?;
    let differed = s
        .metric("reconciler_rollout_compared_total{guest=\"widget\",verdict=\"differed\"}")
        .await?;
    assert!(
        agreed >= 20.0,
        "the shadow step compared {agreed} reconciles"
    );
    assert!(differed == 0.0, "{differed} shadow runs differed");
    assert_eq!(
        s.metric("reconciler_rollout_phase{guest=\"widget\",phase=\"Promoted\"}")
            .await?,
        1.0
    );
    assert_eq!(
        s.metric("reconciler_rollout_share_percent{guest=\"widget\"}")
            .await?,
        100.0
    );
    Ok(())
}

#[tokio::test]
async fn a_version_that_disagrees_in_shadow_never_reaches_a_canary() -> Result<()> {
    let s = setup("rollout-differs", &shadow_then_half()).await?;
    // A third of the widgets would get another message from v2.
    s.widgets(30, |i| {
        let mut spec = json!({"steady": true, "message": "same", "requeueAfterMs": 1000});
        if i % 3 == 0 {
            spec["byVersion"] = json!({"2": {"message": "changed by v2"}});
        }
        spec
    })
    .await?;

    let message = s.rolled_back_in_shadow().await?;
    assert!(
        message.starts_with("agreement:") && message.contains("status.message"),
        "the failed gate and its evidence: {message}"
    );
    assert_eq!(
        s.metric("reconciler_rollout_rollbacks_total{guest=\"widget\",gate=\"agreement\"}")
            .await?,
        1.0
    );

    // Nothing v2 intended was written, and it never reconciled a key actively; v1 goes on.
    let list = s.widgets.list(&ListParams::default()).await?;
    for widget in &list.items {
        assert_eq!(
            widget.data["status"]["message"], "same",
            "{:?}",
            widget.metadata.name
        );
    }
    let before = s.noted("ReconciledByVersion1").await?;
    assert_eq!(before.len(), 30);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.noted("ReconciledByVersion2").await?.is_empty(),
        "v2 wrote events"
    );
    let rollout = s.rollout().await?;
    assert_eq!(
        rollout["phase"], "RolledBack",
        "the failed version is not tried again"
    );
    Ok(())
}

#[tokio::test]
async fn a_version_failing_on_its_canary_keys_is_rolled_back_and_nothing_is_lost() -> Result<()> {
    let s = setup(
        "rollout-fails",
        "{steps: [{canary: {percent: 50, duration: 60s}}], gates: {minSample: 3, maxP99Ratio: 4, p99Slack: 200ms}}",
    )
    .await?;
    // Each Widget is reconciled once per change here: enough of them that either half holds
    // the gates' sample whatever the namespace's hash does to the split.
    let count = 40;
    s.widgets(count, |_| {
        json!({"steady": true, "message": "before",
               "byVersion": {"2": {"permanentError": "v2 cannot reconcile this widget"}}})
    })
    .await?;

    s.host.put_guest("widget.wasm", "widget-v2")?;
    wait_until("the canary at 50%", Duration::from_secs(60), || async {
        let rollout = s.rollout().await?;
        anyhow::ensure!(rollout["share"] == "50%", "rollout is {rollout}");
        Ok(())
    })
    .await?;
    // A change to every widget: v2's half fails, v1's half is written.
    for i in 0..count {
        s.widgets
            .patch(
                &name(i),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"message": "after"}})),
            )
            .await?;
    }
    let mut shares = vec!["50%".to_owned()];
    let rollout = s.until_phase("RolledBack", &mut shares).await?;
    let message = rollout["message"].as_str().unwrap_or_default();
    assert!(message.starts_with("errorRate:"), "{message}");
    assert_eq!(
        s.metric("reconciler_rollout_rollbacks_total{guest=\"widget\",gate=\"errorRate\"}")
            .await?,
        1.0
    );

    // v1 takes the canary's keys back and reconciles them again: every change lands.
    s.wait_all("v1 reconciled every change", |o| {
        o.data["status"]["observedGeneration"] == o.metadata.generation.unwrap_or(0)
            && o.data["status"]["message"] == "after"
    })
    .await?;
    let events: Api<Event> = Api::namespaced(s.client.clone(), &s.ns);
    let failed: BTreeSet<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("ReconcileFailed"))
        .filter_map(|e| e.regarding?.name)
        .collect();
    assert!(
        !failed.is_empty() && failed.len() < count,
        "v2 failed on its share of the keys only: {failed:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_version_that_only_asks_for_retries_never_reaches_a_canary() -> Result<()> {
    let s = setup("rollout-retries", &shadow_then_half()).await?;
    // v2 asks for a retry on every attempt: it never reconciles anything.
    s.widgets(20, |_| {
        json!({"steady": true, "message": "same", "requeueAfterMs": 1000,
               "byVersion": {"2": {"failTimes": 1_000_000}}})
    })
    .await?;
    let message = s.rolled_back_in_shadow().await?;
    assert!(
        message.starts_with("agreement:") && message.contains("(no verdict"),
        "a run without a verdict agrees with nothing: {message}"
    );
    Ok(())
}

/// A restart of the controller mid-rollout (here: a new grant) starts again from the stable
/// version and rolls the new one out anew; no key goes to the new version without its plan.
#[tokio::test]
async fn a_new_grant_mid_rollout_starts_it_again_from_the_stable_version() -> Result<()> {
    let plan = "{steps: [{shadow: {duration: 1h}}]}";
    let s = setup("rollout-regrant", plan).await?;
    s.widgets(
        10,
        |_| json!({"steady": true, "message": "same", "requeueAfterMs": 500}),
    )
    .await?;
    s.host.put_guest("widget.wasm", "widget-v2")?;
    let mut shares = Vec::new();
    s.until_phase("Progressing", &mut shares).await?;
    // The grant changes (a deadline): the controller restarts under it.
    std::fs::write(s.host.dir.path().join("host.yaml"), config(plan, "4s"))?;
    wait_until(
        "the controller restarted",
        Duration::from_secs(60),
        || async {
            anyhow::ensure!(
                s.host.log().contains("controller stopped"),
                "no restart yet"
            );
            Ok(())
        },
    )
    .await?;
    let rollout = s.until_phase("Progressing", &mut shares).await?;
    assert_eq!(rollout["share"], "shadow", "{rollout}");
    // v1 still reconciles every key; v2 has reconciled none, before or after the restart.
    let before = s.noted("ReconciledByVersion1").await?;
    assert_eq!(before.len(), 10);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        s.noted("ReconciledByVersion2").await?.is_empty(),
        "v2 reconciled a key"
    );
    Ok(())
}
