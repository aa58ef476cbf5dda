//! Shared informers (`reconciler_host::cluster::informers`) against a real kube-apiserver.
//!
//! Each test has its own `Informers`, namespace(s) and, where a CRD is needed, its own API group,
//! so tests run in parallel on the shared control plane. Read-your-writes holds the informer's
//! watch back with a TCP relay (TLS passes through untouched) so "the watch has not seen it yet"
//! is a fact, not a race. The relist test restarts kube-apiserver, and the fallback from a
//! streaming list needs a server that refuses one (`WatchList=false`), so each has a control
//! plane of its own.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, anyhow, bail, ensure};
use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use kube::{Api, Client, Config, ResourceExt};
use reconciler_host::cluster::informers::{
    Informer, InformerError, InformerEvent, Informers, InitialList, Options, Subscription,
    WatchScope, parse_selector,
};
use reconciler_host::metrics::Metrics;
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, PrivateControlPlane, Restart, apply_crd_file,
    test_namespace, wait_crd_established, wait_until, widgets,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};

const TIMEOUT: Duration = Duration::from_secs(30);

fn configmaps() -> GroupVersionKind {
    GroupVersionKind::gvk("", "v1", "ConfigMap")
}

fn in_namespace(ns: &str) -> WatchScope {
    WatchScope {
        namespace: Some(ns.to_owned()),
        label_selector: None,
        shard: None,
    }
}

async fn setup(prefix: &str) -> Result<(Client, String)> {
    let client = ControlPlane::shared().await?.client().await?;
    let ns = test_namespace(&client, prefix).await?;
    Ok((client, ns))
}

async fn create_cm(
    client: &Client,
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
) -> Result<ConfigMap> {
    let labels: serde_json::Map<_, _> = labels
        .iter()
        .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(*v)))
        .collect();
    let cm: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": name, "labels": labels },
        "data": { "k": "v1" },
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &cm)
        .await
        .with_context(|| format!("creating ConfigMap {ns}/{name}"))
}

async fn set_data(client: &Client, ns: &str, name: &str, value: &str) -> Result<ConfigMap> {
    let patch = serde_json::json!({ "data": { "k": value } });
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .with_context(|| format!("patching ConfigMap {ns}/{name}"))
}

fn to_dynamic(cm: &ConfigMap) -> Result<DynamicObject> {
    Ok(serde_json::from_value(serde_json::to_value(cm)?)?)
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

fn rv(obj: &DynamicObject) -> String {
    obj.resource_version().unwrap_or_default()
}

fn show(event: &InformerEvent) -> String {
    let at = |o: &DynamicObject| {
        format!(
            "{}/{}@{}",
            o.namespace().unwrap_or_default(),
            o.name_any(),
            rv(o)
        )
    };
    match event {
        InformerEvent::Applied {
            object,
            old,
            listed,
            echo,
        } => format!(
            "Applied({}, old={:?}, listed={listed}, echo={echo})",
            at(object),
            old.as_deref().map(at)
        ),
        InformerEvent::Deleted { object } => format!("Deleted({})", at(object)),
        InformerEvent::Resync { object } => format!("Resync({})", at(object)),
    }
}

async fn next_event(sub: &mut Subscription) -> Result<InformerEvent> {
    tokio::time::timeout(TIMEOUT, sub.next())
        .await
        .map_err(|_| anyhow!("no informer event within {TIMEOUT:?}"))?
        .ok_or_else(|| anyhow!("the subscription ended"))
}

/// The next event, which must be an update: (new, old).
async fn next_update(
    sub: &mut Subscription,
    what: &str,
) -> Result<(Arc<DynamicObject>, Arc<DynamicObject>)> {
    match next_event(sub).await? {
        InformerEvent::Applied {
            object,
            old: Some(old),
            ..
        } => Ok((object, old)),
        other => bail!("expected {what}, got {}", show(&other)),
    }
}

async fn next_events(sub: &mut Subscription, n: usize) -> Result<Vec<InformerEvent>> {
    let mut events = Vec::with_capacity(n);
    for _ in 0..n {
        events.push(next_event(sub).await?);
    }
    Ok(events)
}

fn names<'a>(objects: impl IntoIterator<Item = &'a Arc<DynamicObject>>) -> Vec<String> {
    objects
        .into_iter()
        .map(|o| format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any()))
        .collect()
}

#[tokio::test]
async fn one_watch_per_kind_and_scope_shared_by_all_handles_and_released_with_the_last()
-> Result<()> {
    let (client, ns) = setup("inf-share").await?;
    create_cm(&client, &ns, "shared", &[("a", "1"), ("b", "2")]).await?;
    let informers = Informers::new(client.clone());

    let first = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    let second = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    let active = informers.active();
    ensure!(
        active.len() == 1 && active[0].handles == 2,
        "one informer, two handles: {active:?}"
    );
    ensure!(
        informers.watch_tasks() == 1,
        "one watch, got {}",
        informers.watch_tasks()
    );
    synced(&second).await?;
    let (a, b) = (
        first.get_cached(Some(&ns), "shared"),
        second.get_cached(Some(&ns), "shared"),
    );
    ensure!(
        matches!((&a, &b), (Some(a), Some(b)) if Arc::ptr_eq(a, b)),
        "both handles read the same cached object"
    );

    // One selector spelled two ways is one scope; a different scope is another informer.
    let spaced = WatchScope {
        namespace: Some(ns.clone()),
        label_selector: Some("b=2, a=1".into()),
        shard: None,
    };
    let tight = WatchScope {
        namespace: Some(ns.clone()),
        label_selector: Some("a==1,b=2".into()),
        shard: None,
    };
    let s1 = informers.acquire(&configmaps(), spaced).await?;
    let s2 = informers.acquire(&configmaps(), tight).await?;
    ensure!(informers.active().len() == 2, "{:?}", informers.active());
    ensure!(informers.watch_tasks() == 2);
    ensure!(
        s1.scope().label_selector.as_deref() == Some("a=1,b=2"),
        "{:?}",
        s1.scope()
    );

    // A subscription keeps its informer alive on its own.
    let sub = first.subscribe();
    drop((first, second, s1, s2));
    let active = informers.active();
    ensure!(
        active.len() == 1 && active[0].handles == 1,
        "only the subscription's: {active:?}"
    );
    drop(sub);
    ensure!(
        informers.active().is_empty(),
        "released: {:?}",
        informers.active()
    );
    wait_until("both watch tasks to stop", TIMEOUT, || async {
        match informers.watch_tasks() {
            0 => Ok(()),
            n => Err(anyhow!("{n} still running")),
        }
    })
    .await?;

    // The next acquire starts afresh.
    let again = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    ensure!(informers.watch_tasks() == 1);
    synced(&again).await?;
    ensure!(again.get(Some(&ns), "shared").is_some() && again.len() == 1);
    Ok(())
}

