package top

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/vramhq/vram/gpu"
)

func TestGoldenFrames(t *testing.T) {
	tests := []struct {
		name   string
		gpus   int
		cfg    Config
		w, h   int
		keys   []string
		golden string
	}{
		{name: "main", gpus: 2, w: 120, h: 40, golden: "main_120x40.txt"},
		{name: "narrow", gpus: 2, w: 80, h: 24, golden: "main_80x24.txt"},
		{name: "eight GPUs", gpus: 8, w: 110, h: 30, golden: "main_8gpus_110x30.txt"},
		{name: "too small", gpus: 2, w: 50, h: 10, golden: "too_small_50x10.txt"},
		{name: "help", gpus: 1, w: 100, h: 30, keys: []string{"?"}, golden: "help.txt"},
		{name: "help read-only", gpus: 1, w: 100, h: 30, cfg: Config{ReadOnly: true}, keys: []string{"?"}, golden: "help_readonly.txt"},
		{name: "sorted by PID, second row", gpus: 2, w: 120, h: 30, keys: []string{"p", "down"}, golden: "sort_pid.txt"},
		{name: "filter typed", gpus: 2, w: 120, h: 30, keys: []string{"/", "b", "o", "b"}, golden: "filter.txt"},
		{name: "detail", gpus: 2, w: 120, h: 40, keys: []string{"enter"}, golden: "detail.txt"},
		{name: "confirm", gpus: 2, w: 120, h: 40, keys: []string{"t"}, golden: "confirm.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newSimRig(t, tt.gpus, tt.cfg)
			r.send(tea.WindowSizeMsg{Width: tt.w, Height: tt.h})
			r.samples(60)
			r.keys(tt.keys...)
			f := r.frame()
			checkFrame(t, f, tt.w, tt.h)
			golden(t, tt.golden, f+"\n")
		})
	}
}

func TestWaitingAndErrors(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	if f := r.frame(); !strings.Contains(f, "waiting for the first sample") {
		t.Errorf("no waiting message before the first sample:\n%s", f)
	}
	r.send(sampleMsg{err: errors.New("nvmlDeviceGetMemoryInfo_v2: ERROR_GPU_IS_LOST")})
	if f := r.frame(); !strings.Contains(f, "sampling failed: nvmlDeviceGetMemoryInfo_v2: ERROR_GPU_IS_LOST") {
		t.Errorf("first-sample error not shown:\n%s", f)
	}
	r.samples(1)
	r.send(sampleMsg{err: errors.New("GPU is lost")})
	f := r.frame()
	if !strings.Contains(f, "last sample failed: GPU is lost") || !strings.Contains(f, "GPU 0") {
		t.Errorf("a later error should keep the last sample and say it failed:\n%s", f)
	}
	r.samples(1)
	if strings.Contains(r.frame(), "failed") {
		t.Error("the error stays after a good sample")
	}
}

func TestPolling(t *testing.T) {
	calls := 0
	m := New(Config{Interval: time.Second}, func() (*gpu.Snapshot, error) {
		calls++
		return &gpu.Snapshot{Time: t0}, nil
	})
	msg := m.Init()()
	if calls != 1 {
		t.Fatalf("Init's command polled %d times", calls)
	}
	if _, ok := msg.(sampleMsg); !ok {
		t.Fatalf("Init's command returned %T", msg)
	}
	// A slow sample (longer than the interval) polls again at once.
	_, cmd := m.Update(sampleMsg{snap: &gpu.Snapshot{Time: t0}, took: 2 * time.Second})
	if _, ok := cmd().(sampleMsg); !ok || calls != 2 {
		t.Errorf("a late sample did not poll at once (calls %d)", calls)
	}
	// A fast one arms a tick; the tick's message polls.
	_, cmd = m.Update(sampleMsg{snap: &gpu.Snapshot{Time: t0}, took: 999 * time.Millisecond})
	if _, ok := cmd().(pollMsg); !ok || calls != 2 {
		t.Errorf("a fast sample did not wait for a tick (calls %d)", calls)
	}
	_, cmd = m.Update(pollMsg{})
	if _, ok := cmd().(sampleMsg); !ok || calls != 3 {
		t.Errorf("the tick did not poll (calls %d)", calls)
	}
}

