"""A reconciler written in Python: proof that the reconciler:api contract is usable from a
language other than Rust (componentize-py turns this file and its bindings into a component).

Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget` (the test CRD), reconciled only
when its generation changes. Each reconcile writes `status.observedGeneration` and
`status.greeting` ("hello, <spec.message or name>") and records a Normal `Greeted` event. A
Widget whose `spec.message` is not a string is a permanent error; a failed status write is
transient (the host retries it with backoff).
"""

import json

from componentize_py_types import Err
from wit_world import exports
from wit_world.exports import reconciler
from wit_world.imports import cluster, log, types


class Reconciler(exports.Reconciler):
    def manifest(self) -> reconciler.ControllerManifest:
        return reconciler.ControllerManifest(
            name="greeter",
            primary=types.Gvk(group="test.reconciler.dev", version="v1", kind="Widget"),
            namespace=None,
            label_selector=None,
            secondary=[],
            finalizer=None,
            concurrency=0,
            resync_seconds=0,
            generation_changed_only=True,
        )

    def reconcile(self, request: reconciler.Request) -> types.Action:
        if request.object is None:
            log.log(log.Level.INFO, "gone")
            return types.Action(requeue_after_ms=None)
        widget = json.loads(request.object)
        metadata = widget.get("metadata", {})
        message = widget.get("spec", {}).get("message", metadata.get("name", ""))
        if not isinstance(message, str):
            raise Err(types.ReconcileError_Permanent(
                f"spec.message must be a string, not {type(message).__name__}"))
        greeting = f"hello, {message}"
        patch = {"status": {
            "observedGeneration": metadata.get("generation", 0),
            "greeting": greeting,
        }}
        try:
            cluster.patch_status(request.ref, json.dumps(patch, separators=(",", ":")))
        except Err as e:
            raise Err(types.ReconcileError_Transient(f"status write failed: {e.value}"))
        cluster.record_event(cluster.Event(
            regarding=request.ref,
            event_type=cluster.EventType.NORMAL,
            reason="Greeted",
            message=greeting,
        ))
        return types.Action(requeue_after_ms=None)
