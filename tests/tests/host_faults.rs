//! The host across failures: an apiserver restart and an etcd restart in the middle of a run,
//! a host killed and restarted, leader failover between two host processes (the standby
//! warm: its caches synced before it leads), and an API server that sheds load with 429 and
//! `Retry-After` (a proxy in front of it refuses one kind's lists and watches for a while). Each
//! test that restarts something has a private control plane, so its restarts disturb no other
//! test; one more starts the host on an address in use.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use reconciler_host_tests::api_proxy::{ApiProxy, Logged, Requests, Shed, gaps};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, PrivateControlPlane, Restart, apply_crd_file,
    test_namespace, wait_until, widgets,
};
use serde_json::json;
use tokio::time::Instant;

fn grants() -> String {
    std::fs::read_to_string(
        reconciler_host_tests::repo_root().join("guests/testing/widget/host.yaml"),
    )
    .expect("guests/testing/widget/host.yaml")
}

/// Creates a widget, retrying while the control plane is coming back.
async fn create(api: &Api<DynamicObject>, name: &str) -> Result<()> {
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name}, "spec": {"message": name},
    }))?;
    wait_until(
        &format!("create {name}"),
        Duration::from_secs(60),
        || async {
            match api.create(&PostParams::default(), &object).await {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
                Err(e) => Err(e.into()),
            }
        },
    )
    .await
}

