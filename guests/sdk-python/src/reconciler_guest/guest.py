"""A reconciler (`Guest`) and how it becomes the component's exports: `export` (the
`reconciler` interface, every guest), `export_watches` (the optional `watches` interface, for a
guest that declares `Watch`es) and `export_indexes` (the optional `indexes` interface, for a
guest that declares `ComputedIndex`es).

What each export does with the guest's answer, checking it and mapping its errors, is a
function of its own (`run_reconcile`, `run_map`, `run_index`, ...), which
`reconciler_guest.testing.FakeHost` runs too, so a native test sees what the host would.
"""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod

from . import _bindings, log
from .errors import HostError, ReconcileError
from .manifest import ComputedIndex, Manifest, Watch
from .objects import Action, Gvk, ObjectKey, ObjectRef, Request


class Guest(ABC):
    """A reconciler: what it watches (`manifest`) and what it does for one key (`reconcile`).

    The host calls `manifest` once when it loads the component and `reconcile` for every key,
    each call in a fresh instance: keep no state between calls; read it from the request, the
    lister or the backend instead.
    """

    @abstractmethod
    def manifest(self) -> Manifest:
        """What the guest watches and wants; the host configuration must grant it."""

    @abstractmethod
    def reconcile(self, request: Request) -> Action | None:
        """Drives the object named by `request.ref` towards its spec.

        Return `None` (or `Action.await_change()`) when done, `Action.requeue(seconds)` to come
        back. Raise `TransientError` to be retried with backoff, `PermanentError` to wait for
        the next change of the object; a `HostError` left uncaught becomes one of them (see
        `reconciler_guest.errors`).
        """

    def watches(self) -> list[Watch]:
        """Watches beyond the manifest's `secondary` list (`Watch`), for a guest exported with
        `export_watches` too. Called once at load, right after `manifest`, with every host call
        denied. A guest that overrides it is built for the world `watching-controller`.
        """
        return []

    def map(self, kind: Gvk, obj: dict) -> list[ObjectKey | ObjectRef]:
        """The primary keys (or refs) an object of `kind`, one of the `by_function()` watches,
        affects; `obj` is the object as a dict. Called on every add, update (the new and then
        the old version) and delete of such an object, in a fresh instance under the guest's
        deadline and memory cap: `lister` answers, every write, enqueue and event is denied.
        The host takes at most 1,000 keys.

        The default maps nothing and logs an error: a guest with a function watch overrides it.
        """
        log.error(
            "map was called for %s/%s but %s does not override map(); no keys",
            kind.api_version,
            kind.kind,
            type(self).__name__,
        )
        return []

    def indexes(self) -> list[ComputedIndex]:
        """Indexes whose values the guest computes from each primary (`ComputedIndex`), for a
        guest exported with `export_indexes` too. Called once at load, after `manifest` and
        `watches`, with every host call denied. A guest that overrides it is built for the
        world `indexing-controller`.
        """
        return []

    def index(self, name: str, primary: dict) -> list[str]:
        """The values of index `name` for one primary object (a dict): for an index looked up
        by name, the names of the watched objects the primary depends on; `[]` for none.
        Called when a primary is added or changes (not per event of the watched kind), in a
        fresh instance under the guest's deadline and memory cap, with every host call but
        `log` denied: compute from the object alone. The host keeps at most 100 values of at
        most 317 bytes; an exception leaves the primary out of the index until its next change.

        The default computes nothing and logs an error: a guest with indexes overrides it.
        """
        log.error(
            "index was called for %s but %s does not override index(); no values",
            name,
            type(self).__name__,
        )
        return []


def run_manifest(guest: type[Guest]) -> Manifest:
    """`guest`'s manifest, checked."""
    wanted = guest().manifest()
    if not isinstance(wanted, Manifest):
        raise TypeError(f"manifest() must return a Manifest, not {wanted!r}")
    return wanted


def run_reconcile(guest: type[Guest], request: Request) -> Action | None:
    """`guest`'s reconcile of `request`: its action, or a `ReconcileError`, into which a
    `HostError` that escaped it is turned as `HostError.reconcile_error` says."""
    try:
        action = guest().reconcile(request)
    except HostError as e:
        raise e.reconcile_error() from e
    if action is not None and not isinstance(action, Action):
        raise TypeError(f"reconcile() must return an Action or None, not {action!r}")
    return action


def run_watches(guest: type[Guest]) -> list[Watch]:
    """`guest`'s watches, checked."""
    wanted = guest().watches()
    if not isinstance(wanted, (list, tuple)) or not all(isinstance(w, Watch) for w in wanted):
        raise TypeError(f"watches() must return a list of Watch, not {wanted!r}")
    return list(wanted)


def run_map(guest: type[Guest], kind: Gvk, obj: dict) -> list[ObjectKey]:
    """The keys `guest`'s map names for `obj`: `ObjectKey`s, or `ObjectRef`s for their keys."""
    keys = guest().map(kind, obj)
    if not isinstance(keys, (list, tuple)):
        raise TypeError(f"map() must return a list of ObjectKey or ObjectRef, not {keys!r}")
    out = []
    for k in keys:
        if isinstance(k, ObjectRef):
            k = k.key
        if not isinstance(k, ObjectKey):
            raise TypeError(f"map() must return ObjectKeys or ObjectRefs, not {k!r}")
        out.append(k)
    return out


def run_indexes(guest: type[Guest]) -> list[ComputedIndex]:
    """`guest`'s computed indexes, checked."""
    wanted = guest().indexes()
    if not isinstance(wanted, (list, tuple)) or not all(
        isinstance(i, ComputedIndex) for i in wanted
    ):
        raise TypeError(f"indexes() must return a list of ComputedIndex, not {wanted!r}")
    return list(wanted)


