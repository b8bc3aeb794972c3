package gpu

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
)

// The UUID of the mock's GPU 0, GPU-0000a100-1111-2222-3333-444455556666, as bytes.
var mockUUID0 = [16]byte{0, 0, 0xa1, 0, 0x11, 0x11, 0x22, 0x22, 0x33, 0x33, 0x44, 0x44, 0x55, 0x55, 0x66, 0x66}

func writeChannel(t *testing.T, dir string, h statchan.Header, f statchan.Figures) {
	t.Helper()
	w, err := statchan.Create(dir, h)
	if err != nil {
		t.Fatal(err)
	}
	w.Publish(f, time.Now())
	t.Cleanup(func() { w.Close() })
}

func TestSamplerAttachesChannel(t *testing.T) {
	dir := t.TempDir()
	figs := statchan.Figures{Allocated: 8 << 30, AllocatedPeak: 9 << 30, Reserved: 11 << 30, ReservedPeak: 11 << 30,
		Active: 8 << 30, ActivePeak: 9 << 30, FreeCached: 3 << 30, LargestFree: 2 << 30, MaxSplitSize: -1}
	// PID 1000 (start time 60000 in testdata/proc) on the mock's GPU 0;
	// PID 2000 with a record of another GPU; PID 3000 on the simulated
	// backend, which no real GPU carries.
	writeChannel(t, dir, statchan.Header{PID: 1000, Device: 1, StartTicks: 60000, UUID: mockUUID0, UUIDKnown: true, Backend: "cuda"}, figs)
	writeChannel(t, dir, statchan.Header{PID: 2000, Device: 0, StartTicks: 61000, UUID: [16]byte{9}, UUIDKnown: true, Backend: "cuda"}, figs)
	writeChannel(t, dir, statchan.Header{PID: 3000, Device: 0, StartTicks: 62000, Backend: "sim"}, figs)
	h, err := NewNVML(mockServer(t))
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSampler(h, SamplerOptions{Procs: fixtureProcs(t), Now: fixedClock(fixtureBoot.Add(24 * time.Hour)),
		Channel: &statchan.Reader{Dir: dir, ProcRoot: "testdata/proc"}})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := s.Sample()
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, p := range snap.Processes {
		switch {
		case p.PID == 1000 && p.Device == 0:
			found++
			if p.Alloc == nil || p.Alloc.Allocated != 8<<30 || p.Alloc.Reserved != 11<<30 {
				t.Errorf("PID 1000 on GPU 0: Alloc %+v", p.Alloc)
			}
		case p.Alloc != nil:
			t.Errorf("PID %d on GPU %d has the channel record of device %d", p.PID, p.Device, p.Alloc.Device)
		}
	}
	if found != 1 {
		t.Fatalf("PID 1000 on GPU 0 appears %d times", found)
	}
}

