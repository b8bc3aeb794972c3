package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The daemon's metric contract (docs/deploy.md, "Metrics"): the only names
// and labels the dashboard may use.
var (
	vramMetrics = []string{
		"vram_gpu_memory_used_bytes",
		"vram_gpu_memory_total_bytes",
		"vram_gpu_memory_reserved_bytes",
		"vram_gpu_unattributed_bytes",
		"vram_process_memory_used_bytes",
		"vram_process_leak_slope_bytes_per_second",
		"vram_orphaned_memory_bytes",
		"vram_policy_actions_total",
	}
	vramLabels = []string{
		"gpu", "UUID", "modelName", "Hostname", // every series
		"pid", "user", "command", "pod", "namespace", "container", // processes
		"policy", "action", // policy actions
	}
	// promFuncs are the PromQL functions and aggregations the dashboard may
	// call; promWords the keywords.
	promFuncs = []string{
		"sum", "min", "max", "avg", "count", "topk", "bottomk", "rate", "increase",
		"delta", "deriv", "max_over_time", "min_over_time", "avg_over_time",
		"label_values", "clamp_min", "abs", "sort_desc",
	}
	promWords = []string{"by", "without", "and", "or", "unless", "on", "ignoring", "bool", "offset", "group_left", "group_right"}
)

