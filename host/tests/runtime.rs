//! The wasmtime half of the host without Kubernetes: loading guests, refusing bad ones, and
//! surviving guests that trap, loop or eat memory. Every failure test then runs a good
//! reconcile on the same runtime, to show the host keeps serving. Last, slimmed guests
//! (`tools/slim`) against rustc's originals.

mod common;

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use reconciler_host::cluster::objects::{Gvk, ObjectRef};
use reconciler_host::config::{Grant, HostConfig, Limits};
use reconciler_host::sandbox::backends::{MemoryBackend, NetworkBackend};
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{
    LoadError, LoadedGuest, Outcome, Request, Runtime, RuntimeOptions,
};
use serde_json::{Value, json};

fn runtime() -> Runtime {
    caching_runtime(&common::cache_dir())
}

fn load(runtime: &Runtime, name: &str) -> LoadedGuest {
    let path = common::guest(name);
    runtime
        .load(&std::fs::read(&path).unwrap(), &path)
        .expect("guest loads")
}

/// Loads a built guest that must be refused; returns why.
fn refused(runtime: &Runtime, name: &str) -> LoadError {
    let path = common::guest(name);
    runtime
        .load(&std::fs::read(&path).unwrap(), &path)
        .expect_err("the guest must be refused")
}

fn widget(name: &str, spec: &Value) -> Value {
    json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "ns", "generation": 1, "uid": "uid-1", "resourceVersion": "10"},
        "spec": spec,
    })
}

struct Harness {
    cache: Arc<MemoryCache>,
    context: Arc<GuestContext>,
}

fn harness(grant: Grant) -> Harness {
    let cache = Arc::new(MemoryCache::default());
    let network = Arc::new(MemoryBackend::new()) as Arc<dyn NetworkBackend>;
    let providers = offline::providers(cache.clone(), Some(network));
    let context = Arc::new(GuestContext::new("widget", grant, providers));
    Harness { cache, context }
}

/// `object` in the cache, its reconcile request, a runtime for the call and a recording context.
fn prepare(h: &Harness, object: &Value) -> (Request, tokio::runtime::Runtime, CallContext) {
    h.cache.put(object.clone());
    let request = Request {
        object_ref: ObjectRef::of_object(object).unwrap(),
        object: Some(object.to_string()),
        deleting: false,
        attempt: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let call =
        CallContext::new(h.context.clone(), "ns/w".into(), Some(rt.handle().clone())).recording();
    (request, rt, call)
}

fn reconcile(
    runtime: &Runtime,
    guest: &LoadedGuest,
    h: &Harness,
    object: &Value,
) -> (Outcome, Vec<reconciler_host::sandbox::capabilities::Call>) {
    let (request, _rt, call) = prepare(h, object); // the runtime lives as long as the call
    let run = runtime.reconcile(guest, call, request);
    (run.outcome, run.calls.unwrap_or_default())
}

fn with_limits(deadline: Duration, memory_mib: u64) -> Grant {
    Grant {
        limits: Limits {
            deadline: Some(deadline),
            memory_mib: Some(memory_mib),
            ..Limits::default()
        },
        ..Grant::unrestricted()
    }
}

/// A plain reconcile on the same runtime succeeds: the host is still serving.
fn assert_still_serving(runtime: &Runtime, guest: &LoadedGuest) {
    let h = harness(Grant::unrestricted());
    let (outcome, calls) = reconcile(
        runtime,
        guest,
        &h,
        &widget("after", &json!({"message": "still here"})),
    );
    assert_eq!(
        outcome,
        Outcome::Ok {
            requeue_after_ms: None
        }
    );
    assert!(
        calls.iter().any(|c| c.function == "patch-status"),
        "{calls:?}"
    );
}

#[test]
fn loads_a_guest_and_reads_its_manifest() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let m = &guest.manifest;
    assert_eq!(m.name, "widget");
    assert_eq!(m.primary, Gvk::new("test.reconciler.dev", "v1", "Widget"));
    assert_eq!(m.secondary.len(), 1);
    assert_eq!(m.secondary[0].kind, Gvk::new("", "v1", "ConfigMap"));
    assert_eq!(m.finalizer.as_deref(), Some("test.reconciler.dev/cleanup"));
    assert_eq!(
        guest.world(),
        "controller",
        "widget uses the controller world"
    );
    assert_eq!(guest.hash.len(), 64);
    let network = load(&runtime, "network");
    assert_eq!(
        network.world(),
        "network-controller",
        "network uses the network-controller world"
    );
}

