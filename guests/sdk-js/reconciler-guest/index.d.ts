// Types of the JavaScript SDK for reconciler-host guests (index.js beside this file).
//
// Editors and `tsc --checkJs` pick them up for `import ... from "./reconciler-guest/index.js"`;
// the build does not read them. The shapes are the contract's (wit/reconciler.wit) as jco's
// QuickJS bindings hand them over: records are objects with camelCase fields, `option` is the
// value or null/undefined, enums are strings, variants `{tag, val}`, and `u64` a Number.

// ---------------------------------------------------------------------------------------------
// Names

/** Group, version and kind. The core group is `""`. */
export interface Gvk {
  group: string;
  version: string;
  kind: string;
}

/** Names one object; `namespace` is null for cluster-scoped kinds. */
export interface ObjectRef {
  kind: Gvk;
  namespace?: string | null;
  name: string;
}

/** Namespace and name of a primary object: the unit of work of the queue. */
export interface ObjectKey {
  namespace?: string | null;
  name: string;
}

/** A Kubernetes object as JSON: what the lister, `request.object` and `cluster` return. */
export type KubeObject = { [field: string]: any };

/** A kind from its parts; the core group is `""`. */
export function gvk(group: string, version: string, kind: string): Gvk;
/** A kind from an object's `apiVersion` (`group/version`, or `version` for the core group). */
export function gvkFromApiVersion(apiVersion: string, kind: string): Gvk;
/** The `apiVersion` an object of this kind carries. */
export function apiVersionOf(kind: Gvk): string;
/** A reference to one object; `namespace` null for a cluster-scoped kind. */
export function objectRef(kind: Gvk, namespace: string | null, name: string): ObjectRef;
/** Names an object from its JSON; null when `apiVersion`, `kind` or `metadata.name` is missing. */
export function refOf(object: KubeObject): ObjectRef | null;
/** The queue key `{namespace, name}` of an object reference (or of a key). */
export function keyOf(ref: ObjectRef | ObjectKey): ObjectKey;
/** `Kind namespace/name` (or `Kind name` when cluster-scoped), as in log lines. */
export function describe(ref: ObjectRef | ObjectKey): string;
/** A label selector: a string as it is, or `{label: value}` → `label=value,...`. */
export function selector(labels: LabelSelector): string;

/** A label selector in the Kubernetes syntax (`app=web,tier!=db`), or labels that must equal. */
export type LabelSelector = string | Record<string, string>;

// ---------------------------------------------------------------------------------------------
// The guest

/** How a secondary object leads to its primary's key (the manifest's `secondary`). */
export type Mapping = { tag: "owner" } | { tag: "label"; val: string };

/**
 * What of a watched object a `Mapping.field` index compares with the primary's field, and a
 * computed index (`defineIndexes`) looks up among a primary's values.
 */
export type IndexValue = "name" | "namespace" | "namespaced-name";

export const IndexValue: {
  /** Its name; a cluster-scoped object (a Namespace) matches primaries in every namespace. */
  readonly name: "name";
  /** Its namespace: primaries in every namespace whose field names it. */
  readonly namespace: "namespace";
  /** Its `namespace/name` (its name alone when cluster-scoped): primaries in every namespace. */
  readonly namespacedName: "namespaced-name";
};

/**
 * Keys of the primaries an object of a `Mapping.function` watch's kind affects; called once per
 * event of the kind (for an update, with the new and then the old version), in a fresh instance
 * where only the lister answers. A throw is logged and traps the instance.
 */
export type MapFunction = (object: KubeObject, kind: Gvk) => Array<ObjectKey | ObjectRef>;

/** How an object of a watched kind leads to primary keys (`defineWatches`). */
export type WatchMapping =
  | Mapping
  | { tag: "owner-labels"; val: { namespace?: string | null; name: string } }
  | { tag: "field"; val: { field: string; value: IndexValue } }
  | { tag: "function"; map: MapFunction };

export const Mapping: {
  /** Through `metadata.ownerReferences` entries whose kind is the primary kind (cache only). */
  readonly owner: { tag: "owner" };
  /** Through the label `name`, whose value is the primary's name in the same namespace (cache only). */
  label(name: string): { tag: "label"; val: string };
  /** Through labels naming the primary's namespace (null: cluster-scoped primary) and name (cache only). */
  ownerLabels(
    namespaceLabel: string | null,
    nameLabel: string,
  ): { tag: "owner-labels"; val: { namespace?: string; name: string } };
  /** To the primaries whose `field` equals the object's `value`: an index entry per value per primary, no guest call. */
  field(field: string, value: IndexValue): { tag: "field"; val: { field: string; value: IndexValue } };
  /** Through `map`: one guest call, in a fresh instance, per event of the kind. */
  function(map: MapFunction): { tag: "function"; map: MapFunction };
};

