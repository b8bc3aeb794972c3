package serve

// The daemon's configuration file. See doc.go for the daemon's design and
// docs/serve.md for every key with its default.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/internal/yamlcheck"
)

// ConfigVersion is the only configuration file version this package reads.
const ConfigVersion = 1

// MaxConfigSize bounds what ParseConfig reads: a configuration is a few
// dozen lines.
const MaxConfigSize = 1 << 20

// Defaults of Config.
const (
	DefaultInterval           = time.Second
	DefaultHistoryInterval    = 10 * time.Second
	DefaultRawRetention       = 24 * time.Hour
	DefaultAggregateRetention = 720 * time.Hour
	DefaultTopN               = 10
	// DefaultPodResourcesSocket is the kubelet's pod-resources socket,
	// used when the file does not name one and the socket exists.
	DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"
)

// Limits of Config's values.
const (
	MinInterval     = 10 * time.Millisecond
	MaxInterval     = time.Hour
	MinRawRetention = time.Minute
	MaxRetention    = 10 * 366 * 24 * time.Hour
	MaxTopN         = 1000
)

// Config is the daemon's configuration: a parsed and validated --config
// file, or the defaults when there is none. The zero Config is not valid;
// DefaultConfig returns the defaults.
type Config struct {
	// File is the file it was read from; empty for the defaults.
	File string
	// Interval is the sample period: processes, detectors, alerts,
	// policies, metrics and the live view are updated at each sample.
	Interval time.Duration
	// HistoryInterval is how often one tick is written to the history
	// database; at least Interval.
	HistoryInterval time.Duration
	// RawRetention and AggregateRetention are the store's retention:
	// raw ticks are folded into 1-minute aggregates after RawRetention,
	// and aggregates, actions and alerts are deleted after
	// AggregateRetention.
	RawRetention, AggregateRetention time.Duration
	// TopN is how many processes per GPU get their own series in
	// /metrics (the rest are summed into pid="other").
	TopN int
	// PolicyFile is the policy file (package policy's format); empty: no
	// policy. A relative path is relative to the configuration file.
	PolicyFile string
	HTTP       HTTPConfig
	// Alerts is the alerts: section as written, handed to alert.Decode;
	// nil when the file has none.
	Alerts *yaml.Node
	// PodResourcesSocket is the kubelet's pod-resources socket; empty:
	// no pod attribution through it. PodResourcesAuto is true when the
	// file did not say: the daemon then uses DefaultPodResourcesSocket
	// if it exists.
	PodResourcesSocket string
	PodResourcesAuto   bool
}

// HTTPConfig is the http: section.
type HTTPConfig struct {
	// Mutations enables the mutating endpoints (signal a process, reload
	// the policies); they then need the bearer token in TokenFile.
	Mutations bool
	// TokenFile holds the bearer token (mode 0600). A relative path is
	// relative to the configuration file.
	TokenFile string
	// ReadOnly refuses every mutation even when Mutations is set.
	ReadOnly bool
	// AllowRemote allows a --addr that is not a loopback address.
	AllowRemote bool
}

// DefaultConfig returns the configuration used without a --config file:
// sample every second, history every 10 s, retention 24 h raw and 30 days
// aggregated, no policy, no alert rules, mutations off, loopback only.
func DefaultConfig() Config {
	return Config{
		Interval:           DefaultInterval,
		HistoryInterval:    DefaultHistoryInterval,
		RawRetention:       DefaultRawRetention,
		AggregateRetention: DefaultAggregateRetention,
		TopN:               DefaultTopN,
		PodResourcesSocket: DefaultPodResourcesSocket,
		PodResourcesAuto:   true,
	}
}

// MutationsEnabled reports whether the mutating endpoints are served:
// enabled and not overridden by read_only.
func (c Config) MutationsEnabled() bool { return c.HTTP.Mutations && !c.HTTP.ReadOnly }

// ConfigError is a problem in a configuration file, at a line, in a field
// (e.g. "http.token_file"); Line is 0 and Field empty for the whole file.
type ConfigError = yamlcheck.Error

// ConfigErrors is every problem found in one file, in file order.
type ConfigErrors = yamlcheck.Errors