#[test]
fn a_reconcile_runs_in_a_fresh_instance_and_records_its_calls() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(Grant::unrestricted());
    let (outcome, calls) = reconcile(
        &runtime,
        &guest,
        &h,
        &widget("w", &json!({"requeueAfterMs": 250, "message": "hi"})),
    );
    assert_eq!(
        outcome,
        Outcome::Ok {
            requeue_after_ms: Some(250)
        }
    );
    let patch = calls
        .iter()
        .find(|c| c.function == "patch-status")
        .expect("status patch");
    assert_eq!(patch.args["patch"]["status"]["reconciles"], 1);
    assert_eq!(patch.args["patch"]["status"]["message"], "hi");
    // The cache now holds the written status (read-your-writes within the offline providers),
    // so a second reconcile — a fresh instance, no guest state kept — counts on from it.
    let stored = h
        .cache
        .get(&ObjectRef::of_object(&widget("w", &json!({}))).unwrap())
        .unwrap();
    let (_, calls) = reconcile(&runtime, &guest, &h, &stored);
    let patch = calls.iter().find(|c| c.function == "patch-status").unwrap();
    assert_eq!(patch.args["patch"]["status"]["reconciles"], 2);
}

#[test]
fn a_malformed_file_is_refused_with_its_name_and_reason() {
    let runtime = runtime();
    let err = runtime
        .load(b"\0asm\x01\0\0\0garbage", "bad.wasm".as_ref())
        .unwrap_err();
    assert!(matches!(err, LoadError::Compile { .. }), "{err:?}");
    let message = err.to_string();
    assert!(
        message.starts_with("bad.wasm: not a WebAssembly component"),
        "{message}"
    );
    let err = runtime
        .load(b"hello", "text.wasm".as_ref())
        .unwrap_err()
        .to_string();
    assert!(
        err.starts_with("text.wasm: not a WebAssembly component"),
        "{err}"
    );
    assert_still_serving(&runtime, &load(&runtime, "widget"));
}

#[test]
fn a_component_of_another_world_is_refused() {
    let runtime = runtime();
    let err = refused(&runtime, "wrong-world");
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("does not export reconciler:api/reconciler@0.1.0"),
        "{err}"
    );
}

