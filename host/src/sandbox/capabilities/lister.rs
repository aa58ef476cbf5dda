//! `lister`: reads from the informer caches, only for granted kinds.
//!
//! Cost model: a `get` copies one object's JSON text for the guest, bounded by the API
//! server's own object size limit (etcd's 1.5 MiB by default), so it is not counted. A `list`
//! can copy a whole cache, so it is counted against the guest ([`super::Budget`]): the
//! provider hands out the matching objects shared, not copied; their size is summed first, a
//! result larger than the guest's memory cap (which the guest could not hold anyway) is refused
//! with `unavailable` before anything is copied, and the copy holds that much of the guest's
//! host-memory budget until the guest's next list or body or the reconcile's end. Evaluating the
//! selector over the cache, and the copy, are host work taken from the guest's CPU share, the
//! scan run off the async workers when large ([`CallContext::host_work`]). Not timed: wasmtime's
//! copy of the result into the guest's memory, once the import returns (about the copy's cost
//! again, bounded per call by the guest's memory cap).

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::capability::{Capability, LoadCheck};
use super::context::{CallContext, embed};
use super::error::HostError;
use super::replay;
pub(crate) use super::seams::{Listed, Lister};
use crate::cluster::objects::{Gvk, ObjectRef};
use crate::cluster::validation;
use crate::sandbox::wit::reconciler::api::lister as wit;
use crate::sandbox::wit::types;

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
                "read {kind} ({why}; add it to {})",
                check.grant.place(guest, "read")
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
pub(crate) fn parse_selector(
    field: &str,
    selector: Option<&str>,
) -> Result<Option<kube::core::Selector>, HostError> {
    let Some(text) = selector else {
        return Ok(None);
    };
    validation::selector_text(field, text)?;
    crate::cluster::informers::parse_selector(text)
        .map(Some)
        .map_err(|e| HostError::Invalid(format!("{field}: {e}")))
}

impl CallContext {
    async fn lister_get(&self, object: &ObjectRef) -> Result<Option<String>, HostError> {
        validation::object_ref("ref", object)?;
        self.guest.grant.may_read(self.name(), &object.kind)?;
        // A metadata-only cache is made whole first (within the reconcile's deadline).
        if let Some(ready) = self.guest.providers.lister.ready(&object.kind) {
            ready.await;
        }
        self.guest.providers.lister.get(object)
    }

    async fn lister_list(
        &mut self,
        kind: &Gvk,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, HostError> {
        validation::gvk("kind", kind)?;
        validation::namespace("namespace", namespace)?;
        let selector = parse_selector("label-selector", label_selector)?;
        self.guest.grant.may_read(self.name(), kind)?;
        if let Some(ready) = self.guest.providers.lister.ready(kind) {
            ready.await;
        }
        // The last list's copy has been lowered into the guest's memory by now.
        self.held = None;
        let budget = self.guest.budget.clone();
        budget.settle_cpu().await;
        let provider = self.guest.providers.lister.clone();
        // Each term of the selector is about one label lookup per object visited.
        let terms = label_selector.map_or(0, |s| s.split(',').count());
        let units = provider.visits(kind, namespace).saturating_mul(1 + terms);
        let found = self.host_work(units, || provider.list(kind, namespace, selector.as_ref()))?;
        let bytes = found.iter().fold(0usize, |sum, o| {
            sum.saturating_add(o.json().len() + std::mem::size_of::<String>())
        });
        let Some(held) = budget.hold(bytes).await else {
            let place = namespace.map_or_else(
                || "all namespaces".to_owned(),
                |ns| format!("namespace {ns}"),
            );
            return Err(HostError::Limited(format!(
                "list of {kind} in {place}: the {} matching objects take {} MiB, more than guest `{}`'s memory cap of {} MiB (limits.memoryMiB), which bounds what the host copies for it; list in one namespace or with a label selector",
                found.len(),
                bytes.div_ceil(1 << 20),
                self.name(),
                budget.host_memory_bytes() >> 20
            )));
        };
        let items = {
            let _meter = budget.meter();
            found.iter().map(|o| o.json().to_owned()).collect()
        };
        self.held = Some(held);
        Ok(items)
    }
}

impl wit::Host for CallContext {
    async fn get(&mut self, r: types::ObjectRef) -> Result<Option<String>, types::Error> {
        let object: ObjectRef = r.into();
        self.recorded(
            ("lister", "get"),
            || json!({ "ref": object }),
            |v| Ok((!v.is_null()).then(|| replay::text(&v))),
            async |this| this.lister_get(&object).await,
            |o| json!(o.as_deref().map(embed)),
        )
        .await
        .map_err(Into::into)
    }

