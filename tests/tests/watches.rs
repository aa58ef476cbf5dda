//! The `watches` export against a real API server, through the mapper test guest
//! (`guests/testing/mapper`): each mapping must carry a change of an object the guest does not
//! own to the Widget it affects, with no resync to fall back on (the guest sets none), and each
//! boundary is judged by reading the API server.
//!
//! The host runs without `--watch-namespace` (copies live in other namespaces); the grant's
//! `readSelectors` keep it to this run's Widgets and to ConfigMaps that carry the guest's role
//! label, which is itself one of the behaviours under test.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Result, bail, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, ObjectMeta, Patch, PatchParams};
use reconciler_host_tests::namespace::unique_name;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, test_namespace, wait_until, widgets,
};
use serde_json::{Value, json};

const ROLE: &str = "mapper.test/role";
const RUN: &str = "mapper.test/run";

fn grants(run: &str) -> String {
    format!(
        r#"
guests:
  mapper:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Namespace]
    readSelectors:
      test.reconciler.dev/v1/Widget: "{RUN}={run}"
      v1/ConfigMap: "{ROLE}"
    write: [v1/ConfigMap, test.reconciler.dev/v1/Widget/status]
    limits: {{deadline: 1s}}
"#
    )
}

fn config_map(
    name: &str,
    labels: &[(&str, &str)],
    annotations: &[(&str, &str)],
    value: &str,
) -> ConfigMap {
    let map = |pairs: &[(&str, &str)]| {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect::<BTreeMap<_, _>>(),
        )
    };
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: map(labels),
            annotations: map(annotations),
            ..ObjectMeta::default()
        },
        data: map(&[("value", value)]),
        ..ConfigMap::default()
    }
}

struct Setup {
    client: kube::Client,
    ns: String,
    run: String,
    host: HostProcess,
}

impl Setup {
    async fn start() -> Result<Self> {
        Self::start_with(grants).await
    }

    /// A host of the mapper guest whose configuration is `config` of the run's label value.
    async fn start_with(config: impl FnOnce(&str) -> String) -> Result<Self> {
        let cp = ControlPlane::shared().await?;
        let client = cp.client().await?;
        apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
        let ns = test_namespace(&client, "watches").await?;
        let run = unique_name("run");
        let host = HostProcess::start(HostOptions {
            kubeconfig: cp.kubeconfig(),
            config: config(&run),
            guests: vec!["mapper"],
            namespace: None,
            extra_args: Vec::new(),
        })
        .await?;
        Ok(Self {
            client,
            ns,
            run,
            host,
        })
    }

    fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    async fn create_widget(&self, name: &str, labelled: bool, spec: Value) -> Result<()> {
        let labels = if labelled {
            json!({ RUN: self.run })
        } else {
            json!({})
        };
        let object: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name, "labels": labels}, "spec": spec,
        }))?;
        widgets(&self.client, &self.ns)
            .create(&Default::default(), &object)
            .await?;
        Ok(())
    }

    /// Waits until the Widget's status satisfies `check` (which says what it saw otherwise).
    async fn wait_status(
        &self,
        what: &str,
        name: &str,
        check: impl Fn(&Value) -> Result<()>,
    ) -> Result<Value> {
        let api = widgets(&self.client, &self.ns);
        wait_until(what, Duration::from_secs(30), || async {
            let object = api.get(name).await?;
            let status = object.data["status"].clone();
            check(&status)?;
            Ok(status)
        })
        .await
        .map_err(|e| e.context(self.host.log_tail()))
    }

    async fn set_value(&self, ns: &str, name: &str, value: &str) -> Result<()> {
        self.config_maps(ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({"data": {"value": value}})),
            )
            .await?;
        Ok(())
    }
}

