"""A reconciler (`Guest`) and how it becomes the component's exports: `export` (the
`reconciler` interface, every guest) and `export_watches` (the optional `watches` interface,
for a guest that declares `Watch`es)."""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod

from componentize_py_types import Err

from . import _bindings, log
from .errors import HostError, ReconcileError
from .manifest import Manifest, Watch
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
                wanted = guest().manifest()
                if not isinstance(wanted, Manifest):
                    raise TypeError(f"manifest() must return a Manifest, not {wanted!r}")
                return _bindings.manifest(wanted)
            except Exception as e:
                _report(e, "manifest")
                raise

        def reconcile(self, request):  # wit Request -> wit Action, raises Err(ReconcileError)
            try:
                action = guest().reconcile(_bindings.request(request))
                if action is not None and not isinstance(action, Action):
                    raise TypeError(f"reconcile() must return an Action or None, not {action!r}")
                return _bindings.action(action)
            except ReconcileError as e:
                raise _bindings.reconcile_error(e) from None
            except HostError as e:
                raise _bindings.reconcile_error(e.reconcile_error()) from None
            except Err:
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

    class Watches:
        def watches(self):  # -> list[wit Watch]
            try:
                wanted = guest().watches()
                if not isinstance(wanted, (list, tuple)) or not all(
                    isinstance(w, Watch) for w in wanted
                ):
                    raise TypeError(f"watches() must return a list of Watch, not {wanted!r}")
                return _bindings.watches(wanted)
            except Exception as e:
                _report(e, "watches")
                raise

        def map(self, kind, obj):  # wit Gvk, JSON text -> list[wit ObjectKey]
            try:
                sdk_kind = Gvk(kind.group, kind.version, kind.kind)
                keys = guest().map(sdk_kind, _bindings.parse(obj, "the object to map"))
                return _bindings.object_keys(keys)
            except Exception as e:
                _report(e, "map")
                raise

    Watches.__qualname__ = Watches.__name__ = f"Watches[{guest.__name__}]"
    Watches.__doc__ = f"The component's `watches` export, calling {guest.__qualname__}."
    return Watches


def _report(e: Exception, export: str) -> None:
    where = traceback.extract_tb(e.__traceback__)
    at = f" at {where[-1].filename}:{where[-1].lineno} in {where[-1].name}" if where else ""
    log.error("guest %s raised %s: %s%s", export, type(e).__name__, e, at)
