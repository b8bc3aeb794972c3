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

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/internal/yamlcheck"
)

// MaxFileSize bounds what Parse reads: a policy is a few dozen lines.
const MaxFileSize = 1 << 20

// Error is a problem in a policy file, at a line, in a field (e.g.
// "reclaim[1].min_bytes"); Line is 0 and Field empty for the whole file.
type Error = yamlcheck.Error

// Errors is every problem found in one file, in file order.
type Errors = yamlcheck.Errors

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
		return nil, Errors{yamlcheck.SyntaxError(name, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		line := extra.Line
		if err != nil {
			return nil, Errors{yamlcheck.SyntaxError(name, err)}
		}
		return nil, Errors{{File: name, Line: line, Msg: "a second YAML document: a policy file holds one"}}
	}
	r := &reader{Reader: yamlcheck.Reader{File: name, Where: "in a policy file"}}
	p := r.policy(&doc)
	if len(r.Errs) > 0 {
		r.Errs.SortByLine()
		return nil, r.Errs
	}
	return p, nil
}

// reader walks the node tree, collecting errors.
type reader struct {
	yamlcheck.Reader
	// rules and quotas map each name seen so far to the line of the rule
	// or quota it names, valid or not.
	rules, quotas map[string]int
}

func (r *reader) boolean(m map[string]yamlcheck.Entry, key, field string, def bool) bool {
	e, ok := m[key]
	if !ok {
		return def
	}
	if v, ok := r.Bool(e.Val, yamlcheck.Join(field, key)); ok {
		return v
	}
	return def
}

func (r *reader) duration(m map[string]yamlcheck.Entry, key, field string, def time.Duration) time.Duration {
	e, ok := m[key]
	if !ok {
		return def
	}
	s, ok := r.Scalar(e.Val, yamlcheck.Join(field, key))
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		r.Fail(e.Val, yamlcheck.Join(field, key), "want a duration such as 90s, 10m or 1h30m, found %q", s)
		return def
	case d < 0:
		r.Fail(e.Val, yamlcheck.Join(field, key), "%s is negative", s)
		return def
	}
	return d
}

func (r *reader) bytes(m map[string]yamlcheck.Entry, key, field string) uint64 {
	e, ok := m[key]
	if !ok {
		return 0
	}
	s, ok := r.Scalar(e.Val, yamlcheck.Join(field, key))
	if !ok {
		return 0
	}
	b, err := units.ParseBytes(s)
	if err != nil {
		r.Fail(e.Val, yamlcheck.Join(field, key), "want a size such as 512MiB or 40GiB: %v", err)
		return 0
	}
	return b
}

func (r *reader) policy(doc *yaml.Node) *Policy {
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	m := r.Mapping(root, "", "version", "dry_run", "grace", "reclaim", "quotas")
	if m == nil {
		return nil
	}
	p := &Policy{File: r.File}
	if e, ok := m["version"]; !ok {
		r.Fail(root, "version", "missing: the file must start with version: %d", Version)
	} else if s, ok := r.Scalar(e.Val, "version"); ok {
		if v, err := strconv.Atoi(s); err != nil || v != Version {
			r.Fail(e.Val, "version", "%q is not a version this vram reads (want %d)", s, Version)
		}
		p.Version = Version
	}
	p.DryRun = r.boolean(m, "dry_run", "", true)
	p.Grace = r.duration(m, "grace", "", DefaultGrace)
	if e, ok := m["reclaim"]; ok {
		for i, n := range r.List(e.Val, "reclaim") {
			if rule, ok := r.rule(n, fmt.Sprintf("reclaim[%d]", i), p.Grace); ok {
				p.Reclaim = append(p.Reclaim, rule)
			}
		}
	}
	if e, ok := m["quotas"]; ok {
		for i, n := range r.List(e.Val, "quotas") {
			if q, ok := r.quota(n, fmt.Sprintf("quotas[%d]", i), p.Grace); ok {
				p.Quotas = append(p.Quotas, q)
			}
		}
	}
	return p
}

func (r *reader) match(m map[string]yamlcheck.Entry, field string) Match {
	e, ok := m["match"]
	if !ok {
		return Match{}
	}
	field = yamlcheck.Join(field, "match")
	mm := r.Mapping(e.Val, field, "user", "cgroup", "container", "command")
	var out Match
	for key, dst := range map[string]*string{"user": &out.User, "cgroup": &out.Cgroup, "container": &out.Container, "command": &out.Command} {
		if f, ok := mm[key]; ok {
			if s, ok := r.Scalar(f.Val, yamlcheck.Join(field, key)); ok {
				if s == "" {
					r.Fail(f.Val, yamlcheck.Join(field, key), "empty pattern (leave the field out to match everything)")
				}
				*dst = s
			}
		}
	}
	return out
}

