//! Guests with their own ServiceAccount against the real kube-apiserver (RBAC authorization on):
//! the hostile test guest (`guests/testing/hostile`) granted `ConfigMap`s and the account
//! `NS/hostile`, with the RBAC `reconciler-host rbac` prints for that grant.
//!
//! - With the test-only switch that lets its writes past the host's grant check, a write
//!   beyond the grant (`apply-secret`) reaches the API server as the account and is refused
//!   there: the guest is told `denied`, naming the account and the verb, and the metrics count
//!   it as `denied_by_apiserver`. Without the switch the host refuses it first (`denied`).
//!   Either way, the API server holds no such Secret.
//! - An account whose RBAC does not cover the grant's reads is refused at load (the API server's
//!   `SubjectAccessReview`), loaded once the read is granted, and unloaded when it is revoked:
//!   the guest then answers nothing more.
//!
//! Every test has its own namespace, RBAC name prefix and host process.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use reconciler_host_tests::host::build_host_and_guests;
use reconciler_host_tests::paths::target_dir;
use reconciler_host_tests::{ControlPlane, HostOptions, HostProcess, test_namespace, wait_until};
use serde_json::{Value, json};

/// The label the hostile guest's manifest selects its attack `ConfigMap`s by.
const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
const WAIT: Duration = Duration::from_secs(60);

/// The hostile guest's grant: `ConfigMap`s only, as account `NS/hostile`.
fn config(ns: &str, extra: &str) -> String {
    format!(
        "{extra}guests:\n  hostile:\n    serviceAccount: {ns}/hostile\n    read: [v1/ConfigMap]\n    write: [v1/ConfigMap]\n"
    )
}

/// Applies what `reconciler-host rbac` prints for `config`, under prefix `ns` (so that tests
/// running at once do not share roles).
fn apply_generated_rbac(cp: &ControlPlane, ns: &str, config: &str) -> Result<String> {
    build_host_and_guests()?;
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), config)?;
    let output = Command::new(target_dir().join("debug/reconciler-host"))
        .args(["rbac", "--prefix", ns, "--namespace", ns, "--config"])
        .arg(file.path())
        .output()?;
    ensure!(
        output.status.success(),
        "rbac: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let rbac = String::from_utf8(output.stdout)?;
    let mut apply = cp.kubectl()?;
    apply
        .args(["apply", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = apply.spawn()?;
    std::io::Write::write_all(&mut child.stdin.take().context("stdin")?, rbac.as_bytes())?;
    let applied = child.wait_with_output()?;
    ensure!(
        applied.status.success(),
        "kubectl apply of the generated RBAC: {}",
        String::from_utf8_lossy(&applied.stderr)
    );
    Ok(rbac)
}

async fn attack(client: &kube::Client, ns: &str, name: &str, attack: &str) -> Result<()> {
    let object: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {ATTACK_LABEL: "true"}},
        "data": {"attack": attack},
    }))?;
    Api::<ConfigMap>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &object)
        .await
        .with_context(|| format!("creating attack {name}"))?;
    Ok(())
}

/// `result-<name>`'s data, once the guest wrote it.
async fn result(
    client: &kube::Client,
    ns: &str,
    name: &str,
    host: &HostProcess,
) -> Result<BTreeMap<String, String>> {
    let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
    wait_until(&format!("result-{name}"), WAIT, || async {
        let found = api.get_opt(&format!("result-{name}")).await?;
        found
            .map(|cm| cm.data.unwrap_or_default())
            .context("no result yet")
    })
    .await
    .map_err(|e| e.context(host.log_tail()))
}

/// `/guests`' entry of the hostile guest's file.
async fn hostile_status(host: &HostProcess) -> Result<Value> {
    let guests: Value = serde_json::from_str(&host.get("/guests").await?)?;
    guests
        .as_array()
        .and_then(|files| {
            files.iter().find(|f| {
                f["file"]
                    .as_str()
                    .is_some_and(|p| p.ends_with("hostile.wasm"))
            })
        })
        .cloned()
        .context("hostile.wasm on /guests")
}

fn calls(outcome: &str) -> String {
    format!(
        "reconciler_host_calls_total{{guest=\"hostile\",interface=\"cluster\",function=\"apply\",outcome=\"{outcome}\"}}"
    )
}

/// No Secret was ever created in `ns`: read from the API server.
async fn no_secret(client: &kube::Client, ns: &str) -> Result<()> {
    let secrets = Api::<Secret>::namespaced(client.clone(), ns)
        .list(&Default::default())
        .await?;
    let names: Vec<_> = secrets
        .items
        .iter()
        .filter_map(|s| s.metadata.name.clone())
        .collect();
    ensure!(names.is_empty(), "Secrets in {ns}: {names:?}");
    Ok(())
}

