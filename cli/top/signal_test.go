package top

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// handRig is a model over a hand-built snapshot of one GPU and a real
// (non-simulated) host, with fakes for /proc and kill(2).
func handRig(t *testing.T, cfg Config, procs ...gpu.Process) (*simRig, *fakeSignaller, fakeStater) {
	t.Helper()
	sig := &fakeSignaller{}
	st := fakeStater{}
	for _, p := range procs {
		if !p.StartTime.IsZero() {
			st[int(p.PID)] = gpu.ProcStat{PID: int(p.PID), Comm: "python", StartTime: p.StartTime}
		}
	}
	cfg.Interval, cfg.Window, cfg.Self = time.Second, 60, 4242
	if cfg.Signaller == nil {
		cfg.Signaller = sig
	}
	if cfg.Procs == nil {
		cfg.Procs = st
	}
	r := &simRig{t: t, now: t0, m: New(cfg, nil)}
	r.send(sampleMsg{snap: &gpu.Snapshot{
		Time:      t0,
		Host:      gpu.HostInfo{Driver: "580.65.06", CUDA: "13.0", Backend: "nvml"},
		Devices:   []gpu.DeviceState{{Identity: gpu.Identity{Index: 0, UUID: "GPU-0", Name: "NVIDIA H200"}, Memory: gpu.Memory{Total: 140 << 30, Used: 30 << 30, Free: 110 << 30}}},
		Processes: procs,
	}})
	return r, sig, st
}

func gpuProc(pid uint32, start time.Time, cmd ...string) gpu.Process {
	return gpu.Process{PID: pid, Memory: 20 << 30, MemoryKnown: true, StartTime: start, Cmdline: cmd, User: "alice"}
}

var started = t0.Add(-time.Hour)

func TestSignalNeedsConfirmation(t *testing.T) {
	for _, tc := range []struct {
		key string
		sig syscall.Signal
	}{{"t", syscall.SIGTERM}, {"k", syscall.SIGKILL}} {
		r, sig, _ := handRig(t, Config{}, gpuProc(1234, started, "python", "train.py"))
		if cmd := r.keys(tc.key); cmd != nil {
			t.Fatalf("%s sent something before confirmation", tc.key)
		}
		f := r.frame()
		for _, want := range []string{"Send " + sigName(tc.sig) + "?", "PID      1234 on GPU 0, holding 20.0 GiB", "python train.py", "y: send " + sigName(tc.sig)} {
			if !strings.Contains(f, want) {
				t.Errorf("dialog lacks %q:\n%s", want, f)
			}
		}
		if len(sig.sent) != 0 {
			t.Fatal("signal sent while the dialog is open")
		}
		cmd := r.keys("y")
		if cmd == nil {
			t.Fatal("y gave no command")
		}
		r.send(cmd())
		if len(sig.sent) != 1 || sig.sent[0] != (sent{1234, tc.sig}) {
			t.Errorf("sent %v, want %s to 1234", sig.sent, sigName(tc.sig))
		}
		if want := "sent " + sigName(tc.sig) + " to PID 1234 (python train.py)"; !strings.Contains(r.frame(), want) {
			t.Errorf("status line lacks %q:\n%s", want, r.frame())
		}
	}
}

func TestSignalCancel(t *testing.T) {
	for _, key := range []string{"n", "esc", "q", "enter", "t"} {
		r, sig, _ := handRig(t, Config{}, gpuProc(1234, started, "python"))
		r.keys("t")
		if cmd := r.keys(key); cmd != nil {
			t.Errorf("%s after t returned a command", key)
		}
		if len(sig.sent) != 0 || r.m.confirm != nil || !strings.Contains(r.m.status, "cancelled") {
			t.Errorf("%s did not cancel: sent %v, status %q", key, sig.sent, r.m.status)
		}
	}
}

