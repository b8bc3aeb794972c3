package alert

// Reading the alerts: section of the daemon's configuration. See doc.go for
// an overview.

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/internal/yamlcheck"
)

// Condition is what a rule watches (the when: key of a rule).
type Condition string

// The conditions a rule can watch. Each is evaluated on every sample; see the
// package documentation for the instance each one keys on.
const (
	// WhenLeak: the leak detector's verdict on a process is "leak", growing
	// at least Rule.MinSlope bytes per second. One instance per process.
	WhenLeak Condition = "leak"
	// WhenUsedAbove: a GPU's used memory is at least Rule.Percent % of its
	// total. One instance per GPU.
	WhenUsedAbove Condition = "used_above"
	// WhenOrphanHolding: a process flagged orphaned, zombie or
	// no_such_process holds at least Rule.MinBytes (and more than nothing).
	// One instance per process.
	WhenOrphanHolding Condition = "orphan_holding"
	// WhenUnattributedAbove: memory in use on a GPU that no listed process
	// accounts for is at least Rule.MinBytes. One instance per GPU.
	WhenUnattributedAbove Condition = "unattributed_above"
	// WhenDeviceUnhealthy: the daemon marks a GPU unhealthy (NVML errors, a
	// lost GPU, Xid events). One instance per GPU.
	WhenDeviceUnhealthy Condition = "device_unhealthy"
	// WhenFragmentationAbove: the fragmentation of a process's allocator
	// (vram's, libvram: the share of its reserved memory cached free
	// outside the largest free block) is at least Rule.Percent %, with at
	// least Rule.MinBytes reserved. One instance per process on vram's
	// allocator (allocator.go).
	WhenFragmentationAbove Condition = "fragmentation_above"
	// WhenAllocatorOOM: vram's allocator inside a process has returned at
	// least one out-of-memory error. One instance per process on it.
	WhenAllocatorOOM Condition = "allocator_oom"
)

var conditions = []Condition{WhenLeak, WhenUsedAbove, WhenOrphanHolding, WhenUnattributedAbove, WhenDeviceUnhealthy,
	WhenFragmentationAbove, WhenAllocatorOOM}

// Severities. A rule without severity: is a warning.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// States of an api.Alert this package writes.
const (
	StateFiring   = "firing"
	StateResolved = "resolved"
)

// Webhook defaults, and bounds that keep a typo from making the daemon wait
// for hours.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultMaxAttempts = 5
	DefaultBackoff     = time.Second
	DefaultMaxBackoff  = time.Minute
	MaxAttemptsLimit   = 100
	// MaxSecretSize bounds a header value read from a file ("@/path").
	MaxSecretSize = 64 << 10
)

// Config is the alerts: section: the rules the Engine evaluates and the
// webhooks the Notifier posts to. The zero Config has neither; alerts are
// then only logged.
type Config struct {
	Rules    []Rule
	Webhooks []Webhook
}

// Rule is one alert rule. Decode fills every field from the file and checks
// that the fields set are the ones the condition reads; a Rule built in code
// is used as it is (a rule with an unknown condition never fires).
type Rule struct {
	Name     string    // unique among the rules, [a-z0-9_-]
	When     Condition // what the rule watches
	Severity string    // SeverityWarning or SeverityCritical
	// For is how long the condition must hold, sample after sample, before
	// the alert fires (0: at the first sample where it holds).
	For time.Duration
	// KeepFiringFor is how long a firing alert stays firing after its
	// condition stops holding, so that a value hovering at the threshold
	// does not fire and resolve every sample (0: resolve at once). An
	// alert whose GPU or process is gone resolves at once regardless.
	KeepFiringFor time.Duration
	// Percent is the threshold of WhenUsedAbove (percent of the GPU's
	// total) and WhenFragmentationAbove (percent of the reserved memory),
	// in (0, 100].
	Percent float64
	// MinBytes is the threshold of WhenOrphanHolding and
	// WhenUnattributedAbove, and for WhenFragmentationAbove the least
	// reserved memory a process's allocator must hold for the rule to
	// apply (a small cache is fragmented of no consequence).
	MinBytes uint64
	MinSlope float64 // WhenLeak: the least growth that alerts, bytes per second (0: any leak)
	Line     int     // where the rule starts in its file; 0 for a rule built in code
}