#[test]
fn a_guest_built_against_another_revision_of_the_contract_is_refused() {
    let runtime = runtime();
    let err = refused(&runtime, "old-contract");
    assert!(matches!(err, LoadError::WrongWorld { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("old-contract.wasm"), "{message}");
    assert!(
        message.contains("export does not match this host's"),
        "{message}"
    );
    // Its manifest is the host's: what is refused is `reconcile`'s signature, which reconciles
    // rely on having been checked here (they do not check it again).
    assert!(
        message.contains("type mismatch with parameters"),
        "{message}"
    );
    assert_still_serving(&runtime, &load(&runtime, "widget"));
}

#[test]
fn no_free_instance_slot_is_a_transient_error_not_a_guest_fault() {
    let runtime = Runtime::new(&RuntimeOptions {
        cache_dir: Some(common::cache_dir()),
        max_instances: 1,
        ..RuntimeOptions::default()
    })
    .unwrap();
    let guest = load(&runtime, "widget");
    std::thread::scope(|scope| {
        // Holds the only slot for 1.5 s.
        let busy = scope.spawn(|| {
            let h = harness(Grant::unrestricted());
            reconcile(
                &runtime,
                &guest,
                &h,
                &widget("busy", &json!({"mode": "sleep", "sleepMs": 1500})),
            )
            .0
        });
        std::thread::sleep(Duration::from_millis(300));
        let h = harness(Grant::unrestricted());
        let (outcome, calls) = reconcile(&runtime, &guest, &h, &widget("w", &json!({})));
        let Outcome::Transient(message) = outcome else {
            panic!("expected a transient error, got {outcome:?}")
        };
        assert!(message.contains("no free instance slot"), "{message}");
        assert!(message.contains("at most 1 guest instances"), "{message}");
        assert!(calls.is_empty(), "the guest did not run: {calls:?}");
        assert_eq!(
            busy.join().unwrap(),
            Outcome::Ok {
                requeue_after_ms: None
            }
        );
    });
    assert_still_serving(&runtime, &guest);
}

#[test]
fn a_trapping_guest_fails_that_reconcile_with_its_panic_message() {
    let runtime = runtime();
    // Slimmed (no stderr) and as linked (stderr): the SDK logs the panic either way.
    for name in ["widget", "unslimmed/widget"] {
        let guest = load(&runtime, name);
        let h = harness(Grant::unrestricted());
        let (outcome, _) = reconcile(&runtime, &guest, &h, &widget("w", &json!({"mode": "trap"})));
        let Outcome::Trap(message) = outcome else {
            panic!("{name}: expected a trap, got {outcome:?}")
        };
        assert!(
            message.contains("guest panicked at") && message.contains("widget was asked to trap"),
            "{name}: {message}"
        );
        assert_still_serving(&runtime, &guest);
    }
}

#[test]
fn a_guest_that_loops_forever_is_interrupted_at_its_deadline() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(with_limits(Duration::from_millis(200), 64));
    let (outcome, _) = reconcile(&runtime, &guest, &h, &widget("w", &json!({"mode": "loop"})));
    let Outcome::Deadline(message) = outcome else {
        panic!("expected a deadline hit, got {outcome:?}")
    };
    assert!(message.contains("deadline of 200ms"), "{message}");
    assert_still_serving(&runtime, &guest);
}

#[test]
fn a_guest_asleep_in_a_wasi_call_is_cancelled_at_its_deadline() {
    // `std::thread::sleep` in the guest: WASI monotonic-clock subscribe + poll, a blocking
    // import that epoch interruption alone cannot interrupt.
    let runtime = runtime();
    let guest = load(&runtime, "hostile");
    let h = harness(with_limits(Duration::from_millis(300), 64));
    let attack = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "sleep", "namespace": "attacker"},
        "data": {"attack": "sleep"},
    });
    let started = std::time::Instant::now();
    let (outcome, _) = reconcile(&runtime, &guest, &h, &attack);
    let took = started.elapsed();
    let Outcome::Deadline(message) = outcome else {
        panic!("expected a deadline hit, got {outcome:?}")
    };
    assert!(message.contains("deadline of 300ms"), "{message}");
    assert!(message.contains("while waiting"), "{message}");
    // The guest asked for 600 s; the reconcile ended at its deadline (generous bound).
    assert!(took < Duration::from_secs(30), "took {took:?}");
    assert_still_serving(&runtime, &load(&runtime, "widget"));
}

#[test]
fn a_guest_that_sleeps_in_its_manifest_is_refused_at_the_load_deadline() {
    let runtime = runtime();
    let started = std::time::Instant::now();
    let err = refused(&runtime, "slow-manifest");
    assert!(
        matches!(err, LoadError::ManifestDeadline { .. }),
        "expected the manifest deadline, got {err}"
    );
    assert!(
        err.to_string().contains("did not return within 5s"),
        "{err}"
    );
    // It asked for 600 s; loading gave up at the deadline (generous bound).
    assert!(started.elapsed() < Duration::from_mins(1));
    // Judged again (a new grant, a new generation of its object): manifest() is not run
    // again, the refusal is remembered with its content, so another party's changes cannot
    // make the host spend the deadline over and over.
    let again = refused(&runtime, "slow-manifest").to_string();
    assert!(
        again.contains("did not return within 5s") && again.contains("remembered"),
        "{again}"
    );
    assert_still_serving(&runtime, &load(&runtime, "widget"));
}

