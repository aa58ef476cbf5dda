//! `reconciler-host rollout`: where a Reconciler's rollout stands (step, share, each gate with
//! its current values and its limit), and a person's promote, pause or abort, written as the
//! object's `reconciler.dev/rollout` annotation (`crate::supply::rollout::ASK_ANNOTATION`),
//! which every host serving the object reads. The annotation names the version and, for a
//! promote, the step, so an annotation left in place acts once.

use std::fmt::Write as _;

use anyhow::{Context, bail};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::config::{Gates, Rollout};
use crate::supply::reconcilers::spec::{self, Spec};
use crate::supply::rollout::{ASK_ANNOTATION, Action, Ask};

#[derive(clap::Args)]
pub(crate) struct RolloutArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Where the rollout stands: phase, step, share, and each gate with both versions' values.
    Status(Target),
    /// The next step now, whatever the gates say (a pause step ends here).
    Promote(Target),
    /// Stay at the current share until a promote or an abort (the gates are still judged).
    Pause(Target),
    /// The old version takes every key back; the new digest is not tried again until the
    /// spec changes.
    Abort(Target),
}

#[derive(clap::Args)]
struct Target {
    /// The `ClusterReconciler`'s name (with --namespace, the `Reconciler`'s).
    name: String,
    /// A namespaced Reconciler's namespace.
    #[arg(short, long)]
    namespace: Option<String>,
}

pub(crate) async fn rollout(args: RolloutArgs) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("cannot build a Kubernetes client (KUBECONFIG or in-cluster service account)")?;
    let (target, action) = match args.what {
        What::Status(target) => (target, None),
        What::Promote(target) => (target, Some(Action::Promote)),
        What::Pause(target) => (target, Some(Action::Pause)),
        What::Abort(target) => (target, Some(Action::Abort)),
    };
    let api: Api<DynamicObject> = match &target.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &spec::namespaced_resource()),
        None => Api::all_with(client, &spec::api_resource()),
    };
    let object = api
        .get(&target.name)
        .await
        .with_context(|| format!("cannot read {}", described(&target)))?;
    let rollout = object.data.pointer("/status/rollout").cloned();
    let Some(action) = action else {
        print!("{}", status(&target, &object, rollout.as_ref()));
        return Ok(());
    };
    let ask = ask(action, rollout.as_ref()).with_context(|| described(&target))?;
    let patch = json!({"metadata": {"annotations": {ASK_ANNOTATION: ask.to_string()}}});
    api.patch(&target.name, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .with_context(|| format!("cannot annotate {}", described(&target)))?;
    println!(
        "{}: asked `{ask}` ({ASK_ANNOTATION}); `reconciler-host rollout status` follows it",
        described(&target)
    );
    Ok(())
}

fn described(target: &Target) -> String {
    match &target.namespace {
        Some(ns) => format!("Reconciler {ns}/{}", target.name),
        None => format!("ClusterReconciler {}", target.name),
    }
}

/// The ask `action` makes of the rollout as its status stands.
fn ask(action: Action, rollout: Option<&Value>) -> anyhow::Result<Ask> {
    let Some(rollout) = rollout else {
        bail!("no rollout: the status has none (is spec.rollout set, and did the module change?)");
    };
    let phase = rollout["phase"].as_str().unwrap_or_default();
    if !matches!(phase, "Progressing" | "Paused") {
        bail!("the rollout is over ({phase}): nothing to {action:?}");
    }
    let to = rollout["to"]
        .as_str()
        .context("status.rollout has no `to`")?;
    let step = rollout["step"]
        .as_u64()
        .and_then(|s| usize::try_from(s).ok())
        .context("status.rollout has no `step`")?;
    let began = rollout["began"]
        .as_str()
        .context("status.rollout has no `began` (a host older than this command wrote it)")?;
    Ok(Ask {
        action,
        to: to.to_owned(),
        step: (action == Action::Promote).then_some(step),
        began: began.to_owned(),
    })
}

