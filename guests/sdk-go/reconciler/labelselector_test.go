package reconciler

import (
	"reflect"
	"strings"
	"testing"
)

func TestEveryOperatorParsesAsTheHostParsesIt(t *testing.T) {
	set := func(values ...string) map[string]bool {
		m := map[string]bool{}
		for _, v := range values {
			m[v] = true
		}
		return m
	}
	for input, want := range map[string]requirement{
		"a=b":         {key: "a", op: "=", values: set("b")},
		"a==b":        {key: "a", op: "=", values: set("b")},
		"a!=b":        {key: "a", op: "!=", values: set("b")},
		"a in (x, y)": {key: "a", op: "in", values: set("x", "y")},
		"a notin (z)": {key: "a", op: "notin", values: set("z")},
		"a":           {key: "a", op: "exists"},
		"!a":          {key: "a", op: "!"},
		"a=":          {key: "a", op: "=", values: set("")},
		"a in (x,)":   {key: "a", op: "in", values: set("x", "")},
		"in=notin":    {key: "in", op: "=", values: set("notin")},
	} {
		got, err := parseSelector(input)
		if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0], want) {
			t.Errorf("%q: got %+v, %v", input, got, err)
		}
	}
	if got, err := parseSelector(" \t"); got != nil || err != nil {
		t.Errorf("blank: got %+v, %v", got, err)
	}
}

func TestASelectorMatchesWhenEveryRequirementDoes(t *testing.T) {
	selector, err := parseSelector("a=b,c!=d,e in (x,y),f notin (z),g,!h")
	if err != nil {
		t.Fatal(err)
	}
	if !selectorMatches(selector, map[string]string{"a": "b", "c": "x", "e": "y", "f": "q", "g": ""}) {
		t.Error("a matching set of labels did not match")
	}
	for _, bad := range []map[string]string{
		{"a": "x", "e": "y", "g": ""},
		{"a": "b", "c": "d", "e": "y", "g": ""},
		{"a": "b", "e": "q", "g": ""},
		{"a": "b", "e": "x", "f": "z", "g": ""},
		{"a": "b", "e": "x"},
		{"a": "b", "e": "x", "g": "", "h": "1"},
	} {
		if selectorMatches(selector, bad) {
			t.Errorf("%v matched", bad)
		}
	}
}

func TestSelectorErrorsReadLikeTheHosts(t *testing.T) {
	_, err := parseSelector("a=b,")
	if want := `invalid label selector "a=b," at byte 4: expected a label key, found the end of the selector`; err == nil || err.Error() != want {
		t.Errorf("got %v", err)
	}
	for input, want := range map[string]string{
		"a in x":          "expected '(' after in/notin",
		"a in (x,y":       "unclosed value list",
		"a>1":             "operator '>' is not supported",
		"a b":             "expected an operator",
		"!a=b":            "at byte 2: expected ',' or the end",
		"a=(b)":           "expected a label value, found '('",
		"a in (x y)":      "in the value list",
		"-a=b":            `label key "-a" is invalid`,
		"Example.com/a=b": "invalid prefix",
		"example.com/=b":  "empty name",
		"a=b_":            `label value "b_" is invalid`,
	} {
		if _, err := parseSelector(input); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", input, err, want)
		}
	}
	if _, err := parseSelector("x_y.z-1=A.b_c-9,example.com/app in (a, b)"); err != nil {
		t.Errorf("valid keys and values: %v", err)
	}
}