var (
	promString   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promMatchers = regexp.MustCompile(`\{[^{}]*\}`)
	promRange    = regexp.MustCompile(`\[[^\[\]]*\]`)
	promVar      = regexp.MustCompile(`\$\{?\w+\}?`)
	promGrouping = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^()]*)\)`)
	promIdent    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
	promNumber   = regexp.MustCompile(`\b\d+(\.\d+)?(e[+-]?\d+)?\b`)
	matcherLabel = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)
	legendLabel  = regexp.MustCompile(`\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}`)
)

// scanPromQL returns the metric names, label names and functions an
// expression uses, and anything it could not classify. It is not a PromQL
// parser: it blanks strings, matchers, ranges and Grafana variables, reads
// the labels of groupings, and classifies the identifiers left.
func scanPromQL(expr string) (metrics, labels, funcs, unknown []string) {
	for _, m := range promMatchers.FindAllString(promString.ReplaceAllString(expr, `""`), -1) {
		for _, l := range matcherLabel.FindAllStringSubmatch(m, -1) {
			labels = append(labels, l[1])
		}
	}
	s := promString.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promRange.ReplaceAllString(s, " ")
	s = promVar.ReplaceAllString(s, " 1 ")
	for _, g := range promGrouping.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(g[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels = append(labels, l)
			}
		}
	}
	s = promGrouping.ReplaceAllString(s, " $1 ")
	s = promNumber.ReplaceAllString(s, " ")
	for _, tok := range promIdent.FindAllString(s, -1) {
		name := strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(tok), "("))
		switch {
		case slices.Contains(promWords, name):
		case slices.Contains(promFuncs, name):
			funcs = append(funcs, name)
		case slices.Contains(vramMetrics, name) && !strings.HasSuffix(tok, "("):
			metrics = append(metrics, name)
		case strings.HasSuffix(tok, "("):
			unknown = append(unknown, name+"()")
		default:
			unknown = append(unknown, name)
		}
	}
	return metrics, labels, funcs, unknown
}

func TestScanPromQL(t *testing.T) {
	for _, tc := range []struct {
		expr          string
		metrics       []string
		labels        []string
		unknown       []string
		unknownLabels bool
	}{
		{
			expr:    `topk($topn, vram_process_memory_used_bytes{Hostname=~"$host", gpu=~"$gpu"})`,
			metrics: []string{"vram_process_memory_used_bytes"},
			labels:  []string{"Hostname", "gpu"},
		},
		{
			expr:    `sum by (Hostname, gpu) (increase(vram_policy_actions_total{gpu="0"}[$__rate_interval]))`,
			metrics: []string{"vram_policy_actions_total"},
			labels:  []string{"gpu", "Hostname", "gpu"},
		},
		{
			expr:    `vram_gpu_memory_used_bytes / vram_gpu_memory_total_bytes > 0.9`,
			metrics: []string{"vram_gpu_memory_used_bytes", "vram_gpu_memory_total_bytes"},
		},
		{
			expr:    `DCGM_FI_DEV_FB_USED{gpu="0"} + vram_gpu_memory_used_bytes`,
			metrics: []string{"vram_gpu_memory_used_bytes"},
			labels:  []string{"gpu"},
			unknown: []string{"DCGM_FI_DEV_FB_USED"},
		},
		{
			expr:    `histogram_quantile(0.9, vram_gpu_memory_used_bytes)`,
			metrics: []string{"vram_gpu_memory_used_bytes"},
			unknown: []string{"histogram_quantile()"},
		},
		{
			expr:    `label_values(vram_gpu_memory_total_bytes{Hostname=~"$host"}, gpu)`,
			metrics: []string{"vram_gpu_memory_total_bytes"},
			labels:  []string{"Hostname"},
			unknown: []string{"gpu"}, // label_values' second argument: the caller checks it
		},
	} {
		metrics, labels, _, unknown := scanPromQL(tc.expr)
		if !slices.Equal(metrics, tc.metrics) || !slices.Equal(labels, tc.labels) || !slices.Equal(unknown, tc.unknown) {
			t.Errorf("scanPromQL(%q)\n got metrics %q labels %q unknown %q\nwant metrics %q labels %q unknown %q",
				tc.expr, metrics, labels, unknown, tc.metrics, tc.labels, tc.unknown)
		}
	}
}

// dashboardPanel is the part of a Grafana panel the checks read.
type dashboardPanel struct {
	ID         int    `json:"id"`
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	GridPos struct{ X, Y, W, H int } `json:"gridPos"`
	Targets []struct {
		RefID        string `json:"refId"`
		Expr         string `json:"expr"`
		LegendFormat string `json:"legendFormat"`
	} `json:"targets"`
	Panels []dashboardPanel `json:"panels"` // a collapsed row's panels
}

type dashboard struct {
	Title      string           `json:"title"`
	UID        string           `json:"uid"`
	Panels     []dashboardPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

// checkDashboard returns the problems of a dashboard document.
func checkDashboard(data []byte) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{fmt.Sprintf("not JSON: %v", err)}
	}
	if d.Title == "" || d.UID == "" {
		bad("dashboard needs a title and a uid")
	}
	vars := map[string]bool{"__rate_interval": true, "__range": true, "__interval": true}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	used := map[string]bool{}
	checkExpr := func(where, expr string) {
		for _, v := range promVar.FindAllString(expr, -1) {
			if name := strings.Trim(v, "${}"); !vars[name] {
				bad("%s: variable %s is not defined", where, v)
			}
		}
		metrics, labels, _, unknown := scanPromQL(expr)
		if len(metrics) == 0 {
			bad("%s: %q uses no vram metric", where, expr)
		}
		for _, m := range metrics {
			used[m] = true
		}
		for _, u := range unknown {
			bad("%s: %q uses %s, which is not in the daemon's metric contract", where, expr, u)
		}
		for _, l := range labels {
			if !slices.Contains(vramLabels, l) {
				bad("%s: label %s is not one the daemon exports", where, l)
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct{ Query string }
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				bad("variable %s: query is neither a string nor an object", v.Name)
				continue
			}
		}
		// label_values(metric{...}, label): the last argument is a label.
		inner := strings.TrimSuffix(strings.TrimPrefix(q.Query, "label_values("), ")")
		cut := strings.LastIndex(inner, ",")
		if !strings.HasPrefix(q.Query, "label_values(") || cut < 0 {
			bad("variable %s: query %q is not label_values(metric, label)", v.Name, q.Query)
			continue
		}
		checkExpr("variable "+v.Name, inner[:cut])
		if l := strings.TrimSpace(inner[cut+1:]); !slices.Contains(vramLabels, l) {
			bad("variable %s: label %s is not one the daemon exports", v.Name, l)
		}
	}
	var panels []dashboardPanel
	for _, pn := range d.Panels {
		panels = append(panels, pn)
		panels = append(panels, pn.Panels...)
	}
	ids := map[int]bool{}
	type cell struct{ x, y int }
	taken := map[cell]string{}
	for _, pn := range panels {
		where := fmt.Sprintf("panel %d %q", pn.ID, pn.Title)
		if pn.ID == 0 || ids[pn.ID] {
			bad("%s: missing or repeated id", where)
		}
		ids[pn.ID] = true
		g := pn.GridPos
		if g.W <= 0 || g.H <= 0 || g.X < 0 || g.Y < 0 || g.X+g.W > 24 {
			bad("%s: gridPos %+v outside the 24-column grid", where, g)
		}
	overlap:
		for x := g.X; x < g.X+g.W; x++ {
			for y := g.Y; y < g.Y+g.H; y++ {
				if other, ok := taken[cell{x, y}]; ok {
					bad("%s overlaps %s at (%d,%d)", where, other, x, y)
					break overlap
				}
				taken[cell{x, y}] = where
			}
		}
		if pn.Type == "row" {
			continue
		}
		if pn.Datasource == nil || pn.Datasource.UID != "${datasource}" {
			bad("%s: datasource must be the ${datasource} variable", where)
		}
		if len(pn.Targets) == 0 {
			bad("%s: no queries", where)
		}
		for _, tg := range pn.Targets {
			checkExpr(where, tg.Expr)
			for _, l := range legendLabel.FindAllStringSubmatch(tg.LegendFormat, -1) {
				if !slices.Contains(vramLabels, l[1]) {
					bad("%s: legend uses label %s, which the daemon does not export", where, l[1])
				}
			}
		}
	}
	for _, m := range vramMetrics {
		if !used[m] {
			bad("no panel shows %s", m)
		}
	}
	return p
}

func TestGrafanaDashboard(t *testing.T) {
	data, err := os.ReadFile("grafana/vram-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range checkDashboard(data) {
		t.Error(problem)
	}
}

// TestDashboardChecksCatchDamage: a foreign metric, an unknown label, an
// undefined variable, a dropped metric and broken JSON are each reported.
func TestDashboardChecksCatchDamage(t *testing.T) {
	good, err := os.ReadFile("grafana/vram-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, old, new, want string }{
		{"foreign metric", "vram_orphaned_memory_bytes{", "DCGM_FI_DEV_FB_USED{", "DCGM_FI_DEV_FB_USED"},
		{"unknown label", "sum by (Hostname, gpu, UUID)", "sum by (Hostname, gpu, uuid)", "label uuid"},
		{"undefined variable", "topk($topn,", "topk($limit,", "$limit"},
		{"legend label", "{{Hostname}}/{{gpu}}", "{{host}}/{{gpu}}", "legend uses label host"},
		{"overlap", `"x": 16,`, `"x": 15,`, "overlaps"},
		{"no vram metric", `"expr": "topk($topn, vram_process_leak_slope_bytes_per_second`, `"expr": "topk($topn, vram_process_leak_slope_bytes_per_second0`, "vram_process_leak_slope_bytes_per_second0"},
		{"broken JSON", `"panels": [`, `"panels": [[`, "not JSON"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !strings.Contains(string(good), tc.old) {
				t.Fatalf("fixture text %q not in the dashboard", tc.old)
			}
			bad := strings.Replace(string(good), tc.old, tc.new, 1)
			problems := checkDashboard([]byte(bad))
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("damage not caught: problems %q, want one mentioning %q", problems, tc.want)
			}
		})
	}
}