/// kubectl-like lines: the rollout, then a table of gates (values per version, the limit).
fn status(target: &Target, object: &DynamicObject, rollout: Option<&Value>) -> String {
    let mut out = format!("{}\n", described(target));
    let Some(rollout) = rollout else {
        out.push_str("No rollout in its status (none began under this spec).\n");
        return out;
    };
    let plan = Spec::of(object)
        .ok()
        .and_then(|spec| spec.grant.rollout)
        .unwrap_or_else(|| Rollout {
            steps: Vec::new(),
            gates: Gates::default(),
        });
    let text = |v: &Value| v.as_str().map_or_else(|| v.to_string(), str::to_owned);
    let step = rollout["step"].as_u64().unwrap_or(0);
    for (name, value) in [
        ("Phase", text(&rollout["phase"])),
        (
            "Step",
            format!("{} of {}", step + 1, plan.steps.len().max(1)),
        ),
        ("Share", text(&rollout["share"])),
        ("From", text(&rollout["from"])),
        ("To", text(&rollout["to"])),
        ("Step began", text(&rollout["stepStarted"])),
        ("Message", text(&rollout["message"])),
    ] {
        if value != "null" && !value.is_empty() {
            let _ = writeln!(out, "{name:<12}{value}");
        }
    }
    let (new, old) = (&rollout["gates"]["new"], &rollout["gates"]["old"]);
    let gates = &plan.gates;
    let number = |v: &Value, digits: usize| {
        v.as_f64()
            .map_or_else(|| "-".to_owned(), |f| format!("{f:.digits$}"))
    };
    let rows = [
        (
            "reconciles",
            number(&new["reconciles"], 0),
            number(&old["reconciles"], 0),
            format!("each >= {} before any gate", gates.min_sample),
        ),
        (
            "errorRate",
            number(&new["errorRate"], 3),
            number(&old["errorRate"], 3),
            format!("new <= old + {}", gates.max_error_rate_increase),
        ),
        (
            "agreement",
            match (new["agreed"].as_u64(), new["compared"].as_u64()) {
                (Some(a), Some(c)) => format!("{} ({a}/{c})", number(&new["agreement"], 3)),
                _ => "-".to_owned(),
            },
            "-".to_owned(),
            format!(">= {} (shadow)", gates.min_agreement),
        ),
        (
            "p99",
            ms(&new["p99Ms"]),
            ms(&old["p99Ms"]),
            format!(
                "new <= max({} x old, old + {})",
                gates.max_p99_ratio,
                humantime::format_duration(gates.p99_slack)
            ),
        ),
    ];
    let _ = writeln!(out, "\n{:<12}{:<18}{:<12}LIMIT", "GATE", "NEW", "OLD");
    for (gate, new, old, limit) in rows {
        let _ = writeln!(out, "{gate:<12}{new:<18}{old:<12}{limit}");
    }
    if let Some(evidence) = new["evidence"].as_array().filter(|e| !e.is_empty()) {
        let paths: Vec<String> = evidence.iter().map(text).collect();
        let _ = write!(out, "\nDiffering   {}\n", paths.join(", "));
    }
    out
}

fn ms(value: &Value) -> String {
    value
        .as_f64()
        .map_or_else(|| "-".to_owned(), |ms| format!("{ms:.1}ms"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ask_names_the_version_and_a_promote_its_step() {
        let rollout = json!({"phase": "Progressing", "to": "sha256:abc", "step": 2,
                             "began": "2026-12-07T20:00:00Z"});
        let promote = ask(Action::Promote, Some(&rollout)).unwrap();
        assert_eq!(
            promote.to_string(),
            "promote sha256:abc 2 2026-12-07T20:00:00Z"
        );
        assert_eq!(promote.to_string().parse::<Ask>().unwrap(), promote);
        assert_eq!(
            ask(Action::Abort, Some(&rollout)).unwrap().to_string(),
            "abort sha256:abc 2026-12-07T20:00:00Z"
        );
        let over = json!({"phase": "RolledBack", "to": "sha256:abc", "step": 0});
        let refused = ask(Action::Promote, Some(&over)).unwrap_err().to_string();
        assert!(refused.contains("over (RolledBack)"), "{refused}");
        assert!(ask(Action::Pause, None).is_err());
    }

    #[test]
    fn the_status_shows_each_gate_with_both_versions_and_its_limit() {
        let mut object = DynamicObject::new("greeter", &spec::api_resource());
        let module = format!("oci://r.example/g@sha256:{}", "b".repeat(64));
        object.data = json!({"spec": {"module": module,
            "rollout": {"steps": [{"shadow": {}}, {"pause": {}}], "gates": {"minSample": 20}}}});
        let rollout = json!({"phase": "Progressing", "step": 1, "share": "shadow",
            "from": "sha256:a", "to": "sha256:b", "message": "paused until a person promotes or aborts",
            "gates": {"new": {"reconciles": 40, "errorRate": 0.0, "compared": 40, "agreed": 38,
                              "agreement": 0.95, "p99Ms": 12.5, "evidence": ["status.message (2)"]},
                      "old": {"reconciles": 40, "errorRate": 0.025, "p99Ms": 10.0}}});
        let target = Target {
            name: "greeter".into(),
            namespace: None,
        };
        let shown = status(&target, &object, Some(&rollout));
        for line in [
            "Step        2 of 2",
            "Share       shadow",
            "agreement   0.950 (38/40)",
            "p99         12.5ms            10.0ms      new <= max(1.5 x old, old + 5ms)",
            "reconciles  40                40          each >= 20 before any gate",
            "Differing   status.message (2)",
        ] {
            assert!(shown.contains(line), "{line:?} in\n{shown}");
        }
    }
}
