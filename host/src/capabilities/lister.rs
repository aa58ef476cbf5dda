//! `lister`: reads from the informer caches, only for granted kinds.

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::{CallContext, Capability, HostError, LoadCheck, embed};
use crate::objects::{Gvk, ObjectRef};
use crate::validation;
use crate::wit::reconciler::api::lister as wit;
use crate::wit::types;

/// Reads of cached objects, as JSON text. Arguments arrive validated.
pub trait Lister: Send + Sync {
    fn get(&self, object: &ObjectRef) -> Result<Option<String>, HostError>;
    fn list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        selector: Option<&kube::core::Selector>,
    ) -> Result<Vec<String>, HostError>;
}

pub(super) const CAPABILITY: Capability = Capability {
    interface: "lister",
    requirement,
};

/// The primary and every secondary kind must be readable: the host watches them for the guest.
fn requirement(check: &LoadCheck<'_>) -> Vec<String> {
    let (manifest, guest) = (check.manifest, &check.manifest.name);
    let mut missing = Vec::new();
    let mut need_read = |kind: &Gvk, why: &str| {
        if !check.grant.read.contains(kind) {
            missing.push(format!(
                "read {kind} ({why}; add it to guests.{guest}.read)"
            ));
        }
    };
    need_read(&manifest.primary, "its primary watch");
    for secondary in &manifest.secondary {
        need_read(&secondary.kind, "a secondary watch");
    }
    missing
}

pub(super) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<CallContext>>(linker, get)
}

/// Parses a label selector a guest handed over; a bad one is its `invalid` error.
pub fn parse_selector(
    field: &str,
    selector: Option<&str>,
) -> Result<Option<kube::core::Selector>, HostError> {
    let Some(text) = selector else {
        return Ok(None);
    };
    validation::selector_text(field, text)?;
    crate::informers::parse_selector(text)
        .map(Some)
        .map_err(|e| HostError::Invalid(format!("{field}: {e}")))
}

impl CallContext {
    fn lister_get(&self, object: &ObjectRef) -> Result<Option<String>, HostError> {
        validation::object_ref("ref", object)?;
        self.guest.grant.may_read(self.name(), &object.kind)?;
        self.guest.providers.lister.get(object)
    }

    fn lister_list(
        &self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, HostError> {
        validation::gvk("kind", kind)?;
        validation::namespace("namespace", namespace)?;
        let selector = parse_selector("label-selector", label_selector)?;
        self.guest.grant.may_read(self.name(), kind)?;
        self.guest
            .providers
            .lister
            .list(kind, namespace, selector.as_ref())
    }
}

impl wit::Host for CallContext {
    async fn get(&mut self, r: types::ObjectRef) -> Result<Option<String>, types::Error> {
        let object: ObjectRef = r.into();
        let result = self.lister_get(&object);
        self.finish(
            "lister",
            "get",
            || json!({ "ref": object }),
            &result,
            |o| json!(o.as_deref().map(embed)),
        );
        result.map_err(Into::into)
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, types::Error> {
        let kind: Gvk = kind.into();
        let result = self.lister_list(&kind, namespace.as_deref(), label_selector.as_deref());
        self.finish(
            "lister",
            "list",
            || json!({ "kind": kind, "namespace": namespace, "labelSelector": label_selector }),
            &result,
            |items| json!(items.iter().map(|i| embed(i)).collect::<Vec<_>>()),
        );
        result.map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::super::Scope;
    use super::super::testing::Harness;
    use super::*;
    use wit::Host as _;

    const GRANT: &str = "read: [v1/ConfigMap]";

    fn cm(namespace: &str, name: &str) -> types::ObjectRef {
        types::ObjectRef {
            kind: Gvk::new("", "v1", "ConfigMap").into(),
            namespace: Some(namespace.into()),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn reads_granted_kinds_and_denies_others() {
        let h = Harness::new();
        h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "ns", "labels": {"app": "x"}}}));
        let mut call = h.call(GRANT, Scope::default());
        let got = call.get(cm("ns", "a")).await.unwrap();
        assert!(got.unwrap().contains("\"name\":\"a\""));
        assert_eq!(call.get(cm("ns", "b")).await.unwrap(), None);
        let listed = call
            .list(
                Gvk::new("", "v1", "ConfigMap").into(),
                None,
                Some("app=x".into()),
            )
            .await
            .unwrap();
        assert_eq!(listed.len(), 1);
        let secret = types::ObjectRef {
            kind: Gvk::new("", "v1", "Secret").into(),
            ..cm("ns", "a")
        };
        assert!(matches!(
            call.get(secret).await,
            Err(types::Error::Denied(m)) if m.contains("may not read v1/Secret")
        ));
    }

    #[tokio::test]
    async fn refuses_hostile_names_and_selectors_naming_the_field() {
        let h = Harness::new();
        let mut call = h.call(GRANT, Scope::default());
        let err = call.get(cm("victim/secrets/x?", "a")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("ref.namespace:")),
            "{err:?}"
        );
        let err = call.get(cm("ns", "../x")).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("ref.name:")),
            "{err:?}"
        );
        let err = call
            .list(
                Gvk::new("", "v1", "ConfigMap").into(),
                None,
                Some("a in (".into()),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("label-selector:")),
            "{err:?}"
        );
        let err = call
            .list(Gvk::new("x/../..", "v1", "ConfigMap").into(), None, None)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("kind.group:")),
            "{err:?}"
        );
        assert_eq!(
            call.calls.as_ref().unwrap().len(),
            4,
            "every refusal is recorded"
        );
    }
}
