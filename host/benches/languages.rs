//! The greeter in every language the project builds guests in, side by side: component size,
//! first compile (no compile cache), load on a compile-cache hit, and per-reconcile p50/p99 for
//! the same work (a ~1 KB Widget in, one status patch and one event out), with a fresh instance
//! per reconcile and with `instanceReuse: 100`, each also as a ratio to Rust's fresh p50 measured
//! in the same run.
//!
//! `cargo bench -p reconciler-host --bench languages`. Prints a Markdown table (the one in
//! `docs/performance.md`); asserts nothing. `BENCH_ITERATIONS` sets the reconciles per guest
//! (default 2000). The Rust greeter is `reconciler-host new --lang rust`'s scaffold, built into
//! `target/bench-greeters/` (the repository's own Rust guests use the SDK and do other work); the
//! others are `guests/build.sh`'s `greeter-python`, `greeter-js`, `greeter-c`, `greeter-go`, and
//! `greeter-go-preinit`, the same Go source pre-initialised at build time (its own row: Go's
//! init already done in the snapshot each fresh instance starts from).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use reconciler_host::cli::scaffold::{self, Language};
use reconciler_host::cluster::objects::ObjectRef;
use reconciler_host::config::Grant;
use reconciler_host::sandbox::capabilities::{CallContext, Enqueuer, GuestContext, Providers};
use reconciler_host::sandbox::providers::offline::{MemoryCache, RecordingQueue};
use reconciler_host::sandbox::runtime::{Outcome, Request, Reuse, Runtime, RuntimeOptions, Warm};
use serde_json::json;

mod common;
use common::NullCluster;
use reconciler_host_tests::repo_root;

fn run(command: &mut std::process::Command, what: &str) {
    let status = command
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(status.success(), "{what} failed");
}

/// Builds the Rust scaffold's greeter (its cargo target directory is kept, so this is quick
/// after the first time).
fn rust_greeter() -> PathBuf {
    let dir = repo_root().join("target/bench-greeters/rust");
    let _ = std::fs::remove_dir_all(&dir);
    scaffold::write(Language::Rust, "greeter", &dir).unwrap();
    run(
        std::process::Command::new(dir.join("build.sh")).env(
            "CARGO_TARGET_DIR",
            repo_root().join("target/bench-greeters/rust-target"),
        ),
        "building the Rust scaffold",
    );
    dir.join("greeter.wasm")
}

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

// Sample counts are far below 2^52, and a quantile in [0, 1] keeps the index in range.
#[allow(
    clippy::cast_precision_loss,
    clippy::cast_possible_truncation,
    clippy::cast_sign_loss
)]
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    sorted[((sorted.len() as f64 - 1.0) * q) as usize]
}

