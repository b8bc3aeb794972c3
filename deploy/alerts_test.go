package deploy

import (
	"bytes"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// alertFuncs are Prometheus's template functions the annotations may use.
var alertFuncs = []string{"humanize", "humanize1024", "humanizeDuration", "humanizePercentage"}

var (
	alertName     = regexp.MustCompile(`^Vram[A-Z][A-Za-z0-9]*$`)
	alertTemplate = regexp.MustCompile(`\{\{\s*([^}]*?)\s*\}\}`)
	alertLabelRef = regexp.MustCompile(`^\$labels\.([A-Za-z_][A-Za-z0-9_]*)$`)
)

// checkRules returns the problems of a PrometheusRule: every alert named,
// with a severity, a summary and a "for"; its expression on the daemon's
// metrics and labels only; its annotations using only labels and
// functions that exist.
func checkRules(pr obj) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	if strAt(pr, "apiVersion") != "monitoring.coreos.com/v1" || strAt(pr, "kind") != "PrometheusRule" {
		bad("not a monitoring.coreos.com/v1 PrometheusRule")
	}
	groups := listAt(pr, "spec", "groups")
	if len(groups) == 0 {
		bad("no rule groups")
	}
	seen := map[string]bool{}
	for _, g := range groups {
		for _, r := range listAt(g, "rules") {
			name := strAt(r, "alert")
			where := "alert " + name
			if !alertName.MatchString(name) || seen[name] {
				bad("%s: name missing, repeated or not Vram…", where)
			}
			seen[name] = true
			if d, err := time.ParseDuration(strAt(r, "for")); err != nil || d <= 0 {
				bad("%s: for=%q is not a positive duration", where, strAt(r, "for"))
			}
			if sev := strAt(r, "labels", "severity"); !slices.Contains([]string{"critical", "warning", "info"}, sev) {
				bad("%s: severity %q", where, sev)
			}
			if strAt(r, "annotations", "summary") == "" {
				bad("%s: no summary", where)
			}
			metrics, labels, _, unknown := scanPromQL(strAt(r, "expr"))
			if len(metrics) == 0 {
				bad("%s: expression uses no vram metric", where)
			}
			for _, u := range unknown {
				bad("%s: expression uses %s, outside the daemon's metric contract", where, u)
			}
			for _, l := range labels {
				if !slices.Contains(vramLabels, l) {
					bad("%s: label %s is not one the daemon exports", where, l)
				}
			}
			for _, text := range mapAt(r, "annotations") {
				for _, m := range alertTemplate.FindAllStringSubmatch(fmt.Sprint(text), -1) {
					parts := strings.Split(m[1], "|")
					ref := strings.TrimSpace(parts[0])
					if l := alertLabelRef.FindStringSubmatch(ref); l != nil {
						if !slices.Contains(vramLabels, l[1]) {
							bad("%s: annotation uses label %s, which the daemon does not export", where, l[1])
						}
					} else if ref != "$value" {
						bad("%s: annotation template {{ %s }} uses neither $labels nor $value", where, m[1])
					}
					for _, f := range parts[1:] {
						if f = strings.TrimSpace(f); !slices.Contains(alertFuncs, f) {
							bad("%s: annotation function %s is not a Prometheus template function", where, f)
						}
					}
				}
			}
		}
	}
	return p
}

func TestPrometheusRule(t *testing.T) {
	docs := readYAMLFile(t, "kubernetes/prometheusrule.yaml")
	if len(docs) != 1 {
		t.Fatalf("%d documents, want one PrometheusRule", len(docs))
	}
	for _, problem := range checkRules(docs[0]) {
		t.Error(problem)
	}
	if ns := strAt(docs[0], "metadata", "namespace"); ns != "vram-system" {
		t.Errorf("namespace %q", ns)
	}
}

func TestRuleChecksCatchDamage(t *testing.T) {
	good := readYAMLFile(t, "kubernetes/prometheusrule.yaml")[0]
	rule := func(pr obj) obj { return mapAt(pr, "spec", "groups", "0", "rules", "1") }
	for _, tc := range []struct {
		name   string
		damage func(r obj)
		want   string
	}{
		{"foreign metric", func(r obj) { r["expr"] = "DCGM_FI_DEV_FB_USED > 0" }, "DCGM_FI_DEV_FB_USED"},
		{"no for", func(r obj) { delete(r, "for") }, "for="},
		{"severity", func(r obj) { mapAt(r, "labels")["severity"] = "page" }, "severity"},
		{"unknown label", func(r obj) { mapAt(r, "annotations")["summary"] = "{{ $labels.uuid }}" }, "label uuid"},
		{"grafana function", func(r obj) { mapAt(r, "annotations")["summary"] = "{{ $value | bytes }}" }, "function bytes"},
		{"repeated name", func(r obj) { r["alert"] = "VramProcessLeakFillsGPU" }, "repeated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pr := deepCopy(good).(obj)
			tc.damage(rule(pr))
			problems := checkRules(pr)
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("damage not caught: problems %q, want one mentioning %q", problems, tc.want)
			}
		})
	}
}

// TestChartRulesMatchPlain: the chart renders no PrometheusRule by default,
// and with prometheusRule.enabled the same rules as the plain file, with
// its thresholds taken from values.
func TestChartRulesMatchPlain(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := renderDocs(t, c, nil)
	if n := len(byKind(docs)["PrometheusRule"]); n != 0 {
		t.Errorf("%d PrometheusRules with default values, want none", n)
	}
	docs, _ = renderDocs(t, c, obj{"prometheusRule": obj{"enabled": true}})
	rendered := byKind(docs)["PrometheusRule"]
	if len(rendered) != 1 {
		t.Fatalf("%d PrometheusRules with prometheusRule.enabled, want 1", len(rendered))
	}
	for _, problem := range checkRules(rendered[0]) {
		t.Error(problem)
	}
	plain := readYAMLFile(t, "kubernetes/prometheusrule.yaml")[0]
	a, _ := yaml.Marshal(rendered[0]["spec"])
	b, _ := yaml.Marshal(plain["spec"])
	if !bytes.Equal(a, b) {
		t.Errorf("chart and plain rules differ:\nchart:\n%s\nplain:\n%s", a, b)
	}
	docs, _ = renderDocs(t, c, obj{"prometheusRule": obj{"enabled": true, "orphanedBytes": 2147483648, "nearlyFullRatio": 0.9}})
	spec, _ := yaml.Marshal(byKind(docs)["PrometheusRule"][0]["spec"])
	for _, s := range []string{"vram_orphaned_memory_bytes > 2147483648", "vram_gpu_memory_total_bytes > 0.9"} {
		if !strings.Contains(string(spec), s) {
			t.Errorf("threshold override missing %q in:\n%s", s, spec)
		}
	}
}
