// The manifest: what a guest asks the host to watch, with the contract's defaults filled in;
// the optional `watches` export (defineWatches), for watches a manifest cannot say; and the
// optional `indexes` export (defineIndexes), for indexes whose values the guest computes.

import { error as logError, warn as logWarn } from "./log.js";
import { describe, selector } from "./object.js";

/**
 * How an object of a watched kind leads to primary keys (the contract's `watch-mapping`; the
 * manifest's `secondary` takes its first two cases, the contract's `mapping`). What each costs
 * the host: `owner`, `label` and `ownerLabels` only the watched kind's cache; `field` an index
 * entry per value per primary, and no guest call; `function` one call of the guest, in a fresh
 * instance, per event of the kind.
 */
export const Mapping = Object.freeze({
  /** Through `metadata.ownerReferences` entries whose kind is the primary kind. */
  owner: Object.freeze({ tag: "owner" }),
  /** Through the label `name`, whose value is the primary's name in the same namespace. */
  label(name) {
    return { tag: "label", val: name };
  },
  /**
   * Through two labels naming the primary: `namespaceLabel` its namespace (null for a
   * cluster-scoped primary) and `nameLabel` its name, for children an owner reference cannot
   * reach (in another namespace, or cluster-scoped). `defineWatches` only.
   */
  ownerLabels(namespaceLabel, nameLabel) {
    return { tag: "owner-labels", val: { namespace: namespaceLabel ?? undefined, name: nameLabel } };
  },
  /**
   * To the primaries whose `field` (a path into the primary: `spec.source`,
   * `spec.targetNamespaces[*]`, `spec.refs[*].name`) equals the object's `value` (an
   * `IndexValue`), through an index the host keeps. `defineWatches` only.
   */
  field(field, value) {
    return { tag: "field", val: { field, value } };
  },
  /**
   * Through `map(object, kind)`, called once per add, update (new, then old version) and
   * delete of an object of the kind: it returns the primary keys (`{namespace, name}`, or
   * references) the object affects, in a fresh instance where only the lister answers. A throw
   * is logged and traps the instance: the host drops that event's keys, logs and counts it.
   * `defineWatches` only.
   */
  function(map) {
    return { tag: "function", map };
  },
});

/**
 * What of a watched object a `Mapping.field` index compares with the primary's field, and a
 * computed index (`defineIndexes`) looks up among a primary's values (the contract's `lookup`).
 */
export const IndexValue = Object.freeze({
  /** Its name; a cluster-scoped object (a Namespace) matches primaries in every namespace. */
  name: "name",
  /** Its namespace: primaries in every namespace whose field names it. */
  namespace: "namespace",
  /** Its `namespace/name` (its name alone when cluster-scoped): primaries in every namespace. */
  namespacedName: "namespaced-name",
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
      throw new TypeError(
        `manifest: \`secondary[${i}].mapping\` must be Mapping.owner or Mapping.label(name)` +
          " (the other mappings are declared with defineWatches)",
      );
    }
    return { kind, mapping };
  });
  return record;
}

const WATCH_OPTIONS = ["kind", "mapping", "namespace", "labelSelector"];
const INDEX_OPTIONS = ["name", "kind", "index", "lookup", "namespace", "labelSelector"];
const INDEX_VALUES = Object.values(IndexValue);

/**
 * The component's optional `watches` export, for a guest whose world is `watching-controller`
 * (a `wit-world` file beside app.js saying so): `export const watches = defineWatches([...])`.
 * Each watch is `{kind, mapping, namespace?, labelSelector?}`: objects of `kind` (in
 * `namespace` only, and matching `labelSelector` only, when given) lead to primary keys through
 * `mapping` (a `Mapping`). The host asks for them once, at load, right after the manifest;
 * they join the manifest's `secondary` (at most 16 in all). A bad watch is a TypeError naming
 * it, and the host refuses the guest with that message.
 */
