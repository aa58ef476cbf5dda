//! `queue`: the guest adds keys of its own primary kind to its own work queue.

use std::time::Duration;

use serde_json::json;

use crate::runtime::HostState;
use crate::wit::reconciler::api::queue;
use crate::wit::types;

impl queue::Host for HostState {
    fn enqueue(
        &mut self,
        key: types::ObjectKey,
        after_ms: Option<u64>,
    ) -> Result<(), types::Error> {
        let result = self.call.guest.providers.queue.enqueue(
            key.namespace.clone(),
            key.name.clone(),
            after_ms.map(Duration::from_millis),
        );
        self.call.finish(
            "queue",
            "enqueue",
            || json!({ "key": { "namespace": key.namespace, "name": key.name }, "afterMs": after_ms }),
            &result,
            super::as_json,
        );
        result.map_err(Into::into)
    }
}
