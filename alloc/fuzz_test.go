package alloc_test

import (
	"errors"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

// FuzzAllocator decodes a byte string into allocator operations, three
// bytes each (operation, size, argument), and checks every invariant after
// each one. The first byte picks the configuration.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 0, 10, 0, 0, 200, 1, 1, 0, 0})
	f.Add([]byte{1, 0, 255, 0, 0, 255, 0, 1, 0, 0, 2, 0, 3, 0, 0, 0})
	f.Add([]byte{2, 0, 40, 2, 3, 0, 1, 1, 0, 0, 5, 0, 0, 0, 90, 0})
	f.Fuzz(runOps)
}

// runOps is FuzzAllocator's body.
func runOps(t *testing.T, data []byte) {
	{
		if len(data) == 0 {
			return
		}
		var cfg alloc.Config
		switch data[0] % 4 {
		case 1:
			cfg.MaxSplitSize = 20 * miB
		case 2:
			cfg.MaxBytes = 48 * miB
			cfg.GarbageCollectionThreshold = 0.5
		case 3:
			for i := range cfg.RoundupPower2Divisions {
				cfg.RoundupPower2Divisions[i] = 4
			}
		}
		dev := sim.MustNew(sim.Config{Capacity: 128 * miB, HoldEvents: true})
		a, err := alloc.New(syncDev{dev}, cfg)
		if err != nil {
			t.Fatal(err)
		}
		m := &model{a: a, dev: dev, live: map[uint64]liveAlloc{}}
		var order []uint64 // live pointers in allocation order, for picking
		data = data[1:]
		for len(data) >= 3 {
			op, x, y := data[0], uint64(data[1]), data[2]
			data = data[3:]
			switch op % 6 {
			case 0, 1: // allocate: x picks a size scale, y the stream
				size := (x%64 + 1) << (x / 64 * 5) // 1 B .. 64 MiB in four scales
				before := len(m.live)
				if err := m.alloc(size*uint64(y%7+1), alloc.Stream(y%3)); err != nil {
					t.Fatal(err)
				}
				if len(m.live) > before {
					for p := range m.live {
						if !contains(order, p) {
							order = append(order, p)
						}
					}
				}
			case 2: // free the x-th live allocation
				if len(order) == 0 {
					continue
				}
				i := int(x) % len(order)
				p := order[i]
				order = append(order[:i], order[i+1:]...)
				if err := m.free(p); err != nil {
					t.Fatal(err)
				}
			case 3: // record a use on another stream
				if len(order) > 0 {
					if err := a.RecordStream(order[int(x)%len(order)], alloc.Stream(y%3)); err != nil {
						t.Fatal(err)
					}
				}
			case 4:
				if y%2 == 0 {
					dev.CompleteEvents()
				} else if _, err := a.EmptyCache(); err != nil {
					t.Fatal(err)
				}
			case 5: // bad frees change nothing
				err := a.Free(uint64(x)<<20 | uint64(y))
				if !errors.Is(err, alloc.ErrUnknownPointer) && !errors.Is(err, alloc.ErrDoubleFree) && !errors.Is(err, alloc.ErrInteriorPointer) && err != nil {
					t.Fatalf("bad free: %v", err)
				}
			}
			if err := m.verify(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func contains(s []uint64, v uint64) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
