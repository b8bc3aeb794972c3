package job

// Out-of-memory messages in a job's output. See doc.go for an overview.

import (
	"bytes"
	"math"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Message is an out-of-memory message found in a job's output, with the
// figures it states (0 when it does not state them).
type Message struct {
	Framework string `json:"framework"` // pytorch, tensorflow, jax, cupy, cuda
	// Text is the line, cut at MaxLine bytes; for a marker found beyond
	// MaxLine in a longer line, the line from the marker on, cut the same.
	Text string `json:"text"`
	// At is when the line was read, after the job started.
	At time.Duration `json:"-"`

	// Figures PyTorch states (and, where they say it, JAX and CuPy).
	Tried        uint64 `json:"tried_bytes,omitempty"`        // the allocation that failed
	GPU          int    `json:"cuda_device"`                  // CUDA ordinal in the message; -1 unknown
	Capacity     uint64 `json:"capacity_bytes,omitempty"`     // the GPU's total capacity
	Free         uint64 `json:"free_bytes,omitempty"`         // free on the GPU
	Allocated    uint64 `json:"allocated_bytes,omitempty"`    // allocated by PyTorch (private pools included)
	Unallocated  uint64 `json:"unallocated_bytes,omitempty"`  // reserved by PyTorch but unallocated
	PrivatePools uint64 `json:"private_pool_bytes,omitempty"` // allocated in private pools (CUDA graphs)
	Allowed      uint64 `json:"allowed_bytes,omitempty"`      // per-process memory fraction, when set
	// Holders are the processes the message lists with their memory
	// ("Process 562167 has 15.25 GiB memory in use"); PID 0 is "this
	// process" (the non-PyTorch wording).
	Holders []Holder `json:"holders,omitempty"`
}

// Holder is a process named in an OOM message.
type Holder struct {
	PID   int    `json:"pid"`
	Bytes uint64 `json:"bytes"`
}

// MaxLine is the longest part of a line the scanner keeps: a message's
// Text is cut there. A longer line (a progress bar redrawn with carriage
// returns can make one line of megabytes) is still searched to its end, in
// windows of 2·MaxLine bytes, so memory stays bounded and a marker anywhere
// in it is found.
const MaxLine = 64 << 10

// tailLines is how many of the last output lines a Scanner keeps.
const tailLines = 40

// pattern is one marker of an out-of-memory error.
type pattern struct {
	framework, marker string
}

// maxMarker is the length of the longest marker.
var maxMarker = func() int {
	n := 0
	for _, p := range patterns {
		n = max(n, len(p.marker))
	}
	return n
}()

// patterns are matched in order; the first marker found in a line names
// the framework. CuPy's exception is also called OutOfMemoryError, so its
// module path comes before PyTorch's bare class name.
var patterns = []pattern{
	{"pytorch", "CUDA out of memory"},
	{"cupy", "cupy.cuda.memory.OutOfMemoryError"},
	{"cupy", "cupy_backends.cuda.api.driver.CUDADriverError: CUDA_ERROR_OUT_OF_MEMORY"},
	{"pytorch", "torch.OutOfMemoryError"},
	{"pytorch", "torch.cuda.OutOfMemoryError"},
	{"tensorflow", "ResourceExhaustedError"},
	{"tensorflow", "OOM when allocating"},
	{"tensorflow", "ran out of memory trying to allocate"}, // the BFC allocator's warning
	{"jax", "RESOURCE_EXHAUSTED"},
	{"cupy", "OutOfMemoryError: Out of memory allocating"},
	{"pytorch", "OutOfMemoryError"},
	{"cuda", "cudaErrorMemoryAllocation"},
	{"cuda", "CUDA_ERROR_OUT_OF_MEMORY"},
	{"cuda", "CUDA error: out of memory"},
}

// MatchLine reports whether line is an out-of-memory message and parses
// the figures it states.
func MatchLine(line string) (Message, bool) {
	for _, p := range patterns {
		if strings.Contains(line, p.marker) {
			m := Message{Framework: p.framework, Text: line, GPU: -1}
			if len(m.Text) > MaxLine {
				m.Text = m.Text[:MaxLine]
			}
			parseFigures(&m)
			return m, true
		}
	}
	return Message{}, false
}

const sizeRe = `([0-9][0-9.,]*) ?(bytes|B|KiB|MiB|GiB|TiB)`

var (
	// PyTorch 2.x (CUDACachingAllocator.cpp, malloc's error path).
	ptTried    = regexp.MustCompile(`Tried to allocate ` + sizeRe)
	ptGPU      = regexp.MustCompile(`GPU (\d+) has a total capacity of ` + sizeRe + ` of which ` + sizeRe + ` is free`)
	ptHolder   = regexp.MustCompile(`Process (\d+) has ` + sizeRe + ` memory in use`)
	ptThis     = regexp.MustCompile(`this process has ` + sizeRe + ` memory in use`)
	ptAllowed  = regexp.MustCompile(sizeRe + ` allowed;`)
	ptAlloc    = regexp.MustCompile(`Of the allocated memory ` + sizeRe + ` is allocated by PyTorch`)
	ptPrivate  = regexp.MustCompile(`with ` + sizeRe + ` allocated in private pools`)
	ptUnalloc  = regexp.MustCompile(`and ` + sizeRe + ` is reserved by PyTorch but unallocated`)
	ptOldGPU   = regexp.MustCompile(`\(GPU (\d+); ` + sizeRe + ` total capacity; ` + sizeRe + ` already allocated; ` + sizeRe + ` free;`)
	ptOldResv  = regexp.MustCompile(sizeRe + ` reserved in total by PyTorch`)
	ptOldCache = regexp.MustCompile(sizeRe + ` cached\)`)
	// JAX/XLA: "Out of memory while trying to allocate 17179869184 bytes."
	xlaTried = regexp.MustCompile(`(?i)out of memory (?:while )?trying to allocate ` + sizeRe)
	// CuPy: "Out of memory allocating 8,589,934,592 bytes (allocated so far: 8,589,934,592 bytes)."
	cupyTried = regexp.MustCompile(`Out of memory allocating ` + sizeRe)
	cupySoFar = regexp.MustCompile(`allocated so far: ` + sizeRe)
)

// parseSize reads a figure as PyTorch's format_size (and XLA, CuPy)
// print it: "546.00 MiB", "1024 bytes", "8,589,934,592 bytes".
func parseSize(num, unit string) uint64 {
	num = strings.ReplaceAll(num, ",", "")
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 {
		return 0
	}
	mult := map[string]float64{"bytes": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}[unit]
	v := math.Round(f * mult)
	if v >= math.MaxUint64 {
		return 0
	}
	return uint64(v)
}

// size returns the figure in the submatch at group i (number) and i+1 (unit).
func size(m []string, i int) uint64 {
	if len(m) <= i+1 {
		return 0
	}
	return parseSize(m[i], m[i+1])
}

func parseFigures(m *Message) {
	s := m.Text
	switch m.Framework {
	case "pytorch":
		if g := ptTried.FindStringSubmatch(s); g != nil {
			m.Tried = size(g, 1)
		}
		if g := ptGPU.FindStringSubmatch(s); g != nil {
			m.GPU, _ = strconv.Atoi(g[1])
			m.Capacity, m.Free = size(g, 2), size(g, 4)
		}
		for _, g := range ptHolder.FindAllStringSubmatch(s, -1) {
			pid, _ := strconv.Atoi(g[1])
			m.Holders = append(m.Holders, Holder{PID: pid, Bytes: size(g, 2)})
		}
		if g := ptThis.FindStringSubmatch(s); g != nil {
			m.Holders = append(m.Holders, Holder{PID: 0, Bytes: size(g, 1)})
		}
		if g := ptAllowed.FindStringSubmatch(s); g != nil {
			m.Allowed = size(g, 1)
		}
		if g := ptAlloc.FindStringSubmatch(s); g != nil {
			m.Allocated = size(g, 1)
		}
		if g := ptPrivate.FindStringSubmatch(s); g != nil {
			m.PrivatePools = size(g, 1)
		}
		if g := ptUnalloc.FindStringSubmatch(s); g != nil {
			m.Unallocated = size(g, 1)
		}
		// PyTorch up to 2.0: "(GPU 0; 6.00 GiB total capacity; 3.49 GiB
		// already allocated; 1.04 GiB free; 3.50 GiB reserved in total by
		// PyTorch)"; 2018: "...; 179.00 KiB cached)".
		if g := ptOldGPU.FindStringSubmatch(s); g != nil {
			m.GPU, _ = strconv.Atoi(g[1])
			m.Capacity, m.Allocated, m.Free = size(g, 2), size(g, 4), size(g, 6)
			var reserved uint64
			if r := ptOldResv.FindStringSubmatch(s); r != nil {
				reserved = size(r, 1)
			} else if r := ptOldCache.FindStringSubmatch(s); r != nil {
				// "cached" was the unallocated part of the cache then.
				reserved = m.Allocated + size(r, 1)
			}
			if reserved > m.Allocated {
				m.Unallocated = reserved - m.Allocated
			}
		}
	case "jax", "tensorflow":
		if g := xlaTried.FindStringSubmatch(s); g != nil {
			m.Tried = size(g, 1)
		}
	case "cupy":
		if g := cupyTried.FindStringSubmatch(s); g != nil {
			m.Tried = size(g, 1)
		}
		if g := cupySoFar.FindStringSubmatch(s); g != nil {
			m.Allocated = size(g, 1)
		}
	}
}

// Scanner is an io.Writer that looks for out-of-memory messages in what is
// written to it, line by line, and keeps the last lines. It never holds
// output back: the supervisor writes each chunk to the terminal first and
// to the Scanner after. A partial line waits for its end (or Close) to be
// matched. Safe for concurrent use.
type Scanner struct {
	start time.Time
	now   func() time.Time

	mu      sync.Mutex
	partial []byte // the unfinished last line, at most MaxLine bytes
	over    bool   // the partial line was longer than MaxLine
	// For a line longer than MaxLine: win is the part after partial still
	// to search (at most 2·MaxLine bytes, starting with the last bytes of
	// partial so that a marker across the boundary is seen), and found the
	// message of the line once one is seen.
	win   []byte
	found *Message
	msgs  []Message
	tail  []string // ring of the last tailLines lines
	next  int
	lines int
}

// NewScanner returns a Scanner whose message times count from start.
func NewScanner(start time.Time, now func() time.Time) *Scanner {
	if now == nil {
		now = time.Now
	}
	return &Scanner{start: start, now: now}
}

// maxMessages bounds the messages kept (a job that prints OOM in a loop).
const maxMessages = 16

// Write scans p. It always consumes all of p.
func (s *Scanner) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := len(p)
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.appendPartial(p)
			break
		}
		s.appendPartial(p[:i])
		s.endLine()
		p = p[i+1:]
	}
	return n, nil
}

