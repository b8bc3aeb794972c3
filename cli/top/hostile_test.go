package top

import (
	"strings"
	"syscall"
	"testing"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vramhq/vram/gpu"
)

// hostileProcess is fixture process 8000 of gpu/testdata/proc as the
// sampler would enrich it: python3 -c with a multi-line program, an
// argument full of escape sequences (clear screen, cursor home, window
// title, colour, a raw 8-bit CSI byte, DEL) and a cgroup whose name makes
// the text blink. The user name carries an escape too.
func hostileProcess(t *testing.T) gpu.Process {
	t.Helper()
	fs, err := gpu.NewProcFS("../../gpu/testdata/proc", func(uint32) (string, error) { return "ev\x1b[8mil", nil })
	if err != nil {
		t.Fatal(err)
	}
	d, err := fs.Details(8000)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(d.Cmdline, " "), "\x1b[2J") {
		t.Fatalf("fixture 8000 lost its escape sequences: %q", d.Cmdline)
	}
	p := gpuProc(8000, started, d.Cmdline...)
	p.User, p.UID, p.Cgroup = d.User, d.UID, d.Cgroup
	return p
}

// injected lists what the fixture's strings would send to the terminal if
// they were written as they are.
var injected = []string{"\x1b[2J", "\x1b[H", "\x1b]0;owned", "\x07", "\x1b[31mred", "\x1b[5m", "\x1b[8m", "\x9b", "\x7f", "\r", "\t"}

// checkNoInjection fails when the raw frame (styles included) carries any
// of the fixture's own control sequences, or a line more than the
// terminal has.
func checkNoInjection(t *testing.T, what, raw string, w, h int) {
	t.Helper()
	for _, s := range injected {
		if strings.Contains(raw, s) {
			t.Errorf("%s: frame carries %q from the process to the terminal", what, s)
		}
	}
	checkFrame(t, ansi.Strip(raw), w, h)
}

func TestHostileStringsStayInTheirCells(t *testing.T) {
	const w, h = 140, 30
	hostile := hostileProcess(t)
	r, sig, _ := handRig(t, Config{}, gpuProc(1234, started, "python", "train.py"), hostile)
	r.send(tea.WindowSizeMsg{Width: w, Height: h})

	raw := r.m.View().Content
	checkNoInjection(t, "table", raw, w, h)
	f := ansi.Strip(raw)
	var row string
	for _, l := range strings.Split(f, "\n") {
		if strings.Contains(l, " 8000 ") {
			if row != "" {
				t.Errorf("pid 8000 on two lines:\n%s", f)
			}
			row = l
		}
	}
	for _, want := range []string{`ev\x1b[8m…`, `python3 -c import os, time, torch\nkeep = []\nprint(`} {
		if !strings.Contains(row, want) {
			t.Errorf("row %q lacks %q", row, want)
		}
	}
	if !strings.Contains(f, " 1234 ") {
		t.Errorf("the row after the hostile one is gone:\n%s", f)
	}

	// The detail screen wraps the command line over lines of its own
	// choosing, never the process's.
	r.keys("down", "enter")
	raw = r.m.View().Content
	checkNoInjection(t, "detail", raw, w, h)
	f = ansi.Strip(raw)
	for _, want := range []string{`--tag=\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9bK\x7f`, `evil\x1b[5mblink.scope`, `ev\x1b[8mil (uid 1000)`} {
		if !strings.Contains(strings.ReplaceAll(f, "\n"+strings.Repeat(" ", 11), ""), want) {
			t.Errorf("detail lacks %q:\n%s", want, f)
		}
	}

	// The confirmation dialog and the status line after the signal.
	r.keys("t")
	raw = r.m.View().Content
	checkNoInjection(t, "dialog", raw, w, h)
	if !strings.Contains(ansi.Strip(raw), `python3 -c import os, time, torch\nkeep`) {
		t.Errorf("dialog lacks the escaped command:\n%s", ansi.Strip(raw))
	}
	r.send(r.keys("y")())
	if len(sig.sent) != 1 || sig.sent[0] != (sent{8000, syscall.SIGTERM}) {
		t.Fatalf("sent %v, want SIGTERM to 8000", sig.sent)
	}
	raw = r.m.View().Content
	checkNoInjection(t, "status line", raw, w, h)
	if !strings.Contains(ansi.Strip(raw), `sent SIGTERM to PID 8000 (python3 -c import os, time, torch\n`) {
		t.Errorf("status line lacks the escaped command:\n%s", ansi.Strip(raw))
	}
}

func TestFilterMatchesWhatIsShown(t *testing.T) {
	p := hostileProcess(t)
	for _, f := range []string{"import os", `torch\nkeep`, "8000"} {
		if !matches(p, strings.ToLower(f)) {
			t.Errorf("filter %q does not match the hostile process", f)
		}
	}
	if matches(p, "nothing like it") {
		t.Error("filter matches anything")
	}
}
