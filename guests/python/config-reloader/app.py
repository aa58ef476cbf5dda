"""config-reloader in Python, a port of the Go guest `guests/go/config-reloader` and the Rust one
`guests/config-reloader` with the same behaviour (docs/examples/config-reloader.md). A
Deployment lists ConfigMaps of its namespace in the annotation `reloader.example/configmaps:
"a,b"`; the guest keeps `reloader.example/config-hash` on its Pod template equal to a hash of
those ConfigMaps' `data` and `binaryData`, so a change to one rolls the Pods. Built for the world
`indexing-controller` (`wit-world` beside this file).

- Its grant writes Deployments with `writeVerbs: {apps/v1/Deployment: [patch]}`, and it applies
  a partial object (name, namespace, the hash annotation) without `force`
  (`cluster.apply_with`), so every other field stays its owner's; if another manager owns the
  annotation itself, the condition turns False (`HashConflict`, naming it) and the reconcile is
  retried with backoff.
- A ConfigMap change reconciles the Deployments whose annotation lists it: a computed index
  (`INDEX`, `Reloader.index`) the host keeps over the Deployments, so a ConfigMap event is a
  lookup in the host's memory, not a guest call. It has no other watches, so it binds no
  `Watches`: the recipe builds it for `controller` and the `indexes` export alone.
- A malformed list or a missing ConfigMap keeps the last hash and says so: condition
  `reloader.example/ConfigHashed` False (`InvalidAnnotation`, `ConfigMapNotFound`) and a
  Warning event. Without the annotation, the hash and the condition are removed.

`test_app.py` beside it pins the index and a reconcile, natively (`guests/sdk-python/test.sh`).
"""

import hashlib
import json
import re

from reconciler_guest import (
    ComputedIndex,
    ConflictError,
    Guest,
    Gvk,
    HostError,
    Manifest,
    ObjectRef,
    TransientError,
    cluster,
    conditions,
    event,
    export,
    export_indexes,
    lister,
)

LIST_ANNOTATION = "reloader.example/configmaps"
"""The list a user writes on the Deployment."""
HASH_ANNOTATION = "reloader.example/config-hash"
"""The hash the guest writes on the Pod template."""
CONDITION_TYPE = "reloader.example/ConfigHashed"
"""The condition it keeps among the Deployment's."""
INDEX = "configmaps"
"""The index of the ConfigMaps each Deployment lists: a ConfigMap event is looked up in it by
name, among the Deployments of its namespace."""

DEPLOYMENT = Gvk("apps", "v1", "Deployment")
CONFIG_MAP = Gvk("", "v1", "ConfigMap")
# A DNS-1123 subdomain, as a ConfigMap's name must be.
SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


class Reloader(Guest):
    def manifest(self):
        return Manifest("config-reloader", DEPLOYMENT)

    def indexes(self):
        return [ComputedIndex(INDEX, CONFIG_MAP)]

    def index(self, name, primary):
        """The ConfigMaps a Deployment lists; none when its list is missing or malformed (its
        reconcile says so, and the next change of the Deployment indexes it again)."""
        listed = annotations(primary).get(LIST_ANNOTATION)
        if not isinstance(listed, str):
            return []
        try:
            return parse_list(listed)
        except ValueError:
            return []

    def reconcile(self, request):
        deployment = request.object
        if deployment is None:
            return None
        conds = (deployment.get("status") or {}).get("conditions") or []
        template = (deployment.get("spec") or {}).get("template") or {}
        current = annotations(template).get(HASH_ANNOTATION)
        listed = annotations(deployment).get(LIST_ANNOTATION)
        if not isinstance(listed, str):
            # Not (or no longer) ours: drop the hash and the condition if they are there.
            if current is not None:
                try:
                    apply_hash(request.ref, None)
                except HostError as e:
                    raise e.transient("removing the hash") from e
            write_condition(request.ref, conds, None)
            return None
        outcome = desired(request.ref.namespace, listed)
        if outcome.hash is not None and outcome.hash != current:
            try:
                apply_hash(request.ref, outcome.hash)
            except ConflictError as e:
                # Another field manager owns the annotation: say who, and retry with backoff.
                message = f"the hash annotation is another field manager's: {e.message}"
                event.warning(request.ref, "HashConflict", message)
                write_condition(request.ref, conds, condition(False, "HashConflict", message))
                raise TransientError(message) from e
            except HostError as e:
                raise e.transient("applying the hash") from e
        if not outcome.ok:
            event.warning(request.ref, outcome.reason, outcome.message)
        write_condition(request.ref, conds, condition(outcome.ok, outcome.reason, outcome.message))
        return None