export function defineWatches(watches) {
  return {
    watches() {
      return checkWatches(watches).map(({ kind, mapping, namespace, labelSelector }) => ({
        kind,
        mapping: mapping.tag === "function" ? { tag: "function" } : mapping,
        namespace: namespace ?? undefined,
        labelSelector: labelSelector == null ? undefined : selector(labelSelector),
      }));
    },

    map(kind, objectJson) {
      const maps = watches
        .filter((w) => w?.mapping?.tag === "function" && typeof w.mapping.map === "function" && sameKind(w.kind, kind))
        .map((w) => w.mapping.map);
      if (maps.length === 0) {
        logWarn(`map was called for ${describeKind(kind)}, which no Mapping.function watch declares: no keys`);
        return [];
      }
      let object;
      const keys = new Map();
      for (const map of maps) {
        let mapped;
        try {
          object ??= JSON.parse(objectJson);
          mapped = map(object, kind);
          if (!Array.isArray(mapped)) throw new TypeError(`a map function must return a list of keys, not ${typeof mapped}`);
        } catch (thrown) {
          logTrap(`map ${named(object, kind, describeKind(kind))}`, thrown);
          throw thrown; // traps: the host drops this event's keys, and counts it
        }
        for (const key of mapped) {
          const namespace = key?.namespace || undefined;
          keys.set(JSON.stringify([namespace ?? null, key?.name]), { namespace, name: key?.name });
        }
      }
      return [...keys.values()];
    },
  };
}

function checkWatches(watches) {
  if (!Array.isArray(watches)) throw new TypeError("defineWatches: expected a list of {kind, mapping}");
  return checkList("defineWatches", "watches", watches, WATCH_OPTIONS, (watch, what) => {
    checkKind(`${what}.kind`, watch.kind, "defineWatches");
    checkMapping(`${what}.mapping`, watch.mapping);
  });
}

// Checks each of a list of watches or indexes: it has only the `options` named, `check(item,
// what)` finds its own fields right, and its namespace and label selector are a watch's. The
// first fault is a TypeError naming the item (`watches[2].mapping`).
function checkList(where, name, list, options, check) {
  list.forEach((item, i) => {
    const what = `${name}[${i}]`;
    for (const option of Object.keys(item ?? {})) {
      if (!options.includes(option)) {
        throw new TypeError(`${where}: unknown option \`${what}.${option}\` (known: ${options.join(", ")})`);
      }
    }
    check(item ?? {}, what);
    if (item.namespace != null && typeof item.namespace !== "string") {
      throw new TypeError(`${where}: \`${what}.namespace\` must be a string`);
    }
    if (item.labelSelector != null && typeof item.labelSelector !== "string" && typeof item.labelSelector !== "object") {
      throw new TypeError(`${where}: \`${what}.labelSelector\` must be a string or {label: value}`);
    }
  });
  return list;
}

function checkMapping(what, mapping) {
  const string = (value) => typeof value === "string" && value !== "";
  const ok = {
    owner: () => true,
    label: () => string(mapping.val),
    "owner-labels": () => string(mapping.val?.name) && (mapping.val.namespace == null || string(mapping.val.namespace)),
    field: () => string(mapping.val?.field) && INDEX_VALUES.includes(mapping.val.value),
    function: () => typeof mapping.map === "function",
  }[mapping?.tag];
  if (ok === undefined || !ok()) {
    throw new TypeError(
      `defineWatches: \`${what}\` must be Mapping.owner, Mapping.label(name), Mapping.ownerLabels(namespaceLabel, nameLabel), ` +
        "Mapping.field(path, IndexValue.name | .namespace | .namespacedName) or Mapping.function(map)",
    );
  }
}

/**
 * The component's optional `indexes` export, for a guest whose world is `indexing-controller`
 * (a `wit-world` file beside app.js saying so): `export const indexes = defineIndexes([...])`.
 * controller-runtime's `IndexField` with an extractor function: each index is
 * `{name, kind, index, lookup?, namespace?, labelSelector?}`, where `index(primary)` returns the
 * values of one primary object (its parsed JSON), e.g. the names of the `kind` objects it
 * depends on; an event of a `kind` object (in `namespace` only, and matching `labelSelector`
 * only, when given) wakes the primaries among whose values is its `lookup` (an `IndexValue`:
 * its name by default, its namespace, or its `namespace/name`). The host keeps the values, so
 * such an event costs a lookup in its memory, no guest call.
 *
 * The host asks for the indexes once, at load (they count among the 16 watches), and calls
 * `index` for each primary added or changed, and for every primary when a new version of the
 * guest loads, in a fresh instance where every host call but `log` is refused: compute from
 * the object alone. A throw is logged and traps the instance: the host leaves that primary out
 * of the index until its next change. At most 100 values of at most 317 bytes count. A bad
 * index is a TypeError naming it, and the host refuses the guest with that message.
 */
