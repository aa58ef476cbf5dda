//! The naming guest (`guests/naming`, a port of the API server's NamingConditionController)
//! against the real thing: the test creates CRDs of one group that collide in every way the
//! controller knows, lets the API server's own controller settle them (including a deletion
//! that frees a name another CRD waits for, and an update that releases one), then runs the host
//! with the guest in shadow mode. For every CRD the guest must compute exactly the accepted
//! names and the `NamesAccepted`/`Established` status the API server wrote: zero differences,
//! one agreement per CRD on the initial sync and one more on a resync (a configuration change,
//! which reloads the guest without a restart).
//!
//! A second test runs a deliberately altered build (`guests/testing/naming-altered`, the kind
//! checked after the list kind) and shows a difference naming the CRD and the field, so the
//! comparison can fail.
//!
//! Each test uses its own API group, so other tests' CRDs (which the guest also reconciles)
//! never enter its assertions.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use reconciler_host_tests::{ControlPlane, HostOptions, HostProcess, wait_until};
use serde_json::{Value, json};

const SETTLE: Duration = Duration::from_secs(60);

/// The names one CRD requests: plural, singular, kind, listKind, shortNames.
struct Names(
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
);

fn crd(group: &str, names: &Names) -> Result<CustomResourceDefinition> {
    let Names(plural, singular, kind, list_kind, short_names) = names;
    Ok(serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": plural, "singular": singular, "kind": kind, "listKind": list_kind,
                "shortNames": short_names,
            },
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    }))?)
}

/// The `NamesAccepted` reason the API server's controller gave `name`, once it gave one.
async fn names_accepted(api: &Api<CustomResourceDefinition>, name: &str) -> Result<String> {
    let crd = api.get(name).await?;
    let reason = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "NamesAccepted")
        .and_then(|c| c.reason);
    reason.context("no NamesAccepted condition yet")
}

/// Creates `names` in order, each after the previous one was judged, so the API server's
/// controller sees them in a fixed order. Returns the CRD names.
async fn create_in_order(
    api: &Api<CustomResourceDefinition>,
    group: &str,
    all: &[Names],
) -> Result<Vec<String>> {
    let mut created = Vec::new();
    for names in all {
        let crd = crd(group, names)?;
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.create(&PostParams::default(), &crd)
            .await
            .with_context(|| format!("creating CRD {name}"))?;
        wait_until(&format!("{name} to be judged"), SETTLE, || {
            names_accepted(api, &name)
        })
        .await?;
        created.push(name);
    }
    Ok(created)
}

