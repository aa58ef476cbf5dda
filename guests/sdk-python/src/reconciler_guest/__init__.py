"""The Python SDK for reconciler-host guests.

**A guest is one class; start here.** Subclass `Guest` (what you want watched, and what one
`reconcile(request)` does) and export it as `Reconciler` from the module `app`, the name
componentize-py looks for:

    from reconciler_guest import Gvk, Guest, Manifest, PermanentError, cluster, event, export, log

    class Hello(Guest):
        def manifest(self):
            return Manifest("hello", Gvk("example.com", "v1", "Hello"), concurrency=2)

        def reconcile(self, request):
            hello = request.object          # a dict, parsed on first use; None when gone
            if hello is None:
                log.info("%s is gone", request.key)
                return None                 # done; come back on the next change
            cluster.patch_status(request.ref, {"seen": True})
            event.normal(request.ref, "Seen", "hello")

    Reconciler = export(Hello)

Build it with `lib.sh` (componentize-py, with this package on its python path).

Watches beyond the manifest's owner and label mappings (a field index, labels naming an owner in
another namespace, a map function, a namespace and label selector per kind) are the contract's
optional `watches` export: override `Guest.watches()` (and `Guest.map()` for function watches),
bind `Watches = export_watches(Hello)` beside `Reconciler`, and build for the world
`watching-controller` (a `wit-world` file beside `app.py`):

    def watches(self):
        return [Watch(Gvk("", "v1", "ConfigMap")).by_field("spec.source", IndexValue.NAME)]

Indexes whose values the guest computes from each primary (names in an annotation, a value
built from two fields) are the optional `indexes` export: override `Guest.indexes()` and
`Guest.index(name, primary)`, bind `Watches = export_watches(Hello)` and
`Indexes = export_indexes(Hello)`, and build for the world `indexing-controller`:

    def indexes(self):
        return [ComputedIndex("configmaps", Gvk("", "v1", "ConfigMap"))]

    def index(self, name, primary):
        listed = primary["metadata"].get("annotations", {}).get("example.com/configmaps")
        return listed.split(",") if listed else []

Everything else is a la carte, one module per host interface of `wit/reconciler.wit`:

| module | what it wraps |
|---|---|
| `lister` | cache reads: `get`, `list` (label selectors), as dicts |
| `cluster` | status merge patches, server-side apply, deletes |
| `event` | Kubernetes events (`normal`/`warning` best effort, `record`) |
| `queue` | enqueueing keys of the guest's own kind, now or later |
| `log` | logging into the host's stream, `%`-formatted |
| `conditions` | `status.conditions` with a stable `lastTransitionTime` |
| `network_backend` | the Network sample's backend (only `network-controller` guests; import it yourself) |
| `testing` | `FakeHost`, for unit tests natively (import it yourself; no component carries it) |

Host calls raise a `HostError` subclass per kind of failure (`DeniedError`, `NotFoundError`,
`ConflictError`, `InvalidError`, `UnavailableError`, `OtherError`); one that escapes
`reconcile` becomes a `TransientError` or a `PermanentError` (see `errors` for which), and
`e.transient("what failed")` / `e.permanent(...)` choose for yourself.

Cost: componentize-py imports the package when it builds the component (the imports are in
its snapshot), so no reconcile imports anything; `request.object` parses the object's JSON on
first use, and `lister`/`cluster` parse what they return. A fresh instance runs each function
for the first time, which costs more than running it again: keep the path of a reconcile short.
"""

from . import cluster, conditions, event, lister, log, queue
from .errors import (
    ConflictError,
    DeniedError,
    HostError,
    InvalidError,
    NotFoundError,
    OtherError,
    PermanentError,
    ReconcileError,
    TransientError,
    UnavailableError,
)
from .guest import Guest, export, export_indexes, export_watches
from .manifest import ComputedIndex, IndexValue, Manifest, SecondaryWatch, Watch
from .objects import Action, Gvk, ObjectKey, ObjectRef, Request

__all__ = [
    "Action",
    "ComputedIndex",
    "ConflictError",
    "DeniedError",
    "Guest",
    "Gvk",
    "HostError",
    "IndexValue",
    "InvalidError",
    "Manifest",
    "NotFoundError",
    "ObjectKey",
    "ObjectRef",
    "OtherError",
    "PermanentError",
    "ReconcileError",
    "Request",
    "SecondaryWatch",
    "TransientError",
    "UnavailableError",
    "Watch",
    "cluster",
    "conditions",
    "event",
    "export",
    "export_indexes",
    "export_watches",
    "lister",
    "log",
    "queue",
]
