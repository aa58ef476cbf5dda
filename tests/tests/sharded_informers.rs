//! Sharded informers (`WatchScope::shard`) against a real kube-apiserver: three disjoint slot sets
//! split one namespace's ConfigMaps exactly as the API server's hash does, whether the server
//! filters (`shardSelector`, feature gate ShardedListAndWatch, on in the shared control plane)
//! or the client does; server-side filtering is checked by what arrives (fewer bytes, fewer
//! objects), not by timing. A control plane of its own with the gate off shows `auto` falling
//! back to the client and `server` refusing with a message that says what to do.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::{Api, Client, ResourceExt};
use reconciler_host::cluster::informers::{
    FilterMode, Informer, Informers, Options, ShardFilter, WatchScope,
};
use reconciler_host::cluster::shard_ranges::{SlotSet, slot_of};
use reconciler_host::metrics::Metrics;
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{
    ControlPlane, apply_crd_file, client_for_kubeconfig, cp_script, test_namespace, wait_until,
};

const TIMEOUT: Duration = Duration::from_secs(30);
const OBJECTS: usize = 60;

fn configmaps() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

fn shards() -> [SlotSet; 3] {
    [
        SlotSet::range(0, 85),
        SlotSet::range(85, 170),
        SlotSet::range(170, 256),
    ]
}

fn sharded(ns: &str, slots: SlotSet) -> WatchScope {
    WatchScope {
        namespace: Some(ns.to_owned()),
        label_selector: None,
        shard: Some(slots),
    }
}

/// Creates `count` ConfigMaps `<prefix>-<i>`, each with 1 KiB of data so that what the filter
/// saves on the wire stands well above the list's fixed overhead.
async fn create_configmaps(client: &Client, ns: &str, prefix: &str, count: usize) -> Result<()> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    futures::stream::iter(0..count)
        .map(|i| {
            let api = api.clone();
            async move { create_cm(&api, &format!("{prefix}-{i}")).await }
        })
        .buffer_unordered(8)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn create_cm(api: &Api<ConfigMap>, name: &str) -> Result<ConfigMap> {
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name },
        "data": { "payload": "x".repeat(1024) },
    }))?;
    api.create(&PostParams::default(), &cm)
        .await
        .with_context(|| format!("creating ConfigMap {name}"))
}

/// Every ConfigMap in `ns`, name → uid, as the API server lists them.
async fn uids(client: &Client, ns: &str) -> Result<BTreeMap<String, String>> {
    Ok(Api::<ConfigMap>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .map(|cm| (cm.name_any(), cm.uid().unwrap_or_default()))
        .collect())
}

/// The names whose uid falls into `slots`.
fn share(all: &BTreeMap<String, String>, slots: SlotSet) -> BTreeSet<String> {
    all.iter()
        .filter(|(_, uid)| slots.contains(slot_of(uid)))
        .map(|(name, _)| name.clone())
        .collect()
}

fn cached_names(informer: &Informer) -> BTreeSet<String> {
    informer
        .list_cached(None, None)
        .iter()
        .filter_map(|o| o.to_head())
        .map(|o| o.name_any())
        .collect()
}

async fn synced(informer: &Informer) -> Result<()> {
    tokio::time::timeout(TIMEOUT, informer.wait_synced())
        .await
        .map_err(|_| {
            anyhow!(
                "informer not synced after {TIMEOUT:?}; last error: {:?}",
                informer.last_error()
            )
        })
}

/// One sample of `metrics`' exposition, 0 when the series does not exist.
fn sample(metrics: &Metrics, series: &str) -> f64 {
    metrics
        .render()
        .lines()
        .find_map(|line| {
            let value = line.strip_prefix(series)?.strip_prefix(' ')?;
            value.split(' ').next()?.parse().ok()
        })
        .unwrap_or(0.0)
}

const BYTES: &str =
    r#"reconciler_informer_received_bytes_total{group="",version="v1",kind="ConfigMap"}"#;
const EVENTS: &str = r#"reconciler_informer_events_total{group="",version="v1",kind="ConfigMap"}"#;

/// One shard's informer with registry and metrics of its own, so that its traffic is its own
/// series (the families are per GVK).
struct Member {
    slots: SlotSet,
    informers: Informers,
    informer: Informer,
    metrics: Metrics,
}

