//! Every capability driven with generated hostile input (offline providers, no wasm): refs,
//! kinds, keys, selectors, JSON bodies and free strings. The properties: no call panics, every
//! refusal is one of the typed errors, and an `invalid` names the field it refused; a status
//! patch that passes carries status (and a resourceVersion) only; an apply that passes sets no
//! Kubernetes-owned key and names only owners as the guest's cache holds them. Thousands of
//! cases in all, bounded in time by proptest's case count.

use proptest::prelude::*;
use serde_json::json;

use super::context::Scope;
use super::testing::Harness;
use crate::sandbox::wit::reconciler::api::{cluster, lister, log, network_backend, queue};
use crate::sandbox::wit::types;

const CASES: u32 = 600;
const GRANT: &str = "{read: [v1/ConfigMap, v1/Secret], write: [v1/ConfigMap, v1/ConfigMap/status], backends: [network]}";

/// Strings a hostile guest would try: path tricks, control characters, unicode, long runs,
/// and plausible names.
fn hostile() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9-]{1,20}",
        "[a-z0-9./?%#-]{0,30}",
        Just(String::new()),
        Just("..".to_owned()),
        Just("victim/secrets/topsecret?x=".to_owned()),
        Just("a\nb".to_owned()),
        "\\PC{0,40}",
        "[a-z]{250,260}",
        any::<String>(),
    ]
}

fn gvk() -> impl Strategy<Value = types::Gvk> {
    (
        prop_oneof![Just(String::new()), hostile()],
        prop_oneof![Just("v1".to_owned()), hostile()],
        prop_oneof![
            Just("ConfigMap".to_owned()),
            Just("Secret".to_owned()),
            hostile()
        ],
    )
        .prop_map(|(group, version, kind)| types::Gvk {
            group,
            version,
            kind,
        })
}

fn object_ref() -> impl Strategy<Value = types::ObjectRef> {
    (gvk(), proptest::option::of(hostile()), hostile()).prop_map(|(kind, namespace, name)| {
        types::ObjectRef {
            kind,
            namespace,
            name,
        }
    })
}

/// JSON text: valid objects with hostile fields, arbitrary values, and not-JSON.
fn body() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i64>().prop_map(serde_json::Value::from),
        hostile().prop_map(serde_json::Value::from),
    ];
    let value = leaf.prop_recursive(6, 64, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
            prop::collection::btree_map(hostile(), inner, 0..6)
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        (hostile(), hostile(), proptest::option::of(hostile()), value.clone()).prop_map(
            |(kind, name, namespace, extra)| {
                json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": name, "namespace": namespace, "finalizers": [extra]}})
                    .to_string()
            }
        ),
        value.prop_map(|v| v.to_string()),
        hostile(),
    ]
}

/// A typed refusal: `invalid` names a field (its path starts with a word).
fn check_typed(result: Result<impl Sized, types::Error>) -> Result<(), TestCaseError> {
    match result {
        Ok(_)
        | Err(
            types::Error::Denied(_)
            | types::Error::NotFound(_)
            | types::Error::Unavailable(_)
            | types::Error::Conflict(_),
        ) => Ok(()),
        Err(types::Error::Invalid(m)) => {
            // The field path's first step: `patch` of ``patch.`<a key as the guest wrote it>` ``;
            // the quoted key itself may hold anything, a colon or a space included.
            let root = m.split([':', '.', '[', '`']).next().unwrap_or_default();
            prop_assert!(
                !root.is_empty()
                    && root.len() < 40
                    && root
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'),
                "an invalid must name its field: {m}"
            );
            Ok(())
        }
        Err(types::Error::Other(m)) => Err(TestCaseError::fail(format!("untyped refusal: {m}"))),
    }
}

/// A status patch: `status`, `metadata` with a mix of keys, and other top-level fields.
fn status_patch() -> impl Strategy<Value = serde_json::Value> {
    let metadata_key = prop_oneof![
        Just("resourceVersion".to_owned()),
        Just("labels".to_owned()),
        Just("annotations".to_owned()),
        Just("finalizers".to_owned()),
        Just("ownerReferences".to_owned()),
        hostile(),
    ];
    let metadata_value = prop_oneof![
        Just(json!("7")),
        Just(json!({"a": "b"})),
        Just(json!(["example.com/x"])),
        Just(json!(null)),
    ];
    let metadata = prop::collection::btree_map(metadata_key, metadata_value, 0..3);
    let top_key = prop_oneof![
        Just("status".to_owned()),
        Just("spec".to_owned()),
        Just("apiVersion".to_owned()),
        hostile(),
    ];
    (
        proptest::option::of(metadata),
        prop::collection::btree_map(top_key, Just(json!({"phase": "x"})), 0..3),
    )
        .prop_map(|(metadata, top)| {
            let mut patch: serde_json::Map<String, serde_json::Value> = top.into_iter().collect();
            if let Some(m) = metadata {
                patch.insert(
                    "metadata".into(),
                    serde_json::Value::Object(m.into_iter().collect()),
                );
            }
            serde_json::Value::Object(patch)
        })
}

/// Label and annotation keys: Kubernetes' own, ordinary, hostile.
fn metadata_key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("pod-security.kubernetes.io/enforce".to_owned()),
        Just("kubernetes.io/service-account.name".to_owned()),
        Just("x.k8s.io/y".to_owned()),
        Just("app".to_owned()),
        Just("example.com/tier".to_owned()),
        hostile(),
    ]
}

