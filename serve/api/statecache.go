package api

// An event stream's memory of the states it wrote. At 1,600 processes a
// State is megabytes of JSON and a stream writes one a second; from one
// second to the next most of a process's fields are what they were and
// its sparkline has moved on by a few values. So a stream keeps, per
// process, the pieces of its last encoding (encoder.process writes five)
// with the fields each piece was written from, and writes the next state
// by copying every piece whose fields are the same and encoding the
// others. The bytes are appendState's, whatever the states
// (TestStateCacheMatches, FuzzStateCache): a piece is reused only after
// its fields have been compared with copies the cache owns.

import (
	"bytes"
	"math"
	"slices"
	"strconv"
	"time"
	"unsafe"
)

// stateCache is one stream's; the zero value is empty and ready. The
// pieces it reuses are where the last state wrote them (prev), so a
// stream writes each state into another buffer than the last one's.
type stateCache struct {
	gen   uint64                 // counts the states written with it
	procs map[uint64]*cachedProc // by GPU index and PID (procSlot)
	prev  []byte                 // the last state as written
}

// cachedProc is one process as the last state that had it wrote it: the
// fields each piece was written from (copies the cache owns), and where
// the pieces are in that state's bytes.
type cachedProc struct {
	gen uint64 // the state that wrote it; only the last one's are reused
	ok  bool   // the pieces below are complete

	// head: from the opening brace to the command.
	gpu, user, command, reason string
	gpuIndex                   int
	pid                        uint32
	signalable                 bool
	head                       span

	// mid: from memory_known to the leak verdict.
	known                     bool
	flags                     []string // a copy; nil when the process's were nil
	container, pod, ns, cname string
	hasLeak                   bool
	leak                      Leak
	mid                       span

	// The sparkline: vals (a copy) as written at rec; shift is how far it
	// moved the last time.
	vals    []uint64
	valsNil bool
	rec     span
	shift   int

	// tail: from recent_step_seconds to the closing brace, kept only for
	// a process without allocator figures.
	step      uint64 // math.Float64bits(RecentStep)
	start     time.Time
	tailAlloc bool // the process had allocator figures: tail not kept
	tail      span
}

// span is where a piece is in the bytes of the state that wrote it.
type span struct{ from, to int }

// procSlot is a process's key in stateCache.procs.
func procSlot(p *Process) uint64 { return uint64(uint32(p.GPUIndex))<<32 | uint64(p.PID) }

// begin starts a state written into b; end finishes it (out: the state
// as written), dropping the processes it did not have.
func (c *stateCache) begin(b []byte) {
	c.gen++
	if c.procs == nil {
		c.procs = map[uint64]*cachedProc{}
	}
	if cap(b) > 0 && cap(c.prev) > 0 && &b[:cap(b)][cap(b)-1] == &c.prev[:cap(c.prev)][cap(c.prev)-1] {
		c.reset() // written over the last state: nothing of it can be copied
		c.procs = map[uint64]*cachedProc{}
	}
}

func (c *stateCache) end(out []byte, processes int) {
	c.prev = out
	if len(c.procs) <= processes {
		return
	}
	for k, cp := range c.procs {
		if cp.gen != c.gen {
			delete(c.procs, k)
		}
	}
}

// reset forgets everything: a state that encoding/json had to write
// leaves pieces that may be incomplete.
func (c *stateCache) reset() { c.procs, c.prev = nil, nil }

// copyPiece appends the piece at sp of the last state, returning where it
// now is.
func (e *encoder) copyPiece(sp span) span {
	at := len(e.b)
	e.b = append(e.b, e.cache.prev[sp.from:sp.to]...)
	return span{at, len(e.b)}
}

// cachedProcess is process(p), from the last state's pieces where p's
// fields are those they were written from.
func (e *encoder) cachedProcess(p *Process) {
	c := e.cache
	slot := procSlot(p)
	cp := c.procs[slot]
	switch {
	case cp == nil:
		cp = &cachedProc{}
		c.procs[slot] = cp
	case cp.gen == c.gen: // a second process with this slot in one state
		e.process(p)
		return
	}
	reuse := cp.ok && cp.gen == c.gen-1
	cp.gen, cp.ok = c.gen, false

	if reuse && cp.sameHead(p) {
		cp.head = e.copyPiece(cp.head)
	} else {
		at := len(e.b)
		e.procHead(p)
		cp.gpu, cp.user, cp.command, cp.reason = p.GPU, p.User, p.Command, p.NotSignalableReason
		cp.gpuIndex, cp.pid, cp.signalable = p.GPUIndex, p.PID, p.Signalable
		cp.head = span{at, len(e.b)}
	}

	e.kvUint(`,"used_bytes":`, p.UsedBytes)

	if reuse && cp.sameMid(p) {
		cp.mid = e.copyPiece(cp.mid)
	} else {
		at := len(e.b)
		e.procMid(p)
		cp.known = p.MemoryKnown
		cp.flags = append(cp.flags[:0], p.Flags...)
		if p.Flags == nil {
			cp.flags = nil
		} else if cp.flags == nil {
			cp.flags = []string{}
		}
		cp.container, cp.pod, cp.ns, cp.cname = p.Container, p.Pod, p.Namespace, p.ContainerName
		cp.hasLeak = p.Leak != nil
		if cp.hasLeak {
			cp.leak = *p.Leak
		}
		cp.mid = span{at, len(e.b)}
	}

	e.raw(`,"recent":`)
	e.cachedRecent(cp, p.Recent, reuse)

	hasAlloc := p.AllocatedBytes != nil || p.ReservedBytes != nil || p.Allocator != nil
	if reuse && !hasAlloc && !cp.tailAlloc && cp.step == math.Float64bits(p.RecentStep) && cp.start == p.StartTime {
		cp.tail = e.copyPiece(cp.tail)
	} else {
		at := len(e.b)
		e.procTail(p)
		cp.step, cp.start, cp.tailAlloc = math.Float64bits(p.RecentStep), p.StartTime, hasAlloc
		cp.tail = span{at, len(e.b)}
	}
	cp.ok = true
}

