//! The ConfigMap Mirror (`examples/crds/mirror.yaml`, `docs/examples/mirror.md`) end to end
//! against a real kube-apiserver: a guest of the `watching-controller` world, whose watches
//! (field indexes over `spec.source` and `spec.targetNamespaces[*]`, owner labels on the copies)
//! must bring every change that matters to its Mirror at once, without a resync (the guest has
//! none). Every assertion reads the API server's objects, never the host's log.
//!
//! One scenario, [`copies_follow_the_source_repair_themselves_reach_new_namespaces_and_go_with_the_mirror`],
//! run against each build of the guest: `mirror-python` (`guests/python/mirror`) and `mirror-go`
//! (`guests/go/mirror`), each deployed as `mirror.wasm` under the same grant.
//!
//! The host runs without `--watch-namespace` (the copies live in other namespaces than their
//! Mirror), so it reconciles every Mirror on the shared control plane: the builds' tests take
//! turns ([`ONE_HOST_AT_A_TIME`]) rather than fight over each other's Mirrors.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DeleteParams, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use reconciler_host_tests::namespace::{TEST_NAMESPACE_LABEL, unique_name};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until,
};
use serde_json::{Value, json};

/// The grant of `docs/examples/mirror.md` and the offline fixtures (`host/tests/fixtures/mirror-*`):
/// read Mirrors, ConfigMaps and Namespaces; write ConfigMaps, the Mirror's finalizer and its status.
const GRANT: &str = r"
guests:
  mirror:
    read: [mirror.reconciler.dev/v1alpha1/Mirror, v1/ConfigMap, v1/Namespace]
    write:
      - mirror.reconciler.dev/v1alpha1/Mirror
      - mirror.reconciler.dev/v1alpha1/Mirror/status
      - v1/ConfigMap
";

const OWNER_NAMESPACE: &str = "mirror.reconciler.dev/owner-namespace";
const OWNER_NAME: &str = "mirror.reconciler.dev/owner-name";
const FINALIZER: &str = "mirror.reconciler.dev/cleanup";

/// How soon a watched change must show in the copies: a watch event, one reconcile, a few
/// writes. The guest has no resync, so only its watches can make a copy follow at all.
const PROMPTLY: Duration = Duration::from_secs(1);
/// The first reconcile also waits for the host to load the guest (compiling an 18 MB Python
/// component takes ~15 s on 2 cores when the compile cache is cold).
const FIRST_RECONCILE: Duration = Duration::from_secs(120);
/// Deleting: the finalizer's reconcile, then the API server removing the object.
const DELETION: Duration = Duration::from_secs(30);

/// Only one host watches every namespace's Mirrors at a time.
static ONE_HOST_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn the_python_mirror_keeps_copies_in_step() -> Result<()> {
    copies_follow_the_source_repair_themselves_reach_new_namespaces_and_go_with_the_mirror(
        "mirror-python",
    )
    .await
}

#[tokio::test]
async fn the_go_mirror_keeps_copies_in_step() -> Result<()> {
    copies_follow_the_source_repair_themselves_reach_new_namespaces_and_go_with_the_mirror(
        "mirror-go",
    )
    .await
}

struct Mirror {
    mirrors: Api<DynamicObject>,
    client: kube::Client,
    host: HostProcess,
    home: String,
}

