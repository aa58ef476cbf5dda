//! The host across failures: an apiserver restart and an etcd restart in the middle of a run,
//! a host killed and restarted, and leader failover between two host processes (the standby
//! warm: its caches synced before it leads). Each test that restarts something has a private
//! control plane, so its restarts disturb no other test; one more starts the host on an address
//! in use.

use std::time::Duration;

use anyhow::Result;
use kube::api::{Api, DynamicObject, PostParams};
use reconciler_host_tests::{
    HostOptions, HostProcess, PrivateControlPlane, Restart, apply_crd_file, test_namespace,
    wait_until, widgets,
};
use serde_json::json;

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
