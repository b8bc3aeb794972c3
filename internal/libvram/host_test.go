package libvram_test

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/internal/libvram"
)

const miB = 1 << 20

func newHost(t *testing.T, conf string) *libvram.Host {
	t.Helper()
	c, err := alloc.ParseConfig(conf)
	if err != nil {
		t.Fatal(err)
	}
	return libvram.New(libvram.SimOpener(1<<30), "sim", c)
}

func TestMallocFreeStats(t *testing.T) {
	h := newHost(t, "")
	st, err := h.Stats(3)
	if err != nil || st["allocated_bytes.all.current"] != 0 || st["max_split_size"] != -1 {
		t.Fatalf("idle device: %v %v", st["max_split_size"], err)
	}
	if got := h.Devices(); len(got) != 0 {
		t.Fatalf("devices before any allocation: %v", got)
	}
	p, err := h.Malloc(3*miB, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	q, err := h.Malloc(1000, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ = h.Stats(1)
	if st["allocated_bytes.all.current"] != 3*miB+1024 || st["requested_bytes.all.current"] != 3*miB+1000 {
		t.Fatalf("allocated %d requested %d", st["allocated_bytes.all.current"], st["requested_bytes.all.current"])
	}
	if err := h.Free(p, 1); err != nil {
		t.Fatal(err)
	}
	if err := h.Free(p, 1); !errors.Is(err, alloc.ErrDoubleFree) {
		t.Fatalf("double free: %v", err)
	}
	if err := h.Free(q, 0); err == nil || !strings.Contains(err.Error(), "device 0") {
		t.Fatalf("free on a device that allocated nothing: %v", err)
	}
	if err := h.Free(q, 1); err != nil {
		t.Fatal(err)
	}
	if got := h.Devices(); len(got) != 1 || got[0] != 1 {
		t.Fatalf("devices: %v", got)
	}
	if err := h.EmptyCache(-1); err != nil {
		t.Fatal(err)
	}
	st, _ = h.Stats(1)
	if st["reserved_bytes.all.current"] != 0 || st["allocated_bytes.all.peak"] != 3*miB+1024 {
		t.Fatalf("after empty_cache: reserved %d, peak %d", st["reserved_bytes.all.current"], st["allocated_bytes.all.peak"])
	}
	if err := h.ResetPeakStats(1); err != nil {
		t.Fatal(err)
	}
	st, _ = h.Stats(1)
	if st["allocated_bytes.all.peak"] != 0 {
		t.Fatalf("peak after reset: %d", st["allocated_bytes.all.peak"])
	}
	for _, d := range []int{-1, libvram.MaxDevices} {
		if _, err := h.Malloc(1, d, 0); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("device %d: %v", d, err)
		}
	}
}

func TestOutOfMemoryWording(t *testing.T) {
	h := newHost(t, "max_bytes:64MiB")
	_, err := h.Malloc(100*miB, 2, 0)
	var oom *libvram.OutOfMemoryError
	if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
		t.Fatalf("want an out-of-memory error, got %v", err)
	}
	msg := err.Error()
	// format_size's thresholds are inclusive: exactly 1 GiB is "1024.00 MiB".
	for _, want := range []string{"CUDA out of memory. Tried to allocate 100.00 MiB. GPU 2 has a total capacity of 1024.00 MiB", "64.00 MiB allowed", "vram: "} {
		if !strings.Contains(msg, want) {
			t.Errorf("message lacks %q:\n%s", want, msg)
		}
	}
	if !strings.HasPrefix(msg, "CUDA out of memory.") {
		t.Errorf("message does not start like PyTorch's: %s", msg)
	}
}

