package sim

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/vramhq/vram/alloc"
)

// Defaults of Config.
const (
	DefaultCapacity     = 80 << 30       // an 80 GiB card
	DefaultBase         = 0x7f0000000000 // where the address space starts, like a real GPU's
	DefaultAddressSpace = 16 << 40       // 16 TiB of virtual address space
	DefaultGranularity  = 2 << 20        // the VMM page size of current NVIDIA GPUs

	smallAlign = 512     // cuMemAlloc's alignment of small allocations
	largeAlign = 2 << 20 // and of allocations of 2 MiB or more
)

// Errors returned by the simulated device. Out-of-memory conditions wrap
// alloc.ErrDeviceOutOfMemory instead.
var (
	// ErrInvalidValue means an argument was wrong: an unaligned address or
	// size, an unknown handle or event, a zero size, a double map...
	ErrInvalidValue = errors.New("invalid value")
	// ErrIllegalAddress means a memset or copy touched memory that is not
	// inside one allocation or in accessible mapped pages.
	ErrIllegalAddress = errors.New("illegal address")
	// ErrInjected is wrapped by faults injected with Inject that are not
	// out-of-memory faults.
	ErrInjected = errors.New("injected fault")
)

// Config describes a simulated device. The zero value is an 80 GiB device
// with a 2 MiB granularity, events that complete at once and no latency.
type Config struct {
	// Capacity is the device's total memory in bytes (DefaultCapacity if 0).
	Capacity uint64
	// ReservedByOthers is memory held by other processes: it is never free
	// to this one. SetReservedByOthers changes it later.
	ReservedByOthers uint64
	// Granularity is the VMM page size, a power of two (DefaultGranularity if 0).
	Granularity uint64
	// Base and AddressSpace place the virtual address space
	// (DefaultBase and DefaultAddressSpace if 0).
	Base, AddressSpace uint64
	// HoldEvents keeps recorded events pending until CompleteEvents or
	// CompleteStream; by default they complete at once.
	HoldEvents bool
	// AllowReleaseMapped makes MemRelease of a mapped handle legal, as it is
	// in the driver: the memory is freed when its last page is unmapped. By
	// default it is an error, which catches allocators that forget a mapping.
	AllowReleaseMapped bool
	// HostCapacity limits pinned host memory (unlimited if 0).
	HostCapacity uint64
	// Latency, when set, gives each call a simulated duration, summed in
	// Stats.DriverTime. AnchorLatency is a measured model.
	Latency func(Call) time.Duration
	// Sleep makes each call also sleep for its simulated duration.
	Sleep bool
}

// Device is a simulated GPU. See the package documentation.
type Device struct {
	mu sync.Mutex // guards everything below

	cfg            Config
	reservedOthers uint64
	holdEvents     bool

	va       *vaSpace
	regions  []*region  // Malloc allocations and VA reservations, sorted by base
	mappings []*mapping // mapped VA ranges, sorted by va, non-overlapping
	handles  map[alloc.PhysHandle]*phys
	lastPhys alloc.PhysHandle

	events     map[alloc.Event]*event
	lastEvent  alloc.Event
	lastStream alloc.Stream
	ops        []queuedOp // asynchronous copies waiting for their stream (async.go)
	opSeq      uint64     // sequence number of the last copy queued
	copyLag    int        // LagCopies
	asyncErr   error      // first failure of a queued copy, sticky

	host      map[*byte]uint64 // pinned host allocations by first byte
	hostBytes uint64

	counts     [numKinds]uint64
	seq        uint64
	failures   uint64
	faults     []*fault
	mallocB    uint64 // rounded bytes of live Malloc allocations
	physB      uint64 // bytes of live physical handles
	peak       uint64 // peak of mallocB + physB
	driverTime time.Duration
}

// region is a range of the address space: a Malloc allocation (reserve
// false) or an AddressReserve range (reserve true).
type region struct {
	base, size uint64 // size is the rounded size the range occupies
	req        uint64 // bytes asked for (Malloc); accesses must stay below base+req
	reserve    bool
	mem        backing // contents of a Malloc allocation
}

