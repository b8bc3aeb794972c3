package jsondoc_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/vramhq/vram/internal/jsondoc"
)

const doc = "# JSON\n\n" +
	"Some prose | with a bar that is not a table.\n\n" +
	"## vram thing --json (`vram.thing/v1`)\n\n" +
	"| key | type | meaning |\n|---|---|---|\n" +
	"| `schema` | string | |\n" +
	"| `devices` | array | |\n" +
	"| `devices[]` | device | |\n" +
	"| `size_bytes` | int | |\n" +
	"| `ratio` | number | |\n" +
	"| `note` | string, optional | |\n" +
	"| `peak` | object or null | |\n" +
	"| `peak.t_s` | number | |\n" +
	"| `flags` | array or null | |\n" +
	"| `flags[]` | string | |\n\n" +
	"### object: device\n\n" +
	"| key | type | meaning |\n|---|---|---|\n" +
	"| `gpu_index` | int | |\n" +
	"| `gpu_uuid` | string | |\n" +
	"| `error` | string, optional | |\n"

func TestCheck(t *testing.T) {
	d, err := jsondoc.Parse(strings.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	const good = `{"schema":"vram.thing/v1","devices":[{"gpu_index":0,"gpu_uuid":"GPU-0"}],"size_bytes":18446744073709551615,` +
		`"ratio":1,"peak":{"t_s":1.5},"flags":["a"]}`
	tests := []struct {
		name, json string
		want       []string // substrings of the errors, in order; none: it passes
	}{
		{"good", good, nil},
		{"optional keys there", strings.Replace(good, `"ratio":1`, `"ratio":0.5,"note":"n"`, 1), nil},
		{"null where allowed", strings.Replace(strings.Replace(good, `{"t_s":1.5}`, "null", 1), `["a"]`, "null", 1), nil},
		{"renamed key", strings.Replace(good, `"gpu_index"`, `"index"`, 1), []string{`no key "gpu_index"`, `key "index" is not in docs/json.md (section "device")`}},
		{"added key", strings.Replace(good, `"ratio":1`, `"ratio":1,"extra":2`, 1), []string{`key "extra" is not in docs/json.md`}},
		{"missing key", strings.Replace(good, `"ratio":1,`, ``, 1), []string{`no key "ratio"`}},
		{"missing nested key", strings.Replace(good, `{"t_s":1.5}`, `{}`, 1), []string{`.peak: no key "t_s"`}},
		{"wrong type", strings.Replace(good, `"size_bytes":18446744073709551615`, `"size_bytes":"1"`, 1), []string{"size_bytes: a string, the doc (line 12) says int"}},
		{"float for int", strings.Replace(good, `"size_bytes":18446744073709551615`, `"size_bytes":1.5`, 1), []string{"a number, the doc (line 12) says int"}},
		{"array element type", strings.Replace(good, `["a"]`, `[1]`, 1), []string{"flags[0]: a int"}},
		{"object element", strings.Replace(good, `"GPU-0"`, `7`, 1), []string{"devices[0].gpu_uuid: a int"}},
		{"schema", strings.Replace(good, `v1`, `v2`, 1), []string{"schema vram.thing/v2, the doc says vram.thing/v1"}},
		{"not an object", `[]`, []string{"not an object"}},
		{"not JSON", `{`, []string{"not JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			errs := d.Check("vram thing --json", []byte(tt.json))
			if len(errs) != len(tt.want) {
				t.Fatalf("errors %v, want %d like %q", errs, len(tt.want), tt.want)
			}
			for i, err := range errs {
				if !strings.Contains(err.Error(), tt.want[i]) {
					t.Errorf("error %d: %v, want %q in it", i, err, tt.want[i])
				}
			}
		})
	}
	if errs := d.Check("vram other", []byte(good)); len(errs) != 1 || !strings.Contains(errs[0].Error(), "no section") {
		t.Errorf("unknown section: %v", errs)
	}
	lines := good + "\n" + strings.Replace(good, `"ratio":1,`, ``, 1) + "\n"
	if errs := d.CheckLines("vram thing --json", []byte(lines)); len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), "line 2: ") {
		t.Errorf("JSON lines: %v", errs)
	}
}

func TestParseErrors(t *testing.T) {
	head := "## doc (`vram.x/v1`)\n| key | type | meaning |\n|---|---|---|\n"
	tests := []struct{ name, doc, want string }{
		{"key without backticks", head + "| schema | string | |\n", "is not a `path`"},
		{"bad path", head + "| `a..b` | string | |\n", "is not a `path`"},
		{"unknown type", head + "| `a` | strnig | |\n", `type "strnig" is neither basic`},
		{"dangling or", head + "| `a` | string or  | |\n", "is not TYPE or TYPE"},
		{"two types", head + "| `a` | string int | |\n", "is not TYPE or TYPE"},
		{"twice", head + "| `a` | int | |\n| `a` | int | |\n", "listed twice"},
		{"no keys", "## doc (`vram.x/v1`)\n\nprose\n", "lists no keys"},
		{"object twice", head + "| `a` | int | |\n### object: o\n| `a` | int | |\n### object: o\n| `b` | int | |\n", `object "o" defined twice`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := jsondoc.Parse(strings.NewReader(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err %v, want %q", err, tt.want)
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add(doc)
	f.Add("## a (`vram.a/v1`)\n| `x[][]` | array | |\n| `x[][]` | int |\n")
	f.Fuzz(func(t *testing.T, s string) {
		d, err := jsondoc.Parse(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, sec := range d.Sections {
			if sec.Schema != "" {
				d.Check(sec.Title, []byte(`{"schema":"`+sec.Schema+`","a":[1,{"b":null}]}`))
			}
		}
	})
}

func ExampleDoc_Check() {
	d, err := jsondoc.Parse(strings.NewReader("## vram x --json (`vram.x/v1`)\n\n| key | type | meaning |\n|---|---|---|\n" +
		"| `schema` | string | |\n| `gpu_index` | int | NVML index |\n"))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, err := range d.Check("vram x --json", []byte(`{"schema":"vram.x/v1","gpu":0}`)) {
		fmt.Println(err)
	}
	// Output:
	// vram x --json: no key "gpu_index", which the doc (line 6) lists as always present
	// vram x --json.gpu: key "gpu" is not in docs/json.md (section "vram x --json")
}

// TestRepoDoc parses docs/json.md: every section lists keys with known
// types, and every document section names its own schema key.
func TestRepoDoc(t *testing.T) {
	d, err := jsondoc.RepoDoc()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range d.Sections {
		if s.Schema == "" {
			continue
		}
		n++
		if k, ok := s.Keys["schema"]; !ok || len(k.Types) != 1 || k.Types[0] != "string" || k.Optional {
			t.Errorf("%q: schema is not a required string key", s.Title)
		}
	}
	if n < 10 {
		t.Errorf("docs/json.md has %d document sections", n)
	}
}
