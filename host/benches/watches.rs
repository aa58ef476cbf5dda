//! What each mapping of the `watches` export costs the host, in one run:
//!
//! - **field index**: the bytes an index holds per primary object (a counting allocator, with
//!   one value and with four list values per primary) and the time to find the primaries of one
//!   event, against the baseline without an index: a pass over every primary reading its field;
//! - **map function**: one call of the mapper guest's `map` (a fresh instance, the object's JSON
//!   in, keys out) against one reconcile of the same guest on the same machine, and against the
//!   owner-reference mapping the host does natively;
//! - **computed index against map**, config-reloader's case (primaries list, in a field the
//!   guest must parse, the `ConfigMap`s they read): a `ConfigMap` event mapped by the guest's
//!   `map` (a fresh instance listing the namespace's primaries and keeping those that list it,
//!   what config-reloader's first version did) against the same event looked up in a computed
//!   index, side by side per event; and what the index costs instead, one `index` call per
//!   primary change.
//!
//! `cargo bench -p reconciler-host --bench watches` (or `./dev bench watches`); needs the guests
//! built (`./dev build`). `BENCH_PRIMARIES` (default 100,000) primaries, `BENCH_CALLS` (default
//! 300) map calls and reconciles, interleaved; `BENCH_LISTING` (default 100) primaries in the
//! namespace of the computed-index comparison. Prints figures; asserts nothing.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use kube::api::{ApiResource, DynamicObject};
use reconciler_host::cluster::objects::{Gvk, ObjectKey, ObjectRef};
use reconciler_host::config::Grant;
use reconciler_host::controller::{FieldIndex, Held};
use reconciler_host::sandbox::capabilities::{CallContext, GuestContext};
use reconciler_host::sandbox::providers::offline::{self, MemoryCache};
use reconciler_host::sandbox::runtime::{
    Indexed, LoadedGuest, Mapped, Outcome, Request, Runtime, RuntimeOptions,
};
use reconciler_host_tests::repo_root;
use serde_json::json;

/// Counts live heap bytes: the index's memory is what it allocates.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to the system allocator; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

/// `n` Mirror-like primaries over 50 namespaces, each naming a source and `targets` namespaces.
fn primaries(n: usize, targets: usize) -> Vec<(ObjectKey, DynamicObject)> {
    let resource = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    (0..n)
        .map(|i| {
            let namespace = format!("team-{}", i % 50);
            let name = format!("mirror-{i}");
            let mut object = DynamicObject::new(&name, &resource).within(&namespace);
            let names: Vec<String> = (0..targets)
                .map(|t| format!("target-{}", (i + t) % 500))
                .collect();
            object.data =
                json!({"spec": {"source": format!("source-{i}"), "targetNamespaces": names}});
            (ObjectKey::namespaced(namespace, name), object)
        })
        .collect()
}

#[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)] // figures for printing
fn bench_index(n: usize) {
    println!("field index over {n} primaries (50 namespaces)");
    for (path, targets) in [("spec.source", 1), ("spec.targetNamespaces[*]", 4)] {
        let objects = primaries(n, targets);
        let before = LIVE.load(Ordering::Relaxed);
        let index = FieldIndex::parse(path).unwrap();
        let started = Instant::now();
        for (key, object) in &objects {
            index.update(key, Some(object));
        }
        let built = started.elapsed();
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        // One event's lookup, against scanning every primary's field for the value.
        let probes: Vec<String> = (0..200)
            .map(|i| {
                if targets == 1 {
                    format!("source-{}", i * (n / 200))
                } else {
                    format!("target-{}", i % 500)
                }
            })
            .collect();
        let started = Instant::now();
        let mut found = 0;
        for probe in &probes {
            found += index.lookup(probe, None).len();
        }
        let lookup = started.elapsed() / probes.len() as u32;
        // The baseline: what finding them costs without an index, a pass over every primary
        // reading the field natively (serde_json pointers, no conversion).
        let started = Instant::now();
        let mut scanned = 0;
        let scan_probes = &probes[..20];
        for probe in scan_probes {
            scanned += objects
                .iter()
                .filter(|(_, object)| {
                    let spec = &object.data["spec"];
                    if targets == 1 {
                        spec["source"].as_str() == Some(probe.as_str())
                    } else {
                        spec["targetNamespaces"]
                            .as_array()
                            .is_some_and(|a| a.iter().any(|v| v.as_str() == Some(probe.as_str())))
                    }
                })
                .count();
        }
        let scan = started.elapsed() / scan_probes.len() as u32;
        println!(
            "  {path:<26} {:>6.1} bytes/primary ({} entries, {:.1} MiB), built in {:>6.1} ms; \
             lookup {:>8.2} µs/event, scan {:>9.2} µs/event: the index is {:.0}x faster \
             ({found} and {scanned} keys found)",
            bytes as f64 / n as f64,
            index.len(),
            bytes as f64 / f64::from(1 << 20),
            built.as_secs_f64() * 1e3,
            lookup.as_secs_f64() * 1e6,
            scan.as_secs_f64() * 1e6,
            scan.as_secs_f64() / lookup.as_secs_f64().max(1e-12),
        );
    }
}

