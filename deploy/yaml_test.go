package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// obj is one decoded YAML or JSON document.
type obj = map[string]any

// decodeAll decodes every document of a YAML stream into generic maps,
// skipping empty documents (a lone "---" or a template that rendered to
// nothing), as kubectl does.
func decodeAll(data []byte) ([]obj, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []obj
	for i := 0; ; i++ {
		var doc obj
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if doc == nil {
			continue
		}
		docs = append(docs, doc)
	}
}

func readYAMLFile(t *testing.T, path string) []obj {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := decodeAll(data)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return docs
}

// lookup walks keys through nested maps; list elements are addressed by
// their decimal index.
func lookup(v any, keys ...string) (any, bool) {
	for _, k := range keys {
		switch c := v.(type) {
		case obj:
			var ok bool
			if v, ok = c[k]; !ok {
				return nil, false
			}
		case []any:
			i, err := strconv.Atoi(k)
			if err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			v = c[i]
		default:
			return nil, false
		}
	}
	return v, true
}

func mapAt(v any, keys ...string) obj {
	m, _ := lookupT[obj](v, keys...)
	return m
}

func listAt(v any, keys ...string) []any {
	l, _ := lookupT[[]any](v, keys...)
	return l
}

func strAt(v any, keys ...string) string {
	s, _ := lookupT[string](v, keys...)
	return s
}

func lookupT[T any](v any, keys ...string) (T, bool) {
	var zero T
	x, ok := lookup(v, keys...)
	if !ok {
		return zero, false
	}
	t, ok := x.(T)
	return t, ok
}

// kindName names an object for messages: "DaemonSet/vram".
func kindName(o obj) string {
	return strAt(o, "kind") + "/" + strAt(o, "metadata", "name")
}

// byKind indexes objects by kind; a kind that appears twice keeps both.
func byKind(docs []obj) map[string][]obj {
	m := map[string][]obj{}
	for _, d := range docs {
		m[strAt(d, "kind")] = append(m[strAt(d, "kind")], d)
	}
	return m
}

// deepCopy copies a decoded document so that a test can damage it.
func deepCopy(v any) any {
	switch c := v.(type) {
	case obj:
		m := make(obj, len(c))
		for k, x := range c {
			m[k] = deepCopy(x)
		}
		return m
	case []any:
		l := make([]any, len(c))
		for i, x := range c {
			l[i] = deepCopy(x)
		}
		return l
	default:
		return v
	}
}

// quantity parses the Kubernetes quantities the manifests use (plain
// numbers, milli "m", binary Ki/Mi/Gi/Ti, decimal k/M/G/T) into a float.
func quantity(v any) (float64, error) {
	switch n := v.(type) {
	case int:
		return float64(n), nil
	case float64:
		return n, nil
	case string:
		suffixes := []struct {
			s string
			f float64
		}{
			{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40},
			{"m", 1e-3}, {"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
		}
		num, mult := n, 1.0
		for _, sf := range suffixes {
			if strings.HasSuffix(n, sf.s) {
				num, mult = strings.TrimSuffix(n, sf.s), sf.f
				break
			}
		}
		f, err := strconv.ParseFloat(num, 64)
		if err != nil || f < 0 {
			return 0, fmt.Errorf("quantity %q: not a non-negative number with a known suffix", n)
		}
		return f * mult, nil
	}
	return 0, fmt.Errorf("quantity %v: type %T", v, v)
}

func TestQuantity(t *testing.T) {
	for _, tc := range []struct {
		in   any
		want float64
		err  bool
	}{
		{"50m", 0.05, false},
		{"2", 2, false},
		{1, 1, false},
		{"64Mi", 64 << 20, false},
		{"1Gi", 1 << 30, false},
		{"1G", 1e9, false},
		{"lots", 0, true},
		{"-1Mi", 0, true},
		{true, 0, true},
	} {
		got, err := quantity(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("quantity(%v) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestDecodeAllSkipsEmptyDocumentsAndReportsErrors(t *testing.T) {
	docs, err := decodeAll([]byte("---\na: 1\n---\n---\nb: 2\n"))
	if err != nil || len(docs) != 2 {
		t.Fatalf("got %d docs, %v; want 2, nil", len(docs), err)
	}
	if _, err := decodeAll([]byte("a: 1\n---\nb: [\n")); err == nil || !strings.Contains(err.Error(), "document 1") {
		t.Fatalf("broken second document: error %v, want one naming document 1", err)
	}
}
