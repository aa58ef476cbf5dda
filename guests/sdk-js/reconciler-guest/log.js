// Logging into the host's log stream, where each line is labelled with the guest, key and
// attempt. Each line is one host call; the host cuts it to 4 KiB and drops lines beyond the
// guest's log rate.
//
//   log.info("created %s in %d ms", name, elapsed);
//   log.warn("drift on", ref);            // objects are written as JSON

import { log as hostLog } from "reconciler:api/log@0.1.0";

/**
 * A line from printf-style arguments, like Node's `util.format`: in a first argument that is a
 * string followed by others, `%s` (text), `%d`/`%i`/`%f` (numbers), `%j`/`%o`/`%O` (JSON) take
 * the next argument and `%%` is `%`; the arguments left over are appended, separated by spaces.
 * Objects are written as JSON, errors as `Name: message`. A lone string is the line as it is.
 */
export function format(...args) {
  if (args.length === 1 && typeof args[0] === "string") return args[0]; // as util.format: `%%` too
  let line = "";
  let next = 0;
  if (typeof args[0] === "string") {
    next = 1;
    line = args[0].replace(/%([sdifjoO%])/g, (match, spec) => {
      if (spec === "%") return "%";
      if (next >= args.length) return match;
      const value = args[next++];
      switch (spec) {
        case "s":
          return typeof value === "string" ? value : show(value);
        case "d":
        case "f":
          return typeof value === "bigint" ? String(value) : String(Number(value));
        case "i":
          return typeof value === "bigint" ? String(value) : String(Math.trunc(Number(value)));
        default:
          return json(value);
      }
    });
  }
  for (; next < args.length; next++) {
    line += (line === "" && next === 0 ? "" : " ") + show(args[next]);
  }
  return line;
}

function show(value) {
  if (typeof value === "string") return value;
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  if (value !== null && typeof value === "object") return json(value);
  return String(value);
}

function json(value) {
  try {
    const text = JSON.stringify(value, (_, v) => (typeof v === "bigint" ? String(v) : v));
    return text === undefined ? String(value) : text;
  } catch {
    return String(value); // a cycle
  }
}

/**
 * Logs a line at `level` (`trace`, `debug`, `info`, `warn` or `error`), formatted by `format`.
 * @param {"trace" | "debug" | "info" | "warn" | "error"} level
 */
export function log(level, ...args) {
  hostLog(level, format(...args));
}

/** Logs at trace level. */
export function trace(...args) {
  hostLog("trace", format(...args));
}

/** Logs at debug level. */
export function debug(...args) {
  hostLog("debug", format(...args));
}

/** Logs at info level. */
export function info(...args) {
  hostLog("info", format(...args));
}

/** Logs at warn level. */
export function warn(...args) {
  hostLog("warn", format(...args));
}

/** Logs at error level; the host puts the last error logged into a failed reconcile's error. */
export function error(...args) {
  hostLog("error", format(...args));
}
