package reclaim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/proc"
)

// world is a fake GPU host, /proc and kernel in one: signals change what
// the device and /proc show, the way the real ones would.
type world struct {
	mu    sync.Mutex
	now   time.Time
	base  uint64 // device memory not held by the listed processes
	procs map[int]*fakeProc
	sent  []string // "PID:SIGTERM"
	// onOpen runs when a handle is opened, before the identity re-check.
	onOpen func(pid int)
}

type fakeProc struct {
	stat        gpu.ProcStat
	det         gpu.ProcDetails
	bytes       uint64
	hidden      bool // listed by the driver, absent from /proc
	ignoresTerm bool
}

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func newWorld() *world {
	w := &world{now: t0, base: 2 << 30, procs: map[int]*fakeProc{}}
	add := func(pid, ppid int, state string, cmd []string, bytes uint64, started time.Duration) *fakeProc {
		p := &fakeProc{
			stat:  gpu.ProcStat{PID: pid, PPID: ppid, Session: pid, State: state, Comm: "python", StartTime: t0.Add(-started), StartTicks: uint64(pid) * 100},
			det:   gpu.ProcDetails{UID: 1000, User: "alice", Cmdline: cmd, Cgroup: "/user.slice/user-1000.slice"},
			bytes: bytes,
		}
		w.procs[pid] = p
		return p
	}
	add(100, 0, "S", []string{"init"}, 0, 100*time.Hour) // parent of the living
	add(200, 100, "S", []string{"python", "serve.py"}, 8<<30, 5*time.Hour)
	add(500, 999, "S", []string{"python", "train.py", "--rank", "1"}, 6<<30, 2*time.Hour)                    // orphaned
	add(501, 999, "S", []string{"python", "train.py", "--rank", "2"}, 4<<30, 2*time.Hour).ignoresTerm = true // orphaned, stubborn
	add(502, 999, "S", []string{"python", "tiny.py"}, 100<<20, 2*time.Hour)                                  // orphaned, too small
	add(503, 999, "S", []string{"python", "young.py"}, 1<<30, time.Minute)                                   // orphaned, too young
	add(600, 100, "Z", []string{}, 2<<30, time.Hour)                                                         // zombie
	add(700, 100, "S", []string{"python", "-m", "ipykernel_launcher", "-f", "k.json"}, 3<<30, 3*time.Hour)   // idle notebook
	add(800, 0, "S", nil, 1<<30, time.Hour).hidden = true                                                    // no such process
	return w
}

func (w *world) Info() gpu.HostInfo             { return gpu.HostInfo{Driver: "580.00", Backend: "fake"} }
func (w *world) Devices() ([]gpu.Device, error) { return []gpu.Device{fakeDevice{w}}, nil }
func (w *world) Close() error                   { return nil }

func (w *world) Stat(pid int) (gpu.ProcStat, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.procs[pid]
	if !ok || p.hidden {
		return gpu.ProcStat{}, fmt.Errorf("stat %d: %w", pid, gpu.ErrNoProcess)
	}
	return p.stat, nil
}

func (w *world) Details(pid int) (gpu.ProcDetails, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p, ok := w.procs[pid]
	if !ok || p.hidden {
		return gpu.ProcDetails{}, fmt.Errorf("details %d: %w", pid, gpu.ErrNoProcess)
	}
	return p.det, nil
}