export function defineIndexes(indexes) {
  return {
    indexes() {
      return checkIndexes(indexes).map(({ name, kind, lookup, namespace, labelSelector }) => ({
        name,
        kind,
        lookup: lookup ?? IndexValue.name,
        namespace: namespace ?? undefined,
        labelSelector: labelSelector == null ? undefined : selector(labelSelector),
      }));
    },

    index(name, primaryJson) {
      const declared = checkIndexes(indexes).find((i) => i.name === name);
      if (declared === undefined) {
        logWarn(`index was called for "${name}", which no index of defineIndexes declares: no values`);
        return [];
      }
      let primary;
      try {
        primary = JSON.parse(primaryJson);
        const values = declared.index(primary);
        if (!Array.isArray(values)) throw new TypeError(`an index function must return a list of strings, not ${typeof values}`);
        const odd = values.findIndex((value) => typeof value !== "string");
        if (odd >= 0) throw new TypeError(`an index function must return strings, but value ${odd} is ${typeof values[odd]}`);
        return values;
      } catch (thrown) {
        logTrap(`index ${name} of ${named(primary, { kind: primary?.kind }, "a primary")}`, thrown);
        throw thrown; // traps: the host leaves the primary out of the index until its next change
      }
    },
  };
}

function checkIndexes(indexes) {
  if (!Array.isArray(indexes)) throw new TypeError("defineIndexes: expected a list of {name, kind, index}");
  // The host checks the name's spelling and that it is unique, and says so.
  return checkList("defineIndexes", "indexes", indexes, INDEX_OPTIONS, (index, what) => {
    if (typeof index.name !== "string") {
      throw new TypeError(`defineIndexes: \`${what}.name\` must be the index's name (1-63 lowercase letters, digits and -)`);
    }
    checkKind(`${what}.kind`, index.kind, "defineIndexes");
    if (typeof index.index !== "function") {
      throw new TypeError(`defineIndexes: \`${what}.index\` must be a function computing a primary's values`);
    }
    if (index.lookup != null && !INDEX_VALUES.includes(index.lookup)) {
      throw new TypeError(`defineIndexes: \`${what}.lookup\` must be IndexValue.name, .namespace or .namespacedName`);
    }
  });
}

// `Kind namespace/name` of an object a guest's function was handed, or `fallback` when it has no
// name (or was not JSON).
function named(object, kind, fallback) {
  const name = object?.metadata?.name;
  return typeof name === "string" ? describe({ kind, namespace: object.metadata.namespace, name }) : fallback;
}

// A guest's `map` or `index` function threw: logged at error level (the host shows the line with
// the trap), before the throw goes on and traps the instance.
function logTrap(what, thrown) {
  logError(`${what}: ${thrown instanceof Error ? `${thrown.name}: ${thrown.message}` : String(thrown)}`);
}

function describeKind(kind) {
  return `${kind.kind} ${kind.group === "" ? kind.version : `${kind.group}/${kind.version}`}`;
}

function sameKind(a, b) {
  return a?.group === b.group && a?.version === b.version && a?.kind === b.kind;
}

function checkKind(what, kind, where = "manifest") {
  if (
    !kind ||
    typeof kind.group !== "string" ||
    typeof kind.version !== "string" ||
    typeof kind.kind !== "string" ||
    kind.version === "" ||
    kind.kind === ""
  ) {
    throw new TypeError(`${where}: \`${what}\` must be a kind, e.g. gvk("example.com", "v1", "Hello")`);
  }
}
