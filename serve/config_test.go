package serve

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseConfigFull(t *testing.T) {
	c, err := ReadConfig("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		File: "testdata/full.yaml", Interval: 500 * time.Millisecond, HistoryInterval: 5 * time.Second,
		RawRetention: 12 * time.Hour, AggregateRetention: 240 * time.Hour, TopN: 5,
		PolicyFile: filepath.Join("testdata", "policy.yaml"),
		HTTP:       HTTPConfig{Mutations: true, TokenFile: filepath.Join("testdata", "token"), AllowRemote: true},
	}
	if c.Alerts == nil || c.Alerts.Line != 14 {
		t.Errorf("alerts node = %+v, want the mapping on line 14", c.Alerts)
	}
	c.Alerts = nil
	if c != want {
		t.Errorf("got  %+v\nwant %+v", c, want)
	}
	if !c.MutationsEnabled() {
		t.Error("mutations: true, read_only: false should enable mutations")
	}
}

func TestParseConfigDefaults(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		check      func(t *testing.T, c Config)
	}{
		{"only version", "version: 1\n", func(t *testing.T, c Config) {
			d := DefaultConfig()
			d.File = "c.yaml"
			if c != d {
				t.Errorf("got %+v, want the defaults %+v", c, d)
			}
			if c.MutationsEnabled() {
				t.Error("mutations on by default")
			}
		}},
		{"slow samples move the default history interval", "version: 1\ninterval: 30s\n", func(t *testing.T, c Config) {
			if c.HistoryInterval != 30*time.Second {
				t.Errorf("history_interval = %v, want 30s (one tick per sample)", c.HistoryInterval)
			}
		}},
		{"empty sections", "version: 1\nhttp:\nretention:\nkubernetes:\nalerts:\n", func(t *testing.T, c Config) {
			if c.Alerts != nil || !c.PodResourcesAuto || c.RawRetention != DefaultRawRetention {
				t.Errorf("empty sections changed the defaults: %+v", c)
			}
		}},
		{"socket off", "version: 1\nkubernetes: {pod_resources_socket: \"\"}\n", func(t *testing.T, c Config) {
			if c.PodResourcesSocket != "" || c.PodResourcesAuto {
				t.Errorf("socket %q auto %v, want off", c.PodResourcesSocket, c.PodResourcesAuto)
			}
		}},
		{"socket named", "version: 1\nkubernetes: {pod_resources_socket: /run/k.sock}\n", func(t *testing.T, c Config) {
			if c.PodResourcesSocket != "/run/k.sock" || c.PodResourcesAuto {
				t.Errorf("socket %q auto %v", c.PodResourcesSocket, c.PodResourcesAuto)
			}
		}},
		{"read-only overrides mutations", "version: 1\nhttp: {mutations: true, token_file: /t, read_only: true}\n", func(t *testing.T, c Config) {
			if c.MutationsEnabled() {
				t.Error("read_only: true left mutations enabled")
			}
		}},
		{"history equal to interval", "version: 1\ninterval: 2s\nhistory_interval: 2s\n", func(t *testing.T, c Config) {
			if c.HistoryInterval != 2*time.Second {
				t.Errorf("history_interval = %v", c.HistoryInterval)
			}
		}},
		{"history shorter than the default interval, for a shorter --interval", "version: 1\nhistory_interval: 500ms\n", func(t *testing.T, c Config) {
			if c.HistoryInterval != 500*time.Millisecond || c.Interval != DefaultInterval {
				t.Errorf("interval %v, history_interval %v", c.Interval, c.HistoryInterval)
			}
			short := c
			short.Interval = 100 * time.Millisecond // what --interval 100ms does
			if short.SettleHistory() || short.HistoryInterval != 500*time.Millisecond {
				t.Errorf("with --interval 100ms: history_interval %v, want 500ms kept", short.HistoryInterval)
			}
			if !c.SettleHistory() || c.HistoryInterval != c.Interval {
				t.Errorf("without the flag: history_interval %v, want raised to the interval %v", c.HistoryInterval, c.Interval)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseConfig("c.yaml", []byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, c)
		})
	}
}

func TestParseConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []string // each a substring of one error, in order
	}{
		{"empty", "", []string{"c.yaml: empty file: a configuration needs at least version: 1"}},
		{"comment only", "# nothing\n", []string{"c.yaml: empty file"}},
		{"not yaml", "version: [1\n", []string{"c.yaml:1: not valid YAML"}},
		{"two documents", "version: 1\n---\nversion: 1\n", []string{"c.yaml:2: a second YAML document"}},
		{"a list", "- version: 1\n", []string{"c.yaml:1: want a mapping (key: value lines), found a list"}},
		{"no version", "interval: 1s\n", []string{"c.yaml:1: version: missing"}},
		{"wrong version", "version: 2\n", []string{`c.yaml:1: version: "2" is not a version this vram reads (want 1)`}},
		{"unknown key", "version: 1\nsample_interval: 1s\n", []string{"c.yaml:2: sample_interval: unknown field (known here: version, interval"}},
		{"unknown nested key", "version: 1\nhttp: {token: x}\n", []string{"c.yaml:2: http.token: unknown field (known here: mutations, token_file, read_only, allow_remote)"}},
		{"duplicate", "version: 1\ninterval: 1s\ninterval: 2s\n", []string{"c.yaml:3: interval: set twice (first on line 2)"}},
		{"interval not a duration", "version: 1\ninterval: 1\n", []string{`c.yaml:2: interval: want a duration such as 500ms, 10s or 24h, found "1"`}},
		{"interval too short", "version: 1\ninterval: 1ms\n", []string{"c.yaml:2: interval: 1ms is out of range: must be between 10ms and 1h0m0s"}},
		{"interval too long", "version: 1\ninterval: 2h\n", []string{"interval: 2h is out of range"}},
		{"negative interval", "version: 1\ninterval: -1s\n", []string{"interval: -1s is out of range"}},
		{"history shorter than interval", "version: 1\ninterval: 5s\nhistory_interval: 1s\n", []string{"c.yaml:3: history_interval: 1s is shorter than interval (5s)"}},
		{"interval a list", "version: 1\ninterval: [1s]\n", []string{"c.yaml:2: interval: want a value, found a list"}},
		{"interval empty", "version: 1\ninterval:\n", []string{"c.yaml:2: interval: want a value, found nothing"}},
		{"raw above aggregate", "version: 1\nretention: {raw: 48h, aggregate: 24h}\n", []string{"c.yaml:2: retention.aggregate: 24h0m0s is shorter than retention.raw (48h0m0s)"}},
		{"raw too short", "version: 1\nretention: {raw: 10s}\n", []string{"retention.raw: 10s is out of range: must be between 1m0s and"}},
		{"retention a value", "version: 1\nretention: 24h\n", []string{`c.yaml:2: retention: want a mapping (key: value lines), found "24h"`}},
		{"top_n zero", "version: 1\ntop_n: 0\n", []string{`c.yaml:2: top_n: want a whole number from 1 to 1000, found "0"`}},
		{"top_n word", "version: 1\ntop_n: ten\n", []string{`top_n: want a whole number from 1 to 1000, found "ten"`}},
		{"policy empty", "version: 1\npolicy_file: \"\"\n", []string{`c.yaml:2: policy_file: want a file path, found ""`}},
		{"mutations without token", "version: 1\nhttp:\n  mutations: true\n", []string{"c.yaml:3: http.token_file: missing: mutations: true needs the file holding the bearer token"}},
		{"mutations not bool", "version: 1\nhttp: {mutations: yes}\n", []string{`c.yaml:2: http.mutations: want true or false, found "yes"`}},
		{"alerts a list", "version: 1\nalerts: [a]\n", []string{"c.yaml:2: alerts: want a mapping (rules:, webhooks:), found a list"}},
		{"socket a list", "version: 1\nkubernetes: {pod_resources_socket: [a]}\n", []string{"kubernetes.pod_resources_socket: want a value, found a list"}},
		{"alias", "version: 1\ninterval: &i 1s\nhistory_interval: *i\n", []string{"c.yaml:3: history_interval: want a value, found an alias"}},
		{"merge key", "version: 1\nhttp:\n  <<: {mutations: true}\n", []string{"c.yaml:3: http: merge keys (<<) are not allowed"}},
		{"several problems", "version: 1\ninterval: x\ntop_n: -1\nfoo: 1\n", []string{"c.yaml:2: interval", "c.yaml:3: top_n", "c.yaml:4: foo: unknown field"}},
		{"too large", "version: 1\n" + strings.Repeat("#", MaxConfigSize), []string{"c.yaml: larger than 1048576 bytes"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseConfig("c.yaml", []byte(tc.yaml))
			var es ConfigErrors
			if !errors.As(err, &es) {
				t.Fatalf("error %v (%T), want ConfigErrors", err, err)
			}
			if len(es) != len(tc.want) {
				t.Fatalf("%d errors, want %d:\n%v", len(es), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.Contains(es[i].Error(), w) {
					t.Errorf("error %d = %q, want it to contain %q", i, es[i].Error(), w)
				}
			}
		})
	}
}

