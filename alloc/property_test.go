package alloc_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"testing"

	"pgregory.net/rapid"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// syncDev is a simulated device whose events are held until the allocator
// waits for them: EventSynchronize completes them, as waiting on a real
// stream finishes its work.
type syncDev struct{ *sim.Device }

func (d syncDev) EventSynchronize(alloc.Event) error {
	d.CompleteEvents()
	return nil
}

// model is the test's view of the live allocations.
type model struct {
	a    *alloc.Allocator
	dev  *sim.Device
	live map[uint64]liveAlloc
	tag  uint64
}

type liveAlloc struct {
	size uint64
	s    alloc.Stream
	tag  uint64
}

// alloc allocates and writes a tag at both ends of the new memory, which
// later checks read back: an allocator that hands out overlapping memory
// fails them even if its own bookkeeping looks consistent.
func (m *model) alloc(size uint64, s alloc.Stream) error {
	p, err := m.a.Malloc(size, s)
	if err != nil {
		var oom *alloc.OutOfMemoryError
		if !errors.As(err, &oom) || !errors.Is(err, alloc.ErrOutOfMemory) {
			return fmt.Errorf("Malloc(%d) failed with a non-OOM error: %w", size, err)
		}
		if oom.Requested != size || oom.Stream != s || oom.LargestFreeBlock > oom.FreeReserve {
			return fmt.Errorf("OOM report inconsistent: %+v", oom)
		}
		return nil
	}
	if _, dup := m.live[p]; dup {
		return fmt.Errorf("Malloc returned live pointer %#x again", p)
	}
	m.tag++
	m.live[p] = liveAlloc{size, s, m.tag}
	return m.writeTag(p, size, m.tag)
}

func (m *model) writeTag(p, size, tag uint64) error {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], tag)
	n := min(size, 8)
	for _, off := range tagOffsets(size) {
		if err := m.dev.CopyHtoD(p+off, b[:n]); err != nil {
			return err
		}
	}
	return nil
}

// tagOffsets are where an allocation's tag goes: its start, and its end
// when the two copies do not overlap.
func tagOffsets(size uint64) []uint64 {
	if size < 16 {
		return []uint64{0}
	}
	return []uint64{0, size - 8}
}

func (m *model) checkTag(p uint64, la liveAlloc) error {
	var want [8]byte
	binary.LittleEndian.PutUint64(want[:], la.tag)
	n := min(la.size, 8)
	got := make([]byte, n)
	for _, off := range tagOffsets(la.size) {
		if err := m.dev.CopyDtoH(got, p+off); err != nil {
			return err
		}
		if string(got) != string(want[:n]) {
			return fmt.Errorf("allocation %#x (tag %d) was overwritten at offset %d", p, la.tag, off)
		}
	}
	return nil
}

// withAllocFree adds the two actions every property test of the model
// takes, allocate (a drawn size on one of streams) and free (a live
// allocation), to a test's own actions.
func (m *model) withAllocFree(streams []alloc.Stream, actions map[string]func(*rapid.T)) map[string]func(*rapid.T) {
	actions["alloc"] = func(t *rapid.T) {
		if err := m.alloc(drawSize(t), rapid.SampledFrom(streams).Draw(t, "stream")); err != nil {
			t.Fatal(err)
		}
	}
	actions["free"] = func(t *rapid.T) {
		p, _, ok := m.pick(t)
		if !ok {
			t.Skip("nothing live")
		}
		if err := m.free(p); err != nil {
			t.Fatal(err)
		}
	}
	return actions
}

func (m *model) pick(t *rapid.T) (uint64, liveAlloc, bool) {
	if len(m.live) == 0 {
		return 0, liveAlloc{}, false
	}
	ptrs := make([]uint64, 0, len(m.live))
	for p := range m.live {
		ptrs = append(ptrs, p)
	}
	sort.Slice(ptrs, func(i, j int) bool { return ptrs[i] < ptrs[j] })
	p := rapid.SampledFrom(ptrs).Draw(t, "ptr")
	return p, m.live[p], true
}

func (m *model) free(p uint64) error {
	la := m.live[p]
	if err := m.checkTag(p, la); err != nil {
		return err
	}
	delete(m.live, p)
	return m.a.Free(p)
}

// verify checks the allocator's invariants and the model against it.
func (m *model) verify() error {
	if err := m.a.CheckInvariants(); err != nil {
		return err
	}
	s := m.a.Stats()
	if got := s.Allocation.All.Current; got != int64(len(m.live)) {
		return fmt.Errorf("allocation.all.current = %d, model has %d", got, len(m.live))
	}
	var req int64
	type iv struct{ lo, hi uint64 }
	var ivs []iv
	for p, la := range m.live {
		req += int64(la.size)
		ivs = append(ivs, iv{p, p + m.a.BlockSize(p)})
		if m.a.BlockSize(p) < la.size {
			return fmt.Errorf("allocation %#x: block %d smaller than request %d", p, m.a.BlockSize(p), la.size)
		}
	}
	sort.Slice(ivs, func(i, j int) bool { return ivs[i].lo < ivs[j].lo })
	for i := 1; i < len(ivs); i++ {
		if ivs[i].lo < ivs[i-1].hi {
			return fmt.Errorf("live blocks [%#x,%#x) and [%#x,%#x) overlap", ivs[i-1].lo, ivs[i-1].hi, ivs[i].lo, ivs[i].hi)
		}
	}
	// Requested bytes count pending blocks too, so they can only be more.
	if s.RequestedBytes.All.Current < req {
		return fmt.Errorf("requested_bytes.all.current = %d < live requests %d", s.RequestedBytes.All.Current, req)
	}
	if used := m.dev.Stats(); s.ReservedBytes.All.Current > 0 && used.InUse < uint64(s.ReservedBytes.All.Current) {
		return fmt.Errorf("allocator reserves %d bytes, device has only %d in use", s.ReservedBytes.All.Current, used.InUse)
	}
	return nil
}

