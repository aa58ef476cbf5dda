//! Per-reconcile overhead of the sandbox: a fresh instance per reconcile (store, instantiation
//! from the pool, one call with a ~1 KB object in and one status patch out, drop)
//! against the same logic compiled natively, measured in the same run on the same machine.
//!
//! `cargo bench -p reconciler-host --bench reconcile` (or `./dev bench`). Prints figures; asserts
//! nothing. `BENCH_ITERATIONS` sets the sample size (default 20000). By default it runs the
//! bench guest as built (slimmed by `tools/slim`) and as rustc linked it, interleaved;
//! `BENCH_GUEST=a.wasm:b.wasm` runs other builds instead. `BENCH_PROFILE=wasm` (or `native`)
//! runs only full wasm reconciles of the first guest (or only the native baseline) and prints
//! nothing: for `perf record`.

#[path = "../../guests/testing/bench/src/logic.rs"]
mod logic;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::Grant;
use reconciler_host::sandbox::capabilities::{
    CallContext, Cluster, Enqueuer, GuestContext, Providers,
};
use reconciler_host::sandbox::providers::offline::{MemoryCache, RecordingQueue};
use reconciler_host::sandbox::runtime::{LoadedGuest, Outcome, Request, Runtime, RuntimeOptions};
use serde_json::{Value, json};

mod common;
use common::NullCluster;
use reconciler_host_tests::repo_root;

/// A Widget of about 1 KB, as the API server would send it.
fn object() -> String {
    let items: Vec<String> = (0..24).map(|i| format!("item-{i:03}-abcdef")).collect();
    json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {
            "name": "bench", "namespace": "default", "uid": "8c2a3f0e-0000-4000-8000-000000000001",
            "resourceVersion": "123456", "generation": 7, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "bench", "tier": "backend"},
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "test.reconciler.dev/v1"}]
        },
        "spec": {"items": items, "message": "a typical spec of a typical custom resource"}
    })
    .to_string()
}

/// One wasm reconcile, by phase.
struct Phases {
    total: Duration,
    store: Duration,
    instantiate: Duration,
    call: Duration,
    teardown: Duration,
}

struct Stats {
    median: Duration,
    p99: Duration,
}

// Sample counts are far below 2^52, and a quantile in [0, 1] keeps the index in range.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
fn stats(mut samples: Vec<Duration>) -> Stats {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q) as usize];
    Stats {
        median: at(0.5),
        p99: at(0.99),
    }
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Runs are interleaved in blocks of this many, so all see the same machine conditions while
/// no run starts on the heap garbage of another kind of run (one by one, the store allocation
/// of a wasm run after a native one paid ~1.3 µs for glibc consolidating the native run's
/// freed chunks).
const BLOCK: usize = 100;