func (w *world) Open(pid int) (proc.Handle, error) {
	if w.onOpen != nil {
		w.onOpen(pid)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.procs[pid]; !ok {
		return nil, proc.ErrGone
	}
	return fakeHandle{w, pid}, nil
}

type fakeHandle struct {
	w   *world
	pid int
}

func (h fakeHandle) Signal(sig syscall.Signal) error {
	h.w.mu.Lock()
	defer h.w.mu.Unlock()
	h.w.sent = append(h.w.sent, fmt.Sprintf("%d:%s", h.pid, proc.SignalName(sig)))
	p, ok := h.w.procs[h.pid]
	if !ok {
		return syscall.ESRCH
	}
	if sig == syscall.SIGKILL || !p.ignoresTerm {
		delete(h.w.procs, h.pid)
	}
	return nil
}
func (fakeHandle) Close() error { return nil }

type fakeDevice struct{ w *world }

func (d fakeDevice) Identity() (gpu.Identity, error) {
	return gpu.Identity{Index: 0, UUID: "GPU-fake", Name: "Fake GPU"}, nil
}
func (d fakeDevice) Memory() (gpu.Memory, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	used := d.w.base
	for _, p := range d.w.procs {
		used += p.bytes
	}
	return gpu.Memory{Total: 80 << 30, Used: used, Free: 80<<30 - used}, nil
}
func (d fakeDevice) Utilization() (gpu.Utilization, error) { return gpu.Utilization{Known: true}, nil }
func (d fakeDevice) Processes() ([]gpu.DriverProcess, error) {
	d.w.mu.Lock()
	defer d.w.mu.Unlock()
	var out []gpu.DriverProcess
	for pid, p := range d.w.procs {
		if p.bytes > 0 {
			out = append(out, gpu.DriverProcess{PID: uint32(pid), Memory: p.bytes, MemoryKnown: true, Kind: gpu.KindCompute})
		}
	}
	return out, nil
}
func (d fakeDevice) ProcessUtilization(time.Time) ([]gpu.ProcessUtilization, error) {
	return nil, gpu.ErrNotSupported
}
func (d fakeDevice) AccountingEnabled() (bool, error)            { return false, nil }
func (d fakeDevice) Accounting() ([]gpu.AccountingRecord, error) { return nil, gpu.ErrNotSupported }

func (w *world) clock() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.now
}

func (w *world) sleep(ctx context.Context, d time.Duration) error {
	w.mu.Lock()
	w.now = w.now.Add(d)
	w.mu.Unlock()
	return ctx.Err()
}

func (w *world) signals() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.sent)
}

// env opens the world; answer is what the user types, tty whether stdin
// is a terminal.
func (w *world) env(answer string, tty bool) *cmdutil.Factory {
	f := cmdutil.New()
	f.OpenHost = func(o gpu.OpenOptions) (*gpu.Opened, error) {
		s, err := gpu.NewSampler(w, gpu.SamplerOptions{Procs: w, IdleWindow: o.IdleWindow, Now: w.clock})
		if err != nil {
			return nil, err
		}
		return &gpu.Opened{Host: w, Sampler: s, Procs: w, Hostname: "fake", Visible: gpu.Visible{All: true}, Shown: []int{0}, Total: 1}, nil
	}
	f.Signaller = w
	f.Now, f.Sleep, f.Self = w.clock, w.sleep, 4242
	f.In = strings.NewReader(answer)
	f.IsTerminal = func(any) bool { return tty }
	return f
}

func opts(args ...string) *Options {
	c := NewCmd(cmdutil.New())
	if err := c.Flags().Parse(args); err != nil {
		panic(err)
	}
	o := &Options{}
	// NewCmd binds its own Options; read them back through the flags.
	f := c.Flags()
	o.DryRun, _ = f.GetBool("dry-run")
	o.OlderThan, _ = f.GetDuration("older-than")
	o.IdleFor, _ = f.GetDuration("idle-for")
	o.MinBytes, _ = f.GetString("min-bytes")
	o.Yes, _ = f.GetBool("yes")
	o.Signal, _ = f.GetString("signal")
	o.Grace, _ = f.GetDuration("grace")
	o.Observe, _ = f.GetDuration("observe")
	o.Settle, _ = f.GetDuration("settle")
	o.JSON, _ = f.GetBool("json")
	o.Policy, _ = f.GetString("policy")
	return o
}

func run(t *testing.T, w *world, env *cmdutil.Factory, args ...string) (string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), env, opts(args...), env.In, &out, &errOut)
	return out.String() + errOut.String(), err
}

func TestDryRunListsWithEvidence(t *testing.T) {
	w := newWorld()
	out, err := run(t, w, w.env("", false), "--dry-run")
	if err != nil {
		t.Fatal(err)
	}
	if s := w.signals(); len(s) != 0 {
		t.Fatalf("dry run sent %v", s)
	}
	for _, want := range []string{
		"5 process(es) selected",
		"orphaned (its starter is gone)",
		"started 2h0m5s ago (rule: older than 10m0s)",
		"holds 6.00 GiB (rule: at least 256.00 MiB)",
		"idle notebook kernel for 3h0m5s",
		"idleness observed over 5s only",
		"cannot be signalled: it has already exited. Its memory is released when its parent (PID 100) reaps it",
		"cannot be signalled from here: /proc has no such process",
		"python train.py --rank 1",
		"Dry run: nothing signalled.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, absent := range []string{"tiny.py", "young.py", "serve.py"} {
		if strings.Contains(out, absent) {
			t.Errorf("output lists %s, which no rule selects:\n%s", absent, out)
		}
	}
}

