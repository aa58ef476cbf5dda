"""Outbound HTTP: `request(method, url, ...)` and `get`/`post`/`put`/`patch`/`delete`, on the
standard `wasi:http/outgoing-handler`. Only for guests built for the `http-controller` world (a
`wit-world` file beside `app.py` naming it); the package does not import this module, so a
`controller` guest never needs the interface. `from reconciler_guest import http`:

    answer = http.get(f"{api}/zones/{zone}")
    if answer.status == 404:
        ...
    rrsets = answer.json()["rrsets"]
    http.patch(f"{api}/zones/{zone}", body={"rrsets": [...]})  # a dict is sent as JSON

The host sends a request only when the `http:` of the guest's grant covers its URL and method,
and adds the grant's credentials itself (an `X-API-Key`, a bearer token): the guest never sees
them, and may not set those headers. Synchronous, as `reconcile` is: a call returns when the
whole response is in (the host buffers it, at most 4 MiB), within the reconcile's deadline.

Failures raise the SDK's `HostError`s, so one that escapes `reconcile` is retried or not by the
usual table (`reconciler_guest.errors`):

| what happened | error |
|---|---|
| the grant does not cover the request (`internal-error` "denied: ...", `HTTP-request-denied`, `destination-IP-prohibited`) | `DeniedError` (permanent) |
| no answer: DNS, connection, TLS, timeouts, a broken response (`connection-refused`, `DNS-timeout`, ...), the host's "unavailable: ..." | `UnavailableError` (transient) |
| the request itself is malformed (a bad URL, method or header, a body too large) | `InvalidError` (permanent) |
| any other `error-code` | `OtherError` (transient) |

The text names the method, the URL and the `error-code` (`GET http://...: connection-refused`).
An HTTP status is not an error: a 404 or a 503 is a `Response` like a 200; the guest decides.

Cost: one `handle` and a few resource calls per request; the host's policy (grant, rate,
credentials, address checks) runs before anything is sent.
"""

from __future__ import annotations

import json as _json
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

from componentize_py_types import Err, Ok
from wit_world.imports import outgoing_handler as _handler
from wit_world.imports import streams as _streams

try:
    # Beside the contract's own `types`, componentize-py names wasi:http's after its package.
    from wit_world.imports import wasi_http_types as _types
except ImportError:  # a world without a second `types`
    from wit_world.imports import types as _types  # type: ignore[no-redef]

from .errors import DeniedError, HostError, InvalidError, OtherError, UnavailableError

Headers = Mapping[str, str | bytes] | Iterable[tuple[str, str | bytes]]
"""Request headers: a dict, or `(name, value)` pairs (a name may repeat)."""

Timeout = float | timedelta
"""Seconds (`5`, `0.5`) or a `datetime.timedelta`."""

SHADOW_HEADER = "x-reconciler-shadow"
"""Set (`not-sent`) on the 202 the host answers instead of sending a request in shadow mode."""

# wasi:io's `blocking-write-and-flush` takes at most 4096 bytes a call.
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 * 1024


class Response:
    """A whole HTTP response: `status`, `headers` (a dict, names lower case, repeated values
    joined with `, `) and `body` (bytes)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    @property
    def ok(self) -> bool:
        """A 2xx status."""
        return 200 <= self.status < 300

    @property
    def shadow(self) -> bool:
        """The host did not send the request (shadow mode sends only GET and HEAD) and answered
        202 itself: what the API would have said is unknown."""
        return self.headers.get(SHADOW_HEADER) == "not-sent"

    @property
    def text(self) -> str:
        """The body as UTF-8 text (undecodable bytes replaced)."""
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed as JSON; `ValueError` when it is not JSON."""
        return _json.loads(self.body)

    def header(self, name: str, default: str | None = None) -> str | None:
        """One header's value, the name in any case."""
        return self.headers.get(name.lower(), default)

    def __repr__(self) -> str:
        return f"Response({self.status}, {len(self.body)} bytes)"


def request(
    method: str,
    url: str,
    headers: Headers | None = None,
    body: bytes | str | Any = None,
    timeout: Timeout | None = None,
) -> Response:
    """Sends `method` to `url` (absolute, `http://` or `https://`) and returns the whole response.

    `body`: bytes as they are, a `str` as UTF-8, anything else (a dict, a list) as JSON with
    `Content-Type: application/json` unless `headers` name one. `timeout` bounds connecting, the
    first byte and each later byte (the reconcile's deadline bounds everything anyway).
    Raises a `HostError` (table above) when no response came.
    """
    method = method.upper()
    what = f"{method} {url}"
    # Everything that can be refused here is checked before the first resource is made.
    nanos = _nanos(timeout)
    data = _body_bytes(body, what)
    target = _target(url, what)
    outgoing = _outgoing_request(method, target, _fields(headers, body, what), what)
    out_body = outgoing.body() if data else None
    try:
        future = _handler.handle(outgoing, _options(nanos))  # takes the request and options
    except Err as e:
        if out_body is not None:
            out_body.__exit__(None, None, None)
        raise _error(e.value, what) from None
    # After `handle`: the host reads the body while it streams, so a body larger than what the
    # stream buffers cannot wait for a reader that does not exist yet.
    write_failed = _write_body(out_body, data) if out_body is not None else None
    response = _wait(future, what)
    if write_failed is not None:
        response.__exit__(None, None, None)
        raise UnavailableError(f"{what}: writing the body failed: {write_failed}")
    return _read(response, what)


