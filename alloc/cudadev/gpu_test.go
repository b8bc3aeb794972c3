//go:build gpu

package cudadev

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/cuda"
)

func openGPU(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func fill(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*31) ^ seed
	}
	return b
}

func TestGPUDevice(t *testing.T) {
	d := openGPU(t)
	free, total, err := d.MemInfo()
	must(t, err)
	if free == 0 || free > total {
		t.Fatalf("MemInfo = %d free of %d", free, total)
	}
	const n = 3<<20 + 7
	a, err := d.Malloc(n)
	must(t, err)
	b, err := d.Malloc(n)
	must(t, err)
	in := fill(n, 0x5a)
	must(t, d.CopyHtoD(a, in))
	must(t, d.CopyDtoD(b, a, n))
	must(t, d.Memset(b+100, 0xff, 50))
	out := make([]byte, n)
	must(t, d.CopyDtoH(out, b))
	for i := 100; i < 150; i++ {
		in[i] = 0xff
	}
	if !bytes.Equal(in, out) {
		t.Fatal("round trip through the alloc.Device methods differs")
	}
	must(t, d.Free(a))
	must(t, d.Free(b))
	if _, err := d.Malloc(0); err == nil {
		t.Error("Malloc(0) succeeded")
	}
	if err := d.Free(a); err == nil || !strings.Contains(err.Error(), "cuMemFree_v2") {
		t.Errorf("double Free = %v", err)
	}
}

func TestGPUStreamsAndEvents(t *testing.T) {
	d := openGPU(t)
	for _, mk := range []func() (alloc.Stream, error){d.NewStream, d.NewNonBlockingStream} {
		s, err := mk()
		must(t, err)
		ev, err := d.EventCreate()
		must(t, err)
		must(t, d.EventRecord(ev, s))
		must(t, d.EventSynchronize(ev))
		done, err := d.EventQuery(ev)
		must(t, err)
		if !done {
			t.Error("EventQuery after EventSynchronize = not done")
		}
		must(t, d.EventDestroy(ev))
		must(t, d.SynchronizeStream(s))
		must(t, d.DestroyStream(s))
	}
	if err := d.DestroyStream(0); err == nil {
		t.Error("DestroyStream(0) succeeded")
	}
	must(t, d.Synchronize())
}

func TestGPUVirtualMemory(t *testing.T) {
	d := openGPU(t)
	g, err := d.Granularity()
	must(t, err)
	va, err := d.AddressReserve(8 * g)
	must(t, err)
	if va%g != 0 {
		t.Errorf("reserved %#x not aligned to %d", va, g)
	}
	var handles []alloc.PhysHandle
	// Map pages one by one, as the page-mapped allocator grows.
	for i := range uint64(4) {
		h, err := d.MemCreate(g)
		must(t, err)
		handles = append(handles, h)
		must(t, d.MemMap(va+i*g, g, h))
		must(t, d.MemSetAccess(va+i*g, g))
	}
	n := int(4 * g)
	in := fill(n, 3)
	must(t, d.CopyHtoD(va, in))
	out := make([]byte, n)
	must(t, d.CopyDtoH(out, va))
	if !bytes.Equal(in, out) {
		t.Fatal("round trip over four mapped pages differs")
	}
	for i, h := range handles {
		must(t, d.MemUnmap(va+uint64(i)*g, g))
		must(t, d.MemRelease(h))
	}
	must(t, d.AddressFree(va, 8*g))
}

// What the driver allows when one physical allocation is mapped twice
// (docs/alloc.md, "Lending idle pages: tried, not kept"): a whole second
// mapping shows the same bytes at both addresses and takes no memory; part
// of an allocation, from its start or from an offset, is refused on driver
// 580 (CUDA 13.0) with CUDA_ERROR_NOT_SUPPORTED, which the test logs.
func TestGPUVirtualMemoryAlias(t *testing.T) {
	d := openGPU(t)
	g, err := d.Granularity()
	must(t, err)
	va, err := d.AddressReserve(4 * g)
	must(t, err)
	va2, err := d.AddressReserve(4 * g)
	must(t, err)
	h, err := d.MemCreate(4 * g)
	must(t, err)
	must(t, d.MemMap(va, 4*g, h))
	must(t, d.MemSetAccess(va, 4*g))
	free0, _, err := d.MemInfo()
	must(t, err)
	for _, part := range []struct{ size, off uint64 }{{2 * g, 0}, {2 * g, 2 * g}} {
		if err := d.ctx.MemMap(cuda.DevicePtr(va2), part.size, part.off, cuda.MemHandle(h)); err == nil {
			t.Logf("the driver maps %d bytes of a %d-byte allocation from %d", part.size, 4*g, part.off)
			must(t, d.MemUnmap(va2, part.size))
		} else {
			t.Logf("part of an allocation (%d bytes from %d): %v", part.size, part.off, err)
		}
	}
	must(t, d.MemMap(va2, 4*g, h))
	must(t, d.MemSetAccess(va2, 4*g))
	free1, _, err := d.MemInfo()
	must(t, err)
	if free1 != free0 {
		t.Errorf("free memory went from %d to %d when an allocation was mapped a second time", free0, free1)
	}
	in := fill(int(g), 9)
	must(t, d.CopyHtoD(va2+2*g+g/2, in))
	out := make([]byte, g)
	must(t, d.CopyDtoH(out, va+2*g+g/2))
	if !bytes.Equal(in, out) {
		t.Fatal("bytes written through the second mapping are not at the first")
	}
	must(t, d.MemUnmap(va2, 4*g))
	must(t, d.CopyDtoH(out, va+2*g+g/2))
	if !bytes.Equal(in, out) {
		t.Fatal("contents lost when the second mapping went")
	}
	must(t, d.MemUnmap(va, 4*g))
	must(t, d.MemRelease(h))
	must(t, d.AddressFree(va2, 4*g))
	must(t, d.AddressFree(va, 4*g))
}