/** A kind whose changes enqueue primary keys, for `defineWatches`. */
export interface Watch {
  kind: Gvk;
  mapping: WatchMapping;
  /** Watch this namespace only (default: the manifest's namespace, or all). Ignored for cluster-scoped kinds. */
  namespace?: string | null;
  /** Take only events of objects matching this selector (default: all); the grant's readSelectors bound the cache. */
  labelSelector?: LabelSelector | null;
}

/** The contract's `watch` record, as the `watches` export returns it. */
export interface WatchRecord {
  kind: Gvk;
  mapping: Mapping | Exclude<WatchMapping, { tag: "function" }> | { tag: "function" };
  namespace: string | undefined;
  labelSelector: string | undefined;
}

/**
 * The component's optional `watches` export, for a guest whose world is `watching-controller`:
 * `export const watches = defineWatches([...])`. A bad watch is a TypeError naming it.
 */
export function defineWatches(watches: Watch[]): {
  watches(): WatchRecord[];
  map(kind: Gvk, object: string): Array<{ namespace: string | undefined; name: string }>;
};

/**
 * The values of a computed index for one primary object (parsed), e.g. the names of the objects
 * it depends on; called when the primary is added or changes, in a fresh instance where every
 * host call but `log` is refused. A throw is logged and traps the instance.
 */
export type IndexFunction = (primary: KubeObject) => string[];

/** An index whose values the guest computes from each primary, for `defineIndexes`. */
export interface Index {
  /** 1-63 lowercase letters, digits and `-`, unique among the guest's indexes. */
  name: string;
  /** The watched kind whose events the index maps to primaries. */
  kind: Gvk;
  /** The primary's values. */
  index: IndexFunction;
  /** What of a watched object is looked up among the values (default: its name). */
  lookup?: IndexValue | null;
  /** Watch this namespace only, as a watch's `namespace`. */
  namespace?: string | null;
  /** Take only events of objects matching this selector, as a watch's `labelSelector`. */
  labelSelector?: LabelSelector | null;
}

/** The contract's `computed-index` record, as the `indexes` export returns it. */
export interface ComputedIndexRecord {
  name: string;
  kind: Gvk;
  lookup: IndexValue;
  namespace: string | undefined;
  labelSelector: string | undefined;
}

/**
 * The component's optional `indexes` export, for a guest whose world is `indexing-controller`:
 * `export const indexes = defineIndexes([...])`. A bad index is a TypeError naming it.
 */
export function defineIndexes(indexes: Index[]): {
  indexes(): ComputedIndexRecord[];
  index(name: string, primary: string): string[];
};

/** Another kind whose changes enqueue a primary key. */
export interface SecondaryWatch {
  kind: Gvk;
  mapping: Mapping;
}

/** What a guest asks the host to watch; only `name` and `primary` are required. */
export interface ManifestOptions {
  /** The guest's name, a DNS-1123 label: the key of its grant, its field manager. */
  name: string;
  /** The kind whose keys this guest reconciles. */
  primary: Gvk;
  /** Watch only this namespace (default: all). */
  namespace?: string | null;
  /** Watch only primaries matching this selector. */
  labelSelector?: LabelSelector | null;
  /** Other kinds whose changes enqueue a primary key (default: none). */
  secondary?: SecondaryWatch[];
  /** Kept on every primary until a reconcile with `deleting` succeeds (default: none). */
  finalizer?: string | null;
  /** At most this many keys reconciled at once (default 0: the host's default). */
  concurrency?: number;
  /** Reconcile every key this often even without changes (default 0: never). */
  resyncSeconds?: number;
  /** Reconcile on `metadata.generation` changes only, not on status/label writes (default false). */
  generationChangedOnly?: boolean;
}

/** The contract's `controller-manifest`, every field filled in. */
export interface ControllerManifest {
  name: string;
  primary: Gvk;
  namespace: string | undefined;
  labelSelector: string | undefined;
  secondary: SecondaryWatch[];
  finalizer: string | undefined;
  concurrency: number;
  resyncSeconds: number;
  generationChangedOnly: boolean;
}

/** The contract's manifest from `options`, defaults filled in; a TypeError names a bad option. */
export function manifest(options: ManifestOptions): ControllerManifest;

