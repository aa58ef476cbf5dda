//! Test guest: an attacker. It reconciles `v1` `ConfigMap`s labelled
//! `hostile.reconciler.dev/attack` (the manifest's label selector); each one names one attack in
//! `data.attack` (and the victim namespace in `data.victim`, default `victim`). The guest performs
//! that attack through the imports, with raw bindings rather than the SDK's typed wrappers so
//! that every field can carry any string, and records what the host answered by applying
//! `ConfigMap` `result-<name>` in its own namespace:
//! `data: {attack, outcome, message, detail}`, where `outcome` is the WIT error's name
//! (`invalid`, `denied`, `unavailable`, `not-found`, `conflict`, `other`), `ok` when the host
//! let the call through, or what a resource attack observed. `tests/tests/hostile.rs` reads the
//! results from the API server and checks the victims there. With `data.repeat-ms` the attack
//! runs again after that delay, for as long as the object exists (the controller bench's
//! hostile neighbour, `host/benches/controller.rs`).
//!
//! The manifest names no namespace: the host's `--watch-namespace` confines it (the tests run it
//! with one), and the namespace of the `ConfigMap` being reconciled is "its own" namespace below.
//! Its result `ConfigMap`s carry no label, so writing one wakes nothing.
//!
//! | `data.attack` | what it does | what the host must answer |
//! |---|---|---|
//! | `ns-path-delete`, `ns-path-patch-status`, `ns-path-get` | `cluster.delete` / `patch-status` / `lister.get` of `ConfigMap keep` in namespace `<victim>/secrets/topsecret?x=` (a URL path smuggled through the namespace) | `invalid`, `ref.namespace: ...` |
//! | `ns-path-list` | `lister.list` of `ConfigMap`s in that namespace | `invalid`, `namespace: ...` |
//! | `name-slash`, `name-dotdot`, `name-query`, `name-fragment`, `name-percent`, `name-empty`, `name-long` | `cluster.delete` of a `ConfigMap` in its own namespace named `../../<victim>/secrets/topsecret`, `..`, `keep?dryRun=All`, `keep#x`, `%2e%2e`, `""` (a delete-collection URL), 254 bytes | `invalid`, `ref.name: ...` |
//! | `name-newline` | `lister.get` of `keep\nX-Injected: 1` | `invalid`, `ref.name: ...` |
//! | `gvk-group-path`, `gvk-version-path`, `gvk-kind-path` | `cluster.delete` / `lister.get` with group `x/../../api`, version `v1/namespaces/<victim>/secrets/topsecret#`, kind `Secret/../ConfigMap` | `invalid`, `ref.kind.group` / `.version` / `.kind: ...` |
//! | `list-group-path` | `lister.list` with group `x/../../api` | `invalid`, `kind.group: ...` |
//! | `delete-secret`, `get-secret`, `list-secrets` | `Secret topsecret` in the victim namespace (not granted) | `denied` |
//! | `apply-secret` | apply a `Secret` in its own namespace (not granted) | `denied` |
//! | `apply-victim-configmap`, `delete-victim-configmap`, `patch-status-victim` | `ConfigMap`s in the victim namespace (outside `--watch-namespace`) | `denied` |
//! | `get-victim-configmap`, `list-everywhere` | reads of `ConfigMap`s in the victim namespace / in all namespaces | `ok`, but nothing from the victim namespace (`detail` lists what was seen) |
//! | `delete-no-namespace`, `apply-no-namespace` | a `ConfigMap` (namespaced) named without a namespace | `invalid`, `ref.namespace: ... is namespaced ...` |
//! | `apply-finalizer-orphan`, `apply-finalizer-foreign` | apply with `metadata.finalizers: ["orphan"]` / `["example.com/not-mine"]` (it declares none) | `invalid`, `object.metadata.finalizers: ...` |
//! | `apply-namespace-path`, `apply-name-path`, `apply-api-version-path`, `apply-generate-name` | apply with `metadata.namespace: "a/b"`, `metadata.name: "../../<victim>/secrets/topsecret"`, `apiVersion: "x/../../api/v1"`, only `generateName` | `invalid`, `object.namespace` / `object.name` / `object.apiVersion` / `object.metadata.name: ...` |
//! | `apply-not-object`, `apply-bad-json` | apply of `[]` / of truncated JSON | `invalid`, `object: ...` |
//! | `apply-oversized`, `apply-deep` | apply of a 4 MiB body / of a body nested 101 deep | `invalid`, `object: ...` |
//! | `patch-oversized`, `patch-deep` | `patch-status` of its own `ConfigMap` with a 4 MiB / 101-deep patch | `invalid`, `patch: ...` |
//! | `event-victim-configmap`, `event-victim-secret` | events about `ConfigMap keep` / `Secret topsecret` in the victim namespace | `denied` |
//! | `event-reason-newline`, `event-regarding-path` | an event with reason `Synced\nForged`, about a namespace smuggling a path | `invalid`, `event.reason` / `event.regarding.namespace: ...` |
//! | `event-flood` | 100 events about its own `ConfigMap` | `unavailable` beyond the event rate (`detail`: counts) |
//! | `enqueue-delay-over`, `enqueue-delay-max` | `queue.enqueue` with `after-ms` 86,400,001 / `u64::MAX` | `invalid`, `after-ms: ...` |
//! | `enqueue-empty-name`, `enqueue-name-path` | keys named `""` / `../x` | `invalid`, `key.name: ...` |
//! | `enqueue-victim`, `enqueue-no-namespace` | keys in the victim namespace / with none | `invalid`, `key.namespace: ...` |
//! | `enqueue-flood` | 10,050 keys, each delayed by an hour | `unavailable` past 10,000 pending keys (`detail`: counts) |
//! | `selector-bad`, `selector-control`, `selector-huge` | `lister.list` with selector `a in (`, one with a NUL, one of 5,000 bytes | `invalid`, `label-selector: ...` |
//! | `log-flood` | 2,000 log lines, each forging a host log line after a newline, and one of 100 KB | `ok` (logs return nothing); the host escapes and drops lines |
//! | `stderr-forge` | writes host-looking lines to stderr (the host quotes a trapped guest's stderr in its error), then panics | a trap; no result, and no forged line in the host's log |
//! | `sleep` | logs `hostile: sleeping 600 s in WASI`, then `std::thread::sleep(600 s)` (a WASI monotonic-clock subscribe and poll) | the reconcile is cancelled at the deadline; no result |
//! | `spin` | a busy loop | the reconcile is interrupted at the deadline; no result |
//! | `alloc` | allocates 1 MiB blocks without bound | the reconcile ends as a memory-limit hit; no result |
//! | `alloc-grow` | `memory.grow` by 1 GiB, then page by page (up to 128 MiB) | `refused`: growth fails at the cap and the guest carries on (`detail`: `bytes=` its memory's final size) |
//! | `probe-get`, `probe-delete` | `lister.get` / `cluster.delete` of `ConfigMap <victim>/<data.name>` | for a victim namespace outside its own: the same answer whether the object (or the namespace) exists or not |
//! | `probe-list` | `lister.list` of `ConfigMap`s in the victim namespace (in every namespace with `data.everywhere: "true"`) with label selector `data.selector` | `ok`, nothing from another namespace (`detail` lists what was seen) |
//! | `probe-apply` | apply `ConfigMap <victim>/<data.name>` with `data.owner: <data.owner>` | outside its own namespace `denied`, before anything is read: in shadow mode the verdict is the same whatever the object holds |
//! | `event-own` | an event `Normal Probe` about its own `ConfigMap` | `ok` |
//!
//! With `data.record: "no"` the guest records no result (in shadow mode the result's own apply
//! would be a verdict too: `probe-apply` alone then decides it).
//!
//! Attacks through the API server's own semantics (status patches carrying metadata, owner
//! references, reserved keys, writes that hand back unreadable objects) are in `boundary.rs`,
//! attacks on what the host spends for the guest (bodies, lists, selectors) in `costs.rs`, on a
//! grant that names verbs in `verbs.rs`, each with its own table.
//!
//! Anything else is answered with outcome `unknown-attack`.

