//! Test guest for the host: reconciles `test.reconciler.dev/v1` `Widget` (see `crd.yaml`), and
//! does whatever the object's `spec` asks, so a test can drive every host path (traps,
//! timeouts, memory caps, retries, reads, writes, events, the queue) with one object.
//!
//! The steps run in this order; every `spec` field is optional:
//!
//! 1. object gone: log `gone`, done. `deleting`: event `Normal Finalized`, done.
//! 2. `journal: true`: log (info) `journal begin <namespace>/<name> generation=<g> version=<v>`
//!    (the generation the guest was given, the guest build's `VERSION`); then, whatever the
//!    outcome of the steps below, `journal end <namespace>/<name> generation=<g>` as the last
//!    thing before returning (followed by ` failed: <reason>` on an error). The sharding test rebuilds from these lines
//!    when each replica reconciled each key; a trap, a timeout or a cancelled reconcile leaves
//!    a `begin` without its `end`. With `mode: sleep` the interval is at least `sleepMs` long.
//! 3. `trapPercent: p`: this attempt panics with probability p/100 (the robustness suite's
//!    "a fraction of reconciles trap"; the retry with backoff then usually succeeds).
//!    `mode`: `trap` panics, `loop` spins forever, `hog` allocates without bound, `sleep`
//!    busy-waits `sleepMs` and carries on, `print` reads stdin to its end, writes a line to
//!    stdout and one to stderr, and carries on. Any other mode is a permanent error.
//! 4. `failTimes: n`: attempts `0..n` fail transiently. `permanentError: text`: permanent error.
//! 5. `get: {group, version, kind, namespace?, name}` / `list: {group, version, kind,
//!    namespace?, labelSelector?}`: read through the lister; the outcome goes to the status.
//! 6. Status merge patch: `observedGeneration`, `reconciles` (+1), `lastAttempt`,
//!    `guestVersion`, `message`, `get`, `list`; with `env: [names]` also `env`, each name's
//!    value as `std::env::var` reads it from the grant's `env` (null when unset); with
//!    `leakKiB: n` also `instanceCalls` (reconciles this instance ran), and n KiB more kept for
//!    the instance's life at each (`leakKiB: 0` only counts). Any failure is transient. With
//!    `optimisticStatus: true` the patch carries the resourceVersion read, so a concurrent
//!    change of the object makes it fail with a conflict (409).
//! 7. `configMap: true`: apply `ConfigMap` `<name>-widget` owned by the Widget.
//! 8. Event `Normal Reconciled` "reconcile n"; `enqueue: [names]` (after `enqueueAfterMs`).
//! 9. Done, requeued after `requeueAfterMs` if set.
//!
//! Two fields change the steps above, for rollout tests (two versions side by side):
//! - `byVersion: {"<VERSION>": {...}}`: the fields under this build's `VERSION` replace the
//!   spec's own before any step (`{"2": {"permanentError": "v2 cannot"}}` fails only in v2).
//! - `steady: true`: the status is only `observedGeneration` and `message`, so every version
//!   and every repeat writes the same; the event's reason is `ReconciledByVersion<VERSION>`
//!   (events are not compared in shadow, so they tell the versions apart; the reason, not the
//!   note, as the host's recorder folds events of one reason on one object into a series).
//!
//! Its manifest asks for `generation_changed_only`: status, label and annotation writes do not
//! wake it (its own status write would otherwise wake it for ever, the counter being new each
//! time); spec changes, deletion, its `ConfigMap`s, requeues and the queue do.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reconciler_guest::k8s_openapi::api::core::v1::ConfigMap;
use reconciler_guest::k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ObjectMeta, OwnerReference,
};
use reconciler_guest::serde_json::{self, Value, json};
use reconciler_guest::{
    Action, Guest, Gvk, HostError, Manifest, Mapping, ObjectKey, ObjectRef, ReconcileError,
    Request, cluster, event, gvk, info, lister, permanent, queue, transient,
};
use serde::Deserialize;

