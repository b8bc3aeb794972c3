//go:build gpu

package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// GPU tests: run on a machine with a driver and at least one device, as
// described in docs/cuda.md. They use device 0.

func gpuContext(t testing.TB) *Context {
	t.Helper()
	if err := Init(); err != nil {
		t.Fatalf("Init: %v", err)
	}
	dev, err := GetDevice(0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := ctx.Release(); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
	return ctx
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// pattern returns n bytes that differ for different seeds and offsets.
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n+8)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	return b[:n]
}

func TestGPUInitAndProperties(t *testing.T) {
	must(t, Init())
	must(t, Init()) // idempotent
	v, err := DriverVersion()
	must(t, err)
	if v < 11040 {
		t.Errorf("DriverVersion = %d, want ≥ 11040", v)
	}
	n, err := DeviceCount()
	must(t, err)
	if n < 1 {
		t.Fatalf("DeviceCount = %d", n)
	}
	t.Logf("driver CUDA %d.%d, %d device(s); bound %s and %s", v/1000, v%1000/10, n, lib.elapsedTimeName, lib.uuidName)
	smi := nvidiaSMI(t)
	for i := range n {
		dev, err := GetDevice(i)
		must(t, err)
		p, err := dev.Properties()
		must(t, err)
		t.Logf("device %d: %+v (UUID %s)", i, p, p.UUID)
		if p.Name == "" || p.TotalMem < 1<<30 || p.Major < 3 || p.MultiprocessorCount < 1 || p.UUID == (UUID{}) {
			t.Errorf("implausible properties %+v", p)
		}
		if !p.VirtualMemory || !p.UnifiedAddressing {
			t.Errorf("device %d lacks VMM or unified addressing: %+v", i, p)
		}
		// The PCI bus id string agrees with the numeric attributes.
		dom, err := dev.Attribute(AttrPCIDomainID)
		must(t, err)
		bus, err := dev.Attribute(AttrPCIBusID)
		must(t, err)
		slot, err := dev.Attribute(AttrPCIDeviceID)
		must(t, err)
		if want := fmt.Sprintf("%04x:%02x:%02x.0", dom, bus, slot); !strings.EqualFold(p.PCIBusID, want) {
			t.Errorf("PCIBusID %q, attributes say %q", p.PCIBusID, want)
		}
		// nvidia-smi, through NVML, agrees on name, PCI address and size.
		if row, ok := smi[p.UUID.String()]; ok {
			if row.name != p.Name {
				t.Errorf("name %q, nvidia-smi says %q", p.Name, row.name)
			}
			if !strings.HasSuffix(strings.ToLower(row.pci), strings.ToLower(p.PCIBusID)) {
				t.Errorf("PCI bus id %q, nvidia-smi says %q", p.PCIBusID, row.pci)
			}
			// NVML's total (nvidia-smi) includes memory the driver reserves
			// for itself; cuDeviceTotalMem does not. On the H200 with driver
			// 580 the driver's figure is 616 MiB lower (143155 against
			// 143771 MiB). Allow up to 2 % below, nothing above.
			if tot := p.TotalMem >> 20; tot > row.totalMiB || tot < row.totalMiB-row.totalMiB/50 {
				t.Errorf("total %d MiB, nvidia-smi says %d MiB (want at most that, and within 2 %%)", tot, row.totalMiB)
			}
		} else if smi != nil {
			t.Errorf("UUID %s not listed by nvidia-smi (%v)", p.UUID, smi)
		}
	}
	if _, err := GetDevice(n); err == nil || !strings.Contains(err.Error(), "cuDeviceGet("+strconv.Itoa(n)+")") {
		t.Errorf("GetDevice(%d) = %v, want an error naming cuDeviceGet", n, err)
	}
}

type smiRow struct {
	name, pci string
	totalMiB  uint64
}

// nvidiaSMI lists the GPUs by UUID, or returns nil when nvidia-smi is absent.
func nvidiaSMI(t *testing.T) map[string]smiRow {
	out, err := exec.Command("nvidia-smi", "--query-gpu=uuid,name,pci.bus_id,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		t.Logf("nvidia-smi not usable (%v); skipping the cross-check", err)
		return nil
	}
	rows := map[string]smiRow{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, ", ")
		if len(f) != 4 {
			t.Fatalf("nvidia-smi line %q", line)
		}
		mib, err := strconv.ParseUint(strings.TrimSpace(f[3]), 10, 64)
		must(t, err)
		rows[f[0]] = smiRow{name: f[1], pci: f[2], totalMiB: mib}
	}
	return rows
}

