"""DNSRecord (`dns.reconciler.dev/v1alpha1`, examples/crds/dnsrecord.yaml): one record set of a
PowerDNS zone, kept as the spec says through PowerDNS's REST API. Actual state outside
Kubernetes, reached over outbound HTTP (the `http-controller` world, `wit-world` beside this
file; `reconciler_guest.http`).

Configuration, from the grant's `env:`: `PDNS_API`, the URL of the PowerDNS server's API,
server id included (`http://127.0.0.1:8081/api/v1/servers/localhost`). The grant's `http:`
must allow GET and PATCH under it; the host adds the `X-API-Key` from a Secret (the guest never
sees the key).

Each reconcile reads the zone (`GET /zones/{zone}`), and when the record set is absent or
differs (contents or TTL) replaces it (`PATCH /zones/{zone}`, `changetype: REPLACE`) and reads
the zone again for `status.records` and `status.serial`. Deleting (the finalizer
`dns.reconciler.dev/cleanup`) removes the record set (`changetype: DELETE`; a missing zone or
record set is already gone). The manifest's resync (30 s) re-reads every record set, which
repairs a change made behind the controller's back.

`status.conditions` Ready, with `observedGeneration`:

| Ready | reason | when | the reconcile |
|---|---|---|---|
| True | `Synced` | PowerDNS serves the spec | succeeds |
| False | `PowerDNSUnavailable` | no answer, or a 5xx | transient: retried with backoff |
| False | `PowerDNSRejected` | a 4xx, e.g. a 422 for content PowerDNS cannot parse | permanent: waits for a spec change (and the resync) |
| False | `ZoneNotFound` | PowerDNS has no such zone | permanent |
| False | `Denied` | the grant's `http:` does not cover the request | permanent |
| False | `NotConfigured` | `PDNS_API` is not set | permanent |
| False | `InvalidSpec` | the spec lacks a field the CRD requires | permanent |
"""

import os

from reconciler_guest import (
    DeniedError,
    Guest,
    Gvk,
    HostError,
    Manifest,
    PermanentError,
    TransientError,
    UnavailableError,
    cluster,
    conditions,
    event,
    export,
    http,
    log,
)

DNSRECORD = Gvk("dns.reconciler.dev", "v1alpha1", "DNSRecord")
TIMEOUT = 5.0  # seconds per request; the reconcile's deadline bounds the whole


class Failed(Exception):
    """A reconcile that ends with Ready=False: the reason, the message, and whether a retry
    could help."""

    def __init__(self, reason: str, message: str, transient: bool):
        super().__init__(message)
        self.reason, self.message, self.transient = reason, message, transient


class DnsRecord(Guest):
    def manifest(self):
        return Manifest(
            "dnsrecord",
            DNSRECORD,
            finalizer="dns.reconciler.dev/cleanup",
            resync_seconds=30,
            generation_changed_only=True,
        )

    def reconcile(self, request):
        record = request.object
        if record is None:
            return None  # gone: the finalizer saw the record set deleted first
        generation = record.get("metadata", {}).get("generation")
        status = record.get("status") or {}
        try:
            spec = Spec(record.get("spec"))
            zone = Zone(api_url(), spec.zone)
            if request.deleting:
                zone.delete(spec)
                log.info("deleted %s %s", spec.name, spec.type)
                return None
            changed, records, serial = zone.ensure(spec)
        except Failed as failed:
            ready = conditions.new("Ready", False, failed.reason, failed.message, generation)
            write_status(request.ref, status, ready, {"observedGeneration": generation})
            if failed.transient:
                raise TransientError(f"{failed.reason}: {failed.message}") from None
            raise PermanentError(f"{failed.reason}: {failed.message}") from None
        served = f"{spec.name} {spec.type} serves {', '.join(records)} (TTL {spec.ttl})"
        fields = {"observedGeneration": generation, "records": records}
        if changed:
            fields["serial"] = serial
            log.info("%s", served)
            event.normal(request.ref, "Updated", served)
        ready = conditions.new("Ready", True, "Synced", served, generation)
        write_status(request.ref, status, ready, fields)
        return None


def api_url() -> str:
    url = os.environ.get("PDNS_API", "").rstrip("/")
    if not url:
        raise Failed(
            "NotConfigured",
            "PDNS_API is not set: give the guest its PowerDNS server's API URL in the grant's "
            "env (PDNS_API: http://HOST:PORT/api/v1/servers/localhost)",
            transient=False,
        )
    return url


