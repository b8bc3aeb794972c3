package replay

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/trace/rmm"
)

// Options tune one pass.
type Options struct {
	// Time measures the host time of every Malloc and Free (see the
	// package documentation). Off, Result.Latency is nil.
	Time bool
	// Progress, if set, is called with the number of records read every
	// ProgressEvery records, from the replaying goroutine.
	Progress func(records int64)
	// Verify writes a pattern derived from the record's index into the
	// first and last bytes of every allocation (CopyHtoD, outside the
	// per-operation clocks but inside WallSeconds) and checks it before
	// the free (CopyDtoH): another
	// allocation placed over live memory, or memory unmapped under a live
	// block, shows as a mismatch (Result.VerifyMismatches).
	Verify bool
	// ProcessMemory, if set, returns the device memory this process holds
	// (the driver's per-process figure, nvmlDeviceGetComputeRunningProcesses).
	// The device check then compares it before the allocator is created
	// and after the teardown, which other processes cannot move; unset, it
	// compares the device's free memory (Result.DeviceCheck says which).
	ProcessMemory func() (uint64, error)
}

// verifyProbe is how many bytes Verify writes and checks at each end of
// an allocation.
const verifyProbe = 8

// ProgressEvery is how many records pass between calls of Options.Progress.
const ProgressEvery = 1 << 16

// Result is what one pass measured.
type Result struct {
	Records int64 // records read
	Ops     int64 // Malloc and Free calls made (Allocs + Frees)
	Allocs  int64
	Frees   int64
	// SkippedFailures counts "allocate failure" records.
	SkippedFailures int64
	// UnknownFrees counts frees of trace pointers that were not live.
	UnknownFrees int64
	// ReusedPointers counts allocations of a trace pointer that was still
	// live; the earlier allocation is then never freed (it is leaked).
	ReusedPointers int64

	PeakLiveBytes     uint64 // most requested bytes live at once
	PeakReservedBytes uint64 // the allocator's reserved_bytes peak
	// LeakedBytes and LeakedAllocs are what was live when the trace ended.
	LeakedBytes  uint64
	LeakedAllocs int64

	DeviceCalls DeviceCalls
	// Latency is nil unless Options.Time was set.
	Latency *Latency
	// OOM is set when the trace did not fit: the pass stopped there.
	OOM *OOM
	// Stats are the allocator's statistics when the trace ended.
	Stats alloc.Stats

	// WallSeconds is the wall time of the pass's loop over the records:
	// allocator, driver calls, the engine's bookkeeping and, when set,
	// the per-operation clocks and the verification.
	WallSeconds float64
	// VerifiedAllocations and VerifyMismatches count the allocations
	// checked before their free (Options.Verify) and those whose pattern
	// had changed.
	Verified                              bool
	VerifiedAllocations, VerifyMismatches int64
	// DeviceDeltaBytes is how much more device memory the pass left held
	// after the teardown (every allocation freed, the allocator closed)
	// than before the allocator was created: this process's own figure
	// when Options.ProcessMemory is set (DeviceCheck "process"), else the
	// device's free memory before minus after (DeviceCheck "device"), which
	// other processes on a shared GPU move too. DeviceLeakedBytes is the
	// same when positive and 0 otherwise: memory that came back beyond
	// what the pass took (another process freed some) is never a leak.
	DeviceDeltaBytes  int64
	DeviceLeakedBytes int64
	DeviceCheck       string
}

// ReservedOverLive is the memory ratio, peak reserved over peak live
// bytes (0 for a trace that allocated nothing).
func (r *Result) ReservedOverLive() float64 {
	if r.PeakLiveBytes == 0 {
		return 0
	}
	return float64(r.PeakReservedBytes) / float64(r.PeakLiveBytes)
}

// DeviceCalls counts the calls that obtained or gave back device memory
// during the trace (not the teardown after it).
type DeviceCalls struct {
	Malloc, Free uint64
	// VMM counts the virtual-memory calls (reserve, create, map, set
	// access, unmap, release, free address).
	VMM uint64
	// FromDevice says the calls were counted at the device (the simulated
	// device's counters, or a counting wrapper around a device that
	// offers what alloc/cudadev offers); otherwise they are the
	// allocator's num_device_alloc and num_device_free.
	FromDevice bool
	// ByKind splits the same calls by kind; it is known only when
	// FromDevice is set (zero otherwise).
	ByKind CallKinds
}

// Total is Malloc + Free + VMM.
func (c DeviceCalls) Total() uint64 { return c.Malloc + c.Free + c.VMM }

// CallKinds counts the device calls of each kind that obtain or give back
// device memory or address space, one field per driver function
// (cuMemAlloc, cuMemFree, cuMemAddressReserve, cuMemAddressFree,
// cuMemCreate, cuMemRelease, cuMemMap, cuMemSetAccess, cuMemUnmap), so
// that they can be set beside another program's counts of the same
// functions (bench/torchreplay counts PyTorch's with CUPTI).
type CallKinds struct {
	Malloc, Free, AddressReserve, AddressFree   uint64
	MemCreate, MemRelease, MemMap, MemSetAccess uint64
	MemUnmap                                    uint64
}