#[tokio::test]
async fn create_update_delete_arrive_as_events_and_unchanged_versions_do_not() -> Result<()> {
    let (client, ns) = setup("inf-events").await?;
    let informers = Informers::new(client.clone());
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;
    ensure!(informer.namespaced() && informer.api_resource().plural == "configmaps");
    let mut sub = informer.subscribe();

    let created = create_cm(&client, &ns, "a", &[]).await?;
    let event = next_event(&mut sub).await?;
    // A watch event, not a list: a controller queues it as a change, ahead of any backlog.
    let InformerEvent::Applied {
        object,
        old: None,
        listed: false,
        ..
    } = &event
    else {
        bail!("expected a creation from the watch, got {}", show(&event))
    };
    ensure!(object.name_any() == "a" && Some(rv(object)) == created.resource_version());
    // List items lack apiVersion/kind; the cache fills them in.
    let types = object.types.as_ref().context("apiVersion/kind missing")?;
    ensure!(
        types.api_version == "v1" && types.kind == "ConfigMap",
        "{types:?}"
    );

    let updated = set_data(&client, &ns, "a", "v2").await?;
    let (object, old) = next_update(&mut sub, "an update").await?;
    ensure!(
        Some(rv(&object)) == updated.resource_version()
            && Some(rv(&old)) == created.resource_version()
    );
    ensure!(object.data["data"]["k"] == "v2", "{:?}", object.data);

    // The same value again changes nothing, so no new resourceVersion and no event: the next
    // event is the real change after it.
    let same = set_data(&client, &ns, "a", "v2").await?;
    ensure!(
        same.resource_version() == updated.resource_version(),
        "no-op patch kept the version"
    );
    let changed = set_data(&client, &ns, "a", "v3").await?;
    let (object, old) = next_update(&mut sub, "the v3 update").await?;
    ensure!(
        Some(rv(&object)) == changed.resource_version()
            && Some(rv(&old)) == updated.resource_version(),
        "got {} after {}",
        rv(&object),
        rv(&old)
    );

    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("a", &DeleteParams::default())
        .await?;
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(&event, InformerEvent::Deleted { object } if object.name_any() == "a"),
        "expected the deletion, got {}",
        show(&event)
    );
    ensure!(informer.get(Some(&ns), "a").is_none() && informer.is_empty());
    Ok(())
}

#[tokio::test]
async fn late_subscribers_get_the_cache_lagging_ones_a_resync_and_periodic_resyncs_arrive()
-> Result<()> {
    let (client, ns) = setup("inf-subscribe").await?;
    for i in 0..5 {
        create_cm(&client, &ns, &format!("a{i}"), &[]).await?;
    }
    let options = Options {
        event_buffer: 2,
        ..Options::default()
    };
    let informers = Informers::with_options(client.clone(), options);
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;

    // Subscribing to a running informer replays what it holds, as creations from a list
    // (backlog, which a controller queues at low priority).
    let mut late = informer.subscribe();
    let replay = next_events(&mut late, 5).await?;
    ensure!(
        replay.iter().all(|e| matches!(
            e,
            InformerEvent::Applied {
                old: None,
                listed: true,
                ..
            }
        )),
        "{:?}",
        replay.iter().map(show).collect::<Vec<_>>()
    );
    ensure!(names(replay.iter().map(InformerEvent::object)) == names(&informer.list(None, None)));

    // Five changes into a buffer of two while the subscriber is not reading: it lags, and
    // instead of losing keys it receives every cached object as a Resync.
    let mut slow = informer.subscribe();
    next_events(&mut slow, 5).await?;
    for i in 0..5 {
        create_cm(&client, &ns, &format!("b{i}"), &[]).await?;
    }
    wait_until("10 objects in the cache", TIMEOUT, || async {
        match informer.len() {
            10 => Ok(()),
            n => Err(anyhow!("{n}")),
        }
    })
    .await?;
    let mut missing: BTreeSet<String> = (0..5).map(|i| format!("b{i}")).collect();
    let mut resyncs = 0;
    while !missing.is_empty() {
        let event = next_event(&mut slow).await?;
        resyncs += usize::from(matches!(event, InformerEvent::Resync { .. }));
        missing.remove(&event.object().name_any());
    }
    ensure!(
        resyncs > 0,
        "the lagging subscriber should have been resynced"
    );

    // A periodic resync re-sends every cached object, after the initial replay.
    let mut periodic = informer.subscribe_with_resync(Duration::from_millis(300));
    next_events(&mut periodic, 10).await?;
    let resync = next_events(&mut periodic, 10).await?;
    ensure!(
        resync
            .iter()
            .all(|e| matches!(e, InformerEvent::Resync { .. })),
        "{:?}",
        resync.iter().map(show).collect::<Vec<_>>()
    );
    let seen: BTreeSet<String> = names(resync.iter().map(InformerEvent::object))
        .into_iter()
        .collect();
    ensure!(seen.len() == 10, "every object once: {seen:?}");
    Ok(())
}

