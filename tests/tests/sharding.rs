//! Sharded mode end to end (issue 17): `reconciler-host run --shards auto` replicas against the
//! real kube-apiserver, the widget guest journalling every reconcile (`spec.journal`: a
//! `journal begin <key>` line first, `journal end <key>` last, in each replica's JSON log).
//!
//! One test, in the order an operator would meet it: three replicas split the Widgets; one is
//! SIGKILLed and the other two take its range over; a fourth joins and the ranges rebalance while
//! the Widgets' specs keep changing. At the end the journals of all four replicas must show no key
//! reconciled by two replicas at once (a SIGKILLed replica's unfinished reconcile counts as
//! running until the kill), and every Widget's last generation reconciled.
//!
//! Replica `r2` filters on the client (`--shard-filter client`), the others on the server when it
//! honours `shardSelector` (`auto`): the split must not depend on where the filtering happens.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail, ensure};
use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{DynamicObject, ListParams, Patch, PatchParams, PostParams};
use reconciler_host::cluster::shard_ranges::{SLOTS, SlotSet, slot_of};
use reconciler_host_tests::journal::{Interval, Log, describe, overlaps};
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until, widgets,
};
use serde_json::{Value, json};

/// Short, so that the SIGKILL takeover fits the test's time; the ring renews every second.
const LEASE: &str = "6s";
/// Widgets at the start, and created while a replica is dead and after.
const WIDGETS: usize = 150;
const WHILE_DEAD: usize = 30;
const AFTER: usize = 30;
/// Each reconcile busy-waits this long, so that a handover meets reconciles in flight.
const SLEEP_MS: u64 = 20;
/// Generous: a takeover after SIGKILL needs a lease duration plus a renewal or two.
const SETTLE: Duration = Duration::from_secs(60);

/// The widget grant, with log and event rates no journal line can exceed (a dropped `end` line
/// would read as a reconcile that never finished), and CPU enough for the busy-waits.
const GRANTS: &str = r"
guests:
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
    limits: {logLinesPerSecond: 100000, logBurst: 100000, eventsPerSecond: 10000, eventBurst: 10000, cpuMillicores: 8000}
";

struct Replica {
    identity: &'static str,
    host: HostProcess,
    /// When SIGKILL returned: the process was gone by then.
    killed_at: Option<SystemTime>,
}

/// One replica's `/shards`, the part the test reads.
#[derive(Debug)]
struct View {
    identity: String,
    members: BTreeSet<String>,
    /// The slots its controllers run with (`active`; the contract's `owned` where absent).
    active: SlotSet,
    owned: SlotSet,
    fenced: bool,
    keys: u64,
    filter: String,
}

struct Cluster {
    plane: &'static ControlPlane,
    ns: String,
    ring: String,
    widgets: Api<DynamicObject>,
    /// The host configuration (YAML).
    grants: String,
}

impl Cluster {
    async fn start(&self, identity: &'static str, filter: &str) -> Result<Replica> {
        let host = HostProcess::start_with_env(
            HostOptions {
                kubeconfig: self.plane.kubeconfig(),
                config: self.grants.clone(),
                guests: vec!["widget"],
                namespace: Some(&self.ns),
                extra_args: [
                    "--shards",
                    "auto",
                    "--shard-filter",
                    filter,
                    "--lease-name",
                    &self.ring,
                    "--lease-namespace",
                    &self.ns,
                    "--lease-duration",
                    LEASE,
                    "--identity",
                    identity,
                ]
                .map(String::from)
                .to_vec(),
            },
            &[("RECONCILER_LOG_FORMAT", "json")],
        )
        .await
        .with_context(|| format!("starting replica {identity}"))?;
        Ok(Replica {
            identity,
            host,
            killed_at: None,
        })
    }

