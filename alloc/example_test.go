package alloc_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

func ExampleAllocator() {
	dev := sim.MustNew(sim.Config{Capacity: 1 << 30}) // or cudadev for a real GPU
	a, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		panic(err)
	}
	p, _ := a.Malloc(3000, 0) // grows by one 2 MiB segment
	_ = a.Free(p)             // cached, not returned to the device
	q, _ := a.Malloc(2500, 0) // served from the cache
	s := a.Stats()
	fmt.Println(p == q, s.NumDeviceAlloc, s.AllocatedBytes.All.Current, s.ReservedBytes.All.Current)
	_ = a.Free(q)
	released, _ := a.EmptyCache()
	fmt.Println(released)
	// Output:
	// true 1 2560 2097152
	// 2097152
}

func ExampleAllocator_Summary() {
	a, _ := alloc.New(sim.MustNew(sim.Config{Capacity: 1 << 30}), alloc.Config{})
	p, _ := a.Malloc(5<<20, 0)
	q, _ := a.Malloc(1000, 0)
	_ = a.Free(q)
	lines := strings.Split(a.Summary(), "\n")
	for _, l := range lines[5:11] {
		fmt.Println(l)
	}
	_ = a.Free(p)
	// Output:
	// |        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |
	// |---------------------------------------------------------------------------|
	// | Allocated memory      |   5120 KiB |   5121 KiB |   5121 KiB |   1024 B   |
	// |       from large pool |   5120 KiB |   5120 KiB |   5120 KiB |      0 B   |
	// |       from small pool |      0 KiB |      1 KiB |      1 KiB |   1024 B   |
	// |---------------------------------------------------------------------------|
}

func ExampleScope() {
	a, _ := alloc.New(sim.MustNew(sim.Config{}), alloc.Config{})
	step := a.NewScope()
	for i := 0; i < 3; i++ {
		buf, _ := step.Alloc(1<<20, 0)
		_ = buf.Memset(0)
	}
	freed, _ := step.Close() // everything the step allocated
	fmt.Println(freed, a.Stats().Allocation.All.Current)
	// Output: 3145728 0
}

func ExampleBuffer() {
	a, _ := alloc.New(sim.MustNew(sim.Config{}), alloc.Config{})
	buf, _ := a.Alloc(16, 0)
	_ = buf.CopyFromHost([]byte("hello, device!!!"))
	view, _ := buf.Slice(7, 6)
	out := make([]byte, 6)
	_ = view.CopyToHost(out)
	fmt.Println(string(out))
	_ = buf.Free()
	fmt.Println(errors.Is(view.CopyToHost(out), alloc.ErrFreed))
	// Output:
	// device
	// true
}

func ExampleOutOfMemoryError() {
	a, _ := alloc.New(sim.MustNew(sim.Config{Capacity: 64 << 20}), alloc.Config{MaxBytes: 32 << 20})
	_, err := a.Malloc(40<<20, 0)
	var oom *alloc.OutOfMemoryError
	if errors.As(err, &oom) {
		fmt.Println(oom.Requested>>20, oom.Cap>>20, oom.DeviceFree>>20)
	}
	// Output: 40 32 64
}

func ExampleParseConfig() {
	c, err := alloc.ParseConfig("max_bytes:8GiB,garbage_collection_threshold:0.8,record_call_sites:all")
	fmt.Println(c.MaxBytes, c.GarbageCollectionThreshold, c.RecordCallSites, err)
	_, err = alloc.ParseConfig("max_fraction:2")
	fmt.Println(err)
	// Output:
	// 8589934592 0.8 all <nil>
	// max_fraction: bad value "2": out of range [0, 1]
}

func ExampleAllocator_Since() {
	a, _ := alloc.New(sim.MustNew(sim.Config{}), alloc.Config{RecordCallSites: alloc.CallSitesAll})
	mark := a.Mark()
	kept, _ := a.Malloc(4096, 0) // "forgotten" by the step
	tmp, _ := a.Malloc(8192, 0)
	_ = a.Free(tmp)
	for _, al := range a.Since(mark) {
		fmt.Println(al.Requested, strings.Contains(al.Site, "ExampleAllocator_Since"))
	}
	_ = a.Free(kept)
	// Output: 4096 true
}
