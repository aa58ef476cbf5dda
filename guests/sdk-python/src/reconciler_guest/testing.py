"""A fake host for a guest's unit tests, natively under plain pytest: `FakeHost`.

    from app import Greeter
    from reconciler_guest import ObjectKey
    from reconciler_guest.testing import FakeHost, RecordEvent

    def test_a_widget_is_greeted():
        host = FakeHost({"apiVersion": "test.reconciler.dev/v1", "kind": "Widget",
                         "metadata": {"namespace": "demo", "name": "w1"}})
        host.reconcile(Greeter, ObjectKey("demo", "w1"))
        patch, event = host.writes
        assert patch.patch["status"]["greeting"] == "hello, w1"
        assert event == RecordEvent(patch.ref, "Normal", "Greeted", "hello, w1")

While a `FakeHost` is active (a `with` block, or one of its `reconcile`, `map` and `index`), the
SDK's `lister`, `cluster`, `event`, `queue` and `log` call it instead of a host, with the JSON
text a host would get. The SDK needs no generated bindings for that, so a guest's tests run
under plain `pytest`; with bindings on the path (the SDK's own tests) it takes their place too.
The package does not import this module, so no component carries it.

What it does, as the offline runner (`reconciler-host reconcile`) does with its objects:

- **reads** answer from the objects it holds: `get` by kind, namespace and name; `list` by
  kind, namespace (`None`: every namespace) and label selector (the host's syntax and
  semantics; a bad one is an `InvalidError` saying where), sorted by namespace, then name;
- **writes** are recorded in `writes` in the order asked for (refused ones too), never sent,
  and applied to the objects as a server would, simply: `patch_status` merges the patch's
  `status` into the object's (RFC 7386: `None` removes a field, lists are replaced whole) and
  refuses a patch carrying anything but `status` and `metadata.resourceVersion`; `apply` and
  `apply_with` merge the applied object into the one held (or hold it as new); a
  `resourceVersion` (and an apply's `uid`) other than the held object's is a `ConflictError`;
  each write sets a new, larger `metadata.resourceVersion`; `delete` removes; events and
  enqueues are recorded only;
- **log lines** go to `logs`, as `(level, message)`.

Not modelled: grants (every call is allowed), the validity of names, namespaces' existence,
field ownership (`apply_with` never conflicts; make it with `fail`), a field a later apply
leaves out (a server removes it; this keeps it), `generation`, finalizers, the network
backend and outbound HTTP (whose modules need generated bindings).
"""

from __future__ import annotations

import copy
import json
import unicodedata
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from . import _bindings
from .errors import ConflictError, DeniedError, HostError, InvalidError, NotFoundError
from .guest import (
    Guest,
    run_index,
    run_indexes,
    run_manifest,
    run_map,
    run_reconcile,
    run_watches,
)
from .manifest import Function
from .objects import Action, Gvk, ObjectKey, ObjectRef, Request

# The host's words for the calls it refuses (host/src/sandbox/capabilities/deny.rs).
_MAPPING = "only the lister is available in map(): it names keys, and their reconciles write"
_INDEXING = "host calls are not available in index(): its values come from the primary object alone"


class PatchStatus(NamedTuple):
    """A `cluster.patch_status` (or `patch_status_raw`): the object and the whole merge patch,
    `{"status": {...}}`."""

    ref: ObjectRef
    patch: dict


class Apply(NamedTuple):
    """A `cluster.apply` (`force` true) or `cluster.apply_with`: the applied object."""

    object: dict
    force: bool


class Delete(NamedTuple):
    """A `cluster.delete`."""

    ref: ObjectRef


class RecordEvent(NamedTuple):
    """An event (`event.normal`, `warning`, `record`); `event_type` is `"Normal"` or
    `"Warning"`, as Kubernetes writes it."""

    regarding: ObjectRef
    event_type: str
    reason: str
    message: str


class Enqueue(NamedTuple):
    """A `queue.enqueue`, its delay in milliseconds as the host gets it (`None`: now)."""

    key: ObjectKey
    after_ms: int | None