async fn members(client: &Client, ns: &str, filter: ShardFilter) -> Result<Vec<Member>> {
    let mut members = Vec::new();
    for slots in shards() {
        let metrics = Metrics::new();
        let informers = Informers::with_options(
            client.clone(),
            Options {
                metrics: Some(metrics.clone()),
                shard_filter: filter,
                ..Options::default()
            },
        );
        let informer = informers.acquire(&configmaps(), sharded(ns, slots)).await?;
        members.push(Member {
            slots,
            informers,
            informer,
            metrics,
        });
    }
    for member in &members {
        synced(&member.informer).await?;
    }
    Ok(members)
}

/// Each member's cache holds exactly its share of `all`, and the shares add up to `all`.
async fn check_split(members: &[Member], all: &BTreeMap<String, String>) -> Result<()> {
    let mut seen = BTreeSet::new();
    for member in members {
        let expected = share(all, member.slots);
        wait_until(
            &format!("slots {} to cache their share", member.slots.to_text()),
            TIMEOUT,
            || async {
                let cached = cached_names(&member.informer);
                ensure!(
                    cached == expected,
                    "cached {} objects, expected {}; extra {:?}, missing {:?}",
                    cached.len(),
                    expected.len(),
                    cached.difference(&expected).collect::<Vec<_>>(),
                    expected.difference(&cached).collect::<Vec<_>>()
                );
                Ok(())
            },
        )
        .await?;
        ensure!(
            seen.is_disjoint(&expected),
            "shards overlap: {:?}",
            seen.intersection(&expected).collect::<Vec<_>>()
        );
        seen.extend(expected);
    }
    ensure!(
        seen.len() == all.len(),
        "the shards hold {} of {} objects",
        seen.len(),
        all.len()
    );
    Ok(())
}

#[tokio::test]
async fn three_shards_split_a_namespace_on_the_server_and_on_the_client() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    let ns = test_namespace(&client, "inf-sharded").await?;
    create_configmaps(&client, &ns, "cm", OBJECTS).await?;
    let all = uids(&client, &ns).await?;
    ensure!(all.len() >= OBJECTS, "{all:?}");

    let server = members(&client, &ns, ShardFilter::Auto).await?;
    let client_side = members(&client, &ns, ShardFilter::Client).await?;
    for (members, mode) in [
        (&server, FilterMode::Server),
        (&client_side, FilterMode::Client),
    ] {
        check_split(members, &all).await?;
        for member in members {
            ensure!(
                member.informer.filter_mode() == Some(mode),
                "slots {}: filter {:?}, expected {mode:?} (last error {:?})",
                member.slots.to_text(),
                member.informer.filter_mode(),
                member.informer.last_error()
            );
            let info = member.informers.active();
            ensure!(info.len() == 1 && info[0].filter == Some(mode), "{info:?}");
            let gauge = format!(
                r#"reconciler_informer_shard_filter{{group="",version="v1",kind="ConfigMap",mode="{mode}"}}"#
            );
            ensure!(sample(&member.metrics, &gauge) == 1.0, "{gauge} not set");
        }
    }

    // What arrived: on the server side each member received its share, on the client side
    // every member received everything.
    for (on_server, on_client) in server.iter().zip(&client_side) {
        let expected = share(&all, on_server.slots).len();
        #[allow(clippy::cast_precision_loss)]
        let (share_events, all_events) = (expected as f64, all.len() as f64);
        let (server_events, client_events) = (
            sample(&on_server.metrics, EVENTS),
            sample(&on_client.metrics, EVENTS),
        );
        ensure!(
            (server_events, client_events) == (share_events, all_events),
            "slots {}: objects received on the server side {server_events} (share {expected}), \
             on the client side {client_events} (all {})",
            on_server.slots.to_text(),
            all.len()
        );
        let (server_bytes, client_bytes) = (
            sample(&on_server.metrics, BYTES),
            sample(&on_client.metrics, BYTES),
        );
        ensure!(
            server_bytes > 0.0 && server_bytes < client_bytes,
            "slots {}: {server_bytes} bytes with the server filtering, {client_bytes} without",
            on_server.slots.to_text()
        );
    }

    // A ConfigMap created after the sync reaches only its own shard, in both modes. Objects
    // created after it, until every other shard has cached one, prove the others are past it:
    // each watch delivers in resourceVersion order.
    let api = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    let late = create_cm(&api, "late").await?;
    let late_uid = late.uid().context("no uid")?;
    let owner = shards()
        .iter()
        .position(|s| s.owns_uid(&late_uid))
        .context("no shard owns the late object")?;
    let mut passed = BTreeSet::from([owner]);
    for i in 0..40 {
        if passed.len() == 3 {
            break;
        }
        let fence = create_cm(&api, &format!("after-late-{i}")).await?;
        let fence_uid = fence.uid().context("no uid")?;
        let fence_owner = shards()
            .iter()
            .position(|s| s.owns_uid(&fence_uid))
            .context("no shard owns a fence")?;
        for members in [&server, &client_side] {
            let informer = &members[fence_owner].informer;
            wait_until(
                &format!("{} in its shard", fence.name_any()),
                TIMEOUT,
                || async {
                    informer
                        .get_cached(Some(&ns), &fence.name_any())
                        .map(drop)
                        .ok_or_else(|| anyhow!("not cached yet"))
                },
            )
            .await?;
        }
        passed.insert(fence_owner);
    }
    ensure!(
        passed.len() == 3,
        "no object landed in every shard after 40"
    );
    for members in [&server, &client_side] {
        for (i, member) in members.iter().enumerate() {
            let cached = member.informer.get_cached(Some(&ns), "late").is_some();
            ensure!(
                cached == (i == owner),
                "late (slot {}) cached by slots {}: {cached}",
                slot_of(&late_uid),
                member.slots.to_text()
            );
        }
    }

    // Read-your-writes stays inside the shard: another shard refuses the host's own write.
    let patch = serde_json::json!({ "data": { "payload": "changed" } });
    let changed = api
        .patch("late", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    let changed: DynamicObject = serde_json::from_value(serde_json::to_value(&changed)?)?;
    for member in server.iter().chain(&client_side) {
        if member.slots.owns_uid(&late_uid) {
            continue;
        }
        ensure!(
            !member.informer.record_write(changed.clone()),
            "slots {} took a write of an object outside them",
            member.slots.to_text()
        );
        ensure!(member.informer.get_cached(Some(&ns), "late").is_none());
    }
    Ok(())
}

