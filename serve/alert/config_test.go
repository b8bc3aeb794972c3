package alert

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// alertsNode parses a configuration file and returns the value of its alerts
// key, as the daemon's configuration reader hands it over (nil when absent).
func alertsNode(t testing.TB, data string) *yaml.Node {
	t.Helper()
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(data), &doc); err != nil {
		t.Fatalf("test YAML: %v", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("test YAML is not a mapping")
	}
	root := doc.Content[0]
	for i := 0; i+1 < len(root.Content); i += 2 {
		if root.Content[i].Value == "alerts" {
			return root.Content[i+1]
		}
	}
	return nil
}

// noSecrets is a secret reader that must not be called.
func noSecrets(t *testing.T) func(string) (string, error) {
	return func(path string) (string, error) {
		t.Errorf("read %s", path)
		return "", errors.New("no files in this test")
	}
}

func TestDecodeFile(t *testing.T) {
	data, err := os.ReadFile("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Decode("testdata/config.yaml", alertsNode(t, string(data)))
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Name: "leak", When: WhenLeak, Severity: SeverityWarning, MinSlope: 1 << 20, Line: 6},
		{Name: "gpu-nearly-full", When: WhenUsedAbove, Severity: SeverityWarning, Percent: 90, For: 5 * time.Minute, KeepFiringFor: 30 * time.Second, Line: 10},
		{Name: "orphan-holding", When: WhenOrphanHolding, Severity: SeverityCritical, MinBytes: 1 << 30, Line: 15},
		{Name: "unattributed", When: WhenUnattributedAbove, Severity: SeverityWarning, MinBytes: 2 << 30, For: 2 * time.Minute, Line: 19},
		{Name: "gpu-unhealthy", When: WhenDeviceUnhealthy, Severity: SeverityCritical, Line: 23},
	}
	if len(cfg.Rules) != len(want) {
		t.Fatalf("rules = %+v", cfg.Rules)
	}
	for i := range want {
		if cfg.Rules[i] != want[i] {
			t.Errorf("rules[%d] = %+v\nwant       %+v", i, cfg.Rules[i], want[i])
		}
	}
	if len(cfg.Webhooks) != 2 {
		t.Fatalf("webhooks = %+v", cfg.Webhooks)
	}
	w := cfg.Webhooks[0]
	if w.URL != "https://hooks.example/vram" || w.Timeout != 5*time.Second || w.MaxAttempts != 6 ||
		w.Backoff != time.Second || w.MaxBackoff != DefaultMaxBackoff || w.Line != 27 {
		t.Errorf("webhooks[0] = %+v", w)
	}
	// "@token" is read from the file beside the configuration, without its newline.
	if len(w.Headers) != 2 || w.Headers["X-Team"] != "ml" || w.Headers["Authorization"] != "Bearer s3cret" {
		t.Errorf("webhooks[0].headers = %q", w.Headers)
	}
	w = cfg.Webhooks[1]
	if w.Timeout != DefaultTimeout || w.MaxAttempts != DefaultMaxAttempts || w.Backoff != DefaultBackoff ||
		w.MaxBackoff != DefaultMaxBackoff || w.Headers != nil {
		t.Errorf("webhooks[1] defaults = %+v", w)
	}
}

func TestDecodeEmpty(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    *yaml.Node
	}{
		{"nil node", nil},
		{"alerts: with nothing", alertsNode(t, "version: 1\nalerts:\n")},
		{"empty lists", alertsNode(t, "alerts:\n  rules:\n  webhooks: []\n")},
		{"empty document", &yaml.Node{Kind: yaml.DocumentNode}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := decode("c.yaml", tc.n, noSecrets(t))
			if err != nil || len(cfg.Rules) != 0 || len(cfg.Webhooks) != 0 {
				t.Errorf("Decode = %+v, %v; want an empty Config", cfg, err)
			}
		})
	}
}

