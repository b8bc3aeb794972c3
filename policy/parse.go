package policy

// Reading and validating a policy file. See policy.go for an overview.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/units"
)

// MaxFileSize bounds what Parse reads: a policy is a few dozen lines.
const MaxFileSize = 1 << 20

// Error is a problem in a policy file, at a line, in a field.
type Error struct {
	File  string
	Line  int    // 0 when the problem is the whole file
	Field string // e.g. "reclaim[1].min_bytes"; empty for the file itself
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		b.WriteString(":" + strconv.Itoa(e.Line))
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Errors is every problem found in one file, in file order.
type Errors []*Error

func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// ReadFile reads and parses the policy file at path.
func ReadFile(path string) (*Policy, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	return Parse(path, data)
}

// Parse parses and validates a policy file; name is what errors call it.
// The error, if any, is an Errors listing every problem found.
func Parse(name string, data []byte) (*Policy, error) {
	if len(data) > MaxFileSize {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("larger than %d bytes: not a policy file", MaxFileSize)}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, Errors{{File: name, Msg: "empty file: a policy needs at least version: 1"}}
		}
		return nil, Errors{yamlError(name, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, Errors{yamlError(name, err)}
		}
		return nil, Errors{{File: name, Line: line, Msg: "a second YAML document: a policy file holds one"}}
	}
	r := &reader{file: name}
	p := r.policy(&doc)
	if len(r.errs) > 0 {
		return nil, r.errs
	}
	return p, nil
}

// yamlError turns the YAML library's syntax error ("yaml: line 3: ...")
// into an Error with the line.
func yamlError(name string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &Error{File: name, Line: line, Msg: "not valid YAML: " + msg}
}

// reader walks the node tree, collecting errors.
type reader struct {
	file string
	errs Errors
}