// Total is the sum of all kinds.
func (k CallKinds) Total() uint64 { return k.Malloc + k.Free + k.VMM() }

// VMM is the sum of the virtual-memory kinds.
func (k CallKinds) VMM() uint64 {
	return k.AddressReserve + k.AddressFree + k.MemCreate + k.MemRelease + k.MemMap + k.MemSetAccess + k.MemUnmap
}

// kindsBetween returns the allocation calls made from before to after.
func kindsBetween(before, after sim.Calls) CallKinds {
	return CallKinds{
		Malloc: after.Malloc - before.Malloc, Free: after.Free - before.Free,
		AddressReserve: after.AddressReserve - before.AddressReserve,
		AddressFree:    after.AddressFree - before.AddressFree,
		MemCreate:      after.MemCreate - before.MemCreate,
		MemRelease:     after.MemRelease - before.MemRelease,
		MemMap:         after.MemMap - before.MemMap,
		MemSetAccess:   after.MemSetAccess - before.MemSetAccess,
		MemUnmap:       after.MemUnmap - before.MemUnmap,
	}
}

// OOM describes where a trace ran out of memory.
type OOM struct {
	Record int64  // 1-based index of the allocate record that failed
	Size   uint64 // its size
	Err    error  // the allocator's *alloc.OutOfMemoryError
}

func (o *OOM) Error() string {
	return fmt.Sprintf("out of memory at record %d (%s): %v", o.Record, units.FormatBytes(o.Size), o.Err)
}

// callCounter is implemented by the simulated device.
type callCounter interface{ Calls() sim.Calls }

// live is one allocation of the trace that is allocated and not yet freed.
type live struct {
	ptr  uint64 // the allocator's pointer
	size uint64 // requested size
	rec  int64  // index of its allocate record (the verification pattern)
}

// probe returns the pattern Verify writes for the allocation of record
// rec: n bytes, distinct per record.
func probe(rec int64, n int) []byte {
	b := make([]byte, n)
	x := uint64(rec)*0x9E3779B97F4A7C15 + 0x5A
	for i := range b {
		x ^= x >> 29
		x *= 0xBF58476D1CE4E5B9
		b[i] = byte(x >> 56)
	}
	return b
}

// probeSpans returns where Verify writes in l's allocation: its first and
// its last verifyProbe bytes, or all of it when it is too small for two
// separate spans.
func probeSpans(l live) (head, tail uint64) {
	if l.size < 2*verifyProbe {
		return l.size, 0
	}
	return verifyProbe, verifyProbe
}

// writeProbe writes the pattern of l into its allocation.
func writeProbe(dev alloc.Device, l live) error {
	head, tail := probeSpans(l)
	p := probe(l.rec, int(head+tail))
	if err := dev.CopyHtoD(l.ptr, p[:head]); err != nil {
		return err
	}
	if tail == 0 {
		return nil
	}
	return dev.CopyHtoD(l.ptr+l.size-tail, p[head:])
}

// checkProbe reports whether l's allocation still holds its pattern.
func checkProbe(dev alloc.Device, l live) (bool, error) {
	head, tail := probeSpans(l)
	want := probe(l.rec, int(head+tail))
	got := make([]byte, len(want))
	if err := dev.CopyDtoH(got[:head], l.ptr); err != nil {
		return false, err
	}
	if tail > 0 {
		if err := dev.CopyDtoH(got[head:], l.ptr+l.size-tail); err != nil {
			return false, err
		}
	}
	return bytes.Equal(got, want), nil
}