/// An owner reference: the seeded owner as it is, with another uid or name, another kind.
fn owner_reference() -> impl Strategy<Value = serde_json::Value> {
    (
        prop_oneof![Just("ConfigMap".to_owned()), Just("Secret".to_owned()), hostile()],
        prop_oneof![Just("owner".to_owned()), hostile()],
        prop_oneof![Just("u-owner".to_owned()), Just("u-other".to_owned()), hostile()],
        proptest::option::of(any::<bool>()),
    )
        .prop_map(|(kind, name, uid, block)| {
            json!({"apiVersion": "v1", "kind": kind, "name": name, "uid": uid, "blockOwnerDeletion": block})
        })
}

/// Whether a key belongs to Kubernetes (the rule `bodies` applies, restated independently).
fn kubernetes_key(key: &str) -> bool {
    key.rsplit_once('/').is_some_and(|(prefix, _)| {
        let prefix = prefix.to_ascii_lowercase();
        ["kubernetes.io", "k8s.io"]
            .iter()
            .any(|d| prefix == *d || prefix.ends_with(&format!(".{d}")))
    })
}

fn run<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(f)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: CASES, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn lister_calls_are_typed(r in object_ref(), kind in gvk(), ns in proptest::option::of(hostile()), selector in proptest::option::of(hostile())) {
        let h = Harness::new();
        let mut call = h.call(GRANT, Scope::default());
        run(async {
            check_typed(lister::Host::get(&mut call, r).await)?;
            check_typed(lister::Host::list(&mut call, kind, ns, selector).await)
        })?;
    }

    #[test]
    fn cluster_calls_are_typed(r in object_ref(), patch in body(), object in body(), reason in hostile(), message in hostile()) {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(GRANT, Scope { namespace: Some("ns".into()), ..Scope::default() });
        run(async {
            check_typed(cluster::Host::patch_status(&mut call, r.clone(), patch).await)?;
            check_typed(cluster::Host::apply(&mut call, object).await)?;
            check_typed(cluster::Host::delete(&mut call, r.clone()).await)?;
            let event = cluster::Event { regarding: r, event_type: cluster::EventType::Warning, reason, message };
            check_typed(cluster::Host::record_event(&mut call, event).await)
        })?;
    }

    #[test]
    fn a_status_patch_that_passes_carries_status_and_a_resource_version_only(patch in status_patch()) {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns"}}));
        let mut call = h.call(GRANT, Scope::default());
        let target = types::ObjectRef {
            kind: types::Gvk { group: String::new(), version: "v1".into(), kind: "ConfigMap".into() },
            namespace: Some("ns".into()),
            name: "a".into(),
        };
        let result = run(cluster::Host::patch_status(&mut call, target, patch.to_string()));
        let fields = patch.as_object().expect("generated as an object");
        let only_status = fields.keys().all(|k| k == "status" || k == "metadata")
            && fields.get("metadata").is_none_or(|m| {
                m.as_object().is_some_and(|m| m.iter().all(|(k, v)| k == "resourceVersion" && v.is_string()))
            });
        match result {
            Ok(_) => prop_assert!(only_status, "let through: {patch}"),
            Err(types::Error::Invalid(m)) => prop_assert!(m.starts_with("patch"), "{m}"),
            Err(e) => prop_assert!(false, "{patch}: {e:?}"),
        }
    }

    #[test]
    fn an_apply_that_passes_sets_no_kubernetes_key_and_no_dangling_owner(
        labels in prop::collection::btree_map(metadata_key(), Just("v"), 0..3),
        annotations in prop::collection::btree_map(metadata_key(), Just("v"), 0..3),
        owners in prop::collection::vec(owner_reference(), 0..3),
    ) {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "ns", "uid": "u-owner"}}));
        let mut call = h.call(GRANT, Scope::default());
        let body = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "x", "namespace": "ns", "labels": labels, "annotations": annotations, "ownerReferences": owners}});
        let result = run(cluster::Host::apply(&mut call, body.to_string()));
        if result.is_ok() {
            prop_assert!(!labels.keys().chain(annotations.keys()).any(|k| kubernetes_key(k)), "{body}");
            for owner in &owners {
                prop_assert_eq!(
                    (&owner["kind"], &owner["name"], &owner["uid"]),
                    (&json!("ConfigMap"), &json!("owner"), &json!("u-owner")),
                    "{}", body
                );
            }
        } else {
            check_typed(result)?;
        }
    }

    #[test]
    fn queue_and_log_calls_are_typed(ns in proptest::option::of(hostile()), name in hostile(), after in proptest::option::of(any::<u64>()), line in hostile()) {
        let h = Harness::new();
        let mut call = h.call(GRANT, Scope { primary_namespace: Some("ns".into()), ..Scope::default() });
        run(async {
            check_typed(queue::Host::enqueue(&mut call, types::ObjectKey { namespace: ns, name }, after).await)?;
            log::Host::log(&mut call, log::Level::Error, line).await;
            let logged = call.last_error.clone().unwrap_or_default();
            prop_assert!(!logged.contains('\n') && !logged.contains('\r'), "a log line cannot forge lines");
            Ok(())
        })?;
    }

    #[test]
    fn network_calls_are_typed(id in hostile(), cidr in hostile(), gateway in hostile()) {
        let h = Harness::new();
        let mut call = h.call(GRANT, Scope::default());
        run(async {
            check_typed(network_backend::Host::get(&mut call, id.clone()).await)?;
            let spec = network_backend::NetworkSpec { id: id.clone(), cidr, gateway };
            check_typed(network_backend::Host::ensure(&mut call, spec).await)?;
            check_typed(network_backend::Host::delete(&mut call, id).await)
        })?;
    }
}
