//! `cluster`: writes to the API server as the guest (field manager = guest name).

use serde_json::{Value, json};

use super::{EventRecord, HostError, as_json, embed, parse_json};
use crate::objects::{Gvk, ObjectRef};
use crate::runtime::HostState;
use crate::wit::reconciler::api::cluster::{self, Event, EventType};
use crate::wit::types;

impl cluster::Host for HostState {
    fn patch_status(&mut self, r: types::ObjectRef, patch: String) -> Result<String, types::Error> {
        let object: ObjectRef = r.into();
        let ctx = &self.call;
        let guest = &ctx.guest.guest;
        let result = ctx
            .guest
            .grant
            .may_write(guest, &object.kind, Some("status"))
            .map_err(HostError::from)
            .and_then(|()| parse_json(&patch, "the status patch"))
            .and_then(|patch| {
                ctx.block_on(
                    ctx.guest
                        .providers
                        .cluster
                        .patch_status(guest, &object, &patch),
                )
            });
        self.call.finish(
            "cluster",
            "patch-status",
            || json!({ "ref": object, "patch": embed(&patch) }),
            &result,
            Value::clone,
        );
        result.map(|v| v.to_string()).map_err(Into::into)
    }

    fn apply(&mut self, object: String) -> Result<String, types::Error> {
        let ctx = &self.call;
        let guest = &ctx.guest.guest;
        let result = parse_json(&object, "the applied object").and_then(|value| {
            let kind = Gvk::of_object(&value).ok_or_else(|| {
                HostError::Invalid("the applied object needs apiVersion and kind".into())
            })?;
            ctx.guest.grant.may_write(guest, &kind, None)?;
            ctx.block_on(ctx.guest.providers.cluster.apply(guest, &value))
        });
        self.call.finish(
            "cluster",
            "apply",
            || json!({ "object": embed(&object) }),
            &result,
            Value::clone,
        );
        result.map(|v| v.to_string()).map_err(Into::into)
    }

    fn delete(&mut self, r: types::ObjectRef) -> Result<bool, types::Error> {
        let object: ObjectRef = r.into();
        let ctx = &self.call;
        let guest = &ctx.guest.guest;
        let result = ctx
            .guest
            .grant
            .may_write(guest, &object.kind, None)
            .map_err(HostError::from)
            .and_then(|()| ctx.block_on(ctx.guest.providers.cluster.delete(guest, &object)));
        self.call.finish(
            "cluster",
            "delete",
            || json!({ "ref": object }),
            &result,
            as_json,
        );
        result.map_err(Into::into)
    }

    fn record_event(&mut self, event: Event) -> Result<(), types::Error> {
        let record = EventRecord {
            regarding: event.regarding.into(),
            event_type: match event.event_type {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            },
            reason: event.reason,
            message: event.message,
        };
        let ctx = &self.call;
        let guest = &ctx.guest.guest;
        // Events are allowed about anything the guest may read.
        let result = ctx
            .guest
            .grant
            .may_read(guest, &record.regarding.kind)
            .map_err(HostError::from)
            .and_then(|()| ctx.block_on(ctx.guest.providers.cluster.record_event(guest, &record)));
        self.call.finish(
            "cluster",
            "record-event",
            || as_json(&record),
            &result,
            as_json,
        );
        result.map_err(Into::into)
    }
}