// ReadConfig reads and parses the configuration file at path. Relative
// paths in it (policy_file, http.token_file) are made relative to the
// file's directory.
func ReadConfig(path string) (Config, error) {
	f, err := os.Open(path)
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxConfigSize+1))
	if err != nil {
		return Config{}, fmt.Errorf("config: read %s: %w", path, err)
	}
	c, err := ParseConfig(path, data)
	if err != nil {
		return Config{}, err
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&c.PolicyFile, &c.HTTP.TokenFile} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	return c, nil
}

// SettleHistory raises HistoryInterval to Interval when it is shorter
// (history is written from the samples, so at most once per sample) and
// says whether it did. The command calls it once the flags have overridden
// the file.
func (c *Config) SettleHistory() bool {
	if c.HistoryInterval >= c.Interval {
		return false
	}
	c.HistoryInterval = c.Interval
	return true
}

// ParseConfig parses and validates a configuration file; name is what
// errors call it. Decoding is strict: a key the format does not know, a
// key set twice, a value of the wrong kind, an alias or a merge key is an
// error naming the file, the line and the field. The error, if any, is a
// ConfigErrors listing every problem found. The alerts: section is only
// checked to be a mapping here; alert.Decode reads it.
func ParseConfig(name string, data []byte) (Config, error) {
	if len(data) > MaxConfigSize {
		return Config{}, ConfigErrors{{File: name, Msg: fmt.Sprintf("larger than %d bytes: not a vram configuration", MaxConfigSize)}}
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return Config{}, ConfigErrors{{File: name, Msg: fmt.Sprintf("empty file: a configuration needs at least version: %d", ConfigVersion)}}
		}
		return Config{}, ConfigErrors{yamlcheck.SyntaxError(name, err)}
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return Config{}, ConfigErrors{yamlcheck.SyntaxError(name, err)}
		}
		return Config{}, ConfigErrors{{File: name, Line: extra.Line, Msg: "a second YAML document: a configuration holds one"}}
	}
	r := &cfgReader{yamlcheck.Reader{File: name, Where: "in a configuration"}}
	c := r.config(&doc)
	if len(r.Errs) > 0 {
		slices.SortStableFunc(r.Errs, func(a, b *ConfigError) int { return a.Line - b.Line })
		return Config{}, r.Errs
	}
	return c, nil
}

// cfgReader walks the node tree against the format, collecting errors.
type cfgReader struct {
	yamlcheck.Reader
}

// mapping is Reader.Mapping, except that a nested key with nothing under
// it ("http:") is an empty mapping.
func (r *cfgReader) mapping(n *yaml.Node, field string, known ...string) map[string]yamlcheck.Entry {
	if field != "" && yamlcheck.IsNull(n) {
		return map[string]yamlcheck.Entry{}
	}
	return r.Mapping(n, field, known...)
}

// scalar returns the text of m[key]; ok is false when the key is absent or
// the value is not a plain value (an error is then recorded).
func (r *cfgReader) scalar(m map[string]yamlcheck.Entry, key, field string) (string, *yaml.Node, bool) {
	e, present := m[key]
	if !present {
		return "", nil, false
	}
	s, ok := r.Scalar(e.Val, yamlcheck.Join(field, key))
	return s, e.Val, ok
}

func (r *cfgReader) boolean(m map[string]yamlcheck.Entry, key, field string, dst *bool) {
	e, present := m[key]
	if !present {
		return
	}
	if v, ok := r.Bool(e.Val, yamlcheck.Join(field, key)); ok {
		*dst = v
	}
}

// duration reads a Go duration within [lo, hi].
func (r *cfgReader) duration(m map[string]yamlcheck.Entry, key, field string, lo, hi time.Duration, dst *time.Duration) {
	s, n, ok := r.scalar(m, key, field)
	if !ok {
		return
	}
	d, err := time.ParseDuration(s)
	switch {
	case err != nil:
		r.Fail(n, yamlcheck.Join(field, key), "want a duration such as 500ms, 10s or 24h, found %q", s)
	case d < lo || d > hi:
		r.Fail(n, yamlcheck.Join(field, key), "%s is out of range: must be between %v and %v", s, lo, hi)
	default:
		*dst = d
	}
}

// path reads a non-empty, one-line path.
func (r *cfgReader) path(m map[string]yamlcheck.Entry, key, field string, dst *string) {
	s, n, ok := r.scalar(m, key, field)
	if !ok {
		return
	}
	if s == "" || strings.ContainsAny(s, "\x00\n\r") {
		r.Fail(n, yamlcheck.Join(field, key), "want a file path, found %q (leave the key out for none)", s)
		return
	}
	*dst = s
}

