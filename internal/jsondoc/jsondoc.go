// Package jsondoc reads the JSON schemas written in docs/json.md and checks
// documents against them, so that a key renamed, added or retyped in code
// without the same change in the doc fails a test.
//
// The doc is Markdown. A document's section is a heading that ends in its
// schema id in backticks, `## vram status --json (`vram.status/v2`)`; an
// object used by several documents has a heading `### object: NAME`. Under
// either, a table lists the keys:
//
//	| key | type | meaning |
//	|---|---|---|
//	| `schema` | string | `vram.status/v2` |
//	| `devices` | array | |
//	| `devices[].gpu_index` | int | NVML index |
//	| `processes[]` | process | an object of section "object: process" |
//	| `warnings[]` | string | |
//	| `allocator` | object or null, optional | |
//
// A key is a path from the section's root: `a.b` is key b of object a,
// `a[]` an element of array a. The type is one or more of string, int,
// number (int included), bool, object, array and null, or an object
// section's name, joined by " or "; ", optional" says the key may be
// absent (it is required otherwise, wherever its parent object is).
//
// Check walks a document: every key it holds must be listed, with a value
// of a listed type, and every required key of each object it holds must be
// there. A document section's root must hold "schema" equal to its id.
package jsondoc

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Key is one documented key.
type Key struct {
	Types    []string // string, int, number, bool, object, array, null, or an object section's name
	Optional bool
	Line     int // in the doc, for messages
}

// Section is one document or shared object of the doc.
type Section struct {
	Title  string // the heading without the schema id; for objects, the name
	Schema string // the schema id; "" for an object section
	Keys   map[string]Key
	Order  []string // the keys as listed
}

// Doc is a parsed docs/json.md.
type Doc struct {
	Sections []*Section
	objects  map[string]*Section
}

var (
	schemaHeading = regexp.MustCompile("^#{2,4} (.*?)\\s*\\(`(vram\\.[a-z.]+/v[0-9]+)`\\)\\s*$")
	objectHeading = regexp.MustCompile(`^#{2,4} object: ([a-z][a-z0-9_-]*)\s*$`)
	keyPath       = regexp.MustCompile(`^[a-z0-9_]+(\[\])*(\.[a-z0-9_]+(\[\])*)*$`)
)

var scalarTypes = []string{"string", "int", "number", "bool", "object", "array", "null"}

// Load reads and parses the doc at path.
func Load(path string) (*Doc, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	d, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return d, nil
}

