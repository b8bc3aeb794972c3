package replay

import (
	"errors"
	"strings"
	"testing"

	"github.com/vramhq/vram/gpu"
)

// procDevice answers Processes only.
type procDevice struct {
	gpu.Device
	ps  []gpu.DriverProcess
	err error
}

func (d procDevice) Processes() ([]gpu.DriverProcess, error) { return d.ps, d.err }

func TestOwnMemory(t *testing.T) {
	for _, tc := range []struct {
		name    string
		d       procDevice
		want    uint64
		wantErr string
	}{
		{"listed", procDevice{ps: []gpu.DriverProcess{{PID: 7, Memory: 5 << 20, MemoryKnown: true}, {PID: 42, Memory: 600 << 20, MemoryKnown: true}}}, 600 << 20, ""},
		{"not listed: no context yet", procDevice{ps: []gpu.DriverProcess{{PID: 7, Memory: 5 << 20, MemoryKnown: true}}}, 0, ""},
		{"memory unknown", procDevice{ps: []gpu.DriverProcess{{PID: 42}}}, 0, "does not report"},
		{"driver error", procDevice{err: errors.New("nvml: GPU is lost")}, 0, "GPU is lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ownMemory(tc.d, 42)()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
