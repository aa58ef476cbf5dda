// The manifest: what a guest asks the host to watch, with the contract's defaults filled in.

import { selector } from "./object.js";

/** How a secondary object leads to its primary's key (the contract's `mapping`). */
export const Mapping = Object.freeze({
  /** Through `metadata.ownerReferences` entries whose kind is the primary kind. */
  owner: Object.freeze({ tag: "owner" }),
  /** Through the label `name`, whose value is the primary's name in the same namespace. */
  label(name) {
    return { tag: "label", val: name };
  },
});

const DEFAULTS = {
  namespace: undefined,
  labelSelector: undefined,
  secondary: [],
  finalizer: undefined,
  concurrency: 0,
  resyncSeconds: 0,
  generationChangedOnly: false,
};

/**
 * The contract's `controller-manifest` from `options`: `name` and `primary` are required, the
 * rest default to every namespace, no label selector, no secondaries, no finalizer, the host's
 * default concurrency, no resync, and every update reconciled. Throws a TypeError naming the
 * option that is missing, unknown (a typo would otherwise be ignored) or of the wrong type;
 * the host then refuses the guest at load with that message.
 *
 * Options (see `wit/reconciler.wit` for each field):
 * - `name`: the guest's name, a DNS-1123 label; its grant and field manager
 * - `primary`: the kind it reconciles, e.g. `gvk("example.com", "v1", "Hello")`
 * - `namespace`: watch only this namespace
 * - `labelSelector`: watch only primaries matching it (a string, or `{label: value}`)
 * - `secondary`: `[{kind, mapping}]`, other kinds whose changes enqueue a primary, found
 *   through `Mapping.owner` or `Mapping.label(name)`
 * - `finalizer`: kept on every primary until a reconcile with `deleting` succeeds
 * - `concurrency`: at most this many keys at once (0 = the host's default)
 * - `resyncSeconds`: reconcile every key this often even without changes (0 = never)
 * - `generationChangedOnly`: reconcile on `metadata.generation` changes only, not on status,
 *   label or annotation writes (creation, deletion, secondaries, requeues and resync still do)
 */
export function manifest(options) {
  if (!options || typeof options !== "object") {
    throw new TypeError("manifest: expected an object with at least `name` and `primary`");
  }
  for (const option of Object.keys(options)) {
    if (option !== "name" && option !== "primary" && !(option in DEFAULTS)) {
      throw new TypeError(
        `manifest: unknown option \`${option}\` (known: name, primary, ${Object.keys(DEFAULTS).join(", ")})`,
      );
    }
  }
  const { name, primary } = options;
  if (typeof name !== "string" || name === "") {
    throw new TypeError("manifest: `name` is required: the guest's name, a DNS-1123 label");
  }
  checkKind("primary", primary);
  const record = { name, primary, ...DEFAULTS };
  for (const option of Object.keys(DEFAULTS)) {
    if (options[option] !== undefined && options[option] !== null) record[option] = options[option];
  }
  if (record.labelSelector !== undefined) record.labelSelector = selector(record.labelSelector);
  for (const option of ["namespace", "finalizer"]) {
    if (record[option] !== undefined && typeof record[option] !== "string") {
      throw new TypeError(`manifest: \`${option}\` must be a string`);
    }
  }
  for (const option of ["concurrency", "resyncSeconds"]) {
    if (!Number.isInteger(record[option]) || record[option] < 0) {
      throw new TypeError(`manifest: \`${option}\` must be a whole number >= 0`);
    }
  }
  record.generationChangedOnly = Boolean(record.generationChangedOnly);
  if (!Array.isArray(record.secondary)) {
    throw new TypeError("manifest: `secondary` must be a list of {kind, mapping}");
  }
  record.secondary = record.secondary.map(({ kind, mapping }, i) => {
    checkKind(`secondary[${i}].kind`, kind);
    if (mapping?.tag !== "owner" && !(mapping?.tag === "label" && typeof mapping.val === "string")) {
      throw new TypeError(`manifest: \`secondary[${i}].mapping\` must be Mapping.owner or Mapping.label(name)`);
    }
    return { kind, mapping };
  });
  return record;
}

function checkKind(what, kind) {
  if (
    !kind ||
    typeof kind.group !== "string" ||
    typeof kind.version !== "string" ||
    typeof kind.kind !== "string" ||
    kind.version === "" ||
    kind.kind === ""
  ) {
    throw new TypeError(`manifest: \`${what}\` must be a kind, e.g. gvk("example.com", "v1", "Hello")`);
  }
}