fn field_is(status: &Value, field: &str, want: &Value) -> Result<()> {
    ensure!(
        status[field] == *want,
        "status.{field} is {} (want {want})",
        status[field]
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_of_objects_the_guest_does_not_own_reach_the_widgets_they_affect() -> Result<()> {
    let s = Setup::start().await?;
    let ns = s.ns.clone();
    let later = unique_name("watches-later");
    let source = [(ROLE, "source")];
    s.config_maps(&ns)
        .create(&Default::default(), &config_map("src", &source, &[], "v1"))
        .await?;
    // Outside the grant's readSelectors: the host must not cache it, the guest must not see it.
    s.config_maps(&ns)
        .create(&Default::default(), &config_map("plain", &[], &[], "x"))
        .await?;
    // Outside the readSelectors of the primary kind: never reconciled.
    s.create_widget("stranger", false, json!({"source": "src"}))
        .await?;
    s.create_widget(
        "w",
        true,
        json!({"source": "src", "targets": [ns, later], "peek": "plain"}),
    )
    .await?;
    s.wait_status("first reconcile", "w", |st| {
        field_is(st, "source", &json!("v1"))?;
        field_is(st, "copies", &json!([ns]))?;
        field_is(st, "peek", &json!("absent"))
    })
    .await?;

    // Field index, by name in the Widget's namespace: a source edit.
    s.set_value(&ns, "src", "v2").await?;
    s.wait_status("the source's edit", "w", |st| {
        field_is(st, "source", &json!("v2"))
    })
    .await?;

    // Field index over a list, by a cluster-scoped object's name: a namespace made later.
    Api::<Namespace>::all(s.client.clone())
        .create(
            &Default::default(),
            &Namespace {
                metadata: ObjectMeta {
                    name: Some(later.clone()),
                    ..ObjectMeta::default()
                },
                ..Namespace::default()
            },
        )
        .await?;
    s.wait_status("the namespace made later", "w", |st| {
        field_is(st, "copies", &json!([ns, later]))
    })
    .await?;
    let copies = s.config_maps(&later);
    let copy = copies.get("w-copy").await?;
    ensure!(copy.data.unwrap_or_default()["value"] == "v2");

    // Owner labels, across namespaces: a copy deleted by hand comes back, one edited by hand
    // is set right.
    copies.delete("w-copy", &DeleteParams::default()).await?;
    wait_until("the deleted copy back", Duration::from_secs(30), || async {
        copies.get("w-copy").await?;
        Ok(())
    })
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    s.set_value(&later, "w-copy", "tampered").await?;
    wait_until(
        "the edited copy set right",
        Duration::from_secs(30),
        || async {
            let value = copies.get("w-copy").await?.data.unwrap_or_default()["value"].clone();
            ensure!(value == "v2", "the copy holds {value}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;

    // The guest's map function: a pointer names the Widget in an annotation.
    let pointer = [(ROLE, "pointer")];
    let names_w = format!("{ns}/w");
    s.config_maps(&ns)
        .create(
            &Default::default(),
            &config_map("ptr", &pointer, &[("mapper.test/widgets", &names_w)], "p1"),
        )
        .await?;
    s.wait_status("the pointer mapped", "w", |st| {
        field_is(st, "pointers", &json!(["ptr=p1"]))
    })
    .await?;
    s.set_value(&ns, "ptr", "p2").await?;
    s.wait_status("the pointer's edit mapped", "w", |st| {
        field_is(st, "pointers", &json!(["ptr=p2"]))
    })
    .await?;

    // In map only the lister answers: a write is refused, the keys still count.
    s.config_maps(&ns)
        .create(
            &Default::default(),
            &config_map(
                "ptr-write",
                &pointer,
                &[
                    ("mapper.test/widgets", &names_w),
                    ("mapper.test/map", "write"),
                ],
                "w1",
            ),
        )
        .await?;
    let status = s
        .wait_status("the writing pointer mapped", "w", |st| {
            field_is(st, "pointers", &json!(["ptr-write=w1", "ptr=p2"]))
        })
        .await?;
    ensure!(
        status.get("writtenByMap").is_none(),
        "map wrote the Widget's status: {status}"
    );

    // A map that traps or runs past its deadline drops that event's keys; the host runs on,
    // counts it, and the next change of the Widget's watched objects picks the pointer up.
    for (name, how, value) in [("ptr-trap", "trap", "t1"), ("ptr-loop", "loop", "l1")] {
        s.config_maps(&ns)
            .create(
                &Default::default(),
                &config_map(
                    name,
                    &pointer,
                    &[("mapper.test/widgets", &names_w), ("mapper.test/map", how)],
                    value,
                ),
            )
            .await?;
    }
    for result in ["trap", "deadline"] {
        let series = format!(r#"reconciler_map_calls_total{{guest="mapper",result="{result}"}}"#);
        wait_until(&series, Duration::from_secs(30), || async {
            let n = s.host.metric(&series).await?;
            ensure!(n >= 1.0, "{series} is {n}");
            Ok(())
        })
        .await
        .map_err(|e| e.context(s.host.log_tail()))?;
    }
    let before = s.wait_status("still as before", "w", |_| Ok(())).await?;
    ensure!(
        before["pointers"] == json!(["ptr-write=w1", "ptr=p2"]),
        "a failed map enqueued the Widget: {before}"
    );
    s.set_value(&ns, "src", "v3").await?;
    s.wait_status("the next change", "w", |st| {
        field_is(st, "source", &json!("v3"))?;
        field_is(
            st,
            "pointers",
            &json!(["ptr-loop=l1", "ptr-trap=t1", "ptr-write=w1", "ptr=p2"]),
        )
    })
    .await?;

    // A permanent error leaves a Warning event on the Widget.
    s.create_widget("failing", true, json!({"fail": "permanent"}))
        .await?;
    let events: Api<Event> = Api::namespaced(s.client.clone(), &ns);
    let warning = wait_until(
        "a Warning event on the failing Widget",
        Duration::from_secs(30),
        || async {
            let list = events.list(&ListParams::default()).await?;
            let found = list.items.into_iter().find(|e| {
                e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("failing")
                    && e.type_.as_deref() == Some("Warning")
            });
            match found {
                Some(e) => Ok(e),
                None => bail!("no Warning event regarding Widget failing yet"),
            }
        },
    )
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    ensure!(
        warning.reason.as_deref() == Some("ReconcileFailed"),
        "{warning:?}"
    );
    ensure!(
        warning
            .note
            .as_deref()
            .is_some_and(|n| n.contains("spec.fail asks for a permanent error")),
        "{warning:?}"
    );

    // A trap leaves one too, retried with backoff: each trap again is counted on the same
    // event (one object, its series), not a new event per retry.
    s.create_widget("trapping", true, json!({"fail": "trap"}))
        .await?;
    let trapped = wait_until(
        "a GuestTrapped event on Widget trapping, counted twice or more",
        Duration::from_secs(60),
        || async {
            let list = events.list(&ListParams::default()).await?;
            let found: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| {
                    e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("trapping")
                        && e.type_.as_deref() == Some("Warning")
                })
                .collect();
            let count = |e: &Event| e.series.as_ref().map_or(1, |s| s.count);
            match found.as_slice() {
                [one] if count(one) >= 2 => Ok(found),
                _ if found.len() > 1 => Ok(found),
                _ => bail!("Warning events regarding Widget trapping: {found:?}"),
            }
        },
    )
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    ensure!(
        trapped.len() == 1 && trapped[0].reason.as_deref() == Some("GuestTrapped"),
        "one aggregated GuestTrapped event, not one per retry: {trapped:?}"
    );

    // By now the unlabelled Widget would have been reconciled many times over.
    let stranger = widgets(&s.client, &ns).get("stranger").await?;
    ensure!(
        stranger.data.get("status").is_none_or(Value::is_null),
        "a Widget outside the grant's readSelectors was reconciled: {:?}",
        stranger.data
    );
    Ok(())
}

/// A computed index: the guest's `index` gives each Widget's values (the names its
/// `spec.listed` holds), the host keeps them, and a listed ConfigMap's change wakes exactly the
/// Widgets whose values name it, with no guest call per event. The index follows a Widget's
/// change; an `index` that traps, runs past its deadline or tries to read leaves only that
/// Widget out (the read is refused), and the host counts the failures.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_computed_index_wakes_the_widgets_whose_values_name_the_configmap() -> Result<()> {
    let mut s = Setup::start().await?;
    let ns = s.ns.clone();
    let role = [(ROLE, "listed")];
    for (name, spec) in [
        ("both", json!({"listed": "a, b"})),
        ("only-b", json!({"listed": "b"})),
        ("reads", json!({"listed": "a", "index": "read"})),
        ("traps", json!({"listed": "a", "index": "trap"})),
        ("loops", json!({"listed": "a", "index": "loop"})),
    ] {
        s.create_widget(name, true, spec).await?;
    }
    for name in ["both", "only-b", "reads", "traps", "loops"] {
        s.wait_status("a first reconcile", name, |st| {
            field_is(st, "listed", &json!([]))
        })
        .await?;
    }

    // a appears: the Widgets whose values name it wake; the one whose index read was refused
    // kept its values.
    s.config_maps(&ns)
        .create(&Default::default(), &config_map("a", &role, &[], "1"))
        .await?;
    for name in ["both", "reads"] {
        s.wait_status("a's creation through the index", name, |st| {
            field_is(st, "listed", &json!(["a=1"]))
        })
        .await?;
    }
    s.set_value(&ns, "a", "2").await?;
    s.wait_status("a's edit through the index", "both", |st| {
        field_is(st, "listed", &json!(["a=2"]))
    })
    .await?;

    // The index follows the primary: only-b now lists a too.
    widgets(&s.client, &ns)
        .patch(
            "only-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"listed": "a,b"}})),
        )
        .await?;
    s.wait_status("only-b's own change", "only-b", |st| {
        field_is(st, "listed", &json!(["a=2"]))
    })
    .await?;
    s.set_value(&ns, "a", "3").await?;
    for name in ["both", "only-b", "reads"] {
        s.wait_status("a's next edit through the moved index", name, |st| {
            field_is(st, "listed", &json!(["a=3"]))
        })
        .await?;
    }

    // A failed index leaves its Widget out, counted; the events reached the others first.
    for result in ["trap", "deadline"] {
        let series = format!(r#"reconciler_index_calls_total{{guest="mapper",result="{result}"}}"#);
        let n = s.host.metric(&series).await?;
        ensure!(n >= 1.0, "{series} is {n}");
    }
    for name in ["traps", "loops"] {
        let status = s.wait_status("unchanged", name, |_| Ok(())).await?;
        ensure!(
            status["listed"] == json!([]),
            "{name}'s index failed, yet a's change reached it: {status}"
        );
    }
    // A listed ConfigMap no Widget names wakes none: after it, a's edit is both's one reconcile.
    let before = s.wait_status("settled", "both", |_| Ok(())).await?;
    s.config_maps(&ns)
        .create(&Default::default(), &config_map("c", &role, &[], "x"))
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    s.set_value(&ns, "a", "4").await?;
    let after = s
        .wait_status("a's last edit", "both", |st| {
            field_is(st, "listed", &json!(["a=4"]))
        })
        .await?;
    ensure!(
        after["reconciles"].as_u64() == before["reconciles"].as_u64().map(|n| n + 1),
        "c, which no Widget lists, reconciled both: {before} then {after}"
    );

    // A restart: the new host builds both kinds of index from what it lists, and a's and a
    // field index's source's next edits still wake the Widgets that name them.
    s.config_maps(&ns)
        .create(
            &Default::default(),
            &config_map("src2", &[(ROLE, "source")], &[], "s1"),
        )
        .await?;
    s.create_widget("sourced", true, json!({"source": "src2"}))
        .await?;
    s.wait_status("sourced's first reconcile", "sourced", |st| {
        field_is(st, "source", &json!("s1"))
    })
    .await?;
    s.host.terminate().await?;
    s.host = HostProcess::start(HostOptions {
        kubeconfig: ControlPlane::shared().await?.kubeconfig(),
        config: grants(&s.run),
        guests: vec!["mapper"],
        namespace: None,
        extra_args: Vec::new(),
    })
    .await?;
    s.wait_status("the restarted host's first pass", "both", |st| {
        field_is(st, "listed", &json!(["a=4"]))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    s.set_value(&ns, "a", "5").await?;
    s.set_value(&ns, "src2", "s2").await?;
    s.wait_status("a's edit after the restart", "both", |st| {
        field_is(st, "listed", &json!(["a=5"]))
    })
    .await?;
    s.wait_status("the source's edit after the restart", "sourced", |st| {
        field_is(st, "source", &json!("s2"))
    })
    .await?;
    Ok(())
}

/// During a rollout the new version's `map` and computed index run beside the stable one's from
/// the first step: `mapper-v2` also reads the annotation `mapper.test/widgets-v2` and
/// `spec.listedV2`, which v1 ignores. With v1 alone, changes of ConfigMaps that only v2 relates
/// to the Widgets reconcile nothing; with v2 in its shadow step, the same changes reconcile
/// them (read from the Widgets' `status.reconciles` on the API server).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_versions_map_and_index_run_from_the_first_step_of_its_rollout() -> Result<()> {
    let s = Setup::start_with(|run| {
        format!(
            "{}    rollout: {{steps: [{{shadow: {{duration: 1h}}}}]}}\n",
            grants(run)
        )
    })
    .await?;
    let ns = s.ns.clone();
    s.create_widget("pointed", true, json!({})).await?;
    s.create_widget("indexed", true, json!({"listedV2": "only-v2"}))
        .await?;
    let reconciles = |name: &'static str| {
        let api = widgets(&s.client, &s.ns);
        async move {
            let widget = api.get(name).await?;
            Ok::<_, anyhow::Error>(widget.data["status"]["reconciles"].as_u64().unwrap_or(0))
        }
    };
    for name in ["pointed", "indexed"] {
        s.wait_status("the first reconcile", name, |st| {
            ensure!(st["reconciles"].as_u64() >= Some(1), "{st}");
            Ok(())
        })
        .await?;
    }
    let pointer = [(ROLE, "pointer")];
    let listed = [(ROLE, "listed")];
    let pointing = format!("{ns}/pointed");
    s.config_maps(&ns)
        .create(
            &Default::default(),
            &config_map("p", &pointer, &[("mapper.test/widgets-v2", &pointing)], "1"),
        )
        .await?;
    s.config_maps(&ns)
        .create(
            &Default::default(),
            &config_map("only-v2", &listed, &[], "1"),
        )
        .await?;
    // With v1 alone, nothing relates them to the Widgets: a change of each, a settling wait.
    let before = (reconciles("pointed").await?, reconciles("indexed").await?);
    s.set_value(&ns, "p", "2").await?;
    s.set_value(&ns, "only-v2", "2").await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        (reconciles("pointed").await?, reconciles("indexed").await?),
        before,
        "v1's map and index ignore what only v2 reads"
    );

    s.host.put_guest("mapper.wasm", "mapper-v2")?;
    wait_until("v2 in its shadow step", Duration::from_secs(60), || async {
        let guests: Value = serde_json::from_str(&s.host.get("/guests").await?)?;
        let rolling =
            guests.as_array().into_iter().flatten().any(|g| {
                g["rollout"]["share"] == "shadow" && g["rollout"]["phase"] == "Progressing"
            });
        ensure!(rolling, "no rollout in {guests}");
        Ok(())
    })
    .await
    .map_err(|e| e.context(s.host.log_tail()))?;
    let before = (reconciles("pointed").await?, reconciles("indexed").await?);
    s.set_value(&ns, "p", "3").await?;
    s.set_value(&ns, "only-v2", "3").await?;
    for (name, was) in [("pointed", before.0), ("indexed", before.1)] {
        s.wait_status("a change only v2's functions relate to it", name, |st| {
            ensure!(st["reconciles"].as_u64() > Some(was), "{st}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}