/// The mapper test guest loaded, with an in-memory cache behind its lister.
struct Mapper {
    runtime: Runtime,
    loaded: LoadedGuest,
    cache: Arc<MemoryCache>,
    context: Arc<GuestContext>,
}

impl Mapper {
    fn load() -> Self {
        let runtime = Runtime::new(&RuntimeOptions::default()).unwrap();
        let path = repo_root().join("target/guests/mapper.wasm");
        let bytes = std::fs::read(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; build the guests first (./dev build)",
                path.display()
            )
        });
        let loaded = runtime.load(&bytes, &path).unwrap();
        let grant: Grant = serde_yaml::from_str(
            "read: [test.reconciler.dev/v1/Widget, v1/ConfigMap, v1/Namespace]\nwrite: [v1/ConfigMap, test.reconciler.dev/v1/Widget/status]\nlimits: {deadline: 60s}\n",
        )
        .unwrap();
        let cache = Arc::new(MemoryCache::default());
        let context = Arc::new(GuestContext::new(
            "mapper",
            grant,
            offline::providers(cache.clone(), None),
        ));
        Self {
            runtime,
            loaded,
            cache,
            context,
        }
    }
}

fn bench_map(calls: usize) {
    let Mapper {
        runtime,
        loaded,
        cache,
        context,
    } = Mapper::load();
    let widget = json!({
        "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team", "generation": 1, "uid": "u", "resourceVersion": "1"},
        "spec": {},
    });
    cache.put(widget.clone());
    let pointer = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "ptr", "namespace": "team", "uid": "p", "resourceVersion": "1",
                     "labels": {"mapper.test/role": "pointer"},
                     "annotations": {"mapper.test/widgets": "team/w team/other"}},
        "data": {"value": "x"},
    });
    let kind = Gvk::new("", "v1", "ConfigMap");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let call = || CallContext::new(context.clone(), "bench".into(), Some(rt.handle().clone()));
    let owner: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "c", "namespace": "team", "ownerReferences": [
            {"apiVersion": "test.reconciler.dev/v1", "kind": "Widget", "name": "w", "uid": "u"}]},
    }))
    .unwrap();
    let (mut maps, mut reconciles, mut natives) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..calls {
        let started = Instant::now();
        let mapped = runtime.map(&loaded, call(), &kind, pointer.to_string());
        maps.push(started.elapsed());
        assert!(
            matches!(&mapped, Mapped::Keys { keys, .. } if keys.len() == 2),
            "{mapped:?}"
        );
        let request = Request {
            object_ref: ObjectRef::of_object(&widget).unwrap(),
            object: Some(widget.to_string()),
            deleting: false,
            attempt: 0,
        };
        let started = Instant::now();
        let run = runtime.reconcile(&loaded, call(), request);
        reconciles.push(started.elapsed());
        assert!(
            matches!(run.outcome, Outcome::Ok { .. }),
            "{:?}",
            run.outcome
        );
        // The owner-reference mapping the host does itself, for scale.
        let started = Instant::now();
        let keys: Vec<&str> = owner
            .metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.kind == "Widget")
            .map(|o| o.name.as_str())
            .collect();
        std::hint::black_box(keys);
        natives.push(started.elapsed());
    }
    let (map, reconcile, native) = (median(maps), median(reconciles), median(natives));
    println!("map function, median of {calls} calls interleaved with reconciles of the same guest");
    println!(
        "  map {:>8.1} µs/event, reconcile {:>8.1} µs: a map call costs {:.2}x a reconcile; \
         the owner-reference mapping {:.3} µs ({:.0}x less than map)",
        map.as_secs_f64() * 1e6,
        reconcile.as_secs_f64() * 1e6,
        map.as_secs_f64() / reconcile.as_secs_f64(),
        native.as_secs_f64() * 1e6,
        map.as_secs_f64() / native.as_secs_f64().max(1e-12),
    );
}

