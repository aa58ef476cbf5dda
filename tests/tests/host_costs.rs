//! What the host spends on a guest's behalf stays within that guest's limits, against the real
//! kube-apiserver: a `reconciler-host run` with the hostile test guest (granted
//! `read: [v1/ConfigMap], write: [v1/ConfigMap]`, a 32 MiB memory cap, 0.2 core and a 10 s
//! deadline, long enough for the waits its costs buy it) next to the well-behaved widget guest,
//! in a namespace filled with 40 ConfigMaps of ~0.9 MiB (36 MiB, more than the hostile guest's
//! cap) and 2,000 small ones. The hostile guest then runs the attacks
//! of `guests/testing/hostile/src/costs.rs` at its full concurrency, each repeated: bodies of
//! many small values, bodies whose tree would outgrow its cap, bodies the host must parse and
//! send, lists of more than its cap, lists under it, slow selectors.
//!
//! The test checks, by reading the host process's `/proc/<pid>/status` and the API server (not
//! the host's log), that the host's peak resident memory (`VmHWM`, reset just before the
//! attacks) stayed within [`bound_mib`] of its resident memory before them, that each attack got
//! the answer the host promises (the guest writes it into `result-<attack>`), and that the
//! widget guest converged meanwhile. How fast `/healthz` answers meanwhile is measured by the
//! bench (`host/benches/host_costs.rs`), not asserted here.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use reconciler_host_tests::{
    ControlPlane, HostOptions, HostProcess, apply_crd_file, create_widget, repo_root,
    test_namespace, wait_until, widgets, widgets_converged,
};
use serde_json::{Value, json};

/// The label the hostile guest's manifest selects its attack `ConfigMap`s by.
const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
/// The hostile guest's limits here.
const MEMORY_MIB: u64 = 32;
/// Its manifest's concurrency (`guests/testing/hostile/src/lib.rs`).
const CONCURRENCY: u64 = 4;
/// The large `ConfigMap`s: this many of this size, in four parts (`cost.reconciler.dev/part`).
const LARGE: usize = 40;
const LARGE_BYTES: usize = 900 << 10;
/// Small ones, for the selector attack to scan.
const SMALL: usize = 2_000;
/// How long the attacks run.
const ATTACK_TIME: Duration = Duration::from_secs(30);

/// The most the host's resident memory may grow under attack: the hostile guest's instance
/// memories (concurrency x cap, in the host's address space), the host memory it may hold
/// through the host's budget (one cap: the trees of its bodies, the copies of its lists), and
/// 64 MiB for everything else (allocator slack, API answers, the watch events of its writes).
/// Measured on the 2-core dev machine: +130 and +162 MiB with two malloc arenas (as here),
/// +189 to +207 MiB in four runs with glibc's default (up to 16 arenas there).
fn bound_mib() -> u64 {
    (CONCURRENCY + 1) * MEMORY_MIB + 64
}

/// The host configuration: the widget guest's grant as `guests/testing/widget/host.yaml` has it,
/// and the hostile guest's.
fn config() -> Result<String> {
    let path = repo_root().join("guests/testing/widget/host.yaml");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut config: serde_yaml::Value = serde_yaml::from_str(&text)?;
    config["guests"]["hostile"] = serde_yaml::from_str(&format!(
        "{{read: [v1/ConfigMap], write: [v1/ConfigMap], limits: {{deadline: 10s, memoryMiB: {MEMORY_MIB}, cpuMillicores: 200}}}}"
    ))?;
    Ok(serde_yaml::to_string(&config)?)
}

/// The attacks, how many copies of each run at once, and what each copy's result must show.
struct Attack {
    name: &'static str,
    copies: usize,
    check: fn(&BTreeMap<String, String>) -> Option<String>,
}

fn field<'a>(result: &'a BTreeMap<String, String>, key: &str) -> &'a str {
    result.get(key).map_or("", String::as_str)
}