/** What to do after a successful reconcile (the contract's `action`). */
export interface Action {
  /** Reconcile this key again after this many milliseconds; undefined: only on change. */
  requeueAfterMs?: number | null;
}

export const Action: {
  /** Done; reconcile again only on a change (or the resync interval). Same as returning nothing. */
  awaitChange(): Action;
  /** Done for now; reconcile this key again after `ms` milliseconds. */
  requeueAfter(ms: number): Action;
};

/** One reconcile's input. */
export class Request {
  /** Wraps the contract's `request` record (the SDK does this for `reconcile`). */
  constructor(request: { ref: ObjectRef; object?: string | null; deleting: boolean; attempt: number });
  /** The key's object; its kind is the manifest's primary kind. */
  readonly ref: ObjectRef;
  /** The object as the host sent it (JSON text), or null when it is gone. */
  readonly json: string | null;
  /** The object has a deletion timestamp: clean up external state now. */
  readonly deleting: boolean;
  /** 0 for the first try of this key since its last success, then 1, 2, ... */
  readonly attempt: number;
  /** The object, parsed on first read, or null when it is gone; a permanent error when not JSON. */
  readonly object: KubeObject | null;
  /** The object's namespace, or null for a cluster-scoped kind. */
  readonly namespace: string | null;
  /** The object's name. */
  readonly name: string;
  /** The queue key of the request's object. */
  readonly key: ObjectKey;
}

/** A guest: what it watches and what one reconcile does. */
export interface Guest {
  /** The manifest's options, or a function returning them (called once, at load). */
  manifest: ManifestOptions | (() => ManifestOptions);
  /**
   * Drives the object named by `request.ref` towards its spec. Returns nothing (or an Action);
   * throws a ReconcileError (`transient()`/`permanent()`) or lets a HostError through.
   * May be `async` (to `await fetch(...)`) in a guest whose world is `http-controller`, whose
   * StarlingMonkey build settles the Promise; the QuickJS build of any other world refuses one.
   */
  reconcile(request: Request): Action | void | Promise<Action | void>;
}

/** The component's `reconciler` export: `export const reconciler = defineReconciler({...})`. */
export function defineReconciler(guest: Guest): {
  manifest(): ControllerManifest;
  reconcile(request: {
    ref: ObjectRef;
    object?: string | null;
    deleting: boolean;
    attempt: number;
  }): Action | Promise<Action>;
};

// ---------------------------------------------------------------------------------------------
// Errors

/** The contract's names for why a host call failed. */
export type HostErrorKind = "denied" | "not-found" | "conflict" | "invalid" | "unavailable" | "other";

/** Every HostErrorKind, in the contract's order. */
export const HOST_ERROR_KINDS: readonly HostErrorKind[];

/** A failed host call; `message` is `kind: text`. */
export class HostError extends Error {
  constructor(kind: HostErrorKind, text: string);
  readonly name: "HostError";
  /** The contract's name for the failure. */
  readonly kind: HostErrorKind;
  /** The host's text: what failed and where. */
  readonly text: string;
  /** Whether a retry of the same call could succeed (conflict, unavailable, other). */
  isTransient(): boolean;
  /** Transient for conflict/unavailable/other, else permanent; message `[context: ]kind: text`. */
  toReconcileError(context?: string): ReconcileError;
}

/** How a reconcile failed: `transient` is retried with backoff, `permanent` waits for a change. */
export class ReconcileError extends Error {
  constructor(kind: "transient" | "permanent", message: string, cause?: unknown);
  readonly name: "ReconcileError";
  readonly kind: "transient" | "permanent";
}

/** A reconcile failure worth retrying with backoff; with a cause: `message: <cause's message>`. */
export function transient(message: string, cause?: unknown): ReconcileError;
/** A reconcile failure that waits for the next change; with a cause: `message: <cause's message>`. */
export function permanent(message: string, cause?: unknown): ReconcileError;
/** Runs a call of a generated import; the contract's error it throws becomes a HostError. */
export function hostCall<T>(call: () => T): T;

/**
 * The environment variable `name` as the guest's grant sets it (its `env`), or undefined. Read
 * when called (one host call), so call it inside `reconcile`, never at module load.
 */
export function getenv(name: string): string | undefined;

// ---------------------------------------------------------------------------------------------
// Host interfaces