// TestGPUErrorNames checks the built-in fallback table against the driver.
func TestGPUErrorNames(t *testing.T) {
	must(t, Init())
	for r, names := range resultNames {
		var pn, ps *byte
		if callNoCtx(lib.cuGetErrorName, uintptr(r), uintptr(unsafe.Pointer(&pn))) != success || pn == nil {
			t.Errorf("driver has no name for %d (table: %s)", r, names[0])
			continue
		}
		if got := goString(pn); got != names[0] {
			t.Errorf("code %d: driver name %s, table %s", r, got, names[0])
		}
		if callNoCtx(lib.cuGetErrorString, uintptr(r), uintptr(unsafe.Pointer(&ps))) == success && ps != nil {
			if got := goString(ps); got != names[1] {
				t.Logf("code %d: driver says %q, table %q", r, got, names[1])
			}
		}
	}
}

func TestGPUMemoryRoundTrip(t *testing.T) {
	ctx := gpuContext(t)
	for _, n := range []int{1, 511, 4096, 1<<20 + 3, 64 << 20} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			a, err := ctx.MemAlloc(uint64(n))
			must(t, err)
			defer func() { must(t, ctx.MemFree(a)) }()
			b, err := ctx.MemAlloc(uint64(n))
			must(t, err)
			defer func() { must(t, ctx.MemFree(b)) }()

			in := pattern(n, uint64(n))
			must(t, ctx.MemcpyHtoD(a, in))
			must(t, ctx.MemcpyDtoD(b, a, uint64(n)))
			out := make([]byte, n)
			must(t, ctx.MemcpyDtoH(out, b))
			if !bytes.Equal(in, out) {
				t.Fatalf("sync round trip of %d bytes differs at byte %d", n, firstDiff(in, out))
			}

			// memset the middle, check the edges are untouched.
			if n >= 3 {
				lo, hi := n/3, 2*n/3
				must(t, ctx.MemsetD8(b+DevicePtr(lo), 0xA5, uint64(hi-lo)))
				must(t, ctx.MemcpyDtoH(out, b))
				want := append([]byte(nil), in...)
				for i := lo; i < hi; i++ {
					want[i] = 0xA5
				}
				if !bytes.Equal(want, out) {
					t.Fatalf("memset of [%d,%d) wrong at byte %d", lo, hi, firstDiff(want, out))
				}
			}
		})
	}
}

func TestGPUAsyncOnStream(t *testing.T) {
	ctx := gpuContext(t)
	for _, flags := range []StreamFlags{StreamDefault, StreamNonBlocking} {
		t.Run(fmt.Sprintf("flags=%d", flags), func(t *testing.T) {
			s, err := ctx.StreamCreate(flags)
			must(t, err)
			defer func() { must(t, ctx.StreamDestroy(s)) }()

			const n = 32<<20 + 5
			host, err := ctx.MemHostAlloc(2*n, HostAllocPortable)
			must(t, err)
			defer func() { must(t, ctx.MemFreeHost(host)) }()
			src, dst := host[:n], host[n:]
			copy(src, pattern(n, 7))

			a, err := ctx.MemAlloc(n)
			must(t, err)
			defer func() { must(t, ctx.MemFree(a)) }()
			b, err := ctx.MemAlloc(n)
			must(t, err)
			defer func() { must(t, ctx.MemFree(b)) }()

			must(t, ctx.MemcpyHtoDAsync(a, src, s))
			must(t, ctx.MemcpyDtoDAsync(b, a, n, s))
			must(t, ctx.MemsetD8Async(b, 0x3C, 1000, s))
			must(t, ctx.MemcpyDtoHAsync(dst, b, s))
			must(t, ctx.StreamSynchronize(s))
			done, err := ctx.StreamQuery(s)
			must(t, err)
			if !done {
				t.Error("StreamQuery after StreamSynchronize = not done")
			}
			want := append([]byte(nil), src...)
			for i := range 1000 {
				want[i] = 0x3C
			}
			if !bytes.Equal(want, dst) {
				t.Fatalf("async round trip differs at byte %d", firstDiff(want, dst))
			}

			// Go memory is refused by the async copies, with the call named.
			goBuf := make([]byte, 16)
			if err := ctx.MemcpyDtoHAsync(goBuf, a, s); err == nil || !strings.Contains(err.Error(), "cuMemcpyDtoHAsync_v2") {
				t.Errorf("async copy into Go memory: %v", err)
			}
		})
	}
}