func (r *reader) fail(n *yaml.Node, field, format string, a ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.errs = append(r.errs, &Error{File: r.file, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// entry is one key of a mapping with its value.
type entry struct {
	key, val *yaml.Node
}

// mapping checks that n is a mapping whose keys are all in known, without
// duplicates, and returns its entries by key. Aliases and merge keys are
// refused: a policy should read the same to a person as to vram.
func (r *reader) mapping(n *yaml.Node, field string, known ...string) map[string]entry {
	if n.Kind == yaml.AliasNode {
		r.fail(n, field, "aliases (*name) are not allowed in a policy file")
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.fail(n, field, "want a mapping (key: value lines), found %s", kindName(n))
		return nil
	}
	out := make(map[string]entry, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		name := join(field, k.Value)
		switch {
		case k.Kind != yaml.ScalarNode:
			r.fail(k, field, "a key must be a plain name")
			continue
		case k.Value == "<<":
			r.fail(k, field, "merge keys (<<) are not allowed in a policy file")
			continue
		case !slices.Contains(known, k.Value):
			r.fail(k, name, "unknown field (known here: %s)", strings.Join(known, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			r.fail(k, name, "set twice (first on line %d)", prev.key.Line)
			continue
		}
		out[k.Value] = entry{k, v}
	}
	return out
}

func join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "nothing"
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "nothing"
}

// scalar returns a scalar's text or fails.
func (r *reader) scalar(e entry, field string) (string, bool) {
	if e.val.Kind != yaml.ScalarNode || e.val.Tag == "!!null" {
		r.fail(e.val, field, "want a value, found %s", kindName(e.val))
		return "", false
	}
	return e.val.Value, true
}

func (r *reader) str(m map[string]entry, key, field string) string {
	e, ok := m[key]
	if !ok {
		return ""
	}
	s, _ := r.scalar(e, join(field, key))
	return s
}

func (r *reader) boolean(m map[string]entry, key, field string, def bool) bool {
	e, ok := m[key]
	if !ok {
		return def
	}
	s, ok := r.scalar(e, join(field, key))
	if !ok {
		return def
	}
	switch s {
	case "true":
		return true
	case "false":
		return false
	}
	r.fail(e.val, join(field, key), "want true or false, found %q", s)
	return def
}

func (r *reader) duration(m map[string]entry, key, field string, def time.Duration) time.Duration {
	e, ok := m[key]
	if !ok {
		return def
	}
	s, ok := r.scalar(e, join(field, key))
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		r.fail(e.val, join(field, key), "want a duration such as 90s, 10m or 1h30m, found %q", s)
		return def
	case d < 0:
		r.fail(e.val, join(field, key), "%s is negative", s)
		return def
	}
	return d
}

func (r *reader) bytes(m map[string]entry, key, field string) uint64 {
	e, ok := m[key]
	if !ok {
		return 0
	}
	s, ok := r.scalar(e, join(field, key))
	if !ok {
		return 0
	}
	b, err := units.ParseBytes(s)
	if err != nil {
		r.fail(e.val, join(field, key), "want a size such as 512MiB or 40GiB: %v", err)
		return 0
	}
	return b
}

func (r *reader) policy(doc *yaml.Node) *Policy {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	m := r.mapping(root, "", "version", "dry_run", "grace", "reclaim", "quotas")
	if m == nil {
		return nil
	}
	p := &Policy{File: r.file}
	if e, ok := m["version"]; !ok {
		r.fail(root, "version", "missing: the file must start with version: %d", Version)
	} else if s, ok := r.scalar(e, "version"); ok {
		if v, err := strconv.Atoi(s); err != nil || v != Version {
			r.fail(e.val, "version", "%q is not a version this vram reads (want %d)", s, Version)
		}
		p.Version = Version
	}
	p.DryRun = r.boolean(m, "dry_run", "", true)
	p.Grace = r.duration(m, "grace", "", DefaultGrace)
	if e, ok := m["reclaim"]; ok {
		for i, n := range r.list(e, "reclaim") {
			if rule, ok := r.rule(n, fmt.Sprintf("reclaim[%d]", i), p.Grace); ok {
				p.Reclaim = append(p.Reclaim, rule)
			}
		}
	}
	if e, ok := m["quotas"]; ok {
		for i, n := range r.list(e, "quotas") {
			if q, ok := r.quota(n, fmt.Sprintf("quotas[%d]", i), p.Grace); ok {
				p.Quotas = append(p.Quotas, q)
			}
		}
	}
	r.uniqueNames(p)
	return p
}

func (r *reader) list(e entry, field string) []*yaml.Node {
	if e.val.Kind == yaml.ScalarNode && e.val.Tag == "!!null" {
		return nil // "reclaim:" with nothing under it
	}
	if e.val.Kind != yaml.SequenceNode {
		r.fail(e.val, field, "want a list (lines starting with -), found %s", kindName(e.val))
		return nil
	}
	return e.val.Content
}

func (r *reader) match(m map[string]entry, field string) Match {
	e, ok := m["match"]
	if !ok {
		return Match{}
	}
	field = join(field, "match")
	mm := r.mapping(e.val, field, "user", "cgroup", "container", "command")
	var out Match
	for key, dst := range map[string]*string{"user": &out.User, "cgroup": &out.Cgroup, "container": &out.Container, "command": &out.Command} {
		if f, ok := mm[key]; ok {
			if s, ok := r.scalar(f, join(field, key)); ok {
				if s == "" {
					r.fail(f.val, join(field, key), "empty pattern (leave the field out to match everything)")
				}
				*dst = s
			}
		}
	}
	return out
}

func (r *reader) name(m map[string]entry, n *yaml.Node, field string) string {
	name := r.str(m, "name", field)
	if _, ok := m["name"]; !ok {
		r.fail(n, join(field, "name"), "missing: every rule needs a name (it appears in reports)")
	} else if name == "" || strings.ContainsAny(name, "\n\r\t") {
		r.fail(m["name"].val, join(field, "name"), "want a one-line name")
	}
	return name
}

func (r *reader) action(m map[string]entry, field string, def Do, allowed ...Do) Do {
	e, ok := m["action"]
	if !ok {
		return def
	}
	s, ok := r.scalar(e, join(field, "action"))
	if !ok {
		return def
	}
	if !slices.Contains(allowed, Do(s)) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		r.fail(e.val, join(field, "action"), "%q is not an action here (want one of %s)", s, strings.Join(names, ", "))
		return def
	}
	return Do(s)
}

func (r *reader) rule(n *yaml.Node, field string, grace time.Duration) (Rule, bool) {
	before := len(r.errs)
	m := r.mapping(n, field, "name", "when", "older_than", "idle_for", "min_bytes", "match", "action", "grace")
	if m == nil {
		return Rule{}, false
	}
	rule := Rule{
		Line:      n.Line,
		Name:      r.name(m, n, field),
		OlderThan: r.duration(m, "older_than", field, 0),
		IdleFor:   r.duration(m, "idle_for", field, 0),
		MinBytes:  r.bytes(m, "min_bytes", field),
		Match:     r.match(m, field),
		Action:    r.action(m, field, DoTerm, DoReport, DoTerm, DoKill),
		Grace:     r.duration(m, "grace", field, grace),
	}
	e, ok := m["when"]
	if !ok {
		r.fail(n, join(field, "when"), "missing: list the conditions (%s)", joinConds(conditions))
	} else {
		items := r.list(e, join(field, "when"))
		isNull := e.val.Kind == yaml.ScalarNode && e.val.Tag == "!!null"
		if len(items) == 0 && (isNull || e.val.Kind == yaml.SequenceNode) {
			r.fail(e.val, join(field, "when"), "empty: list the conditions (%s)", joinConds(conditions))
		}
		for i, it := range items {
			f := fmt.Sprintf("%s.when[%d]", field, i)
			s, ok := r.scalar(entry{val: it}, f)
			if !ok {
				continue
			}
			c := Condition(s)
			switch {
			case !slices.Contains(conditions, c):
				r.fail(it, f, "unknown condition %q (want one of %s)", s, joinConds(conditions))
			case slices.Contains(rule.When, c):
				r.fail(it, f, "%q listed twice", s)
			default:
				rule.When = append(rule.When, c)
			}
		}
	}
	idle := slices.Contains(rule.When, CondIdle) || slices.Contains(rule.When, CondIdleJupyter)
	if e, ok := m["idle_for"]; ok && !idle {
		r.fail(e.key, join(field, "idle_for"), "set, but when lists neither idle nor idle_jupyter")
	}
	if idle && rule.IdleFor == 0 {
		if _, ok := m["idle_for"]; !ok {
			r.fail(n, join(field, "idle_for"), "missing: idle and idle_jupyter need how long the process must have been idle (e.g. 30m)")
		}
	}
	return rule, len(r.errs) == before
}

func (r *reader) quota(n *yaml.Node, field string, grace time.Duration) (Quota, bool) {
	before := len(r.errs)
	m := r.mapping(n, field, "name", "per", "match", "max_bytes", "action", "after", "grace")
	if m == nil {
		return Quota{}, false
	}
	q := Quota{
		Line:     n.Line,
		Name:     r.name(m, n, field),
		Per:      "process",
		Match:    r.match(m, field),
		MaxBytes: r.bytes(m, "max_bytes", field),
		Action:   r.action(m, field, DoWarn, DoWarn, DoTerm, DoKill),
		After:    r.duration(m, "after", field, 0),
		Grace:    r.duration(m, "grace", field, grace),
	}
	if e, ok := m["per"]; ok {
		if s, ok := r.scalar(e, join(field, "per")); ok {
			if !slices.Contains(perKeys, s) {
				r.fail(e.val, join(field, "per"), "%q: want one of %s", s, strings.Join(perKeys, ", "))
			}
			q.Per = s
		}
	}
	if e, ok := m["max_bytes"]; !ok {
		r.fail(n, join(field, "max_bytes"), "missing: how much memory the group may hold (e.g. 40GiB)")
	} else if q.MaxBytes == 0 && len(r.errs) == before {
		r.fail(e.val, join(field, "max_bytes"), "0 bytes would flag every process holding memory")
	}
	return q, len(r.errs) == before
}

// uniqueNames fails on two rules, or two quotas, of the same name: reports
// and the daemon's state refer to them by name.
func (r *reader) uniqueNames(p *Policy) {
	seen := map[string]int{}
	for i, rule := range p.Reclaim {
		if line, dup := seen[rule.Name]; dup {
			r.fail(&yaml.Node{Line: rule.Line}, fmt.Sprintf("reclaim[%d].name", i), "%q already names the rule on line %d", rule.Name, line)
		}
		seen[rule.Name] = rule.Line
	}
	seen = map[string]int{}
	for i, q := range p.Quotas {
		if line, dup := seen[q.Name]; dup {
			r.fail(&yaml.Node{Line: q.Line}, fmt.Sprintf("quotas[%d].name", i), "%q already names the quota on line %d", q.Name, line)
		}
		seen[q.Name] = q.Line
	}
}