def write_status(ref, status: dict, ready: dict, fields: dict) -> None:
    """Patches `fields` and the Ready condition, unless the status already says all of it."""
    conds = [dict(c) for c in status.get("conditions") or []]
    changed = conditions.set(conds, ready)
    changed |= any(status.get(k) != v for k, v in fields.items())
    if not changed:
        return
    try:
        cluster.patch_status(ref, {**fields, "conditions": conds})
    except HostError as e:
        raise e.transient("status write failed") from e


class Spec:
    """The spec, checked for what the CRD requires (the API server has already checked the
    rest: names, types, contents)."""

    def __init__(self, spec):
        spec = spec if isinstance(spec, dict) else {}
        zone, name, rtype = spec.get("zone"), spec.get("name"), spec.get("type")
        contents, ttl = spec.get("contents"), spec.get("ttl", 300)
        if not all(isinstance(v, str) and v for v in (zone, name, rtype)):
            raise Failed("InvalidSpec", "spec.zone, spec.name and spec.type are required", False)
        if not isinstance(contents, list) or not all(isinstance(c, str) for c in contents):
            raise Failed("InvalidSpec", "spec.contents must be a list of strings", False)
        if not isinstance(ttl, int) or ttl < 1:
            raise Failed("InvalidSpec", "spec.ttl must be a positive integer", False)
        self.zone, self.name, self.type = zone, name.lower(), rtype
        self.ttl, self.contents = ttl, sorted(set(contents))


class Zone:
    """One zone of one PowerDNS server, through its REST API."""

    def __init__(self, api: str, zone: str):
        self.url = f"{api}/zones/{zone}"
        self.zone = zone

    def ensure(self, spec: Spec) -> tuple[bool, list[str], int | None]:
        """Makes the record set what `spec` says: whether it changed, the contents served,
        and the zone's serial."""
        ttl, records, serial = self.read(spec)
        if ttl == spec.ttl and records == spec.contents:
            return False, records, serial
        self.patch(
            spec,
            {
                "name": spec.name,
                "type": spec.type,
                "ttl": spec.ttl,
                "changetype": "REPLACE",
                "records": [{"content": c, "disabled": False} for c in spec.contents],
            },
        )
        _, records, serial = self.read(spec)
        return True, records, serial

    def delete(self, spec: Spec) -> None:
        """Removes the record set; a zone or record set that is not there is already gone."""
        self.patch(
            spec,
            {"name": spec.name, "type": spec.type, "changetype": "DELETE"},
            missing_zone_ok=True,
        )

    def read(self, spec: Spec) -> tuple[int | None, list[str], int | None]:
        """The record set's TTL (None when absent) and served contents, and the zone's
        serial."""
        answer = self.send("GET")
        if answer.status == 404:
            raise self.no_zone()
        self.check(answer, "GET")
        try:
            zone = answer.json()
            rrset = next(
                (
                    r
                    for r in zone.get("rrsets", [])
                    if r.get("name", "").lower() == spec.name and r.get("type") == spec.type
                ),
                None,
            )
        except (ValueError, AttributeError) as e:
            raise Failed("PowerDNSUnavailable", f"GET {self.url}: not a zone: {e}", True) from None
        if rrset is None:
            return None, [], zone.get("serial")
        served = sorted(r["content"] for r in rrset.get("records", []) if not r.get("disabled"))
        return rrset.get("ttl"), served, zone.get("serial")

    def patch(self, spec: Spec, rrset: dict, missing_zone_ok: bool = False) -> None:
        answer = self.send("PATCH", {"rrsets": [rrset]})
        if answer.status == 404:
            if missing_zone_ok:
                return
            raise self.no_zone()
        self.check(answer, "PATCH")

    def send(self, method: str, body=None) -> http.Response:
        try:
            return http.request(method, self.url, body=body, timeout=TIMEOUT)
        except DeniedError as e:
            raise Failed("Denied", e.message, transient=False) from None
        except UnavailableError as e:
            raise Failed("PowerDNSUnavailable", e.message, transient=True) from None
        except HostError as e:
            raise Failed("PowerDNSUnavailable", str(e), transient=e.retryable) from None

    def check(self, answer: http.Response, method: str) -> None:
        """Raises `Failed` for an answer that is not a success."""
        if answer.ok:
            return
        try:
            why = answer.json().get("error") or answer.text
        except (ValueError, AttributeError):
            why = answer.text
        what = f"{method} {self.url} answered {answer.status}: {why.strip()[:512]}"
        if answer.status >= 500:
            raise Failed("PowerDNSUnavailable", what, transient=True)
        raise Failed("PowerDNSRejected", what, transient=False)

    def no_zone(self) -> Failed:
        return Failed(
            "ZoneNotFound",
            f"PowerDNS has no zone {self.zone} ({self.url}); create it there",
            transient=False,
        )


Reconciler = export(DnsRecord)
