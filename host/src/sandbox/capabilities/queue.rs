//! `queue`: the guest adds keys of its own primary kind to its own work queue.

use std::time::Duration;

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::capability::{Capability, LoadCheck};
use super::context::{CallContext, as_json};
use super::error::HostError;
pub use super::seams::Enqueuer;
use crate::cluster::objects::ObjectKey;
use crate::cluster::validation;
use crate::sandbox::wit::reconciler::api::queue as wit;
use crate::sandbox::wit::types;

/// Keys a guest may have waiting (ready or delayed) before its enqueues are refused. The
/// host's own adds (watch events, retries) are not capped: they are bounded by the cache.
pub(crate) const MAX_PENDING_KEYS: usize = 10_000;
/// The longest delay a guest may ask for (and the cap on a reconcile's requeue-after).
pub(crate) const MAX_DELAY: Duration = Duration::from_hours(24);
/// [`MAX_DELAY`] in milliseconds, the unit of `after-ms` and of a reconcile's requeue-after.
#[allow(clippy::cast_possible_truncation)] // 86,400,000 fits a u64 many times over.
pub(crate) const MAX_DELAY_MS: u64 = MAX_DELAY.as_millis() as u64;

pub(super) const CAPABILITY: Capability = Capability {
    interface: "queue",
    requirement: |_: &LoadCheck<'_>| Vec::new(),
};

pub(super) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<CallContext>>(linker, get)
}

impl CallContext {
    fn queue_enqueue(&self, key: &ObjectKey, after_ms: Option<u64>) -> Result<(), HostError> {
        validation::namespace("key.namespace", key.namespace.as_deref())?;
        validation::object_name("key.name", &key.name)?;
        if let Some(allowed) = &self.guest.scope.primary_namespace
            && key.namespace.as_deref() != Some(allowed)
        {
            return Err(HostError::Invalid(format!(
                "key.namespace: the guest's primary watch is limited to namespace {allowed}, so its keys are there too"
            )));
        }
        let after = after_ms.map(Duration::from_millis);
        if after.is_some_and(|a| a > MAX_DELAY) {
            return Err(HostError::Invalid(format!(
                "after-ms: at most {} ms (24 h)",
                MAX_DELAY.as_millis()
            )));
        }
        let queue = &self.guest.providers.queue;
        if queue.pending() >= MAX_PENDING_KEYS {
            return Err(HostError::Limited(format!(
                "guest `{}` already has {MAX_PENDING_KEYS} keys waiting; enqueue fewer",
                self.name()
            )));
        }
        queue.enqueue(key.clone(), after)
    }
}

impl wit::Host for CallContext {
    async fn enqueue(
        &mut self,
        key: types::ObjectKey,
        after_ms: Option<u64>,
    ) -> Result<(), types::Error> {
        let key = ObjectKey {
            namespace: key.namespace,
            name: key.name,
        };
        self.recorded(
            ("queue", "enqueue"),
            || json!({ "key": { "namespace": key.namespace, "name": key.name }, "afterMs": after_ms }),
            |_| Ok(()),
            async |this| this.queue_enqueue(&key, after_ms),
            as_json,
        )
        .await
        .map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::context::Scope;
    use crate::sandbox::capabilities::testing::Harness;
    use wit::Host as _;

    fn key(namespace: Option<&str>, name: &str) -> types::ObjectKey {
        types::ObjectKey {
            namespace: namespace.map(Into::into),
            name: name.into(),
        }
    }

    #[tokio::test]
    async fn valid_keys_are_queued_and_bad_ones_refused_by_field() {
        let h = Harness::new();
        let mut call = h.call("{}", Scope::default());
        call.enqueue(key(Some("ns"), "a"), Some(10)).await.unwrap();
        assert_eq!(h.queue.pending(), 1);
        for (k, after, field) in [
            (key(Some("ns"), ""), None, "key.name"),
            (key(Some("ns"), &"a".repeat(300)), None, "key.name"),
            (key(Some("a/b"), "x"), None, "key.namespace"),
            (key(Some("ns"), "x"), Some(u64::MAX), "after-ms"),
        ] {
            let err = call.enqueue(k, after).await.unwrap_err();
            assert!(
                matches!(&err, types::Error::Invalid(m) if m.starts_with(field)),
                "{field}: {err:?}"
            );
        }
        assert_eq!(h.queue.pending(), 1, "nothing refused was queued");
    }

    #[tokio::test]
    async fn keys_stay_in_the_primary_namespace_and_the_pending_cap_holds() {
        let h = Harness::new();
        let scope = Scope {
            primary_namespace: Some("ns".into()),
            ..Scope::default()
        };
        let mut call = h.call("{}", scope);
        assert!(matches!(
            call.enqueue(key(Some("other"), "a"), None).await,
            Err(types::Error::Invalid(_))
        ));
        assert!(matches!(
            call.enqueue(key(None, "a"), None).await,
            Err(types::Error::Invalid(_))
        ));
        for i in 0..MAX_PENDING_KEYS {
            call.enqueue(key(Some("ns"), &format!("k{i}")), None)
                .await
                .unwrap();
        }
        let err = call
            .enqueue(key(Some("ns"), "one-more"), None)
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Unavailable(m) if m.contains("keys waiting")),
            "{err:?}"
        );
    }
}
