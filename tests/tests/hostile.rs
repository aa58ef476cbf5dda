//! The guest boundary under attack, against the real kube-apiserver: a `reconciler-host run`
//! with `--watch-namespace <attacker>` runs the hostile test guest (`guests/testing/hostile`,
//! granted only `read: [v1/ConfigMap], write: [v1/ConfigMap]`) next to the well-behaved widget
//! guest. Each `ConfigMap` the test creates in the attacker namespace names one attack; the guest
//! performs it through the imports and writes what the host answered into
//! `result-<attack>`. The test checks every answer is the refusal the host promises (outcome and
//! the field the message starts with), and then checks on the API server, not in the host,
//! that nothing in the victim namespace was touched, that nothing was planted anywhere, and that
//! the widget guest converged meanwhile. Resource attacks (sleep, spin, memory) leave no result:
//! they are checked through `/metrics`, and a shutdown with a guest asleep in WASI is timed.
//!
//! Every test has its own namespaces on the shared control plane and its own host process.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ListParams, PostParams};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, create_widget, repo_root,
    test_namespace, wait_until, widgets, widgets_converged,
};
use serde_json::{Value, json};

/// The label the hostile guest's manifest selects its attack `ConfigMap`s by.
const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
/// What the guest writes before a forged host log line (after a newline it hopes survives).
const FORGED: &str = "FORGED-HOST-LINE";
/// The hostile guest's memory cap in the tests.
const MEMORY_MIB: u64 = 32;

/// The host configuration: the widget guest's grant as `guests/testing/widget/host.yaml` has it,
/// and the hostile guest with `limits`.
fn config(hostile_limits: &str) -> Result<String> {
    let path = repo_root().join("guests/testing/widget/host.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text)?;
    let hostile: serde_yaml::Value = serde_yaml::from_str(&format!(
        "{{read: [v1/ConfigMap], write: [v1/ConfigMap], limits: {hostile_limits}}}"
    ))?;
    config["guests"]["hostile"] = hostile;
    Ok(serde_yaml::to_string(&config)?)
}

/// What the host must answer to one attack.
struct Expect {
    attack: &'static str,
    outcome: &'static str,
    /// The message starts with one of these (the field the host names); empty: any start.
    starts: &'static [&'static str],
    /// ... and contains this.
    contains: &'static str,
}

