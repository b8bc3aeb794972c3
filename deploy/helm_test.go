package deploy

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/serve"
)

const chartDir = "helm/vram"

// chart is a chart read from disk: its metadata, default values and
// templates by path ("vram/templates/daemonset.yaml", as helm names them).
type chart struct {
	meta      obj
	values    obj
	templates map[string]string
}

func loadChart(dir string) (*chart, error) {
	c := &chart{templates: map[string]string{}}
	for name, dst := range map[string]*obj{"Chart.yaml": &c.meta, "values.yaml": &c.values} {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		if err := yaml.Unmarshal(data, dst); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
	}
	files, err := filepath.Glob(filepath.Join(dir, "templates", "*"))
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		c.templates[filepath.Join(strAt(c.meta, "name"), "templates", filepath.Base(f))] = string(data)
	}
	return c, nil
}

// merge overlays override onto base as helm merges --set values: maps merge
// key by key, anything else replaces.
func merge(base, override obj) obj {
	out := deepCopy(base).(obj)
	for k, v := range override {
		if bm, ok := out[k].(obj); ok {
			if om, ok := v.(obj); ok {
				out[k] = merge(bm, om)
				continue
			}
		}
		out[k] = deepCopy(v)
	}
	return out
}

// errFail is what the template function fail returns, as in helm.
var errFail = errors.New("fail")

// render renders every template of the chart with values overlaid on the
// chart's defaults, the way `helm template` does for the functions used
// here. Files whose name starts with "_" only define templates; NOTES.txt
// is returned on its own. A value the templates ask for and values.yaml
// lacks is an error (helm would print nothing): that catches typos.
func (c *chart) render(release, namespace string, override obj) (manifests map[string]string, notes string, err error) {
	root := template.New("chart").Option("missingkey=error")
	root.Funcs(template.FuncMap{
		"include": func(name string, data any) (string, error) {
			var b strings.Builder
			err := root.ExecuteTemplate(&b, name, data)
			return b.String(), err
		},
		"toYaml": func(v any) (string, error) {
			var b bytes.Buffer
			enc := yaml.NewEncoder(&b)
			enc.SetIndent(2)
			if err := enc.Encode(v); err != nil {
				return "", err
			}
			return strings.TrimSuffix(b.String(), "\n"), nil
		},
		"indent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"nindent": func(n int, s string) string {
			pad := strings.Repeat(" ", n)
			return "\n" + pad + strings.ReplaceAll(s, "\n", "\n"+pad)
		},
		"quote": func(v any) string { return fmt.Sprintf("%q", fmt.Sprint(v)) },
		"default": func(def, v any) any {
			if v == nil || v == "" || v == false || v == 0 {
				return def
			}
			return v
		},
		"trunc": func(n int, s string) string {
			if len(s) > n {
				return s[:n]
			}
			return s
		},
		"trimSuffix": func(suffix, s string) string { return strings.TrimSuffix(s, suffix) },
		"contains":   func(sub, s string) bool { return strings.Contains(s, sub) },
		"sha256sum": func(s string) string {
			h := sha256.Sum256([]byte(s))
			return hex.EncodeToString(h[:])
		},
		"required": func(msg string, v any) (any, error) {
			if v == nil || v == "" {
				return nil, errors.New(msg)
			}
			return v, nil
		},
		"int64": func(v any) (int64, error) {
			switch n := v.(type) {
			case int:
				return int64(n), nil
			case int64:
				return n, nil
			case float64:
				return int64(n), nil
			}
			return 0, fmt.Errorf("int64: %v is not a number", v)
		},
		"fail": func(msg string) (string, error) { return "", fmt.Errorf("%w: %s", errFail, msg) },
	})
	names := slices.Sorted(maps.Keys(c.templates))
	for _, name := range names {
		if _, err := root.New(name).Parse(c.templates[name]); err != nil {
			return nil, "", err
		}
	}
	chartName := strAt(c.meta, "name")
	data := map[string]any{
		"Values": merge(c.values, override),
		"Release": map[string]any{
			"Name": release, "Namespace": namespace, "Service": "Helm",
			"IsInstall": true, "IsUpgrade": false, "Revision": 1,
		},
		"Chart": map[string]any{
			"Name": chartName, "Version": strAt(c.meta, "version"), "AppVersion": strAt(c.meta, "appVersion"),
		},
		"Template": map[string]any{"BasePath": chartName + "/templates"},
	}
	manifests = map[string]string{}
	for _, name := range names {
		base := filepath.Base(name)
		if strings.HasPrefix(base, "_") {
			continue
		}
		var b strings.Builder
		if err := root.ExecuteTemplate(&b, name, data); err != nil {
			return nil, "", err
		}
		if base == "NOTES.txt" {
			notes = b.String()
			continue
		}
		manifests[name] = b.String()
	}
	return manifests, notes, nil
}

