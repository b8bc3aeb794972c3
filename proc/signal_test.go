package proc

import (
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"
)

type fakeStater map[int]Stat

func (f fakeStater) Stat(pid int) (Stat, error) {
	st, ok := f[pid]
	if !ok {
		return Stat{}, ErrNoProcess
	}
	return st, nil
}

type fakeSignaller struct {
	sent []int
	err  error
}

type fakeHandle struct {
	f   *fakeSignaller
	pid int
}

func (f *fakeSignaller) Open(pid int) (Handle, error) { return fakeHandle{f, pid}, nil }
func (h fakeHandle) Signal(sig syscall.Signal) error {
	if h.f.err != nil {
		return h.f.err
	}
	h.f.sent = append(h.f.sent, h.pid)
	return nil
}
func (fakeHandle) Close() error { return nil }

func TestSignal(t *testing.T) {
	start := time.Date(2026, 11, 30, 1, 0, 0, 0, time.UTC)
	procs := fakeStater{
		500: {PID: 500, State: "S", Comm: "python", StartTime: start, StartTicks: 1000},
		600: {PID: 600, State: "S", Comm: "bash", StartTime: start.Add(time.Hour), StartTicks: 9000},
	}
	tests := []struct {
		name    string
		id      Identity
		sigErr  error
		sent    bool
		refused bool
		gone    bool
	}{
		{name: "same process", id: Identity{PID: 500, StartTime: start}, sent: true},
		{name: "same by ticks", id: Identity{PID: 500, StartTicks: 1000, StartTime: start.Add(time.Second)}, sent: true},
		{name: "pid reused", id: Identity{PID: 600, StartTime: start}, refused: true, gone: true},
		{name: "exited", id: Identity{PID: 700, StartTime: start}, refused: true, gone: true},
		{name: "init", id: Identity{PID: 1, StartTime: start}, refused: true},
		{name: "not a pid", id: Identity{PID: 0, StartTime: start}, refused: true},
		{name: "self", id: Identity{PID: 42, StartTime: start}, refused: true},
		{name: "unknown start", id: Identity{PID: 500}, refused: true},
		{name: "not permitted", id: Identity{PID: 500, StartTime: start}, sigErr: syscall.EPERM},
		{name: "exited meanwhile", id: Identity{PID: 500, StartTime: start}, sigErr: syscall.ESRCH, gone: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sg := &fakeSignaller{err: tt.sigErr}
			err := Signal(procs, sg, 42, tt.id, syscall.SIGTERM)
			if tt.sent != (len(sg.sent) == 1) {
				t.Fatalf("sent %v, want sent=%v (err %v)", sg.sent, tt.sent, err)
			}
			if tt.sent && err != nil {
				t.Fatalf("err = %v", err)
			}
			if got := errors.Is(err, ErrRefused); got != tt.refused {
				t.Errorf("refused = %v, want %v (err %v)", got, tt.refused, err)
			}
			if got := errors.Is(err, ErrGone); got != tt.gone {
				t.Errorf("gone = %v, want %v (err %v)", got, tt.gone, err)
			}
			if tt.sigErr != nil && !errors.Is(err, tt.sigErr) {
				t.Errorf("err = %v, want it to wrap %v", err, tt.sigErr)
			}
			if err != nil && strings.Contains(err.Error(), "\n") {
				t.Errorf("the message is not one line: %q", err)
			}
		})
	}
}

func TestAlive(t *testing.T) {
	start := time.Unix(1000, 0)
	procs := fakeStater{
		10: {PID: 10, State: "S", StartTime: start},
		11: {PID: 11, State: "Z", StartTime: start},
	}
	for _, tt := range []struct {
		id   Identity
		want bool
	}{
		{Identity{PID: 10, StartTime: start}, true},
		{Identity{PID: 10, StartTime: start.Add(1)}, false},
		{Identity{PID: 11, StartTime: start}, false},
		{Identity{PID: 12, StartTime: start}, false},
	} {
		got, err := Alive(procs, tt.id)
		if err != nil || got != tt.want {
			t.Errorf("Alive(%+v) = %v, %v; want %v", tt.id, got, err, tt.want)
		}
	}
}
