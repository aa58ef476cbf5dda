// The fake host's state and its answers: the objects it holds, what a guest asked of it, and
// how each import is answered. One per process, as the component imports a guest's modules bind
// to are one per process; index.js is its public face, bindings.js the imports.
//
// Writes are answered as the offline runner answers them (host/src/sandbox/providers/offline.rs): a
// status patch and an apply are JSON merge patches (RFC 7386) of the object held, each giving it
// a `resourceVersion` above every other; a delete removes it at once. Not modelled: field
// ownership (an unforced apply never conflicts), `generation`, `uid`, defaults, admission,
// finalizers holding a delete, and the grant (every call is allowed).

import { parseSelector, SelectorError } from "./selector.js";

// The offline runner's first resourceVersion; a loaded object's higher one wins.
const FIRST_VERSION = 1000;
// The writes, by the names of the imports, as the contract names them.
const WRITES = {
  patchStatus: "patch-status",
  apply: "apply",
  applyWith: "apply-with",
  delete: "delete",
  recordEvent: "record-event",
  enqueue: "enqueue",
};

const objects = new Map();
const answers = new Map();
let environment = [];
let version = FIRST_VERSION;

export const calls = [];
export const writes = [];
export const logs = [];

/** What the bindings throw for the contract's `error` variant. */
export function hostError(kind, text) {
  return Object.assign(new Error("[object Object] (see error.payload)"), { payload: { tag: kind, val: text } });
}

export function reset() {
  objects.clear();
  answers.clear();
  environment = [];
  version = FIRST_VERSION;
  calls.length = 0;
  writes.length = 0;
  logs.length = 0;
}

export function answer(fn, handler) {
  if (!(fn in ANSWERS)) throw new TypeError(`host.answer: no import ${JSON.stringify(fn)} (known: ${Object.keys(ANSWERS).join(", ")})`);
  answers.set(fn, handler);
}

export function setEnvironment(variables) {
  environment = Object.entries(variables ?? {}).map(([key, value]) => [key, String(value)]);
}

/** Holds `object` (parsed, a copy), replacing one of the same kind, namespace and name. */
export function hold(object) {
  const ref = refOfObject(object);
  if (ref === null) {
    throw new TypeError(`host.load: not an object (apiVersion, kind, metadata.name): ${JSON.stringify(object)?.slice(0, 120)}`);
  }
  objects.set(keyOf(ref), copy(object));
}

/** The object `ref` names, a copy, or null. */
export function held(ref) {
  const object = objects.get(keyOf(ref));
  return object === undefined ? null : copy(object);
}

/** The objects of `kind` in `namespace` (none: all) matching `labelSelector`, by namespace and name. */
export function heldList(kind, namespace, labelSelector) {
  let matches = () => true;
  if (labelSelector != null) {
    try {
      matches = parseSelector(labelSelector);
    } catch (error) {
      if (error instanceof SelectorError) throw hostError("invalid", `label-selector: ${error.message}`);
      throw error;
    }
  }
  return [...objects.values()]
    .filter((object) => {
      const ref = refOfObject(object);
      return sameKind(ref.kind, kind) && (namespace == null || (ref.namespace ?? "") === namespace) && matches(object.metadata.labels);
    })
    .sort((a, b) => compare(a.metadata.namespace ?? "", b.metadata.namespace ?? "") || compare(a.metadata.name, b.metadata.name))
    .map(copy);
}

/** Records a call of import `fn` and answers it: with the test's handler, else as the fake server. */
export function call(fn, args) {
  calls.push({ fn, args });
  record(fn, args);
  const handler = answers.get(fn) ?? ANSWERS[fn];
  return handler(...args);
}

// What a test reads of a write: the contract's operation, its arguments parsed.
function record(fn, args) {
  if (fn === "log") {
    logs.push({ level: args[0], message: args[1] });
    return;
  }
  const op = WRITES[fn];
  if (op === undefined) return;
  const [first, second] = args;
  const entry = {
    patchStatus: () => ({ op, ref: first, patch: parsedOrText(second) }),
    apply: () => ({ op, object: parsedOrText(first) }),
    applyWith: () => ({ op, object: parsedOrText(first), force: Boolean(second?.force) }),
    delete: () => ({ op, ref: first }),
    recordEvent: () => ({ op, event: first }),
    enqueue: () => ({ op, key: first, afterMs: second ?? null }),
  }[fn]();
  writes.push(entry);
}