#[test]
fn a_guest_that_allocates_without_bound_hits_its_memory_cap() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(with_limits(Duration::from_secs(10), 16));
    let (outcome, _) = reconcile(&runtime, &guest, &h, &widget("w", &json!({"mode": "hog"})));
    let Outcome::MemoryLimit(message) = outcome else {
        panic!("expected a memory-limit hit, got {outcome:?}")
    };
    assert!(message.contains("cap of 16 MiB"), "{message}");
    assert_still_serving(&runtime, &guest);
}

#[test]
fn a_call_outside_the_grant_returns_denied_to_the_guest() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let config = HostConfig::parse(
        "guests:\n  widget:\n    read: [test.reconciler.dev/v1/Widget, v1/ConfigMap]\n    write: [test.reconciler.dev/v1/Widget/status]\n",
        "host.yaml".as_ref(),
    )
    .unwrap();
    let h = harness(config.grant("widget").unwrap());
    let spec = json!({"get": {"group": "", "version": "v1", "kind": "Secret", "namespace": "ns", "name": "s"}, "configMap": true});
    let (outcome, calls) = reconcile(&runtime, &guest, &h, &widget("w", &spec));
    // The guest saw the denial and carried on: it wrote the text into its status.
    let get = calls.iter().find(|c| c.interface == "lister").unwrap();
    assert_eq!(
        get.returned["error"]["denied"],
        "guest `widget` may not read v1/Secret: add it to guests.widget.read in the host configuration"
    );
    let patch = calls.iter().find(|c| c.function == "patch-status").unwrap();
    assert!(
        patch.args["patch"]["status"]["get"]
            .as_str()
            .unwrap()
            .starts_with("denied: "),
        "{patch:?}"
    );
    // Applying a ConfigMap needs a write grant it does not have: the guest's call fails.
    let apply = calls.iter().find(|c| c.function == "apply").unwrap();
    assert!(
        apply.returned["error"]["denied"]
            .as_str()
            .unwrap()
            .contains("may not write v1/ConfigMap"),
        "{apply:?}"
    );
    // The SDK maps `denied` to a permanent error: retrying cannot help until the grant changes.
    let Outcome::Permanent(message) = outcome else {
        panic!("expected a permanent error, got {outcome:?}")
    };
    assert!(message.contains("may not write v1/ConfigMap"), "{message}");
}

#[test]
fn the_compile_cache_is_keyed_by_content_and_reused() {
    let dir = tempfile::tempdir().unwrap();
    let path = common::guest("widget");
    let bytes = std::fs::read(&path).unwrap();
    let first = caching_runtime(dir.path()).load(&bytes, &path).unwrap();
    let entries = cache_entries(dir.path());
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert!(entries[0].to_string_lossy().starts_with(&first.hash));
    // A second engine maps the cached artefact and gets the same guest.
    let second = caching_runtime(dir.path()).load(&bytes, &path).unwrap();
    assert_eq!(second.manifest, first.manifest);
    assert_eq!(cache_entries(dir.path()).len(), 1);
}

#[test]
fn concurrent_loads_of_the_same_guest_share_a_cold_compile_cache() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = caching_runtime(dir.path());
    let path = common::guest("bench");
    let bytes = std::fs::read(&path).unwrap();
    // Each load compiles and writes the same cache entry at the same time.
    std::thread::scope(|s| {
        let loads: Vec<_> = (0..4)
            .map(|_| s.spawn(|| runtime.load(&bytes, &path)))
            .collect();
        for load in loads {
            let guest = load
                .join()
                .unwrap()
                .expect("every concurrent load succeeds");
            assert_eq!(guest.manifest.name, "bench");
        }
    });
    let entries = cache_entries(dir.path());
    assert_eq!(
        entries.len(),
        1,
        "one entry, no temporary files left: {entries:?}"
    );
}