// Webhook is one URL alerts are posted to; see Notifier for the payload and
// the retry policy.
type Webhook struct {
	URL         string
	Timeout     time.Duration // of one attempt, response included
	MaxAttempts int           // attempts in all, the first included
	Backoff     time.Duration // delay before the first retry; doubles at each retry
	MaxBackoff  time.Duration // the doubling stops here
	// Headers are added to every request. A value written "@/path" in the
	// file is replaced by the contents of that file (trailing newlines
	// removed), so that secrets need not sit in the configuration.
	Headers map[string]string
	Line    int
}

// Error is a problem in the alerts section, at a line (0 when not known),
// in a field (e.g. "alerts.rules[0].for").
type Error = yamlcheck.Error

// Errors is every problem found in one alerts section, in file order.
type Errors = yamlcheck.Errors

// Decode reads the value of the alerts: key of the configuration file named
// file (errors are "file:line: alerts.field: problem"). A nil node, or an
// empty value, gives the zero Config. The reading is strict: unknown keys, keys
// set twice, values of the wrong kind, fields that the rule's condition does
// not read, aliases and merge keys are errors. The error, if any, is an Errors
// listing every problem found.
//
// Header values written "@/path" are read from that file now (a relative path
// is taken from file's directory); the error for an unreadable one names the
// path, never the contents.
func Decode(file string, n *yaml.Node) (Config, error) {
	return decode(file, n, readSecret)
}

// decode is Decode with the secret reader as a parameter (tests and the
// fuzzer must not read the machine's files).
func decode(file string, n *yaml.Node, secret func(path string) (string, error)) (Config, error) {
	r := &reader{Reader: yamlcheck.Reader{File: file, Where: "here"}, secret: secret}
	cfg := r.config(n)
	if len(r.Errs) > 0 {
		slices.SortStableFunc(r.Errs, func(a, b *Error) int { return a.Line - b.Line })
		return Config{}, r.Errs
	}
	return cfg, nil
}

// readSecret reads a header value from a regular file. It refuses anything
// else (a FIFO or a device would block or never end).
func readSecret(path string) (string, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSecretSize+1))
	if err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxSecretSize {
		return "", fmt.Errorf("%s is larger than %d bytes", path, MaxSecretSize)
	}
	return string(b), nil
}

// reader walks the node tree, collecting errors.
type reader struct {
	yamlcheck.Reader
	secret func(string) (string, error)
	// names maps each rule name seen so far to the line of its rule,
	// valid or not: alerts, the database and reloads refer to rules by
	// name, and a duplicate is reported even beside other mistakes.
	names map[string]int
}

// isZero says whether a duration's text reads as zero ("0", "0s").
func isZero(n *yaml.Node) bool {
	d, err := time.ParseDuration(n.Value)
	return err == nil && d == 0
}

func (r *reader) duration(m map[string]yamlcheck.Entry, key, field string, def time.Duration) time.Duration {
	e, ok := m[key]
	if !ok {
		return def
	}
	field = yamlcheck.Join(field, key)
	s, ok := r.Scalar(e.Val, field)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		r.Fail(e.Val, field, "want a duration such as 90s, 5m or 1h30m, found %q", s)
		return def
	case d < 0:
		r.Fail(e.Val, field, "%s is negative", s)
		return def
	}
	return d
}

func (r *reader) bytes(m map[string]yamlcheck.Entry, key, field string) uint64 {
	e, ok := m[key]
	if !ok {
		return 0
	}
	field = yamlcheck.Join(field, key)
	s, ok := r.Scalar(e.Val, field)
	if !ok {
		return 0
	}
	b, err := units.ParseBytes(s)
	if err != nil {
		r.Fail(e.Val, field, "want a size such as 512MiB or 2GiB: %v", err)
		return 0
	}
	return b
}

func (r *reader) config(n *yaml.Node) Config {
	if n == nil {
		return Config{}
	}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return Config{}
		}
		n = n.Content[0]
	}
	if yamlcheck.IsNull(n) {
		return Config{} // "alerts:" with nothing under it
	}
	const field = "alerts"
	m := r.Mapping(n, field, "rules", "webhooks")
	if m == nil {
		return Config{}
	}
	var cfg Config
	if e, ok := m["rules"]; ok {
		for i, rn := range r.List(e.Val, yamlcheck.Join(field, "rules")) {
			if rule, ok := r.rule(rn, fmt.Sprintf("%s.rules[%d]", field, i)); ok {
				cfg.Rules = append(cfg.Rules, rule)
			}
		}
	}
	if e, ok := m["webhooks"]; ok {
		for i, wn := range r.List(e.Val, yamlcheck.Join(field, "webhooks")) {
			if w, ok := r.webhook(wn, fmt.Sprintf("%s.webhooks[%d]", field, i)); ok {
				cfg.Webhooks = append(cfg.Webhooks, w)
			}
		}
	}
	return cfg
}