// name reads the name of the rule or quota n (what says which) and fails
// on one already used by another of the same kind: reports and the
// daemon's state refer to them by name. seen is that kind's names so far.
func (r *reader) name(m map[string]yamlcheck.Entry, n *yaml.Node, field, what string, seen *map[string]int) string {
	field = yamlcheck.Join(field, "name")
	e, ok := m["name"]
	if !ok {
		r.Fail(n, field, "missing: every %s needs a name (it appears in reports)", what)
		return ""
	}
	name, ok := r.Scalar(e.Val, field)
	switch {
	case !ok:
		return ""
	case name == "" || strings.ContainsAny(name, "\n\r\t"):
		r.Fail(e.Val, field, "want a one-line name")
		return name
	}
	if *seen == nil {
		*seen = map[string]int{}
	}
	if line, dup := (*seen)[name]; dup {
		r.Fail(e.Val, field, "%q already names the %s on line %d", name, what, line)
	} else {
		(*seen)[name] = n.Line
	}
	return name
}

func (r *reader) action(m map[string]yamlcheck.Entry, field string, def Do, allowed ...Do) Do {
	e, ok := m["action"]
	if !ok {
		return def
	}
	s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "action"))
	if !ok {
		return def
	}
	if !slices.Contains(allowed, Do(s)) {
		names := make([]string, len(allowed))
		for i, a := range allowed {
			names[i] = string(a)
		}
		r.Fail(e.Val, yamlcheck.Join(field, "action"), "%q is not an action here (want one of %s)", s, strings.Join(names, ", "))
		return def
	}
	return Do(s)
}

func (r *reader) rule(n *yaml.Node, field string, grace time.Duration) (Rule, bool) {
	before := len(r.Errs)
	m := r.Mapping(n, field, "name", "when", "older_than", "idle_for", "min_bytes", "match", "action", "grace")
	if m == nil {
		return Rule{}, false
	}
	rule := Rule{
		Line:      n.Line,
		Name:      r.name(m, n, field, "rule", &r.rules),
		OlderThan: r.duration(m, "older_than", field, 0),
		IdleFor:   r.duration(m, "idle_for", field, 0),
		MinBytes:  r.bytes(m, "min_bytes", field),
		Match:     r.match(m, field),
		Action:    r.action(m, field, DoTerm, DoReport, DoTerm, DoKill),
		Grace:     r.duration(m, "grace", field, grace),
	}
	e, ok := m["when"]
	if !ok {
		r.Fail(n, yamlcheck.Join(field, "when"), "missing: list the conditions (%s)", joinConds(conditions))
	} else {
		items := r.List(e.Val, yamlcheck.Join(field, "when"))
		isNull := yamlcheck.IsNull(e.Val)
		if len(items) == 0 && (isNull || e.Val.Kind == yaml.SequenceNode) {
			r.Fail(e.Val, yamlcheck.Join(field, "when"), "empty: list the conditions (%s)", joinConds(conditions))
		}
		for i, it := range items {
			f := fmt.Sprintf("%s.when[%d]", field, i)
			s, ok := r.Scalar(it, f)
			if !ok {
				continue
			}
			c := Condition(s)
			switch {
			case !slices.Contains(conditions, c):
				r.Fail(it, f, "unknown condition %q (want one of %s)", s, joinConds(conditions))
			case slices.Contains(rule.When, c):
				r.Fail(it, f, "%q listed twice", s)
			default:
				rule.When = append(rule.When, c)
			}
		}
	}
	idle := slices.Contains(rule.When, CondIdle) || slices.Contains(rule.When, CondIdleJupyter)
	if e, ok := m["idle_for"]; ok && !idle {
		r.Fail(e.Key, yamlcheck.Join(field, "idle_for"), "set, but when lists neither idle nor idle_jupyter")
	}
	if idle && rule.IdleFor == 0 {
		if _, ok := m["idle_for"]; !ok {
			r.Fail(n, yamlcheck.Join(field, "idle_for"), "missing: idle and idle_jupyter need how long the process must have been idle (e.g. 30m)")
		}
	}
	return rule, len(r.Errs) == before
}

func (r *reader) quota(n *yaml.Node, field string, grace time.Duration) (Quota, bool) {
	before := len(r.Errs)
	m := r.Mapping(n, field, "name", "per", "match", "max_bytes", "action", "after", "grace")
	if m == nil {
		return Quota{}, false
	}
	q := Quota{
		Line:     n.Line,
		Name:     r.name(m, n, field, "quota", &r.quotas),
		Per:      "process",
		Match:    r.match(m, field),
		MaxBytes: r.bytes(m, "max_bytes", field),
		Action:   r.action(m, field, DoWarn, DoWarn, DoTerm, DoKill),
		After:    r.duration(m, "after", field, 0),
		Grace:    r.duration(m, "grace", field, grace),
	}
	if e, ok := m["per"]; ok {
		if s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "per")); ok {
			if !slices.Contains(perKeys, s) {
				r.Fail(e.Val, yamlcheck.Join(field, "per"), "%q: want one of %s", s, strings.Join(perKeys, ", "))
			}
			q.Per = s
		}
	}
	if e, ok := m["max_bytes"]; !ok {
		r.Fail(n, yamlcheck.Join(field, "max_bytes"), "missing: how much memory the group may hold (e.g. 40GiB)")
	} else if q.MaxBytes == 0 && len(r.Errs) == before {
		r.Fail(e.Val, yamlcheck.Join(field, "max_bytes"), "0 bytes would flag every process holding memory")
	}
	return q, len(r.Errs) == before
}
