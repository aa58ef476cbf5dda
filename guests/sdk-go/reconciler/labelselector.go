//go:build !wasip1

package reconciler

// Label selectors in the Kubernetes string syntax (`a=b,c!=d,e in (x,y),f notin (z),g,!h`),
// parsed and matched as the host's lister does, for the fake host (fakehost.go). Written here
// because the host's parser (host/src/cluster/selector.rs, after apimachinery's labels.Parse) is Rust,
// and apimachinery's own would be the SDK's first dependency beyond the standard library; this
// is a port of the host's, with the same grammar, key and value rules and error texts.

import (
	"fmt"
	"strings"
)

// requirement is one term of a selector; a selector matches when all of its terms do.
type requirement struct {
	key    string
	op     string // "=", "!=", "in", "notin", "exists", "!"
	values map[string]bool
}

// matches is apimachinery's rule: `!=` and `notin` match an object without the label.
func (r requirement) matches(labels map[string]string) bool {
	value, has := labels[r.key]
	switch r.op {
	case "=", "in":
		return has && r.values[value]
	case "!=", "notin":
		return !has || !r.values[value]
	case "exists":
		return has
	default: // "!"
		return !has
	}
}

// selectorMatches reports whether every term of selector matches labels.
func selectorMatches(selector []requirement, labels map[string]string) bool {
	for _, r := range selector {
		if !r.matches(labels) {
			return false
		}
	}
	return true
}

// token kinds
const (
	tokIdent = iota
	tokBang
	tokNotEquals
	tokEquals
	tokDoubleEquals
	tokGreater
	tokLess
	tokOpen
	tokClose
	tokComma
	tokEnd
)

type token struct {
	kind int
	text string // of an identifier
	at   int    // byte offset
}

func (t token) describe() string {
	switch t.kind {
	case tokIdent:
		return fmt.Sprintf("%q", t.text)
	case tokEnd:
		return "the end of the selector"
	}
	return "'" + [...]string{tokBang: "!", tokNotEquals: "!=", tokEquals: "=", tokDoubleEquals: "==",
		tokGreater: ">", tokLess: "<", tokOpen: "(", tokClose: ")", tokComma: ","}[t.kind] + "'"
}

func isSelectorSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r'
}

func isSelectorSpecial(c byte) bool { return strings.IndexByte("=!(),><", c) >= 0 }

func lexSelector(input string) []token {
	var tokens []token
	for at := 0; at < len(input); {
		c := input[at]
		switch {
		case isSelectorSpace(c):
			at++
		case isSelectorSpecial(c):
			two := at+1 < len(input) && input[at+1] == '='
			kind := map[byte]int{'!': tokBang, '=': tokEquals, '>': tokGreater, '<': tokLess,
				'(': tokOpen, ')': tokClose, ',': tokComma}[c]
			if two && c == '!' {
				kind = tokNotEquals
			} else if two && c == '=' {
				kind = tokDoubleEquals
			}
			tokens = append(tokens, token{kind: kind, at: at})
			at++
			if kind == tokNotEquals || kind == tokDoubleEquals {
				at++
			}
		default:
			end := at
			for end < len(input) && !isSelectorSpace(input[end]) && !isSelectorSpecial(input[end]) {
				end++
			}
			tokens = append(tokens, token{kind: tokIdent, text: input[at:end], at: at})
			at = end
		}
	}
	return append(tokens, token{kind: tokEnd, at: len(input)})
}

type selectorParser struct {
	input  string
	tokens []token
	next   int
}

func (p *selectorParser) peek() token { return p.tokens[min(p.next, len(p.tokens)-1)] }

func (p *selectorParser) take() token {
	t := p.peek()
	p.next = min(p.next+1, len(p.tokens))
	return t
}

func (p *selectorParser) error(at int, reason string) error {
	return fmt.Errorf("invalid label selector %q at byte %d: %s", p.input, at, reason)
}

// parseSelector parses a selector; the empty (or all-blank) string selects everything. An
// error reads as the host's: `invalid label selector "a=b," at byte 4: expected a label key,
// found the end of the selector`.
func parseSelector(input string) ([]requirement, error) {
	p := &selectorParser{input: input, tokens: lexSelector(input)}
	var selector []requirement
	if p.peek().kind == tokEnd {
		return nil, nil
	}
	for {
		r, err := p.requirement()
		if err != nil {
			return nil, err
		}
		selector = append(selector, r)
		switch t := p.take(); t.kind {
		case tokEnd:
			return selector, nil
		case tokComma:
		default:
			return nil, p.error(t.at, "expected ',' or the end of the selector, found "+t.describe())
		}
	}
}