class Log(NamedTuple):
    """A log line; `level` is the contract's name for it (`"info"`)."""

    level: str
    message: str


_FUNCTIONS = (
    "get",
    "list",
    "patch_status",
    "apply",
    "apply_with",
    "delete",
    "record_event",
    "enqueue",
)
_READS = ("get", "list")


class FakeHost:
    """Objects to read, and a record of what a guest wrote and logged; see the module's docs.

    `FakeHost(*objects)` holds `objects` (see `load`). Active in a `with` block, or for the
    duration of `reconcile`, `map` and `index`, which run a guest as the host would.
    """

    writes: list[PatchStatus | Apply | Delete | RecordEvent | Enqueue]
    """Every write the guest asked for, in order, also those refused."""
    logs: list[Log]
    """Every log line, in order."""

    def __init__(self, *objects: Any):
        self.writes = []
        self.logs = []
        self._objects: dict[ObjectRef, dict] = {}
        self._failures: dict[str, HostError] = {}
        self._refusal: tuple[str, bool] | None = None  # why, and whether reads answer
        self._version = 1000
        self._outer: list[Any] = []
        self._wire = _Wire(self)
        self.load(*objects)

    # -- what the test sets up ------------------------------------------------------------

    def load(self, *objects: Any) -> FakeHost:
        """Holds each object (replacing one of the same kind, namespace and name): a dict, JSON
        text, a list of either, or a `kind: ...List` with `items`. Each needs `apiVersion`,
        `kind` and `metadata.name` (`ValueError`)."""
        for obj in objects:
            for item in _items(obj):
                ref = ObjectRef.from_json(item)
                if ref is None:
                    raise ValueError(
                        f"not a Kubernetes object (it needs apiVersion, kind and metadata.name): "
                        f"{item!r}"
                    )
                self._objects[ref] = copy.deepcopy(item)
        return self

    def fail(self, function: str, error: HostError | None) -> None:
        """Makes every later call of `function` (`get`, `list`, `patch_status`, `apply`,
        `apply_with`, `delete`, `record_event`, `enqueue`) raise `error`, e.g.
        `ConflictError("conflict with kubectl: .spec.replicas")`; `None` ends it."""
        if function not in _FUNCTIONS:
            raise ValueError(f"no host function {function!r}; one of {', '.join(_FUNCTIONS)}")
        if error is None:
            self._failures.pop(function, None)
        elif not isinstance(error, HostError):
            raise TypeError(f"fail() takes a HostError (or None), not {error!r}")
        else:
            self._failures[function] = error

    # -- what the test reads --------------------------------------------------------------

    def get(self, ref: ObjectRef) -> dict | None:
        """A copy of the object `ref` names, as the writes left it; `None` when not held."""
        obj = self._objects.get(ObjectRef(*ref))
        return None if obj is None else copy.deepcopy(obj)

    def list(
        self, kind: Gvk, namespace: str | None = None, label_selector: str | None = None
    ) -> list[dict]:
        """Copies of the objects of `kind` in `namespace` (`None`: all) matching
        `label_selector`, sorted by namespace, then name; `InvalidError` for a bad selector."""
        selector = None if label_selector is None else _Selector.parse(label_selector)
        found = sorted(
            (r for r in self._objects if r.kind == kind),
            key=lambda r: (r.namespace or "", r.name),
        )
        return [
            copy.deepcopy(self._objects[r])
            for r in found
            if (namespace is None or r.namespace == namespace)
            and (selector is None or selector.matches(_labels(self._objects[r])))
        ]

    # -- running a guest as the host does -------------------------------------------------

    def reconcile(
        self, guest: type[Guest], key: ObjectKey | ObjectRef, *, attempt: int = 0
    ) -> Action:
        """Reconciles `key` (of the guest's primary kind) with the object held, `deleting` when
        it has a `metadata.deletionTimestamp`. Returns the action (`Action()` for `None`);
        raises the `ReconcileError` the host would get, a `HostError` the guest left uncaught
        turned into one as the SDK does, or any other exception as it is."""
        primary = run_manifest(guest).primary
        if isinstance(key, ObjectRef) and key.kind != primary:
            raise ValueError(f"{key} is not of {guest.__name__}'s primary kind {primary}")
        ref = ObjectRef(primary, key.namespace, key.name)
        obj = self._objects.get(ref)
        deleting = bool(obj is not None and (obj.get("metadata") or {}).get("deletionTimestamp"))
        raw = None if obj is None else json.dumps(obj)
        with self:
            return run_reconcile(guest, Request(ref, raw, deleting, attempt)) or Action()

    def map(self, guest: type[Guest], kind: Gvk, obj: dict | str) -> list[ObjectKey]:
        """The keys `guest.map` names for `obj` (a dict or JSON text) of `kind`, one of its
        `by_function()` watches, where, as in the host, only the lister answers."""
        kinds = {w.kind for w in run_watches(guest) if isinstance(w.mapping, Function)}
        if kind not in kinds:
            raise ValueError(f"{guest.__name__} has no by_function() watch of {kind}")
        with self, self._refusing(_MAPPING, reads=True):
            return run_map(guest, kind, _as_json(obj))

    def index(self, guest: type[Guest], name: str, primary: dict | str) -> list[str]:
        """The values `guest.index` computes for `primary` (a dict or JSON text) in index
        `name`, one of its `indexes()`, where, as in the host, every call but `log` is
        denied."""
        names = [i.name for i in run_indexes(guest)]
        if name not in names:
            raise ValueError(f"{guest.__name__} declares no index {name!r}; its indexes: {names}")
        with self, self._refusing(_INDEXING, reads=False):
            return run_index(guest, name, _as_json(primary))

    # -- activation -----------------------------------------------------------------------

    def __enter__(self) -> FakeHost:
        self._outer.append(_bindings.host)
        _bindings.host = self._wire
        return self

    def __exit__(self, *exc: Any) -> None:
        _bindings.host = self._outer.pop()

    @contextmanager
    def _refusing(self, why: str, reads: bool) -> Iterator[None]:
        outer, self._refusal = self._refusal, (why, reads)
        try:
            yield
        finally:
            self._refusal = outer

    # -- what the SDK's calls do (through _Wire) ------------------------------------------

    def _answer(self, function: str) -> None:
        """Raises what `function` gets instead of an answer: a refusal, or a set failure."""
        if self._refusal is not None and not (self._refusal[1] and function in _READS):
            raise DeniedError(self._refusal[0])
        failure = self._failures.get(function)
        if failure is not None:
            raise type(failure)(failure.message)

    def _patch_status(self, ref: ObjectRef, patch: Any) -> dict:
        _status_patch(patch)
        current = self._objects.get(ref)
        if current is None:
            raise NotFoundError(f"{ref} is not among the FakeHost's objects")
        version = (patch.get("metadata") or {}).get("resourceVersion")
        if version and version != _metadata(current).get("resourceVersion"):
            raise ConflictError(_MODIFIED)
        if "status" in patch:
            current["status"] = _merge(current.get("status"), patch["status"])
        return self._written(ref, current)

    def _apply(self, obj: Any) -> dict:
        ref = ObjectRef.from_json(obj) if isinstance(obj, dict) else None
        if ref is None:
            raise InvalidError("the applied object needs apiVersion, kind and metadata.name")
        current = self._objects.get(ref)
        _preconditions(obj, current)
        return self._written(ref, _merge(current, obj))

    def _written(self, ref: ObjectRef, obj: dict) -> dict:
        """Holds `obj` with a new resourceVersion, above every held one as a server's grow."""
        held = (_metadata(o).get("resourceVersion") for o in self._objects.values())
        numbers = [int(v) for v in held if isinstance(v, str) and v.isdigit()]
        self._version = max([self._version, *numbers]) + 1
        obj.setdefault("metadata", {})["resourceVersion"] = str(self._version)
        self._objects[ref] = obj
        return copy.deepcopy(obj)


