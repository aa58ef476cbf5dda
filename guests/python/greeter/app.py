"""A reconciler written in Python on the SDK (`reconciler_guest`, guests/sdk-python), made a
component by componentize-py (guests/lib.sh).

Manifest name `greeter`, primary `test.reconciler.dev/v1 Widget` (the test CRD), reconciled only
when its generation changes. Each reconcile writes `status.observedGeneration` and
`status.greeting` ("<GREETING or hello>, <spec.message or name>", GREETING from the grant's
`env`) and records a Normal `Greeted` event. A Widget whose `spec.message` is not a string is
a permanent error; a failed status write is transient (the host retries it with backoff).
"""

import os

from reconciler_guest import (
    Guest,
    Gvk,
    HostError,
    Manifest,
    PermanentError,
    cluster,
    event,
    export,
    log,
)


class Greeter(Guest):
    def manifest(self):
        return Manifest(
            "greeter", Gvk("test.reconciler.dev", "v1", "Widget"), generation_changed_only=True
        )

    def reconcile(self, request):
        widget = request.object
        if widget is None:
            log.info("gone")
            return
        metadata = widget.get("metadata", {})
        message = widget.get("spec", {}).get("message", metadata.get("name", ""))
        if not isinstance(message, str):
            raise PermanentError(f"spec.message must be a string, not {type(message).__name__}")
        greeting = f"{os.environ.get('GREETING', 'hello')}, {message}"
        status = {"observedGeneration": metadata.get("generation", 0), "greeting": greeting}
        try:
            cluster.patch_status(request.ref, status)
        except HostError as e:
            raise e.transient("status write failed") from e
        event.normal(request.ref, "Greeted", greeting)


Reconciler = export(Greeter)