#[tokio::test]
async fn no_slots_watch_nothing_and_all_slots_are_the_unsharded_informer() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    let ns = test_namespace(&client, "inf-sharded-edges").await?;
    create_configmaps(&client, &ns, "cm", 3).await?;
    let informers = Informers::new(client.clone());

    let nothing = informers
        .acquire(&configmaps(), sharded(&ns, SlotSet::empty()))
        .await?;
    ensure!(nothing.has_synced(), "an empty shard is synced at once");
    ensure!(nothing.is_empty() && nothing.lists() == 0);
    ensure!(
        informers.watch_tasks() == 0,
        "an empty shard must not watch: {} tasks",
        informers.watch_tasks()
    );
    ensure!(nothing.filter_mode().is_none());

    let whole = informers
        .acquire(&configmaps(), sharded(&ns, SlotSet::all()))
        .await?;
    ensure!(
        whole.scope().shard.is_none(),
        "all slots is no shard: {:?}",
        whole.scope()
    );
    let unsharded = informers
        .acquire(
            &configmaps(),
            WatchScope {
                namespace: Some(ns.clone()),
                label_selector: None,
                shard: None,
            },
        )
        .await?;
    synced(&unsharded).await?;
    let active = informers.active();
    ensure!(
        active.len() == 2 && informers.watch_tasks() == 1,
        "the whole set shares the unsharded informer: {active:?}"
    );
    ensure!(whole.len() == 3 && whole.filter_mode().is_none());
    Ok(())
}

/// A control plane started by `cp up` with the ShardedListAndWatch gate off, stopped on drop
/// (and by `cp`'s watchdog if this process dies first).
struct GateOff {
    dir: PathBuf,
}

