// Package yamlcheck reads hand-written YAML files strictly, one node at a
// time, and reports every problem with the file, the line and the field.
//
// The configuration formats of vram (the daemon's --config file, its
// alerts: section, policy files) are written by people and read by a
// daemon that acts on them: a misspelt key that is silently ignored can
// turn a quota off. Decoding into structs by reflection (yaml.Unmarshal,
// even with KnownFields) stops at the first problem, loses the line of most
// of them and accepts a key set twice. So each format walks the yaml.Node
// tree itself instead: every node carries its line, every check knows the
// field path it is at, and a Reader collects all the problems of a file so
// that one run of vram lists them all, in the form
//
//	file:line: field: problem
//
// What this package offers is the part the formats share:
//
//   - Error and Errors, the error types every format returns (the formats
//     export them under their own names as aliases);
//   - Reader, which collects Errors as the tree is walked (Fail);
//   - Reader.Mapping, the strict mapping: it refuses a node that is not a
//     mapping, an unknown key, a key set twice, aliases and merge keys
//     (a file should read the same to a person as to vram);
//   - Reader.Scalar, Reader.Bool and Reader.List for values whose reading
//     and messages are the same in every format, and IsNull;
//   - Join, the field path ("http" + "token_file" = "http.token_file"),
//     KindName, how a node is named in messages, and SyntaxError, which
//     turns the YAML library's syntax error into an Error with its line.
//
// Helpers whose limits or messages differ between formats (durations with
// their examples and ranges, sizes, paths, names) stay in each format.
package yamlcheck

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Error is a problem in a file, at a line, in a field.
type Error struct {
	File  string
	Line  int    // 0 when the problem is the whole file, or the line is not known
	Field string // e.g. "http.token_file" or "reclaim[1].min_bytes"; empty for the file itself
	Msg   string
}

// Error returns "file:line: field: msg", without ":line" when Line is 0
// and without "field: " when Field is empty.
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

// Errors is every problem found in one file.
type Errors []*Error

// Error returns the errors one to a line.
func (es Errors) Error() string {
	s := make([]string, len(es))
	for i, e := range es {
		s[i] = e.Error()
	}
	return strings.Join(s, "\n")
}

// SortByLine puts the errors in line order, those of the whole file (line
// 0) first; errors of one line keep the order they were found in. A format
// whose checks do not run in file order sorts its errors before returning
// them, so that a person reads them top to bottom.
func (es Errors) SortByLine() {
	slices.SortStableFunc(es, func(a, b *Error) int { return a.Line - b.Line })
}

// SyntaxError turns the YAML library's error ("yaml: line 3: ...") into an
// Error of file with the line.
func SyntaxError(file string, err error) *Error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				line, msg = n, strings.TrimSpace(rest[i+1:])
			}
		}
	}
	return &Error{File: file, Line: line, Msg: "not valid YAML: " + msg}
}

// Reader collects the errors found while walking one file's node tree.
type Reader struct {
	// File names the file in every error.
	File string
	// Where ends the refusal of aliases and merge keys: "aliases (*name)
	// are not allowed " + Where, e.g. "in a policy file"; "here" when empty.
	Where string
	// Errs is every error recorded so far, in the order found.
	Errs Errors
}

// Fail records an error at n's line (0 when n is nil) in field.
func (r *Reader) Fail(n *yaml.Node, field, format string, a ...any) {
	line := 0
	if n != nil {
		line = n.Line
	}
	r.Errs = append(r.Errs, &Error{File: r.File, Line: line, Field: field, Msg: fmt.Sprintf(format, a...)})
}

// Entry is one key of a mapping with its value.
type Entry struct {
	Key, Val *yaml.Node
}

// Mapping checks that n is a mapping whose keys are all in known, each at
// most once, and returns its entries by key; field is n's path. It returns
// nil, after recording an error, when n is not a mapping. Bad keys are
// recorded and left out of the result. With no known keys, any plain key is
// accepted (a mapping of names chosen by the user, such as HTTP headers).
func (r *Reader) Mapping(n *yaml.Node, field string, known ...string) map[string]Entry {
	where := r.Where
	if where == "" {
		where = "here"
	}
	if n.Kind == yaml.AliasNode {
		r.Fail(n, field, "aliases (*name) are not allowed %s", where)
		return nil
	}
	if n.Kind != yaml.MappingNode {
		r.Fail(n, field, "want a mapping (key: value lines), found %s", KindName(n))
		return nil
	}
	out := make(map[string]Entry, len(n.Content)/2)
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case k.Kind != yaml.ScalarNode:
			r.Fail(k, field, "a key must be a plain name")
			continue
		case k.Value == "<<":
			r.Fail(k, field, "merge keys (<<) are not allowed %s", where)
			continue
		case len(known) > 0 && !slices.Contains(known, k.Value):
			r.Fail(k, Join(field, k.Value), "unknown field (known here: %s)", strings.Join(known, ", "))
			continue
		}
		if prev, dup := out[k.Value]; dup {
			r.Fail(k, Join(field, k.Value), "set twice (first on line %d)", prev.Key.Line)
			continue
		}
		out[k.Value] = Entry{k, v}
	}
	return out
}

// Scalar returns the text of a plain value; it records an error and
// returns false for a mapping, a list, an alias or nothing (null).
func (r *Reader) Scalar(n *yaml.Node, field string) (string, bool) {
	if n.Kind != yaml.ScalarNode || IsNull(n) {
		r.Fail(n, field, "want a value, found %s", KindName(n))
		return "", false
	}
	return n.Value, true
}

// Bool reads true or false; other values are recorded as errors and give
// ok false.
func (r *Reader) Bool(n *yaml.Node, field string) (v, ok bool) {
	s, ok := r.Scalar(n, field)
	if !ok {
		return false, false
	}
	switch s {
	case "true":
		return true, true
	case "false":
		return false, true
	}
	r.Fail(n, field, "want true or false, found %q", s)
	return false, false
}

// List returns the items of a list; nothing (a key with no value) is an
// empty list, anything else an error.
func (r *Reader) List(n *yaml.Node, field string) []*yaml.Node {
	if IsNull(n) {
		return nil
	}
	if n.Kind != yaml.SequenceNode {
		r.Fail(n, field, "want a list (lines starting with -), found %s", KindName(n))
		return nil
	}
	return n.Content
}

// IsNull says whether n is nothing: an empty value, ~ or null.
func IsNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

// Join appends key to the field path field.
func Join(field, key string) string {
	if field == "" {
		return key
	}
	return field + "." + key
}

// KindName names what n is for messages: "a mapping", "a list", "an
// alias", "nothing", or a scalar's text quoted.
func KindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.AliasNode:
		return "an alias"
	case yaml.ScalarNode:
		if IsNull(n) {
			return "nothing"
		}
		return strconv.Quote(n.Value)
	}
	return "nothing"
}
