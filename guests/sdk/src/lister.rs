//! Reads from the host's informer caches (never from the API server).
//!
//! Each call copies the object(s) as JSON across the component boundary: cheap for one
//! object, proportional to the result for `list`. Only kinds granted to the guest are readable;
//! others fail with `denied`.

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::host as wit;
use crate::{Gvk, HostError, ObjectRef};

/// The cached object, or none when it does not exist (or is not cached yet).
///
/// # Errors
///
/// The host's error; `other` when the host returned text that is not JSON.
pub fn get(target: &ObjectRef) -> Result<Option<Value>, HostError> {
    get_as(target)
}

/// The cached object deserialised into `T`.
///
/// # Errors
///
/// The host's error; `invalid` when the object does not fit `T`.
pub fn get_as<T: DeserializeOwned>(target: &ObjectRef) -> Result<Option<T>, HostError> {
    wit::get(target)?
        .map(|json| parse::<T>(&json, &target.to_string()))
        .transpose()
}

/// Cached objects of `kind`, in `namespace` (none = all namespaces) matching `label_selector`
/// (Kubernetes syntax, e.g. `app=web,tier!=db`).
///
/// # Errors
///
/// The host's error (`invalid` for a bad selector); `other` for text that is not JSON.
pub fn list(
    kind: &Gvk,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<Value>, HostError> {
    list_as(kind, namespace, label_selector)
}

/// Like [`list`], each object deserialised into `T`.
///
/// # Errors
///
/// The host's error; `invalid` when an object does not fit `T`.
pub fn list_as<T: DeserializeOwned>(
    kind: &Gvk,
    namespace: Option<&str>,
    label_selector: Option<&str>,
) -> Result<Vec<T>, HostError> {
    let what = format!("a {} from the cache", kind.kind);
    wit::list(kind, namespace, label_selector)?
        .iter()
        .map(|json| parse::<T>(json, &what))
        .collect()
}

pub(crate) fn parse<T: DeserializeOwned>(json: &str, what: &str) -> Result<T, HostError> {
    serde_json::from_str(json).map_err(|e| {
        HostError::Invalid(format!(
            "{what} does not match {}: {e}",
            std::any::type_name::<T>()
        ))
    })
}

// Natively only, where the fake host is.
#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::gvk;
    use crate::testing::FakeHost;
    use k8s_openapi::api::core::v1::ConfigMap;
    use serde_json::json;

    #[test]
    fn typed_reads_decode_each_object_and_name_the_one_that_does_not_fit() {
        let _host = FakeHost::new()
            .with_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"namespace": "a", "name": "good"}, "data": {"k": "v"}}))
            .with_object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                                "metadata": {"namespace": "b", "name": "bad"}, "data": 5}))
            .install();
        let kind = gvk!(ConfigMap);
        let good: ConfigMap = get_as(&ObjectRef::namespaced(kind.clone(), "a", "good"))
            .unwrap()
            .unwrap();
        assert_eq!(good.data.unwrap()["k"], "v");
        let listed = list_as::<ConfigMap>(&kind, Some("a"), None).unwrap();
        assert_eq!(listed.len(), 1);
        let err = list_as::<ConfigMap>(&kind, None, None).unwrap_err();
        assert_eq!(err.kind(), "invalid");
        assert!(
            err.message()
                .starts_with("a ConfigMap from the cache does not match"),
            "{}",
            err.message()
        );
    }
}
