//! `network-backend`: actual state of networks, through the provider the grant names.

use std::sync::Arc;

use serde_json::json;

use super::{HostError, as_json};
use crate::backends::{NetworkBackend, NetworkSpec, NetworkStatus};
use crate::runtime::HostState;
use crate::wit::reconciler::api::network_backend as wit;
use crate::wit::types;

/// The name under `backends:` in the host configuration that serves this interface.
pub const NETWORK_BACKEND: &str = "network";

impl HostState {
    fn network(&self) -> Result<Arc<dyn NetworkBackend>, HostError> {
        let ctx = &self.call.guest;
        ctx.grant.may_call_backend(&ctx.guest, NETWORK_BACKEND)?;
        ctx.providers.networks.get(NETWORK_BACKEND).cloned().ok_or_else(|| {
            HostError::Unavailable(format!(
                "no `{NETWORK_BACKEND}` backend is configured under backends: in the host configuration"
            ))
        })
    }
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

impl wit::Host for HostState {
    fn get(&mut self, id: String) -> Result<Option<wit::NetworkStatus>, types::Error> {
        let result = self.network().and_then(|b| {
            self.call
                .block_on(async { b.get(&id).await.map_err(HostError::from) })
        });
        self.call.finish(
            "network-backend",
            "get",
            || json!({ "id": id }),
            &result,
            as_json,
        );
        result.map(|s| s.map(to_wit)).map_err(Into::into)
    }

    fn ensure(&mut self, spec: wit::NetworkSpec) -> Result<wit::NetworkStatus, types::Error> {
        let spec = NetworkSpec {
            id: spec.id,
            cidr: spec.cidr,
            gateway: spec.gateway,
        };
        let result = self.network().and_then(|b| {
            self.call
                .block_on(async { b.ensure(&spec).await.map_err(HostError::from) })
        });
        self.call.finish(
            "network-backend",
            "ensure",
            || json!({ "spec": spec }),
            &result,
            as_json,
        );
        result.map(to_wit).map_err(Into::into)
    }

    fn delete(&mut self, id: String) -> Result<bool, types::Error> {
        let result = self.network().and_then(|b| {
            self.call
                .block_on(async { b.delete(&id).await.map_err(HostError::from) })
        });
        self.call.finish(
            "network-backend",
            "delete",
            || json!({ "id": id }),
            &result,
            as_json,
        );
        result.map_err(Into::into)
    }
}

impl crate::wit::reconciler::api::types::Host for HostState {}