func TestSimAdoptsChannel(t *testing.T) {
	dir := t.TempDir()
	start, err := statchan.SelfStartTicks("/proc")
	if err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	writeChannel(t, dir, statchan.Header{PID: pid, Device: 1, StartTicks: start, Backend: "sim"},
		statchan.Figures{Allocated: 1 << 30, AllocatedPeak: 1 << 30, Active: 1 << 30, ActivePeak: 1 << 30, Reserved: 2 << 30, ReservedPeak: 2 << 30, MaxSplitSize: -1})
	// A record of a real GPU is not the simulated host's.
	writeChannel(t, dir, statchan.Header{PID: pid, Device: 0, StartTicks: start, UUID: [16]byte{1}, UUIDKnown: true, Backend: "cuda"}, statchan.Figures{MaxSplitSize: -1})
	op, err := Open(OpenOptions{Simulate: 2, Seed: 1, ChannelDir: dir, Getenv: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Host.Close()
	snap, err := op.Sampler.Sample()
	if err != nil {
		t.Fatal(err)
	}
	var got []Process
	for _, p := range snap.Processes {
		if int(p.PID) == pid {
			got = append(got, p)
		}
	}
	if len(got) != 1 || got[0].Device != 1 || got[0].Memory != 2<<30+simContext || got[0].Alloc == nil || got[0].Alloc.Allocated != 1<<30 {
		t.Fatalf("this process on the simulated host: %+v", got)
	}
	if got[0].Comm == "" || got[0].Flags&FlagNoSuchProcess != 0 {
		t.Fatalf("its /proc details are missing: %+v", got[0])
	}
	// The device's used memory counts it.
	before, _ := NewSim(2, 1, nil)
	m0, _ := before.devs[1].Memory()
	m1, _ := op.Host.(*Sim).devs[1].Memory()
	if m1.Used-m0.Used < 2<<30 {
		t.Fatalf("GPU 1 used %d with the process, %d without", m1.Used, m0.Used)
	}
}

// TestOpenRemovesStaleChannel: with RemoveStaleChannel the sampler's
// reader removes the file of a process that is gone; without it the file
// stays (and is skipped).
func TestOpenRemovesStaleChannel(t *testing.T) {
	for _, remove := range []bool{false, true} {
		for _, simulate := range []int{0, 1} {
			dir, root := t.TempDir(), t.TempDir() // an empty /proc: every process is gone
			writeChannel(t, dir, statchan.Header{PID: 4242, Device: 0, StartTicks: 99, Backend: "sim"}, statchan.Figures{MaxSplitSize: -1})
			o := OpenOptions{Simulate: simulate, Seed: 1, ChannelDir: dir, ProcRoot: root, RemoveStaleChannel: remove,
				Getenv: func(string) (string, bool) { return "", false }}
			if simulate == 0 {
				o.OpenNVML = func() (Host, error) { return NewSim(1, 1, nil) }
			}
			op, err := Open(o)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := op.Sampler.Sample(); err != nil {
				t.Fatal(err)
			}
			op.Host.Close()
			left, _ := filepath.Glob(filepath.Join(dir, "vram-stats.*"))
			if remove != (len(left) == 0) {
				t.Errorf("RemoveStaleChannel %v, simulated %v: files left %v", remove, simulate > 0, left)
			}
		}
	}
}

func TestChannelOff(t *testing.T) {
	op, err := Open(OpenOptions{Simulate: 1, ChannelDir: "off"})
	if err != nil {
		t.Fatal(err)
	}
	defer op.Host.Close()
	if op.Channel != nil {
		t.Fatal("ChannelDir off: a channel reader")
	}
}

// countingChannel is a ChannelReader that counts its reads and fails the
// ones listed in fail (by read number, from 1).
type countingChannel struct {
	reads int
	fail  map[int]bool
}

func (c *countingChannel) Read(dst []statchan.Record) ([]statchan.Record, error) {
	c.reads++
	if c.fail[c.reads] {
		return dst[:0], fmt.Errorf("statistics channel: read %d failed", c.reads)
	}
	return dst[:0], nil
}

// TestSamplerChannelRefresh: with ChannelRefresh the channel is read at
// most once per period, and a failed read's warning stays on the samples
// that reuse it; zero reads it at every sample.
func TestSamplerChannelRefresh(t *testing.T) {
	tests := []struct {
		refresh  time.Duration
		step     time.Duration
		samples  int
		want     int // reads
		warnings int // samples carrying the first read's warning
	}{
		{0, 100 * time.Millisecond, 10, 10, 1},
		{950 * time.Millisecond, 100 * time.Millisecond, 25, 3, 10}, // at 0, 1.0 s, 2.0 s
		{500 * time.Millisecond, time.Second, 5, 5, 1},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.refresh, " every ", tt.step), func(t *testing.T) {
			now := time.Unix(1_800_000_000, 0)
			clock := func() time.Time { return now }
			sim, err := NewSim(1, 1, clock)
			if err != nil {
				t.Fatal(err)
			}
			ch := &countingChannel{fail: map[int]bool{1: true}}
			s, err := NewSampler(sim, SamplerOptions{Channel: ch, Now: clock})
			if err != nil {
				t.Fatal(err)
			}
			s.SetChannelRefresh(tt.refresh)
			warned := 0
			for range tt.samples {
				snap, err := s.Sample()
				if err != nil {
					t.Fatal(err)
				}
				for _, w := range snap.Warnings {
					if strings.Contains(w, "read 1 failed") {
						warned++
					}
				}
				now = now.Add(tt.step)
			}
			if ch.reads != tt.want || warned != tt.warnings {
				t.Errorf("%d reads, %d samples warned; want %d, %d", ch.reads, warned, tt.want, tt.warnings)
			}
		})
	}
}

// fixedChannel is a ChannelReader that reads the same records every time.
type fixedChannel []statchan.Record

func (f fixedChannel) Read(dst []statchan.Record) ([]statchan.Record, error) {
	return append(dst[:0], f...), nil
}

// TestSimAdoptedHidesSynthetic: a real process on the simulated backend
// whose PID a synthetic process also holds (the simulation draws PIDs a
// real process may have) is listed once, on its own device, and the
// synthetic one is gone from the lists and from the device's memory.
func TestSimAdoptedHidesSynthetic(t *testing.T) {
	s, err := NewSim(2, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	syn := s.byDev[1][0]
	pid := syn.stat.PID
	before, err := s.devs[1].Memory()
	if err != nil {
		t.Fatal(err)
	}
	s.AdoptChannel(fixedChannel{{Header: statchan.Header{PID: pid, Device: 0, Backend: "sim"}, Figures: statchan.Figures{Reserved: 1 << 30}}}, nil)
	lists := map[int]int{}
	for d := 0; d < 2; d++ {
		ps, err := s.devs[d].Processes()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps {
			if int(p.PID) == pid {
				lists[d]++
				if p.Memory != 1<<30+simContext {
					t.Errorf("PID %d on GPU %d: %d bytes, want the adopted process's %d", pid, d, p.Memory, 1<<30+simContext)
				}
			}
		}
	}
	if lists[0] != 1 || lists[1] != 0 {
		t.Fatalf("PID %d listed %v times by GPU; want once, on GPU 0", pid, lists)
	}
	after, err := s.devs[1].Memory()
	if err != nil {
		t.Fatal(err)
	}
	if after.Used >= before.Used {
		t.Fatalf("GPU 1 used %d bytes with its synthetic PID %d hidden, %d before", after.Used, pid, before.Used)
	}
}