impl GateOff {
    fn start() -> Result<Self> {
        let dir = target_dir().join(format!(
            "control-plane/private-sharding-gate-off-{}",
            std::process::id()
        ));
        let plane = Self { dir };
        let out = Command::new(cp_script())
            .arg("up")
            .arg("--dir")
            .arg(&plane.dir)
            .args(["--exit-with", &std::process::id().to_string()])
            .env("CP_FEATURE_GATES", "ShardedListAndWatch=false")
            .output()
            .context("running cp up")?;
        if !out.status.success() {
            bail!(
                "cp up (gate off) failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(plane)
    }
}

impl Drop for GateOff {
    fn drop(&mut self) {
        let _ = Command::new(cp_script())
            .arg("down")
            .arg("--dir")
            .arg(&self.dir)
            .output();
    }
}

#[tokio::test]
async fn without_the_feature_gate_auto_filters_on_the_client_and_server_refuses() -> Result<()> {
    let plane = tokio::task::spawn_blocking(GateOff::start).await??;
    let client = client_for_kubeconfig(&plane.dir.join("kubeconfig")).await?;
    let ns = test_namespace(&client, "inf-sharded-gate-off").await?;
    create_configmaps(&client, &ns, "cm", 30).await?;
    let all = uids(&client, &ns).await?;
    let half = SlotSet::range(0, 128);

    let auto = Informers::new(client.clone());
    let informer = auto.acquire(&configmaps(), sharded(&ns, half)).await?;
    synced(&informer).await?;
    ensure!(
        informer.filter_mode() == Some(FilterMode::Client),
        "auto on a server without the gate: {:?}",
        informer.filter_mode()
    );
    let expected = share(&all, half);
    wait_until("the client-filtered share", TIMEOUT, || async {
        let cached = cached_names(&informer);
        ensure!(
            cached == expected,
            "cached {cached:?}, expected {expected:?}"
        );
        Ok(())
    })
    .await?;

    let strict = Informers::with_options(
        client.clone(),
        Options {
            shard_filter: ShardFilter::Server,
            ..Options::default()
        },
    );
    let refused = strict.acquire(&configmaps(), sharded(&ns, half)).await?;
    let error = wait_until("server mode to report the gate", TIMEOUT, || async {
        refused.last_error().ok_or_else(|| anyhow!("no error yet"))
    })
    .await?;
    ensure!(
        error.contains("ShardedListAndWatch") && error.contains("--shard-filter"),
        "{error}"
    );
    ensure!(!refused.has_synced() && refused.is_empty() && refused.filter_mode().is_none());
    Ok(())
}

/// Custom resources are filtered on the server too, though v1.36.3 does not echo the selector
/// in their lists (`UnstructuredList` has no `shardInfo`): the probe's canary selector finds
/// it out, and the share arrives filtered (events counted = objects in the share).
#[tokio::test]
async fn custom_resources_are_filtered_on_the_server_without_an_echo() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "shard-cr").await?;
    let gvk = GroupVersionKind::gvk("test.reconciler.dev", "v1", "Widget");
    let resource = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widgets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &resource);
    let mut all = BTreeMap::new();
    for i in 0..24 {
        let widget: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("w{i}")}, "spec": {},
        }))?;
        let created = widgets.create(&PostParams::default(), &widget).await?;
        all.insert(created.name_any(), created.uid().context("uid")?);
    }
    let slots = SlotSet::range(0, 128);
    let metrics = Metrics::new();
    let informers = Informers::with_options(
        client.clone(),
        Options {
            metrics: Some(metrics.clone()),
            shard_filter: ShardFilter::Auto,
            ..Options::default()
        },
    );
    let informer = informers.acquire(&gvk, sharded(&ns, slots)).await?;
    synced(&informer).await?;
    ensure!(
        informer.filter_mode() == Some(FilterMode::Server),
        "custom resources filtered {:?}",
        informer.filter_mode()
    );
    let expected = share(&all, slots);
    ensure!(
        !expected.is_empty() && expected.len() < all.len(),
        "degenerate split"
    );
    ensure!(
        cached_names(&informer) == expected,
        "cached the wrong share"
    );
    let events = sample(
        &metrics,
        r#"reconciler_informer_events_total{group="test.reconciler.dev",version="v1",kind="Widget"}"#,
    );
    #[allow(clippy::cast_precision_loss)] // two dozen
    let owned = expected.len() as f64;
    ensure!(
        (events - owned).abs() < f64::EPSILON,
        "received {events} objects for a share of {owned}: not filtered on the server"
    );
    Ok(())
}
