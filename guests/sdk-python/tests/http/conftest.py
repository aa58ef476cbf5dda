"""The tests of `reconciler_guest.http` run against the bindings of the `http-controller` world
(test.sh generates them apart: that world names the contract's `types` `reconciler_api_types`),
with wasi:http's resources replaced by `FakeNetwork`'s: what the SDK sends is recorded, the
answers are queued, and every resource must be released the way the WIT demands (a child
stream dropped before its body is finished, nothing left open)."""

from dataclasses import dataclass, field

import pytest
from componentize_py_types import Err, Ok
from wit_world.imports import cluster, outgoing_handler, streams
from wit_world.imports import wasi_http_types as wasi


@dataclass
class Sent:
    """A request as the fake host read it, its body written and finished."""

    method: object
    scheme: object
    authority: str
    path_with_query: str
    headers: list
    body: bytes
    timeouts: dict = field(default_factory=dict)


@dataclass
class Answer:
    """What the fake host answers: a response (body in `chunks`), an `error-code` for the
    response (`error`), or one `handle` raises (`at_handle`)."""

    status: int = 200
    headers: list = field(default_factory=list)
    chunks: list = field(default_factory=list)
    error: object = None
    at_handle: object = None
    body_error: object = None


class FakeNetwork:
    def __init__(self):
        self.sent: list[Sent] = []
        self.answers: list[Answer] = []
        self.forbidden = {"x-api-key"}  # the grant's credential header
        self.live: set = set()  # resources made and not yet released

    def answer(self, status=200, headers=(), body=b"", chunk=None):
        chunk = chunk or max(len(body), 1)
        chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)]
        self.answers.append(Answer(status, list(headers), chunks))

    def fail(self, code, at_handle=False):
        self.answers.append(Answer(at_handle=code) if at_handle else Answer(error=code))

    # Every fake resource registers here; dropping or consuming it releases it.
    def made(self, resource):
        self.live.add(resource)
        return resource

    def released(self, resource):
        assert resource in self.live, f"{resource!r} released twice or never made"
        self.live.remove(resource)


NET: FakeNetwork | None = None


class Resource:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        NET.released(self)


class Fields(Resource):
    def __init__(self, entries):
        self._entries = list(entries)

    @classmethod
    def from_list(cls, entries):
        for name, value in entries:
            if name.lower() in NET.forbidden:
                raise Err(wasi.HeaderError_Forbidden())
            if not name or " " in name or b"\n" in value:
                raise Err(wasi.HeaderError_InvalidSyntax())
        return NET.made(cls(entries))

    def entries(self):
        return list(self._entries)


class OutputStream(Resource):
    def __init__(self, sink):
        self.sink = sink
        self.dropped = False

    def blocking_write_and_flush(self, contents):
        assert len(contents) <= 4096, "wasi:io takes at most 4096 bytes a call"
        self.sink.data += contents

    def __exit__(self, *exc):
        self.dropped = True
        super().__exit__(*exc)


class OutgoingBody(Resource):
    def __init__(self):
        self.data = b""
        self.stream = None
        self.finished = False

    def write(self):
        assert self.stream is None, "write() twice"
        self.stream = NET.made(OutputStream(self))
        return self.stream

    @classmethod
    def finish(cls, this, trailers):
        assert this.stream is None or this.stream.dropped, "finish before the stream is dropped"
        this.finished = True
        NET.released(this)


class RequestOptions(Resource):
    def __init__(self):
        self.timeouts = {}
        NET.made(self)

    def set_connect_timeout(self, nanos):
        self.timeouts["connect"] = nanos

    def set_first_byte_timeout(self, nanos):
        self.timeouts["first_byte"] = nanos

    def set_between_bytes_timeout(self, nanos):
        self.timeouts["between_bytes"] = nanos


