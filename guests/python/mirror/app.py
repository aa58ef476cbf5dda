"""Mirror (`mirror.reconciler.dev/v1alpha1`, examples/crds/mirror.yaml): a ConfigMap of the
Mirror's namespace (`spec.source`), copied into each namespace `spec.targetNamespaces` lists.
Built for the world `watching-controller` (`wit-world` beside this file): its watches are the
contract's optional `watches` export, which a manifest's owner and label mappings cannot say.

Each copy has the source's name, its `data` and `binaryData`, and two labels naming its Mirror
(`mirror.reconciler.dev/owner-namespace`, `mirror.reconciler.dev/owner-name`): it lives in
another namespace, where an owner reference cannot point. A reconcile

- applies the copy (server-side apply) in each listed namespace that exists, unless it is
  already the source's; a listed namespace that does not exist (or is being deleted) is skipped,
  not an error, and the Mirror's own namespace is never a target;
- deletes every copy of this Mirror that is not wanted any more: in a namespace no longer
  listed, or of a former `spec.source`;
- leaves a ConfigMap it did not make alone (Ready=False `TargetConflict`);
- on deletion (the finalizer `mirror.reconciler.dev/cleanup`) deletes every copy.

A key the source lacks but a copy has, added by hand, is removed: the apply answers with the
copy as stored, and a copy that still has a key the guest did not apply is deleted and applied
again (server-side apply cannot take away a field another manager owns).

The watches: a ConfigMap change reconciles the Mirrors of its namespace whose `spec.source`
names it (a field index, no guest call); a change of a copy reconciles the Mirror its labels
name (only events of ConfigMaps carrying the owner-name label count for that); a Namespace change
reconciles every Mirror listing it (a field index over `spec.targetNamespaces[*]`). So an edit
of the source, a copy edited or deleted by hand, and a namespace created later are all put
right at once, without a resync.

`status`: `copies` (how many namespaces hold a copy), `namespaces` (which), `missingNamespaces`
(listed, but not there), `observedGeneration`, and the condition Ready:

| Ready | reason | when | the reconcile |
|---|---|---|---|
| True | `Synced` | every existing listed namespace holds the source's copy | succeeds |
| False | `SourceNotFound` | the Mirror's namespace has no ConfigMap `spec.source`; copies are left as they are | succeeds: the source's creation reconciles it |
| False | `TargetConflict` | a listed namespace has a ConfigMap of the source's name that this Mirror did not make | succeeds: the other copies are made; removing that ConfigMap reconciles it |
| False | `CopyFailed` | writing or deleting a copy failed | transient (or permanent when the host refused it: `denied`, `invalid`) |
| False | `InvalidSpec` | the spec lacks what the CRD requires | permanent |
"""

from reconciler_guest import (
    Guest,
    Gvk,
    HostError,
    IndexValue,
    Manifest,
    ObjectRef,
    PermanentError,
    TransientError,
    Watch,
    cluster,
    conditions,
    event,
    export,
    export_watches,
    lister,
    log,
)

MIRROR = Gvk("mirror.reconciler.dev", "v1alpha1", "Mirror")
CONFIG_MAP = Gvk("", "v1", "ConfigMap")
NAMESPACE = Gvk("", "v1", "Namespace")
OWNER_NAMESPACE = "mirror.reconciler.dev/owner-namespace"
OWNER_NAME = "mirror.reconciler.dev/owner-name"


class Failed(Exception):
    """A reconcile that ends with Ready=False: the reason, the message, and whether a retry
    could help."""

    def __init__(self, reason: str, message: str, transient: bool):
        super().__init__(message)
        self.reason, self.message, self.transient = reason, message, transient