// New returns a simulated device, or an error naming the Config field that
// is invalid.
func New(cfg Config) (*Device, error) {
	if cfg.Capacity == 0 {
		cfg.Capacity = DefaultCapacity
	}
	if cfg.Granularity == 0 {
		cfg.Granularity = DefaultGranularity
	}
	if cfg.Base == 0 {
		cfg.Base = DefaultBase
	}
	if cfg.AddressSpace == 0 {
		cfg.AddressSpace = DefaultAddressSpace
	}
	switch {
	case cfg.Granularity&(cfg.Granularity-1) != 0:
		return nil, fmt.Errorf("sim: granularity %d is not a power of two", cfg.Granularity)
	case cfg.Granularity < smallAlign:
		return nil, fmt.Errorf("sim: granularity %d is below %d bytes", cfg.Granularity, smallAlign)
	case cfg.Base%largeAlign != 0 || cfg.Base%cfg.Granularity != 0:
		return nil, fmt.Errorf("sim: base address %#x is not aligned to 2 MiB and the granularity", cfg.Base)
	case cfg.Base+cfg.AddressSpace < cfg.Base:
		return nil, fmt.Errorf("sim: address space %#x+%#x overflows", cfg.Base, cfg.AddressSpace)
	}
	return &Device{
		cfg:            cfg,
		reservedOthers: cfg.ReservedByOthers,
		holdEvents:     cfg.HoldEvents,
		va:             newVASpace(cfg.Base, cfg.AddressSpace),
		handles:        make(map[alloc.PhysHandle]*phys),
		events:         make(map[alloc.Event]*event),
		host:           make(map[*byte]uint64),
	}, nil
}

// MustNew is New for configurations known to be valid, such as in tests; it
// panics on an invalid one.
func MustNew(cfg Config) *Device {
	d, err := New(cfg)
	if err != nil {
		panic(err)
	}
	return d
}

var (
	_ alloc.Device        = (*Device)(nil)
	_ alloc.VirtualMemory = (*Device)(nil)
	_ alloc.HostMemory    = (*Device)(nil)
)

// enter locks the device, counts the call and runs the fault injectors. A
// non-nil error is an injected fault that the caller must return. Every
// enter is paired with a deferred leave.
func (d *Device) enter(k Kind, size, addr uint64) (Call, error) {
	d.mu.Lock()
	if k == KindFree {
		// Free's size is the allocation's, for fault predicates and latency.
		if _, r := d.regionAtLocked(addr); r != nil && r.base == addr && !r.reserve {
			size = r.req
		}
	}
	d.seq++
	d.counts[k]++
	c := Call{Kind: k, Seq: d.seq, N: d.counts[k], Size: size, Addr: addr}
	return c, d.injectLocked(c)
}

// leave charges the call's simulated latency, counts a failure, unlocks the
// device and, with Config.Sleep, sleeps.
func (d *Device) leave(c Call, errp *error) {
	var lat time.Duration
	if d.cfg.Latency != nil {
		lat = d.cfg.Latency(c)
		d.driverTime += lat
	}
	if *errp != nil {
		d.failures++
	}
	d.mu.Unlock()
	if d.cfg.Sleep && lat > 0 {
		time.Sleep(lat)
	}
}

func (d *Device) usedLocked() uint64 { return d.mallocB + d.physB }

// availLocked is the memory this process may still take.
func (d *Device) availLocked() uint64 {
	limit := d.cfg.Capacity - min(d.reservedOthers, d.cfg.Capacity)
	return limit - min(d.usedLocked(), limit)
}

func (d *Device) notePeakLocked() { d.peak = max(d.peak, d.usedLocked()) }

func (d *Device) oomError(op string, n uint64) error {
	return fmt.Errorf("sim: %s of %d bytes: %w (%d bytes free of %d, %d held by other processes)",
		op, n, alloc.ErrDeviceOutOfMemory, d.availLocked(), d.cfg.Capacity, d.reservedOthers)
}

// mallocSize is cuMemAlloc's rounding: 512 B below 2 MiB, 2 MiB from there on.
func mallocSize(n uint64) (size, align uint64) {
	if n < largeAlign {
		return alignUp(n, smallAlign), smallAlign
	}
	return alignUp(n, largeAlign), largeAlign
}

// Malloc implements alloc.Device.
func (d *Device) Malloc(n uint64) (addr uint64, err error) {
	c, err := d.enter(KindMalloc, n, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, fmt.Errorf("sim: malloc of 0 bytes: %w", ErrInvalidValue)
	}
	size, align := mallocSize(n)
	if size < n { // overflow
		return 0, d.oomError("malloc", n)
	}
	if size > d.availLocked() {
		return 0, d.oomError("malloc", n)
	}
	addr, ok := d.va.alloc(size, align)
	if !ok {
		return 0, d.oomError("malloc (address space exhausted)", n)
	}
	d.insertRegionLocked(&region{base: addr, size: size, req: n})
	d.mallocB += size
	d.notePeakLocked()
	return addr, nil
}