// One script, top to bottom (build, load, measure, print), like benches/reconcile.rs.
#[allow(clippy::too_many_lines, clippy::cast_precision_loss)]
fn main() {
    run(
        &mut std::process::Command::new(repo_root().join("guests/build.sh")),
        "guests/build.sh",
    );
    let iterations: usize = std::env::var("BENCH_ITERATIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000);
    let guests = [
        ("Rust", rust_greeter()),
        ("C", repo_root().join("target/guests/greeter-c.wasm")),
        (
            "JavaScript (QuickJS)",
            repo_root().join("target/guests/greeter-js.wasm"),
        ),
        ("Go", repo_root().join("target/guests/greeter-go.wasm")),
        (
            "Go, pre-initialised",
            repo_root().join("target/guests/greeter-go-preinit.wasm"),
        ),
        (
            "Python",
            repo_root().join("target/guests/greeter-python.wasm"),
        ),
    ];

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let object = object();
    let object_ref = ObjectRef::of_object(&serde_json::from_str(&object).unwrap()).unwrap();
    let providers = Providers {
        lister: Arc::new(MemoryCache::default()),
        cluster: Arc::new(NullCluster(
            json!({"metadata": {"resourceVersion": "123457"}}),
        )),
        queue: Arc::new(RecordingQueue::default()) as Arc<dyn Enqueuer>,
        network: None,
        http: None,
    };
    let context = Arc::new(GuestContext::new(
        "greeter",
        Grant::unrestricted(),
        providers,
    ));
    let request = Request {
        object_ref,
        object: Some(object.clone()),
        deleting: false,
        attempt: 0,
    };

    println!(
        "greeter per language: {iterations} reconciles each of a {} B Widget (one status patch, one event), fresh instance per reconcile",
        object.len()
    );
    println!();
    println!(
        "| language | component | first compile | load, compile-cache hit | reconcile p50 | reconcile p99 | p50 vs Rust | reused instance p50 | reused p99 | reused p50 vs Rust fresh |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    // Rust's fresh p50, the denominator of every ratio (the first row measures it).
    let mut rust_fresh: Option<Duration> = None;
    let reuse = Reuse {
        uses: 100,
        idle: Duration::from_mins(1),
    };
    for (language, path) in &guests {
        let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let cache = tempfile::tempdir().unwrap();

        // First compile: no cache to hit (and none written, so the next step compiles again).
        let uncached = Runtime::new(&RuntimeOptions::default()).unwrap();
        let started = Instant::now();
        uncached.load(&bytes, path).unwrap();
        let compile = started.elapsed();

        // A host restart with a warm cache: a new runtime over the directory one load filled.
        let options = RuntimeOptions {
            cache_dir: Some(cache.path().to_owned()),
            ..RuntimeOptions::default()
        };
        Runtime::new(&options).unwrap().load(&bytes, path).unwrap();
        let runtime = Runtime::new(&options).unwrap();
        let started = Instant::now();
        let guest = runtime.load(&bytes, path).unwrap();
        let cached = started.elapsed();

        let once = || {
            let call = CallContext::new(context.clone(), String::new(), Some(rt.handle().clone()));
            let started = Instant::now();
            let run = runtime.reconcile(&guest, call, request.clone());
            let took = started.elapsed();
            assert_eq!(
                run.outcome,
                Outcome::Ok {
                    requeue_after_ms: None
                },
                "{language}"
            );
            took
        };
        for _ in 0..iterations / 10 {
            once();
        }
        let mut samples: Vec<Duration> = (0..iterations).map(|_| once()).collect();
        samples.sort();

        // The same reconciles with `instanceReuse: 100`: one instance per 100.
        let mut warm = None;
        let reused = |warm: &mut Option<Warm>| {
            let call = CallContext::new(context.clone(), String::new(), Some(rt.handle().clone()));
            let started = Instant::now();
            let run = rt.block_on(runtime.reconcile_reusing(
                &guest,
                call,
                request.clone(),
                warm,
                Some(reuse),
            ));
            let took = started.elapsed();
            assert!(matches!(run.outcome, Outcome::Ok { .. }), "{language}");
            took
        };
        for _ in 0..iterations / 10 {
            reused(&mut warm);
        }
        let mut kept: Vec<Duration> = (0..iterations).map(|_| reused(&mut warm)).collect();
        kept.sort();

        let p50 = quantile(&samples, 0.5);
        let rust = *rust_fresh.get_or_insert(p50);
        let ratio = |d: Duration| d.as_secs_f64() / rust.as_secs_f64();
        println!(
            "| {language} | {:.0} KB | {:.2} s | {:.1} ms | {:.0} µs | {:.0} µs | {:.1}x | {:.0} µs | {:.0} µs | {:.1}x |",
            bytes.len() as f64 / 1024.0,
            compile.as_secs_f64(),
            cached.as_secs_f64() * 1e3,
            p50.as_secs_f64() * 1e6,
            quantile(&samples, 0.99).as_secs_f64() * 1e6,
            ratio(p50),
            quantile(&kept, 0.5).as_secs_f64() * 1e6,
            quantile(&kept, 0.99).as_secs_f64() * 1e6,
            ratio(quantile(&kept, 0.5)),
        );
    }
}