func TestReadConfigPaths(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(path, []byte("version: 1\npolicy_file: /etc/vram/policy.yaml\nhttp: {mutations: true, token_file: sub/token}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := ReadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.PolicyFile != "/etc/vram/policy.yaml" {
		t.Errorf("absolute policy_file changed to %q", c.PolicyFile)
	}
	if want := filepath.Join(dir, "sub", "token"); c.HTTP.TokenFile != want {
		t.Errorf("token_file = %q, want %q (relative to the config file)", c.HTTP.TokenFile, want)
	}
	_, err = ReadConfig(filepath.Join(dir, "missing.yaml"))
	if err == nil || !strings.Contains(err.Error(), "missing.yaml") || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func FuzzParseConfig(f *testing.F) {
	full, err := os.ReadFile("testdata/full.yaml")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(full)
	f.Add([]byte("version: 1\n"))
	f.Add([]byte("version: 1\ninterval: 10ms\nhistory_interval: 1h\nretention: {raw: 1m, aggregate: 1m}\n"))
	f.Add([]byte("version: 1\nhttp: &h {mutations: true}\nalerts: *h\n"))
	f.Add([]byte("a: &a [*a]\n"))
	f.Add([]byte("version: 1\nkubernetes:\n  pod_resources_socket: \"\\0\"\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseConfig("f.yaml", data)
		if err != nil {
			var es ConfigErrors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error of the wrong type: %T %v", err, err)
			}
			for _, e := range es {
				if e.File != "f.yaml" || e.Msg == "" {
					t.Fatalf("error without file or message: %+v", e)
				}
			}
			return
		}
		switch {
		case c.Interval < MinInterval || c.Interval > MaxInterval:
			t.Fatalf("accepted interval %v", c.Interval)
		case c.HistoryInterval < c.Interval:
			t.Fatalf("accepted history_interval %v < interval %v", c.HistoryInterval, c.Interval)
		case c.RawRetention < MinRawRetention || c.AggregateRetention < c.RawRetention:
			t.Fatalf("accepted retention %v / %v", c.RawRetention, c.AggregateRetention)
		case c.TopN < 1 || c.TopN > MaxTopN:
			t.Fatalf("accepted top_n %d", c.TopN)
		case c.HTTP.Mutations && c.HTTP.TokenFile == "":
			t.Fatal("accepted mutations without a token file")
		case c.File != "f.yaml":
			t.Fatalf("File = %q", c.File)
		}
	})
}