def annotations(obj: dict) -> dict:
    return (obj.get("metadata") or {}).get("annotations") or {}


def parse_list(value: str) -> list[str]:
    """The ConfigMap names of an annotation value (`a, b`), sorted and once each; `ValueError`
    saying why it is malformed: an empty entry or one that is not a ConfigMap name."""
    names = set()
    for entry in value.split(","):
        name = entry.strip()
        if not name:
            raise ValueError(f"{LIST_ANNOTATION} {json.dumps(value)} has an empty entry")
        if len(name) > 253 or not SUBDOMAIN.fullmatch(name):
            raise ValueError(
                f"{LIST_ANNOTATION} lists {json.dumps(name)}, which is not a ConfigMap name"
            )
        names.add(name)
    return sorted(names)


def config_hash(contents: list[tuple[str, dict]]) -> str:
    """The hash of ConfigMaps (name and contents, in the order given): hex of SHA-256's first
    16 bytes over each name and its contents as compact JSON with sorted keys (as the Rust
    build's serde_json writes them)."""
    digest = hashlib.sha256()
    for name, content in contents:
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        digest.update(f"{name}\0{text}\0".encode())
    return digest.hexdigest()[:32]


class Outcome:
    """The condition a reconcile leaves, and the hash to apply (`None`: keep the last one)."""

    def __init__(self, digest: str | None, ok: bool, reason: str, message: str):
        self.hash, self.ok, self.reason, self.message = digest, ok, reason, message


def desired(namespace: str, listed: str) -> Outcome:
    """What the annotation `listed` asks for in `namespace`."""
    try:
        names = parse_list(listed)
    except ValueError as why:
        return Outcome(None, False, "InvalidAnnotation", f"{why}; the last hash is kept")
    contents, missing = [], []
    for name in names:
        ref = ObjectRef(CONFIG_MAP, namespace, name)
        try:
            found = lister.get(ref)
        except HostError as e:
            raise e.transient(f"reading {ref}") from e
        if found is None:
            missing.append(name)
        else:
            content = {"data": found.get("data"), "binaryData": found.get("binaryData")}
            contents.append((name, content))
    if missing:
        message = (
            f"ConfigMap {', '.join(missing)} not found in namespace {namespace}; "
            "the last hash is kept"
        )
        return Outcome(None, False, "ConfigMapNotFound", message)
    return Outcome(config_hash(contents), True, "Hashed", f"hash of ConfigMap {', '.join(names)}")


def apply_hash(deployment: ObjectRef, digest: str | None) -> None:
    """Applies the Deployment with only the Pod template's hash annotation (`None`: none, and
    server-side apply removes the one it set before), never taking a field from another
    manager."""
    body = {
        "apiVersion": DEPLOYMENT.api_version,
        "kind": DEPLOYMENT.kind,
        "metadata": {"name": deployment.name, "namespace": deployment.namespace},
    }
    if digest is not None:
        body["spec"] = {"template": {"metadata": {"annotations": {HASH_ANNOTATION: digest}}}}
    cluster.apply_with(body)


def condition(ok: bool, reason: str, message: str) -> dict:
    status = "True" if ok else "False"
    return {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message}


def write_condition(deployment: ObjectRef, conds: list, wanted: dict | None) -> None:
    """Sets (`None`: removes) the guest's condition among the Deployment's, keeping the others
    as written and the transition time while the status holds; writes nothing when nothing
    changes. The list is written whole (a merge patch replaces lists)."""
    previous = next((c for c in conds if c.get("type") == CONDITION_TYPE), None)
    kept = [c for c in conds if c.get("type") != CONDITION_TYPE]
    if wanted is None and previous is None:
        return
    if wanted is not None:
        # A DeploymentCondition's two times: the last change of status, and the last write.
        now = conditions.now()
        wanted = {**wanted, "lastTransitionTime": now, "lastUpdateTime": now}
        if previous is not None and previous.get("status") == wanted["status"]:
            wanted["lastTransitionTime"] = previous.get("lastTransitionTime")
            if (previous.get("reason"), previous.get("message")) == (
                wanted["reason"],
                wanted["message"],
            ):
                return
        kept.append(wanted)
    try:
        cluster.patch_status(deployment, {"conditions": kept})
    except HostError as e:
        raise e.transient(f"status write of {deployment} failed") from e


Reconciler = export(Reloader)
Indexes = export_indexes(Reloader)