func (s *Scanner) appendPartial(b []byte) {
	if !s.over {
		room := MaxLine - len(s.partial)
		if need := len(s.partial) + min(len(b), room); need > cap(s.partial) {
			// Grow as append would, but never past MaxLine.
			p := make([]byte, len(s.partial), min(MaxLine, max(need, 2*cap(s.partial))))
			copy(p, s.partial)
			s.partial = p
		}
		if len(b) <= room {
			s.partial = append(s.partial, b...)
			return
		}
		s.partial = append(s.partial, b[:room]...)
		b = b[room:]
		// The line goes on past MaxLine: match its head now, then search
		// the rest in windows as it arrives.
		s.over = true
		if m, ok := s.match(string(s.partial)); ok {
			s.found = &m
		}
		if cap(s.win) < 2*MaxLine {
			s.win = make([]byte, 0, 2*MaxLine)
		}
		s.win = append(s.win[:0], s.partial[len(s.partial)-(maxMarker-1):]...)
	}
	for len(b) > 0 {
		n := min(len(b), 2*MaxLine-len(s.win))
		s.win = append(s.win, b[:n]...)
		b = b[n:]
		if len(s.win) == 2*MaxLine {
			// Markers that start in the first half are whole in the
			// window and followed by at least MaxLine−len(marker) bytes
			// of the message; the second half starts the next window.
			s.searchWindow(MaxLine)
			s.win = s.win[:copy(s.win, s.win[MaxLine:])]
		}
	}
}

