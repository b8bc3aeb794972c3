//go:build gpu

package gpu

// Tests and benchmarks on a real NVIDIA driver. Run on a GPU host with
// processes holding memory (scripts/gpu/monitor.sh starts them):
//
//	go test -c -tags gpu -o .gpu/gpu.test ./gpu
//	VRAM_EXPECT_CMD=hold.py ./.gpu/gpu.test -test.v -test.run GPU -test.bench GPU

import (
	"os"
	"strings"
	"testing"
	"time"
)

func realSampler(t testing.TB) (*Sampler, *NVML) {
	t.Helper()
	h, err := OpenNVML()
	if err != nil {
		t.Fatal(err)
	}
	pfs, err := NewProcFS("/proc", nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(h, SamplerOptions{Procs: pfs})
	if err != nil {
		t.Fatal(err)
	}
	return s, h
}

func TestGPUSnapshot(t *testing.T) {
	s, h := realSampler(t)
	defer h.Close()
	t.Logf("host: %+v", h.Info())
	snap, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range snap.Devices {
		m := d.Memory
		t.Logf("GPU %d %s %s: total %d used %d free %d reserved %d (v2 %v) util %+v processes %d (sum %d) unattributed %d idle method %v",
			d.Index, d.Name, d.UUID, m.Total, m.Used, m.Free, m.Reserved, m.ReservedKnown, d.Utilization, d.Processes, d.ProcessMemory, d.Unattributed, d.IdleMethod)
		if m.Total == 0 || m.Used+m.Free+m.Reserved != m.Total {
			t.Errorf("GPU %d: total %d != used %d + free %d + reserved %d", d.Index, m.Total, m.Used, m.Free, m.Reserved)
		}
	}
	want := os.Getenv("VRAM_EXPECT_CMD")
	found := 0
	for _, p := range snap.Processes {
		t.Logf("pid %d gpu %d mem %d kind %v user %s flags %v sm %d util-known %v start %v cmd %q", p.PID, p.Device, p.Memory, p.Kind, p.User, p.Flags, p.SM, p.UtilKnown, p.StartTime.Format(time.RFC3339), p.Command())
		if want != "" && strings.Contains(p.Command(), want) {
			found++
			if !p.MemoryKnown || p.Memory == 0 || p.User == "" || p.StartTime.IsZero() || p.Flags&FlagNoSuchProcess != 0 {
				t.Errorf("pid %d not fully enriched: %+v", p.PID, p)
			}
		}
	}
	if want != "" && found == 0 {
		t.Errorf("no process running %q found", want)
	}
	// How far back the driver's per-process utilization buffer reaches.
	devs, _ := h.Devices()
	samples, err := devs[0].ProcessUtilization(time.Time{})
	if err != nil {
		t.Logf("process utilization: %v", err)
	} else if len(samples) > 0 {
		oldest := time.Now()
		for _, u := range samples {
			if u.Time.Before(oldest) {
				oldest = u.Time
			}
		}
		t.Logf("process utilization: %d samples, oldest %v ago", len(samples), time.Since(oldest).Round(time.Millisecond))
	}
	for _, a := range s.Accounting() {
		t.Logf("accounting GPU %d: enabled %v err %v records %d", a.Index, a.Enabled, a.Err, len(a.Records))
	}
}

func BenchmarkGPUSample(b *testing.B) {
	s, h := realSampler(b)
	defer h.Close()
	s.Sample() // warm the /proc cache
	b.ResetTimer()
	for b.Loop() {
		if _, err := s.Sample(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGPUSampleMemoryOnly(b *testing.B) {
	s, h := realSampler(b)
	defer h.Close()
	var dst []MemorySample
	for b.Loop() {
		var err error
		if dst, err = s.SampleMemory(dst); err != nil {
			b.Fatal(err)
		}
	}
}

// The NVML calls of a full sample, one by one.
func BenchmarkGPUCalls(b *testing.B) {
	h, err := OpenNVML()
	if err != nil {
		b.Fatal(err)
	}
	defer h.Close()
	devs, _ := h.Devices()
	d := devs[0]
	calls := []struct {
		name string
		f    func() error
	}{
		{"Memory", func() error { _, err := d.Memory(); return err }},
		{"Utilization", func() error { _, err := d.Utilization(); return err }},
		{"Processes", func() error { _, err := d.Processes(); return err }},
		{"ProcessUtilization", func() error { _, err := d.ProcessUtilization(time.Now().Add(-time.Second)); return err }},
	}
	for _, c := range calls {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				if err := c.f(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
