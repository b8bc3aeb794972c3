package libvram_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/internal/libvram"
)

func readChannel(t *testing.T, dir string) []statchan.Record {
	t.Helper()
	r := &statchan.Reader{Dir: dir}
	defer r.Close()
	recs, err := r.Read(nil)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

func TestChannel(t *testing.T) {
	dir := t.TempDir()
	h := newHost(t, "max_bytes:64MiB")
	var created, removed []string
	err := h.EnableChannel(libvram.ChannelOptions{Dir: dir, Interval: time.Hour, // updates only on events here
		Created: func(p string) { created = append(created, p) }, Removed: func(p string) { removed = append(removed, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if recs := readChannel(t, dir); len(recs) != 0 {
		t.Fatalf("before any allocation: %+v", recs)
	}
	p, err := h.Malloc(3*miB, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	recs := readChannel(t, dir)
	if len(recs) != 1 || recs[0].PID != os.Getpid() || recs[0].Device != 2 || recs[0].Backend != "sim" || recs[0].UUIDKnown {
		t.Fatalf("after the first allocation: %+v", recs)
	}
	// The first update comes with the allocator, before the allocation.
	if recs[0].Cap != 64*miB || recs[0].DeviceTotal != 1<<30 || recs[0].Config != "max_bytes:67108864" {
		t.Fatalf("first update: %+v", recs[0])
	}
	if _, err := h.Malloc(100*miB, 2, 0); err == nil {
		t.Fatal("100 MiB under a 64 MiB cap")
	}
	// An out-of-memory error publishes at once.
	recs = readChannel(t, dir)
	if f := recs[0].Figures; f.NumOOMs != 1 || f.Allocated != 3*miB || f.Reserved != 20*miB || f.FreeCached != 17*miB || f.LargestFree != 17*miB {
		t.Fatalf("after the OOM: %+v", f)
	}
	if err := h.Free(p, 2); err != nil {
		t.Fatal(err)
	}
	if err := h.EmptyCache(-1); err != nil {
		t.Fatal(err)
	}
	if f := readChannel(t, dir)[0].Figures; f.Reserved != 0 || f.AllocatedPeak != 3*miB {
		t.Fatalf("after empty_cache: %+v", f)
	}
	if err := h.SetLimit(2, 32*miB); err != nil {
		t.Fatal(err)
	}
	if f := readChannel(t, dir)[0].Figures; f.Cap != 32*miB {
		t.Fatalf("after SetLimit: cap %d", f.Cap)
	}
	info := h.Info()
	if len(info.Channel) != 1 || info.ChannelError != "" || !slices.Equal(info.Channel, created) {
		t.Fatalf("Info: %+v, created %v", info, created)
	}
	if err := h.CloseChannel(); err != nil {
		t.Fatal(err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 || !slices.Equal(removed, created) {
		t.Fatalf("after CloseChannel: left %v, removed %v", left, removed)
	}
	if _, err := h.Malloc(1*miB, 2, 0); err != nil { // the allocator still works
		t.Fatal(err)
	}
}

func TestChannelPeriodicUpdates(t *testing.T) {
	dir := t.TempDir()
	h := newHost(t, "")
	if err := h.EnableChannel(libvram.ChannelOptions{Dir: dir, Interval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	defer h.CloseChannel()
	if _, err := h.Malloc(1*miB, 0, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		recs := readChannel(t, dir)
		if len(recs) == 1 && recs[0].Allocated == 1*miB {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the allocation never reached the channel: %+v", recs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestChannelUnwritableDir(t *testing.T) {
	h := newHost(t, "")
	var warned []string
	err := h.EnableChannel(libvram.ChannelOptions{Dir: filepath.Join(t.TempDir(), "missing"), Warn: func(m string) { warned = append(warned, m) }})
	if err != nil {
		t.Fatal(err)
	}
	defer h.CloseChannel()
	for d := range 2 {
		if _, err := h.Malloc(1*miB, d, 0); err != nil {
			t.Fatalf("an allocation failed for the channel's sake: %v", err)
		}
	}
	if len(warned) != 1 || h.Info().ChannelError == "" {
		t.Fatalf("warnings %q, info %+v: want one warning", warned, h.Info())
	}
}

func TestChannelFromEnv(t *testing.T) {
	tests := []struct {
		env     map[string]string
		dir     string
		every   time.Duration
		wantErr bool
	}{
		{map[string]string{}, statchan.DefaultDir, 0, false},
		{map[string]string{"VRAM_CHANNEL_DIR": "off"}, "", 0, false},
		{map[string]string{"VRAM_CHANNEL_DIR": "/tmp/x", "VRAM_CHANNEL_INTERVAL": "250ms"}, "/tmp/x", 250 * time.Millisecond, false},
		{map[string]string{"VRAM_CHANNEL_INTERVAL": "1ms"}, "", 0, true},
		{map[string]string{"VRAM_CHANNEL_INTERVAL": "soon"}, "", 0, true},
	}
	for _, tt := range tests {
		opt, err := libvram.ChannelFromEnv(func(k string) string { return tt.env[k] })
		if (err != nil) != tt.wantErr || !tt.wantErr && (opt.Dir != tt.dir || opt.Interval != tt.every) {
			t.Errorf("%v: %+v, %v", tt.env, opt, err)
		}
	}
}