#[tokio::test]
async fn list_uses_the_namespace_index_and_label_selectors() -> Result<()> {
    let (client, ns1) = setup("inf-list-a").await?;
    let ns2 = test_namespace(&client, "inf-list-b").await?;
    // Unique per run, so the cluster-wide informer sees only this test's objects.
    let tag = ns1.clone();
    create_cm(&client, &ns1, "web", &[("app", "web"), ("t", &tag)]).await?;
    create_cm(&client, &ns1, "db", &[("app", "db"), ("t", &tag)]).await?;
    create_cm(&client, &ns2, "web", &[("app", "web"), ("t", &tag)]).await?;
    let untagged = create_cm(&client, &ns1, "untagged", &[("app", "web")]).await?;

    let metrics = Metrics::new();
    let options = Options {
        metrics: Some(metrics.clone()),
        ..Options::default()
    };
    let informers = Informers::with_options(client.clone(), options);
    let tagged = informers
        .acquire(
            &configmaps(),
            WatchScope {
                namespace: None,
                label_selector: Some(format!("t={tag}")),
                shard: None,
            },
        )
        .await?;
    synced(&tagged).await?;
    let (a, b) = (ns1.as_str(), ns2.as_str());
    ensure!(
        names(&tagged.list(None, None))
            == [format!("{a}/db"), format!("{a}/web"), format!("{b}/web")]
    );
    ensure!(names(&tagged.list(Some(a), None)) == [format!("{a}/db"), format!("{a}/web")]);
    let web = parse_selector("app=web")?;
    ensure!(names(&tagged.list(None, Some(&web))) == [format!("{a}/web"), format!("{b}/web")]);
    ensure!(names(&tagged.list(Some(b), Some(&web))) == [format!("{b}/web")]);
    ensure!(
        tagged
            .list(Some(b), Some(&parse_selector("app in (db)")?))
            .is_empty()
    );
    ensure!(tagged.list(Some("no-such-namespace"), None).is_empty());
    ensure!(tagged.get(Some(b), "web").is_some() && tagged.get(Some(b), "db").is_none());
    // Writes outside the informer's scope are not cached: its watch would never correct them.
    ensure!(!tagged.record_write(to_dynamic(&untagged)?), "out of scope");

    let one_namespace = informers.acquire(&configmaps(), in_namespace(a)).await?;
    synced(&one_namespace).await?;
    ensure!(
        names(&one_namespace.list(None, None))
            == [
                format!("{a}/db"),
                format!("{a}/untagged"),
                format!("{a}/web")
            ]
    );
    ensure!(one_namespace.list(Some(b), None).is_empty());

    // Both ConfigMap informers add up to one series, gone once they are released.
    let series = r#"reconciler_informer_objects{group="",version="v1",kind="ConfigMap"}"#;
    let text = metrics.render();
    ensure!(
        text.contains(&format!("{series} 6")),
        "expected 3 + 3 objects:\n{text}"
    );
    drop((tagged, one_namespace));
    let text = metrics.render();
    ensure!(!text.contains(series), "series should be removed:\n{text}");
    Ok(())
}

/// A TCP relay in front of kube-apiserver whose server → client direction can be held back,
/// chunk by chunk in arrival order. The informer's client goes through it; the test writes
/// directly, so it can make the API server answer while the watch provably has not seen it.
struct Relay {
    addr: SocketAddr,
    /// Chunks read from the server so far (each gets the next number).
    received: Arc<AtomicU64>,
    /// Chunks numbered up to this are passed on; later ones wait.
    released: Arc<watch::Sender<u64>>,
}

impl Relay {
    async fn start(upstream: String) -> Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let received = Arc::new(AtomicU64::new(0));
        let released = Arc::new(watch::channel(u64::MAX).0);
        let (counter, gate) = (received.clone(), released.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                let (mut from_client, mut to_client) = client.into_split();
                let (mut from_server, mut to_server) = server.into_split();
                tokio::spawn(async move {
                    let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
                    let _ = to_server.shutdown().await;
                });
                // Read eagerly and number chunks as they arrive, so holding never delays reading.
                let (chunks, mut queue) = mpsc::unbounded_channel::<(u64, Vec<u8>)>();
                let counter = counter.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0; 64 * 1024];
                    while let Ok(n @ 1..) = from_server.read(&mut buf).await {
                        let number = counter.fetch_add(1, Ordering::SeqCst) + 1;
                        if chunks.send((number, buf[..n].to_vec())).is_err() {
                            break;
                        }
                    }
                });
                let mut gate = gate.subscribe();
                tokio::spawn(async move {
                    while let Some((number, bytes)) = queue.recv().await {
                        if gate.wait_for(|r| *r >= number).await.is_err()
                            || to_client.write_all(&bytes).await.is_err()
                        {
                            break;
                        }
                    }
                    let _ = to_client.shutdown().await;
                });
            }
        });
        Ok(Self {
            addr,
            received,
            released,
        })
    }

    fn received(&self) -> u64 {
        self.received.load(Ordering::SeqCst)
    }

    /// Pass on chunks up to `number`; hold every later one.
    fn release_through(&self, number: u64) {
        self.released.send_replace(number);
    }

    fn open(&self) {
        self.released.send_replace(u64::MAX);
    }

    /// Waits until chunks beyond `mark` arrived and then nothing more for 300 ms.
    async fn settled_after(&self, mark: u64) -> Result<u64> {
        wait_until("the relay to receive the watch event", TIMEOUT, || async {
            let now = self.received();
            if now <= mark {
                bail!("nothing received yet");
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
            if self.received() != now {
                bail!("still receiving");
            }
            Ok(now)
        })
        .await
    }
}

