package api

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
)

// changes each change one field (or a few that go together) of a
// process to another process's.
var changes = []func(q, o *Process){
	func(q, o *Process) { q.User, q.Command = o.User, o.Command },
	func(q, o *Process) { q.Flags = o.Flags },
	func(q, o *Process) { q.Leak = o.Leak },
	func(q, o *Process) { q.Signalable, q.NotSignalableReason = o.Signalable, o.NotSignalableReason },
	func(q, o *Process) { q.StartTime, q.RecentStep = o.StartTime, o.RecentStep },
	func(q, o *Process) { q.AllocatorFields = o.AllocatorFields },
	func(q, o *Process) {
		q.Container, q.Pod, q.Namespace, q.ContainerName = o.Container, o.Pod, o.Namespace, o.ContainerName
	},
	func(q, o *Process) { q.Recent, q.MemoryKnown = o.Recent, !q.MemoryKnown },
	func(q, o *Process) { // the same verdict with another figure
		if q.Leak != nil {
			l := *q.Leak
			l.Confidence = -l.Confidence
			q.Leak = &l
		}
	},
}

// nextState is s a moment later, as a daemon's next state would be: most
// processes as they were with their sparkline moved on, some changed in
// one field, some gone, some new, the order shuffled now and then.
func nextState(r *rand.Rand, s State) State {
	n := s
	n.Processes = nil
	for _, p := range s.Processes {
		if r.IntN(20) == 0 {
			continue // gone
		}
		q := p
		if q.Recent != nil && r.IntN(4) > 0 {
			k := r.IntN(12)
			rec := slices.Clone(q.Recent[min(k, len(q.Recent)):])
			for range k {
				v := uint64(r.IntN(5)) << 30
				if len(rec) > 0 && r.IntN(2) == 0 {
					v = rec[len(rec)-1] // memory that did not move
				}
				rec = append(rec, v)
			}
			q.Recent = rec
		}
		if r.IntN(3) == 0 {
			q.UsedBytes = r.Uint64() >> r.IntN(64)
		}
		other := randomState(r)
		if len(other.Processes) > 0 && r.IntN(3) == 0 {
			changes[r.IntN(len(changes))](&q, &other.Processes[0])
		}
		n.Processes = append(n.Processes, q)
	}
	other := randomState(r)
	for i := range min(len(other.Processes), r.IntN(3)) {
		n.Processes = append(n.Processes, other.Processes[i])
	}
	if len(n.Processes) > 1 && r.IntN(4) == 0 {
		r.Shuffle(len(n.Processes), func(i, j int) { n.Processes[i], n.Processes[j] = n.Processes[j], n.Processes[i] })
	}
	if len(n.Processes) > 0 && r.IntN(10) == 0 { // two processes in one slot
		n.Processes = append(n.Processes, n.Processes[0])
	}
	if r.IntN(10) == 0 {
		n.Processes = nil
	}
	return n
}

// A stream's cache gives marshalState's bytes for every state of a
// series where each state follows the last one, whatever changes.
func TestStateCacheMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	prefix := []byte("event: state\ndata: ")
	reused := 0
	for series := range 60 {
		var c stateCache
		var bufs [2][]byte // as a stream writes: the buffers take turns
		s := randomState(r)
		for i := range 40 {
			want, werr := marshalState(s)
			before := len(c.procs)
			buf := &bufs[i%2]
			if series%10 == 9 {
				buf = &bufs[0] // over the last state: the cache must not copy from it
			}
			got, err := appendStateCached(append((*buf)[:0], prefix...), s, &c)
			*buf = got
			switch {
			case werr != nil:
				if err == nil || !bytes.Equal(got, prefix) {
					t.Fatalf("series %d state %d: %v; want marshalState's error %v", series, i, err, werr)
				}
			case err != nil || !bytes.Equal(got, append(slices.Clone(prefix), want...)):
				t.Fatalf("series %d state %d: differs (%v)\n got %s\nwant %s", series, i, err, got, want)
			}
			if before > 0 {
				reused++
			}
			// The cache owns what it compares: changing the written
			// state's slices in place must not fool it.
			for j := range s.Processes {
				if len(s.Processes[j].Recent) > 0 && r.IntN(8) == 0 {
					s.Processes[j].Recent = slices.Clone(s.Processes[j].Recent)
					s.Processes[j].Recent[0]++
				}
			}
			s = nextState(r, s)
		}
	}
	if reused < 1000 {
		t.Errorf("only %d states were written with a cache holding processes", reused)
	}
}

// The cache's reuse of a sparkline that moved on, piece by piece.
func TestCachedRecent(t *testing.T) {
	var c stateCache
	proc := func(rec []uint64) State {
		return State{Schema: Schema, Processes: []Process{{PID: 1, Recent: rec, RecentStep: 0.1}}}
	}
	series := [][]uint64{
		{1, 2, 3},
		{1, 2, 3, 4},        // grows
		{3, 4, 4, 4, 50000}, // moves on by two, repeats
		{4, 4, 50000, 7},
		{4, 4, 50000, 7},
		{9},
		{},
		nil,
		{9, 9},
		{9, 9, 9},
	}
	for i, rec := range series {
		s := proc(rec)
		want, _ := marshalState(s)
		got, err := appendStateCached(nil, s, &c)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("step %d (%v): %s, %v; want %s", i, rec, got, err, want)
		}
	}
}

// FuzzStateCache: two states in a row, the second from the first as the
// fuzzer says, through one cache.
func FuzzStateCache(f *testing.F) {
	f.Add(uint64(1), uint64(2))
	f.Add(uint64(7), uint64(99))
	f.Fuzz(func(t *testing.T, a, b uint64) {
		r := rand.New(rand.NewPCG(a, b))
		var c stateCache
		s := randomState(r)
		for range 3 {
			want, werr := marshalState(s)
			got, err := appendStateCached(nil, s, &c)
			if (err != nil) != (werr != nil) || (err == nil && !bytes.Equal(got, want)) {
				t.Fatalf("got %s, %v\nwant %s, %v", got, err, want, werr)
			}
			s = nextState(r, s)
		}
	})
}

// A stream writes each state event with marshalState's bytes, its buffers
// and cache taking turns over a series of states.
func TestStreamStatesMatch(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	rec := httptest.NewRecorder()
	s := &stream{w: rec, rc: http.NewResponseController(rec)}
	st := randomState(r)
	for i := range 30 {
		want, werr := marshalState(st)
		rec.Body.Reset()
		err := s.state(st)
		switch {
		case werr != nil:
			if err == nil {
				t.Fatalf("state %d: no error; want marshalState's %v", i, werr)
			}
		case err != nil || rec.Body.String() != "event: state\ndata: "+string(want)+"\n\n":
			t.Fatalf("state %d: %v\n got %q\nwant %q", i, err, rec.Body.String(), want)
		}
		st = nextState(r, st)
	}
}
