//! Finalizers: the host adds a guest's declared finalizer before the object's first reconcile
//! and removes it after a successful reconcile with `deleting = true`, so every guest in every
//! language gets deletion handling for free. Only the declared finalizer is ever touched, and
//! the name was checked at load (`validation::finalizer`): no guest can add or remove
//! `orphan`, `foregroundDeletion` or another controller's finalizer through the host.
//!
//! The patches are built here; the kube provider sends them (`KubeCluster::add_finalizer`,
//! `KubeCluster::remove_finalizer`) and records the result into the cache.
//!
//! When a guest is unloaded for good, objects may still carry its finalizer and would then
//! never finish deleting. [`crate::config::FinalizerPolicy`] says what happens: `keep` (default: the operator decides,
//! `/guests` and `reconciler_finalizer_orphaned` show what is left) or `release` after a grace
//! period in which the guest may come back (a hot swap or a ConfigMap update).

use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// Whether `object` carries `finalizer`.
pub(crate) fn carries(object: &DynamicObject, finalizer: &str) -> bool {
    object
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == finalizer)
}

/// The JSON patch adding `finalizer`, guarded by the resourceVersion (so it never races a
/// concurrent change); none when the object has it already.
pub(crate) fn add_ops(current: &DynamicObject, finalizer: &str) -> Option<Vec<Value>> {
    let finalizers = current.metadata.finalizers.as_ref();
    if finalizers.is_some_and(|list| list.iter().any(|f| f == finalizer)) {
        return None;
    }
    let add = match finalizers {
        None => json!({ "op": "add", "path": "/metadata/finalizers", "value": [finalizer] }),
        Some(_) => json!({ "op": "add", "path": "/metadata/finalizers/-", "value": finalizer }),
    };
    Some(vec![
        json!({ "op": "test", "path": "/metadata/resourceVersion", "value": current.metadata.resource_version }),
        add,
    ])
}

/// The JSON patch removing `finalizer`, a `test` op guarding its index; none when absent.
pub(crate) fn remove_ops(current: &DynamicObject, finalizer: &str) -> Option<Vec<Value>> {
    let index = current
        .metadata
        .finalizers
        .iter()
        .flatten()
        .position(|f| f == finalizer)?;
    let path = format!("/metadata/finalizers/{index}");
    Some(vec![
        json!({ "op": "test", "path": path, "value": finalizer }),
        json!({ "op": "remove", "path": path }),
    ])
}

/// Objects of `api`'s kind that carry `finalizer`.
pub(crate) async fn carrying(
    api: &Api<DynamicObject>,
    finalizer: &str,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|o| carries(o, finalizer))
        .collect())
}

/// Removes `finalizer` from every object of `resource` that carries it (the `release` policy):
/// listed through `api`, patched through `writer` (the account the guest wrote as, which holds
/// the write the host itself may lack). Returns how many objects were released; one gone
/// meanwhile, or whose finalizer went meanwhile (the patch's test fails), is not counted.
pub(crate) async fn release_all(
    api: &Api<DynamicObject>,
    writer: &kube::Client,
    resource: &kube::core::ApiResource,
    finalizer: &str,
) -> Result<usize, kube::Error> {
    let mut released = 0;
    for object in carrying(api, finalizer).await? {
        let Some(ops) = remove_ops(&object, finalizer) else {
            continue;
        };
        let Ok(patch) = serde_json::from_value::<json_patch::Patch>(Value::Array(ops)) else {
            continue;
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        let namespaced: Api<DynamicObject> = match &object.metadata.namespace {
            Some(ns) => Api::namespaced_with(writer.clone(), ns, resource),
            None => Api::all_with(writer.clone(), resource),
        };
        match namespaced
            .patch(&name, &PatchParams::default(), &Patch::<()>::Json(patch))
            .await
        {
            Ok(_) => released += 1,
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 422 => {}
            Err(e) => return Err(e),
        }
    }
    Ok(released)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(finalizers: Option<Vec<&str>>) -> DynamicObject {
        let mut o = DynamicObject::new(
            "w",
            &kube::api::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        );
        o.metadata.resource_version = Some("7".into());
        o.metadata.finalizers = finalizers.map(|f| f.into_iter().map(str::to_owned).collect());
        o
    }

    #[test]
    fn adds_only_when_missing_guarded_by_the_resource_version() {
        let ops = add_ops(&object(None), "example.com/a").unwrap();
        assert_eq!(ops[0]["op"], "test");
        assert_eq!(ops[0]["value"], "7");
        assert_eq!(ops[1]["path"], "/metadata/finalizers");
        let ops = add_ops(&object(Some(vec!["other.io/x"])), "example.com/a").unwrap();
        assert_eq!(ops[1]["path"], "/metadata/finalizers/-");
        assert!(add_ops(&object(Some(vec!["example.com/a"])), "example.com/a").is_none());
    }

    #[test]
    fn removes_only_its_own_finalizer_at_its_index() {
        let o = object(Some(vec!["other.io/x", "example.com/a"]));
        let ops = remove_ops(&o, "example.com/a").unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": "/metadata/finalizers/1", "value": "example.com/a"})
        );
        assert!(remove_ops(&o, "example.com/b").is_none());
    }
}