// renderDocs renders the chart and decodes every manifest.
func renderDocs(t *testing.T, c *chart, override obj) ([]obj, string) {
	t.Helper()
	manifests, notes, err := c.render("vram", "vram-system", override)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	var docs []obj
	for _, name := range slices.Sorted(maps.Keys(manifests)) {
		d, err := decodeAll([]byte(manifests[name]))
		if err != nil {
			t.Fatalf("%s does not decode: %v\n%s", name, err, manifests[name])
		}
		docs = append(docs, d...)
	}
	return docs, notes
}

func TestChartMetadata(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	if strAt(c.meta, "apiVersion") != "v2" || strAt(c.meta, "name") != "vram" || strAt(c.meta, "type") != "application" {
		t.Errorf("Chart.yaml: apiVersion %q name %q type %q, want v2 vram application",
			strAt(c.meta, "apiVersion"), strAt(c.meta, "name"), strAt(c.meta, "type"))
	}
	semver := regexp.MustCompile(`^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`)
	for _, k := range []string{"version", "appVersion"} {
		if !semver.MatchString(strAt(c.meta, k)) {
			t.Errorf("Chart.yaml %s %q is not a semantic version", k, strAt(c.meta, k))
		}
	}
	// The settings the chart promises to expose.
	for _, keys := range [][]string{
		{"image", "repository"}, {"image", "tag"}, {"addr", "port"}, {"addr", "host"},
		{"retention", "raw"}, {"retention", "aggregate"}, {"policies", "enabled"}, {"readonly"},
		{"token", "existingSecret"}, {"serviceMonitor", "enabled"}, {"nodeSelector"},
		{"tolerations"}, {"resources"}, {"podResources", "enabled"}, {"storage", "type"},
	} {
		if _, ok := lookup(c.values, keys...); !ok {
			t.Errorf("values.yaml has no %s", strings.Join(keys, "."))
		}
	}
}

// TestChartRenders renders the chart with its defaults and with variants,
// and holds each rendering to the same checks as the plain manifests.
func TestChartRenders(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	base := posture{namespace: "vram-system", podResources: true, readonly: true, storage: "hostPath", monitor: true}
	for _, tc := range []struct {
		name     string
		values   obj
		want     func(posture) posture
		notes    []string
		extra    func(t *testing.T, docs []obj)
		notesNot []string
	}{
		{name: "defaults", notes: []string{"Read-only", "ServiceMonitor vram"}, notesNot: []string{"ENABLED"}},
		{
			name:   "policies on",
			values: obj{"policies": obj{"enabled": true}},
			want:   func(p posture) posture { p.policies = true; return p },
			notes:  []string{"Policies are ENABLED", "CAP_KILL"},
		},
		{
			name:   "non-root without pod-resources",
			values: obj{"podResources": obj{"enabled": false}, "storage": obj{"type": "emptyDir"}},
			want:   func(p posture) posture { p.podResources = false; p.storage = "emptyDir"; return p },
			extra: func(t *testing.T, docs []obj) {
				ds := byKind(docs)["DaemonSet"][0]
				if uid, _ := lookupT[int](ds, "spec", "template", "spec", "securityContext", "runAsUser"); uid != 65534 {
					t.Errorf("runAsUser %d, want 65534", uid)
				}
			},
		},
		{
			name:     "token and read-write",
			values:   obj{"token": obj{"existingSecret": "vram-token"}, "readonly": false},
			want:     func(p posture) posture { p.tokenSecret = "vram-token"; p.readonly = false; return p },
			notesNot: []string{"Read-only", "stay disabled"},
		},
		{
			name:   "read-write without token",
			values: obj{"readonly": false},
			want:   func(p posture) posture { p.readonly = false; return p },
			notes:  []string{"mutating API calls stay disabled"},
		},
		{
			name:   "loopback address",
			values: obj{"addr": obj{"host": "127.0.0.1"}},
			extra: func(t *testing.T, docs []obj) {
				cfg, err := serve.ParseConfig("config.yaml", []byte(strAt(byKind(docs)["ConfigMap"][0], "data", "config.yaml")))
				if err != nil || cfg.HTTP.AllowRemote {
					t.Errorf("loopback --addr: allow_remote %v, %v; want false", cfg.HTTP.AllowRemote, err)
				}
			},
		},
		{
			name:     "no ServiceMonitor",
			values:   obj{"serviceMonitor": obj{"enabled": false}},
			want:     func(p posture) posture { p.monitor = false; return p },
			notesNot: []string{"ServiceMonitor"},
		},
		{
			name:   "image, port and scheduling",
			values: obj{"image": obj{"tag": "1.2.3"}, "addr": obj{"port": 9500}, "nodeSelector": obj{"gpu": "yes"}, "runtimeClassName": ""},
			extra: func(t *testing.T, docs []obj) {
				k := byKind(docs)
				ds := k["DaemonSet"][0]
				spec := mapAt(ds, "spec", "template", "spec")
				if img := strAt(spec, "containers", "0", "image"); img != "ghcr.io/vramhq/vram:1.2.3" {
					t.Errorf("image %q", img)
				}
				if got := mapAt(spec, "nodeSelector"); len(got) != 2 || got["gpu"] != "yes" {
					t.Errorf("nodeSelector %v: the override should merge with the default", got)
				}
				if _, ok := spec["runtimeClassName"]; ok {
					t.Errorf("empty runtimeClassName still rendered")
				}
				if port, _ := lookupT[int](k["Service"][0], "spec", "ports", "0", "port"); port != 9500 {
					t.Errorf("Service port %d, want 9500", port)
				}
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			docs, notes := renderDocs(t, c, tc.values)
			want := base
			if tc.want != nil {
				want = tc.want(base)
			}
			for _, problem := range checkObjects(docs, want) {
				t.Error(problem)
			}
			for _, s := range tc.notes {
				if !strings.Contains(notes, s) {
					t.Errorf("NOTES.txt lacks %q:\n%s", s, notes)
				}
			}
			for _, s := range tc.notesNot {
				if strings.Contains(notes, s) {
					t.Errorf("NOTES.txt should not say %q:\n%s", s, notes)
				}
			}
			if tc.extra != nil {
				tc.extra(t, docs)
			}
		})
	}
}