// searchWindow looks, in a long line's window, for a marker that starts
// before limit, unless the line already has its message.
func (s *Scanner) searchWindow(limit int) {
	if s.found != nil || len(s.msgs) >= maxMessages {
		return
	}
	for _, p := range patterns {
		if i := bytes.Index(s.win, []byte(p.marker)); i >= 0 && i < limit {
			if m, ok := s.match(string(s.win[i:])); ok {
				s.found = &m
			}
			return
		}
	}
}

// match is MatchLine with the message's time set.
func (s *Scanner) match(line string) (Message, bool) {
	m, ok := MatchLine(line)
	if ok {
		m.At = s.now().Sub(s.start)
	}
	return m, ok
}

func (s *Scanner) endLine() {
	if s.over {
		s.searchWindow(len(s.win))
	}
	line := strings.TrimRight(string(s.partial), "\r")
	over, found := s.over, s.found
	s.partial, s.over, s.win, s.found = s.partial[:0], false, s.win[:0], nil
	s.lines++
	kept := line
	if len(kept) > 1024 {
		kept = kept[:1024] + "…"
	}
	if len(s.tail) < tailLines {
		s.tail = append(s.tail, kept)
	} else {
		s.tail[s.next] = kept
		s.next = (s.next + 1) % tailLines
	}
	if len(s.msgs) >= maxMessages {
		return
	}
	if over {
		if found != nil {
			s.msgs = append(s.msgs, *found)
		}
		return
	}
	if m, ok := s.match(line); ok {
		s.msgs = append(s.msgs, m)
	}
}

// Close matches the unfinished last line, if any.
func (s *Scanner) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.partial) > 0 {
		s.endLine()
	}
	return nil
}

// Messages returns the out-of-memory messages found, in order.
func (s *Scanner) Messages() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Message(nil), s.msgs...)
}

// Best returns the most informative message: the first one that states
// figures (the failed allocation's size or the capacity), else the first.
func (s *Scanner) Best() (Message, bool) { return bestMessage(s.Messages()) }

// Tail returns the last lines written (at most 40, each cut at 1 KiB).
func (s *Scanner) Tail() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.tail))
	out = append(out, s.tail[s.next:]...)
	out = append(out, s.tail[:s.next]...)
	return out
}