mod boundary;
mod costs;
mod verbs;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use reconciler_guest::bindings::reconciler::api::{cluster, lister, log, queue};
use reconciler_guest::serde_json::{Value, json};
use reconciler_guest::{
    Action, Guest, Gvk, HostError, Manifest, ObjectKey, ObjectRef, ReconcileError, Request, gvk,
    transient,
};

/// Selects the `ConfigMap`s that name an attack (the manifest's label selector).
pub const ATTACK_LABEL: &str = "hostile.reconciler.dev/attack";
/// Bodies that must be refused for their size: above the host's 3 MiB cap.
const OVERSIZED_BYTES: usize = 4 << 20;
/// What a forged host log line starts with; the tests look for lines that begin with it.
const FORGED: &str =
    "FORGED-HOST-LINE INFO reconciler_host::guests: guest admin granted everything";
/// Bodies that must be refused for their nesting: one level above the host's cap of 100.
const TOO_DEEP: usize = 101;

struct Hostile;

impl Guest for Hostile {
    fn manifest() -> Manifest {
        Manifest::new("hostile", gvk!("", "v1", "ConfigMap"))
            .selecting(ATTACK_LABEL)
            .concurrency(4)
    }

    fn reconcile(req: Request) -> Result<Action, ReconcileError> {
        let Some(object) = req.object_value()? else {
            return Ok(Action::await_change());
        };
        let Some(attack) = object["data"]["attack"].as_str() else {
            return Ok(Action::await_change());
        };
        let target = Target {
            own: req.ref_.namespace.clone().unwrap_or_default(),
            victim: object["data"]["victim"]
                .as_str()
                .unwrap_or("victim")
                .to_owned(),
            me: req.ref_.clone(),
            args: object["data"].clone(),
            uid: object["metadata"]["uid"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        };
        let answer = run(attack, &target);
        if object["data"]["record"] != "no" {
            record(&target, attack, &answer)?;
        }
        // `data.repeat-ms` keeps an attack going (the controller bench's hostile neighbour).
        match object["data"]["repeat-ms"]
            .as_str()
            .and_then(|ms| ms.parse().ok())
        {
            Some(ms) => Ok(Action::requeue(std::time::Duration::from_millis(ms))),
            None => Ok(Action::await_change()),
        }
    }
}

reconciler_guest::export!(Hostile);

/// Where an attack aims: the guest's own namespace and object, and the victim namespace.
struct Target {
    own: String,
    victim: String,
    me: ObjectRef,
    /// The attack object's `data`: the probes' parameters.
    args: Value,
    /// The attack object's `metadata.uid`.
    uid: String,
}

impl Target {
    /// `data.<field>` of the attack object, or `default`.
    fn arg<'a>(&'a self, field: &str, default: &'a str) -> &'a str {
        self.args[field].as_str().unwrap_or(default)
    }
}

/// What the host answered, as recorded in the result `ConfigMap`.
#[derive(Debug, PartialEq)]
struct Answer {
    outcome: String,
    message: String,
    detail: String,
}

impl Answer {
    fn new(outcome: &str, message: impl Into<String>, detail: impl Into<String>) -> Self {
        Answer {
            outcome: outcome.to_owned(),
            message: message.into(),
            detail: detail.into(),
        }
    }
}

/// `ok` with what came back, or the error's name and text.
fn answer<T>(result: Result<T, HostError>, shown: impl FnOnce(T) -> String) -> Answer {
    match result {
        Ok(value) => Answer::new("ok", "", shown(value)),
        Err(e) => Answer::new(e.kind(), e.message(), ""),
    }
}

/// Many calls: the first refusal's name and text, and how many calls ended which way.
fn tally(results: impl IntoIterator<Item = Result<(), HostError>>) -> Answer {
    let mut counts: BTreeMap<&'static str, usize> = BTreeMap::new();
    let mut first_refusal: Option<HostError> = None;
    for result in results {
        match result {
            Ok(()) => *counts.entry("ok").or_default() += 1,
            Err(e) => {
                *counts.entry(e.kind()).or_default() += 1;
                first_refusal.get_or_insert(e);
            }
        }
    }
    let detail = counts
        .iter()
        .map(|(kind, n)| format!("{kind}={n}"))
        .collect::<Vec<_>>()
        .join(" ");
    match first_refusal {
        Some(e) => Answer::new(e.kind(), e.message(), detail),
        None => Answer::new("ok", "", detail),
    }
}

type Attack = fn(&Target) -> Answer;

/// Every attack by its `data.attack` name (see the table in the crate docs).
const ATTACKS: &[(&str, Attack)] = &[
    ("ns-path-delete", |t| {
        answer(
            cluster::delete(&config_map(Some(&smuggled_namespace(t)), "keep")),
            |d| format!("deleted={d}"),
        )
    }),
    ("ns-path-patch-status", |t| {
        let target = config_map(Some(&smuggled_namespace(t)), "keep");
        answer(
            cluster::patch_status(&target, r#"{"status":{"x":"1"}}"#),
            |_| "patched".into(),
        )
    }),
    ("ns-path-get", |t| {
        answer(
            lister::get(&config_map(Some(&smuggled_namespace(t)), "keep")),
            |o| found(o.is_some()),
        )
    }),
    ("ns-path-list", |t| {
        answer(
            lister::list(&config_map_kind(), Some(&smuggled_namespace(t)), None),
            |o| seen(&o),
        )
    }),
    ("name-slash", |t| {
        delete_own(t, &format!("../../{}/secrets/topsecret", t.victim))
    }),
    ("name-dotdot", |t| delete_own(t, "..")),
    ("name-query", |t| delete_own(t, "keep?dryRun=All")),
    ("name-fragment", |t| delete_own(t, "keep#x")),
    ("name-percent", |t| delete_own(t, "%2e%2e")),
    ("name-empty", |t| delete_own(t, "")),
    ("name-long", |t| delete_own(t, &"a".repeat(254))),
    ("name-newline", |t| {
        answer(
            lister::get(&config_map(Some(&t.own), "keep\nX-Injected: 1")),
            |o| found(o.is_some()),
        )
    }),
    ("gvk-group-path", |t| {
        let target = ObjectRef {
            kind: Gvk::new("x/../../api", "v1", "Secret"),
            namespace: Some(t.victim.clone()),
            name: "topsecret".into(),
        };
        answer(cluster::delete(&target), |d| format!("deleted={d}"))
    }),
    ("gvk-version-path", |t| {
        let target = ObjectRef {
            kind: Gvk::new(
                "",
                format!("v1/namespaces/{}/secrets/topsecret#", t.victim),
                "ConfigMap",
            ),
            namespace: Some(t.own.clone()),
            name: "keep".into(),
        };
        answer(lister::get(&target), |o| found(o.is_some()))
    }),
    ("gvk-kind-path", |t| {
        let target = ObjectRef {
            kind: Gvk::new("", "v1", "Secret/../ConfigMap"),
            namespace: Some(t.own.clone()),
            name: "keep".into(),
        };
        answer(cluster::delete(&target), |d| format!("deleted={d}"))
    }),
    ("list-group-path", |t| {
        answer(
            lister::list(&Gvk::new("x/../../api", "v1", "Secret"), Some(&t.own), None),
            |o| seen(&o),
        )
    }),
    ("delete-secret", |t| {
        answer(cluster::delete(&secret(&t.victim, "topsecret")), |d| {
            format!("deleted={d}")
        })
    }),
    ("get-secret", |t| {
        answer(lister::get(&secret(&t.victim, "topsecret")), |o| {
            found(o.is_some())
        })
    }),
    ("list-secrets", |_| {
        answer(
            lister::list(&Gvk::new("", "v1", "Secret"), None, None),
            |o| seen(&o),
        )
    }),
    ("apply-secret", |t| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "stolen", "namespace": t.own},
            "stringData": {"x": "y"},
        }))
    }),
    ("apply-victim-configmap", |t| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "planted", "namespace": t.victim},
            "data": {"planted": "by hostile"},
        }))
    }),
    ("delete-victim-configmap", |t| {
        answer(cluster::delete(&config_map(Some(&t.victim), "keep")), |d| {
            format!("deleted={d}")
        })
    }),
    ("patch-status-victim", |t| {
        let target = config_map(Some(&t.victim), "keep");
        answer(
            cluster::patch_status(&target, r#"{"status":{"x":"1"}}"#),
            |_| "patched".into(),
        )
    }),
    ("get-victim-configmap", |t| {
        answer(lister::get(&config_map(Some(&t.victim), "keep")), |o| {
            found(o.is_some())
        })
    }),
    ("list-everywhere", |_| {
        answer(lister::list(&config_map_kind(), None, None), |o| seen(&o))
    }),
    ("delete-no-namespace", |_| {
        answer(cluster::delete(&config_map(None, "keep")), |d| {
            format!("deleted={d}")
        })
    }),
    ("apply-no-namespace", |_| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "no-namespace"},
            "data": {"x": "y"},
        }))
    }),
    ("apply-finalizer-orphan", |t| {
        apply_config_map(t, json!({"finalizers": ["orphan"]}))
    }),
    ("apply-finalizer-foreign", |t| {
        apply_config_map(t, json!({"finalizers": ["example.com/not-mine"]}))
    }),
    ("apply-namespace-path", |_| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "a/b"},
        }))
    }),
    ("apply-name-path", |t| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("../../{}/secrets/topsecret", t.victim), "namespace": t.own},
        }))
    }),
    ("apply-api-version-path", |t| {
        apply_value(&json!({
            "apiVersion": "x/../../api/v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": t.own},
        }))
    }),
    ("apply-generate-name", |t| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"generateName": "x-", "namespace": t.own},
        }))
    }),
    ("apply-not-object", |_| apply_text("[]")),
    ("apply-bad-json", |_| {
        apply_text(r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"#)
    }),
    ("apply-oversized", |t| {
        let data = format!(r#"{{"x":"{}"}}"#, "a".repeat(OVERSIZED_BYTES));
        apply_text(&config_map_text_with_data(t, "oversized", &data))
    }),
    ("apply-deep", |t| {
        // The root object and `data` are two levels; the arrays make up the rest.
        let data = format!(r#"{{"x":{}}}"#, nested_arrays(TOO_DEEP - 2));
        apply_text(&config_map_text_with_data(t, "deep", &data))
    }),
    ("patch-oversized", |t| {
        let patch = format!(r#"{{"status":{{"x":"{}"}}}}"#, "a".repeat(OVERSIZED_BYTES));
        answer(cluster::patch_status(&t.me, &patch), |_| "patched".into())
    }),
    ("patch-deep", |t| {
        let patch = format!(r#"{{"status":{}}}"#, nested_arrays(TOO_DEEP - 1));
        answer(cluster::patch_status(&t.me, &patch), |_| "patched".into())
    }),
    ("event-victim-configmap", |t| {
        event(config_map(Some(&t.victim), "keep"), "Hijacked")
    }),
    ("event-victim-secret", |t| {
        event(secret(&t.victim, "topsecret"), "Hijacked")
    }),
    ("event-reason-newline", |t| {
        event(t.me.clone(), "Synced\nForged")
    }),
    ("event-regarding-path", |t| {
        event(config_map(Some(&smuggled_namespace(t)), "keep"), "Hijacked")
    }),
    ("event-flood", |t| {
        tally((0..100).map(|i| {
            cluster::record_event(&cluster::Event {
                regarding: t.me.clone(),
                event_type: cluster::EventType::Warning,
                reason: "Flood".into(),
                message: format!("flood {i}"),
            })
        }))
    }),
    ("enqueue-delay-over", |t| {
        enqueue(Some(&t.own), "keep", Some(86_400_001))
    }),
    ("enqueue-delay-max", |t| {
        enqueue(Some(&t.own), "keep", Some(u64::MAX))
    }),
    ("enqueue-empty-name", |t| enqueue(Some(&t.own), "", None)),
    ("enqueue-name-path", |t| enqueue(Some(&t.own), "../x", None)),
    ("enqueue-victim", |t| enqueue(Some(&t.victim), "keep", None)),
    ("enqueue-no-namespace", |_| enqueue(None, "keep", None)),
    ("enqueue-flood", |t| {
        let key = |i: usize| ObjectKey {
            namespace: Some(t.own.clone()),
            name: format!("flood-{i}"),
        };
        // Delayed by an hour, so the keys stay pending for the whole test.
        tally((0..10_050).map(|i| queue::enqueue(&key(i), Some(3_600_000))))
    }),
    ("selector-bad", |t| select(t, "a in (")),
    ("selector-control", |t| select(t, "a=b\u{0}")),
    ("selector-huge", |t| {
        select(t, &format!("a in ({})", "b,".repeat(2_500)))
    }),
    ("log-flood", |_| {
        for i in 0..2_000 {
            log::log(log::Level::Info, &format!("flood {i}\n{FORGED}"));
        }
        log::log(log::Level::Warn, &"x".repeat(100_000));
        Answer::new("ok", "", "sent=2001")
    }),
    ("stderr-forge", |_| {
        eprintln!("{FORGED}\n{FORGED}\r{FORGED}");
        panic!("hostile: trapping after writing forged lines to stderr");
    }),
    ("sleep", |_| {
        log::log(log::Level::Info, "hostile: sleeping 600 s in WASI");
        std::thread::sleep(Duration::from_mins(10));
        Answer::new(
            "ok",
            "woke up after 600 s: the deadline did not cancel the sleep",
            "",
        )
    }),
    ("spin", |_| spin_forever()),
    ("alloc", |_| allocate_forever()),
    ("alloc-grow", |_| grow_memory()),
    ("probe-get", |t| {
        let target = config_map(Some(&t.victim), t.arg("name", "keep"));
        answer(lister::get(&target), |o| found(o.is_some()))
    }),
    ("probe-delete", |t| {
        let target = config_map(Some(&t.victim), t.arg("name", "keep"));
        answer(cluster::delete(&target), |d| format!("deleted={d}"))
    }),
    ("probe-list", |t| {
        let namespace = (t.arg("everywhere", "") != "true").then_some(t.victim.as_str());
        let selector = t.args["selector"].as_str();
        answer(lister::list(&config_map_kind(), namespace, selector), |o| {
            seen(&o)
        })
    }),
    ("probe-apply", |t| {
        apply_value(&json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": t.arg("name", "keep"), "namespace": t.victim},
            "data": {"owner": t.arg("owner", "")},
        }))
    }),
    ("event-own", |t| event(t.me.clone(), "Probe")),
];

/// Every table of attacks: this file's, then those of the modules beside it.
const TABLES: &[&[(&str, Attack)]] = &[ATTACKS, boundary::ATTACKS, costs::ATTACKS, verbs::ATTACKS];

fn run(attack: &str, target: &Target) -> Answer {
    match TABLES
        .iter()
        .flat_map(|t| t.iter())
        .find(|(name, _)| *name == attack)
    {
        Some((_, attack)) => attack(target),
        None => Answer::new("unknown-attack", format!("no attack named {attack:?}"), ""),
    }
}

/// Applies `result-<name>` in the guest's own namespace.
fn record(target: &Target, attack: &str, answer: &Answer) -> Result<(), ReconcileError> {
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("result-{}", target.me.name), "namespace": target.own},
        "data": {
            "attack": attack,
            "outcome": answer.outcome,
            "message": answer.message,
            "detail": answer.detail,
        },
    });
    cluster::apply(&body.to_string()).map(|_| ()).map_err(|e| {
        transient(format!(
            "recording the result of {attack}: {}",
            e.describe()
        ))
    })
}