/// Every named widget has status.message == its name (reconciled at its current spec).
async fn all_converged(
    api: &Api<DynamicObject>,
    names: &[String],
    host: &HostProcess,
) -> Result<()> {
    wait_until(
        &format!("{} widgets converged", names.len()),
        Duration::from_secs(120),
        || async {
            let mut missing = Vec::new();
            for name in names {
                let ok = api
                    .get(name)
                    .await
                    .ok()
                    .and_then(|o| o.data.get("status").cloned())
                    .is_some_and(|s| {
                        s["message"] == name.as_str() && s["reconciles"].as_u64() >= Some(1)
                    });
                if !ok {
                    missing.push(name.clone());
                }
            }
            anyhow::ensure!(missing.is_empty(), "not converged: {missing:?}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}

#[tokio::test]
async fn nothing_is_lost_across_apiserver_and_etcd_restarts() -> Result<()> {
    let cp = PrivateControlPlane::start("host-restarts").await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "restarts").await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(),
        guests: vec!["widget"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let api = widgets(&client, &ns);
    let mut names = Vec::new();
    for i in 0..5 {
        names.push(format!("before-{i}"));
        create(&api, &names[names.len() - 1]).await?;
    }
    let restart = cp.restart_apiserver(Restart::default());
    let during = async {
        for i in 0..5 {
            let name = format!("during-apiserver-{i}");
            create(&api, &name).await?;
        }
        anyhow::Ok(())
    };
    let (restarted, created) = tokio::join!(restart, during);
    restarted?;
    created?;
    names.extend((0..5).map(|i| format!("during-apiserver-{i}")));
    cp.restart_etcd(Restart::default()).await?;
    for i in 0..5 {
        names.push(format!("after-{i}"));
        create(&api, &names[names.len() - 1]).await?;
    }
    all_converged(&api, &names, &host).await?;
    Ok(())
}

#[tokio::test]
async fn a_killed_host_restarted_converges_everything() -> Result<()> {
    let cp = PrivateControlPlane::start("host-kill").await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "kill").await?;
    let options = || HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(),
        guests: vec!["widget"],
        namespace: Some(&ns),
        extra_args: vec![],
    };
    let mut host = HostProcess::start(options()).await?;
    let api = widgets(&client, &ns);
    let names: Vec<String> = (0..10).map(|i| format!("w{i}")).collect();
    for name in &names[..5] {
        create(&api, name).await?;
    }
    host.kill()?;
    for name in &names[5..] {
        create(&api, name).await?;
    }
    let host = HostProcess::start(options()).await?;
    all_converged(&api, &names, &host).await?;
    Ok(())
}

#[tokio::test]
async fn leadership_fails_over_when_the_leader_dies() -> Result<()> {
    let cp = PrivateControlPlane::start("host-leader").await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "leader").await?;
    let options = |identity: &str| HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: grants(),
        guests: vec!["widget"],
        namespace: Some(&ns),
        extra_args: [
            "--leader-elect",
            "--lease-namespace",
            &ns,
            "--lease-duration",
            "4s",
            "--identity",
            identity,
        ]
        .map(String::from)
        .to_vec(),
    };
    let mut a = HostProcess::start(options("host-a")).await?;
    wait_until("host-a leads", Duration::from_secs(30), || async {
        anyhow::ensure!(a.metric("reconciler_leader").await? == 1.0, "not yet");
        Ok(())
    })
    .await?;
    let b = HostProcess::start(options("host-b")).await?;
    let api = widgets(&client, &ns);
    create(&api, "first").await?;
    all_converged(&api, &["first".into()], &a).await?;
    assert_eq!(
        b.metric("reconciler_leader").await?,
        0.0,
        "the standby does not lead"
    );
    assert_eq!(
        b.metric("reconciler_reconcile_total{guest=\"widget\",result=\"success\"}")
            .await?,
        0.0,
        "the standby does not reconcile"
    );
    // A warm standby (the default) serves reads before it leads: its caches synced (`/readyz`)
    // and holding what the leader reconciled.
    wait_until(
        "the standby's cache holds the widget",
        Duration::from_secs(30),
        || async {
            b.get("/readyz").await?;
            let cached = b
                .metric("reconciler_informer_objects{group=\"test.reconciler.dev\",version=\"v1\",kind=\"Widget\"}")
                .await?;
            anyhow::ensure!(cached == 1.0, "{cached} widgets cached");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(b.log_tail()))?;
    assert_eq!(
        b.metric("reconciler_leader").await?,
        0.0,
        "still standing by"
    );

    a.kill()?;
    create(&api, "second").await?;
    wait_until("host-b takes over", Duration::from_secs(30), || async {
        anyhow::ensure!(b.metric("reconciler_leader").await? == 1.0, "not yet");
        Ok(())
    })
    .await
    .map_err(|e| e.context(b.log_tail()))?;
    all_converged(&api, &["first".into(), "second".into()], &b).await?;

    // A graceful stop releases the lease at once.
    let mut b = b;
    let status = b.terminate().await?;
    assert!(
        status.success(),
        "SIGTERM exits cleanly: {status}\n{}",
        b.log_tail()
    );
    assert!(b.log().contains("lease released"), "{}", b.log_tail());
    Ok(())
}

/// `--listen` on an address another process holds: the host ends at start, exit code 1, with
/// the address in its error, and no panic (it used to panic on the way out, after it had
/// started its watchers).
#[tokio::test]
async fn an_address_in_use_ends_the_host_at_start_with_a_clear_error() -> Result<()> {
    let cp = reconciler_host_tests::ControlPlane::shared().await?;
    let holder = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = holder.local_addr()?.port();
    let dir = tempfile::tempdir()?;
    let config = dir.path().join("host.yaml");
    std::fs::write(&config, grants())?;
    let guests = dir.path().join("guests");
    std::fs::create_dir(&guests)?;
    std::fs::copy(
        reconciler_host_tests::guest_component("widget")?,
        guests.join("widget.wasm"),
    )?;
    let output = reconciler_host_tests::host::run_command(
        reconciler_host_tests::Profile::Debug,
        &config,
        &guests,
        port,
        cp.kubeconfig(),
    )
    .output()?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    anyhow::ensure!(
        output.status.code() == Some(1),
        "{:?}: {stderr}",
        output.status
    );
    anyhow::ensure!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{stderr}"
    );
    anyhow::ensure!(!stderr.contains("panicked"), "{stderr}");
    Ok(())
}

