package gpu

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestSimFailDevice(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	sim, err := NewSim(3, 1, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(sim, SamplerOptions{Procs: sim, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.FailDevice(1, nil); err != nil {
		t.Fatal(err)
	}
	snap, err := s.Sample()
	if err != nil {
		t.Fatalf("one failed GPU of three failed the sample: %v", err)
	}
	var ne *NVMLError
	if d := snap.Devices[1]; !errors.As(d.Err, &ne) || ne.Return != nvml.ERROR_GPU_IS_LOST || !strings.Contains(d.Err.Error(), "device 1") {
		t.Errorf("GPU 1 err = %v, want GPU_IS_LOST", d.Err)
	}
	if snap.Devices[0].Err != nil || snap.Devices[2].Err != nil {
		t.Errorf("healthy GPUs failed: %v, %v", snap.Devices[0].Err, snap.Devices[2].Err)
	}
	for _, p := range snap.Processes {
		if p.Device == 1 {
			t.Errorf("a process of the failed GPU was listed: %+v", p)
		}
	}
	if len(snap.Warnings) != 1 || !strings.HasPrefix(snap.Warnings[0], "GPU 1:") {
		t.Errorf("warnings = %q", snap.Warnings)
	}

	custom := errors.New("bus reset")
	for i := range 3 {
		if err := sim.FailDevice(i, custom); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Sample(); !errors.Is(err, custom) {
		t.Errorf("every GPU failed: err = %v, want it to wrap the injected error", err)
	}
	for i := range 3 {
		sim.RestoreDevice(i)
	}
	snap, err = s.Sample()
	if err != nil || snap.Devices[1].Err != nil {
		t.Errorf("after restore: %v / %v", err, snap.Devices[1].Err)
	}
	var ie *IndexError
	if err := sim.FailDevice(3, nil); !errors.As(err, &ie) {
		t.Errorf("FailDevice(3) on 3 GPUs: %v", err)
	}
}