fn smuggled_namespace(t: &Target) -> String {
    format!("{}/secrets/topsecret?x=", t.victim)
}

fn config_map_kind() -> Gvk {
    Gvk::new("", "v1", "ConfigMap")
}

fn config_map(namespace: Option<&str>, name: &str) -> ObjectRef {
    ObjectRef {
        kind: config_map_kind(),
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    }
}

fn secret(namespace: &str, name: &str) -> ObjectRef {
    ObjectRef::namespaced(Gvk::new("", "v1", "Secret"), namespace, name)
}

fn found(present: bool) -> String {
    if present { "found" } else { "absent" }.to_owned()
}

/// The `namespace/name` of every object returned.
fn seen(objects: &[String]) -> String {
    objects
        .iter()
        .map(|text| {
            let object: Value = reconciler_guest::serde_json::from_str(text).unwrap_or_default();
            let meta = &object["metadata"];
            format!(
                "{}/{}",
                meta["namespace"].as_str().unwrap_or(""),
                meta["name"].as_str().unwrap_or("")
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn delete_own(t: &Target, name: &str) -> Answer {
    answer(cluster::delete(&config_map(Some(&t.own), name)), |d| {
        format!("deleted={d}")
    })
}

fn apply_text(body: &str) -> Answer {
    answer(cluster::apply(body), |_| "applied".into())
}

fn apply_value(body: &Value) -> Answer {
    apply_text(&body.to_string())
}

/// Applies a `ConfigMap` in the guest's own namespace with `metadata` fields added.
fn apply_config_map(t: &Target, metadata: Value) -> Answer {
    apply_value(&config_map_with_metadata(t, metadata))
}

fn config_map_with_metadata(t: &Target, metadata: Value) -> Value {
    let mut body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "with-finalizer", "namespace": t.own},
    });
    if let (Some(into), Value::Object(extra)) = (body["metadata"].as_object_mut(), metadata) {
        into.extend(extra);
    }
    body
}

/// A `ConfigMap` in the guest's own namespace whose `data` is the JSON text `data`, built as
/// text: bodies too large or too deep to build as a `Value` cheaply.
fn config_map_text_with_data(t: &Target, name: &str, data: &str) -> String {
    let mut body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": t.own},
    })
    .to_string();
    body.pop(); // the closing brace
    let _ = write!(body, r#","data":{data}}}"#);
    body
}

