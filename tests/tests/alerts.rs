//! The chart's alerts, recording rules and dashboard (`deploy/helm/reconciler-host/files/`)
//! against the real Prometheus (Debian's package, installed on first use by
//! `tools/prometheus/prometheus`): `promtool` checks the rules and runs their unit tests
//! (`deploy/helm/rules-test.yaml`), which must name every alert; then a Prometheus scrapes a real
//! host reconciling real Widgets on the shared control plane, and every recording rule must
//! return a series and every dashboard query must evaluate.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use reconciler_host_tests::host::free_port;
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, repo_root, test_namespace, wait_until,
    widgets,
};
use serde_json::{Value, json};

fn rules_file() -> PathBuf {
    repo_root().join("deploy/helm/reconciler-host/files/prometheus-rules.yaml")
}

/// The directory of Debian's `prometheus` and `promtool`, installed first if missing.
fn prometheus_bin() -> Result<PathBuf> {
    let output = Command::new(repo_root().join("tools/prometheus/prometheus"))
        .arg("path")
        .stderr(Stdio::inherit())
        .output()
        .context("tools/prometheus/prometheus")?;
    ensure!(
        output.status.success(),
        "tools/prometheus/prometheus path failed"
    );
    Ok(PathBuf::from(String::from_utf8(output.stdout)?.trim()))
}

fn promtool(args: &[&Path]) -> Result<String> {
    let output = Command::new(prometheus_bin()?.join("promtool"))
        .args(args)
        .current_dir(repo_root().join("deploy/helm"))
        .output()?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    ensure!(output.status.success(), "promtool {args:?}:\n{text}");
    Ok(text)
}

/// (kind, name) of every rule in the rules file: ("record", …) and ("alert", …).
fn rules() -> Result<Vec<(String, String)>> {
    let file: Value = serde_yaml::from_str(&std::fs::read_to_string(rules_file())?)?;
    let mut out = Vec::new();
    for group in file["groups"].as_array().context("groups")? {
        for rule in group["rules"].as_array().context("rules")? {
            for kind in ["record", "alert"] {
                if let Some(name) = rule[kind].as_str() {
                    out.push((kind.to_owned(), name.to_owned()));
                }
            }
        }
    }
    Ok(out)
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_cover_every_alert() -> Result<()> {
    promtool(&[Path::new("check"), Path::new("rules"), &rules_file()])?;
    let said = promtool(&[
        Path::new("test"),
        Path::new("rules"),
        Path::new("rules-test.yaml"),
    ])?;
    ensure!(said.contains("SUCCESS"), "{said}");
    let tests: Value = serde_yaml::from_str(&std::fs::read_to_string(
        repo_root().join("deploy/helm/rules-test.yaml"),
    )?)?;
    let tested: Vec<&str> = tests["tests"]
        .as_array()
        .context("tests")?
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_array().into_iter().flatten())
        .filter(|a| a["exp_alerts"].as_array().is_some_and(|e| !e.is_empty()))
        .filter_map(|a| a["alertname"].as_str())
        .collect();
    let alerts: Vec<String> = rules()?
        .into_iter()
        .filter(|(kind, _)| kind == "alert")
        .map(|(_, name)| name)
        .collect();
    ensure!(alerts.len() >= 7, "alerts: {alerts:?}");
    let untested: Vec<&String> = alerts
        .iter()
        .filter(|a| !tested.contains(&a.as_str()))
        .collect();
    ensure!(
        untested.is_empty(),
        "alerts no unit test in deploy/helm/rules-test.yaml sees firing: {untested:?}"
    );
    Ok(())
}

/// A Prometheus server on loopback, stopped when dropped.
struct Prometheus {
    child: Child,
    url: String,
    _dir: tempfile::TempDir,
}