// ruleFields lists, for each condition, the threshold fields it reads; the
// others are refused so that a rule cannot look stricter than it is.
var ruleFields = map[Condition][]string{
	WhenLeak:               {"min_slope"},
	WhenUsedAbove:          {"percent"},
	WhenOrphanHolding:      {"min_bytes"},
	WhenUnattributedAbove:  {"min_bytes"},
	WhenDeviceUnhealthy:    nil,
	WhenFragmentationAbove: {"percent", "min_bytes"},
	WhenAllocatorOOM:       nil,
}

// thresholds are the keys of ruleFields' values.
var thresholds = []string{"min_slope", "percent", "min_bytes"}

// validName says whether s may name a rule: it appears in logs, webhooks,
// the database and URLs, so it stays short and plain.
func validName(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func joinConds(cs []Condition) string {
	s := make([]string, len(cs))
	for i, c := range cs {
		s[i] = string(c)
	}
	return strings.Join(s, ", ")
}

func (r *reader) rule(n *yaml.Node, field string) (Rule, bool) {
	before := len(r.Errs)
	m := r.Mapping(n, field, "name", "when", "severity", "for", "keep_firing_for", "percent", "min_bytes", "min_slope")
	if m == nil {
		return Rule{}, false
	}
	rule := Rule{
		Line:          n.Line,
		Severity:      SeverityWarning,
		For:           r.duration(m, "for", field, 0),
		KeepFiringFor: r.duration(m, "keep_firing_for", field, 0),
	}
	if e, ok := m["name"]; !ok {
		r.Fail(n, yamlcheck.Join(field, "name"), "missing: every rule needs a name (it appears in every alert)")
	} else if s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "name")); ok {
		if !validName(s) {
			r.Fail(e.Val, yamlcheck.Join(field, "name"), "%q: want 1 to 64 of a-z, 0-9, _ and -", s)
		} else if line, dup := r.names[s]; dup {
			r.Fail(e.Val, yamlcheck.Join(field, "name"), "%q already names the rule on line %d", s, line)
		} else {
			if r.names == nil {
				r.names = map[string]int{}
			}
			r.names[s] = n.Line
		}
		rule.Name = s
	}
	if e, ok := m["severity"]; ok {
		if s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "severity")); ok {
			if s != SeverityWarning && s != SeverityCritical {
				r.Fail(e.Val, yamlcheck.Join(field, "severity"), "%q: want warning or critical", s)
			}
			rule.Severity = s
		}
	}
	e, ok := m["when"]
	if !ok {
		r.Fail(n, yamlcheck.Join(field, "when"), "missing: say what the rule watches (%s)", joinConds(conditions))
		return rule, false
	}
	s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "when"))
	if !ok {
		return rule, false
	}
	rule.When = Condition(s)
	reads, known := ruleFields[rule.When]
	if !known {
		r.Fail(e.Val, yamlcheck.Join(field, "when"), "unknown condition %q (want one of %s)", s, joinConds(conditions))
		return rule, false
	}
	for _, k := range thresholds {
		if e, set := m[k]; set && !slices.Contains(reads, k) {
			r.Fail(e.Key, yamlcheck.Join(field, k), "set, but when: %s does not read it", rule.When)
		}
	}
	switch rule.When {
	case WhenLeak:
		rule.MinSlope = r.slope(m, "min_slope", field)
	case WhenUsedAbove:
		rule.Percent = r.percent(m, n, field, "the share of the GPU's memory that alerts (e.g. 90)")
	case WhenFragmentationAbove:
		rule.Percent = r.percent(m, n, field, "the share of the process's reserved memory, fragmented, that alerts (e.g. 20)")
		rule.MinBytes = r.bytes(m, "min_bytes", field)
	case WhenOrphanHolding:
		rule.MinBytes = r.bytes(m, "min_bytes", field)
	case WhenUnattributedAbove:
		rule.MinBytes = r.bytes(m, "min_bytes", field)
		if e, ok := m["min_bytes"]; !ok {
			r.Fail(n, yamlcheck.Join(field, "min_bytes"), "missing: how much unattributed memory alerts (e.g. 2GiB)")
		} else if rule.MinBytes == 0 && len(r.Errs) == before {
			r.Fail(e.Val, yamlcheck.Join(field, "min_bytes"), "0 bytes would alert on every GPU with any unattributed memory")
		}
	}
	return rule, len(r.Errs) == before
}

