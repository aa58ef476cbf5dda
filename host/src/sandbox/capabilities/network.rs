//! `network-backend`: actual state of networks, through the provider the host configures.
//!
//! Networks are owned per guest: the id a guest names is stored as `<guest>/<id>` (guest names
//! never contain `/`), so a guest can read, ensure or delete only networks it created, and the
//! owner of every bridge is visible on the system. Each guest may hold at most
//! [`MAX_NETWORKS_PER_GUEST`]. Which CIDRs are acceptable at all is the provider's policy
//! (`crate::sandbox::backends`), shared by every guest.
//!
//! Other guests' networks are invisible, in errors too: every provider error reaches the guest
//! through [`BackendError::seen_by`], so an overlap with another guest's network says only
//! that the range is held by another guest, never its id, range, gateway or bridge. What a
//! guest can still learn is that a range is taken, by asking for it.

use std::sync::Arc;

use serde_json::json;
use wasmtime::component::{HasSelf, Linker};

use super::capability::{Capability, LoadCheck};
use super::context::{CallContext, as_json};
use super::error::HostError;
use super::replay;
use crate::cluster::validation;
use crate::sandbox::backends::{BackendError, NetworkBackend, NetworkSpec, NetworkStatus};
use crate::sandbox::wit::reconciler::api::network_backend as wit;
use crate::sandbox::wit::types;

/// The name under `backends:` in the host configuration that serves this interface.
pub(crate) const NETWORK_BACKEND: &str = "network";
/// The WIT interface name, as a component's imports name it (without the version).
const INTERFACE: &str = "network-backend";
/// Networks one guest may hold at once.
pub(crate) const MAX_NETWORKS_PER_GUEST: usize = 256;
/// Longest id a guest may name (the owner prefix and the kernel's alias limit leave this).
pub(crate) const MAX_GUEST_ID_BYTES: usize = 190;

pub(super) const CAPABILITY: Capability = Capability {
    interface: INTERFACE,
    requirement,
};

/// A guest importing `network-backend` needs the backend in its grant and in the host.
fn requirement(check: &LoadCheck<'_>) -> Vec<String> {
    let guest = &check.manifest.name;
    if !check.imports.contains(INTERFACE) {
        return Vec::new();
    }
    if !check.grant.backends.contains(NETWORK_BACKEND) {
        vec![format!(
            "the `{NETWORK_BACKEND}` backend (it imports {INTERFACE}; add it to {})",
            check.grant.place(guest, "backends")
        )]
    } else if !check.config.backends.contains_key(NETWORK_BACKEND) {
        vec![format!(
            "a `{NETWORK_BACKEND}` entry under backends: in the host configuration"
        )]
    } else {
        Vec::new()
    }
}

pub(super) fn add_to_linker<T: Send + 'static>(
    linker: &mut Linker<T>,
    get: fn(&mut T) -> &mut CallContext,
) -> wasmtime::Result<()> {
    wit::add_to_linker::<T, HasSelf<CallContext>>(linker, get)
}

fn to_wit(s: NetworkStatus) -> wit::NetworkStatus {
    wit::NetworkStatus {
        id: s.id,
        cidr: s.cidr,
        gateway: s.gateway,
        interface_name: s.interface_name,
        up: s.up,
    }
}

impl CallContext {
    fn network(&self) -> Result<Arc<dyn NetworkBackend>, HostError> {
        let ctx = &self.guest;
        ctx.grant.may_call_backend(&ctx.name, NETWORK_BACKEND)?;
        ctx.providers.network.clone().ok_or_else(|| {
            HostError::Unavailable(format!(
                "no `{NETWORK_BACKEND}` backend is configured under backends: in the host configuration"
            ))
        })
    }

    /// The provider's id of the guest's network `id`, after checking `id`.
    fn owned_id(&self, id: &str) -> Result<String, HostError> {
        let bad = if id.is_empty() {
            Some("must not be empty".to_owned())
        } else if id.len() > MAX_GUEST_ID_BYTES {
            Some(format!("is longer than {MAX_GUEST_ID_BYTES} bytes"))
        } else if id.chars().any(validation::escaped_in_messages) {
            Some(
                "may not contain control characters, line breaks or bidirectional formatting \
                 characters"
                    .to_owned(),
            )
        } else {
            None
        };
        if let Some(reason) = bad {
            return Err(HostError::Invalid(format!("id: {reason}")));
        }
        Ok(format!("{}{id}", self.owner_prefix()))
    }

    /// What every provider id of this guest's networks starts with.
    fn owner_prefix(&self) -> String {
        format!("{}/", self.guest.name)
    }