/// Reported in `status.guestVersion`; hot-reload tests swap `widget.wasm` for `widget-v2.wasm`.
pub const VERSION: &str = if cfg!(feature = "v2") { "2" } else { "1" };

struct Widget;

/// The version its primary kind is declared at (`widget-beta`: another version of one kind).
const PRIMARY_VERSION: &str = if cfg!(feature = "beta") {
    "v1beta1"
} else {
    "v1"
};

impl Guest for Widget {
    fn manifest() -> Manifest {
        Manifest::new(
            "widget",
            gvk!("test.reconciler.dev", PRIMARY_VERSION, "Widget"),
        )
        .watches(gvk!("", "v1", "ConfigMap"), Mapping::Owner)
        .finalizer("test.reconciler.dev/cleanup")
        .concurrency(2)
        // Its status counts reconciles, so every status write is new: without this, the
        // write would wake it again, for ever.
        .generation_changed_only()
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(object) = req.object_value()? else {
            info!("gone");
            return Ok(Action::await_change());
        };
        // Before parsing the spec, so that a Widget with a malformed spec can still be deleted.
        if req.deleting {
            event::normal(&req.ref_, "Finalized", "cleanup done");
            return Ok(Action::await_change());
        }
        let widget: WidgetObject = serde_json::from_value(for_this_version(object))
            .map_err(|e| permanent(format!("{} does not parse: {e}", req.ref_)))?;
        if !widget.spec.journal {
            return reconcile_spec(&req, &widget);
        }
        let key = format!(
            "{}/{}",
            req.ref_.namespace.as_deref().unwrap_or_default(),
            req.ref_.name
        );
        let generation = widget.metadata.generation.unwrap_or_default();
        info!("journal begin {key} generation={generation} version={VERSION}");
        let result = reconcile_spec(&req, &widget);
        match &result {
            Ok(_) => info!("journal end {key} generation={generation}"),
            Err(e) => info!(
                "journal end {key} generation={generation} failed: {}",
                e.message()
            ),
        }
        result
    }
}

reconciler_guest::export!(Widget);

/// The object with `spec.byVersion[VERSION]`'s fields in place of the spec's own.
fn for_this_version(mut object: Value) -> Value {
    let overrides = object
        .pointer(&format!("/spec/byVersion/{VERSION}"))
        .and_then(Value::as_object)
        .cloned();
    if let (Some(overrides), Some(spec)) = (overrides, object["spec"].as_object_mut()) {
        spec.extend(overrides);
    }
    object
}

/// Steps 3 to 9: what the spec asks for, then the status.
fn reconcile_spec(req: &Request, widget: &WidgetObject) -> Result<Action, ReconcileError> {
    let spec = &widget.spec;

    if let Some(percent) = spec.trap_percent
        && random_percent() < percent
    {
        panic!("widget traps on {percent}% of attempts (spec.trapPercent)");
    }
    run_mode(spec, &req.ref_.name)?;

    if let Some(n) = spec.fail_times
        && req.attempt < n
    {
        return Err(transient(format!(
            "attempt {} of {n} fails on purpose",
            req.attempt
        )));
    }
    if let Some(text) = &spec.permanent_error {
        return Err(permanent(text.clone()));
    }

    let get = spec.get.as_ref().map(|g| {
        let target = ObjectRef {
            kind: Gvk::new(&g.group, &g.version, &g.kind),
            namespace: g.namespace.clone(),
            name: g.name.clone(),
        };
        match lister::get(&target) {
            Ok(Some(_)) => json!("found"),
            Ok(None) => json!("absent"),
            Err(e) => json!(e.describe()),
        }
    });
    let list = spec.list.as_ref().map(|l| {
        let kind = Gvk::new(&l.group, &l.version, &l.kind);
        match lister::list(&kind, l.namespace.as_deref(), l.label_selector.as_deref()) {
            Ok(objects) => json!(objects.len()),
            Err(e) => json!(e.describe()),
        }
    });

    let reconciles = widget
        .status
        .as_ref()
        .and_then(|s| s.get("reconciles"))
        .and_then(Value::as_u64)
        .unwrap_or(0)
        + 1;
    if spec.steady {
        return steady(req, widget);
    }
    let mut status = json!({
        "observedGeneration": widget.metadata.generation,
        "reconciles": reconciles,
        "lastAttempt": req.attempt,
        "guestVersion": VERSION,
        "message": spec.message,
        "get": get,
        "list": list,
    });
    if !spec.env.is_empty() {
        status["env"] = environment(&spec.env);
    }
    if spec.leak_kib.is_some() {
        status["instanceCalls"] = json!(instance_calls(spec.leak_kib));
    }
    let written = if spec.optimistic_status {
        // With the resourceVersion read, the server refuses the write (409) if the object
        // changed since: the conflict path of the host.
        let patch = json!({
            "metadata": {"resourceVersion": widget.metadata.resource_version},
            "status": status,
        });
        cluster::patch_status_raw(&req.ref_, &patch.to_string()).map(|_| ())
    } else {
        cluster::patch_status(&req.ref_, &status).map(|_| ())
    };
    written.map_err(|e| match e {
        HostError::Conflict(_) => transient(format!("status write conflicted: {}", e.describe())),
        _ => transient(e.describe()),
    })?;

    if spec.config_map {
        cluster::apply(&owned_config_map(&req.ref_, &widget.metadata))?;
    }

    event::normal(&req.ref_, "Reconciled", format!("reconcile {reconciles}"));

    let after = spec.enqueue_after_ms.map(Duration::from_millis);
    for name in &spec.enqueue {
        queue::enqueue(&ObjectKey::new(req.ref_.namespace.as_deref(), name), after)?;
    }

    Ok(Action {
        requeue_after_ms: spec.requeue_after_ms,
    })
}