// percent reads percent: 90 (or "90%"), in (0, 100]; what says what it
// is a share of, for the error when it is missing.
func (r *reader) percent(m map[string]yamlcheck.Entry, n *yaml.Node, field, what string) float64 {
	e, ok := m["percent"]
	field = yamlcheck.Join(field, "percent")
	if !ok {
		r.Fail(n, field, "missing: %s", what)
		return 0
	}
	s, ok := r.Scalar(e.Val, field)
	if !ok {
		return 0
	}
	p, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(s), "%")), 64)
	if err != nil || math.IsNaN(p) || p <= 0 || p > 100 {
		r.Fail(e.Val, field, "want a number above 0 and at most 100, found %q", s)
		return 0
	}
	return p
}

// slope reads a growth rate: a size, "/", and s, min or h ("1MiB/s").
func (r *reader) slope(m map[string]yamlcheck.Entry, key, field string) float64 {
	e, ok := m[key]
	if !ok {
		return 0
	}
	field = yamlcheck.Join(field, key)
	s, ok := r.Scalar(e.Val, field)
	if !ok {
		return 0
	}
	v, err := parseSlope(s)
	if err != nil {
		r.Fail(e.Val, field, "want a rate such as 1MiB/s or 100MiB/min: %v", err)
		return 0
	}
	return v
}

// parseSlope reads "SIZE/s", "SIZE/min" or "SIZE/h" as bytes per second.
func parseSlope(s string) (float64, error) {
	size, per, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("%q has no /s, /min or /h", s)
	}
	var secs float64
	switch strings.TrimSpace(per) {
	case "s":
		secs = 1
	case "min":
		secs = 60
	case "h":
		secs = 3600
	default:
		return 0, fmt.Errorf("%q: the time unit after / must be s, min or h", s)
	}
	b, err := units.ParseBytes(strings.TrimSpace(size))
	if err != nil {
		return 0, err
	}
	return float64(b) / secs, nil
}

func (r *reader) webhook(n *yaml.Node, field string) (Webhook, bool) {
	before := len(r.Errs)
	m := r.Mapping(n, field, "url", "timeout", "max_attempts", "backoff", "max_backoff", "headers")
	if m == nil {
		return Webhook{}, false
	}
	w := Webhook{
		Line:        n.Line,
		Timeout:     r.duration(m, "timeout", field, DefaultTimeout),
		MaxAttempts: DefaultMaxAttempts,
		Backoff:     r.duration(m, "backoff", field, DefaultBackoff),
		MaxBackoff:  r.duration(m, "max_backoff", field, DefaultMaxBackoff),
	}
	if e, ok := m["url"]; !ok {
		r.Fail(n, yamlcheck.Join(field, "url"), "missing: where to post alerts (http:// or https://)")
	} else if s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "url")); ok {
		if err := checkURL(s); err != nil {
			r.Fail(e.Val, yamlcheck.Join(field, "url"), "%v", err)
		}
		w.URL = s
	}
	for _, k := range []string{"timeout", "backoff", "max_backoff"} {
		if e, ok := m[k]; ok && isZero(e.Val) {
			r.Fail(e.Val, yamlcheck.Join(field, k), "must be more than 0")
		}
	}
	if e, ok := m["max_attempts"]; ok {
		if s, ok := r.Scalar(e.Val, yamlcheck.Join(field, "max_attempts")); ok {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 || v > MaxAttemptsLimit {
				r.Fail(e.Val, yamlcheck.Join(field, "max_attempts"), "want a whole number from 1 to %d, found %q", MaxAttemptsLimit, s)
			} else {
				w.MaxAttempts = v
			}
		}
	}
	if e, ok := m["max_backoff"]; ok && w.MaxBackoff > 0 && w.MaxBackoff < w.Backoff {
		r.Fail(e.Val, yamlcheck.Join(field, "max_backoff"), "%s is less than backoff (%s)", w.MaxBackoff, w.Backoff)
	}
	if e, ok := m["headers"]; ok {
		w.Headers = r.headers(e.Val, yamlcheck.Join(field, "headers"))
	}
	return w, len(r.Errs) == before
}