def get(url: str, headers: Headers | None = None, timeout: Timeout | None = None) -> Response:
    """`request("GET", url, ...)`."""
    return request("GET", url, headers, None, timeout)


def post(
    url: str, body: Any = None, headers: Headers | None = None, timeout: Timeout | None = None
) -> Response:
    """`request("POST", url, ...)`."""
    return request("POST", url, headers, body, timeout)


def put(
    url: str, body: Any = None, headers: Headers | None = None, timeout: Timeout | None = None
) -> Response:
    """`request("PUT", url, ...)`."""
    return request("PUT", url, headers, body, timeout)


def patch(
    url: str, body: Any = None, headers: Headers | None = None, timeout: Timeout | None = None
) -> Response:
    """`request("PATCH", url, ...)`."""
    return request("PATCH", url, headers, body, timeout)


def delete(
    url: str, body: Any = None, headers: Headers | None = None, timeout: Timeout | None = None
) -> Response:
    """`request("DELETE", url, ...)`."""
    return request("DELETE", url, headers, body, timeout)


# ---------------------------------------------------------------------------------------------
# The request


def _header_items(headers: Headers | None) -> list[tuple[str, bytes]]:
    if headers is None:
        return []
    items = headers.items() if isinstance(headers, Mapping) else headers
    return [(n, v if isinstance(v, bytes) else str(v).encode()) for n, v in items]


def _fields(headers: Headers | None, body: Any, what: str) -> Any:
    items = _header_items(headers)
    if _is_json(body) and not any(n.lower() == "content-type" for n, _ in items):
        items.append(("content-type", b"application/json"))
    try:
        return _types.Fields.from_list(items)
    except Err as e:
        names = ", ".join(n for n, _ in items)
        if isinstance(e.value, _types.HeaderError_Forbidden):
            raise DeniedError(
                f"{what}: a header among {names} is one the host sets (the grant's credentials, "
                "or a hop-by-hop header): leave it out"
            ) from None
        raise InvalidError(f"{what}: a header among {names} is not valid HTTP") from None


def _is_json(body: Any) -> bool:
    return body is not None and not isinstance(body, (bytes, bytearray, str))


def _body_bytes(body: Any, what: str) -> bytes:
    if body is None:
        return b""
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    if isinstance(body, str):
        return body.encode()
    try:
        return _json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    except (TypeError, ValueError) as e:
        raise InvalidError(f"{what}: the body does not serialise to JSON: {e}") from None


_METHODS = {
    "GET": "Method_Get",
    "HEAD": "Method_Head",
    "POST": "Method_Post",
    "PUT": "Method_Put",
    "DELETE": "Method_Delete",
    "CONNECT": "Method_Connect",
    "OPTIONS": "Method_Options",
    "TRACE": "Method_Trace",
    "PATCH": "Method_Patch",
}