func TestGPUHostMemory(t *testing.T) {
	d := openGPU(t)
	b, err := d.HostAlloc(1 << 20)
	must(t, err)
	copy(b, fill(len(b), 9))
	p, err := d.Malloc(1 << 20)
	must(t, err)
	must(t, d.CopyHtoD(p, b))
	out := make([]byte, len(b))
	must(t, d.CopyDtoH(out, p))
	if !bytes.Equal(b, out) {
		t.Error("pinned round trip differs")
	}
	must(t, d.Free(p))
	must(t, d.HostFree(b))
	if err := d.HostFree(b); err == nil {
		t.Error("double HostFree succeeded")
	}
}

func TestGPUOutOfMemory(t *testing.T) {
	d := openGPU(t)
	_, total, err := d.MemInfo()
	must(t, err)
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, alloc.ErrDeviceOutOfMemory) || !cuda.IsOutOfMemory(err) {
			t.Fatalf("%s: %v; want an error wrapping alloc.ErrDeviceOutOfMemory and a cuda OOM", what, err)
		}
		var ce *cuda.Error
		if !errors.As(err, &ce) || ce.Code != cuda.ErrorOutOfMemory {
			t.Errorf("%s: no *cuda.Error in the chain", what)
		}
		t.Logf("%s: %v", what, err)
	}
	_, err = d.Malloc(total * 2)
	check("Malloc", err)

	g, err := d.Granularity()
	must(t, err)
	_, err = d.MemCreate((total*2 + g - 1) / g * g)
	check("MemCreate", err)
}

// TestGPUAllocator runs the caching allocator on the real device: a few
// sizes, data written through the device, the cache reused, then released.
func TestGPUAllocator(t *testing.T) {
	d := openGPU(t)
	a, err := alloc.New(d, alloc.Config{})
	must(t, err)
	defer func() { must(t, a.Close()) }()
	sizes := []uint64{512, 1 << 20, 3<<20 + 1, 64 << 20}
	for round := range 2 {
		var ptrs []uint64
		for i, n := range sizes {
			p, err := a.Malloc(n, 0)
			must(t, err)
			in := fill(int(n), byte(i+round))
			must(t, d.CopyHtoD(p, in))
			out := make([]byte, n)
			must(t, d.CopyDtoH(out, p))
			if !bytes.Equal(in, out) {
				t.Fatalf("round %d: %d bytes through the allocator differ", round, n)
			}
			ptrs = append(ptrs, p)
		}
		for _, p := range ptrs {
			must(t, a.Free(p))
		}
	}
	released, err := a.EmptyCache()
	must(t, err)
	if released == 0 {
		t.Error("EmptyCache released nothing after frees")
	}
	t.Logf("released %d bytes\n%s", released, a.Summary())
}

// TestGPUConcurrent uses one Device from 64 goroutines.
func TestGPUConcurrent(t *testing.T) {
	d := openGPU(t)
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 64 {
		wg.Go(func() {
			for i := range 25 {
				n := uint64(4096 + w*1000 + i)
				p, err := d.Malloc(n)
				if err != nil {
					errs <- err
					return
				}
				in := fill(int(n), byte(w^i))
				out := make([]byte, n)
				if err := d.CopyHtoD(p, in); err != nil {
					errs <- err
					return
				}
				if err := d.CopyDtoH(out, p); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(in, out) {
					errs <- fmt.Errorf("worker %d iteration %d: data differs", w, i)
					return
				}
				if err := d.Free(p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
