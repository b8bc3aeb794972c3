//go:build gpu

package alloc_test

import (
	"testing"

	"github.com/vramhq/vram/alloc"
)

// Lending on the real driver (paged_lend.go): a growth maps the idle pages
// that a live block pins a second time, the device's free memory falls by
// the shortfall only, every block keeps its contents through the alias, and
// the memory is all back after Close. VRAM_GPU_TEST_SIM=1 runs it on the
// simulated device.
func TestGPUPagedLending(t *testing.T) {
	gd := openGPU(t)
	var d alloc.Device = gd.sim
	if gd.cu != nil {
		d = gd.cu
	}
	defer alloc.ForceFine()()     // lending on every growth, as under a cap
	defer alloc.SetSizeShare(0)() // 20 MiB chunks
	free0, _, err := d.MemInfo()
	if err != nil {
		t.Fatal(err)
	}
	a, err := alloc.New(d, alloc.Config{PageMapped: true})
	if err != nil {
		t.Fatal(err)
	}
	q, p2 := pinnedChunk(t, a, d, 0)
	freeBefore, _, _ := d.MemInfo()
	st0 := a.Stats()
	r := mustMalloc(t, a, 30*miB, 0)
	check(t, a)
	freeAfter, _, _ := d.MemInfo()
	if got := a.Stats().NumPageLends - st0.NumPageLends; got != 1 {
		t.Errorf("%d runs lent, want 1", got)
	}
	if drop := freeBefore - freeAfter; drop < 14*miB || drop > 16*miB {
		t.Errorf("device free memory fell by %d bytes for 30 MiB with 16 MiB lent, want 14 MiB (at most 16)", drop)
	}
	fill(t, d, r, 30*miB, 3)
	same(t, d, q, 4*miB, 1)
	same(t, d, p2, 20*miB, 2)
	same(t, d, r, 30*miB, 3)
	mustFree(t, a, r)
	mustFree(t, a, q)
	if _, err := a.EmptyCache(); err != nil {
		t.Fatal(err)
	}
	check(t, a)
	if n := a.LentBytes(); n != 0 {
		t.Errorf("%d bytes still lent after EmptyCache with the home chunk idle", n)
	}
	same(t, d, p2, 20*miB, 2)
	mustFree(t, a, p2)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if free, _, _ := d.MemInfo(); free != free0 {
		t.Errorf("device free memory %d after Close, %d before", free, free0)
	}
}