func (p *selectorParser) requirement() (requirement, error) {
	t := p.take()
	negated := t.kind == tokBang
	if negated {
		t = p.take()
	}
	if t.kind != tokIdent {
		return requirement{}, p.error(t.at, "expected a label key, found "+t.describe())
	}
	key := t.text
	if reason := validateLabelKey(key); reason != "" {
		return requirement{}, p.error(t.at, reason)
	}
	if negated {
		return requirement{key: key, op: "!"}, nil
	}
	operator := p.peek()
	switch {
	case operator.kind == tokComma || operator.kind == tokEnd:
		return requirement{key: key, op: "exists"}, nil
	case operator.kind == tokEquals || operator.kind == tokDoubleEquals || operator.kind == tokNotEquals:
		p.take()
		value, err := p.exactValue()
		if err != nil {
			return requirement{}, err
		}
		op := "="
		if operator.kind == tokNotEquals {
			op = "!="
		}
		return requirement{key: key, op: op, values: map[string]bool{value: true}}, nil
	case operator.kind == tokIdent && (operator.text == "in" || operator.text == "notin"):
		p.take()
		values, err := p.valueSet()
		if err != nil {
			return requirement{}, err
		}
		return requirement{key: key, op: operator.text, values: values}, nil
	case operator.kind == tokGreater || operator.kind == tokLess:
		return requirement{}, p.error(operator.at, "operator "+operator.describe()+
			" is not supported here (use =, ==, !=, in, notin, key or !key)")
	}
	return requirement{}, p.error(operator.at, fmt.Sprintf(
		"expected an operator (=, ==, !=, in, notin), ',' or the end after key %q, found %s", key, operator.describe()))
}

// exactValue is the value after `=`, `==` or `!=`; empty when the term ends right there (`a=`).
func (p *selectorParser) exactValue() (string, error) {
	t := p.peek()
	switch t.kind {
	case tokComma, tokEnd:
		return "", nil
	case tokIdent:
		p.take()
		if reason := validateLabelValue(t.text); reason != "" {
			return "", p.error(t.at, reason)
		}
		return t.text, nil
	}
	return "", p.error(t.at, "expected a label value, found "+t.describe())
}

// valueSet is `( v1, v2, ... )`. As in apimachinery, an empty slot (`()`, `(a,)`) is the empty
// value.
func (p *selectorParser) valueSet() (map[string]bool, error) {
	if open := p.take(); open.kind != tokOpen {
		return nil, p.error(open.at, "expected '(' after in/notin, found "+open.describe())
	}
	values := map[string]bool{}
	expectValue := true
	for {
		t := p.take()
		switch {
		case t.kind == tokIdent && expectValue:
			if reason := validateLabelValue(t.text); reason != "" {
				return nil, p.error(t.at, reason)
			}
			values[t.text] = true
			expectValue = false
		case t.kind == tokComma || t.kind == tokClose:
			if expectValue {
				values[""] = true
			}
			if t.kind == tokClose {
				return values, nil
			}
			expectValue = true
		case t.kind == tokEnd:
			return nil, p.error(t.at, "unclosed value list: expected ')'")
		default:
			return nil, p.error(t.at, "expected a label value, ',' or ')' in the value list, found "+t.describe())
		}
	}
}

// validateLabelKey is why key is not a label key (an optional DNS-subdomain prefix and '/',
// then a name of at most 63 characters), or "".
func validateLabelKey(key string) string {
	prefix, name, prefixed := strings.Cut(key, "/")
	if !prefixed {
		name = key
	}
	if prefixed {
		ok := prefix != "" && len(prefix) <= 253
		for _, label := range strings.Split(prefix, ".") {
			ok = ok && isDNSLabel(label)
		}
		if !ok {
			return fmt.Sprintf("label key %q has an invalid prefix %q: it must be a lowercase DNS "+
				"subdomain (e.g. example.com) of at most 253 characters", key, prefix)
		}
	}
	if name == "" {
		return fmt.Sprintf("label key %q has an empty name", key)
	}
	if !isLabelName(name) {
		return fmt.Sprintf("label key %q is invalid: the name must be at most 63 characters of "+
			"[A-Za-z0-9-_.], starting and ending with a letter or digit", key)
	}
	return ""
}

func validateLabelValue(value string) string {
	if value == "" || isLabelName(value) {
		return ""
	}
	return fmt.Sprintf("label value %q is invalid: it must be at most 63 characters of "+
		"[A-Za-z0-9-_.], starting and ending with a letter or digit", value)
}

func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func isLabelName(s string) bool {
	alnum := func(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' }
	if s == "" || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}
