// Compiled by `tsc` (test.sh), never run: every export of index.d.ts in use, and misuses that
// must not type-check (`@ts-expect-error` fails the build when the line compiles).
import {
  Action,
  HOST_ERROR_KINDS,
  HostError,
  IndexValue,
  Mapping,
  ReconcileError,
  Request,
  apiVersionOf,
  cluster,
  conditions,
  defineIndexes,
  defineReconciler,
  defineWatches,
  describe,
  events,
  getenv,
  gvk,
  gvkFromApiVersion,
  hostCall,
  keyOf,
  lister,
  log,
  manifest,
  objectRef,
  permanent,
  queue,
  refOf,
  selector,
  transient,
  type Condition,
  type ControllerManifest,
  type HostErrorKind,
} from "../reconciler-guest/index.js";
import { host, hostError, type Write } from "reconciler-guest/testing";

const widget = gvk("test.reconciler.dev", "v1", "Widget");
const configMap = gvkFromApiVersion("v1", "ConfigMap");

export const reconciler = defineReconciler({
  manifest: {
    name: "typed",
    primary: widget,
    namespace: "demo",
    labelSelector: { app: "web" },
    secondary: [
      { kind: configMap, mapping: Mapping.owner },
      { kind: gvk("", "v1", "Secret"), mapping: Mapping.label("typed") },
    ],
    finalizer: "test.reconciler.dev/cleanup",
    concurrency: 2,
    resyncSeconds: 60,
    generationChangedOnly: true,
  },
  reconcile(request: Request) {
    const object = request.object;
    if (object === null || request.deleting) return Action.awaitChange();
    const list: Condition[] = object.status?.conditions ?? [];
    if (conditions.set(list, conditions.make("Ready", true, "Synced", "ok", object.metadata.generation))) {
      try {
        cluster.patchStatus(request.ref, { conditions: list });
      } catch (error) {
        if (error instanceof HostError && error.kind === "conflict") throw error.toReconcileError("status");
        throw transient(`status: ${String(error)}`);
      }
    }
    for (const cm of lister.list(configMap, { namespace: request.namespace, labelSelector: "app=web" })) {
      const ref = refOf(cm);
      if (ref && !cluster.delete(ref)) log.info("%s was gone", describe(ref));
    }
    const applied = cluster.apply({ apiVersion: apiVersionOf(configMap), kind: "ConfigMap", metadata: { name: request.name } });
    log.debug("applied %j", applied.metadata);
    cluster.applyWith({ apiVersion: "apps/v1", kind: "Deployment", metadata: { name: request.name } }, { force: false });
    cluster.applyWith("{}");
    const got = lister.get(objectRef(configMap, request.namespace, "x"));
    if (got === null) queue.enqueue(keyOf(request.ref), 1000);
    queue.enqueue(request.key);
    events.normal(request.ref, "Synced", "ok");
    events.warning(request.ref, "Slow", "p99");
    events.record(request.ref, "normal", "Synced", "ok");
    log.log("warn", log.format("%d", queue.milliseconds(5n)));
    log.trace(selector({ a: "b" }), conditions.now(), conditions.isTrue(list, "Ready"), conditions.find(list, "Ready"));
    conditions.remove(list, "Ready");
    hostCall(() => 1).toFixed();
    log.info(getenv("REGION") ?? "no region");
    if (request.attempt > 3) throw permanent("gave up");
    return Action.requeueAfter(30_000);
  },
});

// An http-controller guest: async, with the standard fetch.
export const fetching = defineReconciler({
  manifest: { name: "fetching", primary: widget },
  async reconcile(request: Request) {
    const response = await fetch(`https://api.test/${request.name}`, { method: "PUT", body: "{}" });
    if (!response.ok) throw transient(`answered ${response.status}`);
    return Action.requeueAfter((await response.json()).retryAfterMs);
  },
});