func TestConfigureAndCap(t *testing.T) {
	h := newHost(t, "")
	if err := h.Configure("max_bytes:lots"); err == nil || !strings.Contains(err.Error(), "max_bytes") {
		t.Fatalf("bad conf: %v", err)
	}
	if err := h.Configure("page_mapped:true,max_bytes:512MiB"); err != nil {
		t.Fatal(err)
	}
	if err := h.SetFraction(0, 0.125); err != nil { // before the allocator exists
		t.Fatal(err)
	}
	if _, err := h.Malloc(200*miB, 0, 0); err == nil {
		t.Fatal("200 MiB under a 128 MiB fraction cap")
	}
	p, err := h.Malloc(100*miB, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Configure("max_bytes:1GiB"); !errors.Is(err, libvram.ErrStarted) {
		t.Fatalf("configure after the first allocation: %v", err)
	}
	if err := h.Configure(h.Config()); err != nil {
		t.Fatalf("configure with the settings in force: %v", err)
	}
	if err := h.SetFraction(0, 0.5); err != nil { // after: 512 MiB from max_bytes and the fraction
		t.Fatal(err)
	}
	q, err := h.Malloc(300*miB, 0, 0)
	if err != nil {
		t.Fatalf("300 MiB more under a 512 MiB cap: %v", err)
	}
	for _, f := range []float64{-0.1, 0, 1.1} {
		if err := h.SetFraction(0, f); err == nil {
			t.Errorf("fraction %v accepted", f)
		}
	}
	// The settings' max_bytes stays a ceiling: a limit above it changes nothing.
	if err := h.SetLimit(0, 4<<30); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Malloc(300*miB, 0, 0); err == nil {
		t.Fatal("a limit above max_bytes raised the cap")
	}
	if err := h.SetLimit(0, 450*miB); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Malloc(60*miB, 0, 0); err == nil {
		t.Fatal("60 MiB more under a 450 MiB limit with 400 MiB allocated")
	}
	_ = h.Free(p, 0)
	_ = h.Free(q, 0)
	if !strings.Contains(h.Config(), "page_mapped:true") {
		t.Fatalf("config %q", h.Config())
	}
}

func TestRecordStreamAnyDevice(t *testing.T) {
	h := newHost(t, "")
	p, err := h.Malloc(miB, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RecordStream(p, -1, 5); err != nil {
		t.Fatal(err)
	}
	if err := h.RecordStream(p+1<<40, -1, 5); !errors.Is(err, alloc.ErrUnknownPointer) {
		t.Fatalf("unknown pointer: %v", err)
	}
	if err := h.Free(p, 1); err != nil {
		t.Fatal(err)
	}
}

// TestConcurrent: many goroutines on two devices; the statistics end exact.
func TestConcurrent(t *testing.T) {
	h := newHost(t, "")
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			dev := g % 2
			var live []uint64
			for i := 0; i < 2000; i++ {
				p, err := h.Malloc(uint64(512*(1+(i*7+g)%300)), dev, alloc.Stream(g))
				if err != nil {
					t.Error(err)
					return
				}
				live = append(live, p)
				if i%3 == 0 {
					if err := h.Free(live[0], dev); err != nil {
						t.Error(err)
						return
					}
					live = live[1:]
				}
			}
			for _, p := range live {
				if err := h.Free(p, dev); err != nil {
					t.Error(err)
				}
			}
		}(g)
	}
	wg.Wait()
	for d := 0; d < 2; d++ {
		st, _ := h.Stats(d)
		if st["allocated_bytes.all.current"] != 0 || st["allocation.all.allocated"] != 8000 || st["allocation.all.freed"] != 8000 {
			t.Errorf("device %d: current %d, allocated %d, freed %d", d,
				st["allocated_bytes.all.current"], st["allocation.all.allocated"], st["allocation.all.freed"])
		}
	}
}

func TestTorchSnapshot(t *testing.T) {
	h := newHost(t, "trace_events:16")
	empty, err := json.Marshal(h.TorchSnapshot())
	if err != nil {
		t.Fatal(err)
	}
	if string(empty) == "" || !strings.Contains(string(empty), `"segments":[]`) {
		t.Fatalf("empty snapshot: %s", empty)
	}
	p, _ := h.Malloc(3*miB, 1, 7)
	q, _ := h.Malloc(1000, 1, 7)
	_ = h.Free(q, 1)
	_, _ = h.Malloc(2<<30, 1, 7) // out of memory
	s := h.TorchSnapshot()
	if len(s.DeviceTraces) != 2 || len(s.DeviceTraces[0]) != 0 {
		t.Fatalf("device_traces: %+v", s.DeviceTraces)
	}
	var actions []string
	for _, e := range s.DeviceTraces[1] {
		actions = append(actions, e.Action)
	}
	if got := strings.Join(actions, ","); got != "alloc,alloc,free_requested,free_completed,oom" {
		t.Fatalf("actions %s", got)
	}
	var allocated, blocks uint64
	for _, seg := range s.Segments {
		if seg.Device != 1 || seg.Stream != 7 {
			t.Errorf("segment %+v", seg)
		}
		for _, b := range seg.Blocks {
			blocks++
			if b.State == "active_allocated" {
				allocated += b.Size
			}
		}
	}
	if allocated != 3*miB || blocks == 0 {
		t.Fatalf("allocated blocks %d bytes in %d blocks", allocated, blocks)
	}
	if s.AllocatorSettings["VRAM_ALLOC_CONF"] != "trace_events:16" {
		t.Fatalf("settings %v", s.AllocatorSettings)
	}
	_ = h.Free(p, 1)
}

func TestNewFromEnv(t *testing.T) {
	for _, tc := range []struct {
		env     map[string]string
		backend string
		err     string
	}{
		{map[string]string{}, "cuda", ""},
		{map[string]string{"VRAM_DEVICE": "sim", "VRAM_SIM_CAPACITY": "8GiB", "VRAM_ALLOC_CONF": "page_mapped:true"}, "sim", ""},
		{map[string]string{"VRAM_DEVICE": "tpu"}, "", `VRAM_DEVICE="tpu": want cuda or sim`},
		{map[string]string{"VRAM_DEVICE": "sim", "VRAM_SIM_CAPACITY": "lots"}, "", `VRAM_SIM_CAPACITY="lots"`},
		{map[string]string{"VRAM_ALLOC_CONF": "page_mapped:perhaps"}, "", "VRAM_ALLOC_CONF: "},
	} {
		h, err := libvram.NewFromEnv(func(k string) string { return tc.env[k] })
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%v: %v, want %q", tc.env, err, tc.err)
			}
			continue
		}
		if err != nil || h.Backend() != tc.backend {
			t.Errorf("%v: %v, %v", tc.env, h, err)
			continue
		}
		if tc.backend == "sim" {
			st, _ := h.Stats(0)
			_ = st
			p, err := h.Malloc(miB, 0, 0)
			if err != nil || h.Config() != "page_mapped:true" {
				t.Errorf("sim host: %v, config %q", err, h.Config())
			}
			_ = h.Free(p, 0)
		}
	}
}