func TestConfirmation(t *testing.T) {
	tests := []struct {
		name   string
		answer string
		tty    bool
		args   []string
		err    string
		sent   bool
	}{
		{name: "no terminal", tty: false, err: "refusing to signal 3 process(es) without a terminal"},
		{name: "no terminal json", tty: false, args: []string{"--json"}, err: "refusing"},
		{name: "declined", answer: "n\n", tty: true},
		{name: "empty answer", answer: "\n", tty: true},
		{name: "end of input", answer: "", tty: true},
		{name: "accepted", answer: "y\n", tty: true, sent: true},
		{name: "yes flag", tty: false, args: []string{"--yes"}, sent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld()
			out, err := run(t, w, w.env(tt.answer, tt.tty), append(tt.args, "--grace", "2s")...)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if got := len(w.signals()) > 0; got != tt.sent {
				t.Fatalf("signals %v, want sent=%v\n%s", w.signals(), tt.sent, out)
			}
			if tt.tty && !tt.sent && !strings.Contains(out, "Nothing signalled.") {
				t.Errorf("declining does not say so:\n%s", out)
			}
			if tt.tty && !strings.Contains(out, "Send SIGTERM (SIGKILL after 2s if still alive) to 3 process(es): 500, 501, 700? [y/N]") {
				t.Errorf("no question:\n%s", out)
			}
		})
	}
}

// TestTermThenKill: SIGTERM to all, SIGKILL only to the one still alive
// after the grace, and the memory freed as the re-sample shows it.
func TestTermThenKill(t *testing.T) {
	w := newWorld()
	usedBefore := uint64(0)
	if m, _ := (fakeDevice{w}).Memory(); true {
		usedBefore = m.Used
	}
	out, err := run(t, w, w.env("", false), "--yes", "--grace", "10s", "--json")
	if err != nil {
		t.Fatal(err)
	}
	jsondoc.Test(t, "vram reclaim --json", []byte(out[:strings.LastIndex(out, "}")+1]))
	want := []string{"500:SIGTERM", "501:SIGTERM", "700:SIGTERM", "501:SIGKILL"}
	if got := w.signals(); !slices.Equal(got, want) {
		t.Fatalf("signals %v, want %v", got, want)
	}
	var r Report
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &r); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	byPID := map[int]*Candidate{}
	for _, c := range r.Candidates {
		byPID[c.PID] = c
	}
	c := byPID[501]
	if len(c.Steps) != 2 || c.Exited {
		t.Fatalf("501: %+v", c)
	}
	if gap := c.Steps[1].Time.Sub(c.Steps[0].Time); gap < 10*time.Second {
		t.Errorf("SIGKILL %v after SIGTERM, want at least the grace", gap)
	}
	if !byPID[500].Exited || len(byPID[500].Steps) != 1 {
		t.Errorf("500 should have exited on SIGTERM: %+v", byPID[500])
	}
	for pid, bytes := range map[int]uint64{500: 6 << 30, 501: 4 << 30, 700: 3 << 30} {
		c := byPID[pid]
		if c.BytesAfter == nil || *c.BytesAfter != 0 || c.Freed != bytes {
			t.Errorf("PID %d: after %v freed %d, want %d", pid, c.BytesAfter, c.Freed, bytes)
		}
	}
	if r.FreedByProcesses != 13<<30 || r.FreedOnDevices != 13<<30 || !r.Measured {
		t.Errorf("freed %d by processes, %d on devices, want 13 GiB", r.FreedByProcesses, r.FreedOnDevices)
	}
	if r.DevicesBefore[0].UsedBytes != usedBefore || r.DevicesAfter[0].UsedBytes != usedBefore-13<<30 {
		t.Errorf("devices before %+v after %+v", r.DevicesBefore, r.DevicesAfter)
	}
	for _, pid := range []int{600, 800} {
		if len(byPID[pid].Steps) != 0 || byPID[pid].Action != "none" {
			t.Errorf("PID %d was acted on: %+v", pid, byPID[pid])
		}
	}
}