func TestSignalRefusals(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		procs  []gpu.Process
		stat   map[int]gpu.ProcStat // overrides after the sample
		sigErr error
		dialog bool   // a dialog opens (the refusal comes after y)
		want   string // in the status line
	}{
		{name: "read-only", cfg: Config{ReadOnly: true}, procs: []gpu.Process{gpuProc(1234, started, "python")}, want: "read-only mode (--read-only)"},
		{name: "PID 1", procs: []gpu.Process{gpuProc(1, started, "/sbin/init")}, want: "PID 1 is init"},
		{name: "vram itself", procs: []gpu.Process{gpuProc(4242, started, "vram", "top")}, want: "PID 4242 is vram itself"},
		{name: "not in /proc", procs: []gpu.Process{{PID: 777, Memory: 1 << 30, MemoryKnown: true, Flags: gpu.FlagNoSuchProcess}}, want: "not visible in /proc"},
		{name: "no identity source", cfg: Config{Procs: nilStater{}}, procs: []gpu.Process{gpuProc(1234, started, "python")}, dialog: true, want: "re-check PID 1234"},
		{name: "PID reused", procs: []gpu.Process{gpuProc(1234, started, "python")}, stat: map[int]gpu.ProcStat{1234: {PID: 1234, Comm: "sshd", StartTime: started.Add(time.Minute)}}, dialog: true, want: "PID 1234 is now a different process (sshd"},
		{name: "exited", procs: []gpu.Process{gpuProc(1234, started, "python")}, stat: map[int]gpu.ProcStat{}, dialog: true, want: "PID 1234 has exited"},
		{name: "not permitted", procs: []gpu.Process{gpuProc(1234, started, "python")}, sigErr: syscall.EPERM, dialog: true, want: "not permitted"},
		{name: "gone at kill", procs: []gpu.Process{gpuProc(1234, started, "python")}, sigErr: syscall.ESRCH, dialog: true, want: "exited meanwhile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, sig, st := handRig(t, tt.cfg, tt.procs...)
			sig.err = tt.sigErr
			if tt.stat != nil {
				clear(st)
				for k, v := range tt.stat {
					st[k] = v
				}
			}
			r.keys("t")
			if (r.m.confirm != nil) != tt.dialog {
				t.Fatalf("dialog open %v, want %v (status %q)", r.m.confirm != nil, tt.dialog, r.m.status)
			}
			if tt.dialog {
				r.send(r.keys("y")())
			}
			if !strings.Contains(r.m.status, tt.want) || !r.m.statusBad {
				t.Errorf("status %q (bad %v), want it to contain %q", r.m.status, r.m.statusBad, tt.want)
			}
			if tt.sigErr == nil && len(sig.sent) != 0 {
				t.Errorf("a refused signal was sent: %v", sig.sent)
			}
		})
	}
}

// nilStater fails every read the way an unreadable /proc does.
type nilStater struct{}

func (nilStater) Stat(pid int) (gpu.ProcStat, error) {
	return gpu.ProcStat{}, errors.New("open /proc/1234/stat: permission denied")
}

func TestSignalFromDetailScreen(t *testing.T) {
	r, sig, _ := handRig(t, Config{}, gpuProc(1234, started, "python"), gpuProc(5678, started, "python", "b.py"))
	r.keys("down", "enter", "k")
	if r.m.confirm == nil || r.m.confirm.t.PID != 5678 {
		t.Fatalf("k on the detail screen of 5678 asked about %+v", r.m.confirm)
	}
	r.send(r.keys("y")())
	if len(sig.sent) != 1 || sig.sent[0] != (sent{5678, syscall.SIGKILL}) {
		t.Errorf("sent %v", sig.sent)
	}
}

func TestSimulatedHostSignalsNothingReal(t *testing.T) {
	r := newSimRig(t, 1, Config{})
	r.samples(3)
	r.keys("t")
	r.send(r.keys("y")())
	if !strings.Contains(r.m.status, "simulated host: SIGTERM to PID") || !strings.Contains(r.m.status, "no real process was signalled") {
		t.Errorf("status %q", r.m.status)
	}
}

func TestCheckTarget(t *testing.T) {
	tests := []struct {
		t    target
		want string // "" means allowed
	}{
		{target{PID: 0, Start: started}, "init (or not a process)"},
		{target{PID: 1, Start: started}, "PID 1 is init"},
		{target{PID: -5, Start: started}, "init (or not a process)"},
		{target{PID: 4242, Start: started}, "vram itself"},
		{target{PID: 99}, "identity cannot be checked"},
		{target{PID: 99, Start: started}, ""},
	}
	for _, tt := range tests {
		err := checkTarget(tt.t, 4242)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%+v refused: %v", tt.t, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, proc.ErrRefused)):
			t.Errorf("%+v: error %v, want a refusal containing %q", tt.t, err, tt.want)
		}
	}
}
