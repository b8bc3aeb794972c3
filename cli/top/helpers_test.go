package top

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// t0 is the simulated clock's origin.
var t0 = time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)

// fakeSignaller is a proc.Signaller that records the signals it is asked
// to send; err is what each signal returns.
type fakeSignaller struct {
	sent []sent
	err  error
}

type sent struct {
	pid int
	sig syscall.Signal
}

func (f *fakeSignaller) Open(pid int) (proc.Handle, error) { return fakeHandle{f, pid}, nil }

type fakeHandle struct {
	f   *fakeSignaller
	pid int
}

func (h fakeHandle) Signal(sig syscall.Signal) error {
	h.f.sent = append(h.f.sent, sent{h.pid, sig})
	return h.f.err
}

func (fakeHandle) Close() error { return nil }

// fakeStater answers Stat from a table.
type fakeStater map[int]gpu.ProcStat

func (f fakeStater) Stat(pid int) (gpu.ProcStat, error) {
	st, ok := f[pid]
	if !ok {
		return gpu.ProcStat{}, gpu.ErrNoProcess
	}
	return st, nil
}

// simRig is a model over a simulated host on a fake clock.
type simRig struct {
	t       *testing.T
	now     time.Time
	sim     *gpu.Sim
	sampler *gpu.Sampler
	sig     *fakeSignaller
	m       Model
}

func newSimRig(t *testing.T, gpus int, cfg Config) *simRig {
	t.Helper()
	r := &simRig{t: t, now: t0, sig: &fakeSignaller{}}
	clock := func() time.Time { return r.now }
	var err error
	if r.sim, err = gpu.NewSim(gpus, 1, clock); err != nil {
		t.Fatal(err)
	}
	if r.sampler, err = gpu.NewSampler(r.sim, gpu.SamplerOptions{Procs: r.sim, Now: clock}); err != nil {
		t.Fatal(err)
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Window == 0 {
		cfg.Window = 120
	}
	cfg.Hostname = "testhost"
	cfg.Self = 4242
	if cfg.Signaller == nil {
		cfg.Signaller = r.sig
	}
	if cfg.Procs == nil {
		cfg.Procs = r.sim
	}
	r.m = New(cfg, r.sampler.Sample)
	r.send(tea.WindowSizeMsg{Width: 120, Height: 40})
	return r
}

// samples takes n samples one interval apart and feeds them to the model.
func (r *simRig) samples(n int) {
	r.t.Helper()
	for i := 0; i < n; i++ {
		r.now = r.now.Add(r.m.cfg.Interval)
		snap, err := r.sampler.Sample()
		if err != nil {
			r.t.Fatal(err)
		}
		r.send(sampleMsg{snap: snap})
	}
}

// send passes msg to Update and returns the command it gave back.
func (r *simRig) send(msg tea.Msg) tea.Cmd {
	tm, cmd := r.m.Update(msg)
	r.m = tm.(Model)
	return cmd
}

// keys presses each key in turn. Names are as KeyPressMsg.String spells
// them: "up", "enter", "esc", or one printable character.
func (r *simRig) keys(names ...string) tea.Cmd {
	var cmd tea.Cmd
	for _, n := range names {
		cmd = r.send(keyMsg(n))
	}
	return cmd
}

func keyMsg(name string) tea.KeyPressMsg {
	special := map[string]rune{
		"up": tea.KeyUp, "down": tea.KeyDown, "pgup": tea.KeyPgUp, "pgdown": tea.KeyPgDown,
		"home": tea.KeyHome, "end": tea.KeyEnd, "enter": tea.KeyEnter, "esc": tea.KeyEscape,
		"backspace": tea.KeyBackspace, "left": tea.KeyLeft,
	}
	if c, ok := special[name]; ok {
		return tea.KeyPressMsg{Code: c}
	}
	if name == "ctrl+c" {
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	}
	r := []rune(name)[0]
	return tea.KeyPressMsg{Code: r, Text: name}
}

// frame is the rendered view without colour.
func (r *simRig) frame() string { return ansi.Strip(r.m.View().Content) }

// checkFrame fails when a line is wider than the terminal or there are
// more lines than it has.
func checkFrame(t *testing.T, frame string, w, h int) {
	t.Helper()
	lines := strings.Split(frame, "\n")
	if len(lines) > h {
		t.Errorf("%d lines in a %d-line terminal", len(lines), h)
	}
	for i, l := range lines {
		if n := ansi.StringWidth(l); n > w {
			t.Errorf("line %d is %d cells wide in a %d-cell terminal: %q", i, n, w, l)
		}
	}
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}