// TestChartMatchesPlainManifests: with default values the chart's
// DaemonSet carries the same pod spec as deploy/kubernetes, apart from the
// names and labels helm adds; the two must not drift apart.
func TestChartMatchesPlainManifests(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	docs, _ := renderDocs(t, c, nil)
	plain := readYAMLFile(t, "kubernetes/daemonset.yaml")
	chartSpec := mapAt(byKind(docs)["DaemonSet"][0], "spec", "template", "spec")
	plainSpec := mapAt(byKind(plain)["DaemonSet"][0], "spec", "template", "spec")
	// Names differ by design; images by tag default; the rest must agree.
	for _, k := range []string{"serviceAccountName", "volumes"} {
		delete(chartSpec, k)
		delete(plainSpec, k)
	}
	for _, s := range []obj{chartSpec, plainSpec} {
		delete(mapAt(s, "containers", "0"), "image")
	}
	a, _ := yaml.Marshal(chartSpec)
	b, _ := yaml.Marshal(plainSpec)
	if !bytes.Equal(a, b) {
		t.Errorf("chart and plain pod specs differ:\nchart:\n%s\nplain:\n%s", a, b)
	}
	// The daemon's configuration too.
	cfg := func(docs []obj) string { return strAt(byKind(docs)["ConfigMap"][0], "data", "config.yaml") }
	var cc, pc obj
	if err := yaml.Unmarshal([]byte(cfg(docs)), &cc); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal([]byte(cfg(plain)), &pc); err != nil {
		t.Fatal(err)
	}
	a, _ = yaml.Marshal(cc)
	b, _ = yaml.Marshal(pc)
	if !bytes.Equal(a, b) {
		t.Errorf("chart and plain config.yaml differ:\nchart:\n%s\nplain:\n%s", a, b)
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	c, err := loadChart(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		values obj
		want   string
	}{
		{"unknown storage", obj{"storage": obj{"type": "nfs"}}, "storage.type must be hostPath or emptyDir"},
		{"policies as non-root", obj{"policies": obj{"enabled": true}, "podResources": obj{"enabled": false}}, "CAP_KILL"},
		{"token without key", obj{"token": obj{"existingSecret": "s", "key": ""}}, "token.key must name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := c.render("vram", "vram-system", tc.values)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("render error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestRendererCatchesMissingValues: a template that asks for a value the
// chart does not define fails the render instead of printing nothing.
func TestRendererCatchesMissingValues(t *testing.T) {
	c := &chart{
		meta:      obj{"name": "x", "version": "0.1.0", "appVersion": "0.1.0"},
		values:    obj{"a": obj{"b": 1}},
		templates: map[string]string{"x/templates/t.yaml": "v: {{ .Values.a.c }}\n"},
	}
	if _, _, err := c.render("r", "ns", nil); err == nil {
		t.Fatal("missing value rendered without error")
	}
	c.templates["x/templates/t.yaml"] = "v: {{ .Values.a.b }}\n"
	m, _, err := c.render("r", "ns", nil)
	if err != nil || m["x/templates/t.yaml"] != "v: 1\n" {
		t.Fatalf("render = %q, %v", m, err)
	}
}