    /// A provider's error as this guest may see it: its own ids as it named them, another
    /// guest's network never named (see [`BackendError::seen_by`]).
    fn refused(&self, e: BackendError) -> HostError {
        if matches!(
            e,
            BackendError::Overlap { .. } | BackendError::NameTaken { .. }
        ) {
            // The operator's view, which may name another guest's network.
            tracing::debug!(guest = %self.guest.name, "network-backend: {e}");
        }
        match e.seen_by(&self.owner_prefix()) {
            BackendError::Invalid(m) => HostError::Invalid(format!("spec: {m}")),
            BackendError::Unavailable(m) => HostError::Unavailable(m),
            BackendError::Other(m) => HostError::Other(m),
            // `seen_by` leaves neither; were it to, nothing of the other network is passed on.
            BackendError::Overlap { .. } | BackendError::NameTaken { .. } => {
                HostError::Other("the network backend refused the spec".into())
            }
        }
    }

    /// The status as the guest sees it: its own id back, without the owner prefix.
    fn unowned(&self, mut status: NetworkStatus) -> NetworkStatus {
        let prefix = self.owner_prefix();
        if status.id.starts_with(&prefix) {
            status.id.drain(..prefix.len());
        }
        status
    }

    async fn network_get(&self, id: &str) -> Result<Option<NetworkStatus>, HostError> {
        let backend = self.network()?;
        let owned = self.owned_id(id)?;
        let status = backend.get(&owned).await.map_err(|e| self.refused(e))?;
        Ok(status.map(|s| self.unowned(s)))
    }

    async fn network_ensure(&mut self, spec: &NetworkSpec) -> Result<NetworkStatus, HostError> {
        let backend = self.network()?;
        let owned = NetworkSpec {
            id: self.owned_id(&spec.id)?,
            cidr: spec.cidr.clone(),
            gateway: spec.gateway.clone(),
        };
        if self.shadow() {
            return self.shadow_ensure(backend.as_ref(), &owned, &spec.id).await;
        }
        if backend
            .get(&owned.id)
            .await
            .map_err(|e| self.refused(e))?
            .is_none()
        {
            let prefix = self.owner_prefix();
            let held = backend
                .list()
                .await
                .map_err(|e| self.refused(e))?
                .iter()
                .filter(|n| n.id.starts_with(&prefix))
                .count();
            if held >= MAX_NETWORKS_PER_GUEST {
                return Err(HostError::Limited(format!(
                    "guest `{}` already holds {held} networks, the most one guest may hold",
                    self.guest.name
                )));
            }
        }
        let status = backend.ensure(&owned).await.map_err(|e| self.refused(e))?;
        Ok(self.unowned(status))
    }

    async fn network_delete(&mut self, id: &str) -> Result<bool, HostError> {
        let backend = self.network()?;
        let owned = self.owned_id(id)?;
        if self.shadow() {
            let exists = backend
                .get(&owned)
                .await
                .map_err(|e| self.refused(e))?
                .is_some();
            let intended = format!("network delete of {id}");
            self.differs(crate::sandbox::shadow::single(
                intended,
                exists,
                "network exists: it would be deleted",
            ));
            return Ok(exists);
        }
        backend.delete(&owned).await.map_err(|e| self.refused(e))
    }

    /// Shadow mode: what `ensure` would change, against the network as the backend has it.
    /// The spec is validated as a real ensure would (CIDR, gateway); the provider's own policy
    /// (allowed CIDRs, overlaps) is only consulted by a real ensure.
    async fn shadow_ensure(
        &mut self,
        backend: &dyn NetworkBackend,
        spec: &NetworkSpec,
        guest_id: &str,
    ) -> Result<NetworkStatus, HostError> {
        let valid = crate::sandbox::backends::validate(spec).map_err(|e| self.refused(e))?;
        let current = backend.get(&spec.id).await.map_err(|e| self.refused(e))?;
        let mut changes = Vec::new();
        match &current {
            None => changes.push(format!(
                "network does not exist: it would be created ({} via {})",
                spec.cidr, spec.gateway
            )),
            Some(have) => {
                let wanted = valid.status(have.interface_name.clone(), true);
                for (field, a, b) in [
                    ("cidr", &have.cidr, &wanted.cidr),
                    ("gateway", &have.gateway, &wanted.gateway),
                ] {
                    if a != b {
                        changes.push(format!("{field}: {a} → {b}"));
                    }
                }
                if !have.up {
                    changes.push("up: false → true".into());
                }
            }
        }
        let intended = format!("network ensure of {guest_id}");
        if !changes.is_empty() {
            self.differs(Some(crate::sandbox::shadow::Difference {
                intended,
                changes,
            }));
        }
        let status = match current {
            Some(have) => valid.status(have.interface_name, true),
            None => valid.status(String::new(), true),
        };
        Ok(self.unowned(status))
    }
}