def run_index(guest: type[Guest], name: str, primary: dict) -> list[str]:
    """The values `guest`'s index `name` computes for `primary`, checked to be strings."""
    values = guest().index(name, primary)
    if not isinstance(values, (list, tuple)) or not all(isinstance(v, str) for v in values):
        raise TypeError(f"index() must return a list of str, not {values!r}")
    return list(values)


def export(guest: type[Guest]) -> type:
    """The class componentize-py exports as the component's `reconciler` interface, for `guest`.

    componentize-py looks for a class named `Reconciler` in the module `app`, so bind it there,
    once: `Reconciler = export(MyGuest)`.

    Any other exception escaping `guest` is a bug: it is logged at error level with where it was
    raised (the host's log stream labels it with guest and key), then the instance traps and the
    host records the traceback in the reconcile's error.
    """

    class Reconciler:
        def manifest(self):  # -> wit ControllerManifest
            try:
                return _bindings.manifest(run_manifest(guest))
            except Exception as e:
                _report(e, "manifest")
                raise

        def reconcile(self, request):  # wit Request -> wit Action, raises Err(ReconcileError)
            try:
                action = run_reconcile(guest, _bindings.request(request))
                return _bindings.action(action)
            except ReconcileError as e:
                raise _bindings.reconcile_error(e) from None
            except _bindings.Err:
                raise  # a guest using the bindings directly
            except Exception as e:
                _report(e, "reconcile")
                raise

    Reconciler.__qualname__ = Reconciler.__name__ = f"Reconciler[{guest.__name__}]"
    Reconciler.__doc__ = f"The component's `reconciler` export, calling {guest.__qualname__}."
    return Reconciler


def export_watches(guest: type[Guest]) -> type:
    """The class componentize-py exports as the component's `watches` interface, for `guest`,
    which overrides `watches()` (and `map()` for function watches).

    Bind it in `app.py` beside `Reconciler`, and build the guest for the world
    `watching-controller` (a file `wit-world` beside `app.py` holding that name):

        Reconciler = export(Mirror)
        Watches = export_watches(Mirror)

    A guest without watches exports `Reconciler` alone and keeps its world.
    """
    if guest.watches is Guest.watches:
        raise TypeError(
            f"{guest.__qualname__} does not override watches(): declare its Watches there, or "
            "export Reconciler alone"
        )
    _check_world(guest, "watches", "watching-controller")

    class Watches:
        def watches(self):  # -> list[wit Watch]
            try:
                return _bindings.watches(run_watches(guest))
            except Exception as e:
                _report(e, "watches")
                raise

        def map(self, kind, obj):  # wit Gvk, JSON text -> list[wit ObjectKey]
            try:
                sdk_kind = Gvk(kind.group, kind.version, kind.kind)
                obj = _bindings.parse(obj, "the object to map")
                return _bindings.object_keys(run_map(guest, sdk_kind, obj))
            except Exception as e:
                _report(e, "map")
                raise

    Watches.__qualname__ = Watches.__name__ = f"Watches[{guest.__name__}]"
    Watches.__doc__ = f"The component's `watches` export, calling {guest.__qualname__}."
    return Watches


def export_indexes(guest: type[Guest]) -> type:
    """The class componentize-py exports as the component's `indexes` interface, for `guest`,
    which overrides `indexes()` and `index()`.

    Bind it in `app.py` beside `Reconciler` (and `Watches`, for a guest with watches too), and
    build the guest for the world `indexing-controller` (a file `wit-world` beside `app.py`
    holding that name):

        Reconciler = export(Reloader)
        Indexes = export_indexes(Reloader)

    That world includes `watching-controller`; for a guest that binds no `Watches`, the recipe
    (guests/lib.sh) builds `controller` and the `indexes` export alone.
    """
    if guest.indexes is Guest.indexes:
        raise TypeError(
            f"{guest.__qualname__} does not override indexes(): declare its ComputedIndexes "
            "there, or export no Indexes"
        )
    _check_world(guest, "indexes", "indexing-controller")

    class Indexes:
        def indexes(self):  # -> list[wit ComputedIndex]
            try:
                return _bindings.computed_indexes(run_indexes(guest))
            except Exception as e:
                _report(e, "indexes")
                raise

        def index(self, name, primary):  # str, JSON text -> list[str]
            try:
                return run_index(guest, name, _bindings.parse(primary, "the primary to index"))
            except Exception as e:
                _report(e, "index")
                raise

    Indexes.__qualname__ = Indexes.__name__ = f"Indexes[{guest.__name__}]"
    Indexes.__doc__ = f"The component's `indexes` export, calling {guest.__qualname__}."
    return Indexes


def _check_world(guest: type[Guest], interface: str, world: str) -> None:
    """Refuses, when the component is built, an export its world lacks: componentize-py would
    leave it out without a word, and the host would never see it. Natively, without bindings,
    there is no world to check."""
    if _bindings.world_exports(interface) is False:
        raise TypeError(
            f"{guest.__qualname__} is exported with `{interface}`, which the world being built "
            f"lacks: write `{world}` into the `wit-world` file beside app.py"
        )


def _report(e: Exception, export: str) -> None:
    where = traceback.extract_tb(e.__traceback__)
    at = f" at {where[-1].filename}:{where[-1].lineno} in {where[-1].name}" if where else ""
    log.error("guest %s raised %s: %s%s", export, type(e).__name__, e, at)