class _Wire:
    """What `_bindings.host` is while a `FakeHost` is active: the SDK's host calls, with the
    JSON text that crosses the boundary, answered by the `FakeHost`."""

    def __init__(self, fake: FakeHost):
        self.fake = fake

    def get(self, ref: ObjectRef) -> str | None:
        self.fake._answer("get")
        obj = self.fake.get(ref)
        return None if obj is None else json.dumps(obj)

    def list(self, kind: Gvk, namespace: str | None, label_selector: str | None) -> list[str]:
        self.fake._answer("list")
        return [json.dumps(o) for o in self.fake.list(kind, namespace, label_selector)]

    def patch_status(self, ref: ObjectRef, patch: str) -> str:
        parsed = _body(patch, "patch")
        self.fake.writes.append(PatchStatus(ref, parsed))
        self.fake._answer("patch_status")
        return json.dumps(self.fake._patch_status(ref, parsed))

    def apply(self, obj: str) -> str:
        return self._apply(obj, True, "apply")

    def apply_with(self, obj: str, force: bool) -> str:
        return self._apply(obj, force, "apply_with")

    def _apply(self, obj: str, force: bool, function: str) -> str:
        parsed = _body(obj, "object")
        self.fake.writes.append(Apply(parsed, force))
        self.fake._answer(function)
        return json.dumps(self.fake._apply(copy.deepcopy(parsed)))

    def delete(self, ref: ObjectRef) -> bool:
        self.fake.writes.append(Delete(ref))
        self.fake._answer("delete")
        return self.fake._objects.pop(ref, None) is not None

    def record_event(self, regarding: ObjectRef, event_type: Any, reason: str, message: str):
        kind = event_type.name.capitalize()  # an `event.EventType`
        self.fake.writes.append(RecordEvent(regarding, kind, reason, message))
        self.fake._answer("record_event")

    def enqueue(self, key: ObjectKey, after_ms: int | None) -> None:
        self.fake.writes.append(Enqueue(key, after_ms))
        self.fake._answer("enqueue")

    def log(self, level: Any, message: str) -> None:
        self.fake.logs.append(Log(level.name.lower(), message))  # a `log.Level`