// checkURL accepts absolute http and https URLs with a host.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // without the URL, which may hold a secret
		}
		return fmt.Errorf("%q is not a URL: %v", redact(s), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("%q: want an http:// or https:// URL", redact(s))
	}
	if u.Host == "" || u.Hostname() == "" {
		return fmt.Errorf("%q has no host", redact(s))
	}
	if u.User != nil {
		return fmt.Errorf("%q: put credentials in a header (headers: {Authorization: \"@/path\"}), not in the URL", redact(s))
	}
	return nil
}

// Headers that the Notifier sets itself or that would break the request.
var reservedHeaders = []string{"content-type", "content-length", "host", "transfer-encoding", "connection"}

func (r *reader) headers(n *yaml.Node, field string) map[string]string {
	if yamlcheck.IsNull(n) {
		return nil
	}
	m := r.Mapping(n, field)
	if m == nil {
		return nil
	}
	// Walk in file order so that errors come in file order.
	out := make(map[string]string, len(m))
	lines := make(map[string]int, len(m)) // canonical name -> line
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		e, ok := m[k.Value]
		if !ok || e.Key != k {
			continue // refused by mapping
		}
		f := yamlcheck.Join(field, k.Value)
		if !validHeaderName(k.Value) {
			r.Fail(k, f, "not a valid header name")
			continue
		}
		if slices.Contains(reservedHeaders, strings.ToLower(k.Value)) {
			r.Fail(k, f, "set by vram itself; leave it out")
			continue
		}
		canon := textproto.CanonicalMIMEHeaderKey(k.Value)
		if prev, dup := lines[canon]; dup {
			r.Fail(k, f, "the same header as the one on line %d (names ignore case)", prev)
			continue
		}
		lines[canon] = k.Line
		v, ok := r.Scalar(e.Val, f)
		if !ok {
			continue
		}
		if path, isFile := strings.CutPrefix(v, "@"); isFile {
			if path == "" {
				r.Fail(e.Val, f, `"@" must be followed by the path of the file that holds the value`)
				continue
			}
			if !filepath.IsAbs(path) {
				path = filepath.Join(filepath.Dir(r.File), path)
			}
			s, err := r.secret(path)
			if err != nil {
				r.Fail(e.Val, f, "reading the value from a file: %v", err)
				continue
			}
			v = strings.TrimRight(s, "\r\n")
			if v == "" {
				r.Fail(e.Val, f, "%s is empty", path)
				continue
			}
			if !validHeaderValue(v) {
				r.Fail(e.Val, f, "%s holds characters a header value cannot carry (a line break or a control character)", path)
				continue
			}
		} else if v == "" {
			r.Fail(e.Val, f, "empty value (leave the header out, or read it from a file with \"@/path\")")
			continue
		} else if !validHeaderValue(v) {
			r.Fail(e.Val, f, "a header value cannot carry line breaks or control characters")
			continue
		}
		out[k.Value] = v
	}
	return out
}

// validHeaderName: an HTTP token (RFC 9110 section 5.6.2).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range []byte(s) {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue: no control characters but tab.
func validHeaderValue(s string) bool {
	for _, c := range []byte(s) {
		if c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}

// redact shortens a webhook URL to its scheme and host for logs and errors:
// many services put the secret in the path ("/services/T0/B0/XXXX") or the
// query. A value with no host (no scheme, or nothing after it) is shown up
// to the end of its first path segment, so that a mistake such as "not a
// url" or "/hook" reads as written while a secret path after a host name
// written without its scheme stays out, and so do credentials before an @.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err == nil && u.Host != "" {
		s := u.Scheme + "://" + u.Host
		if u.Path != "" && u.Path != "/" || u.RawQuery != "" {
			s += "/…"
		}
		return s
	}
	prefix, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		prefix, rest = raw[:i+3], raw[i+3:]
	}
	if len(rest) > 1 {
		if i := strings.IndexAny(rest[1:], "/?#"); i >= 0 {
			rest = rest[:i+2] + "…"
		}
	}
	if i := strings.LastIndexByte(rest, '@'); i >= 0 {
		rest = "…" + rest[i:] // credentials before the host
	}
	if r := []rune(rest); len(r) > 64 {
		rest = string(r[:63]) + "…"
	}
	return prefix + rest
}
