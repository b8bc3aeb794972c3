// Package scripts holds the project's shell scripts; this file tests
// scripts/test, the project's test command, with stand-ins for the go,
// gofmt and python3 commands, so that its summary is checked without running the suite.
package scripts

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// runTestScript runs ./test with the dashboard's test output taken from
// testdata/NAME and returns its output and exit status.
func runTestScript(t *testing.T, dashboard string, env ...string) (string, int) {
	t.Helper()
	bin := t.TempDir()
	fake, err := os.ReadFile(filepath.Join("testdata", "fake-go.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "go"), fake, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(bin, "gofmt"), []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// python3 runs the Python package's tests: they pass at once here.
	if err := os.WriteFile(filepath.Join(bin, "python3"), []byte("#!/bin/sh\n[ \"$1\" = -c ] && echo 3.11\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := filepath.Abs(filepath.Join("testdata", dashboard))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("bash", "test")
	cmd.Env = append(os.Environ(), append([]string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"), "FAKE_DASHBOARD=" + out}, env...)...)
	b, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), code
}

func TestSummaryNamesSkippedBrowserTest(t *testing.T) {
	out, code := runTestScript(t, "dashboard-skip.txt")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	want := "== skipped\n" +
		"SKIPPED: serve/dashboard TestBrowser: no Chromium found (looked for /usr/bin/chromium and chromium, chromium-browser, google-chrome on PATH); install it with apt-get install -y chromium to run the browser test\n" +
		"ok, with the skips above\n"
	if !strings.HasSuffix(out, want) {
		t.Errorf("the summary does not end with\n%s\noutput:\n%s", want, out)
	}
	if strings.Contains(out, "SKIPPED: serve/dashboard TestScreenshot") {
		t.Errorf("an opt-in test is listed as skipped:\n%s", out)
	}
	if !strings.Contains(out, "ok  \tgithub.com/vramhq/vram/serve/dashboard") {
		t.Errorf("no result line for the dashboard:\n%s", out)
	}
}

// CI sets VRAM_REQUIRE_BROWSER=1: the browser test fails instead of
// skipping, and so does the script.
func TestMissingBrowserFailsWhenRequired(t *testing.T) {
	out, code := runTestScript(t, "dashboard-fail.txt", "VRAM_REQUIRE_BROWSER=1")
	if code == 0 || !strings.Contains(out, "--- FAIL: TestBrowser") || !strings.Contains(out, "no Chromium found") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	if strings.HasSuffix(out, "ok\n") {
		t.Errorf("ends with ok:\n%s", out)
	}
}

func TestSummaryWithoutSkips(t *testing.T) {
	out, code := runTestScript(t, "dashboard-pass.txt")
	if code != 0 || !strings.HasSuffix(out, "ok\n") || strings.Contains(out, "SKIPPED") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}