_MODIFIED = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def _body(text: str, field: str) -> Any:
    """A body the SDK sent (it serialised it, so only `patch_status_raw` can send other text)."""
    try:
        return json.loads(text)
    except ValueError as e:
        raise InvalidError(f"{field}: not JSON: {e}") from None


def _items(obj: Any) -> list[dict]:
    if isinstance(obj, (str, bytes)):
        obj = json.loads(obj)
    if isinstance(obj, (list, tuple)):
        return [item for o in obj for item in _items(o)]
    if isinstance(obj, dict) and str(obj.get("kind", "")).endswith("List"):
        if isinstance(obj.get("items"), list):
            return [item for o in obj["items"] for item in _items(o)]
    return [obj]


def _as_json(obj: dict | str) -> Any:
    """`obj` as the host hands it over: JSON text, parsed afresh."""
    return json.loads(obj if isinstance(obj, str) else json.dumps(obj))


def _metadata(obj: dict) -> dict:
    metadata = obj.get("metadata")
    return metadata if isinstance(metadata, dict) else {}


def _labels(obj: dict) -> dict[str, str]:
    labels = _metadata(obj).get("labels")
    if not isinstance(labels, dict):
        return {}
    return {k: v for k, v in labels.items() if isinstance(v, str)}


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of `patch` into `target`, in place where it can be."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


def _status_patch(patch: Any) -> None:
    """The host's check of a status patch: `status`, and `metadata.resourceVersion`, only."""
    if not isinstance(patch, dict):
        raise InvalidError("patch: must be a JSON object")
    for key, value in patch.items():
        if key == "metadata":
            if not isinstance(value, dict):
                raise InvalidError("patch.metadata: must be an object holding only resourceVersion")
            for field, version in value.items():
                if field != "resourceVersion":
                    raise InvalidError(
                        f"patch.metadata.{field}: a status patch changes status only (and may "
                        "carry metadata.resourceVersion); write metadata with apply"
                    )
                if not isinstance(version, str):
                    raise InvalidError("patch.metadata.resourceVersion: must be a string")
        elif key != "status":
            raise InvalidError(
                f"patch.{key}: a status patch changes status only (and may carry "
                "metadata.resourceVersion)"
            )


