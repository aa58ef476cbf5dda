//! Attacks on what the host spends for the guest, within its grant: memory to parse its bodies
//! and to copy lists for it, CPU to evaluate its label selectors, and the threads that answer
//! `/healthz`. Each is cheap for the guest and, unbounded, dear for the host: the host must
//! charge the guest for it (its memory cap, its CPU share, its body rate) or refuse it.
//! `tests/tests/host_costs.rs` runs them and reads the host's resident memory; the bench
//! `host/benches/host_costs.rs` times `/healthz` while they run. Both create the objects the
//! lists read: `ConfigMap`s labelled `cost.reconciler.dev/part` (about 1 MiB each) and many
//! small ones labelled `cost.reconciler.dev/filler`.
//!
//! | `data.attack` | what it does | what the host must answer |
//! |---|---|---|
//! | `cost-body-values` | apply of a 3 MiB `ConfigMap` whose extra field is `[0,0,…]` (1.5 million values; as a tree ~100 MiB) | `invalid`, `object: holds more than 262144 JSON values …`, before any tree is built |
//! | `cost-body-tree` | apply whose extra field is 120,000 `{"a":0}` (1 MB, under the value cap; as a tree ~90 MiB) | `invalid`, `object: … more than guest `hostile`'s memory cap …` |
//! | `cost-body-heavy` | apply of a `ConfigMap heavy` with 20,000 data keys of 60 bytes (1.6 MB; as a tree ~5 MiB), which the host parses and sends and the API server refuses (data over 1 MiB) | the server's `invalid`; the trees of concurrent reconciles held within the guest's memory cap |
//! | `cost-list-all` | `lister.list` of every `ConfigMap` in its own namespace (more than the guest's memory cap in total) | `unavailable`, naming the size, the cap and a label selector |
//! | `cost-list-part` | `lister.list` with selector `cost.reconciler.dev/part=a` (a share under the cap) | `ok`; `detail`: `items=` and `bytes=` received; concurrent copies held within the cap |
//! | `cost-selector-slow` | three `lister.list`s of its own namespace with a 3.2 KB selector of 400 `!=` terms that every object passes, then one term none does | `ok`, `detail`: `lists=3 items=0`; the host's time is taken from the guest's CPU share, off the threads of other guests and of `/healthz` |

use std::fmt::Write as _;

use reconciler_guest::bindings::reconciler::api::lister;
use reconciler_guest::serde_json::json;

use super::{Answer, Attack, Target, answer, apply_text, config_map_kind};

/// The label of the large `ConfigMap`s the tests and the bench create, each with a part.
pub const PART_LABEL: &str = "cost.reconciler.dev/part";
/// What `cost-body-values` sends: just under the host's 3 MiB body cap.
const BODY_BYTES: usize = (3 << 20) - 4096;
/// `!=` terms of the slow selector: 3.2 KB, under the host's selector cap of 4,096 bytes.
const SLOW_TERMS: usize = 400;

/// Every attack of this file (see the table above).
pub const ATTACKS: &[(&str, Attack)] = &[
    ("cost-body-values", |t| apply_text(&values_body(t))),
    ("cost-body-tree", |t| apply_text(&tree_body(t))),
    ("cost-body-heavy", |t| apply_text(&heavy_body(t))),
    ("cost-list-all", |t| list(t, None)),
    ("cost-list-part", |t| {
        list(t, Some(&format!("{PART_LABEL}=a")))
    }),
    ("cost-selector-slow", |t| {
        let selector = slow_selector();
        let mut items = 0;
        for _ in 0..3 {
            match lister::list(&config_map_kind(), Some(&t.own), Some(&selector)) {
                Ok(found) => items += found.len(),
                Err(e) => return Answer::new(e.kind(), e.message(), ""),
            }
        }
        Answer::new("ok", "", format!("lists=3 items={items}"))
    }),
];

/// Just under 3 MiB of `[0,0,…]`.
fn values_body(t: &Target) -> String {
    let zeros = "0,".repeat(BODY_BYTES / 2);
    with_extra(t, "values", &format!("[{zeros}0]"))
}

/// 120,000 objects of one key: few values, a large tree.
fn tree_body(t: &Target) -> String {
    let objects = r#"{"a":0},"#.repeat(120_000);
    with_extra(t, "tree", &format!("[{objects}{{}}]"))
}

/// `ConfigMap heavy` with 20,000 data keys of 60 bytes: 1.6 MB, more data than the API server
/// stores (1 MiB).
fn heavy_body(t: &Target) -> String {
    let value = "v".repeat(60);
    let mut data = String::with_capacity(2 << 20);
    for i in 0..20_000 {
        let _ = write!(data, r#""key-{i:07}":"{value}","#);
    }
    data.pop();
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "heavy", "namespace": t.own},
    })
    .to_string();
    format!(r#"{}, "data": {{{data}}}}}"#, &body[..body.len() - 1])
}

/// `SLOW_TERMS` terms every object passes (no object has the keys), then one none does.
fn slow_selector() -> String {
    let mut selector = String::new();
    for i in 0..SLOW_TERMS {
        let _ = write!(selector, "c{i:03}!=x,");
    }
    selector.push_str("cost-never=x");
    selector
}

/// A `ConfigMap` named `name` in the guest's own namespace with `extra` (JSON text) as a
/// top-level field the API server does not know: built as text, too large for a `Value`.
fn with_extra(t: &Target, name: &str, extra: &str) -> String {
    let body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": t.own},
    })
    .to_string();
    format!(r#"{}, "extra": {extra}}}"#, &body[..body.len() - 1])
}

/// Lists the guest's own namespace; `detail` counts what came back without parsing it.
fn list(t: &Target, selector: Option<&str>) -> Answer {
    answer(
        lister::list(&config_map_kind(), Some(&t.own), selector),
        |items| {
            let bytes: usize = items.iter().map(String::len).sum();
            format!("items={} bytes={bytes}", items.len())
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use reconciler_guest::serde_json::Value;

    fn target() -> Target {
        Target {
            own: "attacker".into(),
            victim: "victim".into(),
            me: reconciler_guest::ObjectRef::namespaced(config_map_kind(), "attacker", "x"),
            args: Value::Null,
            uid: String::new(),
        }
    }

    #[test]
    fn built_bodies_are_json_of_the_intended_shape() {
        let parse = |text: &str| reconciler_guest::serde_json::from_str::<Value>(text).unwrap();
        let values = values_body(&target());
        assert!(values.len() < 3 << 20 && values.len() > (3 << 20) - 8192);
        let value = parse(&values);
        assert_eq!(value["metadata"]["namespace"], "attacker");
        assert!(value["extra"].as_array().unwrap().len() > 1_500_000);
        let tree = parse(&tree_body(&target()));
        assert_eq!(tree["extra"].as_array().unwrap().len(), 120_001);
        let heavy = heavy_body(&target());
        assert!(
            heavy.len() > 1 << 20 && heavy.len() < 3 << 20,
            "{}",
            heavy.len()
        );
        let heavy = parse(&heavy);
        assert_eq!(heavy["metadata"]["name"], "heavy");
        assert_eq!(heavy["data"].as_object().unwrap().len(), 20_000);
    }

    #[test]
    fn the_slow_selector_is_under_the_hosts_cap() {
        let selector = slow_selector();
        assert!(selector.len() <= 4096, "{}", selector.len());
        assert_eq!(selector.split(',').count(), SLOW_TERMS + 1);
    }
}