#[test]
fn a_compile_cache_that_cannot_be_written_does_not_refuse_the_guest() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = caching_runtime(dir.path());
    let path = common::guest("bench");
    let bytes = std::fs::read(&path).unwrap();
    let guest = runtime.load(&bytes, &path).unwrap();
    // Put a directory where the entry goes: it can be neither read nor replaced.
    let entry = dir.path().join(&cache_entries(dir.path())[0]);
    std::fs::remove_file(&entry).unwrap();
    std::fs::create_dir(&entry).unwrap();
    let again = runtime
        .load(&bytes, &path)
        .expect("compiled without the cache");
    assert_eq!(again.hash, guest.hash);
    assert!(entry.is_dir());
}

/// A runtime whose compile cache is `dir`.
fn caching_runtime(dir: &Path) -> Runtime {
    Runtime::new(&RuntimeOptions {
        cache_dir: Some(dir.to_owned()),
        ..RuntimeOptions::default()
    })
    .unwrap()
}

/// The file names in a compile cache directory.
/// The compile cache's entries (and any leftover temporary file), without its `.key`.
fn cache_entries(dir: &Path) -> Vec<std::ffi::OsString> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name != ".key")
        .collect()
}

// Slimmed guests (tools/slim). guests/build.sh slims every Rust guest; the linker's originals
// are in target/guests/unslimmed/.

/// A component's imports, without versions (`wasi:io/streams`).
fn imports(runtime: &Runtime, component: &[u8]) -> BTreeSet<String> {
    let component = wasmtime::component::Component::new(runtime.engine(), component).unwrap();
    component
        .component_type()
        .imports(runtime.engine())
        .map(|(name, _)| name.split('@').next().unwrap().to_owned())
        .collect()
}

#[test]
fn slimming_drops_exactly_the_wasi_stdio_imports() {
    let runtime = runtime();
    let original = std::fs::read(common::guest("unslimmed/widget")).unwrap();
    let slimmed = reconciler_slim::slim(&original).unwrap();
    assert_eq!(slimmed.kept, None);
    let (before, after) = (
        imports(&runtime, &original),
        imports(&runtime, &slimmed.component),
    );
    let gone: BTreeSet<String> = before.difference(&after).cloned().collect();
    let stdio = reconciler_slim::STDIO
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(gone, stdio);
    assert!(after.is_subset(&before), "{after:?}");
    for kept in [
        "reconciler:api/cluster",
        "wasi:cli/environment",
        "wasi:clocks/wall-clock",
    ] {
        assert!(after.contains(kept), "{kept} missing from {after:?}");
    }
    // Among them what the widget's `print` mode calls (reading stdin, writing stdout).
    for stub in [
        "wasi:io/streams#[method]input-stream.blocking-read",
        "wasi:io/streams#[method]output-stream.write",
        "wasi:cli/stdout#get-stdout",
    ] {
        assert!(
            slimmed.removed.iter().any(|r| r == stub),
            "{stub} not in {:?}",
            slimmed.removed
        );
    }
    // What the build installs is this tool's output.
    assert_eq!(
        slimmed.component,
        std::fs::read(common::guest("widget")).unwrap()
    );
}

#[test]
fn a_slimmed_guest_reconciles_as_the_original_does() {
    let runtime = runtime();
    let spec = json!({"message": "same", "configMap": true, "enqueue": ["other"]});
    let runs: Vec<_> = ["widget", "unslimmed/widget"]
        .iter()
        .map(|name| {
            let guest = load(&runtime, name);
            let (outcome, calls) = reconcile(
                &runtime,
                &guest,
                &harness(Grant::unrestricted()),
                &widget("w", &spec),
            );
            let called: Vec<_> = calls.iter().map(|c| (c.interface, c.function)).collect();
            (outcome, called)
        })
        .collect();
    assert_eq!(
        runs[0].0,
        Outcome::Ok {
            requeue_after_ms: None
        }
    );
    assert!(runs[0].1.contains(&("cluster", "apply")), "{:?}", runs[0].1);
    assert_eq!(runs[0], runs[1]);
}