    async fn create(&self, names: impl IntoIterator<Item = String>) -> Result<()> {
        let widgets = self.widgets.clone();
        futures::stream::iter(names)
            .map(|name| {
                let widgets = widgets.clone();
                async move {
                    let object: DynamicObject = serde_json::from_value(json!({
                        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                        "metadata": {"name": name},
                        "spec": {"journal": true, "mode": "sleep", "sleepMs": SLEEP_MS},
                    }))?;
                    widgets
                        .create(&PostParams::default(), &object)
                        .await
                        .with_context(|| format!("creating Widget {name}"))?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(16)
            .try_collect::<()>()
            .await
    }

    /// Waits until there are `expect` Widgets and each has its current generation reconciled.
    async fn converged(&self, expect: usize, what: &str) -> Result<Vec<DynamicObject>> {
        wait_until(what, SETTLE, || async {
            let items = self.widgets.list(&ListParams::default()).await?.items;
            ensure!(
                items.len() == expect,
                "{} Widgets, not {expect}",
                items.len()
            );
            let behind: Vec<String> = items
                .iter()
                .filter(|w| !reconciled(w))
                .map(|w| {
                    format!(
                        "{} (generation {:?}, status {})",
                        name(w),
                        w.metadata.generation,
                        w.data.get("status").unwrap_or(&Value::Null)
                    )
                })
                .collect();
            ensure!(
                behind.is_empty(),
                "{} of {expect} not reconciled at their generation, e.g. {}",
                behind.len(),
                behind[..behind.len().min(5)].join("; ")
            );
            Ok(items)
        })
        .await
    }
}

fn name(object: &DynamicObject) -> String {
    object.metadata.name.clone().unwrap_or_default()
}

/// `status.observedGeneration == metadata.generation` and at least one reconcile counted.
fn reconciled(object: &DynamicObject) -> bool {
    let status = object.data.get("status").unwrap_or(&Value::Null);
    status["reconciles"].as_u64().unwrap_or(0) >= 1
        && status["observedGeneration"].as_i64().is_some()
        && status["observedGeneration"].as_i64() == object.metadata.generation
}

async fn view(replica: &Replica) -> Result<View> {
    let report = replica.host.shards().await?;
    let slots = |field: &str| -> Result<SlotSet> {
        let text = report[field].as_str().with_context(|| {
            format!("/shards of {} has no `{field}`: {report}", replica.identity)
        })?;
        SlotSet::from_text(text).map_err(anyhow::Error::msg)
    };
    let owned = slots("owned")?;
    let active = if report.get("active").is_some() {
        slots("active")?
    } else {
        owned
    };
    Ok(View {
        identity: report["identity"].as_str().unwrap_or_default().to_owned(),
        members: report["members"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_owned))
            .collect(),
        active,
        owned,
        fenced: report["fenced"].as_bool().unwrap_or(true),
        keys: report["keys"]["widget"].as_u64().unwrap_or(0),
        filter: report["filter"]["widget"].to_string(),
    })
}

/// Waits until exactly `replicas` are the ring, each sees all of them, and their active slots
/// are disjoint and cover the hash space.
async fn settled(replicas: &[&Replica], what: &str) -> Result<Vec<View>> {
    let expect: BTreeSet<String> = replicas.iter().map(|r| r.identity.to_owned()).collect();
    let result = wait_until(what, SETTLE, || async {
        let mut views = Vec::new();
        let mut covered = SlotSet::empty();
        for replica in replicas {
            let view = view(replica).await?;
            ensure!(view.identity == replica.identity, "{view:?}");
            ensure!(!view.fenced, "{} is fenced", replica.identity);
            ensure!(
                view.members == expect,
                "{} sees members {:?}",
                replica.identity,
                view.members
            );
            ensure!(
                view.owned == view.active && !view.active.is_empty(),
                "{} owns {} but runs {}",
                replica.identity,
                view.owned.to_text(),
                view.active.to_text()
            );
            let twice = covered.intersection(&view.active);
            ensure!(
                twice.is_empty(),
                "slots {} active on {} and another replica",
                twice.to_text(),
                replica.identity
            );
            covered = covered.union(&view.active);
            views.push(view);
        }
        ensure!(
            covered.is_all(),
            "slots {} owned by nobody",
            SlotSet::all().difference(&covered).to_text()
        );
        Ok(views)
    })
    .await;
    result.map_err(|e| {
        let tails: Vec<String> = replicas
            .iter()
            .map(|r| format!("{}: {}", r.identity, r.host.log_tail()))
            .collect();
        e.context(tails.join("\n"))
    })
}

/// Prints each replica's share and checks that the keys in their caches add up to `total`.
async fn print_split(
    replicas: &[&Replica],
    views: &[View],
    total: usize,
    when: &str,
) -> Result<()> {
    // The caches follow the API server's watch: give them a moment to count the last creations.
    let keys = wait_until(
        &format!("the replicas' caches to hold {total} Widgets between them ({when})"),
        Duration::from_secs(30),
        || async {
            let mut keys = Vec::new();
            for replica in replicas {
                let metric = replica
                    .host
                    .metric(r#"reconciler_shard_keys{guest="widget"}"#)
                    .await?;
                let now = view(replica).await?;
                keys.push((now.keys, metric, now.filter));
            }
            let sum: u64 = keys.iter().map(|(k, _, _)| k).sum();
            ensure!(
                sum == total as u64,
                "keys per replica {keys:?} add up to {sum}"
            );
            Ok(keys)
        },
    )
    .await?;
    println!("split {when}:");
    for ((replica, view), (keys, metric, filter)) in replicas.iter().zip(views).zip(keys) {
        println!(
            "  {}: slots {} ({} of {SLOTS}), {keys} Widgets (/shards), reconciler_shard_keys {metric}, filter {filter}",
            replica.identity,
            view.active.to_text(),
            view.active.len(),
        );
    }
    Ok(())
}

/// Every journalled reconcile of every replica, by key (`namespace/name`). `now` closes the
/// unfinished reconciles of replicas still running.
fn journal(replicas: &[&Replica], now: SystemTime) -> BTreeMap<String, Vec<Interval>> {
    let lines: Vec<Vec<(SystemTime, Value)>> = replicas.iter().map(|r| r.host.json_log()).collect();
    let logs: Vec<Log<'_>> = replicas
        .iter()
        .zip(&lines)
        .map(|(replica, lines)| Log {
            replica: replica.identity.to_owned(),
            lines,
            until: replica.killed_at.unwrap_or(now),
        })
        .collect();
    reconciler_host_tests::journal::journal(&logs, "widget")
}

/// Bumps `spec.touch` of the Widgets in turn, one every `every` (at most), until aborted: the
/// replicas meet new generations while the ranges move.
fn touch_widgets(
    widgets: Api<DynamicObject>,
    names: Vec<String>,
    every: Duration,
) -> (tokio::task::JoinHandle<()>, Arc<AtomicUsize>) {
    let touched = Arc::new(AtomicUsize::new(0));
    let count = touched.clone();
    let task = tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        for n in 0.. {
            tick.tick().await;
            let name = &names[n % names.len()];
            let patch = Patch::Merge(json!({"spec": {"touch": n}}));
            if widgets
                .patch(name, &PatchParams::default(), &patch)
                .await
                .is_ok()
            {
                count.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    (task, touched)
}

/// What a guest's lister shows of its primary kind on a sharded host: this replica's share by
/// default (each Widget lists exactly as many Widgets as its owner holds), every object with
/// `primaryReads: whole`. And a guest's enqueue of keys another replica owns is dropped and
/// counted (`reconciler_shard_foreign_keys_total`).
#[tokio::test]
async fn the_lister_shows_a_replica_its_share_unless_the_grant_asks_for_the_whole_kind()
-> Result<()> {
    let plane = ControlPlane::shared().await?;
    let client = plane.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    // Both at once: each pass has its own namespace and ring.
    tokio::try_join!(
        lister_pass(plane, &client, "share"),
        lister_pass(plane, &client, "whole")
    )?;
    Ok(())
}

/// One pass of the test above with `primaryReads: <reads>`.
async fn lister_pass(
    plane: &'static ControlPlane,
    client: &kube::Client,
    reads: &str,
) -> Result<()> {
    const COUNT: usize = 16;
    let ns = test_namespace(client, "sharded-reads").await?;
    let cluster = Cluster {
        plane,
        widgets: widgets(client, &ns),
        ring: unique_name("ring"),
        grants: GRANTS.replace(
            "    read: [",
            &format!("    primaryReads: {reads}\n    read: ["),
        ),
        ns: ns.clone(),
    };
    let (r1, r2) = tokio::try_join!(cluster.start("r1", "auto"), cluster.start("r2", "auto"))?;
    let views = settled(&[&r1, &r2], "two replicas to split the ring").await?;
    let list =
        json!({"group": "test.reconciler.dev", "version": "v1", "kind": "Widget", "namespace": ns});
    for i in 0..COUNT {
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("w-{i:02}")}, "spec": {"list": list},
        }))?;
        cluster
            .widgets
            .create(&PostParams::default(), &object)
            .await?;
    }
    cluster.converged(COUNT, "every Widget reconciled").await?;
    // Once more, with every Widget in the caches.
    touch_all(&cluster.widgets, "again").await?;
    let items = cluster
        .converged(COUNT, "every Widget reconciled again")
        .await?;
    for widget in &items {
        let seen = widget.data["status"]["list"].as_u64();
        let slot = slot_of(widget.metadata.uid.as_deref().unwrap_or_default());
        let owner = views
            .iter()
            .find(|v| v.active.contains(slot))
            .context("an owner")?;
        let share = items
            .iter()
            .filter(|w| {
                owner
                    .active
                    .owns_uid(w.metadata.uid.as_deref().unwrap_or_default())
            })
            .count() as u64;
        let expected = if reads == "whole" {
            COUNT as u64
        } else {
            share
        };
        ensure!(
            seen == Some(expected),
            "primaryReads {reads}: {} (owner {}) listed {seen:?} Widgets, expected {expected}",
            name(widget),
            owner.identity
        );
    }
    ensure!(
        reads == "whole" || views.iter().all(|v| v.active.len() < SLOTS),
        "one replica owns every slot: {views:?}"
    );
    if reads == "share" {
        // A guest's enqueue of keys its replica does not own: dropped there and counted
        // (their owner reconciles them on its own events).
        let first = &items[0];
        let uid = first.metadata.uid.as_deref().unwrap_or_default();
        let (owner, view) = [(&r1, &views[0]), (&r2, &views[1])]
            .into_iter()
            .find(|(_, v)| v.active.owns_uid(uid))
            .context("an owner")?;
        let others: Vec<String> = items.iter().skip(1).map(name).collect();
        let foreign = items
            .iter()
            .skip(1)
            .filter(|w| {
                !view
                    .active
                    .owns_uid(w.metadata.uid.as_deref().unwrap_or_default())
            })
            .count();
        cluster
            .widgets
            .patch(
                &name(first),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"enqueue": others}})),
            )
            .await?;
        let series = r#"reconciler_shard_foreign_keys_total{guest="widget"}"#;
        wait_until("the foreign keys dropped and counted", SETTLE, || async {
            let dropped = owner.host.metric(series).await?;
            #[allow(clippy::cast_precision_loss)] // a dozen
            let expected = foreign as f64;
            // At least once each (more if the enqueuing reconcile ran again).
            ensure!(
                foreign > 0 && dropped >= expected,
                "{} dropped {dropped} foreign keys, expected {foreign}",
                owner.identity
            );
            Ok(())
        })
        .await?;
    }
    drop((r1, r2));
    Ok(())
}