func (r *cfgReader) config(doc *yaml.Node) Config {
	c := DefaultConfig()
	root := doc
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		root = doc.Content[0]
	}
	m := r.mapping(root, "", "version", "interval", "history_interval", "retention", "top_n", "policy_file", "http", "alerts", "kubernetes")
	if m == nil {
		return c
	}
	c.File = r.File
	if _, ok := m["version"]; !ok {
		r.Fail(root, "version", "missing: the file must start with version: %d", ConfigVersion)
	} else if s, n, ok := r.scalar(m, "version", ""); ok {
		if v, err := strconv.Atoi(s); err != nil || v != ConfigVersion {
			r.Fail(n, "version", "%q is not a version this vram reads (want %d)", s, ConfigVersion)
		}
	}
	r.duration(m, "interval", "", MinInterval, MaxInterval, &c.Interval)
	// Without history_interval, history is written every 10 s, or at
	// every sample when samples are further apart.
	c.HistoryInterval = max(c.HistoryInterval, c.Interval)
	r.duration(m, "history_interval", "", MinInterval, MaxInterval, &c.HistoryInterval)
	// The pair is checked here only when the file sets both: a file that
	// sets only history_interval may be meant for a shorter --interval,
	// and the command settles the final pair (Config.SettleHistory).
	if _, setInterval := m["interval"]; setInterval && c.HistoryInterval < c.Interval {
		n := root
		if e, ok := m["history_interval"]; ok {
			n = e.Val
		}
		r.Fail(n, "history_interval", "%v is shorter than interval (%v): history is written from the samples, so at most once per sample", c.HistoryInterval, c.Interval)
	}
	if e, ok := m["retention"]; ok {
		rm := r.mapping(e.Val, "retention", "raw", "aggregate")
		r.duration(rm, "raw", "retention", MinRawRetention, MaxRetention, &c.RawRetention)
		r.duration(rm, "aggregate", "retention", MinRawRetention, MaxRetention, &c.AggregateRetention)
		if c.AggregateRetention < c.RawRetention {
			n := e.Val
			if a, ok := rm["aggregate"]; ok {
				n = a.Val
			}
			r.Fail(n, "retention.aggregate", "%v is shorter than retention.raw (%v): raw samples are folded into the aggregates, which must outlive them", c.AggregateRetention, c.RawRetention)
		}
	}
	if s, n, ok := r.scalar(m, "top_n", ""); ok {
		v, err := strconv.Atoi(s)
		if err != nil || v < 1 || v > MaxTopN {
			r.Fail(n, "top_n", "want a whole number from 1 to %d, found %q", MaxTopN, s)
		} else {
			c.TopN = v
		}
	}
	r.path(m, "policy_file", "", &c.PolicyFile)
	if e, ok := m["http"]; ok {
		hm := r.mapping(e.Val, "http", "mutations", "token_file", "read_only", "allow_remote")
		r.boolean(hm, "mutations", "http", &c.HTTP.Mutations)
		r.path(hm, "token_file", "http", &c.HTTP.TokenFile)
		r.boolean(hm, "read_only", "http", &c.HTTP.ReadOnly)
		r.boolean(hm, "allow_remote", "http", &c.HTTP.AllowRemote)
		if c.HTTP.Mutations && c.HTTP.TokenFile == "" {
			if _, bad := hm["token_file"]; !bad {
				r.Fail(e.Val, "http.token_file", "missing: mutations: true needs the file holding the bearer token (mode 0600)")
			}
		}
	}
	if e, ok := m["alerts"]; ok {
		switch {
		case yamlcheck.IsNull(e.Val):
			// "alerts:" with nothing under it: no rules.
		case e.Val.Kind != yaml.MappingNode:
			r.Fail(e.Val, "alerts", "want a mapping (rules:, webhooks:), found %s", yamlcheck.KindName(e.Val))
		default:
			c.Alerts = e.Val
		}
	}
	if e, ok := m["kubernetes"]; ok {
		km := r.mapping(e.Val, "kubernetes", "pod_resources_socket")
		if s, n, ok := r.scalar(km, "pod_resources_socket", "kubernetes"); ok {
			if strings.ContainsAny(s, "\x00\n\r") {
				r.Fail(n, "kubernetes.pod_resources_socket", "want a socket path, or \"\" for none, found %q", s)
			} else {
				c.PodResourcesSocket, c.PodResourcesAuto = s, false
			}
		}
	}
	return c
}