/// Step 6 to 9 with `steady`: the same status whatever the version and the repeat.
fn steady(req: &Request, widget: &WidgetObject) -> Result<Action, ReconcileError> {
    let status = json!({
        "observedGeneration": widget.metadata.generation,
        "message": widget.spec.message,
    });
    cluster::patch_status(&req.ref_, &status).map_err(|e| transient(e.describe()))?;
    event::normal(
        &req.ref_,
        &format!("ReconciledByVersion{VERSION}"),
        "reconciled",
    );
    Ok(Action {
        requeue_after_ms: widget.spec.requeue_after_ms,
    })
}

#[derive(Deserialize)]
struct WidgetObject {
    metadata: ObjectMeta,
    #[serde(default)]
    spec: WidgetSpec,
    #[serde(default)]
    status: Option<Value>,
}

// A test's switchboard: each flag turns one host path on.
#[allow(clippy::struct_excessive_bools)]
#[derive(Deserialize, Default, Debug, PartialEq)]
#[serde(rename_all = "camelCase", default)]
struct WidgetSpec {
    mode: Option<String>,
    trap_percent: Option<u64>,
    sleep_ms: Option<u64>,
    fail_times: Option<u32>,
    permanent_error: Option<String>,
    get: Option<GetSpec>,
    list: Option<ListSpec>,
    message: Option<String>,
    config_map: bool,
    enqueue: Vec<String>,
    enqueue_after_ms: Option<u64>,
    requeue_after_ms: Option<u64>,
    optimistic_status: bool,
    #[serde(rename = "leakKiB")]
    leak_kib: Option<usize>,
    journal: bool,
    env: Vec<String>,
    steady: bool,
    /// Read by `for_this_version` before the spec is parsed.
    #[serde(rename = "byVersion")]
    _by_version: Option<Value>,
}

#[derive(Deserialize, Debug, PartialEq)]
struct GetSpec {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
    namespace: Option<String>,
    name: String,
}

#[derive(Deserialize, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
struct ListSpec {
    #[serde(default)]
    group: String,
    version: String,
    kind: String,
    namespace: Option<String>,
    label_selector: Option<String>,
}

fn owned_config_map(widget: &ObjectRef, meta: &ObjectMeta) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{}-widget", widget.name)),
            namespace: widget.namespace.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: widget.kind.api_version(),
                kind: widget.kind.kind.clone(),
                name: widget.name.clone(),
                uid: meta.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([("owner".to_owned(), widget.name.clone())])),
        ..ConfigMap::default()
    }
}