/// A client for `plane` whose connections go through a new [`Relay`].
async fn client_through_relay(plane: &ControlPlane) -> Result<(Client, Relay)> {
    plane.client().await?;
    let kubeconfig = Kubeconfig::read_from(plane.kubeconfig())?;
    let mut config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let host = config
        .cluster_url
        .host()
        .context("kubeconfig server has no host")?;
    let port = config.cluster_url.port_u16().unwrap_or(443);
    let relay = Relay::start(format!("{host}:{port}")).await?;
    // Same IP, so the serving certificate still matches; only the port differs.
    config.cluster_url = format!("https://{}", relay.addr).parse()?;
    Ok((Client::try_from(config)?, relay))
}

#[tokio::test]
async fn read_your_writes_shows_a_write_before_the_watch_and_survives_older_watch_events()
-> Result<()> {
    let (client, ns) = setup("inf-ryw").await?;
    let (relayed, relay) = client_through_relay(ControlPlane::shared().await?).await?;
    let informers = Informers::new(relayed);
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;
    let mut sub = informer.subscribe();
    let v1 = create_cm(&client, &ns, "status", &[]).await?;
    next_event(&mut sub).await?;

    // Hold the watch. The API server makes v2, which reaches the relay (not the informer) ...
    let hold = relay.received();
    relay.release_through(hold);
    let v2 = set_data(&client, &ns, "status", "v2").await?;
    let cut = relay.settled_after(hold).await?;
    // ... then v3, the host's own write. Recorded, it is read back at once: the watch has
    // delivered neither version, which `record_write` returning true also proves.
    let v3 = set_data(&client, &ns, "status", "v3").await?;
    ensure!(
        informer.get(Some(&ns), "status").map(|o| rv(&o)) == v1.resource_version(),
        "watch held"
    );
    ensure!(
        informer.record_write(to_dynamic(&v3)?),
        "the write is newer than the cache"
    );
    let got = informer.get(Some(&ns), "status").context("cached")?;
    ensure!(Some(rv(&got)) == v3.resource_version() && got.data["data"]["k"] == "v3");
    ensure!(names(&informer.list(Some(&ns), None)).len() == 1);
    ensure!(
        !informer.record_write(to_dynamic(&v2)?),
        "an older write is ignored"
    );

    // Let exactly the v2 event through: subscribers hear of it, readers keep v3.
    relay.release_through(cut);
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(&event, InformerEvent::Applied { object, .. } if Some(rv(object)) == v2.resource_version()),
        "expected the v2 event, got {}",
        show(&event)
    );
    let got = informer.get(Some(&ns), "status").context("cached")?;
    ensure!(
        Some(rv(&got)) == v3.resource_version(),
        "regressed to {} by an older watch event",
        rv(&got)
    );

    // The watch catches up; the write is now simply the watched state.
    relay.open();
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(&event, InformerEvent::Applied { object, .. } if Some(rv(object)) == v3.resource_version()),
        "expected the v3 event, got {}",
        show(&event)
    );
    ensure!(
        !informer.record_write(to_dynamic(&v3)?),
        "the watch has it now"
    );

    // Deletion: hidden at once, announced when the watch sees it.
    let hold = relay.received();
    relay.release_through(hold);
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("status", &DeleteParams::default())
        .await?;
    ensure!(informer.record_delete(Some(&ns), "status"));
    ensure!(informer.get(Some(&ns), "status").is_none() && informer.is_empty());
    ensure!(
        !informer.record_write(to_dynamic(&v3)?),
        "a deleted version stays deleted"
    );
    relay.open();
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(event, InformerEvent::Deleted { .. }),
        "got {}",
        show(&event)
    );
    Ok(())
}

/// KEP-5647's comparable resourceVersions: a watch that lags longer than the write ttl keeps
/// showing the host's own write (the ttl used to hand readers the older object back), and the
/// cache's last synced version says how far the watch got.
#[tokio::test]
async fn a_watch_lagging_past_the_write_ttl_keeps_showing_the_hosts_write() -> Result<()> {
    let (client, ns) = setup("inf-lag").await?;
    let (relayed, relay) = client_through_relay(ControlPlane::shared().await?).await?;
    let ttl = Duration::from_millis(500);
    let options = Options {
        write_ttl: ttl,
        ..Options::default()
    };
    let informers = Informers::with_options(relayed, options);
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;
    let mut sub = informer.subscribe();
    let number = |cm: &ConfigMap| -> Result<u64> {
        Ok(cm
            .resource_version()
            .context("no resourceVersion")?
            .parse()?)
    };
    let v1 = create_cm(&client, &ns, "lagging", &[]).await?;
    next_event(&mut sub).await?;
    ensure!(informer.last_store_sync_resource_version() >= Some(number(&v1)?));

    let hold = relay.received();
    relay.release_through(hold);
    let v2 = set_data(&client, &ns, "lagging", "v2").await?;
    ensure!(
        informer.record_write(to_dynamic(&v2)?),
        "the write is newer than the cache"
    );
    tokio::time::sleep(ttl * 3).await;
    let got = informer.get(Some(&ns), "lagging").context("cached")?;
    ensure!(
        Some(rv(&got)) == v2.resource_version(),
        "the held watch's older object came back after the ttl: {}",
        rv(&got)
    );
    ensure!(
        informer.last_store_sync_resource_version() < Some(number(&v2)?),
        "the watch was held"
    );

    relay.open();
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(&event, InformerEvent::Applied { object, echo: true, .. } if Some(rv(object)) == v2.resource_version()),
        "expected the echo of v2, got {}",
        show(&event)
    );
    ensure!(informer.last_store_sync_resource_version() == Some(number(&v2)?));
    Ok(())
}

/// Waits until the informer's cache holds `name` at `version`.
async fn cached_at(informer: &Informer, ns: &str, name: &str, version: &ConfigMap) -> Result<()> {
    wait_until("the watch to deliver the version", TIMEOUT, || async {
        let cached = informer.get(Some(ns), name).map(|o| rv(&o));
        ensure!(cached == version.resource_version(), "cached at {cached:?}");
        Ok(())
    })
    .await
}