class OutgoingRequest(Resource):
    def __init__(self, headers):
        NET.released(headers)  # the request takes the fields
        self.headers = headers.entries()
        self.method, self.scheme, self.authority, self.path = wasi.Method_Get(), None, None, None
        self.out_body = None
        NET.made(self)

    def set_method(self, method):
        self.method = method

    def set_scheme(self, scheme):
        self.scheme = scheme

    def set_authority(self, authority):
        self.authority = authority

    def set_path_with_query(self, path):
        self.path = path

    def body(self):
        assert self.out_body is None, "body() twice"
        self.out_body = NET.made(OutgoingBody())
        return self.out_body


class Pollable(Resource):
    def __init__(self, future):
        self.future = future

    def block(self):
        self.future.ready = True


class InputStream(Resource):
    def __init__(self, chunks, error):
        self.chunks, self.error, self.dropped = list(chunks), error, False

    def blocking_read(self, n):
        if self.chunks:
            chunk = self.chunks.pop(0)
            if len(chunk) > n:
                self.chunks.insert(0, chunk[n:])
            return chunk[:n]
        raise Err(self.error or streams.StreamError_Closed())

    def __exit__(self, *exc):
        self.dropped = True
        super().__exit__(*exc)


class FutureTrailers(Resource):
    pass


class IncomingBody(Resource):
    def __init__(self, answer):
        self.answer, self.input = answer, None

    def stream(self):
        self.input = NET.made(InputStream(self.answer.chunks, self.answer.body_error))
        return self.input

    @classmethod
    def finish(cls, this):
        assert this.input is None or this.input.dropped, "finish before the stream is dropped"
        NET.released(this)
        return NET.made(FutureTrailers())


class IncomingResponse(Resource):
    def __init__(self, answer):
        self.answer = answer

    def status(self):
        return self.answer.status

    def headers(self):
        return NET.made(Fields(self.answer.headers))

    def consume(self):
        return NET.made(IncomingBody(self.answer))


class FutureIncomingResponse(Resource):
    def __init__(self, request, options, answer):
        self.request, self.options, self.answer = request, options, answer
        self.ready, self.taken = False, False

    def subscribe(self):
        return NET.made(Pollable(self))

    def get(self):
        if not self.ready:  # the SDK must block on the pollable first
            return None
        if self.taken:
            return Err(None)
        self.taken = True
        out_body = self.request.out_body
        assert out_body is None or out_body.finished, "the response awaited before the body ended"
        NET.sent.append(
            Sent(
                self.request.method,
                self.request.scheme,
                self.request.authority,
                self.request.path,
                self.request.headers,
                out_body.data if out_body else b"",
                self.options,
            )
        )
        if self.answer.error is not None:
            return Ok(Err(self.answer.error))
        return Ok(Ok(NET.made(IncomingResponse(self.answer))))


def handle(request, options):
    NET.released(request)  # handle takes the request and the options
    if options is not None:
        NET.released(options)
    answer = NET.answers.pop(0)
    if answer.at_handle is not None:
        raise Err(answer.at_handle)
    timeouts = dict(options.timeouts) if options is not None else {}
    return NET.made(FutureIncomingResponse(request, timeouts, answer))


@pytest.fixture
def net(monkeypatch):
    global NET
    NET = FakeNetwork()
    for name, fake in [
        ("Fields", Fields),
        ("OutgoingRequest", OutgoingRequest),
        ("OutgoingBody", OutgoingBody),
        ("RequestOptions", RequestOptions),
        ("IncomingBody", IncomingBody),
    ]:
        monkeypatch.setattr(wasi, name, fake)
    monkeypatch.setattr(outgoing_handler, "handle", handle)
    yield NET
    assert not NET.live, f"resources left open: {NET.live}"


@pytest.fixture
def status_writes(monkeypatch):
    """`cluster.patch_status` replaced: the patches, as JSON text."""
    writes = []

    def patch_status(ref, patch):
        writes.append((ref, patch))
        return "{}"

    monkeypatch.setattr(cluster, "patch_status", patch_status)
    return writes
