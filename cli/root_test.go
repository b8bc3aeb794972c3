package cli

import (
	"bytes"
	"errors"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/job"
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
		{[]string{"watch", "--pid", "abc"}, `invalid value "abc" for --pid: want whole numbers separated by commas`},
		{[]string{"watch", "--pid", "-5"}, `--pid -5: not a process ID (PIDs are 1 to 4194304)`},
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

// The same mistake exits 2 on every command, with one line naming the flag
// or the argument. The factory has no driver and no memory source: a
// mistake that slipped through to opening the host or starting a job
// would fail with 1 instead.
func TestSameMistakeSameStatus(t *testing.T) {
	type mistake struct {
		kind string
		args []string
		want string
	}
	var cases []mistake
	add := func(kind, want string, args ...string) { cases = append(cases, mistake{kind, args, want}) }
	for cmd, flag := range map[string]string{"status": "--gpu", "watch": "--interval", "top": "--interval", "run": "--interval",
		"fit": "--interval", "reclaim": "--observe", "replay": "--policy", "serve": "--addr"} {
		add("unknown flag", "unknown flag: --bogus", cmd, "--bogus")
		add("flag without its value", "flag needs an argument: "+flag, cmd, flag)
	}
	for _, cmd := range []string{"status", "watch", "top", "reclaim", "serve"} {
		add("bad value", `invalid value "x" for --simulate: want a whole number`, cmd, "--simulate", "x")
		add("value out of range", "--simulate 65: must be between 1 and 64 GPUs", cmd, "--simulate", "65")
		add("conflicting flags", "--gpu and --all-gpus: choose one", cmd, "--gpu", "0", "--all-gpus")
		add("stray argument", `unknown command "extra" for "vram `+cmd+`"`, cmd, "extra")
	}
	for _, cmd := range []string{"status", "watch", "top"} {
		add("bad value", `invalid value "x" for --idle-window: want a duration`, cmd, "--idle-window", "x")
		add("value out of range", "--idle-window -1s: must be positive", cmd, "--idle-window", "-1s")
	}
	add("bad value", `invalid value "x" for --interval: want a duration`, "run", "--interval", "x", "--", "true")
	add("bad value", `invalid value "x" for --min: want a whole number`, "fit", "--min", "x", "--", "true", "{}")
	add("bad value", `invalid value "x" for --observe: want a duration`, "reclaim", "--observe", "x")
	add("bad value", `--capacity: `, "replay", "--capacity", "lots", "synth:kvcache")
	add("value out of range", "--interval 1ms: must be between 10ms and 10s", "run", "--interval", "1ms", "--", "true")
	add("value out of range", "--interval 1ms: must be between 10ms and 10s", "fit", "--interval", "1ms", "--", "true", "{}")
	add("value out of range", "--interval 5ms: must be between 10ms and 1h", "watch", "--interval", "5ms")
	add("value out of range", "--observe 100ms: must be between 1s and 1h", "reclaim", "--observe", "100ms")
	add("missing argument", "run: name the command to run", "run")
	add("missing argument", "fit: name the command to run", "fit")
	add("missing argument", "replay: name at least one trace", "replay")
	add("missing argument", "fit: put {} where the batch size goes", "fit", "--", "true")
	add("conflicting flags", "--json and --csv cannot be used together", "status", "--json", "--csv")
	add("conflicting flags", "--json and --csv cannot be used together", "watch", "--json", "--csv")
	add("conflicting flags", "--alloc-conf needs --allocator vram", "run", "--alloc-conf", "max_bytes:1GiB", "--", "true")
	add("conflicting flags", "--alloc-conf needs --allocator vram", "fit", "--alloc-conf", "max_bytes:1GiB", "--", "true", "{}")
	add("conflicting flags", "--min-bytes and --policy", "reclaim", "--policy", "p.yaml", "--min-bytes", "1GiB")
	add("conflicting flags", "--capacity applies to --device sim only", "replay", "--device", "cuda", "--capacity", "1GiB", "synth:kvcache")
	add("configuration file that does not parse", "bad.yaml:2: interval: want a duration", "serve", "--config", "testdata/bad.yaml")
	add("configuration file that does not parse", "bad.yaml:2: interval: unknown field", "reclaim", "--policy", "testdata/bad.yaml")
	add("missing configuration file", "--config: ", "serve", "--config", "testdata/none.yaml")
	add("missing configuration file", "--policy: open testdata/none.yaml: no such file", "reclaim", "--policy", "testdata/none.yaml")
	add("unknown command", `unknown command "stauts" for "vram"; did you mean status?`, "stauts")

	for _, tc := range cases {
		t.Run(tc.kind+": "+strings.Join(tc.args, " "), func(t *testing.T) {
			f := cmdutil.New()
			var out, errOut bytes.Buffer
			f.In, f.Out, f.Err = strings.NewReader(""), &out, &errOut
			f.OpenNVML = func() (gpu.Host, error) { return nil, errors.New("no driver in this test") }
			f.MemorySource = func() (job.Source, func(), error) { return nil, nil, errors.New("no driver in this test") }
			f.ProcRoot = "/nonexistent"
			code := Run(f, tc.args)
			msg := errOut.String()
			if code != cmdutil.ExitUsage || !strings.HasPrefix(msg, "vram: ") || !strings.Contains(msg, tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, msg, cmdutil.ExitUsage, tc.want)
			}
			if strings.Count(msg, "\n") != 1 || out.Len() != 0 {
				t.Errorf("want one line on stderr and nothing on stdout; got stderr %q, stdout %q", msg, out.String())
			}
		})
	}
}