const ATTACKS: &[Attack] = &[
    Attack {
        name: "cost-body-values",
        copies: 2,
        check: |r| {
            (field(r, "outcome") != "invalid"
                || !field(r, "message").starts_with("object: holds more than 262144 JSON values"))
            .then(|| "expected invalid, `object: holds more than 262144 JSON values`".into())
        },
    },
    Attack {
        name: "cost-body-tree",
        copies: 2,
        check: |r| {
            let message = field(r, "message");
            (field(r, "outcome") != "invalid"
                || !message.starts_with("object:")
                || !message.contains("memory cap of 32 MiB"))
            .then(|| "expected invalid, `object: …` naming the memory cap of 32 MiB".into())
        },
    },
    Attack {
        name: "cost-body-heavy",
        copies: 4,
        // Parsed and sent: the API server refuses a ConfigMap of more than 1 MiB of data.
        check: |r| {
            (field(r, "outcome") != "invalid" || field(r, "message").starts_with("object:"))
                .then(|| "expected the API server's invalid, after the host sent the body".into())
        },
    },
    Attack {
        name: "cost-list-all",
        copies: 1,
        check: |r| {
            let message = field(r, "message");
            (field(r, "outcome") != "unavailable"
                || !message.contains("memory cap of 32 MiB")
                || !message.contains("label selector"))
            .then(|| "expected unavailable, naming the memory cap and a label selector".into())
        },
    },
    Attack {
        name: "cost-list-part",
        copies: 4,
        check: |r| {
            (field(r, "outcome") != "ok" || !field(r, "detail").starts_with("items=10 "))
                .then(|| "expected ok with the 10 objects of part a".into())
        },
    },
    Attack {
        name: "cost-selector-slow",
        copies: 2,
        check: |r| {
            (field(r, "outcome") != "ok" || field(r, "detail") != "lists=3 items=0")
                .then(|| "expected ok, `lists=3 items=0`".into())
        },
    },
];

/// The host process's pid: the process whose command line names this host's configuration.
fn host_pid(host: &HostProcess) -> Result<u32> {
    let config = host.dir.path().join("host.yaml");
    let wanted = config.to_string_lossy().into_owned();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(pid) = entry?.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        if cmdline
            .split(|b| *b == 0)
            .any(|arg| arg == wanted.as_bytes())
        {
            return Ok(pid);
        }
    }
    bail!("no process runs with --config {wanted}")
}

/// A `/proc/<pid>/status` field in KiB (`VmRSS:`, `VmHWM:`).
fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

async fn create_all(api: &Api<ConfigMap>, objects: Vec<Value>) -> Result<()> {
    futures::stream::iter(objects)
        .map(|object| async move {
            let object: ConfigMap = serde_json::from_value(object)?;
            api.create(&PostParams::default(), &object).await?;
            Ok::<_, anyhow::Error>(())
        })
        .buffer_unordered(16)
        .try_collect::<()>()
        .await
}

/// The objects the lists read: large ConfigMaps in four parts, and many small ones.
async fn fill(api: &Api<ConfigMap>) -> Result<()> {
    let filler = "x".repeat(LARGE_BYTES);
    let parts = ["a", "b", "c", "d"];
    let large = (0..LARGE)
        .map(|i| {
            json!({
                "metadata": {"name": format!("large-{i:02}"), "labels": {"cost.reconciler.dev/part": parts[i % 4]}},
                "data": {"filler": filler},
            })
        })
        .collect();
    create_all(api, large).await?;
    let small = (0..SMALL)
        .map(|i| {
            json!({
                "metadata": {"name": format!("small-{i:04}"), "labels": {"cost.reconciler.dev/filler": "true"}},
                "data": {"n": i.to_string()},
            })
        })
        .collect();
    create_all(api, small).await
}