func TestQuit(t *testing.T) {
	for _, keys := range [][]string{{"q"}, {"ctrl+c"}, {"/", "ctrl+c"}, {"t", "ctrl+c"}, {"enter", "q"}} {
		r := newSimRig(t, 1, Config{})
		r.samples(3)
		cmd := r.keys(keys...)
		if cmd == nil {
			t.Errorf("%v: no command", keys)
			continue
		}
		if _, ok := cmd().(tea.QuitMsg); !ok {
			t.Errorf("%v did not quit", keys)
		}
	}
	r := newSimRig(t, 1, Config{})
	r.samples(3)
	if cmd := r.keys("/", "q"); cmd != nil {
		t.Error("q while typing a filter quit instead of typing")
	}
	if r.m.filter != "q" {
		t.Errorf("filter %q, want q", r.m.filter)
	}
}

func pids(rows []row) []uint32 {
	var out []uint32
	for _, r := range rows {
		out = append(out, r.p.PID)
	}
	return out
}

func TestSort(t *testing.T) {
	r := newSimRig(t, 3, Config{})
	r.samples(30)
	check := func(name string, less func(a, b row) bool) {
		t.Helper()
		rows := r.m.rows()
		if len(rows) < 5 {
			t.Fatalf("only %d rows", len(rows))
		}
		for i := 1; i < len(rows); i++ {
			if less(rows[i], rows[i-1]) {
				t.Errorf("%s: row %d (PID %d) before row %d (PID %d) is out of order", name, i-1, rows[i-1].p.PID, i, rows[i].p.PID)
			}
		}
	}
	check("memory ▼", func(a, b row) bool { return a.p.Memory > b.p.Memory })
	r.keys("m")
	check("memory ▲", func(a, b row) bool { return a.p.Memory < b.p.Memory })
	r.keys("p")
	check("PID ▲", func(a, b row) bool { return a.p.PID < b.p.PID })
	r.keys("p")
	check("PID ▼", func(a, b row) bool { return a.p.PID > b.p.PID })
	r.keys("u")
	check("user ▲", func(a, b row) bool { return a.p.User < b.p.User })
	r.keys("g")
	check("growth ▼", func(a, b row) bool {
		if a.growthOK != b.growthOK {
			return a.growthOK
		}
		return a.growth > b.growth
	})
	if !strings.Contains(r.frame(), "MiB/min▼") {
		t.Error("the growth column is not marked as the sort key")
	}
}

func TestSelectionFollowsProcess(t *testing.T) {
	r := newSimRig(t, 2, Config{})
	r.samples(10)
	r.keys("down", "down")
	rows := r.m.rows()
	want := rows[2].key
	if r.m.sel != want {
		t.Fatalf("selection %v, want row 2 %v", r.m.sel, want)
	}
	r.keys("p") // re-sort
	rows = r.m.rows()
	if i := r.m.selected(rows); rows[i].key != want {
		t.Errorf("after sorting by PID the selection moved to %v, want %v", rows[i].key, want)
	}
	r.samples(5)
	if i := r.m.selected(r.m.rows()); r.m.rows()[i].key != want {
		t.Error("a new sample moved the selection")
	}
	r.keys("end")
	if i := r.m.selected(r.m.rows()); i != len(r.m.rows())-1 {
		t.Errorf("End selected row %d of %d", i, len(r.m.rows()))
	}
	r.keys("home", "up")
	if i := r.m.selected(r.m.rows()); i != 0 {
		t.Errorf("Home, Up selected row %d", i)
	}
	r.keys("pgdown")
	if i := r.m.selected(r.m.rows()); i != min(r.m.tableRows(), len(r.m.rows())-1) {
		t.Errorf("PgDn selected row %d", i)
	}
}

