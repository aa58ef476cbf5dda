//! config-reloader (`docs/examples/config-reloader.md`) end to end against a real
//! kube-apiserver, for each build of the guest: `config-reloader` (Rust,
//! `guests/config-reloader`) and `config-reloader-go` (`guests/go/config-reloader`), each deployed
//! as `config-reloader.wasm` under the grant the docs give (Deployments: `patch` only). Every
//! assertion reads the API server's objects, never the host's log.
//!
//! Deployments list ConfigMaps in `reloader.example/configmaps`; the guest keeps
//! `reloader.example/config-hash` on their Pod templates. The scenario: hashes appear on the
//! annotated Deployments only; a ConfigMap's change moves the hash of exactly the Deployments that
//! list it, promptly (a computed index, no resync); the guest's apply owns that annotation and
//! nothing else (replicas set by another manager stay); a malformed list or a missing ConfigMap
//! keeps the last hash and says so in the condition and a Warning event; the ConfigMap appearing
//! heals it; a hash annotation another manager owns is not taken (the apply is unforced) and the
//! condition names that manager and the field, until it lets go; removing the annotation
//! removes the hash and the condition.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use reconciler_host_tests::{ControlPlane, HostOptions, HostProcess, test_namespace, wait_until};
use serde_json::{Value, json};

/// The grant of `docs/examples/config-reloader.md`.
const GRANT: &str = r"
guests:
  config-reloader:
    read: [apps/v1/Deployment, v1/ConfigMap]
    write: [apps/v1/Deployment, apps/v1/Deployment/status]
    writeVerbs: {apps/v1/Deployment: [patch]}
";

const LIST: &str = "reloader.example/configmaps";
const HASH: &str = "reloader.example/config-hash";
const CONDITION: &str = "reloader.example/ConfigHashed";

/// The first hash also waits for the host to load the guest (a cold compile of the Go build).
const FIRST: Duration = Duration::from_secs(120);
/// A watched change: an event, a map call, one reconcile, one apply. Generous for a busy
/// machine; the figures are printed, not asserted.
const PROMPTLY: Duration = Duration::from_secs(15);

#[tokio::test]
async fn the_rust_config_reloader_rolls_exactly_the_deployments_a_change_concerns() -> Result<()> {
    scenario("config-reloader").await
}

#[tokio::test]
async fn the_go_config_reloader_rolls_exactly_the_deployments_a_change_concerns() -> Result<()> {
    scenario("config-reloader-go").await
}

struct Arena {
    deployments: Api<Deployment>,
    config_maps: Api<ConfigMap>,
    events: Api<Event>,
    host: HostProcess,
}

/// What the test reads of one Deployment: its hash, its condition, its replicas.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    hash: Option<String>,
    condition: Option<(String, String)>,
    replicas: Option<i64>,
}

impl Arena {
    async fn seen(&self, name: &str) -> Result<Seen> {
        let d = serde_json::to_value(self.deployments.get(name).await?)?;
        let hash = d["spec"]["template"]["metadata"]["annotations"][HASH]
            .as_str()
            .map(str::to_owned);
        let condition = d["status"]["conditions"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["type"] == CONDITION))
            .map(|c| {
                let text = |field: &str| c[field].as_str().unwrap_or_default().to_owned();
                (text("status"), text("reason"))
            });
        Ok(Seen {
            hash,
            condition,
            replicas: d["spec"]["replicas"].as_i64(),
        })
    }

    /// Waits until `check` holds for Deployment `name`; what was seen.
    async fn wait(
        &self,
        what: &str,
        name: &str,
        within: Duration,
        check: impl Fn(&Seen) -> bool,
    ) -> Result<Seen> {
        let started = std::time::Instant::now();
        let seen = wait_until(what, within, || async {
            let seen = self.seen(name).await?;
            ensure!(check(&seen), "{name}: {seen:?}");
            Ok(seen)
        })
        .await
        .map_err(|e| e.context(self.host.log_tail()))?;
        eprintln!("{what}: {:?}", started.elapsed());
        Ok(seen)
    }

    async fn set_data(&self, name: &str, value: &str) -> Result<()> {
        self.config_maps
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"k": value}})),
            )
            .await?;
        Ok(())
    }

    async fn set_list(&self, name: &str, list: Option<&str>) -> Result<()> {
        self.deployments
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {LIST: list}}})),
            )
            .await?;
        Ok(())
    }
}