/// Waits until each CRD's `NamesAccepted` reason is the expected one.
async fn settle(api: &Api<CustomResourceDefinition>, expected: &[(String, &str)]) -> Result<()> {
    for (name, reason) in expected {
        wait_until(
            &format!("{name} to settle at NamesAccepted {reason}"),
            SETTLE,
            || async {
                let got = names_accepted(api, name).await?;
                ensure!(got == *reason, "NamesAccepted reason is {got}");
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

/// Shadow verdicts per key, from the host's log (`shadow: agrees` at debug level, `shadow:
/// differs` at warn): (agreements, difference lines).
fn verdicts(log: &str, keys: &[String]) -> BTreeMap<String, (usize, Vec<String>)> {
    let mut seen: BTreeMap<String, (usize, Vec<String>)> =
        keys.iter().map(|k| (k.clone(), (0, Vec::new()))).collect();
    for line in log.lines() {
        let line = &reconciler_host_tests::host::strip_ansi(line);
        let Some(key) = keys.iter().find(|k| {
            line.contains(&format!("key=\"{k}\"")) || line.contains(&format!("key={k} "))
        }) else {
            continue;
        };
        let entry = seen.get_mut(key).expect("a known key");
        if line.contains("shadow: agrees") {
            entry.0 += 1;
        } else if line.contains("shadow: differs") {
            entry.1.push(line.to_owned());
        }
    }
    seen
}

fn host_config(guest: &str, deadline: &str) -> String {
    format!(
        "guests:\n  {guest}:\n    mode: shadow\n    read: [apiextensions.k8s.io/v1/CustomResourceDefinition]\n    write: [apiextensions.k8s.io/v1/CustomResourceDefinition/status]\n    limits: {{deadline: {deadline}}}\n"
    )
}

fn unique_group(prefix: &str) -> String {
    let suffix = reconciler_host_tests::namespace::unique_name(prefix);
    format!("{suffix}.naming.test")
}

async fn delete_group(api: &Api<CustomResourceDefinition>, names: &[String]) {
    for name in names {
        let _ = api.delete(name, &DeleteParams::default()).await;
    }
}

#[tokio::test]
async fn the_naming_guest_agrees_with_the_api_servers_controller() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = unique_group("agree");

    // Every collision the controller knows, in creation order: the first one holds its names.
    let mut names = create_in_order(
        &api,
        &group,
        &[
            Names("alphas", "alpha", "Alpha", "AlphaList", &["al"]),
            Names("betas", "beta", "Beta", "BetaList", &["al", "be"]), // short name vs short name
            Names("gammas", "alpha", "Gamma", "GammaList", &[]),       // singular vs singular
            Names("deltas", "delta", "AlphaList", "DeltaList", &[]),   // kind vs listKind
            Names("epsilons", "epsilon", "Epsilon", "Alpha", &[]),     // listKind vs kind
            Names("zetas", "zeta", "AlphaList", "Alpha", &[]),         // kind and listKind
            Names("al", "alx", "Al", "AlList", &[]),                   // plural vs short name
            Names("etas", "eta", "Beta", "EtaList", &[]),              // kind vs kind
            Names("thetas", "theta", "Theta", "ThetaList", &["th"]),
            Names("iotas", "iota", "Iota", "IotaList", &["th"]), // waits for thetas' "th"
            Names("kappas", "kappa", "Kappa", "KappaList", &["ka", "kp"]),
            Names("lambdas", "lambda", "Lambda", "LambdaList", &["kp"]), // waits for kappas' "kp"
        ],
    )
    .await?;
    let name = |plural: &str| format!("{plural}.{group}");
    let mut expected: Vec<(String, &str)> = vec![
        (name("alphas"), "NoConflicts"),
        (name("betas"), "ShortNamesConflict"),
        (name("gammas"), "SingularConflict"),
        (name("deltas"), "KindConflict"),
        (name("epsilons"), "ListKindConflict"),
        (name("zetas"), "ListKindConflict"),
        (name("al"), "PluralConflict"),
        (name("etas"), "KindConflict"),
        (name("kappas"), "NoConflicts"),
    ];
    settle(&api, &expected).await?;
    settle(
        &api,
        &[
            (name("iotas"), "ShortNamesConflict"),
            (name("lambdas"), "ShortNamesConflict"),
        ],
    )
    .await?;

    // A delete frees a name another CRD waits for; an update releases one.
    api.delete(&name("thetas"), &DeleteParams::default())
        .await?;
    names.retain(|n| *n != name("thetas"));
    let release = json!({"spec": {"names": {"shortNames": ["ka"]}}});
    api.patch(
        &name("kappas"),
        &PatchParams::default(),
        &Patch::Merge(&release),
    )
    .await
    .context("releasing kappas' short name kp")?;
    expected.push((name("iotas"), "NoConflicts"));
    expected.push((name("lambdas"), "NoConflicts"));
    settle(&api, &expected).await?;
    wait_until("thetas to be gone", SETTLE, || async {
        ensure!(api.get_opt(&name("thetas")).await?.is_none(), "still there");
        Ok(())
    })
    .await?;
    // Every accepted CRD also becomes Established (the establishing controller), which is
    // part of the status the guest must agree with.
    for (crd, reason) in &expected {
        if *reason == "NoConflicts" {
            reconciler_host_tests::wait_crd_established(&client, crd, SETTLE).await?;
        }
    }

    let mut host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: host_config("naming", "5s"),
        guests: vec!["naming"],
        namespace: None,
        extra_args: vec![],
    })
    .await?;
    let initial = wait_until("one verdict per CRD of the group", SETTLE, || async {
        let seen = verdicts(&host.log(), &names);
        let pending: Vec<&String> = seen
            .iter()
            .filter(|(_, (agreed, differed))| *agreed + differed.len() == 0)
            .map(|(k, _)| k)
            .collect();
        ensure!(pending.is_empty(), "no verdict yet for {pending:?}");
        Ok(seen)
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    for (key, (agreed, differed)) in &initial {
        ensure!(
            differed.is_empty() && *agreed == 1,
            "{key}: {agreed} agreements, differences: {differed:#?}"
        );
    }

    // A resync: a changed grant reloads the guest (no restart), and every key is reconciled
    // again.
    std::fs::write(
        host.dir.path().join("host.yaml"),
        host_config("naming", "6s"),
    )?;
    wait_until("a second verdict per CRD of the group", SETTLE, || async {
        let seen = verdicts(&host.log(), &names);
        let behind: Vec<String> = seen
            .iter()
            .filter(|(_, (agreed, differed))| *agreed + differed.len() < 2)
            .map(|(k, (a, d))| format!("{k}: {a} agreed, {} differed", d.len()))
            .collect();
        ensure!(behind.is_empty(), "{behind:?}");
        Ok(())
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    let after = verdicts(&host.log(), &names);
    for (key, (agreed, differed)) in &after {
        ensure!(
            differed.is_empty() && *agreed == 2,
            "{key}: {agreed} agreements, differences: {differed:#?}"
        );
    }
    ensure!(
        host.log().contains("configuration change applied"),
        "the configuration was reloaded"
    );
    let diffs = host
        .metric("reconciler_shadow_diffs_total{guest=\"naming\"}")
        .await?;
    let agreements = host
        .metric("reconciler_shadow_agreements_total{guest=\"naming\"}")
        .await?;
    ensure!(
        agreements >= 2.0 * names.len() as f64,
        "agreements {agreements}, diffs {diffs} (the latter may count other tests' CRDs in flight)"
    );

    // Nothing was written by the guest: no status carries its field manager.
    for crd in api.list(&Default::default()).await?.items {
        let managers: Vec<String> = crd
            .metadata
            .managed_fields
            .unwrap_or_default()
            .into_iter()
            .filter_map(|m| m.manager)
            .collect();
        ensure!(
            !managers.iter().any(|m| m == "naming"),
            "{:?} was written by the shadow guest: {managers:?}",
            crd.metadata.name
        );
    }
    host.terminate().await?;
    delete_group(&api, &names).await;
    Ok(())
}

#[tokio::test]
async fn an_altered_build_shows_differences_naming_the_crd_and_the_field() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = unique_group("altered");
    let names = create_in_order(
        &api,
        &group,
        &[
            Names("alphas", "alpha", "Alpha", "AlphaList", &[]),
            Names("zetas", "zeta", "AlphaList", "Alpha", &[]), // kind and listKind conflict
        ],
    )
    .await?;
    let zetas = format!("zetas.{group}");
    let alphas = format!("alphas.{group}");
    settle(&api, &[(zetas.clone(), "ListKindConflict")]).await?;
    reconciler_host_tests::wait_crd_established(&client, &alphas, SETTLE).await?;

    let mut host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: host_config("naming", "5s"),
        guests: vec!["naming-altered"],
        namespace: None,
        extra_args: vec![],
    })
    .await?;
    let seen = wait_until("a verdict for both CRDs", SETTLE, || async {
        let seen = verdicts(&host.log(), &names);
        if seen.values().any(|(a, d)| a + d.len() == 0) {
            bail!("waiting: {seen:?}");
        }
        Ok(seen)
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    let (agreed, differed) = &seen[&alphas];
    ensure!(
        *agreed >= 1 && differed.is_empty(),
        "{alphas} agrees: {seen:?}"
    );
    let (agreed, differed) = &seen[&zetas];
    ensure!(*agreed == 0 && differed.len() == 1, "{zetas}: {seen:?}");
    let line = &differed[0];
    for part in [
        "status patch of apiextensions.k8s.io/v1/CustomResourceDefinition",
        zetas.as_str(),
        r#"status.conditions[type=NamesAccepted].reason: "ListKindConflict" → "KindConflict""#,
    ] {
        ensure!(line.contains(part), "the difference names {part}: {line}");
    }

    // /guests shows the latest difference with the CRD and the field.
    let guests: Value = serde_json::from_str(&host.get("/guests").await?)?;
    let report = guests
        .as_array()
        .and_then(|files| files.iter().find(|f| f["guest"] == "naming"))
        .map(|f| f["shadow"].clone())
        .context("the naming guest on /guests")?;
    ensure!(
        guests.to_string().contains("\"mode\":\"shadow\""),
        "{guests}"
    );
    let latest = report["recentDiffs"]
        .as_array()
        .and_then(|d| d.iter().find(|v| v["key"] == zetas.as_str()))
        .with_context(|| format!("a recent difference for {zetas}: {report}"))?;
    ensure!(
        latest
            .to_string()
            .contains("status.conditions[type=NamesAccepted].reason"),
        "{latest}"
    );
    ensure!(
        host.metric("reconciler_shadow_diffs_total{guest=\"naming\"}")
            .await?
            >= 1.0
    );

    // Nothing was written: the API server's verdict stands.
    ensure!(names_accepted(&api, &zetas).await? == "ListKindConflict");
    host.terminate().await?;
    delete_group(&api, &names).await;
    Ok(())
}