const fn invalid(attack: &'static str, starts: &'static [&'static str]) -> Expect {
    Expect {
        attack,
        outcome: "invalid",
        starts,
        contains: "",
    }
}

const fn denied(attack: &'static str, contains: &'static str) -> Expect {
    Expect {
        attack,
        outcome: "denied",
        starts: &[],
        contains,
    }
}

const fn answered(attack: &'static str, outcome: &'static str) -> Expect {
    Expect {
        attack,
        outcome,
        starts: &[],
        contains: "",
    }
}

/// Every attack that ends with a result (see the table in `guests/testing/hostile/src/lib.rs`).
/// Attacks with more to check than the answer (`detail`) are checked in [`check_detail`].
const EXPECTED: &[Expect] = &[
    // A URL path smuggled through the namespace.
    invalid("ns-path-delete", &["ref.namespace:"]),
    invalid("ns-path-patch-status", &["ref.namespace:"]),
    invalid("ns-path-get", &["ref.namespace:"]),
    invalid("ns-path-list", &["namespace:"]),
    // ... through the name.
    invalid("name-slash", &["ref.name:"]),
    invalid("name-dotdot", &["ref.name:"]),
    invalid("name-query", &["ref.name:"]),
    invalid("name-fragment", &["ref.name:"]),
    invalid("name-percent", &["ref.name:"]),
    invalid("name-empty", &["ref.name:"]),
    invalid("name-long", &["ref.name:"]),
    invalid("name-newline", &["ref.name:"]),
    // ... through the kind.
    invalid("gvk-group-path", &["ref.kind.group:"]),
    invalid("gvk-version-path", &["ref.kind.version:"]),
    invalid("gvk-kind-path", &["ref.kind.kind:"]),
    invalid("list-group-path", &["kind.group:"]),
    // Outside the grant: kinds.
    denied("delete-secret", "v1/Secret"),
    denied("get-secret", "v1/Secret"),
    denied("list-secrets", "v1/Secret"),
    denied("apply-secret", "v1/Secret"),
    // Outside the grant: --watch-namespace.
    denied("apply-victim-configmap", "--watch-namespace"),
    denied("delete-victim-configmap", "--watch-namespace"),
    denied("patch-status-victim", ""),
    // Reads see only the watched namespace.
    answered("get-victim-configmap", "ok"),
    answered("list-everywhere", "ok"),
    // A namespaced kind named without a namespace.
    Expect {
        attack: "delete-no-namespace",
        outcome: "invalid",
        starts: &["ref.namespace:"],
        contains: "namespaced",
    },
    Expect {
        attack: "apply-no-namespace",
        outcome: "invalid",
        starts: &[
            "ref.namespace:",
            "object.namespace:",
            "object.metadata.namespace:",
        ],
        contains: "namespaced",
    },
    // Apply bodies.
    invalid("apply-finalizer-orphan", &["object.metadata.finalizers:"]),
    invalid("apply-finalizer-foreign", &["object.metadata.finalizers:"]),
    invalid(
        "apply-namespace-path",
        &["object.namespace:", "object.metadata.namespace:"],
    ),
    invalid(
        "apply-name-path",
        &["object.name:", "object.metadata.name:"],
    ),
    invalid("apply-api-version-path", &["object.apiVersion:"]),
    invalid("apply-generate-name", &["object.metadata.name:"]),
    invalid("apply-not-object", &["object:"]),
    invalid("apply-bad-json", &["object:"]),
    invalid("apply-oversized", &["object:"]),
    invalid("apply-deep", &["object:"]),
    // Validate before grant: a malformed patch is `invalid` even where the write is not granted.
    invalid("patch-oversized", &["patch:"]),
    invalid("patch-deep", &["patch:"]),
    // Events.
    denied("event-victim-configmap", "--watch-namespace"),
    denied("event-victim-secret", "v1/Secret"),
    invalid("event-reason-newline", &["event.reason:"]),
    invalid("event-regarding-path", &["event.regarding.namespace:"]),
    answered("event-flood", "unavailable"),
    // The queue.
    invalid("enqueue-delay-over", &["after-ms:"]),
    invalid("enqueue-delay-max", &["after-ms:"]),
    invalid("enqueue-empty-name", &["key.name:"]),
    invalid("enqueue-name-path", &["key.name:"]),
    invalid("enqueue-victim", &["key.namespace:"]),
    invalid("enqueue-no-namespace", &["key.namespace:"]),
    answered("enqueue-flood", "unavailable"),
    // Label selectors.
    invalid("selector-bad", &["label-selector:"]),
    invalid("selector-control", &["label-selector:"]),
    invalid("selector-huge", &["label-selector:"]),
    // Logs return nothing; what the host did with them is checked in its log and metrics.
    answered("log-flood", "ok"),
    // Memory grown by hand: refused at the cap, and the guest carries on.
    answered("alloc-grow", "refused"),
];

/// Attacks that never finish: cancelled at the deadline, stopped at the memory cap, trapped.
const UNFINISHED: &[&str] = &["sleep", "spin", "alloc", "stderr-forge"];

/// Checks one result against its expectation; the mismatch as text.
fn check_answer(
    expect: &Expect,
    result: &BTreeMap<String, String>,
    victim: &str,
) -> Option<String> {
    let field = |k: &str| result.get(k).map_or("", String::as_str);
    let (outcome, message) = (field("outcome"), field("message"));
    let starts_ok =
        expect.starts.is_empty() || expect.starts.iter().any(|s| message.starts_with(s));
    if outcome != expect.outcome || !starts_ok || !message.contains(expect.contains) {
        let starts = if expect.starts.is_empty() {
            String::new()
        } else {
            format!(" starting with one of {:?}", expect.starts)
        };
        let contains = if expect.contains.is_empty() {
            String::new()
        } else {
            format!(" containing {:?}", expect.contains)
        };
        return Some(format!(
            "{}: expected {}{starts}{contains}; observed {outcome}: {message:?} (detail {:?})",
            expect.attack,
            expect.outcome,
            field("detail")
        ));
    }
    check_detail(expect.attack, field("detail"), victim)
}

/// `key=n` from a detail such as `ok=5 unavailable=95`.
fn count(detail: &str, key: &str) -> u64 {
    detail
        .split(' ')
        .find_map(|part| part.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
        .unwrap_or(0)
}

/// What an attack's `detail` must show, beyond its outcome.
fn check_detail(attack: &str, detail: &str, victim: &str) -> Option<String> {
    let problem = match attack {
        "get-victim-configmap" => {
            (detail != "absent").then(|| "a read of the victim's ConfigMap returned it".to_owned())
        }
        "list-everywhere" => detail
            .split(' ')
            .any(|seen| seen.starts_with(&format!("{victim}/")))
            .then(|| "a list over all namespaces returned victim objects".to_owned()),
        // Burst 5 at 1/s: a few more may pass while the flood runs, nowhere near 100.
        "event-flood" => (count(detail, "ok") > 10 || count(detail, "unavailable") < 90)
            .then(|| "the event rate did not hold".to_owned()),
        "enqueue-flood" => (count(detail, "ok") > 10_000 || count(detail, "unavailable") < 50)
            .then(|| "the pending-key cap (10,000) did not hold".to_owned()),
        "alloc-grow" => {
            let bytes = detail
                .split(' ')
                .find_map(|p| p.strip_prefix("bytes=")?.parse::<u64>().ok());
            (bytes.is_none_or(|b| b > MEMORY_MIB << 20))
                .then(|| format!("memory grew past the cap of {MEMORY_MIB} MiB"))
        }
        _ => None,
    };
    problem.map(|p| format!("{attack}: {p} (detail {detail:?})"))
}

/// Each attack's result `ConfigMap` data, by attack.
type AttackResults = BTreeMap<&'static str, BTreeMap<String, String>>;

/// Namespaces of one test, with the victims created before the host starts.
struct Arena {
    client: kube::Client,
    attacker: String,
    victim: String,
}

impl Arena {
    async fn new(cp: &ControlPlane) -> Result<Self> {
        let client = cp.client().await?;
        let attacker = test_namespace(&client, "attacker").await?;
        let victim = test_namespace(&client, "victim").await?;
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "topsecret"},
            "stringData": {"password": "hunter2"},
        }))?;
        Api::<Secret>::namespaced(client.clone(), &victim)
            .create(&PostParams::default(), &secret)
            .await?;
        for ns in [&victim, &attacker] {
            let keep: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": "keep"},
                "data": {"precious": "yes"},
            }))?;
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .create(&PostParams::default(), &keep)
                .await?;
        }
        Ok(Self {
            client,
            attacker,
            victim,
        })
    }

    fn config_maps(&self, ns: &str) -> Api<ConfigMap> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Creates `attacker/<attack>` naming `attack` (the victim namespace in `data.victim`).
    async fn attack(&self, attack: &str) -> Result<()> {
        let object: ConfigMap = serde_json::from_value(json!({
            "metadata": {"name": attack, "labels": {ATTACK_LABEL: "true"}},
            "data": {"attack": attack, "victim": self.victim},
        }))?;
        self.config_maps(&self.attacker)
            .create(&PostParams::default(), &object)
            .await
            .with_context(|| format!("creating attack {attack}"))?;
        Ok(())
    }

    /// `result-<attack>`'s data, once the guest wrote it.
    async fn result(&self, attack: &str) -> Result<Option<BTreeMap<String, String>>> {
        let found = self
            .config_maps(&self.attacker)
            .get_opt(&format!("result-{attack}"))
            .await?;
        Ok(found.map(|cm| cm.data.unwrap_or_default()))
    }

    /// Launches every attack in `expected`, waits for all their results and checks each
    /// against its expectation: the results, and what did not match.
    /// A host running the hostile guest alone in the attacker namespace, under the test's grant
    /// (limits `{deadline: 5s}`) as `regrant` changes it.
    async fn hostile_host(
        &self,
        cp: &ControlPlane,
        regrant: impl FnOnce(&mut serde_yaml::Value) -> Result<()>,
    ) -> Result<HostProcess> {
        let mut config: serde_yaml::Value = serde_yaml::from_str(&config("{deadline: 5s}")?)?;
        regrant(&mut config["guests"]["hostile"])?;
        HostProcess::start(HostOptions {
            kubeconfig: cp.kubeconfig(),
            config: serde_yaml::to_string(&config)?,
            guests: vec!["hostile"],
            namespace: Some(&self.attacker),
            extra_args: vec![],
        })
        .await
    }

    async fn run_attacks(
        &self,
        expected: &[Expect],
        host: &HostProcess,
        timeout: Duration,
    ) -> Result<(AttackResults, Vec<String>)> {
        for expect in expected {
            self.attack(expect.attack).await?;
        }
        let results = self.results(expected, host, timeout).await?;
        let failures = expected
            .iter()
            .filter_map(|expect| check_answer(expect, &results[expect.attack], &self.victim))
            .collect();
        Ok((results, failures))
    }

    /// The result of every attack in `expected`, once the guest wrote them all.
    async fn results(
        &self,
        expected: &[Expect],
        host: &HostProcess,
        timeout: Duration,
    ) -> Result<AttackResults> {
        wait_until("a result for every attack", timeout, || async {
            let mut results = BTreeMap::new();
            let mut missing = Vec::new();
            for expect in expected {
                match self.result(expect.attack).await? {
                    Some(result) => {
                        results.insert(expect.attack, result);
                    }
                    None => missing.push(expect.attack),
                }
            }
            ensure!(missing.is_empty(), "no result yet for {missing:?}");
            Ok(results)
        })
        .await
        .map_err(|e| e.context(host.log_tail()))
    }

    /// Every object in the victim namespace that an attack could touch: kind/name →
    /// resourceVersion. Events too: none may be recorded there.
    async fn victim_snapshot(&self) -> Result<BTreeMap<String, String>> {
        let ns = &self.victim;
        let mut objects = BTreeMap::new();
        let list = ListParams::default();
        let rv = |m: &kube::api::ObjectMeta| {
            (
                m.name.clone().unwrap_or_default(),
                m.resource_version.clone().unwrap_or_default(),
            )
        };
        for cm in self.config_maps(ns).list(&list).await? {
            let (name, version) = rv(&cm.metadata);
            objects.insert(format!("ConfigMap/{name}"), version);
        }
        for secret in Api::<Secret>::namespaced(self.client.clone(), ns)
            .list(&list)
            .await?
        {
            let (name, version) = rv(&secret.metadata);
            objects.insert(format!("Secret/{name}"), version);
        }
        for event in Api::<k8s_openapi::api::events::v1::Event>::namespaced(self.client.clone(), ns)
            .list(&list)
            .await?
        {
            let (name, version) = rv(&event.metadata);
            objects.insert(format!("events.k8s.io/Event/{name}"), version);
        }
        for event in Api::<k8s_openapi::api::core::v1::Event>::namespaced(self.client.clone(), ns)
            .list(&list)
            .await?
        {
            let (name, version) = rv(&event.metadata);
            objects.insert(format!("Event/{name}"), version);
        }
        Ok(objects)
    }
}

