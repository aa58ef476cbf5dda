import json
from datetime import timedelta

import pytest
from componentize_py_types import Err
from wit_world.exports import reconciler
from wit_world.imports import reconciler_api_types as types
from wit_world.imports import streams
from wit_world.imports import wasi_http_types as wasi

from reconciler_guest import (
    DeniedError,
    Guest,
    Gvk,
    InvalidError,
    Manifest,
    OtherError,
    UnavailableError,
    export,
    http,
)

API = "http://127.0.0.1:8081/api/v1/servers/localhost"


def test_a_get_sends_method_scheme_authority_and_path_and_reads_the_whole_response(net):
    net.answer(
        200,
        [("Content-Type", b"application/json"), ("x-a", b"1"), ("x-a", b"2")],
        b'{"name": "example.test.", "rrsets": []}',
        chunk=3,  # the body arrives in many reads
    )
    answer = http.get(f"{API}/zones/example.test.?rrsets=true#ignored")
    (sent,) = net.sent
    assert (sent.method, sent.scheme, sent.authority, sent.path_with_query) == (
        wasi.Method_Get(),
        wasi.Scheme_Http(),
        "127.0.0.1:8081",
        "/api/v1/servers/localhost/zones/example.test.?rrsets=true",
    )
    assert (sent.headers, sent.body, sent.timeouts) == ([], b"", {})
    assert (answer.status, answer.ok, answer.shadow) == (200, True, False)
    assert answer.headers == {"content-type": "application/json", "x-a": "1, 2"}
    assert answer.header("X-A") == "1, 2" and answer.header("missing") is None
    assert answer.json() == {"name": "example.test.", "rrsets": []}
    assert answer.text == '{"name": "example.test.", "rrsets": []}'


def test_a_status_that_is_not_2xx_is_a_response_not_an_error(net):
    net.answer(404, body=b'{"error": "Could not find domain"}')
    answer = http.get(f"{API}/zones/nowhere.test.")
    assert (answer.status, answer.ok, answer.json()["error"]) == (
        404,
        False,
        "Could not find domain",
    )


def test_a_dict_body_is_sent_as_json_and_bytes_and_text_as_they_are(net):
    for _ in range(4):
        net.answer(204)
    http.patch(f"{API}/zones/example.test.", body={"rrsets": [{"name": "wörld."}]})
    http.post(f"{API}/x", body=[1], headers={"Content-Type": "application/x-custom"})
    http.put(f"{API}/x", body=b"\x00\x01", headers=[("x-b", "1"), ("x-b", b"2")])
    http.request("post", f"{API}/x", body="plain text")
    patch, post, put, text = net.sent
    assert patch.method == wasi.Method_Patch()
    assert json.loads(patch.body) == {"rrsets": [{"name": "wörld."}]}
    assert patch.headers == [("content-type", b"application/json")]
    assert (post.method, post.headers, post.body) == (
        wasi.Method_Post(),
        [("Content-Type", b"application/x-custom")],
        b"[1]",
    )
    assert (put.method, put.headers, put.body) == (
        wasi.Method_Put(),
        [("x-b", b"1"), ("x-b", b"2")],
        b"\x00\x01",
    )
    assert (text.method, text.headers, text.body) == (wasi.Method_Post(), [], b"plain text")


def test_a_body_larger_than_one_write_arrives_whole_and_https_and_other_methods_pass(net):
    net.answer(200)
    net.answer(200)
    big = bytes(range(256)) * 40  # 10240 bytes: three writes of at most 4096
    http.request("PURGE", "https://api.example.test/cache", body=big)
    http.delete("https://api.example.test/cache/1")
    purge, delete = net.sent
    assert (purge.method, purge.scheme, purge.body) == (
        wasi.Method_Other("PURGE"),
        wasi.Scheme_Https(),
        big,
    )
    assert (delete.method, delete.path_with_query) == (wasi.Method_Delete(), "/cache/1")


def test_a_timeout_bounds_connecting_the_first_byte_and_each_later_byte(net):
    net.answer(200)
    net.answer(200)
    http.get(f"{API}/a", timeout=2.5)
    http.get(f"{API}/b", timeout=timedelta(milliseconds=10))
    assert net.sent[0].timeouts == dict.fromkeys(
        ["connect", "first_byte", "between_bytes"], 2_500_000_000
    )
    assert set(net.sent[1].timeouts.values()) == {10_000_000}
    with pytest.raises(ValueError, match="positive"):
        http.get(f"{API}/c", timeout=0)


def test_the_hosts_refusal_is_a_denied_error_naming_the_url_and_what_the_grant_allows(net):
    text = (
        "guest `dnsrecord` may not DELETE http://127.0.0.1:8081/api/v1/servers/localhost/zones/x:"
        " the prefixes that hold the URL do not allow the method (allowed: GET,PATCH ...)"
    )
    net.fail(wasi.ErrorCode_InternalError(f"denied: {text}"))
    with pytest.raises(DeniedError) as raised:
        http.delete(f"{API}/zones/x")
    assert raised.value.message == text
    assert str(raised.value) == f"denied: {text}"
    assert not raised.value.retryable