// One script, top to bottom: build and load the guests, set up the providers, warm up, run
// interleaved, report; its steps share the closures and fixtures that splitting would thread.
#[allow(clippy::too_many_lines)]
fn main() {
    let status = std::process::Command::new(repo_root().join("guests/build.sh"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run guests/build.sh");
    assert!(status.success(), "guests/build.sh failed");
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20_000);

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let runtime = Runtime::new(&RuntimeOptions {
        cache_dir: Some(repo_root().join("target/bench-compile-cache")),
        ..RuntimeOptions::default()
    })
    .unwrap();
    // Several builds of the bench guest, interleaved in the same run so their figures compare:
    // by default the one the build installs (slimmed by tools/slim) and rustc's original;
    // BENCH_GUEST (paths separated by `:`, relative to the repository root) names others.
    let paths: Vec<PathBuf> = match std::env::var_os("BENCH_GUEST") {
        Some(list) => std::env::split_paths(&list)
            .map(|p| repo_root().join(p))
            .collect(),
        None => vec![
            repo_root().join("target/guests/bench.wasm"),
            repo_root().join("target/guests/unslimmed/bench.wasm"),
        ],
    };
    let guests: Vec<_> = paths
        .iter()
        .map(|path| runtime.load(&std::fs::read(path).unwrap(), path).unwrap())
        .collect();

    let object = object();
    let object_ref = ObjectRef::of_object(&serde_json::from_str(&object).unwrap()).unwrap();
    let returned = json!({"metadata": {"resourceVersion": "123457"}});
    let cluster = Arc::new(NullCluster(returned));
    let providers = Providers {
        lister: Arc::new(MemoryCache::default()),
        cluster: cluster.clone(),
        queue: Arc::new(RecordingQueue::default()) as Arc<dyn Enqueuer>,
        network: None,
        http: None,
    };
    let context = Arc::new(GuestContext::new("bench", Grant::unrestricted(), providers));
    let request = Request {
        object_ref: object_ref.clone(),
        object: Some(object.clone()),
        deleting: false,
        attempt: 0,
    };

    // The object gone: the guest returns at once (no JSON, no host call), so this is the fixed
    // cost of the sandbox alone.
    let empty_request = Request {
        object: None,
        ..request.clone()
    };

    let wasm_once = |guest: &LoadedGuest, request: &Request| {
        let call = CallContext::new(context.clone(), String::new(), Some(rt.handle().clone()));
        // The host hands each reconcile a request it owns (the controller builds one per key).
        let request = request.clone();
        let started = Instant::now();
        let run = runtime.reconcile(guest, call, request);
        let total = started.elapsed();
        assert_eq!(
            run.outcome,
            Outcome::Ok {
                requeue_after_ms: None
            },
            "bench guest failed"
        );
        Phases {
            total,
            store: run.store_time,
            instantiate: run.instantiate_time,
            call: run.call_time,
            teardown: run.teardown_time,
        }
    };
    // The native baseline does what the guest and the host import do together: compute the
    // patch, parse it as the import does, and hand it to the same provider.
    let native_once = || {
        let started = Instant::now();
        let patch = logic::status_patch(&object).unwrap();
        let patch: Value = serde_json::from_str(&patch).unwrap();
        let written = rt
            .block_on(cluster.patch_status("bench", &object_ref, &patch))
            .unwrap();
        std::hint::black_box(written.to_string());
        started.elapsed()
    };

    // For a profiler (`perf record`): only full wasm reconciles of the first guest, or only the
    // native baseline, and no report.
    match std::env::var("BENCH_PROFILE").as_deref() {
        Ok("wasm") => {
            for _ in 0..iterations {
                wasm_once(&guests[0], &request);
            }
            return;
        }
        Ok("native") => {
            for _ in 0..iterations {
                native_once();
            }
            return;
        }
        Ok(other) => panic!("BENCH_PROFILE is `wasm` or `native`, not `{other}`"),
        Err(_) => {}
    }
    for _ in 0..iterations / 10 {
        for guest in &guests {
            wasm_once(guest, &request);
            wasm_once(guest, &empty_request);
        }
        native_once();
    }
    let mut wasm: Vec<Vec<Phases>> = guests
        .iter()
        .map(|_| Vec::with_capacity(iterations))
        .collect();
    let mut empty: Vec<Vec<Duration>> = guests
        .iter()
        .map(|_| Vec::with_capacity(iterations))
        .collect();
    let mut native = Vec::with_capacity(iterations);
    for block in 0..iterations.div_ceil(BLOCK) {
        let runs = BLOCK.min(iterations - block * BLOCK);
        for (i, guest) in guests.iter().enumerate() {
            wasm[i].extend((0..runs).map(|_| wasm_once(guest, &request)));
            empty[i].extend((0..runs).map(|_| wasm_once(guest, &empty_request).total));
        }
        native.extend((0..runs).map(|_| native_once()));
    }
    let n = stats(native);
    println!(
        "reconcile overhead: {iterations} reconciles of a {} B object, one status patch each",
        object.len()
    );
    for ((path, wasm), empty) in paths.iter().zip(wasm).zip(empty) {
        if paths.len() > 1 {
            println!(
                "guest {}",
                path.strip_prefix(repo_root()).unwrap_or(path).display()
            );
        }
        report(&wasm, empty, &n);
    }
}

/// Prints one guest's figures against the native baseline.
fn report(wasm: &[Phases], empty: Vec<Duration>, n: &Stats) {
    let phase = |f: fn(&Phases) -> Duration| stats(wasm.iter().map(f).collect());
    let w = phase(|p| p.total);
    println!(
        "  wasm, fresh instance per reconcile: median {:7.2} µs   p99 {:7.2} µs",
        us(w.median),
        us(w.p99)
    );
    for (name, f) in [
        (
            "store (state, limits)",
            (|p| p.store) as fn(&Phases) -> Duration,
        ),
        ("instantiate (pool slot)", |p| p.instantiate),
        ("call (guest + host import)", |p| p.call),
        ("teardown (slot reset)", |p| p.teardown),
    ] {
        let s = phase(f);
        println!(
            "    {name:<30} median {:7.2} µs   p99 {:7.2} µs",
            us(s.median),
            us(s.p99)
        );
    }
    let e = stats(empty);
    println!(
        "  wasm, fixed cost (empty reconcile): median {:7.2} µs   p99 {:7.2} µs",
        us(e.median),
        us(e.p99)
    );
    println!(
        "  native, same logic:                 median {:7.2} µs   p99 {:7.2} µs",
        us(n.median),
        us(n.p99)
    );
    println!(
        "  ratio wasm/native (median): {:.2}x   sandbox overhead (median): {:.2} µs",
        w.median.as_secs_f64() / n.median.as_secs_f64(),
        us(w.median.saturating_sub(n.median))
    );
    // The ratio is (fixed + work) / native: what the work costs in the sandbox (the full
    // reconcile less the empty one) bounds how much fixed cost a 2x target leaves.
    let work = us(w.median) - us(e.median);
    let budget = 2.0 * us(n.median) - work;
    println!(
        "  the work (full - empty reconcile): {work:.2} µs = {:.2}x native; 2x native leaves {budget:.2} µs for the fixed cost",
        work / us(n.median)
    );
}
