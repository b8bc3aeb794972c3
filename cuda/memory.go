package cuda

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"sync"
	"unsafe"
)

// DevicePtr is a device virtual address (CUdeviceptr).
type DevicePtr uint64

// MemAlloc allocates n bytes of device memory (cuMemAlloc_v2). The memory is
// not cleared. When the device is full the error satisfies IsOutOfMemory.
func (c *Context) MemAlloc(n uint64) (DevicePtr, error) {
	var p DevicePtr
	if r, err := c.call(c.fns().cuMemAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n)); err != nil || r != success {
		return 0, fail(err, r, "cuMemAlloc_v2", dec(n))
	}
	return p, nil
}

// MemFree frees memory obtained from MemAlloc (cuMemFree_v2).
func (c *Context) MemFree(p DevicePtr) error {
	if r, err := c.call(c.fns().cuMemFree, uintptr(p)); err != nil || r != success {
		return fail(err, r, "cuMemFree_v2", hex(uint64(p)))
	}
	return nil
}

// MemGetInfo returns the free and total memory of the context's device
// (cuMemGetInfo_v2). Free memory counts what every process has allocated.
func (c *Context) MemGetInfo() (free, total uint64, err error) {
	var f, t uint64
	if r, err := c.call(c.fns().cuMemGetInfo, uintptr(unsafe.Pointer(&f)), uintptr(unsafe.Pointer(&t))); err != nil || r != success {
		return 0, 0, fail(err, r, "cuMemGetInfo_v2")
	}
	return f, t, nil
}

// MemcpyHtoD copies src to device memory at dst and returns when the copy is
// done (cuMemcpyHtoD_v2, legacy default stream).
func (c *Context) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemcpyHtoD, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src))); err != nil || r != success {
		return fail(err, r, "cuMemcpyHtoD_v2", hex(uint64(dst)), "host", dec(uint64(len(src))))
	}
	return nil
}

// MemcpyDtoH copies len(dst) bytes from device memory at src into dst
// (cuMemcpyDtoH_v2).
func (c *Context) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemcpyDtoH, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst))); err != nil || r != success {
		return fail(err, r, "cuMemcpyDtoH_v2", "host", hex(uint64(src)), dec(uint64(len(dst))))
	}
	return nil
}

// MemcpyDtoD copies n bytes between device addresses (cuMemcpyDtoD_v2).
// Like the driver call it is asynchronous with respect to the host for most
// transfers; it is ordered on the legacy default stream.
func (c *Context) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	if n == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemcpyDtoD, uintptr(dst), uintptr(src), uintptr(n)); err != nil || r != success {
		return fail(err, r, "cuMemcpyDtoD_v2", hex(uint64(dst)), hex(uint64(src)), dec(n))
	}
	return nil
}

// MemcpyHtoDAsync queues a copy of src to dst on stream s
// (cuMemcpyHtoDAsync_v2). src must lie in memory from MemHostAlloc and stay
// untouched until the stream has passed the copy.
func (c *Context) MemcpyHtoDAsync(dst DevicePtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	if err := checkPinned("cuMemcpyHtoDAsync_v2", src); err != nil {
		return err
	}
	if r, err := c.call(c.fns().cuMemcpyHtoDAsync, uintptr(dst), uintptr(unsafe.Pointer(unsafe.SliceData(src))), uintptr(len(src)), uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuMemcpyHtoDAsync_v2", hex(uint64(dst)), "host", dec(uint64(len(src))), s.String())
	}
	return nil
}

// MemcpyDtoHAsync queues a copy of len(dst) bytes from src into dst on
// stream s (cuMemcpyDtoHAsync_v2). dst must lie in memory from MemHostAlloc;
// its contents are valid once the stream has passed the copy.
func (c *Context) MemcpyDtoHAsync(dst []byte, src DevicePtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	if err := checkPinned("cuMemcpyDtoHAsync_v2", dst); err != nil {
		return err
	}
	if r, err := c.call(c.fns().cuMemcpyDtoHAsync, uintptr(unsafe.Pointer(unsafe.SliceData(dst))), uintptr(src), uintptr(len(dst)), uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuMemcpyDtoHAsync_v2", "host", hex(uint64(src)), dec(uint64(len(dst))), s.String())
	}
	return nil
}

// MemcpyDtoDAsync queues a copy of n bytes between device addresses on
// stream s (cuMemcpyDtoDAsync_v2).
func (c *Context) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemcpyDtoDAsync, uintptr(dst), uintptr(src), uintptr(n), uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuMemcpyDtoDAsync_v2", hex(uint64(dst)), hex(uint64(src)), dec(n), s.String())
	}
	return nil
}

// MemsetD8 sets n bytes at dst to v (cuMemsetD8_v2, legacy default stream).
func (c *Context) MemsetD8(dst DevicePtr, v byte, n uint64) error {
	if n == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemsetD8, uintptr(dst), uintptr(v), uintptr(n)); err != nil || r != success {
		return fail(err, r, "cuMemsetD8_v2", hex(uint64(dst)), strconv.Itoa(int(v)), dec(n))
	}
	return nil
}

