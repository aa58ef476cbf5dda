//! The local control plane behaves like a real cluster where the host depends on it: CRDs
//! establish and serve custom objects, CEL validation rejects bad Networks, watches deliver
//! changes, and a watch survives kube-apiserver and etcd restarts without losing a change.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, discovery};
use reconciler_host_tests::{
    ControlPlane, FIELD_MANAGER, PrivateControlPlane, Restart, Seen, WatchRecorder, apply_crd_file,
    apply_file, test_namespace,
};
use serde_json::json;

const NETWORK_CRD: &str = "examples/crds/network.yaml";
const WATCH_TIMEOUT: Duration = Duration::from_secs(30);

async fn network_api(
    client: &Client,
    namespace: &str,
) -> Result<(Api<DynamicObject>, ApiResource)> {
    let gvk = GroupVersionKind::gvk("samplecrd.k8s.io", "v1", "Network");
    let (resource, _caps) = discovery::pinned_kind(client, &gvk)
        .await
        .context("discovering samplecrd.k8s.io/v1 Network")?;
    Ok((
        Api::namespaced_with(client.clone(), namespace, &resource),
        resource,
    ))
}

fn network(resource: &ApiResource, name: &str, cidr: &str, gateway: &str) -> Result<DynamicObject> {
    Ok(DynamicObject::new(name, resource).data(json!({
        "spec": { "cidr": cidr, "gateway": gateway }
    })))
}

fn spec_field<'a>(object: &'a DynamicObject, field: &str) -> Option<&'a str> {
    object.data.get("spec")?.get(field)?.as_str()
}

fn watch_networks(api: &Api<DynamicObject>) -> WatchRecorder<DynamicObject> {
    WatchRecorder::start(watcher(api.clone(), watcher::Config::default()).default_backoff())
}

