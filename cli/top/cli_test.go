package top_test

import (
	"bytes"
	"strings"
	"testing"

	"github.com/vramhq/vram/cli"
)

// Flag problems exit with status 2 through the root command, like every
// vram command; a missing driver is a plain failure (1) with one line.
func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"top", "--interval", "1ms", "--simulate", "1"}, 2, "--interval 1ms out of range"},
		{[]string{"top", "--simulate", "1", "--gpu", "3"}, 2, "--gpu 3: this host has 1 GPUs"},
		{[]string{"top", "--bogus"}, 2, "unknown flag: --bogus"},
		{[]string{"top", "--simulate", "1", "--gpu", "0", "--all-gpus"}, 2, "--gpu and --all-gpus: choose one"},
		{[]string{"top", "--simulate", "1", "--idle-window", "0s"}, 2, "--idle-window 0s: must be positive"},
	} {
		var out, errw bytes.Buffer
		code := cli.Main(tc.args, strings.NewReader(""), &out, &errw)
		if code != tc.code || !strings.Contains(errw.String(), tc.msg) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, code, errw.String(), tc.code, tc.msg)
		}
		if strings.Contains(errw.String(), "goroutine") {
			t.Errorf("%v: stack trace on stderr", tc.args)
		}
	}
}

// --read-only is the flag's spelling, as for vram serve; --readonly, its
// old one, still works, hidden from the help, with a warning on stderr.
func TestReadOnlySpellings(t *testing.T) {
	for _, flag := range []string{"--read-only", "--readonly"} {
		var out, errw bytes.Buffer
		code := cli.Main([]string{"top", "--simulate", "1", "--frame", "1", "--interval", "10ms", "--width", "90", "--height", "20", flag}, strings.NewReader(""), &out, &errw)
		if code != 0 || !strings.Contains(out.String(), "read-only") {
			t.Errorf("%s: exit %d, stderr %q, frame:\n%s", flag, code, errw.String(), out.String())
		}
		if warned := strings.Contains(errw.String(), "--readonly is deprecated: use --read-only"); warned != (flag == "--readonly") || strings.Contains(out.String(), "deprecated") {
			t.Errorf("%s: stderr %q", flag, errw.String())
		}
	}
	var out bytes.Buffer
	cli.Main([]string{"top", "--help"}, strings.NewReader(""), &out, &out)
	if !strings.Contains(out.String(), "--read-only") || strings.Contains(out.String(), "--readonly") {
		t.Errorf("help:\n%s", out.String())
	}
}