    async fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, types::Error> {
        let kind: Gvk = kind.into();
        self.recorded(
            ("lister", "list"),
            || json!({ "kind": kind, "namespace": namespace, "labelSelector": label_selector }),
            |v| {
                v.as_array()
                    .map(|items| items.iter().map(replay::text).collect())
                    .ok_or_else(|| replay::malformed("a list"))
            },
            async |this| {
                this.lister_list(&kind, namespace.as_deref(), label_selector.as_deref())
                    .await
            },
            |items| json!(items.iter().map(|i| embed(i)).collect::<Vec<_>>()),
        )
        .await
        .map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::budget::HostBytes;
    use crate::sandbox::capabilities::context::Scope;
    use crate::sandbox::capabilities::testing::Harness;
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

    fn config_maps() -> types::Gvk {
        Gvk::new("", "v1", "ConfigMap").into()
    }

    #[tokio::test]
    async fn a_list_larger_than_the_guests_memory_cap_is_refused_before_it_is_copied() {
        let h = Harness::new();
        let filler = "x".repeat(300 << 10);
        for i in 0..5 {
            let part = if i < 2 { "a" } else { "b" };
            h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("big-{i}"), "namespace": "ns", "labels": {"part": part}},
                "data": {"filler": filler}}));
        }
        let mut call = h.call(
            "{read: [v1/ConfigMap], limits: {memoryMiB: 1}}",
            Scope::default(),
        );
        let err = call
            .list(config_maps(), Some("ns".into()), None)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Unavailable(m)
                if m.contains("the 5 matching objects take 2 MiB")
                    && m.contains("guest `g`'s memory cap of 1 MiB")
                    && m.contains("label selector")),
            "{err:?}"
        );
        assert!(call.held.is_none(), "nothing held for a refused list");

        // A part of it fits: copied, and counted until the guest's next list.
        let part = call
            .list(config_maps(), Some("ns".into()), Some("part=a".into()))
            .await
            .unwrap();
        assert_eq!(part.len(), 2);
        let held = call.held.as_ref().map_or(0, HostBytes::bytes);
        assert!(held > 600 << 10, "{held}");
        let beside = tokio::time::timeout(
            std::time::Duration::from_millis(100),
            call.guest.budget.hold(600 << 10),
        )
        .await;
        assert!(beside.is_err(), "the copy's memory is still held");
        call.list(config_maps(), Some("ns".into()), Some("part=none".into()))
            .await
            .unwrap();
        assert_eq!(call.held.as_ref().map_or(0, HostBytes::bytes), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_selector_evaluated_over_a_large_cache_is_charged_to_the_guest() {
        use std::fmt::Write as _;
        let h = Harness::new();
        for i in 0..5_000 {
            h.cache.put(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": format!("small-{i}"), "namespace": "ns", "labels": {"app": "x"}}}));
        }
        let mut call = h.call(GRANT, Scope::default());
        let mut selector = String::new();
        for i in 0..300 {
            let _ = write!(selector, "k{i}!=x,");
        }
        selector.push_str("app=none");
        let units = call
            .guest
            .providers
            .lister
            .visits(&Gvk::new("", "v1", "ConfigMap"), None);
        assert!(
            units * 301 > crate::sandbox::capabilities::context::INLINE_WORK,
            "moved off the worker"
        );
        let listed = call
            .list(config_maps(), Some("ns".into()), Some(selector))
            .await
            .unwrap();
        assert!(listed.is_empty());
        let owed = call
            .guest
            .budget
            .cpu_owed_ns
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(owed > 0, "the list's time was not charged");
    }
}