#[tokio::test]
async fn network_crd_serves_objects_that_arrive_through_a_watch() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    let crds = apply_crd_file(&client, NETWORK_CRD).await?;
    let names = &crds[0].spec.names;
    ensure!(
        names.plural == "networks" && names.short_names.as_deref() == Some(&["net".to_owned()][..]),
        "unexpected CRD names: {names:?}"
    );
    let ns = test_namespace(&client, "crd-watch").await?;
    let (api, resource) = network_api(&client, &ns).await?;

    let mut watch = watch_networks(&api);
    watch
        .wait_for("the initial (empty) list", WATCH_TIMEOUT, |s| {
            matches!(s, Seen::ListDone)
        })
        .await?;

    api.create(
        &PostParams::default(),
        &network(&resource, "frontend", "10.100.1.0/24", "10.100.1.1")?,
    )
    .await
    .context("creating Network frontend")?;
    let seen = watch
        .wait_for("Network frontend to be added", WATCH_TIMEOUT, |s| {
            s.present("frontend").is_some()
        })
        .await?;
    let object = seen.object().context("an added event carries the object")?;
    assert_eq!(spec_field(object, "cidr"), Some("10.100.1.0/24"));
    assert_eq!(spec_field(object, "gateway"), Some("10.100.1.1"));

    // What a controller writes: status through the subresource, in metav1.Condition shape.
    let status = json!({
        "apiVersion": "samplecrd.k8s.io/v1",
        "kind": "Network",
        "status": {
            "observedGeneration": 1,
            "interfaceName": "br-frontend",
            "actualCidr": "10.100.1.0/24",
            "actualGateway": "10.100.1.1",
            "conditions": [{
                "type": "Ready",
                "status": "True",
                "reason": "Configured",
                "message": "bridge br-frontend carries 10.100.1.1/24",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": 1
            }]
        }
    });
    api.patch_status(
        "frontend",
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&status),
    )
    .await
    .context("writing Network frontend's status")?;
    watch
        .wait_for(
            "frontend's status to show interface br-frontend",
            WATCH_TIMEOUT,
            |s| {
                s.present("frontend")
                    .and_then(|o| o.data.pointer("/status/interfaceName"))
                    .is_some_and(|i| i == "br-frontend")
            },
        )
        .await?;

    // The printer columns, as kubectl shows them (server-side printing).
    let plane = ControlPlane::shared().await?;
    let out = plane.kubectl()?.args(["get", "net", "-n", &ns]).output()?;
    ensure!(
        out.status.success(),
        "kubectl get net failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let mut lines = table.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "CIDR", "GATEWAY", "READY", "INTERFACE", "AGE"],
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert!(row.len() == 6, "expected one row with 6 columns:\n{table}");
    assert_eq!(
        row[..5],
        [
            "frontend",
            "10.100.1.0/24",
            "10.100.1.1",
            "True",
            "br-frontend"
        ],
        "{table}"
    );

    api.delete("frontend", &Default::default()).await?;
    watch
        .wait_for(
            "Network frontend to be deleted",
            WATCH_TIMEOUT,
            |s| matches!(s, Seen::Deleted(o) if o.metadata.name.as_deref() == Some("frontend")),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn cel_rules_reject_invalid_networks_with_the_matching_message() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    apply_crd_file(&client, NETWORK_CRD).await?;
    let ns = test_namespace(&client, "crd-cel").await?;
    let (api, resource) = network_api(&client, &ns).await?;

    // (name, cidr, gateway, message expected, message that must not appear)
    let cases = [
        (
            "outside",
            "10.100.1.0/24",
            "10.100.2.1",
            "spec.gateway must be an address inside spec.cidr",
            "must be a CIDR",
        ),
        (
            "bad-cidr",
            "10.100.1.0/33",
            "10.100.1.1",
            "spec.cidr must be a CIDR",
            "inside spec.cidr",
        ),
        (
            "bad-gateway",
            "10.100.1.0/24",
            "10.100.1.x",
            "spec.gateway must be an IP address",
            "inside spec.cidr",
        ),
        (
            "host-bits",
            "10.100.1.5/24",
            "10.100.1.1",
            "spec.cidr must name the network address",
            "inside spec.cidr",
        ),
        (
            "mixed-family",
            "10.100.1.0/24",
            "fd00::1",
            "spec.gateway must be an address inside spec.cidr",
            "must be a CIDR",
        ),
    ];
    for (name, cidr, gateway, expected, unexpected) in cases {
        match api
            .create(
                &PostParams::default(),
                &network(&resource, name, cidr, gateway)?,
            )
            .await
        {
            Ok(_) => bail!("Network {name} (cidr {cidr}, gateway {gateway}) was accepted"),
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422, "{name}: {status:?}");
                assert!(
                    status.message.contains(expected) && !status.message.contains(unexpected),
                    "{name}: expected a message with {expected:?} and without {unexpected:?}, got {:?}",
                    status.message
                );
            }
            Err(e) => bail!("creating Network {name} failed in an unexpected way: {e}"),
        }
    }

    // The rules accept what they should (so the rejections above are not blanket ones).
    api.create(
        &PostParams::default(),
        &network(&resource, "ok-v4", "10.100.9.0/24", "10.100.9.254")?,
    )
    .await
    .context("a valid IPv4 Network was rejected")?;
    api.create(
        &PostParams::default(),
        &network(&resource, "ok-v6", "fd00:9::/64", "fd00:9::1")?,
    )
    .await
    .context("a valid IPv6 Network was rejected")?;
    let missing =
        DynamicObject::new("no-gateway", &resource).data(json!({"spec": {"cidr": "10.1.0.0/16"}}));
    match api.create(&PostParams::default(), &missing).await {
        Err(kube::Error::Api(status))
            if status.code == 422 && status.message.contains("gateway") => {}
        other => bail!("a Network without spec.gateway should be rejected with 422, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn the_example_networks_apply() -> Result<()> {
    let client = ControlPlane::shared().await?.client().await?;
    apply_crd_file(&client, NETWORK_CRD).await?;
    let ns = test_namespace(&client, "examples").await?;
    let applied = apply_file(&client, "examples/networks.yaml", Some(&ns)).await?;
    let names: Vec<_> = applied
        .iter()
        .filter_map(|o| o.metadata.name.as_deref())
        .collect();
    assert_eq!(names, ["frontend", "backend", "storage"]);
    Ok(())
}

/// `eval "$(cp env)"`, as the docs tell a guest author, gives a shell `KUBECONFIG` and the
/// control plane's kubectl first on `PATH`: `kubectl` then answers from this control plane in a
/// shell that had no kubectl at all.
#[tokio::test]
async fn cp_env_gives_a_bare_shell_kubectl_and_the_kubeconfig() -> Result<()> {
    let plane = ControlPlane::shared().await?;
    let dir = plane
        .dir()
        .context("the shared control plane has a directory")?;
    let cp = reconciler_host_tests::repo_root().join("tools/control-plane/cp");
    let script = format!(
        "eval \"$({} env --dir {})\" && command -v kubectl && kubectl get --raw /readyz",
        cp.display(),
        dir.display()
    );
    // Only the variables that say where the project's caches are, and a PATH of the system's.
    let mut bash = std::process::Command::new("bash");
    bash.args(["-c", &script])
        .env_clear()
        .env("PATH", "/usr/bin:/bin");
    for kept in ["HOME", "XDG_CACHE_HOME"] {
        if let Some(value) = std::env::var_os(kept) {
            bash.env(kept, value);
        }
    }
    let out = bash.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    ensure!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut lines = stdout.lines();
    let kubectl = lines.next().unwrap_or_default();
    ensure!(
        kubectl.starts_with('/') && !kubectl.starts_with("/usr/bin"),
        "kubectl from {kubectl:?}, not the control plane's"
    );
    ensure!(lines.next() == Some("ok"), "/readyz said {stdout}");
    Ok(())
}

/// A change made after a restart reaches a watch that was open before it: the watcher either
/// resumes from its resourceVersion or relists, and either way nothing is lost.
#[tokio::test]
async fn a_watch_misses_nothing_across_apiserver_and_etcd_restarts() -> Result<()> {
    let plane = PrivateControlPlane::start("watch-restarts").await?;
    let client = plane.client().await?;
    apply_crd_file(&client, NETWORK_CRD).await?;
    let ns = test_namespace(&client, "restarts").await?;
    let (api, resource) = network_api(&client, &ns).await?;
    let mut watch = watch_networks(&api);
    watch
        .wait_for("the initial list", WATCH_TIMEOUT, |s| {
            matches!(s, Seen::ListDone)
        })
        .await?;
    api.create(
        &PostParams::default(),
        &network(&resource, "before", "10.100.1.0/24", "10.100.1.1")?,
    )
    .await?;
    watch
        .wait_for("Network before", WATCH_TIMEOUT, |s| {
            s.present("before").is_some()
        })
        .await?;

    let restarts = [
        (
            "a graceful kube-apiserver restart",
            false,
            Restart::default(),
        ),
        (
            "a kube-apiserver crash with 2 s downtime",
            false,
            Restart {
                hard: true,
                pause: Duration::from_secs(2),
                compact: false,
            },
        ),
        ("a graceful etcd restart", true, Restart::default()),
        (
            "an etcd crash with 2 s downtime",
            true,
            Restart {
                hard: true,
                pause: Duration::from_secs(2),
                compact: false,
            },
        ),
    ];
    for (i, (what, etcd, how)) in restarts.into_iter().enumerate() {
        let started = std::time::Instant::now();
        if etcd {
            plane.restart_etcd(how).await?;
        } else {
            plane.restart_apiserver(how).await?;
        }
        let restarted = started.elapsed();
        // A fresh client as well: the test's own writes must not depend on old connections.
        let api = network_api(&plane.client().await?, &ns).await?.0;
        let name = format!("after-{i}");
        let third = 10 + i;
        api.create(
            &PostParams::default(),
            &network(
                &resource,
                &name,
                &format!("10.100.{third}.0/24"),
                &format!("10.100.{third}.1"),
            )?,
        )
        .await
        .with_context(|| format!("creating Network {name} after {what}"))?;
        // A change to an object that existed before the restart must arrive as well.
        let gateway = format!("10.100.1.{}", 100 + i);
        api.patch(
            "before",
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(json!({
                "apiVersion": "samplecrd.k8s.io/v1",
                "kind": "Network",
                "spec": { "cidr": "10.100.1.0/24", "gateway": gateway }
            })),
        )
        .await
        .with_context(|| format!("changing Network before after {what}"))?;
        watch
            .wait_for(
                &format!("Network {name}, created after {what}"),
                WATCH_TIMEOUT,
                |s| s.present(&name).is_some(),
            )
            .await?;
        // The newest state of `before` can arrive before or after `name`; look from the start.
        let seen_change = watch.history().iter().any(|s| {
            s.present("before")
                .is_some_and(|o| spec_field(o, "gateway") == Some(gateway.as_str()))
        });
        if !seen_change {
            watch
                .wait_for(
                    &format!("Network before's gateway {gateway}, set after {what}"),
                    WATCH_TIMEOUT,
                    |s| {
                        s.present("before")
                            .is_some_and(|o| spec_field(o, "gateway") == Some(gateway.as_str()))
                    },
                )
                .await?;
        }
        eprintln!(
            "{what}: restart took {restarted:?}, both changes seen {:?} later",
            started.elapsed() - restarted
        );
    }
    for seen in watch.history() {
        eprintln!("  {}", seen.describe());
    }
    plane.stop().await
}