/// What the proxy asks the host to wait, in seconds: the API server's own first answer while a
/// watch cache initialises (`calculateRetryAfterForUnreadyCache` starts at 1 s).
const RETRY_AFTER: u64 = 1;
/// How long the proxy sheds: long enough that a backoff growing on its own (kube's client retry
/// reaches seconds after eight attempts) would show between the attempts.
const SHEDDING: Duration = Duration::from_secs(20);

/// The latest an attempt may come after the refusal before it: `Retry-After` with the host's
/// jitter (at most a fifth more), and a second for a busy machine.
fn latest_retry() -> Duration {
    Duration::from_secs(RETRY_AFTER).mul_f64(1.2) + Duration::from_secs(1)
}

/// The namespace's widgets, as the informer lists and watches them.
fn widgets_path(ns: &str) -> String {
    format!("/apis/test.reconciler.dev/v1/namespaces/{ns}/widgets")
}

const THROTTLED: &str = r#"reconciler_informer_throttled_total{group="test.reconciler.dev",version="v1",kind="Widget"}"#;

/// A widget host watching `ns`, reaching the API server through `proxy`, listing its caches
/// `initial_list` (`stream` or `paged`).
async fn host_behind(proxy: &ApiProxy, ns: &str, initial_list: &str) -> Result<HostProcess> {
    let kubeconfig = proxy.kubeconfig();
    HostProcess::start_with_env(
        HostOptions {
            kubeconfig: &kubeconfig,
            config: grants(),
            guests: vec!["widget"],
            namespace: Some(ns),
            extra_args: vec![],
        },
        &[("RECONCILER_INITIAL_LIST", initial_list)],
    )
    .await
}

