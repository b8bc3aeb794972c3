package yamlcheck

import (
	"errors"
	"fmt"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestErrorFormat(t *testing.T) {
	for _, tc := range []struct {
		e    Error
		want string
	}{
		{Error{File: "f.yaml", Line: 3, Field: "a.b", Msg: "bad"}, "f.yaml:3: a.b: bad"},
		{Error{File: "f.yaml", Field: "a.b", Msg: "bad"}, "f.yaml: a.b: bad"},
		{Error{File: "f.yaml", Line: 7, Msg: "bad"}, "f.yaml:7: bad"},
		{Error{File: "f.yaml", Msg: "empty file"}, "f.yaml: empty file"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%+v: got %q, want %q", tc.e, got, tc.want)
		}
	}
	es := Errors{{File: "f", Line: 1, Msg: "x"}, {File: "f", Line: 2, Field: "y", Msg: "z"}}
	if got, want := es.Error(), "f:1: x\nf:2: y: z"; got != want {
		t.Errorf("Errors: got %q, want %q", got, want)
	}
	var e *Error
	if !errors.As(fmt.Errorf("wrapped: %w", es[1]), &e) || e.Field != "y" {
		t.Errorf("errors.As did not find the *Error")
	}
}

func TestSyntaxError(t *testing.T) {
	var n yaml.Node
	err := yaml.Unmarshal([]byte("a: 1\nb: [\n"), &n)
	if err == nil {
		t.Fatal("want a syntax error")
	}
	e := SyntaxError("f.yaml", err)
	if e.Line == 0 || e.File != "f.yaml" || e.Field != "" {
		t.Errorf("got %+v, want a line and no field", e)
	}
	if e := SyntaxError("f.yaml", errors.New("yaml: something")); e.Error() != "f.yaml: not valid YAML: something" {
		t.Errorf("without a line: got %q", e.Error())
	}
}

// root parses src and returns its top node.
func root(t *testing.T, src string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return doc.Content[0]
}

func TestMapping(t *testing.T) {
	for _, tc := range []struct {
		name, src, where string
		known            []string
		keys             []string // the keys returned
		errs             string   // Errors.Error(), "" for none
	}{
		{name: "ok", src: "a: 1\nb: 2\n", known: []string{"a", "b"}, keys: []string{"a", "b"}},
		{name: "unknown", src: "a: 1\nc: 2\n", known: []string{"a", "b"}, keys: []string{"a"},
			errs: "f.yaml:2: top.c: unknown field (known here: a, b)"},
		{name: "twice", src: "a: 1\na: 2\n", known: []string{"a"}, keys: []string{"a"},
			errs: "f.yaml:2: top.a: set twice (first on line 1)"},
		{name: "any key", src: "X-One: 1\nX-Two: 2\n", keys: []string{"X-One", "X-Two"}},
		{name: "list", src: "- a\n", known: []string{"a"},
			errs: "f.yaml:1: top: want a mapping (key: value lines), found a list"},
		{name: "scalar", src: "hello\n", known: []string{"a"},
			errs: `f.yaml:1: top: want a mapping (key: value lines), found "hello"`},
		{name: "merge", src: "base: &b {a: 1}\n<<: *b\n", where: "in a policy file", known: []string{"base"}, keys: []string{"base"},
			errs: "f.yaml:2: top: merge keys (<<) are not allowed in a policy file"},
		{name: "merge default where", src: "base: &b {a: 1}\n<<: *b\n", known: []string{"base"}, keys: []string{"base"},
			errs: "f.yaml:2: top: merge keys (<<) are not allowed here"},
		{name: "complex key", src: "? [a]\n: 1\n", known: []string{"a"}, keys: []string{},
			errs: "f.yaml:1: top: a key must be a plain name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Reader{File: "f.yaml", Where: tc.where}
			m := r.Mapping(root(t, tc.src), "top", tc.known...)
			if got := errString(r.Errs); got != tc.errs {
				t.Errorf("errors:\n got %q\nwant %q", got, tc.errs)
			}
			if tc.keys == nil {
				if m != nil {
					t.Errorf("got %v, want nil", m)
				}
				return
			}
			if len(m) != len(tc.keys) {
				t.Errorf("got %d keys, want %v", len(m), tc.keys)
			}
			for _, k := range tc.keys {
				if e, ok := m[k]; !ok || e.Key.Value != k {
					t.Errorf("key %q missing", k)
				}
			}
		})
	}
}

