// The instance's environment: the `env` of the guest's grant in the host configuration.
//
//   const region = getenv("REGION") ?? "eu-west-1";
//
// Read through wasi:cli/environment, which the build adds to the guest's world (guests/lib.sh,
// js_build; the version is that of wit/deps/cli.wit). Read at each call, never at load: the
// build snapshots the modules, when there is no environment yet.

import { getEnvironment } from "wasi:cli/environment@0.2.12";

/**
 * The value of the environment variable `name`, or undefined when the grant does not set it.
 * Each call is one host call returning the whole environment.
 */
export function getenv(name) {
  for (const [key, value] of getEnvironment()) {
    if (key === name) return value;
  }
  return undefined;
}