/** Reads from the host's informer caches (never the API server). Each call throws a HostError. */
export const lister: {
  /** The cached object, or null when it does not exist (or is not cached yet). */
  get(ref: ObjectRef): KubeObject | null;
  /** Cached objects of `kind`, in `namespace` (default: all) matching `labelSelector`. */
  list(kind: Gvk, options?: { namespace?: string | null; labelSelector?: LabelSelector | null }): KubeObject[];
};

/** Writes to the API server with the guest's name as field manager. Each call throws a HostError. */
export const cluster: {
  /** JSON merge patch `{"status": status}` of the status subresource; the object returned. */
  patchStatus(ref: ObjectRef, status: KubeObject): KubeObject;
  /** Like `patchStatus` with the patch as JSON text (`{"status": ...}`); the answer as text. */
  patchStatusRaw(ref: ObjectRef, patch: string): string;
  /**
   * Server-side apply of an object (or its JSON text), forced: the guest takes every field it
   * sets. On an object others manage too, send only the fields the guest manages, or use
   * `applyWith`. The applied object.
   */
  apply(object: KubeObject | string): KubeObject;
  /**
   * Server-side apply of only the fields the guest manages; every other field stays its owner's,
   * one the guest applied before and leaves out is removed. Without `force`, a field another
   * manager owns is a HostError `conflict` naming the field and the manager; nothing is written.
   * The applied object.
   */
  applyWith(object: KubeObject | string, options?: { force?: boolean }): KubeObject;
  /** Deletes an object; false when it was already gone. */
  delete(ref: ObjectRef): boolean;
};

/** The two types of Kubernetes event. */
export type EventType = "normal" | "warning";

/** Kubernetes events about objects. */
export const events: {
  /** Records an event; throws a HostError when the host refuses it. */
  record(regarding: ObjectRef, type: EventType, reason: string, message: string): void;
  /** A `Normal` event, best effort (a refusal is logged at warn level). */
  normal(regarding: ObjectRef, reason: string, message: string): void;
  /** A `Warning` event, best effort (a refusal is logged at warn level). */
  warning(regarding: ObjectRef, reason: string, message: string): void;
};

/** The guest's own work queue: keys of its primary kind. */
export const queue: {
  /** Adds a key (or an object reference), now or not before `afterMs`; throws a HostError. */
  enqueue(key: ObjectKey | ObjectRef, afterMs?: number | null): void;
  /** A `u64` of milliseconds as the bindings take it: a whole Number >= 0. */
  milliseconds(ms: number | bigint): number;
};

/** The levels of a log line. */
export type LogLevel = "trace" | "debug" | "info" | "warn" | "error";

/** Logging into the host's log stream, printf-style (`%s %d %i %f %j %o %O %%`). */
export const log: {
  /** The line `args` make, like Node's `util.format`. */
  format(...args: unknown[]): string;
  /** Logs at `level`. */
  log(level: LogLevel, ...args: unknown[]): void;
  trace(...args: unknown[]): void;
  debug(...args: unknown[]): void;
  info(...args: unknown[]): void;
  warn(...args: unknown[]): void;
  /** Logs at error level; the host puts the last error logged into a failed reconcile's error. */
  error(...args: unknown[]): void;
};

/** A `metav1.Condition`. */
export interface Condition {
  type: string;
  status: "True" | "False" | "Unknown";
  reason: string;
  message: string;
  /** RFC 3339 in whole seconds, e.g. `2026-01-02T03:04:05Z`. */
  lastTransitionTime: string;
  observedGeneration?: number;
}

/** `status.conditions` bookkeeping: one entry per type, the time moving only when status flips. */
export const conditions: {
  /** Now, RFC 3339 in whole seconds, UTC (`2026-01-02T03:04:05Z`). */
  now(): string;
  /** A condition stamped with `now()`; a boolean status is `"True"`/`"False"`. */
  make(
    type: string,
    status: boolean | "True" | "False" | "Unknown",
    reason: string,
    message: string,
    observedGeneration?: number | null,
  ): Condition;
  /** The condition of `type`, or null. */
  find(conditions: Condition[] | null | undefined, type: string): Condition | null;
  /** Whether the condition of `type` is present with status `True`. */
  isTrue(conditions: Condition[] | null | undefined, type: string): boolean;
  /**
   * Adds `condition` or updates the entry of its type in place; `lastTransitionTime` follows only
   * when the status changes. Returns whether anything changed.
   */
  set(conditions: Condition[], condition: Condition): boolean;
  /** Removes the condition of `type`; returns whether there was one. */
  remove(conditions: Condition[], type: string): boolean;
};
