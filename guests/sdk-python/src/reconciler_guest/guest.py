"""A reconciler (`Guest`) and how it becomes the component's export (`export`)."""

from __future__ import annotations

import traceback
from abc import ABC, abstractmethod

from componentize_py_types import Err

from . import _bindings, log
from .errors import HostError, ReconcileError
from .manifest import Manifest
from .objects import Action, Request


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


def _report(e: Exception, export: str) -> None:
    where = traceback.extract_tb(e.__traceback__)
    at = f" at {where[-1].filename}:{where[-1].lineno} in {where[-1].name}" if where else ""
    log.error("guest %s raised %s: %s%s", export, type(e).__name__, e, at)
