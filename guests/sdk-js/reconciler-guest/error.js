// Failures of host calls (HostError) and of a reconcile (ReconcileError).
//
// A host call that fails throws a HostError. Thrown out of `reconcile`, it becomes a reconcile
// error by this mapping (the Rust SDK's `?` uses the same one):
//
//   host error    reconcile error  why
//   conflict      transient        the object moved on; a retry reads the new version
//   unavailable   transient        the API server or backend is down or overloaded; backoff helps
//   other         transient        unknown cause; retrying with backoff is the safe default
//   invalid       permanent        the same request would be rejected again; the object must change
//   denied        permanent        the grant is missing; only a new configuration (which reloads
//                                  the guest) can help
//   not-found     permanent        a write hit an object that is gone; its deletion or re-creation
//                                  triggers a new reconcile
//
// Catch a HostError yourself where the guest knows better, e.g. to record a condition first.

/** The kinds of host error, as the contract (`types.error`) names them. */
export const HOST_ERROR_KINDS = Object.freeze([
  "denied",
  "not-found",
  "conflict",
  "invalid",
  "unavailable",
  "other",
]);

const RETRYABLE = new Set(["conflict", "unavailable", "other"]);

/**
 * A failed host call: `kind` is the contract's name for the failure, `text` the host's words
 * (what failed and where), `message` both, as `kind: text`.
 */
export class HostError extends Error {
  /**
   * @param {string} kind one of HOST_ERROR_KINDS
   * @param {string} text the host's text
   */
  constructor(kind, text) {
    super(`${kind}: ${text}`);
    this.name = "HostError";
    this.kind = kind;
    this.text = text;
  }

  /** Whether a retry of the same call could succeed (conflict, unavailable, other). */
  isTransient() {
    return RETRYABLE.has(this.kind);
  }

  /**
   * The reconcile error this failure means by the mapping above, its message `kind: text`,
   * after `context: ` when given.
   * @param {string} [context] what the guest was doing, e.g. `status write failed`
   */
  toReconcileError(context) {
    const message = context ? `${context}: ${this.message}` : this.message;
    return new ReconcileError(this.isTransient() ? "transient" : "permanent", message);
  }
}

/**
 * How a reconcile failed: `kind` is `transient` (retried with per-key exponential backoff) or
 * `permanent` (not retried until the object or a watched secondary changes). Throw one from
 * `reconcile`; `transient()` and `permanent()` make them.
 */
export class ReconcileError extends Error {
  /**
   * @param {"transient" | "permanent"} kind
   * @param {string} message
   * @param {unknown} [cause] what went wrong underneath (kept as `cause`)
   */
  constructor(kind, message, cause) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "ReconcileError";
    this.kind = kind;
  }
}

/**
 * A reconcile failure worth retrying with backoff. With a `cause` (e.g. a caught HostError)
 * the message is `message: <the cause's message>`.
 * @param {string} message
 * @param {unknown} [cause]
 */
export function transient(message, cause) {
  return new ReconcileError("transient", withCause(message, cause), cause);
}

/**
 * A reconcile failure that waits for the next change of the object. With a `cause` the message
 * is `message: <the cause's message>`.
 * @param {string} message
 * @param {unknown} [cause]
 */
export function permanent(message, cause) {
  return new ReconcileError("permanent", withCause(message, cause), cause);
}

function withCause(message, cause) {
  if (cause === undefined) return message;
  return `${message}: ${cause instanceof Error ? cause.message : String(cause)}`;
}

/**
 * Runs `call` (a call of a generated import) and returns its result; a host error it throws is
 * thrown again as a HostError. The SDK's own calls go through it; use it for an import the SDK
 * does not wrap, e.g. `hostCall(() => ensure(spec))` of `reconciler:api/network-backend`.
 * @template T
 * @param {() => T} call
 * @returns {T}
 */
export function hostCall(call) {
  try {
    return call();
  } catch (thrown) {
    throw asHostError(thrown);
  }
}