/// Sets `spec.message` on every Widget (a new generation each).
async fn touch_all(widgets: &Api<DynamicObject>, message: &str) -> Result<()> {
    for widget in widgets.list(&ListParams::default()).await?.items {
        widgets
            .patch(
                &name(&widget),
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"message": message}})),
            )
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn replicas_split_the_widgets_take_over_from_the_killed_and_rebalance_for_the_joining_without_overlap()
-> Result<()> {
    let started = Instant::now();
    let plane = ControlPlane::shared().await?;
    let client = plane.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "sharding").await?;
    let cluster = Cluster {
        plane,
        widgets: widgets(&client, &ns),
        ring: unique_name("ring"),
        ns,
        grants: GRANTS.into(),
    };

    // 1. Three replicas split the slots first, then the Widgets arrive: every Widget's journal
    //    then comes from the replica whose slots hold its uid.
    let (r1, r2, mut r3) = tokio::try_join!(
        cluster.start("r1", "auto"),
        cluster.start("r2", "client"),
        cluster.start("r3", "auto"),
    )?;
    let views = settled(&[&r1, &r2, &r3], "three replicas to split the ring").await?;
    let creating = Instant::now();
    cluster
        .create((0..WIDGETS).map(|i| format!("w-{i:03}")))
        .await?;
    let items = cluster
        .converged(WIDGETS, "every Widget reconciled by the three replicas")
        .await?;
    println!(
        "{WIDGETS} Widgets created and reconciled by three replicas in {:.1} s ({:.1} s into the test)",
        creating.elapsed().as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    print_split(&[&r1, &r2, &r3], &views, WIDGETS, "with r1, r2, r3").await?;
    let r2_filter = view(&r2).await?.filter;
    ensure!(
        r2_filter == r#""client""#,
        "r2 was started with --shard-filter client; its /shards says {r2_filter}"
    );
    let uids: BTreeMap<String, String> = items
        .iter()
        .map(|w| {
            (
                format!("{}/{}", cluster.ns, name(w)),
                w.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect();
    let phase_one = journal(&[&r1, &r2, &r3], SystemTime::now());
    let mut misplaced = Vec::new();
    for (key, intervals) in &phase_one {
        let uid = uids
            .get(key)
            .with_context(|| format!("journal names {key}, which is no Widget"))?;
        for interval in intervals {
            let view = views
                .iter()
                .find(|v| v.identity == interval.replica)
                .context("a journal of an unknown replica")?;
            if !view.active.owns_uid(uid) {
                misplaced.push(format!(
                    "{key} (uid {uid}, slot {}) reconciled by {}, which owns {}",
                    slot_of(uid),
                    interval.replica,
                    view.active.to_text()
                ));
            }
        }
    }
    if !misplaced.is_empty() {
        // Either a replica reconciled outside its share, or the ring moved (a replica fenced
        // under load): say which.
        let mut now = Vec::new();
        for replica in [&r1, &r2, &r3] {
            now.push(match view(replica).await {
                Ok(v) => format!(
                    "{}: {} (fenced {})",
                    v.identity,
                    v.active.to_text(),
                    v.fenced
                ),
                Err(e) => format!("{}: {e:#}", replica.identity),
            });
        }
        bail!(
            "Widgets reconciled outside their replica's slots:\n{}\nslots when the Widgets were created: {}\nslots now: {}",
            misplaced.join("\n"),
            views
                .iter()
                .map(|v| format!("{}: {}", v.identity, v.active.to_text()))
                .collect::<Vec<_>>()
                .join(", "),
            now.join(", ")
        );
    }
    let journalled: BTreeSet<&String> = phase_one.keys().collect();
    ensure!(
        uids.keys().all(|k| journalled.contains(k)),
        "Widgets converged without a journal line (is the guest's journal or the JSON log broken?): {:?}",
        uids.keys()
            .filter(|k| !journalled.contains(k))
            .take(10)
            .collect::<Vec<_>>()
    );

    // 2. SIGKILL r3 while its Widgets keep changing (so that it dies mid-reconcile): r1 and r2
    //    take its range once its lease has gone unrenewed for a lease duration. Widgets changed
    //    and created meanwhile, and created after, converge.
    let r3_view = views
        .iter()
        .find(|v| v.identity == "r3")
        .context("r3's view")?;
    let r3_widgets: Vec<String> = items
        .iter()
        .filter(|w| {
            r3_view
                .active
                .owns_uid(w.metadata.uid.as_deref().unwrap_or_default())
        })
        .map(name)
        .collect();
    let (toucher, touched) = touch_widgets(
        cluster.widgets.clone(),
        r3_widgets,
        Duration::from_millis(10),
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    r3.host.kill()?;
    r3.killed_at = Some(SystemTime::now());
    let killed = Instant::now();
    cluster
        .create((0..WHILE_DEAD).map(|i| format!("dead-{i:03}")))
        .await?;
    let views = settled(&[&r1, &r2], "r1 and r2 to take over r3's slots").await?;
    println!(
        "r3's slots taken over {:.1} s after its SIGKILL (lease duration {LEASE})",
        killed.elapsed().as_secs_f64()
    );
    cluster
        .create((0..AFTER).map(|i| format!("after-{i:03}")))
        .await?;
    toucher.abort();
    println!(
        "{} spec changes of r3's Widgets around its SIGKILL",
        touched.load(Ordering::Relaxed)
    );
    let total = WIDGETS + WHILE_DEAD + AFTER;
    let items = cluster
        .converged(total, "every Widget reconciled by r1 and r2")
        .await?;
    print_split(&[&r1, &r2], &views, total, "after r3's SIGKILL").await?;

    // 3. r4 joins while every Widget's spec keeps changing: the ranges rebalance to three.
    let (toucher, touched) = touch_widgets(
        cluster.widgets.clone(),
        items.iter().map(name).collect(),
        Duration::from_millis(25),
    );
    let joining = Instant::now();
    let r4 = cluster.start("r4", "auto").await?;
    let views = settled(&[&r1, &r2, &r4], "r1, r2 and r4 to rebalance the ring").await?;
    println!(
        "ring rebalanced to r1, r2, r4 {:.1} s after r4 was started",
        joining.elapsed().as_secs_f64()
    );
    // A few more changes after the handover, then quiet.
    tokio::time::sleep(Duration::from_secs(2)).await;
    toucher.abort();
    println!(
        "{} spec changes during the join",
        touched.load(Ordering::Relaxed)
    );
    cluster
        .converged(
            total,
            "every Widget's last generation reconciled after r4 joined",
        )
        .await?;
    print_split(&[&r1, &r2, &r4], &views, total, "after r4 joined").await?;

    // 4. No key reconciled by two replicas at once, and every last generation reconciled.
    let all = journal(&[&r1, &r2, &r3, &r4], SystemTime::now());
    let found = overlaps(&all);
    let reconciles: usize = all.values().map(Vec::len).sum();
    let unfinished: Vec<String> = all
        .iter()
        .flat_map(|(key, intervals)| {
            intervals
                .iter()
                .filter(|i| i.unfinished)
                .map(move |i| format!("{key}: {}", describe(i)))
        })
        .collect();
    let mut per_replica: BTreeMap<&str, usize> = BTreeMap::new();
    for interval in all.values().flatten() {
        *per_replica.entry(interval.replica.as_str()).or_default() += 1;
    }
    println!(
        "journal: {reconciles} reconciles of {} keys ({per_replica:?}); {} begun and not finished{}",
        all.len(),
        unfinished.len(),
        if unfinished.is_empty() {
            String::new()
        } else {
            format!(":\n  {}", unfinished.join("\n  "))
        }
    );
    ensure!(
        ["r1", "r2", "r3", "r4"]
            .iter()
            .all(|r| per_replica.contains_key(r)),
        "a replica journalled nothing: {per_replica:?}"
    );
    if !found.is_empty() {
        bail!(
            "{} overlapping reconciles of one key on two replicas:\n{}",
            found.len(),
            found.join("\n")
        );
    }
    println!("done in {:.1} s", started.elapsed().as_secs_f64());
    Ok(())
}