def _preconditions(applied: dict, current: dict | None) -> None:
    """A server's answers to an apply whose non-empty `metadata.uid` or `resourceVersion` does
    not match the object (a uid with no object: it refuses to create)."""
    uid = _metadata(applied).get("uid")
    theirs = None if current is None else _metadata(current).get("uid")
    if uid and current is None:
        raise ConflictError(
            f"uid mismatch: the provided object specified uid {uid}, and no existing object was "
            "found"
        )
    if uid and theirs and uid != theirs:
        raise ConflictError(
            f"Precondition failed: UID in precondition: {uid}, UID in object meta: {theirs}"
        )
    version = _metadata(applied).get("resourceVersion")
    if version and current is not None and version != _metadata(current).get("resourceVersion"):
        raise ConflictError(_MODIFIED)


# ---------------------------------------------------------------------------------------------
# Label selectors, as the host parses them (host/src/cluster/selector.rs: apimachinery's `labels.Parse`,
# matched as kube-core matches). Written here because the SDK has no dependencies.

_MAX_SELECTOR_BYTES = 4096
_SPECIAL = "=!(),><"


class _Selector:
    def __init__(self, requirements: list[tuple[str, str, frozenset[str]]]):
        self.requirements = requirements

    @classmethod
    def parse(cls, text: str) -> _Selector:
        """The selector `text`; `InvalidError` starting with `label-selector:` as the host's."""
        if len(text.encode()) > _MAX_SELECTOR_BYTES:
            raise InvalidError(f"label-selector: is longer than {_MAX_SELECTOR_BYTES} bytes")
        for c in text:
            if unicodedata.category(c) == "Cc":
                shown = c.encode("unicode_escape").decode()
                raise InvalidError(f"label-selector: may not contain {shown}")
        return cls(_Parser(text).requirements())

    def matches(self, labels: dict[str, str]) -> bool:
        for operator, key, values in self.requirements:
            value = labels.get(key)
            if operator == "=" and value not in values:
                return False
            if operator == "!=" and value in values:
                return False
            if operator == "in" and value not in values:
                return False
            if operator == "notin" and value in values:
                return False
            if operator == "exists" and value is None:
                return False
            if operator == "!" and value is not None:
                return False
        return True


class _Token(NamedTuple):
    kind: str  # "ident", one of the operators, "(", ")", ",", "end"
    text: str
    at: int  # a character offset

    def describe(self) -> str:
        if self.kind == "ident":
            return json.dumps(self.text, ensure_ascii=False)
        if self.kind == "end":
            return "the end of the selector"
        return f"'{self.kind}'"


def _lex(text: str) -> list[_Token]:
    tokens, i = [], 0
    while i < len(text):
        c = text[i]
        if c in " \t\n\r\f":
            i += 1
        elif c in _SPECIAL:
            two = text[i : i + 2]
            kind = two if two in ("!=", "==") else c
            tokens.append(_Token(kind, kind, i))
            i += len(kind)
        else:
            start = i
            while i < len(text) and text[i] not in _SPECIAL and text[i] not in " \t\n\r\f":
                i += 1
            tokens.append(_Token("ident", text[start:i], start))
    tokens.append(_Token("end", "", len(text)))
    return tokens


