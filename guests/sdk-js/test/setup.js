// Loaded before every test file (`node --import ./test/setup.js --test`): the public fake host's
// hooks (../testing/register.js: the component imports `reconciler:api/<interface>@0.1.0` answered
// by the fake, which a test imports as `reconciler-guest/testing`), and this repository's own
// (hooks.js: the SDK beside the repository's guests, as a build puts it there).
import { register } from "node:module";

import "../testing/register.js";

register("./hooks.js", import.meta.url);
