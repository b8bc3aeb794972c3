package deploy

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/vramhq/vram/serve"
	"github.com/vramhq/vram/serve/api"
)

// unit is a parsed systemd unit file: section → key → values in file order
// (a key may repeat; an empty assignment resets the list, as in systemd).
type unit map[string]map[string][]string

// parseUnit reads the subset of systemd's unit syntax the files here use:
// [Section] headers, Key=Value lines, comments starting with # or ;, and
// lines continued with a trailing backslash. Errors name the line.
func parseUnit(text string) (unit, error) {
	u := unit{}
	section := ""
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		start := n
		for strings.HasSuffix(line, `\`) && sc.Scan() {
			n++
			line = strings.TrimSuffix(line, `\`) + " " + strings.TrimSpace(sc.Text())
		}
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case line[0] == '[':
			if !strings.HasSuffix(line, "]") || len(line) < 3 {
				return nil, fmt.Errorf("line %d: bad section header %q", start, line)
			}
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			k, v = strings.TrimSpace(k), strings.TrimSpace(v)
			if !ok || k == "" {
				return nil, fmt.Errorf("line %d: %q is not Key=Value", start, line)
			}
			if section == "" {
				return nil, fmt.Errorf("line %d: %s= before any [Section]", start, k)
			}
			if v == "" {
				u[section][k] = []string{}
			} else {
				u[section][k] = append(u[section][k], v)
			}
		}
	}
	return u, sc.Err()
}

// last is the value systemd uses for a single-valued key.
func (u unit) last(section, key string) (string, bool) {
	vs, ok := u[section][key]
	if !ok || len(vs) == 0 {
		return "", ok
	}
	return vs[len(vs)-1], true
}

func TestParseUnit(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     unit
		err      string
	}{
		{
			name: "sections, comments, repeats and resets",
			in:   "# c\n[Unit]\nDescription=a b\n\n[Service]\n; c\nX=1\nX=2\nY=1\nY=\nZ=a \\\n  b\n",
			want: unit{"Unit": {"Description": {"a b"}}, "Service": {"X": {"1", "2"}, "Y": {}, "Z": {"a  b"}}},
		},
		{name: "key before section", in: "A=1\n", err: "line 1: A= before any [Section]"},
		{name: "not key=value", in: "[S]\nnonsense\n", err: "line 2:"},
		{name: "bad header", in: "[S\n", err: "line 1: bad section header"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseUnit(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("parseUnit = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

// FuzzParseUnit: any input parses or fails with an error naming a line,
// never panics, and a parsed unit written back parses to the same unit.
func FuzzParseUnit(f *testing.F) {
	if data, err := os.ReadFile("systemd/vram.service"); err == nil {
		f.Add(string(data))
	}
	f.Add("[A]\nB=\\\n")
	f.Add("[]\n=\n")
	f.Fuzz(func(t *testing.T, in string) {
		u, err := parseUnit(in)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "line ") && !strings.Contains(err.Error(), "token too long") {
				t.Fatalf("error without a line: %v", err)
			}
			return
		}
		var b strings.Builder
		for _, s := range slices.Sorted(maps.Keys(u)) {
			fmt.Fprintf(&b, "[%s]\n", s)
			for _, k := range slices.Sorted(maps.Keys(u[s])) {
				if len(u[s][k]) == 0 {
					fmt.Fprintf(&b, "%s=\n", k)
				}
				for _, v := range u[s][k] {
					fmt.Fprintf(&b, "%s=%s\n", k, v)
				}
			}
		}
		again, err := parseUnit(b.String())
		if err != nil || fmt.Sprint(again) != fmt.Sprint(u) {
			t.Fatalf("round trip of %q: %v, %v; want %v", b.String(), again, err, u)
		}
	})
}

// hardening are the [Service] settings the unit must carry, with their
// values.
var hardening = map[string]string{
	"NoNewPrivileges":         "yes",
	"ProtectSystem":           "strict",
	"ProtectHome":             "yes",
	"PrivateTmp":              "yes",
	"ProtectKernelTunables":   "yes",
	"ProtectKernelModules":    "yes",
	"ProtectKernelLogs":       "yes",
	"ProtectControlGroups":    "yes",
	"RestrictNamespaces":      "yes",
	"RestrictSUIDSGID":        "yes",
	"LockPersonality":         "yes",
	"SystemCallArchitectures": "native",
	"UMask":                   "0077",
}

// checkUnit returns the problems of the daemon's unit.
func checkUnit(u unit) []string {
	var p []string
	bad := func(format string, args ...any) { p = append(p, fmt.Sprintf(format, args...)) }
	for _, s := range []string{"Unit", "Service", "Install"} {
		if u[s] == nil {
			bad("no [%s] section", s)
		}
	}
	if w, _ := u.last("Install", "WantedBy"); w != "multi-user.target" {
		bad("WantedBy=%q, want multi-user.target", w)
	}
	get := func(k string) string { v, _ := u.last("Service", k); return v }
	dyn, user := get("DynamicUser"), get("User")
	if dyn != "yes" && (user == "" || user == "root" || user == "0") {
		bad("neither DynamicUser=yes nor an unprivileged User=")
	}
	if get("StateDirectory") != "vram" {
		bad("StateDirectory=%q, want vram", get("StateDirectory"))
	}
	for k, want := range hardening {
		if got := get(k); got != want {
			bad("%s=%q, want %q", k, got, want)
		}
	}
	// Settings that would hide /dev/nvidia* or other processes' /proc.
	for k, forbidden := range map[string][]string{
		"PrivateDevices": {"yes", "true", "1"},
		"ProtectClock":   {"yes", "true", "1"},
		"DevicePolicy":   {"closed", "strict"},
		"ProtectProc":    {"invisible", "noaccess", "ptraceable"},
		"ProcSubset":     {"pid"},
		"PrivateUsers":   {"yes", "true", "1"},
	} {
		if slices.Contains(forbidden, get(k)) {
			bad("%s=%s would hide what the daemon reads (/dev/nvidia* or /proc/<pid>)", k, get(k))
		}
	}
	if vs, ok := u["Service"]["CapabilityBoundingSet"]; !ok || len(vs) != 0 && vs[len(vs)-1] != "" {
		bad("CapabilityBoundingSet must be set empty (policies add CAP_KILL in a drop-in): %q", vs)
	}
	if vs := u["Service"]["AmbientCapabilities"]; len(vs) != 0 {
		bad("AmbientCapabilities=%q, want none", vs)
	}
	filters := u["Service"]["SystemCallFilter"]
	if !slices.Contains(filters, "@system-service") {
		bad("SystemCallFilter lacks @system-service: %q", filters)
	}
	for _, f := range filters {
		if strings.HasPrefix(f, "~") && strings.Contains(f, "@resources") {
			bad("SystemCallFilter=%s blocks setrlimit, which the Go runtime calls at start", f)
		}
	}
	// The command line: the daemon, on loopback, with its state and config.
	exec := strings.Fields(get("ExecStart"))
	if len(exec) < 2 || !filepath.IsAbs(exec[0]) || filepath.Base(exec[0]) != "vram" || exec[1] != "serve" {
		bad("ExecStart=%q, want /path/vram serve ...", get("ExecStart"))
	}
	flags := map[string]string{}
	for i := 2; i+1 < len(exec); i += 2 {
		flags[exec[i]] = exec[i+1]
	}
	if a := flags["--addr"]; a != "127.0.0.1:9400" {
		bad("--addr %q, want 127.0.0.1:9400 (the daemon's default, loopback)", a)
	}
	if db := flags["--db"]; !strings.HasPrefix(db, "${STATE_DIRECTORY}/") && !strings.HasPrefix(db, "/var/lib/vram/") {
		bad("--db %q is not in the StateDirectory", db)
	}
	if c := flags["--config"]; !strings.HasPrefix(c, "/etc/vram/") {
		bad("--config %q is not in the ConfigurationDirectory", c)
	}
	return p
}

func readUnit(t *testing.T) unit {
	t.Helper()
	data, err := os.ReadFile("systemd/vram.service")
	if err != nil {
		t.Fatal(err)
	}
	u, err := parseUnit(string(data))
	if err != nil {
		t.Fatalf("systemd/vram.service: %v", err)
	}
	return u
}

func TestSystemdUnit(t *testing.T) {
	for _, problem := range checkUnit(readUnit(t)) {
		t.Error(problem)
	}
}

func TestSystemdChecksCatchDamage(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value string // "" value deletes the key
		want       string
	}{
		{"privileges", "NoNewPrivileges", "", "NoNewPrivileges"},
		{"writable system", "ProtectSystem", "full", "ProtectSystem"},
		{"no devices", "PrivateDevices", "yes", "PrivateDevices=yes"},
		{"clock", "ProtectClock", "yes", "ProtectClock=yes"},
		{"hidden processes", "ProtectProc", "invisible", "ProtectProc=invisible"},
		{"root", "DynamicUser", "", "DynamicUser"},
		{"capabilities", "CapabilityBoundingSet", "CAP_KILL", "CapabilityBoundingSet"},
		{"public address", "ExecStart", "/usr/local/bin/vram serve --addr 0.0.0.0:9400 --db /var/lib/vram/vram.db --config /etc/vram/config.yaml", "--addr"},
		{"resources filter", "SystemCallFilter", "~@privileged @resources", "setrlimit"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := readUnit(t)
			if tc.value == "" {
				delete(u["Service"], tc.key)
			} else {
				u["Service"][tc.key] = append(u["Service"][tc.key], tc.value)
			}
			problems := checkUnit(u)
			if !slices.ContainsFunc(problems, func(s string) bool { return strings.Contains(s, tc.want) }) {
				t.Errorf("damage not caught: problems %q, want one mentioning %q", problems, tc.want)
			}
		})
	}
}

// TestSystemdAnalyze runs systemd's own checks where systemd-analyze exists:
// `verify` (unknown keys, bad values) on a copy whose ExecStart points at an
// existing binary, and `security --offline` for the exposure score.
func TestSystemdAnalyze(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed")
	}
	data, err := os.ReadFile("systemd/vram.service")
	if err != nil {
		t.Fatal(err)
	}
	truePath, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true binary to stand in for vram")
	}
	copyPath := filepath.Join(t.TempDir(), "vram.service")
	text := strings.Replace(string(data), "ExecStart=/usr/local/bin/vram ", "ExecStart="+truePath+" ", 1)
	if err := os.WriteFile(copyPath, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify also loads the units ours depends on; only complaints about
	// ours count (a host's own units may have warnings of their own).
	out, err := exec.Command(sa, "verify", copyPath).CombinedOutput()
	if err != nil || strings.Contains(string(out), "vram.service") {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
	out, err = exec.Command(sa, "security", "--offline=true", copyPath).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "offline") && strings.Contains(string(out), "unrecognized") {
			t.Skipf("this systemd-analyze has no --offline: %s", out)
		}
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, _ := strconv.ParseFloat(string(m[1]), 64)
	t.Logf("systemd-analyze security exposure: %.1f", level)
	// 2.1 when written (systemd 252); above 3 means a hardening line was lost.
	if level > 3.0 {
		t.Errorf("exposure level %.1f, want at most 3.0:\n%s", level, out)
	}
}

// TestConfigSchemasAgree: the single-host config and the Kubernetes one
// have the same keys (values differ: no pod-resources socket outside
// Kubernetes).
func TestConfigSchemasAgree(t *testing.T) {
	keys := func(text string) []string {
		var m obj
		if err := yaml.Unmarshal([]byte(text), &m); err != nil {
			t.Fatal(err)
		}
		var out []string
		var walk func(prefix string, v any)
		walk = func(prefix string, v any) {
			if mm, ok := v.(obj); ok {
				for k, x := range mm {
					walk(prefix+"."+k, x)
				}
				return
			}
			out = append(out, prefix)
		}
		walk("", m)
		slices.Sort(out)
		return out
	}
	host, err := os.ReadFile("systemd/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cm := byKind(readYAMLFile(t, "kubernetes/daemonset.yaml"))["ConfigMap"][0]
	a, b := keys(string(host)), keys(strAt(cm, "data", "config.yaml"))
	if !slices.Equal(a, b) {
		t.Errorf("systemd/config.yaml keys %q\nConfigMap config.yaml keys %q", a, b)
	}
	// The daemon's own reader accepts it, with the unit's loopback address.
	cfg, err := serve.ParseConfig("systemd/config.yaml", host)
	if err != nil {
		t.Fatal(err)
	}
	if !cfg.HTTP.ReadOnly || cfg.MutationsEnabled() {
		t.Error("single-host config is not read-only by default")
	}
	if cfg.PolicyFile != "" {
		t.Error("single-host config enables policies by default")
	}
	if cfg.PodResourcesSocket != "" || cfg.PodResourcesAuto {
		t.Errorf("single-host config: pod_resources_socket %q, want it off", cfg.PodResourcesSocket)
	}
	if err := api.CheckListen("127.0.0.1:9400", cfg.HTTP.AllowRemote); err != nil {
		t.Error(err)
	}
}