func (cp *cachedProc) sameHead(p *Process) bool {
	return cp.gpu == p.GPU && cp.gpuIndex == p.GPUIndex && cp.pid == p.PID && cp.signalable == p.Signalable &&
		cp.reason == p.NotSignalableReason && cp.user == p.User && cp.command == p.Command
}

func (cp *cachedProc) sameMid(p *Process) bool {
	if cp.known != p.MemoryKnown || (cp.flags == nil) != (p.Flags == nil) || !slices.Equal(cp.flags, p.Flags) ||
		cp.container != p.Container || cp.pod != p.Pod || cp.ns != p.Namespace || cp.cname != p.ContainerName ||
		cp.hasLeak != (p.Leak != nil) {
		return false
	}
	if !cp.hasLeak {
		return true
	}
	l := p.Leak
	// The floats by their bits: -0 and 0 are equal but written apart.
	return cp.leak.Verdict == l.Verdict && cp.leak.Reason == l.Reason &&
		math.Float64bits(cp.leak.Slope) == math.Float64bits(l.Slope) && math.Float64bits(cp.leak.Confidence) == math.Float64bits(l.Confidence)
}

// cachedRecent is uints(vs), copying the digits of the values the last
// sparkline ended with where vs starts with them: a sparkline moves on
// by the samples taken since, so most of its values were written last
// time, one place or more earlier.
func (e *encoder) cachedRecent(cp *cachedProc, vs []uint64, reuse bool) {
	at := len(e.b)
	defer func() { cp.rec = span{at, len(e.b)} }()
	if vs == nil {
		e.raw("null")
		cp.vals, cp.valsNil = cp.vals[:0], true
		return
	}
	// The shift j: vs starts with cp.vals[j:].
	j := -1
	if reuse && !cp.valsNil && len(cp.vals) > 0 && len(vs) > 0 {
		if overlaps(cp.vals, vs, cp.shift) {
			j = cp.shift
		} else {
			for try := range cp.vals {
				if cp.vals[try] == vs[0] && overlaps(cp.vals, vs, try) {
					j = try
					break
				}
			}
		}
	}
	cp.valsNil = false
	if j < 0 {
		e.uints(vs)
		cp.vals = append(cp.vals[:0], vs...)
		return
	}
	// The last sparkline "[v0,v1,...]": the digits from value j on, then
	// the new values as uints writes them after those.
	old := e.cache.prev[cp.rec.from+1 : cp.rec.to-1]
	from := 0
	for n := 0; n < j; from++ {
		if old[from] == ',' {
			n++
		}
	}
	e.b = append(e.b, '[')
	e.b = append(e.b, old[from:]...)
	k := len(cp.vals) - j // values kept
	prev := len(e.b) - 1  // where the last value's digits start
	for prev > at+1 && e.b[prev-1] != ',' {
		prev--
	}
	for i := k; i < len(vs); i++ {
		e.b = append(e.b, ',')
		n := len(e.b)
		if vs[i] == vs[i-1] {
			e.b = append(e.b, e.b[prev:n-1]...)
		} else {
			e.b = strconv.AppendUint(e.b, vs[i], 10)
		}
		prev = n
	}
	e.b = append(e.b, ']')
	cp.shift = j
	cp.vals = append(cp.vals[:0], vs...)
}

// overlaps says whether vs starts with old[j:], which is not empty.
func overlaps(old, vs []uint64, j int) bool {
	k := len(old) - j
	return j >= 0 && k > 0 && k <= len(vs) && bytes.Equal(asBytes(old[j:]), asBytes(vs[:k]))
}

// asBytes is v's memory as bytes, for bytes.Equal, which compares many
// at a time where slices.Equal compares one value at a time.
func asBytes(v []uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 8*len(v))
}