def _target(url: str, what: str) -> tuple[Any, str, str]:
    """The wasi:http scheme, the authority and the path with its query of `url`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https") or not parts.netloc:
        raise InvalidError(f"{what}: not an absolute http:// or https:// URL")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    wit_scheme = _types.Scheme_Https() if scheme == "https" else _types.Scheme_Http()
    return wit_scheme, parts.netloc, path


def _outgoing_request(method: str, target: tuple[Any, str, str], fields: Any, what: str) -> Any:
    scheme, authority, path = target
    outgoing = _types.OutgoingRequest(fields)  # takes the fields
    known = _METHODS.get(method)
    try:
        outgoing.set_method(getattr(_types, known)() if known else _types.Method_Other(method))
        outgoing.set_scheme(scheme)
        outgoing.set_authority(authority)
        outgoing.set_path_with_query(path)
    except Err:
        outgoing.__exit__(None, None, None)
        raise InvalidError(f"{what}: the method or URL is not valid HTTP") from None
    return outgoing


def _nanos(timeout: Timeout | None) -> int | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, timedelta) else float(timeout)
    if seconds <= 0:
        raise ValueError(f"a timeout must be positive, got {timeout!r}")
    return int(seconds * 1e9)


def _options(nanos: int | None) -> Any:
    if nanos is None:
        return None
    options = _types.RequestOptions()
    for setter in (
        options.set_connect_timeout,
        options.set_first_byte_timeout,
        options.set_between_bytes_timeout,
    ):
        try:
            setter(nanos)
        except Err:
            pass  # a host without this timeout: the reconcile's deadline still bounds the call
    return options


def _write_body(out_body: Any, data: bytes) -> str | None:
    """Writes and finishes the body; the reason it failed, or `None`. A failure is reported
    only if the response says nothing worse (a refused request's body is never read)."""
    try:
        with out_body.write() as stream:
            for start in range(0, len(data), _WRITE_CHUNK):
                stream.blocking_write_and_flush(data[start : start + _WRITE_CHUNK])
    except Err as e:
        out_body.__exit__(None, None, None)
        return _stream_error_text(e.value)
    try:
        _types.OutgoingBody.finish(out_body, None)
    except Err as e:
        return _code_name(e.value)
    return None


# ---------------------------------------------------------------------------------------------
# The response


def _wait(future: Any, what: str) -> Any:
    """Blocks until the response's head is in; the `incoming-response`."""
    try:
        while True:
            outcome = future.get()
            if outcome is not None:
                break
            with future.subscribe() as pollable:
                pollable.block()
    finally:
        future.__exit__(None, None, None)
    if isinstance(outcome, Ok):
        outcome = outcome.value
    else:  # the outer error: the response was taken already, which `request` never does
        raise OtherError(f"{what}: the response was already taken")
    if isinstance(outcome, Err):
        raise _error(outcome.value, what)
    return outcome.value if isinstance(outcome, Ok) else outcome


def _read(response: Any, what: str) -> Response:
    try:
        status = response.status()
        with response.headers() as fields:
            entries = fields.entries()
        body = response.consume()
        chunks: list[bytes] = []
        failed = None
        with body.stream() as stream:
            while True:
                try:
                    chunks.append(stream.blocking_read(_READ_CHUNK))
                except Err as e:
                    if not isinstance(e.value, _streams.StreamError_Closed):
                        failed = _stream_error_text(e.value)
                    break
        _types.IncomingBody.finish(body).__exit__(None, None, None)
    finally:
        response.__exit__(None, None, None)
    if failed is not None:
        raise UnavailableError(f"{what}: reading the response body failed: {failed}")
    headers: dict[str, str] = {}
    for name, value in entries:
        name, text = name.lower(), value.decode("latin-1")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return Response(status, headers, b"".join(chunks))


# ---------------------------------------------------------------------------------------------
# Errors

_DENIED = {"HttpRequestDenied", "DestinationIpProhibited"}
_UNAVAILABLE = {
    "DnsTimeout",
    "DnsError",
    "DestinationNotFound",
    "DestinationUnavailable",
    "DestinationIpUnroutable",
    "ConnectionRefused",
    "ConnectionTerminated",
    "ConnectionTimeout",
    "ConnectionReadTimeout",
    "ConnectionWriteTimeout",
    "ConnectionLimitReached",
    "TlsProtocolError",
    "TlsCertificateError",
    "TlsAlertReceived",
    "HttpResponseIncomplete",
    "HttpResponseTimeout",
    "HttpProtocolError",
}
_INVALID_PREFIX = "HttpRequest"  # HTTP-request-URI-invalid, -body-size, -header-size, ...


def _code_name(code: Any) -> str:
    """`connection-refused`, `internal-error`, ... with the payload, if any, after it."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    text = re.sub(r"(?<!^)(?=[A-Z])", "-", name).lower()
    payload = getattr(code, "value", None)
    if payload is None:
        return text
    if hasattr(payload, "__dataclass_fields__"):
        shown = {k: v for k, v in vars(payload).items() if v is not None}
        return f"{text} {shown}" if shown else text
    return f"{text} ({payload})"


def _error(code: Any, what: str) -> HostError:
    """The `HostError` for the `error-code` a request ended with."""
    name = type(code).__name__.removeprefix("ErrorCode_")
    if name == "InternalError" and isinstance(code.value, str):
        text = code.value
        for prefix, cls in (("denied: ", DeniedError), ("unavailable: ", UnavailableError)):
            if text.startswith(prefix):
                return cls(text.removeprefix(prefix))
        return OtherError(f"{what}: internal-error: {text}")
    if name in _DENIED:
        return DeniedError(f"{what}: {_code_name(code)}")
    if name in _UNAVAILABLE:
        return UnavailableError(f"{what}: {_code_name(code)}")
    if name.startswith(_INVALID_PREFIX):
        return InvalidError(f"{what}: {_code_name(code)}")
    return OtherError(f"{what}: {_code_name(code)}")


def _stream_error_text(error: Any) -> str:
    if isinstance(error, _streams.StreamError_Closed):
        return "the stream closed"
    io_error = error.value  # last-operation-failed carries a wasi:io error
    try:
        code = _types.http_error_code(io_error)
        return _code_name(code) if code is not None else io_error.to_debug_string()
    finally:
        io_error.__exit__(None, None, None)
