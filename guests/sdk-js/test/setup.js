// Loaded before every test file (`node --import ./test/setup.js --test`): lets node resolve the
// component imports `reconciler:api/<interface>@0.1.0`, which only exist inside a component.
import { register } from "node:module";

register("./hooks.js", import.meta.url);