// Free implements alloc.Device.
func (d *Device) Free(addr uint64) (err error) {
	c, err := d.enter(KindFree, 0, addr)
	defer d.leave(c, &err)
	if err != nil {
		return err
	}
	i, r := d.regionAtLocked(addr)
	if r == nil || r.base != addr || r.reserve {
		return fmt.Errorf("sim: free of %#x: not an address returned by Malloc: %w", addr, ErrInvalidValue)
	}
	d.regions = append(d.regions[:i], d.regions[i+1:]...)
	d.va.release(r.base, r.size)
	d.mallocB -= r.size
	return nil
}

// MemInfo implements alloc.Device.
func (d *Device) MemInfo() (free, total uint64, err error) {
	c, err := d.enter(KindMemInfo, 0, 0)
	defer d.leave(c, &err)
	if err != nil {
		return 0, 0, err
	}
	return d.availLocked(), d.cfg.Capacity, nil
}

// regionAtLocked returns the region that contains addr and its index, or nil.
func (d *Device) regionAtLocked(addr uint64) (int, *region) {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].base > addr }) - 1
	if i >= 0 && addr-d.regions[i].base < d.regions[i].size {
		return i, d.regions[i]
	}
	return -1, nil
}

func (d *Device) insertRegionLocked(r *region) {
	i := sort.Search(len(d.regions), func(i int) bool { return d.regions[i].base > r.base })
	d.regions = append(d.regions, nil)
	copy(d.regions[i+1:], d.regions[i:])
	d.regions[i] = r
}

// SetReservedByOthers changes the memory held by other processes, as when
// another job starts or ends on the same GPU.
func (d *Device) SetReservedByOthers(n uint64) {
	d.mu.Lock()
	d.reservedOthers = n
	d.mu.Unlock()
}

// Calls returns the number of calls made so far, by kind.
func (d *Device) Calls() Calls {
	d.mu.Lock()
	defer d.mu.Unlock()
	return callsFrom(&d.counts)
}

// Stats is a snapshot of a Device's accounting.
type Stats struct {
	Capacity         uint64 // total device memory
	ReservedByOthers uint64 // memory held by other processes
	InUse            uint64 // MallocBytes + PhysBytes: what counts against capacity
	Peak             uint64 // highest InUse since New or ResetPeak
	MallocBytes      uint64 // rounded bytes of live Malloc allocations
	PhysBytes        uint64 // bytes of live physical handles (MemCreate)
	Allocations      int    // live Malloc allocations
	Handles          int    // live physical handles
	Reservations     int    // live AddressReserve ranges
	ReservedVA       uint64 // bytes of address space they hold
	MappedBytes      uint64 // bytes of address space mapped to handles
	HostBytes        uint64 // pinned host memory handed out by HostAlloc
	HostAllocations  int
	BackingBytes     uint64        // host memory used to hold device contents
	Failures         uint64        // calls that returned an error
	DriverTime       time.Duration // sum of the simulated latencies
}

// Stats returns the device's accounting.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := Stats{
		Capacity:         d.cfg.Capacity,
		ReservedByOthers: d.reservedOthers,
		InUse:            d.usedLocked(),
		Peak:             d.peak,
		MallocBytes:      d.mallocB,
		PhysBytes:        d.physB,
		Handles:          len(d.handles),
		HostBytes:        d.hostBytes,
		HostAllocations:  len(d.host),
		Failures:         d.failures,
		DriverTime:       d.driverTime,
	}
	for _, r := range d.regions {
		if r.reserve {
			s.Reservations++
			s.ReservedVA += r.size
		} else {
			s.Allocations++
			s.BackingBytes += r.mem.hostBytes()
		}
	}
	for _, m := range d.mappings {
		s.MappedBytes += m.size
	}
	for _, h := range d.handles {
		s.BackingBytes += h.mem.hostBytes()
	}
	return s
}

// ResetPeak sets the peak to the memory in use now.
func (d *Device) ResetPeak() {
	d.mu.Lock()
	d.peak = d.usedLocked()
	d.mu.Unlock()
}