@pytest.mark.parametrize(
    "code, at_handle, cls, text",
    [
        (wasi.ErrorCode_ConnectionRefused(), False, UnavailableError, "connection-refused"),
        (
            wasi.ErrorCode_DnsError(wasi.DnsErrorPayload("NXDOMAIN", None)),
            False,
            UnavailableError,
            "dns-error {'rcode': 'NXDOMAIN'}",
        ),
        (wasi.ErrorCode_HttpResponseTimeout(), False, UnavailableError, "http-response-timeout"),
        (wasi.ErrorCode_HttpRequestDenied(), False, DeniedError, "http-request-denied"),
        (wasi.ErrorCode_HttpRequestUriInvalid(), True, InvalidError, "http-request-uri-invalid"),
        (wasi.ErrorCode_HttpRequestBodySize(2_000_000), False, InvalidError, "body-size (2000000)"),
        (wasi.ErrorCode_LoopDetected(), False, OtherError, "loop-detected"),
        (wasi.ErrorCode_InternalError("boom"), True, OtherError, "internal-error: boom"),
        (wasi.ErrorCode_InternalError(None), False, OtherError, "internal-error"),
    ],
)
def test_every_other_error_code_is_raised_by_kind_with_the_request_and_the_codes_name(
    net, code, at_handle, cls, text
):
    net.fail(code, at_handle=at_handle)
    with pytest.raises(cls) as raised:
        http.patch(f"{API}/zones/x", body={"rrsets": []})
    assert type(raised.value) is cls
    assert raised.value.message.startswith(f"PATCH {API}/zones/x: ")
    assert text in raised.value.message


def test_the_hosts_unavailable_text_is_an_unavailable_error(net):
    net.fail(wasi.ErrorCode_InternalError("unavailable: the value of header X-API-Key: no Secret"))
    with pytest.raises(UnavailableError, match="^unavailable: the value of header X-API-Key"):
        http.get(API)


def test_a_body_that_breaks_off_is_unavailable_with_the_http_error(net, monkeypatch):
    class IoError:
        def __exit__(self, *exc):
            pass

    monkeypatch.setattr(wasi, "http_error_code", lambda e: wasi.ErrorCode_ConnectionTerminated())
    net.answer(200, body=b"partial")
    net.answers[-1].body_error = streams.StreamError_LastOperationFailed(IoError())
    with pytest.raises(UnavailableError, match="reading the response body failed: connection-term"):
        http.get(API)


def test_credentials_the_host_sets_and_bad_urls_are_refused_before_anything_is_sent(net):
    with pytest.raises(DeniedError, match="one the host sets"):
        http.get(API, headers={"X-API-Key": "guessed"})
    with pytest.raises(InvalidError, match="not valid HTTP"):
        http.get(API, headers={"bad name": "x"})
    for url in ["127.0.0.1:8081/api", "ftp://example.test/", "/api/v1"]:
        with pytest.raises(InvalidError, match="not an absolute http:// or https:// URL"):
            http.get(url)
    with pytest.raises(InvalidError, match="does not serialise to JSON"):
        http.post(API, body={"a": {1, 2}})
    assert net.sent == []


def test_a_request_the_host_did_not_send_in_shadow_mode_says_so(net):
    net.answer(202, [("x-reconciler-shadow", b"not-sent")])
    answer = http.patch(f"{API}/zones/x", body={})
    assert (answer.status, answer.ok, answer.shadow) == (202, True, True)


def test_a_guest_of_the_http_controller_world_calls_http_and_the_rest_of_the_sdk(
    net, status_writes
):
    """The contract's `types` is `reconciler_api_types` in this world: the SDK finds it."""
    from reconciler_guest import cluster

    class Checks(Guest):
        def manifest(self):
            return Manifest("checks", Gvk("dns.reconciler.dev", "v1alpha1", "DNSRecord"))

        def reconcile(self, request):
            answer = http.get(f"{API}/zones/example.test.")
            cluster.patch_status(request.ref, {"serial": answer.json()["serial"]})

    ref = types.ObjectRef(types.Gvk("dns.reconciler.dev", "v1alpha1", "DNSRecord"), "ns", "www")
    request = reconciler.Request(ref, None, False, 0)
    net.answer(200, body=b'{"serial": 2026112701}')
    assert export(Checks)().reconcile(request) == types.Action(requeue_after_ms=None)
    assert [json.loads(p) for _, p in status_writes] == [{"status": {"serial": 2026112701}}]

    net.fail(wasi.ErrorCode_InternalError("denied: guest `checks` may not GET ..."))
    with pytest.raises(Err) as raised:
        export(Checks)().reconcile(request)
    assert raised.value.value == types.ReconcileError_Permanent(
        "denied: guest `checks` may not GET ..."
    )
    assert export(Checks)().manifest().name == "checks"
