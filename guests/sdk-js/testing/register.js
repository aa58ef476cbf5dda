// Load before a guest's tests: `node --import ./<this directory>/register.js --test` (node 20.6+).
// Makes the component imports resolve to the fake host (hooks.js); a guest's modules then load
// under node as they do in a component, and the test reads the fake as `reconciler-guest/testing`.
import { register } from "node:module";

register("./hooks.js", import.meta.url);