// The fake server: each import's answer when the test scripts none.
const ANSWERS = {
  // reconciler:api/lister
  get: (ref) => {
    const object = objects.get(keyOf(ref));
    return object === undefined ? null : JSON.stringify(object);
  },
  list: (kind, namespace, labelSelector) => heldList(kind, namespace, labelSelector).map((object) => JSON.stringify(object)),

  // reconciler:api/cluster
  patchStatus: (ref, text) => {
    const patch = body(text, "patch");
    for (const [field, value] of Object.entries(patch)) {
      const allowed = field === "status" || (field === "metadata" && isObject(value) && Object.keys(value).every((k) => k === "resourceVersion"));
      if (!allowed) {
        const where = field === "metadata" && isObject(value) ? `metadata.${Object.keys(value).find((k) => k !== "resourceVersion")}` : field;
        throw hostError("invalid", `patch.${where}: a status patch carries status and nothing else but metadata.resourceVersion`);
      }
    }
    const current = objects.get(keyOf(ref));
    if (current === undefined) throw hostError("not-found", `${describe(ref)} is not among the loaded objects`);
    precondition(patch, current);
    const merged = "status" in patch ? mergePatch(copy(current), { status: patch.status }) : copy(current);
    return JSON.stringify(store(merged));
  },
  apply: (text) => applied(text),
  applyWith: (text) => applied(text),
  delete: (ref) => objects.delete(keyOf(ref)),
  recordEvent: () => undefined,

  // reconciler:api/queue, reconciler:api/log
  enqueue: () => undefined,
  log: () => undefined,

  // wasi:cli/environment
  getEnvironment: () => environment.map(([key, value]) => [key, value]),
};

function applied(text) {
  const object = body(text, "object");
  const ref = refOfObject(object);
  if (ref === null) throw hostError("invalid", "the applied object needs apiVersion, kind and metadata.name");
  const current = objects.get(keyOf(ref));
  if (current !== undefined) precondition(object, current);
  return JSON.stringify(store(mergePatch(current === undefined ? {} : copy(current), object)));
}

// A non-empty metadata.resourceVersion is a precondition, as on the API server.
function precondition(sent, current) {
  const expected = sent.metadata?.resourceVersion;
  if (typeof expected === "string" && expected !== "" && expected !== current.metadata?.resourceVersion) {
    throw hostError("conflict", "the object has been modified; please apply your changes to the latest version and try again");
  }
}

// Holds a written object under a new resourceVersion, above every one held.
function store(object) {
  for (const other of objects.values()) {
    const held = Number.parseInt(other.metadata?.resourceVersion, 10);
    if (Number.isSafeInteger(held)) version = Math.max(version, held);
  }
  version += 1;
  object.metadata = { ...object.metadata, resourceVersion: String(version) };
  objects.set(keyOf(refOfObject(object)), object);
  return object;
}

/** RFC 7386 JSON merge patch of `target` (changed in place when an object) with `patch`. */
export function mergePatch(target, patch) {
  if (!isObject(patch)) return patch;
  const merged = isObject(target) ? target : {};
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else merged[key] = mergePatch(merged[key], value);
  }
  return merged;
}

function body(text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw hostError("invalid", `${what}: not JSON: ${error.message}`);
  }
  if (!isObject(value)) throw hostError("invalid", `${what}: must be a JSON object`);
  return value;
}

/** The reference `{kind, namespace, name}` of an object, or null when it names none. */
export function refOfObject(object) {
  const metadata = object?.metadata;
  if (typeof object?.apiVersion !== "string" || typeof object.kind !== "string" || typeof metadata?.name !== "string") return null;
  const slash = object.apiVersion.indexOf("/");
  const [group, version] = slash < 0 ? ["", object.apiVersion] : [object.apiVersion.slice(0, slash), object.apiVersion.slice(slash + 1)];
  return { kind: { group, version, kind: object.kind }, namespace: metadata.namespace || null, name: metadata.name };
}

function keyOf(ref) {
  const kind = ref?.kind ?? {};
  return JSON.stringify([kind.group, kind.version, kind.kind, ref?.namespace || "", ref?.name]);
}

function describe(ref) {
  return `${ref?.kind?.kind} ${ref?.namespace ? `${ref.namespace}/${ref.name}` : ref?.name}`;
}

function sameKind(a, b) {
  return a.group === b?.group && a.version === b?.version && a.kind === b?.kind;
}

function compare(a, b) {
  return a < b ? -1 : a > b ? 1 : 0;
}

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

function parsedOrText(text) {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function copy(value) {
  return JSON.parse(JSON.stringify(value));
}
