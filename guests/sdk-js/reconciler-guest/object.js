// Naming objects: kinds (gvk), references (objectRef), queue keys (keyOf), label selectors,
// and the Request a reconcile receives, whose object is parsed on first use.
//
// These are the contract's records as plain objects: a gvk is `{group, version, kind}` (the
// core group is ""), an object reference `{kind, namespace, name}` (namespace null for
// cluster-scoped kinds), a key `{namespace, name}`.

import { permanent } from "./error.js";

/** A kind from its parts; the core group is `""`. */
export function gvk(group, version, kind) {
  return { group, version, kind };
}

/**
 * A kind from an object's `apiVersion` (`group/version`, or just `version` for the core group).
 * @param {string} apiVersion
 * @param {string} kind
 */
export function gvkFromApiVersion(apiVersion, kind) {
  const slash = apiVersion.indexOf("/");
  return slash < 0
    ? gvk("", apiVersion, kind)
    : gvk(apiVersion.slice(0, slash), apiVersion.slice(slash + 1), kind);
}

/** The `apiVersion` an object of this kind carries. */
export function apiVersionOf(kind) {
  return kind.group === "" ? kind.version : `${kind.group}/${kind.version}`;
}

/**
 * A reference to one object; `namespace` null for a cluster-scoped kind.
 * @param {{group: string, version: string, kind: string}} kind
 * @param {string | null} namespace
 * @param {string} name
 */
export function objectRef(kind, namespace, name) {
  return { kind, namespace: namespace ?? null, name };
}

/**
 * Names an object from its JSON (`apiVersion`, `kind`, `metadata.namespace`/`name`), e.g. one
 * `lister.list` returned; null when any of those but the namespace is missing.
 */
export function refOf(object) {
  const metadata = object?.metadata;
  if (
    typeof object?.apiVersion !== "string" ||
    typeof object.kind !== "string" ||
    typeof metadata?.name !== "string"
  ) {
    return null;
  }
  const namespace = typeof metadata.namespace === "string" ? metadata.namespace : null;
  return objectRef(gvkFromApiVersion(object.apiVersion, object.kind), namespace, metadata.name);
}

/** The queue key `{namespace, name}` of an object reference (or of a key). */
export function keyOf(ref) {
  return { namespace: ref.namespace ?? null, name: ref.name };
}

/** `Kind namespace/name` (or `Kind name` when cluster-scoped), as in log lines. */
export function describe(ref) {
  const where = ref.namespace ? `${ref.namespace}/${ref.name}` : ref.name;
  return ref.kind?.kind ? `${ref.kind.kind} ${where}` : where;
}

/**
 * A label selector in the Kubernetes syntax: a string as it is (`app=web,tier!=db`), or an
 * object of labels that must be equal (`{app: "web"}` → `app=web`).
 * @param {string | Record<string, string>} labels
 */
export function selector(labels) {
  if (typeof labels === "string") return labels;
  return Object.entries(labels)
    .map(([label, value]) => `${label}=${value}`)
    .join(",");
}

/**
 * One reconcile's input: the key's object reference, its object (parsed from JSON on first
 * read of `object`), whether it is being deleted, and which try this is.
 */
export class Request {
  #object = undefined;

  /** @param {{ref: object, object?: string | null, deleting: boolean, attempt: number}} request the contract's record */
  constructor(request) {
    /** The key's object; its kind is the manifest's primary kind. */
    this.ref = request.ref;
    /** The object as the host sent it (JSON text), or null when it is gone. */
    this.json = request.object ?? null;
    /** The object has a deletion timestamp: clean up external state now. */
    this.deleting = request.deleting;
    /** 0 for the first try of this key since its last success, then 1, 2, ... */
    this.attempt = request.attempt;
  }

  /**
   * The object, parsed on first read (a request that never looks at it never pays for the
   * parse), or null when it is gone. Throws a permanent ReconcileError when the text is not
   * JSON: the same text would fail on every retry.
   */
  get object() {
    if (this.#object === undefined) {
      if (this.json === null) {
        this.#object = null;
      } else {
        try {
          this.#object = JSON.parse(this.json);
        } catch (error) {
          throw permanent(`${describe(this.ref)} is not JSON: ${error.message}`);
        }
      }
    }
    return this.#object;
  }

  /** The object's namespace, or null for a cluster-scoped kind. */
  get namespace() {
    return this.ref.namespace ?? null;
  }

  /** The object's name. */
  get name() {
    return this.ref.name;
  }

  /** The queue key `{namespace, name}` of the request's object. */
  get key() {
    return keyOf(this.ref);
  }
}