// MemsetD8Async queues setting n bytes at dst to v on stream s (cuMemsetD8Async).
func (c *Context) MemsetD8Async(dst DevicePtr, v byte, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	if r, err := c.call(c.fns().cuMemsetD8Async, uintptr(dst), uintptr(v), uintptr(n), uintptr(s)); err != nil || r != success {
		return fail(err, r, "cuMemsetD8Async", hex(uint64(dst)), strconv.Itoa(int(v)), dec(n), s.String())
	}
	return nil
}

// HostAllocFlags are the flags of cuMemHostAlloc.
type HostAllocFlags uint32

const (
	// HostAllocPortable makes the memory pinned for every context, not only
	// the allocating one (CU_MEMHOSTALLOC_PORTABLE).
	HostAllocPortable HostAllocFlags = 0x1
	// HostAllocDeviceMap maps the memory into the device address space
	// (CU_MEMHOSTALLOC_DEVICEMAP).
	HostAllocDeviceMap HostAllocFlags = 0x2
	// HostAllocWriteCombined allocates write-combined memory: fast to write
	// from the host and to read from the device, slow to read on the host
	// (CU_MEMHOSTALLOC_WRITECOMBINED).
	HostAllocWriteCombined HostAllocFlags = 0x4
)

// MemHostAlloc allocates n bytes of page-locked host memory (cuMemHostAlloc)
// and returns it as a byte slice. The memory is outside the Go heap: it must
// be freed with MemFreeHost, and the slice must not be used afterwards.
func (c *Context) MemHostAlloc(n uint64, flags HostAllocFlags) ([]byte, error) {
	if n == 0 {
		return nil, fmt.Errorf("cuda: cuMemHostAlloc of 0 bytes: size must be positive")
	}
	if n > math.MaxInt {
		return nil, fmt.Errorf("cuda: cuMemHostAlloc of %d bytes: larger than a Go slice can address", n)
	}
	var p unsafe.Pointer
	if r, err := c.call(c.fns().cuMemHostAlloc, uintptr(unsafe.Pointer(&p)), uintptr(n), uintptr(flags)); err != nil || r != success {
		return nil, fail(err, r, "cuMemHostAlloc", dec(n), hex(uint64(flags)))
	}
	b := unsafe.Slice((*byte)(p), int(n))
	pinned.add(uintptr(p), uintptr(n))
	return b, nil
}

// MemFreeHost frees memory from MemHostAlloc (cuMemFreeHost). b must be the
// slice MemHostAlloc returned (its first byte, any length).
func (c *Context) MemFreeHost(b []byte) error {
	p := unsafe.SliceData(b)
	if p == nil {
		return fmt.Errorf("cuda: cuMemFreeHost: empty slice")
	}
	start := uintptr(unsafe.Pointer(p))
	if !pinned.remove(start) {
		return fmt.Errorf("cuda: cuMemFreeHost(%#x): not the start of memory from MemHostAlloc", start)
	}
	if r, err := c.call(c.fns().cuMemFreeHost, uintptr(unsafe.Pointer(p))); err != nil || r != success {
		return fail(err, r, "cuMemFreeHost", hex(uint64(start)))
	}
	return nil
}

// pinned records the page-locked ranges handed out by MemHostAlloc, so that
// the asynchronous copies can refuse Go heap memory.
var pinned pinnedSet

// pinnedSet is a set of disjoint address ranges, sorted by start.
type pinnedSet struct {
	mu     sync.RWMutex
	ranges []addrRange
}

type addrRange struct{ start, n uintptr }

func (s *pinnedSet) add(start, n uintptr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].start >= start })
	s.ranges = append(s.ranges, addrRange{})
	copy(s.ranges[i+1:], s.ranges[i:])
	s.ranges[i] = addrRange{start, n}
}

// remove deletes the range that starts at start and reports whether there was one.
func (s *pinnedSet) remove(start uintptr) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].start >= start })
	if i == len(s.ranges) || s.ranges[i].start != start {
		return false
	}
	s.ranges = append(s.ranges[:i], s.ranges[i+1:]...)
	return true
}

// contains reports whether [start, start+n) lies inside one recorded range.
func (s *pinnedSet) contains(start, n uintptr) bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	// The last range that starts at or before start.
	i := sort.Search(len(s.ranges), func(i int) bool { return s.ranges[i].start > start }) - 1
	if i < 0 {
		return false
	}
	r := s.ranges[i]
	return start-r.start <= r.n && n <= r.n-(start-r.start)
}

// checkPinned refuses host buffers that did not come from MemHostAlloc.
func checkPinned(fn string, b []byte) error {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	if !pinned.contains(start, uintptr(len(b))) {
		return fmt.Errorf("cuda: %s: the host buffer (%d bytes at %#x) is not page-locked memory from MemHostAlloc; asynchronous copies need it (use the synchronous copy for Go memory)",
			fn, len(b), start)
	}
	return nil
}