impl Mirror {
    fn config_maps(&self, namespace: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), namespace)
    }

    /// The copy of `settings` in `namespace`, if any.
    async fn copy(&self, namespace: &str) -> Result<Option<ConfigMap>> {
        Ok(self.config_maps(namespace).get_opt("settings").await?)
    }

    /// Waits at most `within` until the copy in each of `namespaces` holds `data` and names the
    /// Mirror in its labels; the copies.
    async fn wait_copies(
        &self,
        what: &str,
        namespaces: &[&str],
        data: &BTreeMap<String, String>,
        within: Duration,
    ) -> Result<Vec<ConfigMap>> {
        let started = Instant::now();
        let copies = wait_until(what, within, || async {
            let mut copies = Vec::new();
            for namespace in namespaces {
                let Some(copy) = self.copy(namespace).await? else {
                    bail!("no copy in {namespace}");
                };
                let held = copy.data.clone().unwrap_or_default();
                ensure!(&held == data, "the copy in {namespace} holds {held:?}");
                let labels = copy.metadata.labels.clone().unwrap_or_default();
                ensure!(
                    labels.get(OWNER_NAMESPACE) == Some(&self.home)
                        && labels.get(OWNER_NAME).map(String::as_str) == Some("settings"),
                    "the copy in {namespace} is labelled {labels:?}"
                );
                copies.push(copy);
            }
            Ok(copies)
        })
        .await
        .map_err(|e| e.context(self.host.log_tail()))?;
        eprintln!("{what}: {:?}", started.elapsed());
        Ok(copies)
    }

    /// Waits until no copy is left in any of `namespaces`.
    async fn wait_no_copies(
        &self,
        what: &str,
        namespaces: &[&str],
        within: Duration,
    ) -> Result<()> {
        wait_until(what, within, || async {
            for namespace in namespaces {
                ensure!(
                    self.copy(namespace).await?.is_none(),
                    "a copy is still in {namespace}"
                );
            }
            Ok(())
        })
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    /// Waits until the Mirror's status describes its current generation with Ready=`ready`
    /// (`reason`), `copies` and `missing`; the Mirror.
    async fn wait_status(
        &self,
        ready: &str,
        reason: &str,
        copies: u64,
        missing: &[&str],
    ) -> Result<DynamicObject> {
        wait_until(
            &format!("the Mirror's status: Ready={ready} ({reason}), {copies} copies, missing {missing:?}"),
            PROMPTLY * 10,
            || async {
                let mirror = self.mirrors.get("settings").await?;
                let status = &mirror.data["status"];
                let observed = status["observedGeneration"].as_i64();
                let condition = status["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                    .cloned()
                    .unwrap_or(Value::Null);
                ensure!(
                    observed == mirror.metadata.generation
                        && condition["status"] == ready
                        && condition["reason"] == reason
                        && status["copies"].as_u64() == Some(copies)
                        && status["missingNamespaces"] == json!(missing),
                    "status {status} at generation {:?}",
                    mirror.metadata.generation
                );
                Ok(mirror)
            },
        )
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }
}

fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

/// The scenario, for the build `guest` (`target/guests/<guest>.wasm`).
async fn copies_follow_the_source_repair_themselves_reach_new_namespaces_and_go_with_the_mirror(
    guest: &str,
) -> Result<()> {
    let _turn = ONE_HOST_AT_A_TIME.lock().await;
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "examples/crds/mirror.yaml").await?;
    let home = test_namespace(&client, "mirror-home").await?;
    let a = test_namespace(&client, "mirror-a").await?;
    let b = test_namespace(&client, "mirror-b").await?;
    // Listed from the start, created only later.
    let later = unique_name("mirror-later");
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: GRANT.to_owned(),
        guests: vec![guest],
        namespace: None,
        extra_args: Vec::new(),
    })
    .await?;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "mirror.reconciler.dev",
        "v1alpha1",
        "Mirror",
    ));
    let m = Mirror {
        mirrors: Api::namespaced_with(client.clone(), &home, &resource),
        client: client.clone(),
        host,
        home: home.clone(),
    };

    let source = ConfigMap {
        metadata: ObjectMeta {
            name: Some("settings".into()),
            ..ObjectMeta::default()
        },
        data: Some(data(&[("log-level", "info")])),
        ..ConfigMap::default()
    };
    m.config_maps(&home)
        .create(&PostParams::default(), &source)
        .await?;
    let mirror: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "mirror.reconciler.dev/v1alpha1", "kind": "Mirror",
        "metadata": {"name": "settings"},
        "spec": {"source": "settings", "targetNamespaces": [a, b, later]},
    }))?;
    m.mirrors.create(&PostParams::default(), &mirror).await?;

    // First reconcile: a copy in each listed namespace that exists; the missing one skipped.
    m.wait_copies(
        "the first copies",
        &[&a, &b],
        &data(&[("log-level", "info")]),
        FIRST_RECONCILE,
    )
    .await?;
    let synced = m.wait_status("True", "Synced", 2, &[&later]).await?;
    assert_eq!(synced.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));

    // The source edited: the copies follow (the field index over spec.source).
    let edited = data(&[("log-level", "debug"), ("feature", "on")]);
    m.config_maps(&home)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"log-level": "debug", "feature": "on"}})),
        )
        .await?;
    m.wait_copies(
        "the copies to follow the source",
        &[&a, &b],
        &edited,
        PROMPTLY,
    )
    .await?;

    // A copy deleted by hand: back at once (owner labels on the copies), as a new object.
    let deleted = m.copy(&a).await?.context("the copy in a")?;
    m.config_maps(&a)
        .delete("settings", &DeleteParams::default())
        .await?;
    let restored = m
        .wait_copies("the deleted copy to be restored", &[&a], &edited, PROMPTLY)
        .await?;
    assert_ne!(
        restored[0].metadata.uid, deleted.metadata.uid,
        "the copy in {a} was made again"
    );

    // A copy edited by hand: a value changed, and a key removed; both restored.
    let before = m.copy(&b).await?.context("the copy in b")?;
    m.config_maps(&b)
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"log-level": "tampered", "feature": null}})),
        )
        .await?;
    let repaired = m
        .wait_copies("the edited copy to be repaired", &[&b], &edited, PROMPTLY)
        .await?;
    assert_eq!(repaired[0].metadata.uid, before.metadata.uid);
    assert_ne!(
        repaired[0].metadata.resource_version, before.metadata.resource_version,
        "the copy in {b} was written (edited, then repaired)"
    );

    // The missing namespace created: its copy appears (the field index over
    // spec.targetNamespaces[*]).
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(later.clone()),
                    labels: Some(BTreeMap::from([(
                        TEST_NAMESPACE_LABEL.to_owned(),
                        "true".to_owned(),
                    )])),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await?;
    m.wait_copies(
        "a copy in the namespace created later",
        &[&later],
        &edited,
        PROMPTLY,
    )
    .await?;
    m.wait_status("True", "Synced", 3, &[]).await?;

    // A namespace no longer listed: its copy goes, the others stay.
    m.mirrors
        .patch(
            "settings",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"targetNamespaces": [a, later]}})),
        )
        .await?;
    m.wait_no_copies(
        "the copy in the namespace unlisted to go",
        &[&b],
        PROMPTLY * 5,
    )
    .await?;
    m.wait_status("True", "Synced", 2, &[]).await?;
    m.wait_copies(
        "the listed copies to stay",
        &[&a, &later],
        &edited,
        PROMPTLY,
    )
    .await?;

    // The Mirror deleted: its copies go first (the finalizer), then the Mirror.
    m.mirrors
        .delete("settings", &DeleteParams::default())
        .await?;
    m.wait_no_copies("every copy to go with the Mirror", &[&a, &later], DELETION)
        .await?;
    wait_until("the Mirror to be gone", DELETION, || async {
        ensure!(
            m.mirrors.get_opt("settings").await?.is_none(),
            "the Mirror is still there"
        );
        Ok(())
    })
    .await
    .map_err(|e| e.context(m.host.log_tail()))?;
    let kept = m.config_maps(&home).get("settings").await?;
    assert_eq!(
        kept.data,
        Some(edited),
        "the source is never the guest's to change"
    );
    Ok(())
}