class _Parser:
    def __init__(self, text: str):
        self.text, self.tokens, self.next = text, _lex(text), 0

    def requirements(self) -> list[tuple[str, str, frozenset[str]]]:
        if self.peek().kind == "end":
            return []
        found = []
        while True:
            found.append(self.requirement())
            token = self.take()
            if token.kind == "end":
                return found
            if token.kind != ",":
                raise self.error(
                    token, f"expected ',' or the end of the selector, found {token.describe()}"
                )

    def peek(self) -> _Token:
        return self.tokens[min(self.next, len(self.tokens) - 1)]

    def take(self) -> _Token:
        token = self.peek()
        self.next = min(self.next + 1, len(self.tokens))
        return token

    def error(self, token: _Token, reason: str) -> InvalidError:
        at = len(self.text[: token.at].encode())
        shown = json.dumps(self.text, ensure_ascii=False)
        return InvalidError(
            f"label-selector: invalid label selector {shown} at byte {at}: {reason}"
        )

    def requirement(self) -> tuple[str, str, frozenset[str]]:
        token = self.take()
        negated = token.kind == "!"
        if negated:
            token = self.take()
        if token.kind != "ident":
            raise self.error(token, f"expected a label key, found {token.describe()}")
        key = token.text
        reason = _key_problem(key)
        if reason:
            raise self.error(token, reason)
        if negated:
            return ("!", key, frozenset())
        operator = self.peek()
        if operator.kind in (",", "end"):
            return ("exists", key, frozenset())
        if operator.kind in ("=", "==", "!="):
            self.take()
            return ("!=" if operator.kind == "!=" else "=", key, frozenset([self.exact_value()]))
        if operator.kind == "ident" and operator.text in ("in", "notin"):
            self.take()
            return (operator.text, key, self.value_set())
        if operator.kind in (">", "<"):
            raise self.error(
                operator,
                f"operator {operator.describe()} is not supported here (use =, ==, !=, in, "
                "notin, key or !key)",
            )
        raise self.error(
            operator,
            f"expected an operator (=, ==, !=, in, notin), ',' or the end after key "
            f"{json.dumps(key, ensure_ascii=False)}, found {operator.describe()}",
        )

    def exact_value(self) -> str:
        token = self.peek()
        if token.kind in (",", "end"):
            return ""
        if token.kind != "ident":
            raise self.error(token, f"expected a label value, found {token.describe()}")
        self.take()
        reason = _value_problem(token.text)
        if reason:
            raise self.error(token, reason)
        return token.text

    def value_set(self) -> frozenset[str]:
        opening = self.take()
        if opening.kind != "(":
            raise self.error(opening, f"expected '(' after in/notin, found {opening.describe()}")
        values, expect_value = set(), True
        while True:
            token = self.take()
            if token.kind == "ident" and expect_value:
                reason = _value_problem(token.text)
                if reason:
                    raise self.error(token, reason)
                values.add(token.text)
                expect_value = False
            elif token.kind in (",", ")"):
                # As in apimachinery, an empty slot (`()`, `(a,)`) is the empty value.
                if expect_value:
                    values.add("")
                if token.kind == ")":
                    return frozenset(values)
                expect_value = True
            elif token.kind == "end":
                raise self.error(token, "unclosed value list: expected ')'")
            else:
                raise self.error(
                    token,
                    f"expected a label value, ',' or ')' in the value list, found "
                    f"{token.describe()}",
                )


def _is_label_name(s: str) -> bool:
    return (
        0 < len(s) <= 63
        and s.isascii()
        and s[0].isalnum()
        and s[-1].isalnum()
        and all(c.isalnum() or c in "-_." for c in s)
    )


def _key_problem(key: str) -> str | None:
    name = key
    if "/" in key:
        prefix, _, name = key.partition("/")

        def label_ok(label: str) -> bool:
            return (
                0 < len(label) <= 63
                and all(c in "abcdefghijklmnopqrstuvwxyz0123456789-" for c in label)
                and not label.startswith("-")
                and not label.endswith("-")
            )

        if not prefix or len(prefix) > 253 or not all(map(label_ok, prefix.split("."))):
            return (
                f"label key {json.dumps(key)} has an invalid prefix {json.dumps(prefix)}: it "
                "must be a lowercase DNS subdomain (e.g. example.com) of at most 253 characters"
            )
    if not name:
        return f"label key {json.dumps(key)} has an empty name"
    if not _is_label_name(name):
        return (
            f"label key {json.dumps(key)} is invalid: the name must be at most 63 characters of "
            "[A-Za-z0-9-_.], starting and ending with a letter or digit"
        )
    return None


def _value_problem(value: str) -> str | None:
    if value == "" or _is_label_name(value):
        return None
    return (
        f"label value {json.dumps(value)} is invalid: it must be at most 63 characters of "
        "[A-Za-z0-9-_.], starting and ending with a letter or digit"
    )