/// The echo of the host's own write arriving before the write's answer (issue 42): held
/// until the answer, then marked as the echo; a change someone else made in that window is
/// still a change. Events go out under the store's lock with the cache update, so once the
/// cache shows a version, an event for it would already be in the subscription.
#[tokio::test]
async fn an_echo_that_beats_the_writes_answer_is_an_echo_and_a_change_in_that_window_is_not()
-> Result<()> {
    use futures::FutureExt as _;
    let (client, ns) = setup("inf-echo").await?;
    let informers = Informers::new(client.clone());
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;
    let mut sub = informer.subscribe();
    create_cm(&client, &ns, "own", &[]).await?;
    next_event(&mut sub).await?;

    // The host's write is out; the watch delivers its version before the answer is handed
    // over, then someone else's change.
    let own = informer.expect_write(Some(&ns), "own");
    let written = set_data(&client, &ns, "own", "the host's").await?;
    cached_at(&informer, &ns, "own", &written).await?;
    let theirs = set_data(&client, &ns, "own", "someone else's").await?;
    cached_at(&informer, &ns, "own", &theirs).await?;
    ensure!(
        sub.next().now_or_never().is_none(),
        "an event reached subscribers before the write's answer"
    );
    own.answered(to_dynamic(&written)?);
    let events = next_events(&mut sub, 2).await?;
    let seen: Vec<(String, bool)> = events
        .iter()
        .map(|e| match e {
            InformerEvent::Applied { object, echo, .. } => Ok((rv(object), *echo)),
            other => Err(anyhow!("expected Applied, got {}", show(other))),
        })
        .collect::<Result<_>>()?;
    let version = |cm: &ConfigMap| cm.resource_version().unwrap_or_default();
    ensure!(
        seen == [(version(&written), true), (version(&theirs), false)],
        "expected the write's echo, then the other change as a change; got {seen:?}"
    );

    // A write that fails (its guard dropped without an answer) lets what it held go as changes.
    let failed = informer.expect_write(Some(&ns), "own");
    let later = set_data(&client, &ns, "own", "later").await?;
    cached_at(&informer, &ns, "own", &later).await?;
    ensure!(sub.next().now_or_never().is_none(), "held");
    drop(failed);
    match next_event(&mut sub).await? {
        InformerEvent::Applied {
            object,
            echo: false,
            ..
        } if rv(&object) == version(&later) => Ok(()),
        other => Err(anyhow!("expected the later change, got {}", show(&other))),
    }
}

#[tokio::test]
async fn unknown_kinds_and_impossible_scopes_are_clear_errors() -> Result<()> {
    let (client, ns) = setup("inf-errors").await?;
    let informers = Informers::new(client);

    let cases = [
        (
            GroupVersionKind::gvk("no-such-group.example.com", "v1", "Gadget"),
            ["no-such-group.example.com", "v1", "Gadget"],
        ),
        (
            GroupVersionKind::gvk("", "v1", "NoSuchKind"),
            ["\"\"", "v1", "NoSuchKind"],
        ),
        (
            GroupVersionKind::gvk("apps", "v9", "Deployment"),
            ["apps", "v9", "Deployment"],
        ),
    ];
    for (gvk, parts) in cases {
        let err = informers
            .acquire(&gvk, WatchScope::all())
            .await
            .expect_err("unknown kind");
        ensure!(
            matches!(err, InformerError::UnknownKind { .. }),
            "{gvk:?}: {err:?}"
        );
        let text = err.to_string();
        ensure!(
            parts.iter().all(|p| text.contains(p)) && text.contains("CRD"),
            "{text}"
        );
    }

    let namespaces = GroupVersionKind::gvk("", "v1", "Namespace");
    let err = informers
        .acquire(&namespaces, in_namespace(&ns))
        .await
        .expect_err("cluster-scoped");
    ensure!(
        matches!(err, InformerError::ClusterScoped { .. }),
        "{err:?}"
    );

    let bad = WatchScope {
        namespace: None,
        label_selector: Some("app in web".into()),
        shard: None,
    };
    let err = informers
        .acquire(&configmaps(), bad)
        .await
        .expect_err("bad selector");
    ensure!(matches!(err, InformerError::Selector { .. }), "{err:?}");
    ensure!(format!("{err:#}").contains("expected '('"), "{err:#}");

    ensure!(informers.active().is_empty() && informers.watch_tasks() == 0);
    Ok(())
}

#[tokio::test]
async fn a_crd_installed_after_start_becomes_watchable() -> Result<()> {
    let (client, ns) = setup("inf-crd").await?;
    let informers = Informers::new(client.clone());
    let group = format!("{}.informers.reconciler-host.test", unique_name("g"));
    let gvk = GroupVersionKind::gvk(&group, "v1", "Widget");

    let err = informers
        .acquire(&gvk, WatchScope::all())
        .await
        .expect_err("no CRD yet");
    ensure!(matches!(err, InformerError::UnknownKind { .. }), "{err:?}");

    let crd: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "metadata": { "name": format!("widgets.{group}") },
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": { "plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList" },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": { "openAPIV3Schema": { "type": "object", "x-kubernetes-preserve-unknown-fields": true } },
            }],
        },
    }))?;
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await?;
    wait_crd_established(&client, &crd.name_any(), TIMEOUT).await?;

    // The earlier miss was not cached: discovery runs again and finds the new kind.
    let informer = wait_until("the new kind to resolve", TIMEOUT, || async {
        Ok(informers.acquire(&gvk, WatchScope::all()).await?)
    })
    .await?;
    ensure!(informer.namespaced() && informer.api_resource().plural == "widgets");
    synced(&informer).await?;
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let widget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": format!("{group}/v1"), "kind": "Widget",
        "metadata": { "name": "w" }, "spec": { "size": 3 },
    }))?;
    Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &resource)
        .create(&PostParams::default(), &widget)
        .await?;
    let cached = wait_until("the widget in the cache", TIMEOUT, || async {
        informer
            .get(Some(&ns), "w")
            .ok_or_else(|| anyhow!("not yet"))
    })
    .await?;
    ensure!(cached.data["spec"]["size"] == 3, "{:?}", cached.data);
    Ok(())
}

