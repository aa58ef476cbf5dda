//! `lister`: reads from the informer caches, only for granted kinds.

use serde_json::json;

use super::{HostError, embed};
use crate::objects::{Gvk, ObjectRef};
use crate::runtime::HostState;
use crate::wit::reconciler::api::lister;
use crate::wit::types;

impl lister::Host for HostState {
    fn get(&mut self, r: types::ObjectRef) -> Result<Option<String>, types::Error> {
        let object: ObjectRef = r.into();
        let ctx = &self.call;
        let result = ctx
            .guest
            .grant
            .may_read(&ctx.guest.guest, &object.kind)
            .map_err(HostError::from)
            .and_then(|()| ctx.guest.providers.lister.get(&object));
        self.call.finish(
            "lister",
            "get",
            || json!({ "ref": object }),
            &result,
            |o| json!(o.as_deref().map(embed)),
        );
        result.map_err(Into::into)
    }

    fn list(
        &mut self,
        kind: types::Gvk,
        namespace: Option<String>,
        label_selector: Option<String>,
    ) -> Result<Vec<String>, types::Error> {
        let kind: Gvk = kind.into();
        let ctx = &self.call;
        let result = ctx
            .guest
            .grant
            .may_read(&ctx.guest.guest, &kind)
            .map_err(HostError::from)
            .and_then(|()| {
                ctx.guest.providers.lister.list(
                    &kind,
                    namespace.as_deref(),
                    label_selector.as_deref(),
                )
            });
        self.call.finish(
            "lister",
            "list",
            || json!({ "kind": kind, "namespace": namespace, "labelSelector": label_selector }),
            &result,
            |items| json!(items.iter().map(|i| embed(i)).collect::<Vec<_>>()),
        );
        result.map_err(Into::into)
    }
}