// A watching-controller guest's second export.
export const watches = defineWatches([
  { kind: configMap, mapping: Mapping.field("spec.source", IndexValue.name) },
  { kind: configMap, mapping: Mapping.ownerLabels("o/namespace", "o/name"), labelSelector: "o/name" },
  { kind: gvk("", "v1", "Namespace"), mapping: Mapping.field("spec.targets[*]", "name"), namespace: null },
  { kind: gvk("", "v1", "Secret"), mapping: Mapping.function((o) => [{ namespace: o.metadata.namespace, name: "a" }]) },
  { kind: gvk("", "v1", "Service"), mapping: Mapping.function((o, kind) => [objectRef(kind, null, o.metadata.name)]) },
  { kind: gvk("", "v1", "Pod"), mapping: Mapping.owner, labelSelector: { app: "web" } },
]);
export const mapped: string[] = watches.map(configMap, "{}").map((key) => key.name);

// An indexing-controller guest's `indexes` export.
export const indexes = defineIndexes([
  { name: "configmaps", kind: configMap, index: (primary) => primary.metadata.annotations?.["a"]?.split(",") ?? [] },
  { name: "secrets", kind: gvk("", "v1", "Secret"), index: () => [], lookup: IndexValue.namespacedName, namespace: "demo", labelSelector: { a: "b" } },
]);
export const values: string[] = indexes.index("configmaps", "{}").concat(indexes.indexes().map((i) => i.lookup));

// A guest's native test against the fake host.
host.load({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a" } }, "[]", ["{}"]);
host.answer("patchStatus", () => {
  throw hostError("conflict", "moved");
});
host.setEnv({ GREETING: "hi" });
export const written: Write[] = host.writes;
export const tested = [
  reconciler.reconcile(host.request(objectRef(widget, "demo", "w1"), { attempt: 1 })),
  host.get(objectRef(configMap, "demo", "a"))?.metadata,
  host.list(configMap, { namespace: "demo", labelSelector: { app: "web" } }).length,
  host.logs.map((l) => l.level),
  host.callsOf("get").length + host.calls.length,
];
host.reset();

const m: ControllerManifest = manifest({ name: "n", primary: widget });
const kinds: readonly HostErrorKind[] = HOST_ERROR_KINDS;
const failure: ReconcileError = new HostError(kinds[0], "x").toReconcileError();
export const used = [m, failure, reconciler.manifest(), reconciler.reconcile({ ref: objectRef(widget, null, "a"), deleting: false, attempt: 0 })];

// @ts-expect-error `name` is required
manifest({ primary: widget });
// @ts-expect-error an unknown option
manifest({ name: "n", primary: widget, generationChangeOnly: true });
// @ts-expect-error not a host error kind
new HostError("gone", "x");
// @ts-expect-error a mapping is Mapping.owner or Mapping.label(name)
manifest({ name: "n", primary: widget, secondary: [{ kind: configMap, mapping: "owner" }] });
// @ts-expect-error reconcile returns an Action or nothing, or a Promise of one (async)
defineReconciler({ manifest: { name: "n", primary: widget }, reconcile: async () => 5 });
// @ts-expect-error the event type is "normal" or "warning"
events.record(objectRef(widget, null, "a"), "Normal", "R", "m");
// @ts-expect-error the manifest's secondary takes Mapping.owner or Mapping.label only
manifest({ name: "n", primary: widget, secondary: [{ kind: configMap, mapping: Mapping.field("spec.a", "name") }] });
// @ts-expect-error not an index value
defineWatches([{ kind: configMap, mapping: Mapping.field("spec.a", "uid") }]);
// @ts-expect-error a map function returns keys
defineWatches([{ kind: configMap, mapping: Mapping.function(() => "demo/a") }]);
// @ts-expect-error an index function returns strings
defineIndexes([{ name: "i", kind: configMap, index: () => [1] }]);
// @ts-expect-error not a lookup
defineIndexes([{ name: "i", kind: configMap, index: () => [], lookup: "uid" }]);
// @ts-expect-error an index needs its function
defineIndexes([{ name: "i", kind: configMap }]);
// @ts-expect-error the fake answers the contract's imports only
host.answer("patch", () => null);
// @ts-expect-error an unset variable is undefined, not a string
export const region: string = getenv("REGION");
