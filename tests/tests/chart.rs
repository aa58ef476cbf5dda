//! The Helm chart, `deploy/helm/reconciler-host`, as the real `helm` (v3, built from the Go
//! module proxy) lints and renders it: its RBAC is what `reconciler-host rbac` prints for the
//! same grants (the derivation is written twice, in Rust and in the chart's templates, since the
//! chart runs nothing at install: this is what keeps them one); its schema refuses bad values
//! before anything is installed; each mode renders its workload; every Pod but the Linux
//! provider's passes the API server's restricted Pod Security; and the chart is the only copy
//! of the deployment in the repository. Installing it on a cluster: `tests/tests/deploy.rs`.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use reconciler_host_tests::helm::{self, Chart};
use reconciler_host_tests::{ControlPlane, repo_root};
use serde_json::{Value, json};

fn host_binary() -> std::path::PathBuf {
    reconciler_host_tests::paths::target_dir().join("debug/reconciler-host")
}

/// A YAML file as JSON.
fn yaml_file(path: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(path).with_context(|| path.display().to_string())?;
    Ok(serde_yaml::from_str(&text)?)
}

/// Every host configuration the repository holds: the examples, the test guests' grants, the
/// offline fixtures' and the chart values' own.
fn repository_configs() -> Result<Vec<(String, Value)>> {
    let root = repo_root();
    let mut files = vec![
        root.join("examples/host.yaml"),
        root.join("guests/testing/widget/host.yaml"),
    ];
    for fixture in std::fs::read_dir(root.join("host/tests/fixtures"))? {
        let file = fixture?.path().join("host.yaml");
        if file.exists() {
            files.push(file);
        }
    }
    let mut configs: Vec<(String, Value)> = files
        .iter()
        .map(|f| Ok((f.display().to_string(), yaml_file(f)?)))
        .collect::<Result<_>>()?;
    for values in ["deploy/local/values.yaml", "deploy/linux/values.yaml"] {
        let config = yaml_file(&root.join(values))?["config"].clone();
        configs.push((format!("{values} (config)"), config));
    }
    Ok(configs)
}