/**
 * What a generated import threw, as a HostError when it is the contract's error. jco's QuickJS
 * backend throws an `Error` whose `payload` is the variant `{tag, val}`; a bare variant is taken
 * too. Anything else (a bug, e.g. an argument of the wrong shape) is returned as it was.
 * @param {unknown} thrown
 */
export function asHostError(thrown) {
  if (thrown instanceof HostError) return thrown;
  const variant = thrown instanceof Error && "payload" in thrown ? thrown.payload : thrown;
  if (variant && typeof variant === "object" && HOST_ERROR_KINDS.includes(variant.tag)) {
    return new HostError(variant.tag, String(variant.val));
  }
  return thrown;
}

/**
 * The contract's `reconcile-error` variant for what `reconcile` threw: a ReconcileError as it
 * is, a HostError by the mapping above, a variant `{tag: "transient" | "permanent", val}` as it
 * is, a failed fetch (below) as transient; undefined for anything else (a bug: the SDK logs it
 * and lets the instance trap).
 * @param {unknown} thrown
 * @returns {{tag: "transient" | "permanent", val: string} | undefined}
 */
export function reconcileErrorVariant(thrown) {
  if (thrown instanceof HostError) return reconcileErrorVariant(thrown.toReconcileError());
  if (thrown instanceof ReconcileError) return { tag: thrown.kind, val: thrown.message };
  if (
    thrown &&
    typeof thrown === "object" &&
    (thrown.tag === "transient" || thrown.tag === "permanent") &&
    typeof thrown.val === "string"
  ) {
    return { tag: thrown.tag, val: thrown.val };
  }
  const request = failedRequest(thrown);
  if (request !== undefined) {
    const why = thrown instanceof Error ? thrown.message : String(thrown);
    return {
      tag: "transient",
      val: `${request}: ${why} (the reason is in the host's log; a URL outside the grant's http: rules fails so too)`,
    };
  }
  return undefined;
}

// Outbound HTTP is the standard `fetch`, in a guest whose world is `http-controller` (a
// `wit-world` file holding that name): its build uses StarlingMonkey, whose `fetch` goes out
// through the contract's `wasi:http/outgoing-handler` and whose event loop settles an `async
// reconcile` (guests/lib.sh says why QuickJS cannot). The host sends a request only within the
// `http:` rules of the guest's grant, and adds their credentials itself.
//
// StarlingMonkey's fetch rejects every failure alike, a refusal by the grant included:
// TypeError("NetworkError when attempting to fetch resource"). Why it failed (which rule, which
// address) is in the host's log, not in the guest. So the SDK (index.js) puts `marking(fetch)`
// in place of the global, which marks each rejection with its request: one that escapes
// `reconcile` is then a transient error naming the request, not a bug that traps the instance.

const REQUEST = Symbol("reconciler-guest: the request of a failed fetch");
const MARKING = Symbol("reconciler-guest: marks failed requests");

/**
 * `engineFetch` (the engine's `fetch`) marking each rejection with its request (`METHOD url`);
 * the same arguments, results and rejections otherwise.
 * @template {Function} F
 * @param {F} engineFetch
 * @returns {F}
 */
export function marking(engineFetch) {
  if (engineFetch[MARKING]) return engineFetch;
  const marked = (input, init) =>
    engineFetch(input, init).catch((error) => {
      if (error !== null && typeof error === "object" && Object.isExtensible(error)) {
        const url = typeof input === "string" ? input : (input?.url ?? String(input));
        error[REQUEST] = `${init?.method ?? input?.method ?? "GET"} ${url}`;
      }
      throw error;
    });
  marked[MARKING] = true;
  return marked;
}

/**
 * The request (`METHOD url`) whose fetch rejected with `thrown`, or undefined when `thrown` is
 * not such a rejection.
 * @param {unknown} thrown
 * @returns {string | undefined}
 */
export function failedRequest(thrown) {
  return thrown !== null && typeof thrown === "object" ? thrown[REQUEST] : undefined;
}