/// Step 2: what `spec.mode` asks for.
fn run_mode(spec: &WidgetSpec, name: &str) -> Result<(), ReconcileError> {
    match spec.mode.as_deref() {
        None => {}
        Some("trap") => panic!("widget was asked to trap"),
        Some("loop") => spin_forever(),
        Some("hog") => hog_memory(),
        Some("sleep") => busy_wait(Duration::from_millis(spec.sleep_ms.unwrap_or(0))),
        Some("print") => {
            let mut input = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut input)
                .map_err(|e| transient(format!("reading stdin: {e}")))?;
            println!("widget {name} read {} bytes of stdin", input.len());
            eprintln!("widget {name} printed to stderr");
        }
        Some(other) => {
            return Err(permanent(format!(
                "spec.mode {other:?} is not one of trap, loop, hog, sleep, print"
            )));
        }
    }
    Ok(())
}

/// Step 6's `env`: each name's value as std reads the environment the host gave the instance.
fn environment(names: &[String]) -> Value {
    names
        .iter()
        .map(|name| {
            (
                name.clone(),
                std::env::var(name).ok().map_or(Value::Null, Value::String),
            )
        })
        .collect::<serde_json::Map<_, _>>()
        .into()
}

/// How many reconciles this instance has run, this one included; with `leakKiB`, each keeps
/// that much memory for the instance's life. A fresh instance per reconcile always says 1; an
/// instance reused by the host's `instanceReuse` counts up, and leaks up to its memory cap.
fn instance_calls(leak_kib: Option<usize>) -> u64 {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    static KEPT: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());
    if let Some(kib) = leak_kib {
        KEPT.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(vec![0x5A; kib << 10]);
    }
    CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1
}

/// 0..100 from the random source the host gives the guest (std's hasher keys come from it).
fn random_percent() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
        % 100
}

fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn hog_memory() -> ! {
    let mut chunks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Non-zero bytes so every page is really written, not just reserved.
        chunks.push(std::hint::black_box(vec![0xA5; 1 << 20]));
    }
}

fn busy_wait(d: Duration) {
    let start = Instant::now();
    while start.elapsed() < d {
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_reads_camel_case_fields_and_defaults_the_rest() {
        let spec: WidgetSpec = serde_json::from_value(json!({
            "failTimes": 2, "configMap": true, "enqueue": ["b"], "requeueAfterMs": 50,
            "journal": true,
            "list": {"version": "v1", "kind": "ConfigMap", "labelSelector": "a=b"}
        }))
        .unwrap();
        assert_eq!(spec.fail_times, Some(2));
        assert!(spec.config_map && spec.journal);
        assert_eq!(spec.enqueue, ["b"]);
        assert_eq!(spec.requeue_after_ms, Some(50));
        let list = spec.list.unwrap();
        assert_eq!(
            (list.group.as_str(), list.label_selector.as_deref()),
            ("", Some("a=b"))
        );
        assert_eq!(
            serde_json::from_value::<WidgetSpec>(json!({})).unwrap(),
            WidgetSpec::default()
        );
    }

    #[test]
    fn owned_config_map_points_back_at_the_widget() {
        let widget = ObjectRef::namespaced(gvk!("test.reconciler.dev", "v1", "Widget"), "ns", "w");
        let meta = ObjectMeta {
            uid: Some("u-1".into()),
            ..ObjectMeta::default()
        };
        let cm = serde_json::to_value(owned_config_map(&widget, &meta)).unwrap();
        assert_eq!(cm["apiVersion"], "v1");
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(cm["metadata"]["name"], "w-widget");
        assert_eq!(cm["metadata"]["namespace"], "ns");
        assert_eq!(cm["data"], json!({"owner": "w"}));
        assert_eq!(
            cm["metadata"]["ownerReferences"][0],
            json!({"apiVersion": "test.reconciler.dev/v1", "kind": "Widget", "name": "w",
                   "uid": "u-1", "controller": true})
        );
    }
}