#[tokio::test]
async fn a_write_beyond_the_accounts_rbac_is_refused_by_the_api_server_and_first_by_the_host()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let ns = test_namespace(&client, "identity-writes").await?;
    let config = config(&ns, "");
    let rbac = apply_generated_rbac(cp, &ns, &config)?;
    ensure!(
        rbac.contains("impersonate-on:serviceaccount:patch"),
        "constrained impersonation: {rbac}"
    );

    // The switch on: only the API server checks the guest's writes.
    let mut host = HostProcess::start_with_env(
        HostOptions {
            kubeconfig: cp.kubeconfig(),
            config: config.clone(),
            guests: vec!["hostile"],
            namespace: Some(&ns),
            extra_args: vec![],
        },
        &[("RECONCILER_HOST_TEST_SKIP_WRITE_GRANT", "1")],
    )
    .await?;
    wait_until(
        "the hostile guest loaded, its reads reviewed",
        WAIT,
        || async {
            let status = hostile_status(&host).await?;
            ensure!(
                status["state"]["state"] == "loaded"
                    && status["serviceAccount"] == format!("{ns}/hostile")
                    && status["accessReview"]["result"] == "allowed",
                "{status}"
            );
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    attack(&client, &ns, "by-server", "apply-secret").await?;
    let answer = result(&client, &ns, "by-server", &host).await?;
    let message = answer.get("message").cloned().unwrap_or_default();
    ensure!(
        answer.get("outcome").map(String::as_str) == Some("denied")
            && message.contains(&format!(
                "the API server refused `patch` to ServiceAccount {ns}/hostile"
            )),
        "{answer:?}"
    );
    ensure!(
        host.metric(&calls("denied_by_apiserver")).await? >= 1.0,
        "counted as the API server's denial"
    );
    ensure!(host.metric(&calls("denied")).await? == 0.0);
    // The result the guest wrote as its account is there; the Secret is not.
    no_secret(&client, &ns).await?;
    host.terminate().await?;

    // The switch off: the host refuses first and sends nothing.
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config,
        guests: vec!["hostile"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    attack(&client, &ns, "by-host", "apply-secret").await?;
    let answer = result(&client, &ns, "by-host", &host).await?;
    let message = answer.get("message").cloned().unwrap_or_default();
    ensure!(
        answer.get("outcome").map(String::as_str) == Some("denied")
            && message.contains("guest `hostile` may not write v1/Secret"),
        "{answer:?}"
    );
    ensure!(host.metric(&calls("denied")).await? >= 1.0);
    ensure!(host.metric(&calls("denied_by_apiserver")).await? == 0.0);
    no_secret(&client, &ns).await?;
    Ok(())
}

/// A Role in `ns` with `verbs` on `ConfigMap`s (and the writes the guest's results need).
fn account_role(ns: &str, read_verbs: &[&str]) -> Role {
    let mut verbs: Vec<String> = ["create", "patch"].map(str::to_owned).to_vec();
    verbs.extend(read_verbs.iter().map(|v| (*v).to_owned()));
    Role {
        metadata: ObjectMeta {
            name: Some("hostile-account".into()),
            namespace: Some(ns.to_owned()),
            ..ObjectMeta::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec![String::new()]),
            resources: Some(vec!["configmaps".into()]),
            verbs,
            ..PolicyRule::default()
        }]),
    }
}

#[tokio::test]
async fn an_account_that_cannot_read_what_its_grant_reads_is_refused_and_unloaded_when_revoked()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let ns = test_namespace(&client, "identity-reads").await?;
    // The account and a Role that lets it get and list ConfigMaps but not watch them.
    let roles = Api::<Role>::namespaced(client.clone(), &ns);
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), &ns);
    let mut create_account = cp.kubectl()?;
    let created = create_account
        .args(["-n", &ns, "create", "serviceaccount", "hostile"])
        .output()?;
    ensure!(created.status.success(), "{created:?}");
    roles
        .create(&PostParams::default(), &account_role(&ns, &["get", "list"]))
        .await?;
    let binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some("hostile-account".into()),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: "hostile-account".into(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".into(),
            name: "hostile".into(),
            namespace: Some(ns.clone()),
            ..Subject::default()
        }]),
    };
    bindings.create(&PostParams::default(), &binding).await?;

    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: config(&ns, "identity: {recheck: 1s}\n"),
        guests: vec!["hostile"],
        namespace: Some(&ns),
        extra_args: vec![],
    })
    .await?;
    let refused = |missing: &'static str| {
        let host = &host;
        let ns = ns.clone();
        async move {
            let status = hostile_status(host).await?;
            let reason = status["state"]["reason"].as_str().unwrap_or_default();
            ensure!(
                status["state"]["state"] == "failed"
                    && status["guest"].is_null()
                    && reason.contains(&format!(
                        "reads its ServiceAccount {ns}/hostile may not make: {missing} v1/ConfigMap in namespace {ns}"
                    ))
                    && status["accessReview"]["result"] == "missing",
                "{status}"
            );
            Ok(())
        }
    };
    wait_until("the guest refused for its account's reads", WAIT, || {
        refused("watch")
    })
    .await
    .map_err(|e| e.context(host.log_tail()))?;

    // The read granted: the next review loads it, and it works as its account.
    roles
        .replace(
            "hostile-account",
            &PostParams::default(),
            &account_role(&ns, &["get", "list", "watch"]),
        )
        .await?;
    wait_until(
        "the guest loaded once its account may read",
        WAIT,
        || async {
            let status = hostile_status(&host).await?;
            ensure!(status["state"]["state"] == "loaded", "{status}");
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    attack(&client, &ns, "while-granted", "apply-secret").await?;
    let answer = result(&client, &ns, "while-granted", &host).await?;
    ensure!(answer.get("outcome").map(String::as_str) == Some("denied"));

    // The binding gone: the guest is unloaded and answers nothing more.
    bindings
        .delete("hostile-account", &DeleteParams::default())
        .await?;
    wait_until(
        "the guest unloaded once its account lost its reads",
        WAIT,
        || refused("get"),
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    attack(&client, &ns, "after-revoke", "apply-secret").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get_opt("result-after-revoke")
        .await?;
    ensure!(after.is_none(), "an unloaded guest answered: {after:?}");
    Ok(())
}