func TestFilter(t *testing.T) {
	r := newSimRig(t, 2, Config{})
	r.samples(10)
	all := len(r.m.rows())
	r.keys("/", "j", "u", "p", "y", "t", "e", "r", "enter")
	rows := r.m.rows()
	if len(rows) == 0 || len(rows) >= all {
		t.Fatalf("filter jupyter kept %d of %d rows", len(rows), all)
	}
	for _, row := range rows {
		if row.p.Flags&gpu.FlagJupyter == 0 {
			t.Errorf("PID %d passed the filter without being a Jupyter kernel", row.p.PID)
		}
	}
	if !strings.Contains(r.frame(), `filter "jupyter"`) {
		t.Error("status line does not show the filter")
	}
	r.keys("/", "backspace", "backspace", "enter")
	if r.m.filter != "jupyt" {
		t.Errorf("backspace left %q", r.m.filter)
	}
	r.keys("esc")
	if r.m.filter != "" || len(r.m.rows()) != all {
		t.Error("Esc did not clear the filter")
	}
	r.keys("/", "n", "o", "t", "h", "i", "n", "g", "enter")
	if f := r.frame(); !strings.Contains(f, `no process matches "nothing"`) {
		t.Errorf("an empty result is not explained:\n%s", f)
	}
	r.keys("t")
	if r.m.confirm != nil || !strings.Contains(r.m.status, "no process selected") {
		t.Error("t with no row selected should say so")
	}
	r.keys("/", "4", "2", "esc") // Esc while typing drops the filter
	if r.m.filter != "" || r.m.filtering {
		t.Error("Esc while typing kept the filter")
	}
}

func TestDetailScreen(t *testing.T) {
	r := newSimRig(t, 2, Config{})
	r.samples(20)
	rows := r.m.rows()
	p := rows[0].p
	r.keys("enter")
	if r.m.screen != screenDetail {
		t.Fatal("Enter did not open the detail screen")
	}
	f := r.frame()
	for _, want := range []string{
		fmt.Sprintf("PID %d", p.PID), strings.Join(p.Cmdline, " "), p.User,
		fmt.Sprintf("uid %d", p.UID), p.Cgroup, p.StartTime.Format(time.DateTime),
		fmt.Sprint(p.PPID), fmt.Sprintf("GPU %d", p.Device), "Memory on GPU",
	} {
		if !strings.Contains(f, want) {
			t.Errorf("detail screen lacks %q:\n%s", want, f)
		}
	}
	r.keys("esc")
	if r.m.screen != screenMain {
		t.Error("Esc did not go back")
	}
	// A process that leaves is reported, not shown stale.
	r.m.detail, r.m.screen = procKey{dev: 0, pid: 999999}, screenDetail
	if f := r.frame(); !strings.Contains(f, "PID 999999 is no longer listed on GPU 0") {
		t.Errorf("gone process not reported:\n%s", f)
	}
}

func TestHelpClosesOnAnyKey(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	r.samples(2)
	r.keys("?")
	if !strings.Contains(r.frame(), "this help") {
		t.Fatal("? did not show the help")
	}
	if cmd := r.keys("q"); cmd != nil || r.m.help {
		t.Error("q in the help should close it, not quit")
	}
}

func TestHistoryForgetsAndRestarts(t *testing.T) {
	h := newHistory(10)
	p := gpu.Process{PID: 7, Device: 0, Memory: 1 << 30, MemoryKnown: true, StartTime: t0}
	h.add(&gpu.Snapshot{Time: t0, Processes: []gpu.Process{p}})
	h.add(&gpu.Snapshot{Time: t0.Add(time.Second), Processes: []gpu.Process{p}})
	if n := len(h.proc[procKey{0, 7}].mem.window()); n != 2 {
		t.Fatalf("%d points, want 2", n)
	}
	p.StartTime = t0.Add(time.Hour) // the PID was reused
	h.add(&gpu.Snapshot{Time: t0.Add(2 * time.Second), Processes: []gpu.Process{p}})
	if n := len(h.proc[procKey{0, 7}].mem.window()); n != 1 {
		t.Errorf("a reused PID kept %d points of the old process", n)
	}
	h.add(&gpu.Snapshot{Time: t0.Add(3 * time.Second)})
	if len(h.proc) != 0 {
		t.Error("a process that left is still remembered")
	}
}

