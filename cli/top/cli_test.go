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
