package alert

import (
	"math"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzDecode: any YAML either decodes to a Config that keeps the promises
// Decode makes, or gives Errors that each name the file; never a panic.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{
		"alerts:\n  rules:\n    - name: a\n      when: used_above\n      percent: 90\n      for: 5m\n",
		"alerts:\n  rules:\n    - {name: l, when: leak, min_slope: 1MiB/s, severity: critical}\n",
		"alerts:\n  rules:\n    - {name: o, when: orphan_holding, min_bytes: 1GiB}\n    - {name: u, when: unattributed_above, min_bytes: 2GiB}\n",
		"alerts:\n  webhooks:\n    - url: https://h/x\n      timeout: 5s\n      max_attempts: 6\n      headers: {X-Team: ml, Authorization: \"@/s\"}\n",
		"alerts:\n  webhooks:\n    - {url: http://h, backoff: 2s, max_backoff: 1s}\n",
		"x: &a {name: a}\nalerts:\n  rules: [*a, {<<: *a}]\n",
		"alerts: [1, 2]\n",
		"alerts:\n",
		"alerts: {rules: [{name: a, when: used_above, percent: 1e400}]}\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		var doc yaml.Node
		if err := yaml.Unmarshal([]byte(src), &doc); err != nil {
			return
		}
		var n *yaml.Node
		if len(doc.Content) > 0 && doc.Content[0].Kind == yaml.MappingNode {
			root := doc.Content[0]
			for i := 0; i+1 < len(root.Content); i += 2 {
				if root.Content[i].Value == "alerts" {
					n = root.Content[i+1]
				}
			}
		} else {
			n = &doc // a whole document as the section
		}
		secret := func(path string) (string, error) { return "v-" + path, nil }
		cfg, err := decode("f.yaml", n, secret)
		if err != nil {
			es, ok := err.(Errors)
			if !ok || len(es) == 0 {
				t.Fatalf("error %T %v, want non-empty Errors", err, err)
			}
			for _, e := range es {
				if !strings.HasPrefix(e.Error(), "f.yaml") || e.Msg == "" {
					t.Fatalf("error %q does not name the file or says nothing", e.Error())
				}
			}
			return
		}
		names := map[string]bool{}
		for _, r := range cfg.Rules {
			if !validName(r.Name) || names[r.Name] {
				t.Fatalf("rule name %q invalid or repeated", r.Name)
			}
			names[r.Name] = true
			if _, ok := ruleFields[r.When]; !ok {
				t.Fatalf("rule %q: condition %q", r.Name, r.When)
			}
			if r.Severity != SeverityWarning && r.Severity != SeverityCritical {
				t.Fatalf("rule %q: severity %q", r.Name, r.Severity)
			}
			if r.For < 0 || r.KeepFiringFor < 0 || r.MinSlope < 0 || math.IsNaN(r.MinSlope) {
				t.Fatalf("rule %+v", r)
			}
			if r.When == WhenUsedAbove && !(r.Percent > 0 && r.Percent <= 100) {
				t.Fatalf("rule %q: percent %v", r.Name, r.Percent)
			}
			if r.When == WhenUnattributedAbove && r.MinBytes == 0 {
				t.Fatalf("rule %q: min_bytes 0", r.Name)
			}
		}
		for _, w := range cfg.Webhooks {
			if checkURL(w.URL) != nil || w.Timeout <= 0 || w.Backoff <= 0 || w.MaxBackoff < w.Backoff ||
				w.MaxAttempts < 1 || w.MaxAttempts > MaxAttemptsLimit {
				t.Fatalf("webhook %+v", w)
			}
			for k, v := range w.Headers {
				if !validHeaderName(k) || !validHeaderValue(v) || v == "" {
					t.Fatalf("header %q: %q", k, v)
				}
			}
		}
	})
}
