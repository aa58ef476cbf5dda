//! The host's own writes coming back on its watch (issue 42, item 1 (c)), with a real
//! `reconciler-host run` and kube-apiserver: a guest that writes the status of N objects
//! reconciles each of them once before it reconciles any twice, whether the watch or the
//! write's answer reaches the host first, and a change someone else makes meanwhile is
//! reconciled, never lost; and the second pass over its own writes sends nothing (the API
//! server's request counter says so). (`informers.rs` pins the window itself: an echo that beats the
//! answer, and a change made in that window.)

use std::collections::HashSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use reconciler_host_tests::control_plane::apiserver_requests;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until, widgets,
};
use serde_json::json;

/// Widgets written by the host.
const N: usize = 200;
/// Keys the guest has in progress at once (its grant's cap): a key's second reconcile may
/// start while this many less one first reconciles are still running.
const CONCURRENCY: usize = 2;

/// The bench guest (`guests/testing/bench`): a status from the spec, written every reconcile.
const GRANTS: &str = "guests:
  bench:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status]
    limits: {concurrency: 2}
";

fn name(i: usize) -> String {
    format!("w-{i:03}")
}

/// The keys of the host's reconciles, in the order they started, which is the order the queue
/// handed them out (its JSON log's `reconciled` lines, in the `reconcile` span that names the
/// key, each stamped when it ended with how long it took). The order they ended would not do:
/// while one worker's reconcile waits on its status write, the other can end a dozen that
/// send nothing (the echoes' second passes), on a loaded machine more.
fn reconciled_keys(host: &HostProcess) -> Result<Vec<String>> {
    let mut started = Vec::new();
    for (ended, line) in host.json_log() {
        if line["fields"]["message"] != "reconciled" {
            continue;
        }
        let Some(key) = line["span"]["key"].as_str() else {
            continue;
        };
        let took = line["fields"]["took"]
            .as_str()
            .context("a `reconciled` line without `took`")?;
        let took = debug_duration(took).with_context(|| format!("`took` {took:?}"))?;
        started.push((ended - took, key.to_owned()));
    }
    started.sort_by_key(|(at, _)| *at);
    Ok(started.into_iter().map(|(_, key)| key).collect())
}

/// A `Duration` as its `Debug` writes it (`1.5ms`, `812.3µs`, `2s`).
fn debug_duration(text: &str) -> Result<Duration> {
    let at = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .context("no unit")?;
    let (number, unit) = text.split_at(at);
    let number: f64 = number.parse()?;
    let seconds = match unit {
        "s" => number,
        "ms" => number / 1e3,
        "µs" => number / 1e6,
        "ns" => number / 1e9,
        other => anyhow::bail!("unit {other:?}"),
    };
    Ok(Duration::from_secs_f64(seconds))
}

/// Whether a Widget's status reflects its spec as the bench guest writes it.
fn current(widget: &DynamicObject) -> bool {
    let items = widget.data["spec"]["items"].as_array().map_or(0, Vec::len);
    let status = &widget.data["status"];
    status["observedGeneration"].as_i64() == widget.metadata.generation
        && status["items"].as_u64() == u64::try_from(items).ok()
}

#[tokio::test]
async fn a_status_writing_guest_reconciles_each_object_once_before_any_twice_and_loses_no_change()
-> Result<()> {
    let plane = ControlPlane::shared().await?;
    let client = plane.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "own-writes").await?;
    let api = widgets(&client, &ns);
    // The Widgets exist before the host starts: its first list is the backlog, as in the bench.
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                    "metadata": {"name": name(i)}, "spec": {"items": [1]},
                }))?;
                api.create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating Widget {}", name(i)))
            }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    // Only this test writes Widgets' status while its binary runs.
    let patches_before = apiserver_requests(&client, "PATCH", "widgets/status").await?;
    let host = HostProcess::start_with_env(
        HostOptions {
            kubeconfig: plane.kubeconfig(),
            config: GRANTS.into(),
            guests: vec!["bench"],
            namespace: Some(&ns),
            extra_args: vec![],
        },
        &[("RECONCILER_LOG_FORMAT", "json")],
    )
    .await?;

    // Someone else changes every tenth Widget's spec while the host writes statuses.
    let changed: Vec<String> = (0..N).step_by(10).map(name).collect();
    for name in &changed {
        let patch = Patch::Merge(json!({"spec": {"items": [1, 2, 3]}}));
        api.patch(name, &PatchParams::default(), &patch).await?;
    }

    wait_until(
        "every Widget's status to reflect its spec",
        Duration::from_secs(120),
        || async {
            let list = api.list(&Default::default()).await?;
            let stale: Vec<String> = list
                .items
                .iter()
                .filter(|w| !current(w))
                .map(kube::ResourceExt::name_any)
                .collect();
            ensure!(stale.is_empty(), "{} not yet: {:?}", stale.len(), stale);
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    for name in &changed {
        let widget = api.get(name).await?;
        ensure!(
            widget.data["status"]["items"] == 3,
            "{name}: the change made while the host wrote is not reconciled: {}",
            widget.data["status"]
        );
    }

    // Each reconcile of a write's echo finds its status already there: nothing is sent. Once
    // no status PATCH has come for 3 s, the API server has served one per change (a Widget's
    // first status, and a second for a Widget changed after it), not one more per echo.
    let (mut patches, mut since) = (0, std::time::Instant::now());
    let started = std::time::Instant::now();
    while since.elapsed() < Duration::from_secs(3) {
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "the host never went quiet"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = apiserver_requests(&client, "PATCH", "widgets/status").await? - patches_before;
        if now != patches {
            (patches, since) = (now, std::time::Instant::now());
        }
    }
    let most = N + changed.len();
    ensure!(
        usize::try_from(patches)? <= most,
        "the API server served {patches} status PATCHes for {N} Widgets, {} of them changed \
         once (at most {most}): the host sent writes that changed nothing",
        changed.len()
    );
    let unchanged = host
        .metric(r#"reconciler_writes_unchanged_total{guest="bench"}"#)
        .await?;
    ensure!(
        unchanged >= f64::from(u32::try_from(N)?),
        "{unchanged} writes left unsent: every Widget's last echo should be one"
    );

    // Every key handed out once before any key twice, give or take the other change and the
    // keys in progress: the echo of each status write (and of the changes' reconciles) waits
    // behind the backlog, wherever it arrives from.
    let keys = reconciled_keys(&host)?;
    let mut seen = HashSet::new();
    let first_pass = keys
        .iter()
        .position(|key| seen.insert(key.as_str()) && seen.len() == N)
        .map(|at| at + 1)
        .context("the log names fewer keys than Widgets")?;
    let bound = N + changed.len() + (CONCURRENCY - 1);
    // The keys reconciled again within the first pass, each with the positions of its
    // reconciles: the evidence a failure needs.
    let mut at: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, key) in keys[..first_pass].iter().enumerate() {
        at.entry(key.as_str()).or_default().push(i);
    }
    at.retain(|_, positions| positions.len() > 1);
    ensure!(
        first_pass <= bound,
        "{first_pass} reconciles until each of the {N} Widgets had one (at most {bound}: \
         {} changed by someone else, {CONCURRENCY} in progress): echoes of the host's own \
         writes were reconciled ahead of the backlog; reconciled again within the first \
         pass (key: positions): {at:?}",
        changed.len()
    );
    Ok(())
}