// Replay runs one pass of src through a new allocator with configuration
// cfg over dev (see the package documentation). It returns an error for a
// malformed trace, a device failure other than running out of memory, or a
// failure to give the memory back afterwards; running out of memory is a
// result (Result.OOM), not an error.
func Replay(src Source, dev alloc.Device, cfg alloc.Config, opt Options) (*Result, error) {
	cc, fromDevice := dev.(callCounter)
	if !fromDevice {
		if fd, ok := dev.(fullDevice); ok {
			wrapped := &countingDevice{fullDevice: fd}
			dev, cc, fromDevice = wrapped, wrapped, true
		}
	}
	held := func() (int64, error) {
		if opt.ProcessMemory != nil {
			n, err := opt.ProcessMemory()
			if err != nil {
				return 0, fmt.Errorf("replay: reading this process's device memory: %w", err)
			}
			return int64(n), nil
		}
		free, _, err := dev.MemInfo()
		if err != nil {
			return 0, fmt.Errorf("replay: reading the device's free memory: %w", err)
		}
		return -int64(free), nil // less free is more held
	}
	held0, err := held()
	if err != nil {
		return nil, err
	}
	a, err := alloc.New(dev, cfg)
	if err != nil {
		return nil, fmt.Errorf("replay: %w", err)
	}
	var before sim.Calls
	if fromDevice {
		before = cc.Calls()
	}
	res := &Result{Verified: opt.Verify}
	var (
		lives    = make(map[uint64]live)
		orphans  []live // allocations whose trace pointer was reused
		streams  = map[uint64]alloc.Stream{0: 0}
		liveNow  uint64
		hist     *histogram
		overhead int64
	)
	if opt.Time {
		hist = new(histogram)
		overhead = calibrateTimer()
		// Start the timed pass with a collected heap, so that a collection
		// triggered by earlier garbage does not land in it.
		runtime.GC()
	}
	streamOf := func(s uint64) alloc.Stream {
		if st, ok := streams[s]; ok {
			return st
		}
		st := alloc.Stream(len(streams))
		streams[s] = st
		return st
	}
	start := time.Now()
	runErr := func() error {
		for {
			rec, err := src.Next()
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
			res.Records++
			if opt.Progress != nil && res.Records%ProgressEvery == 0 {
				opt.Progress(res.Records)
			}
			switch rec.Action {
			case rmm.AllocateFailure:
				res.SkippedFailures++
			case rmm.Allocate:
				s := streamOf(rec.Stream)
				var ptr uint64
				if hist != nil {
					t0 := time.Now()
					ptr, err = a.Malloc(rec.Size, s)
					hist.add(int64(time.Since(t0)) - overhead)
				} else {
					ptr, err = a.Malloc(rec.Size, s)
				}
				if err != nil {
					if errors.Is(err, alloc.ErrOutOfMemory) {
						res.OOM = &OOM{Record: res.Records, Size: rec.Size, Err: err}
						return nil
					}
					return fmt.Errorf("record %d: allocate %d bytes: %w", res.Records, rec.Size, err)
				}
				res.Ops++
				res.Allocs++
				if old, ok := lives[rec.Pointer]; ok {
					res.ReusedPointers++
					orphans = append(orphans, old)
				}
				l := live{ptr: ptr, size: rec.Size, rec: res.Records}
				lives[rec.Pointer] = l
				liveNow += rec.Size
				if opt.Verify && ptr != 0 && rec.Size > 0 {
					if err := writeProbe(dev, l); err != nil {
						return fmt.Errorf("record %d: writing the verification pattern: %w", res.Records, err)
					}
				}
				res.PeakLiveBytes = max(res.PeakLiveBytes, liveNow)
			case rmm.Free:
				l, ok := lives[rec.Pointer]
				if !ok {
					res.UnknownFrees++
					continue
				}
				delete(lives, rec.Pointer)
				if opt.Verify && l.ptr != 0 && l.size > 0 {
					ok, err := checkProbe(dev, l)
					if err != nil {
						return fmt.Errorf("record %d: reading the verification pattern: %w", res.Records, err)
					}
					res.VerifiedAllocations++
					if !ok {
						res.VerifyMismatches++
					}
				}
				if hist != nil {
					t0 := time.Now()
					err = a.Free(l.ptr)
					hist.add(int64(time.Since(t0)) - overhead)
				} else {
					err = a.Free(l.ptr)
				}
				if err != nil {
					return fmt.Errorf("record %d: free: %w", res.Records, err)
				}
				res.Ops++
				res.Frees++
				liveNow -= l.size
			default:
				return fmt.Errorf("record %d: unknown action %d", res.Records, rec.Action)
			}
		}
	}()

	// Measure at the end of the trace, then give everything back.
	res.WallSeconds = time.Since(start).Seconds()
	res.Stats = a.Stats()
	res.PeakReservedBytes = uint64(res.Stats.ReservedBytes.All.Peak)
	res.LeakedBytes = liveNow
	res.LeakedAllocs = int64(len(lives) + len(orphans))
	if fromDevice {
		k := kindsBetween(before, cc.Calls())
		res.DeviceCalls = DeviceCalls{Malloc: k.Malloc, Free: k.Free, VMM: k.VMM(), FromDevice: true, ByKind: k}
	} else {
		res.DeviceCalls = DeviceCalls{Malloc: uint64(res.Stats.NumDeviceAlloc), Free: uint64(res.Stats.NumDeviceFree)}
	}
	if hist != nil {
		res.Latency = hist.latency(overhead)
	}
	if err := teardown(a, lives, orphans); err != nil && runErr == nil {
		runErr = err
	}
	if runErr != nil {
		return nil, runErr
	}
	held1, err := held()
	if err != nil {
		return nil, fmt.Errorf("%w (after the teardown)", err)
	}
	res.DeviceDeltaBytes = held1 - held0
	res.DeviceLeakedBytes = max(res.DeviceDeltaBytes, 0)
	res.DeviceCheck = "device"
	if opt.ProcessMemory != nil {
		res.DeviceCheck = "process"
	}
	return res, nil
}

// teardown frees what the trace left live and closes the allocator, which
// returns every segment to the device.
func teardown(a *alloc.Allocator, lives map[uint64]live, orphans []live) error {
	for _, l := range lives {
		if err := a.Free(l.ptr); err != nil {
			return fmt.Errorf("replay: free after the trace: %w", err)
		}
	}
	for _, l := range orphans {
		if err := a.Free(l.ptr); err != nil {
			return fmt.Errorf("replay: free after the trace: %w", err)
		}
	}
	if err := a.Close(); err != nil {
		return fmt.Errorf("replay: close the allocator: %w", err)
	}
	return nil
}