/// A `ConfigMap` event of config-reloader's kind: through `map` (a fresh instance that lists the
/// namespace's `listing` Widgets and keeps those whose `spec.listed` names it) against a lookup
/// in the computed index the host keeps from `index` calls, and the `index` call a Widget's
/// change costs instead.
#[allow(clippy::cast_precision_loss)] // figures for printing
fn bench_computed(calls: usize, listing: usize) {
    let Mapper {
        runtime,
        loaded,
        cache,
        context,
    } = Mapper::load();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let call = || CallContext::new(context.clone(), "bench".into(), Some(rt.handle().clone()));
    // `listing` Widgets in one namespace, each listing two of 20 ConfigMaps.
    let index = FieldIndex::parse("spec.listed").unwrap();
    let mut widgets = Vec::new();
    for i in 0..listing {
        let widget = json!({
            "apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
            "metadata": {"name": format!("w-{i}"), "namespace": "team", "uid": format!("u{i}"),
                         "resourceVersion": "1", "generation": 1},
            "spec": {"listed": format!("cm-{}, cm-{}", i % 20, (i + 7) % 20)},
        });
        cache.put(widget.clone());
        let key = ObjectKey::namespaced("team", format!("w-{i}"));
        match runtime.index(&loaded, call(), "listed", widget.to_string()) {
            Indexed::Values { values, .. } => assert_eq!(index.set(&key, values), Held::More),
            failed @ Indexed::Failed { .. } => panic!("{failed:?}"),
        }
        widgets.push(widget);
    }
    let listed = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "cm-3", "namespace": "team", "uid": "c", "resourceVersion": "1",
                     "labels": {"mapper.test/role": "listed"}},
        "data": {"value": "x"},
    });
    let kind = Gvk::new("", "v1", "ConfigMap");
    let (mut maps, mut lookups, mut calls_of_index) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..calls {
        let started = Instant::now();
        let mapped = runtime.map(&loaded, call(), &kind, listed.to_string());
        maps.push(started.elapsed());
        let started = Instant::now();
        let found = index.lookup("cm-3", Some("team"));
        lookups.push(started.elapsed());
        let Mapped::Keys { keys, .. } = &mapped else {
            panic!("{mapped:?}")
        };
        assert_eq!(keys.len(), found.len(), "map and the index disagree");
        let widget = &widgets[i % widgets.len()];
        let started = Instant::now();
        let values = runtime.index(&loaded, call(), "listed", widget.to_string());
        calls_of_index.push(started.elapsed());
        assert!(matches!(values, Indexed::Values { ref values, .. } if values.len() == 2));
    }
    let (map, lookup, index_call) = (median(maps), median(lookups), median(calls_of_index));
    let found = index.lookup("cm-3", Some("team")).len();
    println!(
        "computed index against map, config-reloader's case: {listing} primaries in the namespace, \
         each listing 2 of 20 ConfigMaps ({found} list the one that changes); median of {calls}"
    );
    println!(
        "  per ConfigMap event: map {:>8.1} µs, computed-index lookup {:>6.2} µs ({:.0}x less); \
         per primary change: one index call {:>8.1} µs ({:.2}x a map call)",
        map.as_secs_f64() * 1e6,
        lookup.as_secs_f64() * 1e6,
        map.as_secs_f64() / lookup.as_secs_f64().max(1e-12),
        index_call.as_secs_f64() * 1e6,
        index_call.as_secs_f64() / map.as_secs_f64(),
    );
}

fn main() {
    bench_index(env("BENCH_PRIMARIES", 100_000));
    bench_map(env("BENCH_CALLS", 300));
    bench_computed(env("BENCH_CALLS", 300), env("BENCH_LISTING", 100));
}