impl wit::Host for CallContext {
    async fn get(&mut self, id: String) -> Result<Option<wit::NetworkStatus>, types::Error> {
        self.recorded(
            ("network-backend", "get"),
            || json!({ "id": id }),
            |v| {
                serde_json::from_value(v).map_err(|_| replay::malformed("a network status or null"))
            },
            async |this| this.network_get(&id).await,
            as_json,
        )
        .await
        .map(|s| s.map(to_wit))
        .map_err(Into::into)
    }

    async fn ensure(&mut self, spec: wit::NetworkSpec) -> Result<wit::NetworkStatus, types::Error> {
        let spec = NetworkSpec {
            id: spec.id,
            cidr: spec.cidr,
            gateway: spec.gateway,
        };
        self.recorded(
            ("network-backend", "ensure"),
            || json!({ "spec": spec }),
            |v| serde_json::from_value(v).map_err(|_| replay::malformed("a network status")),
            async |this| this.network_ensure(&spec).await,
            as_json,
        )
        .await
        .map(to_wit)
        .map_err(Into::into)
    }

    async fn delete(&mut self, id: String) -> Result<bool, types::Error> {
        self.recorded(
            ("network-backend", "delete"),
            || json!({ "id": id }),
            |v| v.as_bool().ok_or_else(|| replay::malformed("a boolean")),
            async |this| this.network_delete(&id).await,
            as_json,
        )
        .await
        .map_err(Into::into)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sandbox::capabilities::context::{CallContext, GuestContext, Scope};
    use crate::sandbox::capabilities::testing::Harness;
    use wit::Host as _;

    fn spec(id: &str, cidr: &str, gateway: &str) -> wit::NetworkSpec {
        wit::NetworkSpec {
            id: id.into(),
            cidr: cidr.into(),
            gateway: gateway.into(),
        }
    }

    fn as_guest(h: &Harness, name: &str) -> CallContext {
        let grant = serde_yaml::from_str("backends: [network]").unwrap();
        let context = GuestContext::new(name, grant, h.providers());
        CallContext::new(Arc::new(context), "k".into(), None)
    }

    #[tokio::test]
    async fn a_guest_sees_and_changes_only_its_own_networks() {
        let h = Harness::new();
        let mut a = as_guest(&h, "a");
        let mut b = as_guest(&h, "b");
        let made = a
            .ensure(spec("ns/net", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert_eq!(made.id, "ns/net", "the guest sees its own id");
        assert!(b.get("ns/net".into()).await.unwrap().is_none());
        assert!(!b.delete("ns/net".into()).await.unwrap());
        assert!(b.get("../a/ns/net".into()).await.unwrap().is_none());
        assert!(
            a.get("ns/net".into()).await.unwrap().is_some(),
            "still there"
        );
        let stored = h.network.list().await.unwrap();
        assert_eq!(
            stored[0].id, "a/ns/net",
            "the owner is part of the provider's id"
        );
    }

    #[tokio::test]
    async fn another_guests_network_appears_in_no_refusal_and_reads_as_absent() {
        let h = Harness::new();
        let mut a = as_guest(&h, "a");
        let mut b = as_guest(&h, "b");
        let held = a
            .ensure(spec("ns/net", "10.1.0.0/24", "10.1.0.77"))
            .await
            .unwrap();
        let secrets = [
            "a/ns/net",
            "ns/net",
            "10.1.0.0/24",
            "10.1.0.77",
            held.interface_name.as_str(),
        ];
        let mut answers = Vec::new();
        for (cidr, gateway) in [
            ("10.0.0.0/8", "10.0.0.1"),
            ("10.1.0.0/16", "10.1.0.1"),
            ("10.1.0.64/26", "10.1.0.65"),
        ] {
            let err = b.ensure(spec("ns/mine", cidr, gateway)).await.unwrap_err();
            let types::Error::Invalid(message) = &err else {
                panic!("{cidr}: expected invalid, got {err:?}")
            };
            assert_eq!(
                message,
                &format!(
                    "spec: network `ns/mine`: cidr `{cidr}` overlaps a network held by another \
                     guest; pick a disjoint range"
                )
            );
            answers.push(format!("{err:?}"));
        }
        for id in ["ns/net", "a/ns/net", "../a/ns/net", "/a/ns/net"] {
            let got = b.get(id.into()).await;
            assert!(matches!(got, Ok(None)), "{id}: {got:?}");
            let deleted = b.delete(id.into()).await;
            assert!(matches!(deleted, Ok(false)), "{id}: {deleted:?}");
            answers.push(format!("{got:?} {deleted:?}"));
        }
        for answer in &answers {
            for secret in secrets {
                assert!(!answer.contains(secret), "{secret} in {answer}");
            }
        }
        let still = a.get("ns/net".into()).await.unwrap().expect("A's network");
        assert_eq!((still.cidr, still.gateway), (held.cidr, held.gateway));

        // A guest whose name ends with another's ("ba" and "a") is no exception.
        let mut ba = as_guest(&h, "ba");
        let err = ba
            .ensure(spec("ns/x", "10.1.0.0/25", "10.1.0.1"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.contains("held by another guest")),
            "{err:?}"
        );
    }

    #[tokio::test]
    async fn an_overlap_with_the_guests_own_network_names_it_as_the_guest_wrote_it() {
        let h = Harness::new();
        let mut b = as_guest(&h, "b");
        b.ensure(spec("ns/old", "10.2.0.0/24", "10.2.0.1"))
            .await
            .unwrap();
        let err = b
            .ensure(spec("ns/wide", "10.2.0.0/16", "10.2.0.1"))
            .await
            .unwrap_err();
        let types::Error::Invalid(message) = &err else {
            panic!("expected invalid, got {err:?}")
        };
        assert_eq!(
            message,
            "spec: network `ns/wide`: cidr `10.2.0.0/16` overlaps network `ns/old` (cidr \
             `10.2.0.0/24`); pick a disjoint range or delete `ns/old` first"
        );
    }

    #[tokio::test]
    async fn ids_that_would_forge_log_lines_are_invalid() {
        let h = Harness::new();
        let mut a = as_guest(&h, "a");
        for id in ["x\u{2028}INFO forged", "x\u{202E}", "x\u{85}"] {
            let err = a.get(id.into()).await.unwrap_err();
            assert!(
                matches!(&err, types::Error::Invalid(m) if m.contains("line breaks")),
                "{id:?}: {err:?}"
            );
        }
    }

    #[tokio::test]
    async fn ids_are_checked_and_calls_need_the_grant() {
        let h = Harness::new();
        let mut a = as_guest(&h, "a");
        let err = a.get("x\n".into()).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("id:")),
            "{err:?}"
        );
        let err = a.get("x".repeat(MAX_GUEST_ID_BYTES + 1)).await.unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("id:")),
            "{err:?}"
        );
        let mut denied = h.call("{}", Scope::default());
        assert!(matches!(
            denied.get("x".into()).await,
            Err(types::Error::Denied(_))
        ));
    }

    #[tokio::test]
    async fn in_shadow_mode_the_backend_is_compared_not_changed() {
        let h = Harness::new();
        let mut active = as_guest(&h, "a");
        active
            .ensure(spec("ns/net", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        let grant = serde_yaml::from_str("{mode: shadow, backends: [network]}").unwrap();
        let context = GuestContext::new("a", grant, h.providers());
        let mut shadow = CallContext::new(Arc::new(context), "k".into(), None);

        let same = shadow
            .ensure(spec("ns/net", "10.1.0.0/24", "10.1.0.1"))
            .await
            .unwrap();
        assert_eq!(
            (same.id.as_str(), same.cidr.as_str()),
            ("ns/net", "10.1.0.0/24")
        );
        assert!(shadow.shadow_differences.is_empty(), "the same spec agrees");

        let moved = shadow
            .ensure(spec("ns/net", "10.2.0.0/24", "10.2.0.1"))
            .await
            .unwrap();
        assert_eq!(
            moved.cidr, "10.2.0.0/24",
            "the status the ensure would report"
        );
        shadow
            .ensure(spec("ns/new", "10.3.0.0/24", "10.3.0.1"))
            .await
            .unwrap();
        assert!(shadow.delete("ns/net".into()).await.unwrap());
        let err = shadow
            .ensure(spec("ns/bad", "10.4.0.5/24", "10.4.0.1"))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, types::Error::Invalid(m) if m.starts_with("spec:")),
            "{err:?}"
        );

        let shown: Vec<String> = shadow
            .shadow_differences
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            shown,
            vec![
                "network ensure of ns/net: cidr: 10.1.0.0/24 → 10.2.0.0/24; gateway: 10.1.0.1 → 10.2.0.1",
                "network ensure of ns/new: network does not exist: it would be created (10.3.0.0/24 via 10.3.0.1)",
                "network delete of ns/net: network exists: it would be deleted",
            ]
        );
        let stored = h.network.list().await.unwrap();
        assert_eq!(stored.len(), 1, "nothing was created or deleted");
        assert_eq!(stored[0].cidr, "10.1.0.0/24", "nothing was changed");
    }
}