/// From the proxy's log of one collection: every request it refused came at least
/// `Retry-After` after the refusal before it, and not much later (the host waits what the
/// server asks, not a backoff of its own that keeps growing); there were no more than one per
/// `Retry-After` in the window (no hot loop) and at least three (the host kept trying); and the
/// first request after the shedding stopped came within one more `Retry-After` and was served.
/// Returns that request.
fn obeyed(requests: &[Logged], stopped: Instant) -> Result<Logged> {
    let refused: Vec<Logged> = requests.iter().filter(|r| r.shed).cloned().collect();
    let retry_after = Duration::from_secs(RETRY_AFTER);
    let timeline = || {
        let first = requests.first().map_or(stopped, |r| r.at);
        requests
            .iter()
            .map(|r| {
                format!(
                    "+{:.3}s {} watch={} rv={:?} -> {}",
                    (r.at - first).as_secs_f64(),
                    r.method,
                    r.watch,
                    r.param("resourceVersion"),
                    r.status
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let most = SHEDDING.as_secs() / RETRY_AFTER + 1;
    ensure!(
        (3..=usize::try_from(most)?).contains(&refused.len()),
        "{} refused requests in {SHEDDING:?} with Retry-After {retry_after:?} (expected 3 to \
         {most}):\n{}",
        refused.len(),
        timeline()
    );
    for (i, gap) in gaps(&refused).into_iter().enumerate() {
        ensure!(
            gap + Duration::from_millis(20) >= retry_after && gap <= latest_retry(),
            "refused attempt {} came {gap:?} after the one before; Retry-After was \
             {retry_after:?}:\n{}",
            i + 2,
            timeline()
        );
    }
    let resumed = requests
        .iter()
        .find(|r| r.at >= stopped)
        .cloned()
        .with_context(|| format!("no request after the shedding stopped:\n{}", timeline()))?;
    ensure!(
        resumed.at - stopped <= latest_retry() && resumed.status == 200,
        "the first request after the shedding stopped came {:?} later and got {}:\n{}",
        resumed.at - stopped,
        resumed.status,
        timeline()
    );
    Ok(resumed)
}

/// The widget's status says the guest reconciled it at `message`.
async fn reconciled_at(
    api: &Api<DynamicObject>,
    name: &str,
    message: &str,
    host: &HostProcess,
) -> Result<()> {
    wait_until(
        &format!("widget {name} reconciled at {message:?}"),
        Duration::from_secs(60),
        || async {
            let status = api.get(name).await?.data["status"].clone();
            ensure!(status["message"] == message, "status {status}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}

/// The first list of a kind under a shedding API server: held back for `Retry-After` each time,
/// said in `/readyz` and counted, and caught up once the server serves again (a widget created
/// meanwhile is reconciled).
async fn first_list_waits_out_the_shedding(initial_list: &str) -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, &format!("shed-list-{initial_list}")).await?;
    let path = widgets_path(&ns);
    let proxy = ApiProxy::start(cp).await?;
    proxy.shed(Shed {
        path: path.clone(),
        requests: Requests::Both,
        retry_after: RETRY_AFTER,
    });
    let began = Instant::now();
    let host = host_behind(&proxy, &ns, initial_list).await?;
    let api = widgets(&client, &ns);
    create(&api, "during").await?;
    let (code, why) = wait_until(
        "/readyz to say the API server holds the widgets back",
        SHEDDING.saturating_sub(began.elapsed()),
        || async {
            let (code, body) = host.get_any("/readyz").await?;
            ensure!(body.contains("Retry-After"), "{code} {body}");
            Ok((code, body))
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    ensure!(code == 503, "/readyz answered {code} {why}");
    tokio::time::sleep_until(began + SHEDDING).await;
    let stopped = proxy.stop_shedding();
    reconciled_at(&api, "during", "during", &host).await?;
    let requests = proxy.requests_to(&path);
    obeyed(&requests, stopped).map_err(|e| e.context(host.log_tail()))?;
    let throttled = host.metric(THROTTLED).await?;
    ensure!(
        throttled >= 3.0,
        "{THROTTLED} is {throttled}; the proxy refused {}",
        requests.iter().filter(|r| r.shed).count()
    );
    assert_eq!(host.get("/readyz").await?, "ok");
    Ok(())
}

#[tokio::test]
async fn a_streaming_first_list_waits_out_retry_after_and_catches_up() -> Result<()> {
    first_list_waits_out_the_shedding("stream").await
}

#[tokio::test]
async fn a_paged_first_list_waits_out_retry_after_and_catches_up() -> Result<()> {
    first_list_waits_out_the_shedding("paged").await
}

/// A watch that ends while the API server sheds watches: the host reconnects no faster than
/// `Retry-After` asks, from the version it had (no list, no streaming list), and what changed
/// meanwhile is reconciled once the server serves again.
#[tokio::test]
async fn a_watch_reconnect_waits_out_retry_after_and_resumes_from_its_version() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "shed-watch").await?;
    let path = widgets_path(&ns);
    let proxy = ApiProxy::start(cp).await?;
    let host = host_behind(&proxy, &ns, "stream").await?;
    let api = widgets(&client, &ns);
    create(&api, "first").await?;
    reconciled_at(&api, "first", "first", &host).await?;

    proxy.shed(Shed {
        path: path.clone(),
        requests: Requests::Watches,
        retry_after: RETRY_AFTER,
    });
    let began = Instant::now();
    proxy.cut_watches();
    api.patch(
        "first",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"message": "changed"}})),
    )
    .await?;
    create(&api, "second").await?;
    tokio::time::sleep_until(began + SHEDDING).await;
    let stopped = proxy.stop_shedding();
    reconciled_at(&api, "first", "changed", &host).await?;
    reconciled_at(&api, "second", "second", &host).await?;

    let since: Vec<Logged> = proxy
        .requests_to(&path)
        .into_iter()
        .filter(|r| r.at >= began)
        .collect();
    let resumed = obeyed(&since, stopped).map_err(|e| e.context(host.log_tail()))?;
    for request in since.iter().filter(|r| r.at <= resumed.at) {
        let version = request.param("resourceVersion").unwrap_or_default();
        ensure!(
            request.watch && !request.streaming_list() && !matches!(version.as_str(), "" | "0"),
            "the host listed again instead of resuming its watch: {request:?}"
        );
    }
    let throttled = host.metric(THROTTLED).await?;
    ensure!(throttled >= 3.0, "{THROTTLED} is {throttled}");
    Ok(())
}