class Mirror(Guest):
    def manifest(self):
        return Manifest(
            "mirror",
            MIRROR,
            finalizer="mirror.reconciler.dev/cleanup",
            generation_changed_only=True,
        )

    def watches(self):
        return [
            Watch(CONFIG_MAP).by_field("spec.source", IndexValue.NAME),
            Watch(CONFIG_MAP).by_owner_labels(OWNER_NAMESPACE, OWNER_NAME).selecting(OWNER_NAME),
            Watch(NAMESPACE).by_field("spec.targetNamespaces[*]", IndexValue.NAME),
        ]

    def reconcile(self, request):
        mirror = request.object
        if mirror is None:
            return None  # gone: the finalizer saw its copies deleted first
        owner = request.ref
        generation = mirror.get("metadata", {}).get("generation")
        status = mirror.get("status") or {}
        copies = Copies(owner)
        try:
            if request.deleting:
                removed = copies.delete_all_but(set())
                log.info("deleted %d copies", len(removed))
                return None
            spec = Spec(mirror.get("spec"), owner)
            outcome = copies.sync(spec)
        except Failed as failed:
            ready = conditions.new("Ready", False, failed.reason, failed.message, generation)
            write_status(owner, status, ready, {"observedGeneration": generation})
            if failed.transient:
                raise TransientError(f"{failed.reason}: {failed.message}") from None
            raise PermanentError(f"{failed.reason}: {failed.message}") from None
        ready = conditions.new("Ready", outcome.ready, outcome.reason, outcome.message, generation)
        fields = {
            "observedGeneration": generation,
            "copies": len(outcome.namespaces),
            "namespaces": outcome.namespaces,
            "missingNamespaces": outcome.missing,
        }
        write_status(owner, status, ready, fields)
        return None


class Spec:
    """The spec, checked for what the CRD requires."""

    def __init__(self, spec, owner: ObjectRef):
        spec = spec if isinstance(spec, dict) else {}
        source, targets = spec.get("source"), spec.get("targetNamespaces", [])
        if not isinstance(source, str) or not source:
            raise Failed("InvalidSpec", "spec.source must name a ConfigMap", transient=False)
        if not isinstance(targets, list) or not all(isinstance(t, str) and t for t in targets):
            raise Failed("InvalidSpec", "spec.targetNamespaces must list namespaces", False)
        if len(owner.name) > 63:
            # The owner-name label holds the name, and a label value at most 63 characters.
            raise Failed("InvalidSpec", "a Mirror's name must be at most 63 characters", False)
        self.source = source
        # In the order given, once each, never the Mirror's own namespace: there the copy
        # would be the source itself.
        self.targets = [t for t in dict.fromkeys(targets) if t != owner.namespace]


class Outcome:
    """What a sync left: the namespaces holding a copy, those listed but missing, and the
    Ready condition's status, reason and message."""

    def __init__(self, ready: bool, reason: str, message: str, namespaces, missing):
        self.ready, self.reason, self.message = ready, reason, message
        self.namespaces, self.missing = sorted(namespaces), list(missing)