// Parse reads a doc. It fails on a malformed key row, a key listed twice in
// a section, a type that is neither basic nor an object section, and a
// section without keys.
func Parse(r io.Reader) (*Doc, error) {
	d := &Doc{objects: map[string]*Section{}}
	var cur *Section
	sc := bufio.NewScanner(r)
	sc.Buffer(nil, 1<<20)
	line := 0
	var errs []error
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(text, "#") {
			cur = nil
			if m := schemaHeading.FindStringSubmatch(text); m != nil {
				cur = &Section{Title: m[1], Schema: m[2], Keys: map[string]Key{}}
			} else if m := objectHeading.FindStringSubmatch(text); m != nil {
				cur = &Section{Title: m[1], Keys: map[string]Key{}}
				if d.objects[m[1]] != nil {
					errs = append(errs, fmt.Errorf("line %d: object %q defined twice", line, m[1]))
				}
				d.objects[m[1]] = cur
			}
			if cur != nil {
				d.Sections = append(d.Sections, cur)
			}
			continue
		}
		if cur == nil || !strings.HasPrefix(text, "|") {
			continue
		}
		cells := strings.Split(strings.Trim(text, "|"), "|")
		if len(cells) < 2 {
			continue
		}
		name := strings.TrimSpace(cells[0])
		if name == "key" || strings.Trim(name, "-: ") == "" {
			continue // the header and the separator
		}
		if len(name) < 3 || name[0] != '`' || name[len(name)-1] != '`' || !keyPath.MatchString(name[1:len(name)-1]) {
			errs = append(errs, fmt.Errorf("line %d: key %s is not a `path` (a.b, a[].b)", line, name))
			continue
		}
		name = name[1 : len(name)-1]
		k, err := parseType(strings.TrimSpace(cells[1]))
		if err != nil {
			errs = append(errs, fmt.Errorf("line %d: %s: %w", line, name, err))
			continue
		}
		k.Line = line
		if _, dup := cur.Keys[name]; dup {
			errs = append(errs, fmt.Errorf("line %d: %s listed twice in %q", line, name, cur.Title))
			continue
		}
		cur.Keys[name] = k
		cur.Order = append(cur.Order, name)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	for _, s := range d.Sections {
		if len(s.Keys) == 0 {
			errs = append(errs, fmt.Errorf("section %q lists no keys", s.Title))
		}
		for _, name := range s.Order {
			for _, t := range s.Keys[name].Types {
				if !slices.Contains(scalarTypes, t) && d.objects[t] == nil {
					errs = append(errs, fmt.Errorf("line %d: %s: type %q is neither basic (%s) nor an object section",
						s.Keys[name].Line, name, t, strings.Join(scalarTypes, ", ")))
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return d, nil
}

func parseType(cell string) (Key, error) {
	var k Key
	cell = strings.Trim(cell, "` ")
	if rest, ok := strings.CutSuffix(cell, ", optional"); ok {
		k.Optional, cell = true, rest
	}
	words := strings.Fields(cell)
	for i, w := range words {
		if (i%2 == 1) != (w == "or") {
			return k, fmt.Errorf("type %q is not TYPE or TYPE ...", cell)
		}
		if i%2 == 0 {
			k.Types = append(k.Types, w)
		}
	}
	if len(words)%2 == 0 {
		return k, fmt.Errorf("type %q is not TYPE or TYPE ...", cell)
	}
	return k, nil
}

// Section returns the document section with the given title, or nil.
func (d *Doc) Section(title string) *Section {
	for _, s := range d.Sections {
		if s.Schema != "" && s.Title == title {
			return s
		}
	}
	return nil
}

// Check checks one JSON document against the section titled title and
// returns every difference it finds (nil when none).
func (d *Doc) Check(title string, data []byte) []error {
	s := d.Section(title)
	if s == nil {
		return []error{fmt.Errorf("docs/json.md has no section %q", title)}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return []error{fmt.Errorf("%s: not JSON: %w", title, err)}
	}
	root, ok := v.(map[string]any)
	if !ok {
		return []error{fmt.Errorf("%s: the document is not an object", title)}
	}
	c := &checker{doc: d}
	if root["schema"] != s.Schema {
		c.errf("%s: schema %v, the doc says %s", title, root["schema"], s.Schema)
	}
	c.object(s, "", root, title)
	return c.errs
}

// CheckLines checks JSON lines (one document a line) as Check does.
func (d *Doc) CheckLines(title string, data []byte) []error {
	var errs []error
	for i, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		for _, err := range d.Check(title, l) {
			errs = append(errs, fmt.Errorf("line %d: %w", i+1, err))
		}
	}
	return errs
}

type checker struct {
	doc  *Doc
	errs []error
}

func (c *checker) errf(format string, a ...any) { c.errs = append(c.errs, fmt.Errorf(format, a...)) }

// object checks obj, which sits at path prefix of section s (where is the
// place for messages).
func (c *checker) object(s *Section, prefix string, obj map[string]any, where string) {
	for _, name := range s.Order {
		if parent(name) == prefix && !s.Keys[name].Optional && !strings.HasSuffix(name, "[]") {
			if _, ok := obj[last(name)]; !ok {
				c.errf("%s: no key %q, which the doc (line %d) lists as always present", where, last(name), s.Keys[name].Line)
			}
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		path := k
		if prefix != "" {
			path = prefix + "." + k
		}
		c.value(s, path, obj[k], where+"."+k)
	}
}

func (c *checker) value(s *Section, path string, v any, where string) {
	k, ok := s.Keys[path]
	if !ok {
		c.errf("%s: key %q is not in docs/json.md (section %q)", where, path, s.Title)
		return
	}
	got := typeOf(v)
	for _, t := range k.Types {
		switch {
		case t == got, t == "number" && got == "int":
			if obj, ok := v.(map[string]any); ok {
				c.object(s, path, obj, where)
			}
			if arr, ok := v.([]any); ok {
				for i, e := range arr {
					c.value(s, path+"[]", e, fmt.Sprintf("%s[%d]", where, i))
				}
			}
			return
		case got == "object" && c.doc.objects[t] != nil:
			c.object(c.doc.objects[t], "", v.(map[string]any), where)
			return
		}
	}
	c.errf("%s: a %s, the doc (line %d) says %s", where, got, k.Line, strings.Join(k.Types, " or "))
}

func typeOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case bool:
		return "bool"
	case json.Number:
		if _, err := v.Int64(); err == nil {
			return "int"
		}
		if s := v.String(); !strings.ContainsAny(s, ".eE") {
			return "int" // beyond int64 (a uint64 size)
		}
		return "number"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	}
	return fmt.Sprintf("%T", v)
}

func parent(path string) string {
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		return path[:i]
	}
	return ""
}

func last(path string) string { return path[strings.LastIndexByte(path, '.')+1:] }