#[test]
fn a_slimmed_guest_that_reads_stdin_and_prints_carries_on() {
    let runtime = runtime();
    for name in ["widget", "unslimmed/widget"] {
        let guest = load(&runtime, name);
        let h = harness(Grant::unrestricted());
        let (outcome, calls) = reconcile(
            &runtime,
            &guest,
            &h,
            &widget("w", &json!({"mode": "print"})),
        );
        assert_eq!(
            outcome,
            Outcome::Ok {
                requeue_after_ms: None
            },
            "{name}"
        );
        assert!(
            calls.iter().any(|c| c.function == "patch-status"),
            "{name}: {calls:?}"
        );
    }
}

#[test]
fn slimming_leaves_a_component_of_another_shape_as_it_is() {
    // componentize-py links CPython as several core modules.
    let greeter = std::fs::read(common::guest("greeter-python")).unwrap();
    let slimmed = reconciler_slim::slim(&greeter).unwrap();
    let reason = slimmed.kept.expect("left as it is");
    assert!(reason.contains("core modules"), "{reason}");
    assert!(slimmed.removed.is_empty());
    assert!(slimmed.component == greeter);
}

#[test]
fn slimming_refuses_what_is_not_a_component() {
    let core_module = b"\0asm\x01\0\0\0";
    let error = reconciler_slim::slim(core_module).err().expect("refused");
    assert_eq!(error.to_string(), "not a WebAssembly component");
}

/// One reconcile through the reuse path: its outcome, whether it ran in a kept instance, and
/// the `instanceCalls` the widget guest reported (how many reconciles its instance has run).
fn reconcile_reusing(
    runtime: &Runtime,
    guest: &LoadedGuest,
    h: &Harness,
    object: &Value,
    warm: &mut Option<reconciler_host::sandbox::runtime::Warm>,
    reuse: reconciler_host::sandbox::runtime::Reuse,
) -> (Outcome, bool, Option<u64>) {
    let (request, rt, call) = prepare(h, object);
    let run = rt.block_on(runtime.reconcile_reusing(guest, call, request, warm, Some(reuse)));
    let calls = run
        .calls
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.function == "patch-status")
        .and_then(|c| c.args["patch"]["status"]["instanceCalls"].as_u64());
    (run.outcome, run.reused, calls)
}

fn reuse(uses: u32, idle: Duration) -> reconciler_host::sandbox::runtime::Reuse {
    reconciler_host::sandbox::runtime::Reuse { uses, idle }
}

#[test]
fn a_reused_instance_serves_n_reconciles_then_a_fresh_one_starts() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(Grant::unrestricted());
    let object = widget("w", &json!({"leakKiB": 0}));
    let mut warm = None;
    let mut seen = Vec::new();
    for _ in 0..7 {
        let (outcome, reused, calls) = reconcile_reusing(
            &runtime,
            &guest,
            &h,
            &object,
            &mut warm,
            reuse(3, Duration::from_mins(1)),
        );
        assert!(matches!(outcome, Outcome::Ok { .. }), "{outcome:?}");
        seen.push((reused, calls));
    }
    // State survives between reconciles of one instance (the counter), for 3 at most.
    let expected = [1, 2, 3, 1, 2, 3, 1].map(|n| (n > 1, Some(n)));
    assert_eq!(seen, expected);
}

#[test]
fn a_trap_or_a_deadline_drops_the_kept_instance() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(with_limits(Duration::from_millis(300), 64));
    let policy = reuse(100, Duration::from_mins(1));
    let mut warm = None;
    let good = widget("w", &json!({"leakKiB": 0}));
    for bad in [json!({"mode": "trap"}), json!({"mode": "loop"})] {
        let (_, _, calls) = reconcile_reusing(&runtime, &guest, &h, &good, &mut warm, policy);
        assert_eq!(calls, Some(1));
        let (_, reused, calls) = reconcile_reusing(&runtime, &guest, &h, &good, &mut warm, policy);
        assert!(reused && calls == Some(2), "kept after a good reconcile");
        let (outcome, reused, _) =
            reconcile_reusing(&runtime, &guest, &h, &widget("w", &bad), &mut warm, policy);
        assert!(reused, "the bad reconcile ran in the kept instance");
        assert!(
            matches!(outcome, Outcome::Trap(_) | Outcome::Deadline(_)),
            "{outcome:?}"
        );
        assert!(warm.is_none(), "a failed instance is never kept");
        let (outcome, reused, calls) =
            reconcile_reusing(&runtime, &guest, &h, &good, &mut warm, policy);
        assert!(matches!(outcome, Outcome::Ok { .. }), "{outcome:?}");
        assert!(!reused && calls == Some(1), "a fresh instance after {bad}");
        warm = None;
    }
}