func TestGPUPinnedMemory(t *testing.T) {
	ctx := gpuContext(t)
	b, err := ctx.MemHostAlloc(1<<20, 0)
	must(t, err)
	if len(b) != 1<<20 || cap(b) != 1<<20 {
		t.Fatalf("len %d cap %d", len(b), cap(b))
	}
	for i := range b { // the memory is writable and readable from Go
		b[i] = byte(i)
	}
	if b[12345] != byte(12345%256) {
		t.Fatal("pinned memory did not keep a write")
	}
	must(t, ctx.MemFreeHost(b))
	if err := ctx.MemFreeHost(b); err == nil {
		t.Error("double MemFreeHost succeeded")
	}
	if err := ctx.MemFreeHost(make([]byte, 8)); err == nil {
		t.Error("MemFreeHost of Go memory succeeded")
	}
}

func TestGPUEvents(t *testing.T) {
	ctx := gpuContext(t)
	s, err := ctx.StreamCreate(StreamNonBlocking)
	must(t, err)
	defer func() { must(t, ctx.StreamDestroy(s)) }()
	start, err := ctx.EventCreate(EventDefault)
	must(t, err)
	defer func() { must(t, ctx.EventDestroy(start)) }()
	end, err := ctx.EventCreate(EventDefault)
	must(t, err)
	defer func() { must(t, ctx.EventDestroy(end)) }()
	fence, err := ctx.EventCreate(EventDisableTiming)
	must(t, err)
	defer func() { must(t, ctx.EventDestroy(fence)) }()

	const n = 4 << 30
	p, err := ctx.MemAlloc(n)
	must(t, err)
	defer func() { must(t, ctx.MemFree(p)) }()

	must(t, ctx.EventRecord(start, s))
	for range 8 {
		must(t, ctx.MemsetD8Async(p, 1, n, s))
	}
	must(t, ctx.EventRecord(end, s))
	must(t, ctx.EventRecord(fence, s))
	done, err := ctx.EventQuery(fence)
	must(t, err)
	t.Logf("fence done right after queueing 32 GiB of memset: %v", done)
	must(t, ctx.EventSynchronize(fence))
	if done, err := ctx.EventQuery(fence); err != nil || !done {
		t.Errorf("EventQuery after EventSynchronize = %v, %v", done, err)
	}
	d, err := ctx.EventElapsedTime(start, end)
	must(t, err)
	t.Logf("8 memsets of 4 GiB: %v (%.0f GB/s)", d, 8*float64(n)/d.Seconds()/1e9)
	if d <= 0 || d > 10*time.Second {
		t.Errorf("elapsed %v", d)
	}
	if _, err := ctx.EventElapsedTime(start, fence); err == nil {
		t.Error("elapsed time to an event without timing succeeded")
	} else {
		t.Logf("as expected: %v", err)
	}
}

func TestGPUVirtualMemory(t *testing.T) {
	ctx := gpuContext(t)
	prop := DeviceAllocationProp(0)
	g, err := ctx.MemGetAllocationGranularity(&prop, GranularityMinimum)
	must(t, err)
	rec, err := ctx.MemGetAllocationGranularity(&prop, GranularityRecommended)
	must(t, err)
	t.Logf("granularity: minimum %d, recommended %d", g, rec)
	if g == 0 || g&(g-1) != 0 {
		t.Fatalf("granularity %d is not a power of two", g)
	}

	const pages = 3
	va, err := ctx.MemAddressReserve(4*pages*g, g, 0)
	must(t, err)
	if uint64(va)%g != 0 {
		t.Errorf("reserved address %#x not aligned to %d", va, g)
	}
	h, err := ctx.MemCreate(pages*g, &prop)
	must(t, err)
	// Map in the middle of the reservation.
	at := va + DevicePtr(g)
	must(t, ctx.MemMap(at, pages*g, 0, h))
	must(t, ctx.MemSetAccess(at, pages*g, []AccessDesc{ReadWriteAccess(0)}))

	n := int(pages * g)
	in := pattern(n, 99)
	must(t, ctx.MemcpyHtoD(at, in))
	must(t, ctx.MemsetD8(at+DevicePtr(g)-10, 0xEE, 20)) // across a page boundary
	out := make([]byte, n)
	must(t, ctx.MemcpyDtoH(out, at))
	for i := int(g) - 10; i < int(g)+10; i++ {
		in[i] = 0xEE
	}
	if !bytes.Equal(in, out) {
		t.Fatalf("mapped memory round trip differs at byte %d", firstDiff(in, out))
	}

	// Mapping twice over the same range fails and names the call.
	if err := ctx.MemMap(at, g, 0, h); err == nil || !strings.Contains(err.Error(), "cuMemMap(") {
		t.Errorf("second MemMap: %v", err)
	}

	must(t, ctx.MemUnmap(at, pages*g))
	must(t, ctx.MemRelease(h))
	must(t, ctx.MemAddressFree(va, 4*pages*g))
}