#[tokio::test]
async fn a_guest_attacking_within_its_grant_costs_the_host_no_more_than_its_limits() -> Result<()> {
    let cp = ControlPlane::shared().await?;
    let client = cp.client().await?;
    apply_crd_file(&client, "guests/testing/widget/crd.yaml").await?;
    let ns = test_namespace(&client, "costs").await?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    fill(&config_maps).await?;

    // glibc gives each thread that allocates its own arena (up to 8 per core), and an arena
    // keeps the most it ever held: without a cap on arenas, the host's resident memory after
    // many threads took turns holding a guest's (bounded) bodies and lists grows with the core
    // count, not with what the guest holds. Two arenas, as the deployment should set too.
    let host = HostProcess::start_with_env(
        HostOptions {
            kubeconfig: cp.kubeconfig(),
            config: config()?,
            guests: vec!["hostile", "widget"],
            namespace: Some(&ns),
            extra_args: vec![],
        },
        &[("MALLOC_ARENA_MAX", "2")],
    )
    .await?;
    wait_until(
        "the host's caches to sync",
        Duration::from_secs(120),
        || host.get("/readyz"),
    )
    .await
    .map_err(|e| e.context(host.log_tail()))?;
    let widget_api = widgets(&client, &ns);
    create_widget(&widget_api, "w-before").await?;
    widgets_converged(&client, &ns, &["w-before"], &host).await?;

    // The baseline: resident memory with every object cached, then the peak reset, so the peak
    // read after the attacks is theirs (Linux >= 4.0: `5` to clear_refs resets VmHWM).
    let pid = host_pid(&host)?;
    let before_kib = status_kib(pid, "VmRSS:")?;
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")
        .context("resetting the host's peak resident memory")?;

    for attack in ATTACKS {
        let objects = (0..attack.copies)
            .map(|i| {
                json!({
                    "metadata": {"name": format!("{}-{i}", attack.name), "labels": {ATTACK_LABEL: "cost"}},
                    "data": {"attack": attack.name, "repeat-ms": "100"},
                })
            })
            .collect();
        create_all(&config_maps, objects).await?;
    }
    // The widget guest keeps converging while the attacks run.
    create_widget(&widget_api, "w-during").await?;
    let mut sampled_kib = 0;
    let started = std::time::Instant::now();
    while started.elapsed() < ATTACK_TIME {
        sampled_kib = sampled_kib.max(status_kib(pid, "VmRSS:")?);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    widgets_converged(&client, &ns, &["w-before", "w-during"], &host).await?;
    let peak_kib = status_kib(pid, "VmHWM:")?.max(sampled_kib);
    let grown_mib = peak_kib.saturating_sub(before_kib) >> 10;
    eprintln!(
        "host resident memory: {} MiB before the attacks, peak {} MiB during them (+{grown_mib} MiB; bound +{} MiB)",
        before_kib >> 10,
        peak_kib >> 10,
        bound_mib()
    );

    let mut failures = Vec::new();
    for attack in ATTACKS {
        let name = format!("result-{}-0", attack.name);
        let result = wait_until(
            &format!("{name} written"),
            Duration::from_secs(60),
            || async {
                config_maps
                    .get_opt(&name)
                    .await?
                    .map(|cm| cm.data.unwrap_or_default())
                    .context("not yet")
            },
        )
        .await
        .map_err(|e| e.context(host.log_tail()))?;
        if let Some(problem) = (attack.check)(&result) {
            failures.push(format!("{}: {problem}; observed {result:?}", attack.name));
        }
    }
    assert_eq!(host.get("/healthz").await?.trim(), "ok");

    if grown_mib > bound_mib() {
        failures.push(format!(
            "the host's resident memory grew by {grown_mib} MiB under attack, more than the bound of {} MiB ((concurrency + 1) x memory cap + 64)",
            bound_mib()
        ));
    }
    assert!(
        failures.is_empty(),
        "the host's costs were not charged to the guest:\n{}",
        failures.join("\n")
    );
    Ok(())
}