/// etcd compacted while kube-apiserver is down (a fresh watch cache, a revision etcd no longer
/// holds): the informer's resourceVersion is too old to resume from, the API server answers
/// 410 Gone and the watcher lists again. The relist returns every object with the
/// resourceVersion subscribers already saw; none of them may be announced again.
#[tokio::test]
async fn after_a_relist_unchanged_objects_are_not_announced_again() -> Result<()> {
    let plane = PrivateControlPlane::start("informers-relist").await?;
    let client = plane.client().await?;
    let ns = test_namespace(&client, "inf-relist").await?;
    for i in 0..3 {
        create_cm(&client, &ns, &format!("a{i}"), &[]).await?;
    }
    let informers = Informers::new(client.clone());
    let informer = informers.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&informer).await?;
    ensure!(informer.lists() == 1);
    let mut sub = informer.subscribe();
    next_events(&mut sub, 3).await?;

    plane
        .restart_apiserver(Restart {
            hard: false,
            pause: Duration::from_millis(500),
            compact: true,
        })
        .await?;
    wait_until(
        "the informer to relist after the restart",
        Duration::from_secs(90),
        || async {
            match informer.lists() {
                1 => Err(anyhow!(
                    "still 1 list; last error: {:?}",
                    informer.last_error()
                )),
                _ => Ok(()),
            }
        },
    )
    .await?;
    // Sorts after the others, so any re-announcement from the relist would come before it.
    let after = create_cm(&client, &ns, "z-after-restart", &[]).await?;
    let event = next_event(&mut sub).await?;
    ensure!(
        matches!(&event, InformerEvent::Applied { object, old: None, .. } if Some(rv(object)) == after.resource_version()),
        "expected only the new object, got {}",
        show(&event)
    );
    ensure!(informer.len() == 4);
    plane.stop().await
}

/// Informers on `client` whose lists start `how`, counting into `metrics`.
fn informers_listing(client: &Client, how: InitialList, metrics: &Metrics) -> Informers {
    Informers::with_options(
        client.clone(),
        Options {
            initial_list: how,
            metrics: Some(metrics.clone()),
            ..Options::default()
        },
    )
}