func TestGPUOutOfMemory(t *testing.T) {
	ctx := gpuContext(t)
	_, total, err := ctx.MemGetInfo()
	must(t, err)
	n := total + total/2
	_, err = ctx.MemAlloc(n)
	if !IsOutOfMemory(err) {
		t.Fatalf("MemAlloc(%d) = %v, want out of memory", n, err)
	}
	want := "cuMemAlloc_v2(" + strconv.FormatUint(n, 10) + "): CUDA_ERROR_OUT_OF_MEMORY: out of memory"
	if err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrorOutOfMemory {
		t.Errorf("not a *Error with code 2: %#v", err)
	}
	// The context still works after the failure.
	p, err := ctx.MemAlloc(1 << 20)
	must(t, err)
	must(t, ctx.MemFree(p))
}

func TestGPUBadArguments(t *testing.T) {
	ctx := gpuContext(t)
	err := ctx.MemFree(0xdead0000)
	if err == nil || !strings.HasPrefix(err.Error(), "cuMemFree_v2(0xdead0000): CUDA_ERROR_") {
		t.Errorf("MemFree(bogus) = %v", err)
	}
	if _, err := ctx.MemAlloc(0); err == nil || !strings.Contains(err.Error(), "cuMemAlloc_v2(0)") {
		t.Errorf("MemAlloc(0) = %v", err)
	}
	t.Logf("examples: %v", err)
}

func TestGPUContextRelease(t *testing.T) {
	must(t, Init())
	dev, err := GetDevice(0)
	must(t, err)
	c, err := dev.PrimaryContext()
	must(t, err)
	must(t, c.Release())
	if _, err := c.MemAlloc(1); !errors.Is(err, errReleased) {
		t.Errorf("MemAlloc after Release = %v", err)
	}
	if err := c.Release(); !errors.Is(err, errReleased) {
		t.Errorf("second Release = %v", err)
	}
}

// TestGPUConcurrent runs 64 goroutines that allocate, copy, check and free
// in loops while another goroutine keeps clearing the current context of
// whatever thread it lands on. Each call must still find its context
// current. Run with -test.cpu 1,4,16 to vary the number of threads.
func TestGPUConcurrent(t *testing.T) {
	ctx := gpuContext(t)
	const workers, iters = 64, 40
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var clears int
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			runtime.LockOSThread()
			syscallN(lib.cuCtxSetCurrent, 0)
			runtime.UnlockOSThread()
			clears++
			runtime.Gosched()
		}
	})
	errs := make(chan error, workers)
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range iters {
				n := 1 + r.IntN(256<<10)
				in := pattern(n, uint64(w*iters+i))
				p, err := ctx.MemAlloc(uint64(n))
				if err != nil {
					errs <- err
					return
				}
				runtime.Gosched()
				if err := ctx.MemcpyHtoD(p, in); err != nil {
					errs <- err
					return
				}
				out := make([]byte, n)
				runtime.Gosched()
				if err := ctx.MemcpyDtoH(out, p); err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(in, out) {
					errs <- fmt.Errorf("worker %d iter %d: %d bytes differ at %d", w, i, n, firstDiff(in, out))
					return
				}
				if err := ctx.MemFree(p); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	workersWG.Wait()
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("GOMAXPROCS=%d: %d workers × %d iterations, current context cleared %d times meanwhile",
		runtime.GOMAXPROCS(0), workers, iters, clears)
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