/// The sum of every sample of `family` whose labels include all of `labels`.
async fn metric_sum(host: &HostProcess, family: &str, labels: &[&str]) -> Result<f64> {
    let text = host.get("/metrics").await?;
    let prefix = format!("{family}{{");
    Ok(text
        .lines()
        .filter(|line| line.starts_with(&prefix) && labels.iter().all(|l| line.contains(l)))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

/// Waits until the metric sum reaches `at_least`.
async fn metric_reaches(
    host: &HostProcess,
    family: &str,
    labels: &[&str],
    at_least: f64,
) -> Result<f64> {
    wait_until(
        &format!("{family}{labels:?} >= {at_least}"),
        Duration::from_secs(60),
        || async {
            let value = metric_sum(host, family, labels).await?;
            ensure!(value >= at_least, "it is {value}");
            Ok(value)
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}

/// Lines of the host's log that begin with a forged line (after any ANSI colour codes, which a
/// forged line could not have put before itself), each with the host line before it, which
/// shows what carried it.
fn forged_lines(log: &str) -> Vec<String> {
    let lines: Vec<String> = log
        .lines()
        .map(reconciler_host_tests::host::strip_ansi)
        .collect();
    lines
        .iter()
        .enumerate()
        .filter(|(_, line)| line.trim_start().starts_with(FORGED))
        .map(|(i, line)| {
            let before = if i > 0 { lines[i - 1].as_str() } else { "" };
            format!("{before}\n{line}")
        })
        .collect()
}

/// Waits until the guest logged that it is about to sleep in WASI.
async fn asleep(host: &HostProcess) -> Result<()> {
    wait_until(
        "the hostile guest to fall asleep in WASI",
        Duration::from_secs(60),
        || async {
            ensure!(
                host.log().contains("hostile: sleeping 600 s in WASI"),
                "not yet"
            );
            Ok(())
        },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))
}

#[tokio::test]
async fn every_attack_is_refused_nothing_outside_is_touched_and_the_widget_converges() -> Result<()>
{
    let cp = ControlPlane::shared().await?;
    let arena = Arena::new(cp).await?;
    apply_crd_file(&arena.client, "guests/testing/widget/crd.yaml").await?;
    let victims_before = arena.victim_snapshot().await?;
    ensure!(
        victims_before.contains_key("Secret/topsecret")
            && victims_before.contains_key("ConfigMap/keep"),
        "victims not in place: {victims_before:?}"
    );
    let attacker_keep = arena.config_maps(&arena.attacker).get("keep").await?;

    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        config: config(&format!(
            "{{deadline: 2s, memoryMiB: {MEMORY_MIB}, eventsPerSecond: 1, eventBurst: 5}}"
        ))?,
        guests: vec!["hostile", "widget"],
        namespace: Some(&arena.attacker),
        extra_args: vec![],
    })
    .await?;

    let widget_api = widgets(&arena.client, &arena.attacker);
    let mut widget_names: Vec<String> = (0..3).map(|i| format!("w-{i}")).collect();
    for name in &widget_names {
        create_widget(&widget_api, name).await?;
    }
    // The attacks that hold a worker until the deadline go first, so the rest run beside them.
    for attack in UNFINISHED {
        arena.attack(attack).await?;
    }
    let (_, mut failures) = arena
        .run_attacks(EXPECTED, &host, Duration::from_secs(180))
        .await?;
    for attack in UNFINISHED {
        if let Some(result) = arena.result(attack).await? {
            failures.push(format!(
                "{attack}: expected no result (the reconcile never finishes); observed {result:?}"
            ));
        }
    }

    // The well-behaved guest converged while the attacks ran, and still does after them.
    widgets_converged(&arena.client, &arena.attacker, &widget_names, &host).await?;

    // Resource attacks, through the metrics: sleep and spin hit the deadline, alloc the memory
    // cap, stderr-forge trapped; the host went on serving throughout.
    let reconciles = "reconciler_reconcile_total";
    metric_reaches(
        &host,
        reconciles,
        &[r#"guest="hostile""#, r#"result="deadline""#],
        2.0,
    )
    .await?;
    metric_reaches(
        &host,
        reconciles,
        &[r#"guest="hostile""#, r#"result="memory_limit""#],
        1.0,
    )
    .await?;
    metric_reaches(
        &host,
        reconciles,
        &[r#"guest="hostile""#, r#"result="trap""#],
        1.0,
    )
    .await?;
    let calls = "reconciler_host_calls_total";
    for outcome in ["invalid", "denied", "limited"] {
        let label = format!("outcome=\"{outcome}\"");
        let n = metric_sum(&host, calls, &[r#"guest="hostile""#, &label]).await?;
        if n <= 0.0 {
            failures.push(format!(
                "{calls}{{guest=\"hostile\",{label}}} is {n}, expected > 0"
            ));
        }
    }
    let dropped_logs = metric_sum(
        &host,
        calls,
        &[
            r#"guest="hostile""#,
            r#"interface="log""#,
            r#"outcome="limited""#,
        ],
    )
    .await?;
    if dropped_logs <= 0.0 {
        failures.push(format!(
            "log-flood: expected dropped log lines (outcome=\"limited\"), observed {dropped_logs}"
        ));
    }

    // On the API server: the victims are exactly as they were, nothing was planted.
    let victims_after = arena.victim_snapshot().await?;
    if victims_after != victims_before {
        failures.push(format!(
            "the victim namespace changed: before {victims_before:?}, after {victims_after:?}"
        ));
    }
    let keep = arena.config_maps(&arena.attacker).get("keep").await?;
    if keep.metadata.resource_version != attacker_keep.metadata.resource_version {
        failures.push(format!(
            "attacker/keep changed: {:?} -> {:?}",
            attacker_keep.metadata.resource_version, keep.metadata.resource_version
        ));
    }
    let mut expected_names: BTreeSet<String> = ["keep".to_owned()].into();
    for attack in EXPECTED
        .iter()
        .map(|e| e.attack)
        .chain(UNFINISHED.iter().copied())
    {
        expected_names.insert(attack.to_owned());
        expected_names.insert(format!("result-{attack}"));
    }
    widget_names.push("w-after".into());
    for name in &widget_names {
        expected_names.insert(format!("{name}-widget"));
    }
    for cm in arena
        .config_maps(&arena.attacker)
        .list(&ListParams::default())
        .await?
    {
        let name = cm.metadata.name.unwrap_or_default();
        if !expected_names.contains(&name) {
            failures.push(format!(
                "ConfigMap {name} appeared in the attacker namespace"
            ));
        }
    }
    let planted = [
        "planted",
        "no-namespace",
        "with-finalizer",
        "oversized",
        "deep",
    ];
    for cm in Api::<ConfigMap>::all(arena.client.clone())
        .list(&ListParams::default())
        .await?
    {
        let name = cm.metadata.name.as_deref().unwrap_or_default();
        if planted.contains(&name) {
            failures.push(format!(
                "ConfigMap {name} appeared in namespace {:?}",
                cm.metadata.namespace
            ));
        }
    }
    for secret in Api::<Secret>::all(arena.client.clone())
        .list(&ListParams::default())
        .await?
    {
        if secret.metadata.name.as_deref() == Some("stolen") {
            failures.push(format!(
                "Secret stolen appeared in namespace {:?}",
                secret.metadata.namespace
            ));
        }
    }

    // Guest text never forges a host log line: neither logged lines nor a trapped guest's
    // stderr, which the host quotes in the reconcile's error.
    let forged = forged_lines(&host.log());
    if !forged.is_empty() {
        failures.push(format!(
            "the host log holds {} line(s) a guest forged, e.g. {:?}",
            forged.len(),
            &forged[..forged.len().min(2)]
        ));
    }

    // Still serving: a widget created after the attacks converges.
    create_widget(&widget_api, "w-after").await?;
    widgets_converged(&arena.client, &arena.attacker, &widget_names, &host).await?;
    assert_eq!(host.get("/healthz").await?.trim(), "ok");

    assert!(
        failures.is_empty(),
        "the host let {} attack(s) through or answered them wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

/// The attacks of `guests/testing/hostile/src/boundary.rs`: through the API server's own
/// semantics, with a grant that writes more than it reads.
const BOUNDARY: &[Expect] = &[
    invalid("status-crd-labels", &["patch.metadata.labels:"]),
    invalid("status-crd-annotations", &["patch.metadata.annotations:"]),
    invalid("status-crd-finalizer", &["patch.metadata.finalizers:"]),
    invalid("status-crd-owner", &["patch.metadata.ownerReferences:"]),
    invalid("status-crd-spec", &["patch.spec:"]),
    invalid("status-namespace-psa", &["patch.metadata.labels:"]),
    Expect {
        attack: "status-crd-stale",
        outcome: "conflict",
        starts: &[],
        contains: "withheld",
    },
    answered("readback-apply-secret", "ok"),
    answered("readback-patch-pod", "ok"),
    denied("readback-guess-secret", "an unforced apply of v1/Secret"),
    Expect {
        attack: "readback-error-secret",
        outcome: "invalid",
        starts: &[],
        contains: "withheld",
    },
    invalid(
        "apply-owner-dangling",
        &["object.metadata.ownerReferences[0]:"],
    ),
    invalid(
        "apply-owner-stale-uid",
        &["object.metadata.ownerReferences[0].uid:"],
    ),
    denied("apply-owner-unreadable", "read v1/Secret"),
    answered("apply-owner-ok", "ok"),
    denied("apply-label-psa", "pod-security.kubernetes.io/enforce"),
    denied(
        "apply-annotation-sa-token",
        "kubernetes.io/service-account.name",
    ),
    invalid(
        "apply-metadata-deletion",
        &["object.metadata.deletionTimestamp:"],
    ),
];

/// The attacks of `guests/testing/hostile/src/verbs.rs`, with PodTemplates granted `patch` alone.
const VERBS: &[Expect] = &[
    denied("verbs-create", "may patch v1/PodTemplate but not create it"),
    Expect {
        attack: "verbs-create-uid",
        outcome: "conflict",
        starts: &[],
        contains: "uid mismatch",
    },
    invalid("verbs-create-empty-uid", &["object.metadata.uid:"]),
    denied("verbs-owner-new", "would let the garbage collector delete"),
    answered("verbs-patch", "ok"),
    denied("verbs-delete", "may not delete v1/PodTemplate"),
];

#[tokio::test]
async fn write_verbs_let_through_only_the_verbs_they_name() -> Result<()> {
    use k8s_openapi::api::core::v1::PodTemplate;

    let cp = ControlPlane::shared().await?;
    let arena = Arena::new(cp).await?;
    let templates = Api::<PodTemplate>::namespaced(arena.client.clone(), &arena.attacker);
    let existing: PodTemplate = serde_json::from_value(json!({
        "metadata": {"name": "existing"},
        "template": {"spec": {"containers": [{"name": "c", "image": "example.invalid/none"}]}},
    }))?;
    let before = templates.create(&PostParams::default(), &existing).await?;
    let host = arena
        .hostile_host(cp, |grant| {
            grant["read"] = serde_yaml::from_str("[v1/ConfigMap, v1/PodTemplate]")?;
            grant["write"] = serde_yaml::from_str("[v1/ConfigMap, v1/PodTemplate]")?;
            grant["writeVerbs"] = serde_yaml::from_str("{v1/PodTemplate: [patch]}")?;
            Ok(())
        })
        .await?;
    let (_, mut failures) = arena
        .run_attacks(VERBS, &host, Duration::from_secs(120))
        .await?;

    // On the API server: nothing created, the existing object patched and still there.
    for name in ["fresh", "fresh-uid", "fresh-empty"] {
        if let Some(created) = templates.get_opt(name).await? {
            failures.push(format!(
                "PodTemplate {name} was created: {:?}",
                created.metadata
            ));
        }
    }
    let after = templates.get("existing").await?;
    if after.metadata.uid != before.metadata.uid {
        failures.push("PodTemplate existing was deleted and created again".to_owned());
    }
    if after
        .metadata
        .owner_references
        .is_some_and(|o| !o.is_empty())
    {
        failures.push("PodTemplate existing was given an owner".to_owned());
    }
    let patched = after.metadata.labels.unwrap_or_default();
    if patched.get("patched").map(String::as_str) != Some("yes") {
        failures.push(format!(
            "PodTemplate existing was not patched: labels {patched:?}"
        ));
    }
    assert!(
        failures.is_empty(),
        "the host let a verb through that the grant leaves out, or refused one it names:\n{}",
        failures.join("\n")
    );
    Ok(())
}

/// The victim of the status attacks (`guests/testing/hostile/victim-crd.yaml`).
const VICTIM_CRD: &str = "victims.hostile.reconciler.dev";
/// What the readback victims hold: the guest must never see it.
const SECRET_VALUE: &str = "hunter2";

/// A CRD's, a Namespace's or any object's metadata that an attack could change.
fn guarded_metadata(meta: &kube::api::ObjectMeta) -> Value {
    json!({
        "labels": meta.labels,
        "annotations": meta.annotations,
        "finalizers": meta.finalizers,
        "ownerReferences": meta.owner_references,
        "resourceVersion": meta.resource_version,
    })
}

#[tokio::test]
async fn a_status_grant_changes_status_only_and_a_write_grant_reads_nothing() -> Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Pod};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    let cp = ControlPlane::shared().await?;
    let arena = Arena::new(cp).await?;
    apply_crd_file(&arena.client, "guests/testing/hostile/victim-crd.yaml").await?;
    let secrets = Api::<Secret>::namespaced(arena.client.clone(), &arena.attacker);
    let readback: Secret = serde_json::from_value(json!({
        "metadata": {"name": "readback"},
        "stringData": {"password": SECRET_VALUE},
    }))?;
    secrets.create(&PostParams::default(), &readback).await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "readback"},
        "spec": {"containers": [{"name": "c", "image": "example.invalid/none",
            "env": [{"name": "TOKEN", "value": SECRET_VALUE}]}]},
    }))?;
    Api::<Pod>::namespaced(arena.client.clone(), &arena.attacker)
        .create(&PostParams::default(), &pod)
        .await?;
    let crds = Api::<CustomResourceDefinition>::all(arena.client.clone());
    let namespaces = Api::<Namespace>::all(arena.client.clone());
    let crd_before = guarded_metadata(&crds.get(VICTIM_CRD).await?.metadata);
    let namespace_before = guarded_metadata(&namespaces.get(&arena.victim).await?.metadata);
    let secret_before = secrets.get("readback").await?;

    let host = arena
        .hostile_host(cp, |grant| {
            grant["write"] = serde_yaml::from_str(
                "[v1/ConfigMap, v1/Secret, v1/Pod/status, v1/Namespace/status, apiextensions.k8s.io/v1/CustomResourceDefinition/status]",
            )?;
            Ok(())
        })
        .await?;
    let (results, mut failures) = arena
        .run_attacks(BOUNDARY, &host, Duration::from_secs(120))
        .await?;

    // What a write handed back holds nothing of what the guest may not read.
    let encoded = "aHVudGVyMg=="; // base64 of SECRET_VALUE, as a Secret stores it
    for attack in ["readback-apply-secret", "readback-patch-pod"] {
        let detail = &results[attack]["detail"];
        let returned: Value = serde_json::from_str(detail).unwrap_or(Value::Null);
        let extra: Vec<&String> = returned
            .as_object()
            .map(|o| {
                o.keys()
                    .filter(|k| !["apiVersion", "kind", "metadata"].contains(&k.as_str()))
                    .collect()
            })
            .unwrap_or_default();
        if returned.is_null()
            || detail.contains(SECRET_VALUE)
            || detail.contains(encoded)
            || !extra.is_empty()
            || returned["metadata"].get("annotations").is_some()
        {
            failures.push(format!(
                "{attack}: the write handed back more than identity: {detail}"
            ));
        }
    }

    // On the API server: the victims' metadata is exactly as it was.
    let crd_after = guarded_metadata(&crds.get(VICTIM_CRD).await?.metadata);
    if crd_after != crd_before {
        failures.push(format!(
            "CRD {VICTIM_CRD} changed: {crd_before} -> {crd_after}"
        ));
    }
    let namespace_after = guarded_metadata(&namespaces.get(&arena.victim).await?.metadata);
    if namespace_after != namespace_before {
        failures.push(format!(
            "Namespace {} changed: {namespace_before} -> {namespace_after}",
            arena.victim
        ));
    }
    let secret_after = secrets.get("readback").await?;
    if secret_after.data != secret_before.data || secret_after.type_ != secret_before.type_ {
        failures.push("Secret readback changed".to_owned());
    }
    // The one owner reference let through names the attack's own ConfigMap, as it is.
    let owned = arena.config_maps(&arena.attacker).get("owned").await?;
    let owner = arena
        .config_maps(&arena.attacker)
        .get("apply-owner-ok")
        .await?;
    let owners: Vec<(String, String)> = owned
        .metadata
        .owner_references
        .unwrap_or_default()
        .into_iter()
        .map(|o| (o.name, o.uid))
        .collect();
    let expected = vec![(
        "apply-owner-ok".to_owned(),
        owner.metadata.uid.unwrap_or_default(),
    )];
    if owners != expected {
        failures.push(format!(
            "ConfigMap owned has owners {owners:?}, expected {expected:?}"
        ));
    }
    let labels = owned.metadata.labels.unwrap_or_default();
    let annotations = owned.metadata.annotations.unwrap_or_default();
    if labels
        .keys()
        .chain(annotations.keys())
        .any(|k| k.contains("kubernetes.io"))
    {
        failures.push(format!(
            "ConfigMap owned carries reserved keys: {labels:?} {annotations:?}"
        ));
    }
    assert!(
        failures.is_empty(),
        "the host let {} attack(s) through or answered them wrongly:\n{}",
        failures.len(),
        failures.join("\n")
    );
    Ok(())
}

#[tokio::test]
async fn a_guest_asleep_in_wasi_is_cancelled_at_its_deadline_and_frees_its_only_worker()
-> Result<()> {
    let cp = ControlPlane::shared().await?;
    let arena = Arena::new(cp).await?;
    let host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        // One worker: if the sleep held it past the deadline, nothing else would run.
        config: config("{deadline: 2s, concurrency: 1}")?,
        guests: vec!["hostile"],
        namespace: Some(&arena.attacker),
        extra_args: vec![],
    })
    .await?;
    arena.attack("sleep").await?;
    asleep(&host).await?;
    let started = std::time::Instant::now();
    arena.attack("ns-path-get").await?;
    let result = wait_until(
        "the second attack's result while the first sleeps",
        Duration::from_secs(30),
        || async { arena.result("ns-path-get").await?.context("no result yet") },
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    let waited = started.elapsed();
    assert_eq!(result["outcome"], "invalid", "{result:?}");
    metric_reaches(
        &host,
        "reconciler_reconcile_total",
        &[r#"guest="hostile""#, r#"result="deadline""#],
        1.0,
    )
    .await?;
    // The sleep was cancelled after at most its 2 s deadline (then the worker took the next key).
    assert!(
        waited < Duration::from_secs(15),
        "the worker was freed only after {waited:?}"
    );
    assert!(arena.result("sleep").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn sigterm_with_a_guest_asleep_in_wasi_exits_within_10_seconds() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let arena = Arena::new(cp).await?;
    let mut host = HostProcess::start(HostOptions {
        kubeconfig: cp.kubeconfig(),
        // A deadline far beyond the test: only the shutdown can end the sleep.
        config: config("{deadline: 300s}")?,
        guests: vec!["hostile"],
        namespace: Some(&arena.attacker),
        extra_args: vec![],
    })
    .await?;
    arena.attack("sleep").await?;
    asleep(&host).await?;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, took) = host.terminate_within(Duration::from_secs(30)).await?;
    eprintln!("SIGTERM with a guest asleep in WASI: exited {status:?} after {took:?}");
    let log_tail = host.log_tail();
    assert!(
        status.is_some(),
        "still running {took:?} after SIGTERM (killed)\n{log_tail}"
    );
    assert!(
        took <= Duration::from_secs(10),
        "exited only {took:?} after SIGTERM\n{log_tail}"
    );
    Ok(())
}