// Every frame fits the terminal, whatever its size, screen and state.
func TestFramesFit(t *testing.T) {
	r := newSimRig(t, 4, Config{})
	r.samples(15)
	sizes := [][2]int{{60, 12}, {61, 13}, {75, 20}, {89, 15}, {110, 60}, {200, 50}, {59, 40}, {120, 11}, {1, 1}, {0, 0}}
	for _, keys := range [][]string{nil, {"?"}, {"enter"}, {"t"}, {"/", "x"}} {
		for _, s := range sizes {
			r.m.help, r.m.screen, r.m.confirm, r.m.filtering, r.m.filter = false, screenMain, nil, false, ""
			r.send(tea.WindowSizeMsg{Width: s[0], Height: s[1]})
			r.keys(keys...)
			checkFrame(t, r.frame(), max(s[0], 1), max(s[1], 1))
		}
	}
}

// FuzzKeys drives the model with arbitrary key sequences and sizes: it must
// not panic and every frame must fit the terminal.
func FuzzKeys(f *testing.F) {
	f.Add([]byte("?q"), uint8(120), uint8(40))
	f.Add([]byte("/bob\r\x1bpgm\r\x1bt\x01y"), uint8(80), uint8(24))
	f.Add([]byte("\x02\x02\x02\rk\x01"), uint8(60), uint8(12))
	alphabet := []string{"up", "down", "pgup", "pgdown", "home", "end", "enter", "esc", "backspace", "left",
		"m", "p", "g", "u", "/", "t", "k", "y", "n", "?", "a", "1", " "}
	f.Fuzz(func(t *testing.T, in []byte, w, h uint8) {
		r := newSimRig(t, 2, Config{Signaller: &fakeSignaller{}, Procs: fakeStater{}})
		r.send(tea.WindowSizeMsg{Width: int(w), Height: int(h)})
		r.samples(2)
		for i, b := range in {
			name := alphabet[int(b)%len(alphabet)]
			if name == "q" {
				continue
			}
			if cmd := r.keys(name); cmd != nil && name == "y" {
				if msg, ok := cmd().(signalMsg); ok {
					r.send(msg)
				}
			}
			if i%7 == 0 {
				r.samples(1)
			}
			checkFrame(t, r.frame(), max(int(w), 1), max(int(h), 1))
		}
	})
}

func TestColumnsDropWithWidth(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	r.samples(12)
	for _, tc := range []struct {
		w    int
		want []string
		not  []string
	}{
		{120, []string{"HISTORY", "MiB/min", "USER"}, nil},
		{100, []string{"MiB/min", "USER"}, []string{"HISTORY"}},
		{80, []string{"USER"}, []string{"HISTORY", "MiB/min"}},
		{60, []string{"PID", "MEM", "FLAGS"}, []string{"HISTORY", "MiB/min", "USER"}},
	} {
		r.send(tea.WindowSizeMsg{Width: tc.w, Height: 30})
		f := r.frame()
		for _, s := range tc.want {
			if !strings.Contains(f, s) {
				t.Errorf("width %d: no %s column", tc.w, s)
			}
		}
		for _, s := range tc.not {
			if strings.Contains(f, s) {
				t.Errorf("width %d: %s column should be dropped", tc.w, s)
			}
		}
	}
}

func TestSimulatedLabel(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	r.samples(1)
	if !strings.Contains(strings.SplitN(r.frame(), "\n", 2)[0], "SIMULATED seed 1") {
		t.Error("the header does not say SIMULATED")
	}
	m := New(Config{}, nil)
	tm, _ := m.Update(sampleMsg{snap: &gpu.Snapshot{Time: t0, Host: gpu.HostInfo{Driver: "580.65.06", CUDA: "13.0"}}})
	if f := tm.(Model).render(); strings.Contains(f, "SIMULATED") || !strings.Contains(f, "driver 580.65.06") {
		t.Errorf("real host header wrong:\n%s", f)
	}
	if !slices.Contains(strings.Split(r.m.View().WindowTitle, " "), "top") || !r.m.View().AltScreen {
		t.Error("view should use the alternate screen and set a title")
	}
}