func TestDecodeValues(t *testing.T) {
	tests := []struct {
		name, rule string
		check      func(Rule) bool
	}{
		{"percent with a sign", "when: used_above\npercent: 92.5%", func(r Rule) bool { return r.Percent == 92.5 }},
		{"percent 100", "when: used_above\npercent: 100", func(r Rule) bool { return r.Percent == 100 }},
		{"slope per minute", "when: leak\nmin_slope: 60MiB/min", func(r Rule) bool { return r.MinSlope == 1<<20 }},
		{"slope per hour", "when: leak\nmin_slope: 3600 B/h", func(r Rule) bool { return r.MinSlope == 1 }},
		{"leak without slope", "when: leak", func(r Rule) bool { return r.MinSlope == 0 && r.Severity == SeverityWarning }},
		{"orphan without min_bytes", "when: orphan_holding", func(r Rule) bool { return r.MinBytes == 0 }},
		{"fragmentation for 5m", "when: fragmentation_above\npercent: 20%\nfor: 5m", func(r Rule) bool {
			return r.When == WhenFragmentationAbove && r.Percent == 20 && r.MinBytes == 0 && r.For == 5*time.Minute
		}},
		{"fragmentation of large caches", "when: fragmentation_above\npercent: 20\nmin_bytes: 1GiB", func(r Rule) bool { return r.MinBytes == 1<<30 }},
		{"allocator OOM", "when: allocator_oom\nseverity: critical", func(r Rule) bool { return r.When == WhenAllocatorOOM && r.Severity == SeverityCritical }},
		{"for and keep_firing_for", "when: device_unhealthy\nfor: 1m30s\nkeep_firing_for: 0s", func(r Rule) bool {
			return r.For == 90*time.Second && r.KeepFiringFor == 0
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			src := "alerts:\n  rules:\n    - name: r\n" + indent(tc.rule, "      ") + "\n"
			cfg, err := decode("c.yaml", alertsNode(t, src), noSecrets(t))
			if err != nil {
				t.Fatal(err)
			}
			if len(cfg.Rules) != 1 || !tc.check(cfg.Rules[0]) {
				t.Errorf("rules = %+v", cfg.Rules)
			}
		})
	}
}

func indent(s, by string) string {
	return by + strings.ReplaceAll(s, "\n", "\n"+by)
}