/// `n` ConfigMaps `c000`.. with labels, annotations and a body of a few hundred bytes.
async fn create_many(client: &Client, ns: &str, n: usize) -> Result<()> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    futures::stream::iter(0..n)
        .map(|i| {
            let api = api.clone();
            async move {
                let cm: ConfigMap = serde_json::from_value(serde_json::json!({
                    "metadata": {
                        "name": format!("c{i:03}"),
                        "labels": {"tier": if i % 2 == 0 { "web" } else { "db" }},
                        "annotations": {"note": "x".repeat(i)},
                    },
                    "data": {"k": format!("value {i}"), "filler": "y".repeat(300)},
                }))?;
                api.create(&PostParams::default(), &cm).await?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

/// Every cached object's JSON text, in the cache's order.
fn texts(informer: &Informer) -> Vec<String> {
    informer
        .list_cached(None, None)
        .iter()
        .map(|o| o.json().to_owned())
        .collect()
}

/// One series' value in a Prometheus text exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
}

fn lists_total(metrics: &Metrics, mode: &str, form: &str) -> f64 {
    let series = format!(
        r#"reconciler_informer_lists_total{{group="",version="v1",kind="ConfigMap",mode="{mode}",form="{form}"}}"#
    );
    sample(&metrics.render(), &series).unwrap_or(0.0)
}

/// Waits until both informers hold the same texts, and `done` holds for them; returns them.
async fn same_caches(
    streamed: &Informer,
    paged: &Informer,
    what: &str,
    done: impl Fn(&[String]) -> bool,
) -> Result<Vec<String>> {
    wait_until(what, TIMEOUT, || async {
        let (a, b) = (texts(streamed), texts(paged));
        ensure!(a == b, "streamed {} objects, paged {}", a.len(), b.len());
        ensure!(done(&a), "not there yet: {} objects", a.len());
        Ok(a)
    })
    .await
}

fn named(texts: &[String], name: &str) -> Option<String> {
    let needle = format!("\"name\":\"{name}\"");
    texts.iter().find(|t| t.contains(&needle)).cloned()
}

/// Kubernetes 1.36 serves streaming lists: the informer fills its cache with one, and a paged
/// list (a consistent read in pages) fills another with exactly the same text, before and after
/// changes.
#[tokio::test]
async fn a_streaming_list_is_used_where_served_and_fills_the_cache_as_pages_do() -> Result<()> {
    let (client, ns) = setup("inf-stream").await?;
    create_many(&client, &ns, 40).await?;
    let (streaming_metrics, paged_metrics) = (Metrics::new(), Metrics::new());
    let streaming = informers_listing(&client, InitialList::Stream, &streaming_metrics);
    let paged = informers_listing(&client, InitialList::Paged, &paged_metrics);
    let (a, b) = (
        streaming.acquire(&configmaps(), in_namespace(&ns)).await?,
        paged.acquire(&configmaps(), in_namespace(&ns)).await?,
    );
    synced(&a).await?;
    synced(&b).await?;
    ensure!(
        a.list_mode() == Some(InitialList::Stream),
        "streamed: {:?}",
        a.list_mode()
    );
    ensure!(
        b.list_mode() == Some(InitialList::Paged),
        "paged: {:?}",
        b.list_mode()
    );
    ensure!(
        lists_total(&streaming_metrics, "streaming", "full") == 1.0
            && lists_total(&streaming_metrics, "paged", "full") == 0.0,
        "{}",
        streaming_metrics.render()
    );
    ensure!(lists_total(&paged_metrics, "paged", "full") == 1.0);
    let listed = same_caches(&a, &b, "both lists", |t| t.len() == 40).await?;
    ensure!(
        listed.iter().all(|t| t.contains("\"filler\"")),
        "whole objects"
    );

    set_data(&client, &ns, "c007", "changed").await?;
    Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .delete("c008", &DeleteParams::default())
        .await?;
    create_cm(&client, &ns, "z-new", &[("tier", "web")]).await?;
    let watched = same_caches(&a, &b, "both watches", |t| {
        named(t, "z-new").is_some()
            && named(t, "c008").is_none()
            && named(t, "c007").is_some_and(|c| c.contains("changed"))
    })
    .await?;
    ensure!(watched.len() == 40, "{} objects", watched.len());
    Ok(())
}

/// A server with the `WatchList` feature gate off refuses `sendInitialEvents` (422): the
/// informer lists in pages instead, holds what a paged informer holds, and follows changes.
/// A metadata-only informer there falls back too, and upgrades in pages.
#[tokio::test]
async fn where_a_server_refuses_streaming_lists_the_informer_lists_in_pages() -> Result<()> {
    let plane = PrivateControlPlane::start_with_feature_gates(
        "informers-no-watchlist",
        "ShardedListAndWatch=true,WatchList=false",
    )
    .await?;
    let client = plane.client().await?;
    let ns = test_namespace(&client, "inf-nostream").await?;
    create_many(&client, &ns, 12).await?;
    let metrics = Metrics::new();
    let streaming = informers_listing(&client, InitialList::Stream, &metrics);
    let paged = informers_listing(&client, InitialList::Paged, &Metrics::new());
    let (a, b) = (
        streaming.acquire(&configmaps(), in_namespace(&ns)).await?,
        paged.acquire(&configmaps(), in_namespace(&ns)).await?,
    );
    synced(&a).await?;
    synced(&b).await?;
    ensure!(
        a.list_mode() == Some(InitialList::Paged),
        "fell back to pages: {:?}",
        a.list_mode()
    );
    ensure!(
        lists_total(&metrics, "streaming", "full") == 0.0
            && lists_total(&metrics, "paged", "full") == 1.0,
        "{}",
        metrics.render()
    );
    ensure!(a.lists() == 1, "one list, not a retry loop: {}", a.lists());
    ensure!(a.last_error().is_none(), "{:?}", a.last_error());
    same_caches(&a, &b, "both lists", |t| t.len() == 12).await?;
    set_data(&client, &ns, "c003", "after the fallback").await?;
    same_caches(&a, &b, "the change, watched after a paged list", |t| {
        named(t, "c003").is_some_and(|c| c.contains("after the fallback"))
    })
    .await?;

    let other = in_namespace(&test_namespace(&client, "inf-nostream-meta").await?);
    let other_ns = other.namespace.clone().unwrap_or_default();
    create_many(&client, &other_ns, 3).await?;
    let partial = streaming.acquire_metadata(&configmaps(), other).await?;
    synced(&partial).await?;
    ensure!(partial.metadata_only());
    let upgrade = partial
        .until_full()
        .ok_or_else(|| anyhow!("a metadata-only informer is not whole"))?;
    tokio::time::timeout(TIMEOUT, upgrade).await?;
    ensure!(partial.list_mode() == Some(InitialList::Paged));
    ensure!(
        texts(&partial).iter().all(|t| t.contains("\"filler\"")),
        "whole after the upgrade"
    );
    plane.stop().await
}

/// A metadata-only informer holds each object's metadata and no body, and its events carry
/// what mapping reads (labels, owner references). The first read makes it whole, in place:
/// the same text a full informer holds, and no metadata-only gauge any more.
#[tokio::test]
async fn a_metadata_only_informer_holds_metadata_until_a_read_makes_it_whole() -> Result<()> {
    let (client, ns) = setup("inf-meta").await?;
    create_many(&client, &ns, 10).await?;
    let metrics = Metrics::new();
    let informers = informers_listing(&client, InitialList::Stream, &metrics);
    let partial = informers
        .acquire_metadata(&configmaps(), in_namespace(&ns))
        .await?;
    synced(&partial).await?;
    ensure!(partial.metadata_only() && informers.active()[0].metadata_only);
    ensure!(partial.len() == 10);
    let head = partial
        .get_cached(Some(&ns), "c004")
        .ok_or_else(|| anyhow!("c004 not cached"))?;
    ensure!(
        !head.json().contains("\"data\"") && head.json().contains("\"tier\":\"web\""),
        "{}",
        head.json()
    );
    ensure!(
        head.json()
            .contains("\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\""),
        "{}",
        head.json()
    );
    let gauge = r#"reconciler_informer_metadata_only{group="",version="v1",kind="ConfigMap"}"#;
    ensure!(sample(&metrics.render(), gauge) == Some(1.0));
    // Sharing it wholesale does not upgrade it; a full acquire of the same scope would.
    let again = informers
        .acquire_metadata(&configmaps(), in_namespace(&ns))
        .await?;
    ensure!(again.metadata_only() && informers.active().len() == 1);

    let upgrade = partial
        .until_full()
        .ok_or_else(|| anyhow!("a metadata-only informer is not whole"))?;
    tokio::time::timeout(TIMEOUT, upgrade).await?;
    ensure!(!partial.metadata_only() && !again.metadata_only());
    ensure!(partial.until_full().is_none(), "whole from now on");
    ensure!(lists_total(&metrics, "streaming", "metadata") == 1.0);
    ensure!(lists_total(&metrics, "streaming", "full") == 1.0);
    ensure!(
        sample(&metrics.render(), gauge) == Some(0.0),
        "{}",
        metrics.render()
    );
    let full = Informers::new(client.clone());
    let whole = full.acquire(&configmaps(), in_namespace(&ns)).await?;
    synced(&whole).await?;
    ensure!(
        texts(&partial) == texts(&whole),
        "the same as a full informer's"
    );
    ensure!(informers.watch_tasks() == 1, "the metadata watch ended");
    Ok(())
}

/// What a reconcile woken by a secondary's event relies on: reading that object then returns
/// it at least as new as the event. Before the upgrade the event comes from the metadata watch
/// and the read waits for the full list (a consistent read, so newer than any event delivered
/// before it); after, events and reads share one cache, so the read at the event already has
/// the change.
#[tokio::test]
async fn a_read_after_an_event_returns_the_object_at_least_as_new_as_the_event() -> Result<()> {
    let (client, ns) = setup("inf-meta-event").await?;
    create_cm(&client, &ns, "watched", &[]).await?;
    let informers = Informers::new(client.clone());
    let partial = informers
        .acquire_metadata(&configmaps(), in_namespace(&ns))
        .await?;
    synced(&partial).await?;
    let mut sub = partial.subscribe();
    next_event(&mut sub).await?;

    let written = set_data(&client, &ns, "watched", "v2").await?;
    let (event, _) = next_update(&mut sub, "the metadata watch's update").await?;
    ensure!(Some(rv(&event)) == written.resource_version());
    ensure!(event.data.get("data").is_none(), "metadata only: {event:?}");
    // The reconcile's read: the cache is made whole first.
    let upgrade = partial
        .until_full()
        .ok_or_else(|| anyhow!("a metadata-only informer is not whole"))?;
    tokio::time::timeout(TIMEOUT, upgrade).await?;
    let read = partial
        .get(Some(&ns), "watched")
        .ok_or_else(|| anyhow!("watched not cached"))?;
    ensure!(
        read.data["data"]["k"] == "v2" && rv(&read).parse::<u64>()? >= rv(&event).parse::<u64>()?,
        "read {} at {} after an event at {}",
        read.data,
        rv(&read),
        rv(&event)
    );

    for value in ["v3", "v4", "v5"] {
        set_data(&client, &ns, "watched", value).await?;
        let (event, _) = next_update(&mut sub, "the full watch's update").await?;
        // No waiting: the event was sent once the cache held its object.
        let read = partial
            .get(Some(&ns), "watched")
            .ok_or_else(|| anyhow!("watched not cached"))?;
        ensure!(
            read.data["data"]["k"] == value && rv(&read) == rv(&event),
            "read {} at {} when woken by {}",
            read.data,
            rv(&read),
            rv(&event)
        );
    }
    Ok(())
}

const WIDGET_GRANTS: &str = r#"
guests:
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget, test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
    limits: {deadline: 10s}
"#;

/// Through the host: the widget guest watches its ConfigMaps by owner reference and reads one
/// only when a Widget's spec asks. Until then the host holds ConfigMaps as metadata and their
/// events still wake their owner; the first read makes them whole; a ConfigMap created after
/// that wakes its Widget, whose reconcile then finds it.
#[tokio::test]
async fn the_host_watches_owned_secondaries_as_metadata_until_its_guest_reads_them() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let client = plane.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "inf-meta-host").await?;
    let api = widgets(&client, &ns);
    let widget: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {},
    }))?;
    let created = api.create(&PostParams::default(), &widget).await?;
    let owned = |name: &str| -> Result<ConfigMap> {
        Ok(serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "ownerReferences": [{
                "apiVersion": "test.reconciler.dev/v1", "kind": "Widget", "name": "w",
                "uid": created.metadata.uid,
            }]},
            "data": {"k": "v"},
        }))?)
    };
    let config_maps = Api::<ConfigMap>::namespaced(client.clone(), &ns);
    config_maps
        .create(&PostParams::default(), &owned("c1")?)
        .await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: plane.kubeconfig(),
        config: WIDGET_GRANTS.into(),
        guests: vec!["widget"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let status = |key: &'static str| {
        let api = api.clone();
        async move {
            let w = api.get("w").await?;
            Ok::<_, anyhow::Error>(w.data["status"][key].clone())
        }
    };
    let reconciles = async || status("reconciles").await.map(|v| v.as_u64().unwrap_or(0));
    let gauge = r#"reconciler_informer_metadata_only{group="",version="v1",kind="ConfigMap"}"#;
    let full_lists = r#"reconciler_informer_lists_total{group="",version="v1",kind="ConfigMap",mode="streaming",form="full"}"#;
    let first = wait_until("w reconciled", TIMEOUT, || async {
        let n = reconciles().await?;
        ensure!(n >= 1, "not yet");
        Ok(n)
    })
    .await?;
    ensure!(
        host.metric(gauge).await? == 1.0,
        "ConfigMaps held as metadata"
    );
    ensure!(host.metric(full_lists).await? == 0.0);

    // A change of its ConfigMap, seen by the metadata watch, wakes w.
    config_maps
        .patch(
            "c1",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"data": {"k": "changed"}})),
        )
        .await?;
    wait_until("w woken by its ConfigMap", TIMEOUT, || async {
        ensure!(reconciles().await? > first, "not yet");
        Ok(())
    })
    .await?;
    ensure!(host.metric(gauge).await? == 1.0, "no read yet");

    // The guest reads a ConfigMap: the host makes them whole first.
    let get = serde_json::json!({"spec": {"get": {"group": "", "version": "v1", "kind": "ConfigMap", "namespace": ns, "name": "c2"}}});
    api.patch("w", &PatchParams::default(), &Patch::Merge(&get))
        .await?;
    wait_until("w read c2 (absent)", TIMEOUT, || async {
        let got = status("get").await?;
        ensure!(got == "absent", "get: {got}");
        Ok(())
    })
    .await?;
    ensure!(host.metric(gauge).await? == 0.0, "whole after the read");
    ensure!(host.metric(full_lists).await? == 1.0);

    // Created now, c2 wakes w through the whole cache, which the read in that reconcile uses.
    config_maps
        .create(&PostParams::default(), &owned("c2")?)
        .await?;
    wait_until("w woken by c2 and reading it", TIMEOUT, || async {
        let got = status("get").await?;
        ensure!(got == "found", "get: {got}");
        Ok(())
    })
    .await?;
    Ok(())
}