fn hashed(seen: &Seen) -> bool {
    seen.hash.is_some() && seen.condition == Some(("True".into(), "Hashed".into()))
}

fn deployment(name: &str, list: Option<&str>) -> Result<Deployment> {
    let annotations: BTreeMap<&str, &str> = list.map(|l| (LIST, l)).into_iter().collect();
    Ok(serde_json::from_value(json!({
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "app", "image": "example.invalid/app:1"}]},
            },
        },
    }))?)
}

async fn scenario(guest: &str) -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let ns = test_namespace(&client, "reloader").await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: GRANT.to_owned(),
        guests: vec![guest],
        namespace: Some(&ns),
        extra_args: Vec::new(),
    })
    .await?;
    let arena = Arena {
        deployments: Api::namespaced(client.clone(), &ns),
        config_maps: Api::namespaced(client.clone(), &ns),
        events: Api::namespaced(client.clone(), &ns),
        host,
    };
    for (name, value) in [("a", "1"), ("b", "2")] {
        let config_map: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": name}, "data": {"k": value},
        }))?;
        arena
            .config_maps
            .create(&PostParams::default(), &config_map)
            .await?;
    }
    for (name, list) in [("d-ab", Some("a, b")), ("d-b", Some("b")), ("d-none", None)] {
        arena
            .deployments
            .create(&PostParams::default(), &deployment(name, list)?)
            .await
            .with_context(|| format!("creating Deployment {name}"))?;
    }

    // Hashes on the annotated Deployments; none on the other.
    let ab = arena
        .wait("the first hash of d-ab", "d-ab", FIRST, hashed)
        .await?;
    let b = arena
        .wait("the first hash of d-b", "d-b", PROMPTLY, hashed)
        .await?;
    ensure!(ab.hash != b.hash, "d-ab and d-b list other ConfigMaps");
    let none = arena.seen("d-none").await?;
    ensure!(
        none.hash.is_none() && none.condition.is_none(),
        "d-none lists nothing, yet: {none:?}"
    );

    // Another manager scales d-ab: the guest's next apply must leave replicas alone.
    arena
        .deployments
        .patch(
            "d-ab",
            &PatchParams::apply("someone-else").force(),
            &Patch::Apply(json!({
                "apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d-ab"}, "spec": {"replicas": 3},
            })),
        )
        .await?;

    // b changes: both Deployments listing it roll.
    arena.set_data("b", "2'").await?;
    let ab2 = arena
        .wait("d-ab to follow b", "d-ab", PROMPTLY, |s| {
            hashed(s) && s.hash != ab.hash
        })
        .await?;
    let b2 = arena
        .wait("d-b to follow b", "d-b", PROMPTLY, |s| {
            hashed(s) && s.hash != b.hash
        })
        .await?;
    ensure!(ab2.replicas == Some(3), "d-ab's replicas taken: {ab2:?}");
    let owned = managed_by(&arena.deployments.get("d-ab").await?, "config-reloader");
    ensure!(
        owned.contains(HASH) && !owned.contains("f:replicas") && !owned.contains("f:containers"),
        "the guest owns more than its annotation: {owned}"
    );

    // a changes: only d-ab rolls.
    arena.set_data("a", "1'").await?;
    let ab3 = arena
        .wait("d-ab to follow a", "d-ab", PROMPTLY, |s| s.hash != ab2.hash)
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure!(
        arena.seen("d-b").await?.hash == b2.hash,
        "d-b rolled for a ConfigMap it does not list"
    );

    // A malformed list: the last hash kept, the condition and an event say why.
    arena.set_list("d-b", Some("b,,")).await?;
    let malformed = arena
        .wait("d-b's malformed list to show", "d-b", PROMPTLY, |s| {
            s.condition == Some(("False".into(), "InvalidAnnotation".into()))
        })
        .await?;
    ensure!(malformed.hash == b2.hash, "the hash moved: {malformed:?}");
    wait_until(
        "a Warning event InvalidAnnotation about d-b",
        PROMPTLY,
        || async {
            let events = arena.events.list(&ListParams::default()).await?;
            ensure!(
                events.items.iter().any(|e| {
                    e.reason.as_deref() == Some("InvalidAnnotation")
                        && e.type_.as_deref() == Some("Warning")
                        && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("d-b")
                }),
                "no such event among {}",
                events.items.len()
            );
            Ok(())
        },
    )
    .await?;
    arena.set_data("b", "2''").await?;
    arena
        .wait("d-ab to follow b again", "d-ab", PROMPTLY, |s| {
            s.hash != ab3.hash
        })
        .await?;
    ensure!(
        arena.seen("d-b").await?.hash == b2.hash,
        "a malformed list rolled d-b"
    );

    // A ConfigMap that does not exist yet: kept and said; its creation heals it.
    arena.set_list("d-b", Some("b,late")).await?;
    arena
        .wait("d-b's missing ConfigMap to show", "d-b", PROMPTLY, |s| {
            s.condition == Some(("False".into(), "ConfigMapNotFound".into())) && s.hash == b2.hash
        })
        .await?;
    let late: ConfigMap =
        serde_json::from_value(json!({"metadata": {"name": "late"}, "data": {"k": "x"}}))?;
    arena
        .config_maps
        .create(&PostParams::default(), &late)
        .await?;
    arena
        .wait("d-b to hash b and late", "d-b", PROMPTLY, |s| {
            hashed(s) && s.hash != b2.hash
        })
        .await?;

    // Another manager owns the hash annotation itself: the guest's unforced apply does not take
    // it, and the condition says whose it is; once that manager lets go, the guest sets it.
    let taken = |hash: Option<&str>| {
        let mut d = serde_json::to_value(deployment("d-taken", Some("a")).expect("a Deployment"))
            .expect("JSON");
        d["apiVersion"] = json!("apps/v1");
        d["kind"] = json!("Deployment");
        if let Some(hash) = hash {
            d["spec"]["template"]["metadata"]["annotations"] = json!({HASH: hash});
        }
        d
    };
    let someone_else = PatchParams::apply("someone-else").force();
    arena
        .deployments
        .patch("d-taken", &someone_else, &Patch::Apply(taken(Some("mine"))))
        .await?;
    arena
        .wait("d-taken's conflict to show", "d-taken", PROMPTLY, |s| {
            s.condition == Some(("False".into(), "HashConflict".into()))
        })
        .await?;
    let conflict = serde_json::to_value(arena.deployments.get("d-taken").await?)?;
    let message = conflict["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == CONDITION))
        .map(|c| c["message"].to_string())
        .unwrap_or_default();
    ensure!(
        message.contains("someone-else") && message.contains(HASH),
        "the conflict does not name the manager and the field: {message}"
    );
    ensure!(
        arena.seen("d-taken").await?.hash.as_deref() == Some("mine"),
        "the guest took the annotation"
    );
    arena
        .deployments
        .patch("d-taken", &someone_else, &Patch::Apply(taken(None)))
        .await?;
    arena
        .wait(
            "d-taken to be hashed once free",
            "d-taken",
            PROMPTLY * 4,
            hashed,
        )
        .await?;

    // The annotation removed: the hash and the condition go.
    arena.set_list("d-b", None).await?;
    arena
        .wait("d-b's hash and condition to go", "d-b", PROMPTLY, |s| {
            s.hash.is_none() && s.condition.is_none()
        })
        .await?;
    Ok(())
}

/// The fields `manager` owns in `deployment`, as the API server records them (fieldsV1).
fn managed_by(deployment: &Deployment, manager: &str) -> String {
    let entries = deployment
        .metadata
        .managed_fields
        .clone()
        .unwrap_or_default();
    entries
        .iter()
        .filter(|e| e.manager.as_deref() == Some(manager))
        .filter_map(|e| e.fields_v1.as_ref().map(|f| f.0.clone()))
        .map(|v: Value| v.to_string())
        .collect::<Vec<_>>()
        .join(" ")
}