func TestMappingAlias(t *testing.T) {
	n := root(t, "a: &x {b: 1}\nc: *x\n")
	r := &Reader{File: "f.yaml", Where: "in a configuration"}
	if m := r.Mapping(n.Content[3], "c"); m != nil {
		t.Errorf("got %v for an alias", m)
	}
	if got, want := errString(r.Errs), "f.yaml:2: c: aliases (*name) are not allowed in a configuration"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestValues(t *testing.T) {
	n := root(t, "s: text\nt: true\nf: false\nb: yes\nnull:\nm: {a: 1}\nl: [1, 2]\nq: \"\"\n")
	r := &Reader{File: "f.yaml"}
	m := r.Mapping(n, "")
	scalar := func(n *yaml.Node, f string) string {
		s, ok := r.Scalar(n, f)
		return fmt.Sprintf("%q %v", s, ok)
	}
	boolean := func(n *yaml.Node, f string) string {
		v, ok := r.Bool(n, f)
		return fmt.Sprintf("%v %v", v, ok)
	}
	list := func(n *yaml.Node, f string) string { return fmt.Sprint(len(r.List(n, f))) }
	for _, tc := range []struct {
		key  string
		call func(*yaml.Node, string) string
		want string // the result, then the error if any
	}{
		{"s", scalar, `"text" true`},
		{"q", scalar, `"" true`},
		{"null", scalar, `"" false f.yaml:5: null: want a value, found nothing`},
		{"m", scalar, `"" false f.yaml:6: m: want a value, found a mapping`},
		{"l", scalar, `"" false f.yaml:7: l: want a value, found a list`},
		{"t", boolean, "true true"},
		{"f", boolean, "false true"},
		{"b", boolean, `false false f.yaml:4: b: want true or false, found "yes"`},
		{"l", list, "2"},
		{"null", list, "0"},
		{"s", list, `0 f.yaml:1: s: want a list (lines starting with -), found "text"`},
	} {
		r.Errs = nil
		got := tc.call(m[tc.key].Val, tc.key)
		if len(r.Errs) > 0 {
			got += " " + r.Errs.Error()
		}
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.key, got, tc.want)
		}
	}
}

func TestJoinAndKindName(t *testing.T) {
	if got := Join("", "a"); got != "a" {
		t.Errorf("Join(\"\", a) = %q", got)
	}
	if got := Join("rules[0]", "for"); got != "rules[0].for" {
		t.Errorf("Join(rules[0], for) = %q", got)
	}
	for _, tc := range []struct{ src, want string }{
		{"{a: 1}", "a mapping"},
		{"[1]", "a list"},
		{"~", "nothing"},
		{"'tab\there'", `"tab\there"`},
		{"12", `"12"`},
	} {
		if got := KindName(root(t, tc.src)); got != tc.want {
			t.Errorf("KindName(%s) = %q, want %q", tc.src, got, tc.want)
		}
	}
	if got := KindName(&yaml.Node{Kind: yaml.AliasNode}); got != "an alias" {
		t.Errorf("KindName(alias) = %q", got)
	}
	if got := KindName(&yaml.Node{}); got != "nothing" {
		t.Errorf("KindName(zero node) = %q", got)
	}
}

func errString(es Errors) string {
	if len(es) == 0 {
		return ""
	}
	return es.Error()
}

func TestSortByLine(t *testing.T) {
	es := Errors{
		{File: "f", Line: 5, Msg: "a"}, {File: "f", Line: 2, Msg: "b"}, {File: "f", Msg: "whole file"},
		{File: "f", Line: 5, Msg: "c"}, {File: "f", Line: 3, Msg: "d"},
	}
	es.SortByLine()
	if got, want := es.Error(), "f: whole file\nf:2: b\nf:3: d\nf:5: a\nf:5: c"; got != want {
		t.Errorf("sorted:\n%s\nwant:\n%s", got, want)
	}
}
