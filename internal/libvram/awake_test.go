package libvram

import (
	"testing"
	"time"

	"github.com/vramhq/vram/alloc"
)

// waitFor polls cond for up to d.
func waitFor(d time.Duration, cond func() bool) bool {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if cond() {
			return true
		}
		time.Sleep(time.Millisecond)
	}
	return cond()
}

func TestKeeperRunsWhileCalled(t *testing.T) {
	k := &keeper{period: time.Millisecond, idleAfter: 20 * time.Millisecond}
	if k.running.Load() {
		t.Fatal("running before any call")
	}
	k.touch()
	if !k.running.Load() || k.started.Load() != 1 {
		t.Fatalf("after a call: running %v, started %d", k.running.Load(), k.started.Load())
	}
	// Calls more often than idleAfter keep the one keeper alive.
	for i := 0; i < 10; i++ {
		time.Sleep(5 * time.Millisecond)
		k.touch()
	}
	if !k.running.Load() || k.started.Load() != 1 {
		t.Fatalf("during calls: running %v, started %d (want one keeper all along)", k.running.Load(), k.started.Load())
	}
	if !waitFor(2*time.Second, func() bool { return !k.running.Load() }) {
		t.Fatal("the keeper did not stop after the calls stopped")
	}
	k.touch()
	if !k.running.Load() || k.started.Load() != 2 {
		t.Fatalf("a call after the stop: running %v, started %d (want a second keeper)", k.running.Load(), k.started.Load())
	}
	if !waitFor(2*time.Second, func() bool { return !k.running.Load() }) {
		t.Fatal("the second keeper did not stop")
	}
}

func TestHostCallsStartTheKeeper(t *testing.T) {
	h := New(SimOpener(1<<30), "sim", alloc.Config{})
	p, err := h.Malloc(4096, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if !h.keep.running.Load() {
		t.Error("Malloc did not start the keeper")
	}
	if err := h.Free(p, 0); err != nil {
		t.Fatal(err)
	}
}
