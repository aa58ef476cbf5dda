// Label selectors as the host reads them (host/src/cluster/selector.rs, itself apimachinery's
// `labels.Parse`): `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (z)`, `a`, `!a`, joined by
// commas; keys and values checked as Kubernetes checks them; `>` and `<` refused. The fake host's
// `list` filters with it, so a selector a guest's test passes is one the host takes, and one the
// host refuses is refused here with the same words.

/**
 * The selector `text` as a predicate over an object's labels. An empty (or blank) selector
 * selects everything. Throws a SelectorError naming the byte offset and what was expected there.
 * @param {string} text
 * @returns {(labels: Record<string, string>) => boolean}
 */
export function parseSelector(text) {
  const parser = new Parser(text);
  const requirements = [];
  if (parser.peek().kind !== "end") {
    for (;;) {
      requirements.push(parser.requirement());
      const token = parser.take();
      if (token.kind === "end") break;
      if (token.kind !== ",") throw parser.error(token.at, `expected ',' or the end of the selector, found ${describe(token)}`);
    }
  }
  return (labels) => requirements.every((matches) => matches(labels ?? {}));
}

/** Why a selector was refused; the message is the host's. */
export class SelectorError extends Error {
  constructor(selector, position, reason) {
    super(`invalid label selector ${JSON.stringify(selector)} at byte ${position}: ${reason}`);
    this.name = "SelectorError";
  }
}

const SPECIAL = new Set(["=", "!", "(", ")", ",", ">", "<"]);
const SPACE = /[ \t\n\f\r]/; // ASCII whitespace, as the host's lexer skips it

// Tokens: {kind, at, text}, `kind` an operator's spelling, "ident" or "end"; `at` a byte offset.
function lex(input) {
  const tokens = [];
  const bytes = (i) => new TextEncoder().encode(input.slice(0, i)).length;
  let i = 0;
  while (i < input.length) {
    const c = input[i];
    if (SPACE.test(c)) {
      i++;
    } else if (SPECIAL.has(c)) {
      const two = input.slice(i, i + 2);
      const kind = two === "!=" || two === "==" ? two : c;
      tokens.push({ kind, at: bytes(i) });
      i += kind.length;
    } else {
      const start = i;
      while (i < input.length && !SPACE.test(input[i]) && !SPECIAL.has(input[i])) i++;
      tokens.push({ kind: "ident", at: bytes(start), text: input.slice(start, i) });
    }
  }
  tokens.push({ kind: "end", at: bytes(input.length) });
  return tokens;
}

function describe(token) {
  if (token.kind === "ident") return JSON.stringify(token.text);
  if (token.kind === "end") return "the end of the selector";
  return `'${token.kind}'`;
}

class Parser {
  constructor(input) {
    this.input = input;
    this.tokens = lex(input);
    this.next = 0;
  }

  peek() {
    return this.tokens[Math.min(this.next, this.tokens.length - 1)];
  }

  take() {
    const token = this.peek();
    if (this.next < this.tokens.length) this.next++;
    return token;
  }

  error(at, reason) {
    return new SelectorError(this.input, at, reason);
  }

  // One requirement, as a predicate over labels (kube-core's matching: `!=` and `notin` match
  // an object without the label).
  requirement() {
    let token = this.take();
    const negated = token.kind === "!";
    if (negated) token = this.take();
    if (token.kind !== "ident") throw this.error(token.at, `expected a label key, found ${describe(token)}`);
    const key = token.text;
    this.check(token, validateKey(key));
    const has = (labels) => Object.hasOwn(labels, key);
    if (negated) return (labels) => !has(labels);
    const operator = this.peek();
    switch (operator.kind) {
      case ",":
      case "end":
        return has;
      case "=":
      case "==":
      case "!=": {
        this.take();
        const value = this.exactValue();
        const equal = (labels) => has(labels) && labels[key] === value;
        return operator.kind === "!=" ? (labels) => !equal(labels) : equal;
      }
      case ">":
      case "<":
        throw this.error(operator.at, `operator ${describe(operator)} is not supported here (use =, ==, !=, in, notin, key or !key)`);
      default:
        if (operator.kind === "ident" && (operator.text === "in" || operator.text === "notin")) {
          this.take();
          const values = this.valueSet();
          const within = (labels) => has(labels) && values.has(labels[key]);
          return operator.text === "in" ? within : (labels) => !within(labels);
        }
        throw this.error(
          operator.at,
          `expected an operator (=, ==, !=, in, notin), ',' or the end after key ${JSON.stringify(key)}, found ${describe(operator)}`,
        );
    }
  }

  // The value after `=`, `==` or `!=`; empty when the requirement ends right there (`a=`).
  exactValue() {
    const token = this.peek();
    if (token.kind === "," || token.kind === "end") return "";
    if (token.kind !== "ident") throw this.error(token.at, `expected a label value, found ${describe(token)}`);
    this.take();
    this.check(token, validateValue(token.text));
    return token.text;
  }

  // `( v1, v2, ... )`; an empty slot (`()`, `(a,)`) is the empty value, as in apimachinery.
  valueSet() {
    const open = this.take();
    if (open.kind !== "(") throw this.error(open.at, `expected '(' after in/notin, found ${describe(open)}`);
    const values = new Set();
    let expectValue = true;
    for (;;) {
      const token = this.take();
      if (token.kind === "ident" && expectValue) {
        this.check(token, validateValue(token.text));
        values.add(token.text);
        expectValue = false;
      } else if (token.kind === "," || token.kind === ")") {
        if (expectValue) values.add("");
        if (token.kind === ")") return values;
        expectValue = true;
      } else if (token.kind === "end") {
        throw this.error(token.at, "unclosed value list: expected ')'");
      } else {
        throw this.error(token.at, `expected a label value, ',' or ')' in the value list, found ${describe(token)}`);
      }
    }
  }

  check(token, reason) {
    if (reason !== undefined) throw this.error(token.at, reason);
  }
}

const LABEL_NAME = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/;
const DNS_LABEL = /^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$/;

// Why a label key is invalid: an optional DNS-subdomain prefix and '/', then a name of at most
// 63 characters; undefined when it is valid.
function validateKey(key) {
  const slash = key.indexOf("/");
  const prefix = slash < 0 ? undefined : key.slice(0, slash);
  const name = slash < 0 ? key : key.slice(slash + 1);
  if (prefix !== undefined && (prefix === "" || prefix.length > 253 || !prefix.split(".").every((l) => DNS_LABEL.test(l)))) {
    return (
      `label key ${JSON.stringify(key)} has an invalid prefix ${JSON.stringify(prefix)}: ` +
      "it must be a lowercase DNS subdomain (e.g. example.com) of at most 253 characters"
    );
  }
  if (name === "") return `label key ${JSON.stringify(key)} has an empty name`;
  if (!LABEL_NAME.test(name)) {
    return (
      `label key ${JSON.stringify(key)} is invalid: the name must be at most 63 characters of [A-Za-z0-9-_.], ` +
      "starting and ending with a letter or digit"
    );
  }
  return undefined;
}

function validateValue(value) {
  if (value === "" || LABEL_NAME.test(value)) return undefined;
  return (
    `label value ${JSON.stringify(value)} is invalid: it must be at most 63 characters of [A-Za-z0-9-_.], ` +
    "starting and ending with a letter or digit"
  );
}
