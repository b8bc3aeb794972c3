package sim

import (
	"fmt"
	"math"
	"time"
)

// Kind names a driver-level call of the simulated device.
type Kind int

// The call kinds, one per method of alloc.Device, alloc.VirtualMemory and
// alloc.HostMemory and alloc.AsyncCopier.
const (
	KindMalloc Kind = iota
	KindFree
	KindMemInfo
	KindEventCreate
	KindEventRecord
	KindEventQuery
	KindEventDestroy
	KindMemset
	KindCopyHtoD
	KindCopyDtoH
	KindCopyDtoD
	KindGranularity
	KindAddressReserve
	KindAddressFree
	KindMemCreate
	KindMemRelease
	KindMemMap
	KindMemSetAccess
	KindMemUnmap
	KindHostAlloc
	KindHostFree
	KindCopyHtoDAsync
	KindCopyDtoHAsync
	numKinds
)

var kindNames = [numKinds]string{
	"Malloc", "Free", "MemInfo",
	"EventCreate", "EventRecord", "EventQuery", "EventDestroy",
	"Memset", "CopyHtoD", "CopyDtoH", "CopyDtoD",
	"Granularity", "AddressReserve", "AddressFree",
	"MemCreate", "MemRelease", "MemMap", "MemSetAccess", "MemUnmap",
	"HostAlloc", "HostFree",
	"CopyHtoDAsync", "CopyDtoHAsync",
}

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// Call describes one call to the device; fault predicates and the latency
// model receive it.
type Call struct {
	Kind Kind
	Seq  uint64 // 1-based index of the call among all calls to the device
	N    uint64 // 1-based index of the call among calls of its kind
	Size uint64 // bytes requested, copied or set, or freed (Free); 0 when none
	Addr uint64 // device address the call names; 0 when none
}

// Calls counts the calls made to a Device, by kind. Calls that failed are
// counted too.
type Calls struct {
	Malloc, Free, MemInfo                                 uint64
	EventCreate, EventRecord, EventQuery, EventDestroy    uint64
	Memset, CopyHtoD, CopyDtoH, CopyDtoD                  uint64
	Granularity, AddressReserve, AddressFree              uint64
	MemCreate, MemRelease, MemMap, MemSetAccess, MemUnmap uint64
	HostAlloc, HostFree                                   uint64
	CopyHtoDAsync, CopyDtoHAsync                          uint64
}

func callsFrom(c *[numKinds]uint64) Calls {
	return Calls{
		Malloc: c[KindMalloc], Free: c[KindFree], MemInfo: c[KindMemInfo],
		EventCreate: c[KindEventCreate], EventRecord: c[KindEventRecord],
		EventQuery: c[KindEventQuery], EventDestroy: c[KindEventDestroy],
		Memset: c[KindMemset], CopyHtoD: c[KindCopyHtoD], CopyDtoH: c[KindCopyDtoH],
		CopyDtoD: c[KindCopyDtoD], Granularity: c[KindGranularity],
		AddressReserve: c[KindAddressReserve], AddressFree: c[KindAddressFree],
		MemCreate: c[KindMemCreate], MemRelease: c[KindMemRelease], MemMap: c[KindMemMap],
		MemSetAccess: c[KindMemSetAccess], MemUnmap: c[KindMemUnmap],
		HostAlloc: c[KindHostAlloc], HostFree: c[KindHostFree],
		CopyHtoDAsync: c[KindCopyHtoDAsync], CopyDtoHAsync: c[KindCopyDtoHAsync],
	}
}

// Total is the number of calls of all kinds.
func (c Calls) Total() uint64 {
	return c.Malloc + c.Free + c.MemInfo +
		c.EventCreate + c.EventRecord + c.EventQuery + c.EventDestroy +
		c.Memset + c.CopyHtoD + c.CopyDtoH + c.CopyDtoD +
		c.Granularity + c.AddressReserve + c.AddressFree +
		c.MemCreate + c.MemRelease + c.MemMap + c.MemSetAccess + c.MemUnmap +
		c.HostAlloc + c.HostFree + c.CopyHtoDAsync + c.CopyDtoHAsync
}

// Allocation counts the calls that obtain or give back device memory or
// address space: Malloc, Free, AddressReserve, AddressFree, MemCreate,
// MemRelease, MemMap, MemSetAccess and MemUnmap. It is the figure to compare
// between allocator strategies ("no more driver calls than ...").
func (c Calls) Allocation() uint64 {
	return c.Malloc + c.Free + c.AddressReserve + c.AddressFree +
		c.MemCreate + c.MemRelease + c.MemMap + c.MemSetAccess + c.MemUnmap
}

// AnchorLatency is a latency model for Config.Latency built from driver
// timings measured on one H200 (driver 580, CUDA 13.0): cuMemAlloc took
// 2.4 µs for 512 B, 24 µs for 1 MiB, 40 µs for 2 MiB, 47 µs for 20 MiB and
// 137 µs for 1 GiB; sizes in between are interpolated on a log scale and
// sizes beyond are clamped. Free is modelled as twice the Malloc time of the
// same size, the upper end of what was measured. The other calls were not
// measured and cost nothing in this model.
func AnchorLatency(c Call) time.Duration {
	switch c.Kind {
	case KindMalloc:
		return mallocLatency(c.Size)
	case KindFree:
		return 2 * mallocLatency(c.Size)
	}
	return 0
}

// mallocAnchors are (size, nanoseconds) points of cuMemAlloc's cost.
var mallocAnchors = [...]struct{ size, ns float64 }{
	{512, 2400}, {1 << 20, 24000}, {2 << 20, 40000}, {20 << 20, 47000}, {1 << 30, 137000},
}

func mallocLatency(size uint64) time.Duration {
	s := float64(size)
	first, last := mallocAnchors[0], mallocAnchors[len(mallocAnchors)-1]
	if s <= first.size {
		return time.Duration(first.ns)
	}
	if s >= last.size {
		return time.Duration(last.ns)
	}
	for i := 1; i < len(mallocAnchors); i++ {
		a, b := mallocAnchors[i-1], mallocAnchors[i]
		if s <= b.size {
			// Linear in math.Log2(size) between the two anchors.
			t := (math.Log2(s) - math.Log2(a.size)) / (math.Log2(b.size) - math.Log2(a.size))
			return time.Duration(a.ns + t*(b.ns-a.ns))
		}
	}
	return time.Duration(last.ns)
}