impl Prometheus {
    /// Scrapes `target` every second as job `reconciler-host`, with `labels` on its series (what
    /// a ServiceMonitor adds), evaluating the chart's rules every second.
    async fn start(target: &str, labels: &Value) -> Result<Self> {
        let bin = prometheus_bin()?;
        let dir = tempfile::Builder::new().prefix("prometheus-").tempdir()?;
        let config = json!({
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [rules_file()],
            "scrape_configs": [{
                "job_name": "reconciler-host",
                "static_configs": [{"targets": [target], "labels": labels}],
            }],
        });
        std::fs::write(
            dir.path().join("prometheus.yml"),
            serde_yaml::to_string(&config)?,
        )?;
        let port = free_port()?;
        let log = std::fs::File::create(dir.path().join("prometheus.log"))?;
        let child = Command::new(bin.join("prometheus"))
            .arg(format!(
                "--config.file={}",
                dir.path().join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting prometheus")?;
        let server = Self {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _dir: dir,
        };
        wait_until("Prometheus ready", Duration::from_secs(60), || async {
            curl(&format!("{}/-/ready", server.url), &[]).map(drop)
        })
        .await
        .map_err(|e| e.context(server.log()))?;
        Ok(server)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// An instant query's result vector, or its error.
    fn query(&self, expr: &str) -> Result<Vec<Value>> {
        let text = curl(
            &format!("{}/api/v1/query", self.url),
            &["--data-urlencode", &format!("query={expr}")],
        )?;
        let answer: Value = serde_json::from_str(&text)?;
        ensure!(answer["status"] == "success", "{expr}: {answer}");
        Ok(answer["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `curl` of `url` (with more arguments); the body, or an error with it.
fn curl(url: &str, args: &[&str]) -> Result<String> {
    let output = Command::new("curl")
        .args(["-sS", "--max-time", "10", "--fail-with-body"])
        .args(args)
        .arg(url)
        .output()?;
    let body = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        bail!("{url}: {}{body}", String::from_utf8_lossy(&output.stderr));
    }
    Ok(body)
}

/// A dashboard query as Grafana sends it with every variable at "All".
fn as_grafana_sends_it(expr: &str) -> String {
    expr.replace("$namespace", ".*")
        .replace("$job", ".*")
        .replace("$guest", ".*")
        .replace("$__rate_interval", "1m")
}

#[tokio::test]
async fn every_recording_rule_returns_a_series_from_a_real_host_and_every_panel_evaluates()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    let ns = test_namespace(&client, "alerts").await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    // Sharded (one replica, its ring in the test's namespace), so the shard families count keys.
    let host = HostProcess::start_with_env(
        HostOptions {
            kubeconfig: cp.kubeconfig(),
            config: std::fs::read_to_string(repo_root().join("guests/testing/widget/host.yaml"))?,
            guests: vec!["widget"],
            namespace: Some(&ns),
            extra_args: [
                "--shards",
                "auto",
                "--lease-name",
                "alerts",
                "--lease-namespace",
                &ns,
            ]
            .map(str::to_owned)
            .to_vec(),
        },
        &[("POD_NAME", "host-0")],
    )
    .await?;
    // A guest file that fails to load, beside the good one.
    std::fs::write(
        host.dir.path().join("guests/broken.wasm"),
        b"\0asm not really",
    )?;
    let api = widgets(&client, &ns);
    for (name, spec) in [
        ("ok", json!({"message": "ok"})),
        (
            "slow",
            json!({"message": "slow", "mode": "sleep", "sleepMs": 30}),
        ),
        // Fails twice, transiently: errors, retries with backoff, then success.
        ("flaky", json!({"message": "flaky", "failTimes": 2})),
        (
            "bad",
            json!({"message": "bad", "permanentError": "no such thing"}),
        ),
    ] {
        let widget: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": name}, "spec": spec,
        }))?;
        api.create(&kube::api::PostParams::default(), &widget)
            .await?;
    }
    let leases: kube::Api<Lease> = kube::Api::namespaced(client.clone(), &ns);
    wait_until("the ring's lease", Duration::from_secs(60), || async {
        ensure!(
            !leases.list(&Default::default()).await?.items.is_empty(),
            "no lease yet"
        );
        Ok(())
    })
    .await?;

    let prometheus = Prometheus::start(
        &format!("127.0.0.1:{}", host.port),
        &json!({"namespace": ns, "pod": "host-0"}),
    )
    .await?;
    let records: Vec<String> = rules()?
        .into_iter()
        .filter(|(kind, _)| kind == "record")
        .map(|(_, name)| name)
        .collect();
    ensure!(records.len() >= 10, "records: {records:?}");
    let mut missing = Vec::new();
    for record in &records {
        let found = wait_until(
            &format!("recording rule {record} to return a series"),
            Duration::from_secs(90),
            || async {
                let series = prometheus.query(record)?;
                ensure!(!series.is_empty(), "no series yet");
                Ok(series)
            },
        )
        .await;
        match found {
            Ok(series) => println!("{record}: {}", series[0]),
            Err(e) => missing.push(format!("{e:#}")),
        }
    }
    ensure!(
        missing.is_empty(),
        "recording rules without a series from a real host:\n{}\n{}",
        missing.join("\n"),
        host.log_tail()
    );
    // Each rule is evaluated by the server, which reports none as failing.
    let groups: Value =
        serde_json::from_str(&curl(&format!("{}/api/v1/rules", prometheus.url), &[])?)?;
    for group in groups["data"]["groups"].as_array().context("rule groups")? {
        for rule in group["rules"].as_array().context("rules")? {
            ensure!(
                rule["health"] == "ok",
                "rule {} is {}: {}",
                rule["name"],
                rule["health"],
                rule["lastError"]
            );
        }
    }

    let dashboard: Value = serde_json::from_str(&std::fs::read_to_string(
        repo_root().join("deploy/helm/reconciler-host/files/dashboard.json"),
    )?)?;
    let (mut evaluated, mut with_data) = (0, 0);
    for panel in dashboard["panels"].as_array().context("panels")? {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().context("a target without expr")?;
            let series = prometheus
                .query(&as_grafana_sends_it(expr))
                .with_context(|| format!("panel {}", panel["title"]))?;
            evaluated += 1;
            with_data += usize::from(!series.is_empty());
        }
    }
    println!("dashboard: {evaluated} queries evaluated, {with_data} returned series");
    for (variable, query) in [
        ("namespace", "reconciler_leader"),
        ("guest", "reconciler_reconcile_total"),
    ] {
        let series = prometheus.query(query)?;
        ensure!(
            series.iter().any(|s| s["metric"][variable].is_string()),
            "the dashboard's ${variable} reads label {variable} of {query}, which has none"
        );
    }
    Ok(())
}