#[test]
fn the_memory_cap_holds_over_a_kept_instances_whole_life() {
    let runtime = runtime();
    let guest = load(&runtime, "widget");
    let h = harness(with_limits(Duration::from_secs(5), 8));
    let policy = reuse(1000, Duration::from_mins(1));
    let mut warm = None;
    // 1 MiB kept per reconcile against an 8 MiB cap: fine in a fresh instance, a cap hit
    // after a few reuses.
    let leaky = widget("w", &json!({"leakKiB": 1024}));
    let mut outcomes = Vec::new();
    for _ in 0..12 {
        let (outcome, _, _) = reconcile_reusing(&runtime, &guest, &h, &leaky, &mut warm, policy);
        outcomes.push(outcome);
    }
    let hit = outcomes
        .iter()
        .position(|o| matches!(o, Outcome::MemoryLimit(_)))
        .unwrap_or_else(|| panic!("no memory-cap hit in {outcomes:?}"));
    assert!(hit > 1, "the first reconciles fit: {outcomes:?}");
    assert!(
        matches!(outcomes[hit + 1], Outcome::Ok { .. }),
        "a fresh instance after the cap hit: {outcomes:?}"
    );
    assert_still_serving(&runtime, &guest);
}

#[test]
fn no_reuse_across_versions_or_after_the_idle_time() {
    let runtime = runtime();
    let v1 = load(&runtime, "widget");
    let v2 = load(&runtime, "widget-v2");
    let h = harness(Grant::unrestricted());
    let object = widget("w", &json!({"leakKiB": 0}));
    let mut warm = None;
    let policy = reuse(100, Duration::from_millis(200));
    let (_, _, first) = reconcile_reusing(&runtime, &v1, &h, &object, &mut warm, policy);
    let (_, reused, second) = reconcile_reusing(&runtime, &v1, &h, &object, &mut warm, policy);
    assert_eq!((first, reused, second), (Some(1), true, Some(2)));
    // Another version never runs in v1's instance.
    let (_, reused, calls) = reconcile_reusing(&runtime, &v2, &h, &object, &mut warm, policy);
    assert_eq!((reused, calls), (false, Some(1)));
    // Idle longer than the policy allows: a fresh instance.
    std::thread::sleep(Duration::from_millis(300));
    let (_, reused, calls) = reconcile_reusing(&runtime, &v2, &h, &object, &mut warm, policy);
    assert_eq!((reused, calls), (false, Some(1)));
}

/// A guest built from the contract as `reconciler:api@0.1.0` was before the `http-controller`
/// world was added (a frozen copy of the WIT) loads and reconciles on today's host, slimmed or
/// as rustc linked it.
#[test]
fn a_guest_built_for_the_first_contract_still_loads_and_reconciles() {
    let runtime = runtime();
    for name in ["contract-0-1-0", "unslimmed/contract-0-1-0"] {
        let guest = load(&runtime, name);
        assert_eq!(guest.world(), "controller", "{name}");
        assert_eq!(guest.manifest.name, "contract-0-1-0");
        let h = harness(Grant::unrestricted());
        let object = widget("old", &json!({}));
        let (outcome, calls) = reconcile(&runtime, &guest, &h, &object);
        assert_eq!(
            outcome,
            Outcome::Ok {
                requeue_after_ms: None
            },
            "{name}"
        );
        assert!(
            calls.iter().any(|c| c.function == "patch-status"),
            "{calls:?}"
        );
        let written = h
            .cache
            .get(&ObjectRef::of_object(&object).unwrap())
            .unwrap();
        assert_eq!(written["status"]["contract"], "0.1.0", "{name}: {written}");
    }
}