class Copies:
    """The copies of one Mirror's source, found by their owner labels."""

    def __init__(self, owner: ObjectRef):
        self.owner = owner
        self.labels = {OWNER_NAMESPACE: owner.namespace, OWNER_NAME: owner.name}

    def sync(self, spec: Spec) -> Outcome:
        source_ref = ObjectRef(CONFIG_MAP, self.owner.namespace, spec.source)
        source = call("read the source", lister.get, source_ref)
        if source is None:
            held = sorted(c["metadata"]["namespace"] for c in self.owned(spec.source))
            return Outcome(
                False,
                "SourceNotFound",
                f"namespace {self.owner.namespace} has no ConfigMap {spec.source}; "
                "its copies are left as they are",
                held,
                [],
            )
        copied, missing, conflicts, written = [], [], [], []
        for namespace in spec.targets:
            if not namespace_exists(namespace):
                missing.append(namespace)
                continue
            copy_ref = ObjectRef(CONFIG_MAP, namespace, spec.source)
            existing = call(f"read the copy in {namespace}", lister.get, copy_ref)
            if existing is not None and not self.made(existing):
                conflicts.append(namespace)
                continue
            if existing is None or not same_content(existing, source):
                self.write(namespace, source)
                written.append(namespace)
            copied.append(namespace)
        removed = self.delete_all_but({(n, spec.source) for n in copied})
        if written:
            log.info("copied %s to %s", spec.source, ", ".join(written))
            event.normal(self.owner, "Copied", f"ConfigMap {spec.source} to {', '.join(written)}")
        if removed:
            event.normal(self.owner, "Removed", f"copies in {', '.join(removed)}")
        noun = "copy" if len(copied) == 1 else "copies"
        message = f"{len(copied)} {noun} of ConfigMap {spec.source}"
        if copied:
            message += f": {', '.join(sorted(copied))}"
        if missing:
            message += f"; skipped, no such namespace: {', '.join(missing)}"
        if conflicts:
            return Outcome(
                False,
                "TargetConflict",
                f"{message}; a ConfigMap {spec.source} this Mirror did not make is in: "
                f"{', '.join(conflicts)}",
                copied,
                missing,
            )
        return Outcome(True, "Synced", message, copied, missing)

    def owned(self, name: str | None = None) -> list[dict]:
        """This Mirror's copies, wherever they are (of `name` only, when given)."""
        selector = ",".join(f"{k}={v}" for k, v in self.labels.items())
        found = call("list copies", lister.list, CONFIG_MAP, None, selector)
        return [c for c in found if name is None or c["metadata"]["name"] == name]

    def made(self, config_map: dict) -> bool:
        labels = config_map.get("metadata", {}).get("labels") or {}
        return all(labels.get(k) == v for k, v in self.labels.items())

    def write(self, namespace: str, source: dict) -> None:
        """Applies the copy; deletes and applies it again when the stored copy keeps a key the
        source does not have (added by another field manager, which apply cannot remove)."""
        copy = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": source["metadata"]["name"],
                "namespace": namespace,
                "labels": self.labels,
            },
        }
        for field in ("data", "binaryData"):
            if source.get(field):
                copy[field] = source[field]
        applied = call(f"apply the copy in {namespace}", cluster.apply, copy)
        if same_content(applied, source):
            return
        ref = ObjectRef(CONFIG_MAP, namespace, copy["metadata"]["name"])
        call(f"delete the copy in {namespace}", cluster.delete, ref)
        call(f"apply the copy in {namespace}", cluster.apply, copy)

    def delete_all_but(self, keep: set) -> list[str]:
        """Deletes every copy whose (namespace, name) is not in `keep`; the namespaces."""
        removed = []
        for c in self.owned():
            namespace, name = c["metadata"]["namespace"], c["metadata"]["name"]
            if (namespace, name) in keep:
                continue
            call(f"delete the copy in {namespace}", cluster.delete, ref_of(c))
            removed.append(namespace)
        return sorted(removed)


def ref_of(config_map: dict) -> ObjectRef:
    metadata = config_map["metadata"]
    return ObjectRef(CONFIG_MAP, metadata["namespace"], metadata["name"])


def namespace_exists(name: str) -> bool:
    namespace = call(f"read namespace {name}", lister.get, ObjectRef(NAMESPACE, None, name))
    if namespace is None:
        return False
    terminating = (namespace.get("status") or {}).get("phase") == "Terminating"
    return not terminating and not namespace.get("metadata", {}).get("deletionTimestamp")


def same_content(copy: dict, source: dict) -> bool:
    return all((copy.get(f) or {}) == (source.get(f) or {}) for f in ("data", "binaryData"))


def call(what: str, function, *args):
    """A host call; a refusal is `CopyFailed` (every call serves a copy), retried unless
    retrying cannot help (`denied`, `invalid`)."""
    try:
        return function(*args)
    except HostError as e:
        raise Failed("CopyFailed", f"{what}: {e}", transient=e.retryable) from None


def write_status(ref: ObjectRef, status: dict, ready: dict, fields: dict) -> None:
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


Reconciler = export(Mirror)
Watches = export_watches(Mirror)
