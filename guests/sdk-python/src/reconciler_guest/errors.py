"""Failures of host calls (`HostError`, one subclass per kind of the WIT's `error`) and of a
reconcile (`ReconcileError`: `TransientError` or `PermanentError`).

A host error that escapes `reconcile` becomes a reconcile error by this table (the Rust SDK's):

| host error | reconcile error | why |
|---|---|---|
| `ConflictError` | transient | the object moved on; a retry reads the new version |
| `UnavailableError` | transient | the API server or backend is down or overloaded; backoff helps |
| `OtherError` | transient | unknown cause; retrying with backoff is the safe default |
| `InvalidError` | permanent | the same request would be rejected again; the object must change |
| `DeniedError` | permanent | the grant is missing; retrying cannot help until the operator changes the configuration (which reloads the guest) |
| `NotFoundError` | permanent | a write hit an object that is gone; its deletion or re-creation triggers a new reconcile |

Catch a host error where the guest knows better, e.g. to record a condition before giving up,
or to say what failed: `raise e.transient("status write failed") from e`.

Pure Python: the binding layer maps the WIT's `Err` values to these classes and back.
"""

from __future__ import annotations


class ReconcileError(Exception):
    """How a reconcile failed; raise `TransientError` or `PermanentError`."""

    message: str
    """The text the host logs and records on the key."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class TransientError(ReconcileError):
    """Retry the key with per-key exponential backoff (5 ms doubling to 1000 s)."""


class PermanentError(ReconcileError):
    """Do not retry until the object (or a watched secondary) changes again."""


class HostError(Exception):
    """A host call failed; `kind` is the contract's name for why, `message` the host's text
    (what failed and where). `str(e)` is `kind: message`."""

    kind: str = "other"
    """`denied`, `not-found`, `conflict`, `invalid`, `unavailable` or `other`."""
    retryable: bool = True
    """Whether a retry of the same call could succeed (the table above)."""
    message: str
    """The host's text."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"

    def transient(self, context: str | None = None) -> TransientError:
        """A `TransientError` saying `context: kind: message` (or `kind: message`)."""
        return TransientError(self._text(context))

    def permanent(self, context: str | None = None) -> PermanentError:
        """A `PermanentError` saying `context: kind: message` (or `kind: message`)."""
        return PermanentError(self._text(context))

    def reconcile_error(self, context: str | None = None) -> ReconcileError:
        """Transient or permanent by the table above; what the SDK does with a host error
        that escapes `reconcile`."""
        return self.transient(context) if self.retryable else self.permanent(context)

    def _text(self, context: str | None) -> str:
        return f"{context}: {self}" if context else str(self)


class DeniedError(HostError):
    """The guest's grant does not cover the call (or the object lies outside the host's
    `--watch-namespace`); the text names what is missing."""

    kind, retryable = "denied", False


class NotFoundError(HostError):
    """The object does not exist (writes only; reads return `None` instead)."""

    kind, retryable = "not-found", False


class ConflictError(HostError):
    """The object changed since it was read (HTTP 409)."""

    kind, retryable = "conflict", True


class InvalidError(HostError):
    """The request was rejected as invalid (a malformed name, kind or body, HTTP 422, bad JSON,
    bad selector); the text starts with the field."""

    kind, retryable = "invalid", False


class UnavailableError(HostError):
    """A dependency is unreachable or overloaded, or the guest exceeded one of its rates."""

    kind, retryable = "unavailable", True


class OtherError(HostError):
    """Anything else."""

    kind, retryable = "other", True


HOST_ERRORS: dict[str, type[HostError]] = {
    cls.kind: cls
    for cls in (
        DeniedError,
        NotFoundError,
        ConflictError,
        InvalidError,
        UnavailableError,
        OtherError,
    )
}
"""Each host error class by its `kind`."""