/// Configurations that reach every branch of the derivation (host/src/cli/rbac/): plurals, trial
/// grants, subresources of core and named groups, identities, Reconciler ceilings with and
/// without required identities, pull Secrets, HTTP credentials of grants, ceilings and tenant
/// rules, tenant rules by name and by selector, unmatched Reconcilers reported, and write verbs
/// named for a kind in each place a grant or a ceiling is written.
const CONFIGS: &[&str] = &[
    r"
guests:
  network:
    read: [samplecrd.k8s.io/v1/Network]
    write: [samplecrd.k8s.io/v1/Network, samplecrd.k8s.io/v1/Network/status]
  widget:
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
  naming:
    read: [apiextensions.k8s.io/v1/CustomResourceDefinition]
    write: [apiextensions.k8s.io/v1/CustomResourceDefinition/status]
  empty: {}
  policy@trial:
    read: [example.com/v1/Policy, networking.k8s.io/v1/Ingress, example.com/v1alpha1/Policy, v1/Pod]
    write: [v1/Pod/status, apps/v1/Deployment/scale, example.com/v1/Policy]
  reloader:
    read: [apps/v1/Deployment, v1/ConfigMap]
    write: [apps/v1/Deployment, v1/ConfigMap, v1/Secret]
    writeVerbs: {apps/v1/Deployment: [patch], v1/ConfigMap: [delete, patch]}
",
    r"
guests:
  widget:
    serviceAccount: guests/widget
    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
    write: [test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
    writeVerbs: {v1/ConfigMap: [create, patch]}
  plain:
    read: [v1/ConfigMap]
  dns:
    http:
    - prefix: http://127.0.0.1:8081/api
      headers:
        X-API-Key: {secretKeyRef: {name: pdns, key: api-key}}
        X-Other: {configMapKeyRef: {name: other, key: k}}
      caBundle: {configMapKeyRef: {name: pdns-ca, key: ca.crt}}
  other:
    http:
    - prefix: https://api.example.com/
      bearerToken: {secretKeyRef: {name: example-token, key: token}}
",
    r"
identity: {required: true}
reconcilers:
  pullSecrets: [registry, another]
  allow:
    serviceAccounts: [team-a/*, team-b/one, team-b/two, team-a/x]
    read: [v1/ConfigMap]
    write: [v1/ConfigMap, test.reconciler.dev/v1/Widget/status]
    writeVerbs: {v1/ConfigMap: [patch]}
    http:
    - prefix: https://api.example.com/
      bearerToken: {secretKeyRef: {name: tok, key: token}}
guests:
  id:
    serviceAccount: reconciler-host/id
    read: [v1/Secret]
",
    r"
reconcilers:
  allow:
    read: [test.reconciler.dev/v1/Widget]
    write: [test.reconciler.dev/v1/Widget/status, test.reconciler.dev/v1/Widget]
    writeVerbs: {test.reconciler.dev/v1/Widget: [delete]}
",
    "reconcilers: {}\n",
    "guests: {}\n",
    r"
reconcilers:
  allow:
    read: [v1/ConfigMap]
  tenants:
  - name: payments
    namespaces: [payments, billing]
    allow:
      read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]
      write: [test.reconciler.dev/v1/Widget/status, v1/ConfigMap]
      writeVerbs: {v1/ConfigMap: [patch, delete]}
  - namespaceSelector: tenant=true
    serviceAccount: guest-writer
    allow:
      read: [v1/Secret]
      http:
      - prefix: https://dns.example.com/api
        headers:
          X-API-Key: {secretKeyRef: {name: team-key, key: api-key}}
          X-Other: {configMapKeyRef: {name: team-header, key: v}}
        bearerToken: {secretKeyRef: {name: team-token, key: token}}
        caBundle: {configMapKeyRef: {name: team-ca, key: ca.crt}}
",
    "reconcilers: {reportUnmatched: true}\n",
];

/// Objects by (kind, namespace, name), without their labels; `labels` must carry `part-of`, the
/// label `reconciler-host rbac` gives what it prints.
fn by_name<'a>(
    documents: impl IntoIterator<Item = &'a Value>,
) -> Result<BTreeMap<(String, String, String), Value>> {
    let mut out = BTreeMap::new();
    for document in documents {
        let mut document = document.clone();
        let labels = document["metadata"]
            .as_object_mut()
            .and_then(|m| m.remove("labels"))
            .unwrap_or_default();
        ensure!(
            labels["app.kubernetes.io/part-of"] == "reconciler-host",
            "{document} lacks the part-of label"
        );
        let key = (
            document["kind"].as_str().unwrap_or_default().to_owned(),
            document["metadata"]["namespace"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            document["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        ensure!(out.insert(key.clone(), document).is_none(), "{key:?} twice");
    }
    Ok(out)
}

/// What `reconciler-host rbac` prints for `config` with these flags.
fn printed(config: &Value, flags: &[&str]) -> Result<BTreeMap<(String, String, String), Value>> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("host.yaml");
    std::fs::write(&file, serde_yaml::to_string(config)?)?;
    let output = helm::run(
        Command::new(host_binary())
            .args(["rbac", "--config"])
            .arg(&file)
            .args(flags),
    )?;
    let text = String::from_utf8(output.stdout)?;
    let documents: Vec<Value> = text
        .split("\n---")
        .map(serde_yaml::from_str::<Value>)
        .collect::<Result<_, _>>()?;
    by_name(documents.iter().filter(|d| !d.is_null()))
}

#[test]
fn the_charts_rbac_is_what_reconciler_host_rbac_prints_for_the_same_grants() -> Result<()> {
    reconciler_host_tests::host::build_host_and_guests()?;
    let mut configs = repository_configs()?;
    for (i, text) in CONFIGS.iter().enumerate() {
        configs.push((format!("CONFIGS[{i}]"), serde_yaml::from_str(text)?));
    }
    // (release, namespace, chart values beside `config`, the same as rbac's flags)
    let variants: &[(&str, &str, Value, &[&str])] = &[
        ("reconciler-host", "reconciler-host", json!({}), &[]),
        (
            "reconciler-host",
            "reconciler-host",
            json!({"rbac": {"impersonation": "legacy"}}),
            &["--impersonation", "legacy"],
        ),
        (
            "prod",
            "ops",
            json!({}),
            &[
                "--namespace",
                "ops",
                "--prefix",
                "prod-reconciler-host",
                "--service-account",
                "prod-reconciler-host",
            ],
        ),
        (
            "prod",
            "ops",
            json!({"rbac": {"prefix": "p"}, "serviceAccount": {"name": "sa"}}),
            &[
                "--namespace",
                "ops",
                "--prefix",
                "p",
                "--service-account",
                "sa",
            ],
        ),
    ];
    let mut compared = 0;
    for (name, config) in &configs {
        for (release, namespace, values, flags) in variants {
            let mut values = values.clone();
            values["config"] = config.clone();
            let rendered = Chart::render(release, namespace, &values, &[])
                .with_context(|| format!("{name}: helm template"))?;
            let chart = by_name(rendered.from_template("templates/rbac.yaml"))?;
            let cli = printed(config, flags).with_context(|| format!("{name}: rbac"))?;
            if chart != cli {
                let mut differences = Vec::new();
                for key in chart.keys().chain(cli.keys()) {
                    if chart.get(key) != cli.get(key) {
                        differences.push(format!(
                            "{key:?}\n  chart: {}\n  rbac:  {}",
                            chart.get(key).map_or("-".into(), Value::to_string),
                            cli.get(key).map_or("-".into(), Value::to_string)
                        ));
                    }
                }
                differences.dedup();
                bail!(
                    "{name}, release {release} in {namespace}, {values}: the chart's RBAC differs from `reconciler-host rbac {}` \
                     (change deploy/helm/reconciler-host/templates/_rbac.tpl with host/src/cli/rbac/):\n{}",
                    flags.join(" "),
                    differences.join("\n")
                );
            }
            compared += chart.len();
        }
    }
    println!(
        "{compared} RBAC objects the same in {} configurations × {} variants",
        configs.len(),
        variants.len()
    );
    Ok(())
}

#[test]
fn helm_lint_passes_in_every_mode_and_with_monitoring() -> Result<()> {
    let home = tempfile::tempdir()?;
    let local = repo_root().join("deploy/local/values.yaml");
    let linux = repo_root().join("deploy/linux/values.yaml");
    let cases: Vec<Vec<String>> = vec![
        vec![],
        vec!["-f".into(), local.display().to_string()],
        vec!["-f".into(), linux.display().to_string()],
        vec!["--set".into(), "mode=single".into()],
        vec!["--set".into(), "mode=sharded,replicas=3".into()],
        vec![
            "--set".into(),
            "serviceMonitor.enabled=true,prometheusRule.enabled=true,dashboard.enabled=true".into(),
        ],
    ];
    for args in cases {
        let output = helm::command(home.path())?
            .args(["lint", "--strict"])
            .arg(Chart::dir())
            .args(&args)
            .output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        ensure!(
            output.status.success() && text.contains("0 chart(s) failed"),
            "helm lint {args:?}:\n{text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(())
}

/// The first line of what `helm template` said when it refused `values`.
fn refusal(values: &Value) -> Result<String> {
    let output = Chart::template("reconciler-host", "reconciler-host", values, &[])?;
    ensure!(!output.status.success(), "helm template accepted {values}");
    Ok(String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn the_values_schema_refuses_what_the_host_would_refuse_before_anything_is_installed() -> Result<()>
{
    reconciler_host_tests::host::build_host_and_guests()?;
    // (config, what the schema's refusal names) — each also refused by the host itself.
    let configs = [
        (
            json!({"guests": {"x": {"read": ["Network"]}}}),
            "/config/guests/x/read/0",
        ),
        (
            json!({"guests": {"x": {"reed": ["v1/ConfigMap"]}}}),
            "/config/guests/x",
        ),
        (
            json!({"guests": {"x": {"serviceAccount": "network"}}}),
            "/config/guests/x/serviceAccount",
        ),
        (
            json!({"guests": {"x": {"write": ["v1/ConfigMap/status/x"]}}}),
            "/config/guests/x/write/0",
        ),
        (
            json!({"guests": {"x": {"write": ["v1/ConfigMap"], "writeVerbs": {"v1/ConfigMap": ["update"]}}}}),
            "/config/guests/x/writeVerbs",
        ),
        (
            json!({"guests": {"x": {"limits": {"deadline": "soon"}}}}),
            "/config/guests/x/limits/deadline",
        ),
        (
            json!({"finalizerPolicy": {"onUnload": "drop"}}),
            "/config/finalizerPolicy/onUnload",
        ),
        (
            json!({"backends": {"network": {"provider": "vpc"}}}),
            "/config/backends/network",
        ),
        (json!({"guestsDirectory": "/guests"}), "/config"),
        (
            json!({"reconcilers": {"allow": {"serviceAccounts": ["team-a"]}}}),
            "/config/reconcilers/allow/serviceAccounts/0",
        ),
    ];
    for (config, field) in &configs {
        let said = refusal(&json!({"config": config}))?;
        ensure!(
            said.contains("schema") && said.contains(field),
            "{config}: helm's refusal does not name {field}:\n{said}"
        );
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("host.yaml");
        std::fs::write(&file, serde_yaml::to_string(config)?)?;
        let host = Command::new(host_binary())
            .args(["rbac", "--config"])
            .arg(&file)
            .output()?;
        ensure!(
            !host.status.success(),
            "the schema refuses {config}, the host takes it: the schema is stricter than host.yaml"
        );
    }
    // The chart's own settings.
    let values = [
        (json!({"mode": "cluster"}), "/mode"),
        (
            json!({"linux": {"enabled": true}, "mode": "sharded"}),
            "/mode",
        ),
        (
            json!({"guests": {"files": {"network.txt": "AGFzbQ=="}}}),
            "network.txt",
        ),
        (
            json!({"guests": {"files": {"network.wasm": "not base64!"}}}),
            "/guests/files/network.wasm",
        ),
        (
            json!({"image": {"pullPolicy": "Sometimes"}}),
            "/image/pullPolicy",
        ),
        (
            json!({"rbac": {"impersonation": "full"}}),
            "/rbac/impersonation",
        ),
        (json!({"replica": 3}), "replica"),
    ];
    for (value, field) in &values {
        let said = refusal(value)?;
        ensure!(
            said.contains("schema") && said.contains(field),
            "{value}: helm's refusal does not name {field}:\n{said}"
        );
    }
    Ok(())
}

fn container(workload: &Value) -> &Value {
    &workload["spec"]["template"]["spec"]["containers"][0]
}

fn args(workload: &Value) -> Vec<String> {
    container(workload)["args"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn each_mode_renders_its_workload() -> Result<()> {
    let render = |values: Value| Chart::render("rh", "ops", &values, &[]);
    // single: one Pod, no lease, never two at once; no budget (it would block every drain).
    let single = render(json!({"mode": "single", "replicas": 3}))?;
    let deployment = single.one("Deployment")?;
    ensure!(deployment["spec"]["replicas"] == 1, "{deployment}");
    ensure!(deployment["spec"]["strategy"]["type"] == "Recreate");
    let a = args(deployment);
    ensure!(
        !a.iter()
            .any(|a| a.starts_with("--leader-elect") || a.starts_with("--shards")),
        "{a:?}"
    );
    ensure!(single.of_kind("PodDisruptionBudget").is_empty());
    ensure!(deployment["spec"]["template"]["spec"]["affinity"].is_null());

    // leaderElected: the release's own lease, a budget, replicas spread over nodes.
    let leader = render(json!({}))?;
    let deployment = leader.one("Deployment")?;
    ensure!(deployment["spec"]["replicas"] == 2);
    let a = args(deployment);
    for flag in [
        "--leader-elect",
        "--lease-name=rh-reconciler-host",
        "--lease-namespace=$(POD_NAMESPACE)",
    ] {
        ensure!(a.iter().any(|x| x == flag), "{flag} not in {a:?}");
    }
    ensure!(leader.one("PodDisruptionBudget")?["spec"]["minAvailable"] == 1);
    let anti = &deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"];
    ensure!(
        anti["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"]
            == "kubernetes.io/hostname",
        "{anti}"
    );

    // sharded: the ring named after the release.
    let sharded =
        render(json!({"mode": "sharded", "replicas": 3, "sharding": {"filter": "client"}}))?;
    let deployment = sharded.one("Deployment")?;
    ensure!(deployment["spec"]["replicas"] == 3);
    let a = args(deployment);
    for flag in [
        "--shards=auto",
        "--shard-filter=client",
        "--lease-name=rh-reconciler-host",
    ] {
        ensure!(a.iter().any(|x| x == flag), "{flag} not in {a:?}");
    }
    ensure!(!a.iter().any(|x| x == "--leader-elect"));
    sharded.one("PodDisruptionBudget")?;

    // linux: a DaemonSet in the node's network, NET_ADMIN only, the server on its loopback.
    let linux = Chart::render(
        "rh",
        "ops",
        &json!({}),
        &[
            "-f",
            &repo_root()
                .join("deploy/linux/values.yaml")
                .display()
                .to_string(),
        ],
    )?;
    ensure!(linux.of_kind("Deployment").is_empty() && linux.of_kind("Service").is_empty());
    let daemonset = linux.one("DaemonSet")?;
    let pod = &daemonset["spec"]["template"]["spec"];
    ensure!(pod["hostNetwork"] == true);
    ensure!(
        container(daemonset)["securityContext"]["capabilities"]
            == json!({"drop": ["ALL"], "add": ["NET_ADMIN"]})
    );
    let a = args(daemonset);
    ensure!(
        a.contains(&"--listen=127.0.0.1:8080".to_owned())
            && a.contains(&"--leader-elect".to_owned()),
        "{a:?}"
    );
    let drain = linux.one("Job")?;
    ensure!(args(drain).contains(&"--loopback".to_owned()));

    // A change of backends (which the host takes only at a start) rolls the Pods; a grant does not.
    let checksum = |values: Value| -> Result<Value> {
        Ok(render(values)?.one("Deployment")?["spec"]["template"]["metadata"]["annotations"]["checksum/backends"].clone())
    };
    let memory = checksum(json!({"config": {"backends": {"network": {"provider": "memory"}}}}))?;
    let granted = checksum(
        json!({"config": {"backends": {"network": {"provider": "memory"}}, "guests": {"network": {"read": ["v1/ConfigMap"]}}}}),
    )?;
    let linux = checksum(json!({"config": {"backends": {"network": {"provider": "linux"}}}}))?;
    ensure!(memory == granted && memory != linux && memory.is_string());

    // Guests: the chart's ConfigMap of base64 files, projected with the operator's ConfigMaps.
    let guests = render(
        json!({"guests": {"files": {"a.wasm": "AGFzbQ=="}, "configMaps": ["large-guests"]}}),
    )?;
    let config_map = guests
        .of_kind("ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "rh-reconciler-host-guests")
        .context("the guests ConfigMap")?;
    ensure!(config_map["binaryData"]["a.wasm"] == "AGFzbQ==");
    let volumes = &guests.one("Deployment")?["spec"]["template"]["spec"]["volumes"];
    let sources = volumes
        .as_array()
        .and_then(|v| v.iter().find(|v| v["name"] == "guests"))
        .map(|v| v["projected"]["sources"].clone())
        .context("the guests volume")?;
    ensure!(
        sources
            == json!([{"configMap": {"name": "rh-reconciler-host-guests"}}, {"configMap": {"name": "large-guests"}}]),
        "{sources}"
    );
    Ok(())
}

/// Every Pod the chart makes (workloads and the uninstall hook's Job), checked by the API
/// server's Pod Security admission at `restricted` in a dry run: no warning, but for the Linux
/// provider, which must have one (it needs NET_ADMIN, root and the node's network).
#[tokio::test]
async fn every_pod_passes_restricted_pod_security_but_the_linux_providers() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let namespace = reconciler_host_tests::test_namespace(&client, "chart-pss").await?;
    let mut label = cp.kubectl()?;
    helm::run(
        label
            .args(["label", "namespace", &namespace, "--overwrite"])
            .args(
                ["enforce", "warn", "audit"]
                    .map(|mode| format!("pod-security.kubernetes.io/{mode}=restricted")),
            ),
    )?;
    // The local values without the guest's own identity, whose ServiceAccount would live in
    // another namespace.
    let mut local = yaml_file(&repo_root().join("deploy/local/values.yaml"))?;
    local["config"]["guests"]["network"]
        .as_object_mut()
        .context("deploy/local/values.yaml: config.guests.network")?
        .remove("serviceAccount");
    let linux = yaml_file(&repo_root().join("deploy/linux/values.yaml"))?;
    let cases: &[(&str, &Value, &[&str], bool)] = &[
        ("leaderElected", &local, &[], false),
        ("single", &local, &["--set", "mode=single"], false),
        ("sharded", &local, &["--set", "mode=sharded"], false),
        ("linux", &linux, &[], true),
    ];
    for (name, values, args, privileged) in cases {
        let output = Chart::template("rh", &namespace, values, args)?;
        ensure!(
            output.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut kubectl = cp.kubectl()?;
        kubectl
            .args(["apply", "--dry-run=server", "-n", &namespace, "-f", "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = kubectl.spawn()?;
        {
            use std::io::Write as _;
            child
                .stdin
                .take()
                .context("stdin")?
                .write_all(&output.stdout)?;
        }
        let applied = child.wait_with_output()?;
        let said = String::from_utf8_lossy(&applied.stderr);
        ensure!(
            applied.status.success(),
            "{name}: kubectl apply --dry-run=server: {said}"
        );
        let warned = said.contains("would violate PodSecurity");
        ensure!(
            warned == *privileged,
            "{name}: {} restricted Pod Security warning:\n{said}",
            if *privileged {
                "expected a"
            } else {
                "unexpected"
            }
        );
    }
    Ok(())
}

#[test]
fn the_chart_is_the_one_copy_of_the_deployment() -> Result<()> {
    let root = repo_root();
    // No kustomize tree (or any other second rendering) beside the chart.
    let mut found = Vec::new();
    let chart = std::fs::canonicalize(Chart::dir())?;
    for dir in ["deploy", "examples"] {
        for entry in walk(&root.join(dir))? {
            if std::fs::canonicalize(&entry)?.starts_with(&chart) {
                continue;
            }
            let name = entry
                .file_name()
                .unwrap_or_default()
                .to_string_lossy()
                .into_owned();
            if name == "kustomization.yaml" || name == "rbac.yaml" {
                found.push(entry.display().to_string());
            }
            if name.ends_with(".yaml") {
                let text = std::fs::read_to_string(&entry)?;
                if text.contains("kind: Deployment") || text.contains("kind: DaemonSet") {
                    found.push(entry.display().to_string());
                }
            }
        }
    }
    ensure!(
        found.is_empty(),
        "a second copy of the deployment beside the chart: {found:?}"
    );
    // The Reconciler CRD: one file, which the chart's crds/ links to and packages.
    let crd = Chart::dir().join("crds/reconcilers.yaml");
    ensure!(
        std::fs::canonicalize(&crd)?
            == std::fs::canonicalize(root.join("deploy/crds/reconcilers.yaml"))?,
        "{} is not deploy/crds/reconcilers.yaml",
        crd.display()
    );
    let home = tempfile::tempdir()?;
    helm::run(
        helm::command(home.path())?
            .arg("package")
            .arg(Chart::dir())
            .arg("--destination")
            .arg(home.path()),
    )?;
    let package = std::fs::read_dir(home.path())?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "tgz"))
        .context("helm package wrote no .tgz")?;
    let shown = helm::run(
        helm::command(home.path())?
            .args(["show", "crds"])
            .arg(&package),
    )?;
    let packaged = String::from_utf8(shown.stdout)?;
    let source = std::fs::read_to_string(root.join("deploy/crds/reconcilers.yaml"))?;
    ensure!(
        packaged.trim() == source.trim(),
        "the packaged chart's CRDs differ from deploy/crds/reconcilers.yaml"
    );
    Ok(())
}

fn walk(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            out.extend(walk(&path)?);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

#[test]
fn the_rules_and_the_dashboard_ride_in_the_chart_as_their_files_hold_them() -> Result<()> {
    let off = Chart::render("rh", "ops", &json!({}), &[])?;
    for kind in ["ServiceMonitor", "PrometheusRule"] {
        ensure!(off.of_kind(kind).is_empty(), "{kind} without its value");
    }
    let on = Chart::render(
        "rh",
        "ops",
        &json!({"serviceMonitor": {"enabled": true}, "prometheusRule": {"enabled": true, "labels": {"release": "kps"}},
                "dashboard": {"enabled": true}}),
        &[],
    )?;
    let rule = on.one("PrometheusRule")?;
    let file = yaml_file(&Chart::dir().join("files/prometheus-rules.yaml"))?;
    ensure!(
        rule["spec"] == file,
        "the PrometheusRule's spec is not files/prometheus-rules.yaml"
    );
    ensure!(rule["metadata"]["labels"]["release"] == "kps");
    let monitor = on.one("ServiceMonitor")?;
    ensure!(
        monitor["spec"]["endpoints"][0]["port"] == "http"
            && monitor["spec"]["endpoints"][0]["path"] == "/metrics"
    );
    let dashboard = on
        .of_kind("ConfigMap")
        .into_iter()
        .find(|c| c["metadata"]["name"] == "rh-reconciler-host-dashboard")
        .context("the dashboard ConfigMap")?;
    ensure!(dashboard["metadata"]["labels"]["grafana_dashboard"] == "1");
    let json: Value = serde_json::from_str(
        dashboard["data"]["reconciler-host.json"]
            .as_str()
            .unwrap_or_default(),
    )?;
    let file: Value = serde_json::from_str(&std::fs::read_to_string(
        Chart::dir().join("files/dashboard.json"),
    )?)?;
    ensure!(
        json == file,
        "the dashboard ConfigMap is not files/dashboard.json"
    );
    // Every panel has an id of its own and its queries; the alerts test runs each query.
    let panels = file["panels"].as_array().context("panels")?;
    let mut ids: Vec<i64> = panels.iter().filter_map(|p| p["id"].as_i64()).collect();
    ids.sort_unstable();
    ids.dedup();
    ensure!(ids.len() == panels.len(), "panel ids are not unique");
    for panel in panels.iter().filter(|p| p["type"] != "row") {
        ensure!(
            panel["targets"]
                .as_array()
                .is_some_and(|t| !t.is_empty() && t.iter().all(|t| t["expr"].is_string())),
            "panel {} has no query",
            panel["title"]
        );
    }
    Ok(())
}

/// `verifyKeys`: each Secret and ConfigMap listed is mounted read-only at
/// `/etc/reconciler-keys/NAME`, the path `host.yaml`'s `verify` names its files by, in every
/// mode; a name Kubernetes would refuse, or a key the chart does not know, is refused by the
/// schema before anything is installed.
#[test]
fn verify_keys_are_mounted_where_host_yaml_names_them() -> Result<()> {
    let values =
        json!({"verifyKeys": {"secrets": ["release-keys"], "configMaps": ["team-a.keys"]}});
    for mode in ["single", "leaderElected"] {
        let mut values = values.clone();
        values["mode"] = json!(mode);
        let rendered = Chart::render("rh", "ops", &values, &[])?;
        let pod = &rendered.one("Deployment")?["spec"]["template"]["spec"];
        for (name, source) in [
            (
                "release-keys",
                json!({"secret": {"secretName": "release-keys"}}),
            ),
            ("team-a.keys", json!({"configMap": {"name": "team-a.keys"}})),
        ] {
            let path = format!("/etc/reconciler-keys/{name}");
            let mount = pod["containers"][0]["volumeMounts"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|m| m["mountPath"] == path.as_str())
                .with_context(|| format!("{mode}: no mount at {path}: {pod}"))?;
            ensure!(mount["readOnly"] == true, "{mount}");
            let volume = pod["volumes"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|v| v["name"] == mount["name"])
                .with_context(|| format!("{mode}: no volume {}", mount["name"]))?;
            let (kind, want) = source
                .as_object()
                .and_then(|o| o.iter().next())
                .context("one source")?;
            ensure!(volume[kind] == *want, "{mode}: {volume}");
        }
    }
    // Without the entry, nothing more is mounted than before.
    let plain = Chart::render("rh", "ops", &json!({}), &[])?;
    let mounts =
        plain.one("Deployment")?["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
            .to_string();
    ensure!(!mounts.contains("reconciler-keys"), "{mounts}");
    for wrong in [
        json!({"verifyKeys": {"secrets": ["Release_Keys"]}}),
        json!({"verifyKeys": {"secret": ["release-keys"]}}),
    ] {
        let out = Chart::template("rh", "ops", &wrong, &[])?;
        ensure!(
            !out.status.success(),
            "the schema took {wrong}: the Pod would not start"
        );
    }
    Ok(())
}

/// Whether `labels` (a Pod's) satisfy a `matchLabels` selector.
fn selects(selector: &Value, labels: &Value) -> bool {
    selector["matchLabels"]
        .as_object()
        .is_some_and(|wanted| wanted.iter().all(|(k, v)| labels[k] == *v))
}

/// `networkPolicy`: the host's Pods (and no other) admit on their port only the peers in `from`
/// and the uninstall hook's drain, which reads every host's `/guests`; an empty `from`, which a
/// NetworkPolicy reads as "from anywhere", is refused before anything is installed; there is
/// none by default, nor with the Linux provider (host network, where one does not apply); and
/// the API server accepts the rendered policy (a server-side dry run).
#[tokio::test]
async fn a_network_policy_admits_only_the_scraper_and_the_drain() -> Result<()> {
    let scraper = json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}});
    let values = json!({"networkPolicy": {"enabled": true, "from": [scraper]}});
    let rendered = Chart::render("rh", "ops", &values, &[])?;
    let policy = rendered.one("NetworkPolicy")?;
    let host_pod = &rendered.one("Deployment")?["spec"]["template"]["metadata"]["labels"];
    let drain_pod = &rendered.one("Job")?["spec"]["template"]["metadata"]["labels"];
    ensure!(
        selects(&policy["spec"]["podSelector"], host_pod),
        "the policy does not select the host's Pods: {policy}"
    );
    ensure!(
        !selects(&policy["spec"]["podSelector"], drain_pod),
        "the policy selects the drain's Pod too: {policy}"
    );
    ensure!(
        policy["spec"]["policyTypes"] == json!(["Ingress"]),
        "{policy}"
    );
    let rules = policy["spec"]["ingress"].as_array().context("ingress")?;
    ensure!(rules.len() == 1, "one rule, not {}: {policy}", rules.len());
    ensure!(
        rules[0]["ports"] == json!([{"port": "http", "protocol": "TCP"}]),
        "{policy}"
    );
    let peers = rules[0]["from"].as_array().context("from")?;
    ensure!(
        peers.len() == 2
            && peers[0] == scraper
            && selects(&peers[1]["podSelector"], drain_pod)
            && !selects(&peers[1]["podSelector"], host_pod),
        "the peers are the scraper and the drain only: {peers:?}"
    );

    let refused = refusal(&json!({"networkPolicy": {"enabled": true}}))?;
    ensure!(refused.contains("/networkPolicy/from"), "{refused}");
    let refused = refusal(&json!({"networkPolicy": {"enabled": true, "from": []}}))?;
    ensure!(refused.contains("/networkPolicy/from"), "{refused}");
    ensure!(
        Chart::render("rh", "ops", &json!({}), &[])?
            .of_kind("NetworkPolicy")
            .is_empty(),
        "a NetworkPolicy by default"
    );
    let linux = yaml_file(&repo_root().join("deploy/linux/values.yaml"))?;
    let mut linux_with_policy = linux.clone();
    linux_with_policy["networkPolicy"] = values["networkPolicy"].clone();
    ensure!(
        Chart::render("rh", "ops", &linux_with_policy, &[])?
            .of_kind("NetworkPolicy")
            .is_empty(),
        "a NetworkPolicy with the Linux provider's host network"
    );

    let client = ControlPlane::shared().await?.client().await?;
    let namespace = reconciler_host_tests::test_namespace(&client, "chart-np").await?;
    let mut policy: k8s_openapi::api::networking::v1::NetworkPolicy =
        serde_json::from_value(policy.clone())?;
    policy.metadata.namespace = Some(namespace.clone());
    kube::Api::<k8s_openapi::api::networking::v1::NetworkPolicy>::namespaced(client, &namespace)
        .create(
            &kube::api::PostParams {
                dry_run: true,
                ..Default::default()
            },
            &policy,
        )
        .await
        .context("the API server refused the rendered NetworkPolicy")?;
    Ok(())
}
