package cli

import (
	"bytes"
	"runtime/debug"
	"strings"
	"testing"
)

func TestMainExitCodes(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"help", []string{"--help"}, 0, ""},
		{"unknown flag", []string{"status", "--no-such-flag"}, 2, "unknown flag"},
		{"stray argument", []string{"status", "extra"}, 2, "extra"},
		{"unknown command", []string{"no-such-command"}, 2, "unknown command"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, strings.NewReader(""), &out, &errOut)
			if code != tt.code {
				t.Fatalf("exit code %d, want %d (stderr %q)", code, tt.code, errOut.String())
			}
			if tt.err != "" && !strings.Contains(errOut.String(), tt.err) {
				t.Errorf("stderr %q does not mention %q", errOut.String(), tt.err)
			}
			if strings.Contains(errOut.String(), "goroutine ") {
				t.Errorf("stderr has a stack trace: %q", errOut.String())
			}
		})
	}
}

func TestVersion(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	const rev = "9a9b62f1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7"
	tests := []struct {
		name     string
		override string
		info     *debug.BuildInfo
		want     string
	}{
		{"ldflags override", "v1.4.0", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "v1.4.0"},
		{"released module", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.0"}}, "v1.2.0"},
		{"checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "false")},
			"(devel) revision 9a9b62f1c2d3, committed 2026-11-30T10:00:00Z"},
		{"modified checkout", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "true")},
			"(devel) revision 9a9b62f1c2d3+modified, committed 2026-11-30T10:00:00Z"},
		{"pseudo-version naming the revision", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261130100000-9a9b62f1c2d3+dirty"},
			Settings: settings("vcs.revision", rev, "vcs.time", "2026-11-30T10:00:00Z", "vcs.modified", "true")},
			"v0.0.0-20261130100000-9a9b62f1c2d3+dirty, committed 2026-11-30T10:00:00Z"},
		{"checkout built without VCS stamping", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}},
			"(devel), no VCS revision recorded (built outside a git checkout, or with -buildvcs=false)"},
		{"no information", "", nil, "unknown (no build information in the binary)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := versionString(tt.override, func() (*debug.BuildInfo, bool) { return tt.info, tt.info != nil })
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestVersionFlag(t *testing.T) {
	old := buildInfo
	defer func() { buildInfo = old }()
	buildInfo = func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{Main: debug.Module{Version: "(devel)"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef"}}}, true
	}
	var out, errOut bytes.Buffer
	if code := Main([]string{"--version"}, strings.NewReader(""), &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	if got := out.String(); got != "vram version (devel) revision 0123456789ab\n" {
		t.Errorf("--version printed %q", got)
	}
}

// Flag values the parser rejects are reported with the flag and what it
// wants, never with the parser's own text.
func TestFlagValueErrors(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"top", "--simulate", "abc"}, `invalid value "abc" for --simulate: want a whole number`},
		{[]string{"watch", "--pid", "4242,x"}, `invalid value "4242,x" for --pid: want whole numbers separated by commas`},
		{[]string{"status", "--gpu", "0,x"}, `invalid value "0,x" for --gpu: want whole numbers separated by commas`},
		{[]string{"run", "--interval", "fast", "--", "true"}, `invalid value "fast" for --interval: want a duration such as 500ms, 30s or 5m`},
		{[]string{"run", "--json=maybe", "--", "true"}, `invalid value "maybe" for --json: want true or false`},
		{[]string{"fit", "--min", "99999999999999999999", "--", "true", "{}"}, `invalid value "99999999999999999999" for --min: out of range for a whole number`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := Main(tt.args, strings.NewReader(""), &out, &errOut)
			if code != 2 {
				t.Errorf("exit code %d, want 2", code)
			}
			got := errOut.String()
			if !strings.Contains(got, tt.want) {
				t.Errorf("stderr %q, want %q", got, tt.want)
			}
			for _, leak := range []string{"strconv.", "time: ", "invalid argument", "invalid syntax"} {
				if strings.Contains(got, leak) {
					t.Errorf("stderr %q carries the parser's %q", got, leak)
				}
			}
		})
	}
}
