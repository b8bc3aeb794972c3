package alloc

// Call sites and leak finding. See doc.go for an overview.

import (
	"fmt"
	"runtime"
	"sort"
)

// maxStackDepth is how many frames a recorded call stack keeps.
const maxStackDepth = 16

// callStack is a recorded Go call stack: raw program counters, resolved to
// frames only when a report needs them.
type callStack struct {
	pcs [maxStackDepth]uintptr
	n   int
}

// captureStack records the caller's stack when call sites are recorded for
// this allocation (all, or one in samplePer when sampled), else nil. It is
// called from malloc, which is called directly by every public entry point.
//
//go:noinline
func (a *Allocator) captureStack() *callStack {
	if a.cfg.RecordCallSites == CallSitesSampled {
		if a.sampleTick.Add(1)%a.samplePer != 0 {
			return nil
		}
	}
	st := new(callStack)
	// Skip runtime.Callers, captureStack, malloc and the public entry
	// point; the first recorded frame is the entry point's caller.
	st.n = runtime.Callers(4, st.pcs[:])
	return st
}

// Frame is one resolved stack frame; the JSON keys are those of PyTorch's
// snapshot frames.
type Frame struct {
	Function string `json:"name"`
	File     string `json:"filename"`
	Line     int    `json:"line"`
}

func (f Frame) String() string {
	if f.Function == "" {
		return "(unknown)"
	}
	return fmt.Sprintf("%s %s:%d", f.Function, f.File, f.Line)
}

// frames resolves the whole stack.
func (st *callStack) frames() []Frame {
	if st == nil || st.n == 0 {
		return nil
	}
	var out []Frame
	it := runtime.CallersFrames(st.pcs[:st.n])
	for {
		f, more := it.Next()
		out = append(out, Frame{Function: f.Function, File: f.File, Line: f.Line})
		if !more {
			break
		}
	}
	return out
}

// siteLocked resolves the first frame of st (the caller of the allocation
// API), caching by program counter.
func (a *Allocator) siteLocked(st *callStack) string {
	if st == nil || st.n == 0 {
		return notRecorded
	}
	pc := st.pcs[0]
	if f, ok := a.siteCache[pc]; ok {
		return f.String()
	}
	it := runtime.CallersFrames(st.pcs[:1])
	fr, _ := it.Next()
	f := Frame{Function: fr.Function, File: fr.File, Line: fr.Line}
	a.siteCache[pc] = f
	return f.String()
}

const notRecorded = "(call site not recorded; set record_call_sites)"

// SiteUsage is live memory attributed to one call site.
type SiteUsage struct {
	Site  string `json:"site"`  // "function file:line" of the caller of Malloc or Alloc
	Count int    `json:"count"` // live allocations
	Bytes uint64 `json:"bytes"` // their requested sizes
}

// LiveBySite groups live allocations by call site, most bytes first.
// Allocations without a recorded stack (record_call_sites off, or not
// sampled) are grouped under one "not recorded" entry.
func (a *Allocator) LiveBySite() []SiteUsage {
	a.mu.Lock()
	defer a.mu.Unlock()
	bySite := map[string]*SiteUsage{}
	for b := range a.live.all() {
		site := a.siteLocked(b.stack)
		u := bySite[site]
		if u == nil {
			u = &SiteUsage{Site: site}
			bySite[site] = u
		}
		u.Count++
		u.Bytes += b.requested
	}
	return sortedUsage(bySite)
}

func sortedUsage(m map[string]*SiteUsage) []SiteUsage {
	out := make([]SiteUsage, 0, len(m))
	for _, u := range m {
		out = append(out, *u)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Bytes != out[j].Bytes {
			return out[i].Bytes > out[j].Bytes
		}
		return out[i].Site < out[j].Site
	})
	return out
}

// Mark is a point in an allocator's history; see Since.
type Mark struct{ seq uint64 }

// Mark returns the current point in the allocation history.
func (a *Allocator) Mark() Mark {
	a.mu.Lock()
	defer a.mu.Unlock()
	return Mark{a.seq}
}

// Allocation describes one live allocation.
type Allocation struct {
	Ptr       uint64  `json:"ptr"`
	Size      uint64  `json:"size"`      // block size after rounding
	Requested uint64  `json:"requested"` // size asked for
	Stream    Stream  `json:"stream"`
	Seq       uint64  `json:"seq"` // allocation number, increasing
	Site      string  `json:"site"`
	Frames    []Frame `json:"frames,omitempty"`
}

// Since lists the allocations made after m that are still live, oldest
// first: what a phase of the program (a training step, a request) kept.
func (a *Allocator) Since(m Mark) []Allocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []Allocation
	for b := range a.live.all() {
		if b.seq > m.seq {
			out = append(out, Allocation{
				Ptr: b.addr, Size: b.size, Requested: b.requested, Stream: b.stream, Seq: b.seq,
				Site: a.siteLocked(b.stack), Frames: b.stack.frames(),
			})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	return out
}

// leakRecord is a Buffer the garbage collector reclaimed without Free.
type leakRecord struct {
	stack     *callStack
	requested uint64
}

// Leak is memory of Buffers that became unreachable without Free, grouped
// by call site. The allocator freed that memory when the garbage collector
// found the Buffers.
type Leak struct {
	Site  string `json:"site"`
	Count int    `json:"count"`
	Bytes uint64 `json:"bytes"`
}

// Leaked lists the leaked Buffers found so far, most bytes first.
func (a *Allocator) Leaked() []Leak {
	a.mu.Lock()
	defer a.mu.Unlock()
	bySite := map[string]*SiteUsage{}
	for _, l := range a.leaks {
		site := a.siteLocked(l.stack)
		u := bySite[site]
		if u == nil {
			u = &SiteUsage{Site: site}
			bySite[site] = u
		}
		u.Count++
		u.Bytes += l.requested
	}
	var out []Leak
	for _, u := range sortedUsage(bySite) {
		out = append(out, Leak(u))
	}
	return out
}

// reclaimLeak runs from a Buffer's cleanup: the Buffer is unreachable and
// was never freed. It frees the allocation if it is still the same one.
func (a *Allocator) reclaimLeak(ptr, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.live.get(ptr)
	if b == nil || b.seq != seq {
		return
	}
	a.leaks = append(a.leaks, leakRecord{stack: b.stack, requested: b.requested})
	if a.trace != nil {
		a.traceLocked(traceFree, ptr, b.requested, b.stream)
	}
	_ = a.freeLocked(b) // a device error here has nobody to report to; the block stays consistent
}