// TestDecodeInvalid: every error names the file, the line and the field.
func TestDecodeInvalid(t *testing.T) {
	tests := []struct {
		name, yaml string
		want       string // every error, exactly, one a line
	}{
		{"not a mapping", "alerts: [1]", "c.yaml:1: alerts: want a mapping (key: value lines), found a list"},
		{"unknown key", "alerts:\n  rule: []", "c.yaml:2: alerts.rule: unknown field (known here: rules, webhooks)"},
		{"set twice", "alerts:\n  rules: []\n  rules: []", "c.yaml:3: alerts.rules: set twice (first on line 2)"},
		{"rules not a list", "alerts:\n  rules: leak", `c.yaml:2: alerts.rules: want a list (lines starting with -), found "leak"`},
		{"rule not a mapping", "alerts:\n  rules: [leak]", `c.yaml:2: alerts.rules[0]: want a mapping (key: value lines), found "leak"`},
		{"no name", "alerts:\n  rules:\n    - when: leak", "c.yaml:3: alerts.rules[0].name: missing: every rule needs a name (it appears in every alert)"},
		{"bad name", "alerts:\n  rules:\n    - name: Leak!\n      when: leak", `c.yaml:3: alerts.rules[0].name: "Leak!": want 1 to 64 of a-z, 0-9, _ and -`},
		{"name a list", "alerts:\n  rules:\n    - name: [a]\n      when: leak", `c.yaml:3: alerts.rules[0].name: want a value, found a list`},
		{"duplicate name", "alerts:\n  rules:\n    - name: a\n      when: leak\n    - name: a\n      when: device_unhealthy",
			`c.yaml:5: alerts.rules[1].name: "a" already names the rule on line 3`},
		{"duplicate name of a rule with a mistake", "alerts:\n  rules:\n    - name: a\n      when: leaking\n    - when: leak\n      name: a",
			"c.yaml:4: alerts.rules[0].when: unknown condition \"leaking\" (want one of leak, used_above, orphan_holding, unattributed_above, device_unhealthy, fragmentation_above, allocator_oom)\n" +
				`c.yaml:6: alerts.rules[1].name: "a" already names the rule on line 3`},
		{"no when", "alerts:\n  rules:\n    - name: a", "c.yaml:3: alerts.rules[0].when: missing: say what the rule watches (leak, used_above, orphan_holding, unattributed_above, device_unhealthy, fragmentation_above, allocator_oom)"},
		{"unknown when", "alerts:\n  rules:\n    - name: a\n      when: leaking",
			`c.yaml:4: alerts.rules[0].when: unknown condition "leaking" (want one of leak, used_above, orphan_holding, unattributed_above, device_unhealthy, fragmentation_above, allocator_oom)`},
		{"bad severity", "alerts:\n  rules:\n    - name: a\n      when: leak\n      severity: page", `c.yaml:5: alerts.rules[0].severity: "page": want warning or critical`},
		{"bad for", "alerts:\n  rules:\n    - name: a\n      when: leak\n      for: 5", `c.yaml:5: alerts.rules[0].for: want a duration such as 90s, 5m or 1h30m, found "5"`},
		{"negative for", "alerts:\n  rules:\n    - name: a\n      when: leak\n      for: -5m", `c.yaml:5: alerts.rules[0].for: -5m is negative`},
		{"for empty", "alerts:\n  rules:\n    - name: a\n      when: leak\n      for:", `c.yaml:5: alerts.rules[0].for: want a value, found nothing`},
		{"field not read", "alerts:\n  rules:\n    - name: a\n      when: leak\n      percent: 90", "c.yaml:5: alerts.rules[0].percent: set, but when: leak does not read it"},
		{"min_bytes on device_unhealthy", "alerts:\n  rules:\n    - name: a\n      when: device_unhealthy\n      min_bytes: 1GiB",
			"c.yaml:5: alerts.rules[0].min_bytes: set, but when: device_unhealthy does not read it"},
		{"percent missing", "alerts:\n  rules:\n    - name: a\n      when: used_above", "c.yaml:3: alerts.rules[0].percent: missing: the share of the GPU's memory that alerts (e.g. 90)"},
		{"fragmentation without percent", "alerts:\n  rules:\n    - name: a\n      when: fragmentation_above\n      min_bytes: 1GiB",
			"c.yaml:3: alerts.rules[0].percent: missing: the share of the process's reserved memory, fragmented, that alerts (e.g. 20)"},
		{"fragmentation above 100", "alerts:\n  rules:\n    - name: a\n      when: fragmentation_above\n      percent: 120",
			`c.yaml:5: alerts.rules[0].percent: want a number above 0 and at most 100, found "120"`},
		{"threshold on allocator_oom", "alerts:\n  rules:\n    - name: a\n      when: allocator_oom\n      percent: 5",
			"c.yaml:5: alerts.rules[0].percent: set, but when: allocator_oom does not read it"},
		{"percent zero", "alerts:\n  rules:\n    - name: a\n      when: used_above\n      percent: 0", `c.yaml:5: alerts.rules[0].percent: want a number above 0 and at most 100, found "0"`},
		{"percent above 100", "alerts:\n  rules:\n    - name: a\n      when: used_above\n      percent: 101", `c.yaml:5: alerts.rules[0].percent: want a number above 0 and at most 100, found "101"`},
		{"percent NaN", "alerts:\n  rules:\n    - name: a\n      when: used_above\n      percent: .nan", `c.yaml:5: alerts.rules[0].percent: want a number above 0 and at most 100, found ".nan"`},
		{"bad min_bytes", "alerts:\n  rules:\n    - name: a\n      when: orphan_holding\n      min_bytes: lots",
			`c.yaml:5: alerts.rules[0].min_bytes: want a size such as 512MiB or 2GiB: size "lots": want a number with an optional unit (B, KiB, MiB, GiB, TiB, KB, MB, GB, TB)`},
		{"unattributed without min_bytes", "alerts:\n  rules:\n    - name: a\n      when: unattributed_above",
			"c.yaml:3: alerts.rules[0].min_bytes: missing: how much unattributed memory alerts (e.g. 2GiB)"},
		{"unattributed zero", "alerts:\n  rules:\n    - name: a\n      when: unattributed_above\n      min_bytes: 0",
			"c.yaml:5: alerts.rules[0].min_bytes: 0 bytes would alert on every GPU with any unattributed memory"},
		{"slope without unit", "alerts:\n  rules:\n    - name: a\n      when: leak\n      min_slope: 1MiB",
			`c.yaml:5: alerts.rules[0].min_slope: want a rate such as 1MiB/s or 100MiB/min: "1MiB" has no /s, /min or /h`},
		{"slope bad unit", "alerts:\n  rules:\n    - name: a\n      when: leak\n      min_slope: 1MiB/day",
			`c.yaml:5: alerts.rules[0].min_slope: want a rate such as 1MiB/s or 100MiB/min: "1MiB/day": the time unit after / must be s, min or h`},
		{"two errors in one rule", "alerts:\n  rules:\n    - name: A\n      when: leak\n      for: x",
			"c.yaml:3: alerts.rules[0].name: \"A\": want 1 to 64 of a-z, 0-9, _ and -\n" +
				`c.yaml:5: alerts.rules[0].for: want a duration such as 90s, 5m or 1h30m, found "x"`},
		{"alias", "x: &r {name: a, when: leak}\nalerts:\n  rules: [*r]", "c.yaml:3: alerts.rules[0]: aliases (*name) are not allowed here"},
		{"merge key", "x: &r {when: leak}\nalerts:\n  rules:\n    - <<: *r\n      name: a",
			"c.yaml:4: alerts.rules[0]: merge keys (<<) are not allowed here\nc.yaml:4: alerts.rules[0].when: missing: say what the rule watches (leak, used_above, orphan_holding, unattributed_above, device_unhealthy, fragmentation_above, allocator_oom)"},

		{"no url", "alerts:\n  webhooks:\n    - timeout: 1s", "c.yaml:3: alerts.webhooks[0].url: missing: where to post alerts (http:// or https://)"},
		{"ftp url", "alerts:\n  webhooks:\n    - url: ftp://h/x", `c.yaml:3: alerts.webhooks[0].url: "ftp://h/…": want an http:// or https:// URL`},
		{"relative url", "alerts:\n  webhooks:\n    - url: /hook", `c.yaml:3: alerts.webhooks[0].url: "/hook": want an http:// or https:// URL`},
		{"not a url", "alerts:\n  webhooks:\n    - url: \"not a url\"", `c.yaml:3: alerts.webhooks[0].url: "not a url": want an http:// or https:// URL`},
		// Without a scheme the host is not known as one: the value is shown
		// up to its first path segment, which keeps a secret path out.
		{"no scheme", "alerts:\n  webhooks:\n    - url: hooks.example.com/services/T0/B0/s3cret",
			`c.yaml:3: alerts.webhooks[0].url: "hooks.example.com/…": want an http:// or https:// URL`},
		{"no scheme, query", "alerts:\n  webhooks:\n    - url: hooks.example.com?token=s3cret",
			`c.yaml:3: alerts.webhooks[0].url: "hooks.example.com?…": want an http:// or https:// URL`},
		{"no scheme, credentials", "alerts:\n  webhooks:\n    - url: u:s3cret@hooks.example.com/x",
			`c.yaml:3: alerts.webhooks[0].url: "…@hooks.example.com/…": want an http:// or https:// URL`},
		{"no host", "alerts:\n  webhooks:\n    - url: 'http://'", `c.yaml:3: alerts.webhooks[0].url: "http://" has no host`},
		{"no host, a path", "alerts:\n  webhooks:\n    - url: 'https:///services/T0/s3cret'", `c.yaml:3: alerts.webhooks[0].url: "https:///services/…" has no host`},
		{"credentials in url", "alerts:\n  webhooks:\n    - url: https://u:p@h/x",
			`c.yaml:3: alerts.webhooks[0].url: "https://h/…": put credentials in a header (headers: {Authorization: "@/path"}), not in the URL`},
		{"bad url", "alerts:\n  webhooks:\n    - url: 'http://h/%zz'", `c.yaml:3: alerts.webhooks[0].url: "http://h/…" is not a URL: invalid URL escape "%zz"`},
		{"bad host", "alerts:\n  webhooks:\n    - url: 'http://hooks example.com'",
			`c.yaml:3: alerts.webhooks[0].url: "http://hooks example.com" is not a URL: invalid character " " in host name`},
		{"timeout zero", "alerts:\n  webhooks:\n    - url: http://h\n      timeout: 0s", "c.yaml:4: alerts.webhooks[0].timeout: must be more than 0"},
		{"attempts zero", "alerts:\n  webhooks:\n    - url: http://h\n      max_attempts: 0", `c.yaml:4: alerts.webhooks[0].max_attempts: want a whole number from 1 to 100, found "0"`},
		{"attempts text", "alerts:\n  webhooks:\n    - url: http://h\n      max_attempts: many", `c.yaml:4: alerts.webhooks[0].max_attempts: want a whole number from 1 to 100, found "many"`},
		{"max_backoff below backoff", "alerts:\n  webhooks:\n    - url: http://h\n      backoff: 10s\n      max_backoff: 5s",
			"c.yaml:5: alerts.webhooks[0].max_backoff: 5s is less than backoff (10s)"},
		{"headers a list", "alerts:\n  webhooks:\n    - url: http://h\n      headers: [a]", "c.yaml:4: alerts.webhooks[0].headers: want a mapping (key: value lines), found a list"},
		{"bad header name", "alerts:\n  webhooks:\n    - url: http://h\n      headers: {'X Team': ml}", "c.yaml:4: alerts.webhooks[0].headers.X Team: not a valid header name"},
		{"reserved header", "alerts:\n  webhooks:\n    - url: http://h\n      headers: {content-type: text/plain}", "c.yaml:4: alerts.webhooks[0].headers.content-type: set by vram itself; leave it out"},
		{"header twice by case", "alerts:\n  webhooks:\n    - url: http://h\n      headers:\n        X-Team: a\n        x-team: b",
			"c.yaml:6: alerts.webhooks[0].headers.x-team: the same header as the one on line 5 (names ignore case)"},
		{"header value with newline", "alerts:\n  webhooks:\n    - url: http://h\n      headers: {X-A: \"a\\nb\"}",
			"c.yaml:4: alerts.webhooks[0].headers.X-A: a header value cannot carry line breaks or control characters"},
		{"header bare @", "alerts:\n  webhooks:\n    - url: http://h\n      headers: {X-A: \"@\"}",
			`c.yaml:4: alerts.webhooks[0].headers.X-A: "@" must be followed by the path of the file that holds the value`},
		{"unknown webhook key", "alerts:\n  webhooks:\n    - url: http://h\n      retries: 3",
			"c.yaml:4: alerts.webhooks[0].retries: unknown field (known here: url, timeout, max_attempts, backoff, max_backoff, headers)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := decode("c.yaml", alertsNode(t, tc.yaml), noSecrets(t))
			var es Errors
			if !errors.As(err, &es) {
				t.Fatalf("err = %v (%T), want Errors", err, err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("err =\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

func TestDecodeSecrets(t *testing.T) {
	files := map[string]string{
		"/run/secrets/hook": "Bearer abc\r\n",
		"/etc/vram/rel":     "from the config's directory\n",
		"/run/secrets/nl":   "a\nb\n",
		"/run/secrets/void": "\n",
	}
	read := func(path string) (string, error) {
		s, ok := files[path]
		if !ok {
			return "", &os.PathError{Op: "open", Path: path, Err: os.ErrNotExist}
		}
		return s, nil
	}
	ok := "alerts:\n  webhooks:\n    - url: http://h\n      headers:\n        Authorization: \"@/run/secrets/hook\"\n        X-Rel: \"@rel\"\n"
	cfg, err := decode("/etc/vram/config.yaml", alertsNode(t, ok), read)
	if err != nil {
		t.Fatal(err)
	}
	if h := cfg.Webhooks[0].Headers; h["Authorization"] != "Bearer abc" || h["X-Rel"] != "from the config's directory" {
		t.Errorf("headers = %q", h)
	}
	for path, want := range map[string]string{
		"/run/secrets/missing": "c.yaml:5: alerts.webhooks[0].headers.Authorization: reading the value from a file: open /run/secrets/missing: file does not exist",
		"/run/secrets/nl":      "c.yaml:5: alerts.webhooks[0].headers.Authorization: /run/secrets/nl holds characters a header value cannot carry (a line break or a control character)",
		"/run/secrets/void":    "c.yaml:5: alerts.webhooks[0].headers.Authorization: /run/secrets/void is empty",
	} {
		src := "alerts:\n  webhooks:\n    - url: http://h\n      headers:\n        Authorization: \"@" + path + "\"\n"
		_, err := decode("c.yaml", alertsNode(t, src), read)
		if err == nil || err.Error() != want {
			t.Errorf("%s: err = %v\nwant %s", path, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "a\nb") {
			t.Errorf("the error shows the secret: %v", err)
		}
	}
}

func TestReadSecret(t *testing.T) {
	dir := t.TempDir()
	if _, err := readSecret(dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a directory: err = %v", err)
	}
	big := dir + "/big"
	if err := os.WriteFile(big, make([]byte, MaxSecretSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := readSecret(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("a large file: err = %v", err)
	}
	if s, err := readSecret("testdata/token"); err != nil || s != "Bearer s3cret\n" {
		t.Errorf("testdata/token = %q, %v", s, err)
	}
}

func TestParseSlope(t *testing.T) {
	for in, want := range map[string]float64{
		"1MiB/s": 1 << 20, "1 MiB / s": 1 << 20, "120KiB/min": 2048, "0/s": 0, "1.5GiB/h": 1.5 * (1 << 30) / 3600,
	} {
		if got, err := parseSlope(in); err != nil || got != want {
			t.Errorf("parseSlope(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "/s", "1MiB/", "1MiB/s/s", "-1MiB/s", "1MiB/sec"} {
		if v, err := parseSlope(in); err == nil {
			t.Errorf("parseSlope(%q) = %v, want an error", in, v)
		}
	}
}