// drawConfig picks a configuration that exercises the policies.
func drawConfig(t *rapid.T) alloc.Config {
	var c alloc.Config
	if rapid.Bool().Draw(t, "maxSplit") {
		c.MaxSplitSize = uint64(rapid.IntRange(20, 64).Draw(t, "maxSplitMiB")) << 20
	}
	if rapid.Bool().Draw(t, "divisions") {
		d := uint32(1) << rapid.IntRange(1, 3).Draw(t, "log2div")
		for i := range c.RoundupPower2Divisions {
			c.RoundupPower2Divisions[i] = d
		}
	}
	if rapid.Bool().Draw(t, "gc") {
		c.GarbageCollectionThreshold = rapid.Float64Range(0.3, 1).Draw(t, "gcThreshold")
	}
	if rapid.Bool().Draw(t, "cap") {
		c.MaxBytes = uint64(rapid.IntRange(32, 256).Draw(t, "capMiB")) << 20
	}
	if rapid.Bool().Draw(t, "prealloc") {
		c.PreallocBytes = uint64(rapid.IntRange(1, 24).Draw(t, "preallocMiB")) << 20
	}
	c.PoisonOnFree = rapid.IntRange(0, 3).Draw(t, "poison") == 0 // costly on the simulated device
	return c
}

func drawSize(t *rapid.T) uint64 {
	switch rapid.IntRange(0, 9).Draw(t, "class") {
	case 0, 1, 2, 3:
		return rapid.Uint64Range(1, 4096).Draw(t, "tiny")
	case 4, 5:
		return rapid.Uint64Range(4097, 1<<20).Draw(t, "small")
	case 6, 7:
		return rapid.Uint64Range(1<<20+1, 10<<20).Draw(t, "mid")
	default:
		return rapid.Uint64Range(10<<20, 120<<20).Draw(t, "large")
	}
}

// TestPropertyRandomOps runs random sequences of allocations, frees,
// cross-stream uses, cache releases and device failures, and checks every
// invariant after every step.
func TestPropertyRandomOps(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		cfg := drawConfig(t)
		dev := sim.MustNew(sim.Config{Capacity: 256 << 20, HoldEvents: true})
		a, err := alloc.New(syncDev{dev}, cfg)
		if err != nil {
			t.Skip("config rejected by New:", err)
		}
		m := &model{a: a, dev: dev, live: map[uint64]liveAlloc{}}
		streams := []alloc.Stream{0, 1, 2}
		t.Repeat(m.withAllocFree(streams, map[string]func(*rapid.T){
			"recordStream": func(t *rapid.T) {
				p, _, ok := m.pick(t)
				if !ok {
					t.Skip("nothing live")
				}
				if err := a.RecordStream(p, rapid.SampledFrom(streams).Draw(t, "use")); err != nil {
					t.Fatal(err)
				}
			},
			"completeEvents": func(t *rapid.T) {
				if rapid.Bool().Draw(t, "all") {
					dev.CompleteEvents()
				} else {
					dev.CompleteStream(rapid.SampledFrom(streams).Draw(t, "stream"))
				}
			},
			"emptyCache": func(t *rapid.T) {
				if _, err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
				if _, rel := a.SegmentCount(); rel != 0 {
					t.Fatalf("%d releasable segments left after EmptyCache", rel)
				}
			},
			"failingDevice": func(t *rapid.T) {
				remove := dev.FailNth(sim.KindMalloc, uint64(rapid.IntRange(1, 2).Draw(t, "nth")))
				defer remove()
				if err := m.alloc(drawSize(t), rapid.SampledFrom(streams).Draw(t, "stream")); err != nil {
					t.Fatal(err)
				}
			},
			"badFree": func(t *rapid.T) {
				p, la, ok := m.pick(t)
				if !ok {
					t.Skip("nothing live")
				}
				if la.size > 512 {
					if err := a.Free(p + 512); !errors.Is(err, alloc.ErrInteriorPointer) {
						t.Fatalf("interior free: %v", err)
					}
				}
				if err := a.Free(12345); !errors.Is(err, alloc.ErrUnknownPointer) {
					t.Fatalf("foreign free: %v", err)
				}
			},
			"": func(t *rapid.T) {
				if err := m.verify(); err != nil {
					t.Fatal(err)
				}
			},
		}))
		for p := range m.live {
			if err := m.free(p); err != nil {
				t.Fatal(err)
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if st := dev.Stats(); st.InUse != 0 {
			t.Fatalf("device still has %d bytes in use after Close", st.InUse)
		}
		if n := dev.LiveEvents(); n != 0 {
			t.Fatalf("%d events leaked", n)
		}
	})
}