func TestTextResults(t *testing.T) {
	w := newWorld()
	out, err := run(t, w, w.env("", false), "--yes", "--signal", "KILL")
	if err != nil {
		t.Fatal(err)
	}
	if got := w.signals(); !slices.Equal(got, []string{"500:SIGKILL", "501:SIGKILL", "700:SIGKILL"}) {
		t.Fatalf("signals %v", got)
	}
	for _, want := range []string{"PID 500: SIGKILL sent", "GPU  USED BEFORE  USED AFTER", "Freed: 13.00 GiB by the signalled processes; 13.00 GiB on the devices"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestIdentityChangeRefuses(t *testing.T) {
	w := newWorld()
	w.onOpen = func(pid int) {
		if pid != 500 {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		// PID 500 exited and the PID went to a new process.
		w.procs[500] = &fakeProc{stat: gpu.ProcStat{PID: 500, PPID: 1, State: "S", Comm: "sshd", StartTime: w.now, StartTicks: 1}}
	}
	out, err := run(t, w, w.env("", false), "--yes", "--grace", "1s")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range w.signals() {
		if strings.HasPrefix(s, "500:") {
			t.Fatalf("signalled the new process behind PID 500: %v", w.signals())
		}
	}
	if !strings.Contains(out, "PID 500: SIGTERM not sent: PID 500 is now a different process (sshd") {
		t.Errorf("refusal not reported:\n%s", out)
	}
}

func TestNeverInitOrSelf(t *testing.T) {
	w := newWorld()
	w.procs[1] = &fakeProc{stat: gpu.ProcStat{PID: 1, PPID: 0, State: "S", Comm: "systemd", StartTime: t0.Add(-99 * time.Hour)}, det: gpu.ProcDetails{User: "root", Cmdline: []string{"/sbin/init"}}, bytes: 1 << 30}
	w.procs[4242] = &fakeProc{stat: gpu.ProcStat{PID: 4242, PPID: 999, State: "S", Comm: "vram", StartTime: t0.Add(-time.Hour)}, det: gpu.ProcDetails{User: "alice", Cmdline: []string{"vram", "reclaim"}}, bytes: 1 << 30}
	out, err := run(t, w, w.env("", false), "--yes", "--grace", "1s", "--json")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range w.signals() {
		if strings.HasPrefix(s, "1:") || strings.HasPrefix(s, "4242:") {
			t.Fatalf("signalled init or vram: %v", w.signals())
		}
	}
	if !strings.Contains(out, `"note": "this is vram itself"`) {
		t.Errorf("self not explained:\n%s", out)
	}
	// The mechanism refuses them too, whatever a plan says.
	for _, pid := range []int{1, 4242} {
		err := proc.Signal(w, w, 4242, proc.Identity{PID: pid, StartTime: t0}, syscall.SIGKILL)
		if !errors.Is(err, proc.ErrRefused) {
			t.Errorf("proc.Signal(%d) = %v, want a refusal", pid, err)
		}
	}
}

func TestJSONKeys(t *testing.T) {
	w := newWorld()
	out, err := run(t, w, w.env("", false), "--dry-run", "--json")
	if err != nil {
		t.Fatal(err)
	}
	jsondoc.Test(t, "vram reclaim --json", []byte(out[:strings.LastIndex(out, "}")+1]))
	var m map[string]any
	if err := json.Unmarshal([]byte(out[:strings.LastIndex(out, "}")+1]), &m); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if m["schema"] != Schema {
		t.Errorf("schema %v, want %s", m["schema"], Schema)
	}
	for _, k := range []string{"time", "simulated", "host", "dry_run", "rules", "observe_seconds", "signal", "grace_seconds",
		"processes", "declined", "measured", "devices", "freed_by_processes_bytes", "freed_on_devices_bytes", "notes", "warnings"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	procs := m["processes"].([]any)
	p := procs[0].(map[string]any)
	for _, k := range []string{"pid", "gpu_indexes", "bytes", "user", "command", "ppid", "state", "start_time", "age_seconds",
		"flags", "rule", "reasons", "action", "signals", "exited_in_grace", "freed_bytes"} {
		if _, ok := p[k]; !ok {
			t.Errorf("process JSON lacks %q", k)
		}
	}
	if m["dry_run"] != true || len(procs) != 5 {
		t.Errorf("dry_run %v, %d processes", m["dry_run"], len(procs))
	}
}

func TestPolicyFile(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := dir + "/p.yaml"
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// dry_run defaults to true: nothing is signalled, even with --yes.
	w := newWorld()
	p := write("version: 1\nreclaim:\n  - name: big-orphans\n    when: [orphaned]\n    min_bytes: 5GiB\n")
	out, err := run(t, w, w.env("", false), "--policy", p, "--yes")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.signals()) != 0 || !strings.Contains(out, "Dry run: nothing signalled.") || !strings.Contains(out, `p.yaml:3: reclaim rule "big-orphans"`) {
		t.Fatalf("signals %v\n%s", w.signals(), out)
	}
	if strings.Contains(out, "train.py --rank 2") {
		t.Errorf("the 4 GiB orphan is under the policy's min_bytes:\n%s", out)
	}
	// dry_run: false acts on the rule's selection only.
	w = newWorld()
	p = write("version: 1\ndry_run: false\ngrace: 1s\nreclaim:\n  - name: big-orphans\n    when: [orphaned]\n    min_bytes: 5GiB\n    action: kill\n")
	if _, err := run(t, w, w.env("", false), "--policy", p, "--yes"); err != nil {
		t.Fatal(err)
	}
	if got := w.signals(); !slices.Equal(got, []string{"500:SIGKILL"}) {
		t.Fatalf("signals %v", got)
	}
	// A bad file names the line and field.
	p = write("version: 1\nreclaim:\n  - name: x\n    when: [orphan]\n")
	if _, err := run(t, w, w.env("", false), "--policy", p); err == nil || !strings.Contains(err.Error(), `p.yaml:4: reclaim[0].when[0]: unknown condition "orphan"`) {
		t.Fatalf("err = %v", err)
	}
}

func TestBadFlags(t *testing.T) {
	w := newWorld()
	for _, args := range [][]string{
		{"--signal", "HUP"}, {"--min-bytes", "lots"}, {"--observe", "100ms"}, {"--grace", "-1s"}, {"--older-than", "-1m"},
	} {
		_, err := run(t, w, w.env("", false), args...)
		if cmdutil.ExitCode(err) != cmdutil.ExitUsage {
			t.Errorf("%v: err = %v, want a usage error", args, err)
		}
	}
	c := NewCmd(cmdutil.New())
	c.SetArgs([]string{"--policy", "x.yaml", "--min-bytes", "1GiB"})
	c.SetOut(&bytes.Buffer{})
	c.SetErr(&bytes.Buffer{})
	if err := c.Execute(); err == nil || !strings.Contains(err.Error(), "--min-bytes and --policy") {
		t.Errorf("flags with --policy: %v", err)
	}
}

// TestSimulatedHost runs the real command on the simulated host: the
// whole path, nothing sent, and the output says so.
func TestSimulatedHost(t *testing.T) {
	if testing.Short() {
		t.Skip("watches for a second")
	}
	var out, errOut bytes.Buffer
	c := NewCmd(cmdutil.New())
	c.SetArgs([]string{"--simulate", "1", "--observe", "1s", "--yes", "--grace", "0s", "--settle", "0s"})
	c.SetOut(&out)
	c.SetErr(&errOut)
	c.SetIn(strings.NewReader(""))
	if err := c.Execute(); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	s := out.String()
	if !strings.Contains(s, simBanner) || !strings.Contains(s, "(simulated: not sent)") {
		t.Errorf("simulated run does not say so:\n%s", s)
	}
}

func TestInterruptedWhileWatching(t *testing.T) {
	w := newWorld()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out bytes.Buffer
	env := w.env("", false)
	err := Run(ctx, env, opts("--yes"), env.In, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "interrupted while watching the GPUs: nothing signalled") || len(w.signals()) != 0 {
		t.Fatalf("err = %v, signals %v", err, w.signals())
	}
}