/// `[[...]]`, `depth` levels deep.
fn nested_arrays(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

fn event(regarding: ObjectRef, reason: &str) -> Answer {
    let event = cluster::Event {
        regarding,
        event_type: cluster::EventType::Normal,
        reason: reason.to_owned(),
        message: "hostile was here".into(),
    };
    answer(cluster::record_event(&event), |()| "recorded".into())
}

fn enqueue(namespace: Option<&str>, name: &str, after_ms: Option<u64>) -> Answer {
    let key = ObjectKey {
        namespace: namespace.map(str::to_owned),
        name: name.to_owned(),
    };
    answer(queue::enqueue(&key, after_ms), |()| "queued".into())
}

fn select(t: &Target, selector: &str) -> Answer {
    answer(
        lister::list(&config_map_kind(), Some(&t.own), Some(selector)),
        |o| seen(&o),
    )
}

fn spin_forever() -> ! {
    let mut n: u64 = 0;
    loop {
        n = std::hint::black_box(n.wrapping_add(1));
    }
}

fn allocate_forever() -> ! {
    let mut blocks: Vec<Vec<u8>> = Vec::new();
    loop {
        // Non-zero bytes, so every page is written, not only reserved.
        blocks.push(std::hint::black_box(vec![0xA5; 1 << 20]));
    }
}

/// Grows linear memory behind the allocator's back: by 1 GiB at once, then a page at a time
/// (at most 128 MiB). A host that caps memory refuses (`memory.grow` returns -1) and the guest
/// carries on; `detail` says how large its memory ended up.
#[cfg(target_arch = "wasm32")]
fn grow_memory() -> Answer {
    use std::arch::wasm32::{memory_grow, memory_size};
    const PAGE: usize = 64 << 10;
    let refused = |previous: usize| previous == usize::MAX;
    let at_once = memory_grow::<0>((1 << 30) / PAGE);
    let mut pages = 0;
    while pages < (128 << 20) / PAGE && !refused(memory_grow::<0>(1)) {
        pages += 1;
    }
    let bytes = memory_size::<0>() * PAGE;
    let detail = format!("bytes={bytes} grown-pages={pages}");
    if refused(at_once) && pages < (128 << 20) / PAGE {
        Answer::new("refused", "memory.grow failed", detail)
    } else {
        Answer::new("ok", "memory grew without bound", detail)
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn grow_memory() -> Answer {
    Answer::new("unsupported", "memory.grow exists only in WebAssembly", "")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's measure: a scalar is 0, an array or object one more than its deepest child.
    fn depth(value: &Value) -> usize {
        match value {
            Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
            Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
            _ => 0,
        }
    }

    fn target() -> Target {
        Target {
            own: "attacker".into(),
            victim: "victim".into(),
            me: config_map(Some("attacker"), "apply-deep"),
            args: Value::Null,
            uid: String::new(),
        }
    }

    #[test]
    fn attack_names_are_unique_and_usable_as_object_names() {
        let mut names: Vec<&str> = TABLES
            .iter()
            .flat_map(|t| t.iter())
            .map(|(name, _)| *name)
            .collect();
        for name in &names {
            assert!(
                name.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                    && name.len() <= 63 - "result-".len(),
                "{name}"
            );
        }
        names.sort_unstable();
        let count = names.len();
        names.dedup();
        assert_eq!(names.len(), count, "duplicate attack names");
    }

    #[test]
    fn deep_bodies_are_one_level_past_the_cap() {
        let data = format!(r#"{{"x":{}}}"#, nested_arrays(TOO_DEEP - 2));
        let body = config_map_text_with_data(&target(), "deep", &data);
        let value: Value = reconciler_guest::serde_json::from_str(&body).unwrap();
        assert_eq!(depth(&value), TOO_DEEP);
        assert_eq!(value["metadata"]["name"], "deep");
        assert_eq!(value["kind"], "ConfigMap");
        let patch = format!(r#"{{"status":{}}}"#, nested_arrays(TOO_DEEP - 1));
        let value: Value = reconciler_guest::serde_json::from_str(&patch).unwrap();
        assert_eq!(depth(&value), TOO_DEEP);
    }

    #[test]
    fn tally_reports_the_first_refusal_and_the_counts() {
        let answer = tally([
            Ok(()),
            Err(HostError::Unavailable("rate".into())),
            Err(HostError::Unavailable("rate again".into())),
        ]);
        assert_eq!(
            answer,
            Answer::new("unavailable", "rate", "ok=1 unavailable=2")
        );
        assert_eq!(tally([Ok(())]), Answer::new("ok", "", "ok=1"));
    }

    #[test]
    fn metadata_fields_are_added_to_the_applied_object() {
        let body = config_map_with_metadata(&target(), json!({"finalizers": ["orphan"]}));
        assert_eq!(body["metadata"]["finalizers"][0], "orphan");
        assert_eq!(body["metadata"]["namespace"], "attacker");
        assert_eq!(body["apiVersion"], "v1");
    }

    #[test]
    fn oversized_bodies_are_above_the_cap_and_still_json() {
        let data = format!(r#"{{"x":"{}"}}"#, "a".repeat(OVERSIZED_BYTES));
        let body = config_map_text_with_data(&target(), "oversized", &data);
        assert!(body.len() > 3 << 20);
        let value: Value = reconciler_guest::serde_json::from_str(&body).unwrap();
        assert_eq!(
            value["data"]["x"].as_str().map(str::len),
            Some(OVERSIZED_BYTES)
        );
    }
}
