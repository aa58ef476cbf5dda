// Types of the fake host for a guest's native tests (index.js beside this file), imported as
// `reconciler-guest/testing` once register.js is loaded (`node --import .../register.js --test`).

import type { Gvk, KubeObject, LabelSelector, ObjectKey, ObjectRef } from "../reconciler-guest/index.js";

/** The contract's request record, as the host hands it to `reconcile`. */
export interface WitRequest {
  ref: ObjectRef;
  /** The object's JSON text, or null when it is gone. */
  object: string | null;
  deleting: boolean;
  attempt: number;
}

/** A write the guest made, its patch or object parsed (the text as it came when not JSON). */
export type Write =
  | { op: "patch-status"; ref: ObjectRef; patch: KubeObject }
  | { op: "apply"; object: KubeObject }
  | { op: "apply-with"; object: KubeObject; force: boolean }
  | { op: "delete"; ref: ObjectRef }
  | {
      op: "record-event";
      event: { regarding: ObjectRef; eventType: "normal" | "warning"; reason: string; message: string };
    }
  | { op: "enqueue"; key: ObjectKey; afterMs: number | null };

/** The imports the fake answers, by the names jco's bindings give them. */
export type ImportName =
  | "get"
  | "list"
  | "patchStatus"
  | "apply"
  | "applyWith"
  | "delete"
  | "recordEvent"
  | "enqueue"
  | "log"
  | "getEnvironment";

/** The fake host: the cluster a guest sees in a unit test, and what it asked of it. */
export const host: {
  /**
   * Adds objects (plain, or JSON text of one, of an array, or of a `kind: List`), replacing any
   * of the same kind, namespace and name. Each needs `apiVersion`, `kind` and `metadata.name`.
   */
  load(...objects: Array<KubeObject | string | Array<KubeObject | string>>): void;
  /** The object `ref` names, as it is now (a copy), or null. */
  get(ref: ObjectRef): KubeObject | null;
  /** The objects of `kind`, by namespace then name; an invalid selector throws the host's `invalid`. */
  list(kind: Gvk, options?: { namespace?: string | null; labelSelector?: LabelSelector | null }): KubeObject[];
  /** The request the host would hand `reconcile` for the object `target` names, as held now. */
  request(target: ObjectRef | KubeObject, options?: { attempt?: number }): WitRequest;
  /** Every write the guest made, in order, whatever it was answered. */
  readonly writes: Write[];
  /** Every line the guest logged. */
  readonly logs: Array<{ level: "trace" | "debug" | "info" | "warn" | "error"; message: string }>;
  /** Every import call, reads too, its arguments as they crossed. */
  readonly calls: Array<{ fn: ImportName; args: unknown[] }>;
  /** The arguments of each call of import `fn`. */
  callsOf(fn: ImportName): unknown[][];
  /** Answers every later call of `fn` with `handler` (throw `hostError(...)` to refuse it). */
  answer(fn: ImportName, handler: (...args: any[]) => unknown): void;
  /** The environment `getenv` reads. */
  setEnv(variables: Record<string, string>): void;
  /** Forgets the objects, the records, the answers and the environment. */
  reset(): void;
};

/** What an import throws when the host refuses a call: an Error whose `payload` is the variant. */
export function hostError(
  kind: "denied" | "not-found" | "conflict" | "invalid" | "unavailable" | "other",
  text: string,
): Error & { payload: { tag: string; val: string } };
