package api

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/vramhq/vram/detect"
)

// Strings and numbers where encoding/json's rules bite: HTML characters,
// control characters, invalid UTF-8, U+2028 and U+2029, exponents.
var (
	trickyStrings = []string{"", "python train.py", `a"b\c`, "<script>&amp;</script>", "tab\there\nnew\rline\b\f",
		"\x00\x01\x1f\x7f", "bad \xff\xfe utf-8 \xc3", "line\u2028para\u2029", "ünïcödé 日本語 🎉", "GPU-8c1b1f4e-0000"}
	trickyFloats = []float64{0, math.Copysign(0, -1), 0.1, 1e-6, 9.99e-7, 1e-7, 1e20, 1e21, 123456789.125, -3.5e-9, 5e-324, math.MaxFloat64, 100}
)

func randomState(r *rand.Rand) State {
	str := func() string { return trickyStrings[r.IntN(len(trickyStrings))] }
	flt := func() float64 {
		if f := trickyFloats[r.IntN(len(trickyFloats))]; f < 1e300 {
			return f * float64(1+r.IntN(3))
		}
		return math.MaxFloat64
	}
	zones := []*time.Location{time.UTC, time.FixedZone("x", 5*3600+30*60), time.FixedZone("y", -8*3600), time.FixedZone("s", 3600+17)}
	tm := func() time.Time {
		if r.IntN(5) == 0 {
			return time.Time{}
		}
		loc := zones[r.IntN(len(zones))]
		if r.IntN(400) == 0 {
			loc = time.FixedZone("far", 25*3600) // encoding/json refuses it
		}
		return time.Unix(1_700_000_000+r.Int64N(1e8), r.Int64N(1e9)*int64(r.IntN(2))).In(loc)
	}
	uints := func() []uint64 {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return []uint64{}
		}
		out := make([]uint64, r.IntN(130))
		for i := range out {
			out[i] = r.Uint64() >> r.IntN(64)
			if i > 0 && r.IntN(3) == 0 { // memory that did not move
				out[i] = out[i-1]
			}
		}
		return out
	}
	strs := func() []string {
		switch r.IntN(3) {
		case 0:
			return nil
		case 1:
			return []string{}
		}
		return []string{str(), str()}
	}
	s := State{Schema: Schema, Time: tm(), Hostname: str(), Simulated: r.IntN(2) == 0, Mutations: r.IntN(2) == 0, Warnings: strs()}
	if r.IntN(6) > 0 {
		for i := range r.IntN(9) {
			s.Devices = append(s.Devices, Device{Index: i - r.IntN(2), UUID: str(), Name: str(), Healthy: r.IntN(2) == 0, Error: str(),
				TotalBytes: r.Uint64(), UsedBytes: r.Uint64() >> 3, FreeBytes: r.Uint64(), ReservedBytes: r.Uint64(), ReservedKnown: r.IntN(2) == 0,
				UnattributedBytes: r.Uint64(), UtilPercent: r.IntN(102) - 1, Recent: uints(), RecentStep: flt()})
		}
	}
	if r.IntN(6) > 0 {
		for range r.IntN(4) {
			s.Alerts = append(s.Alerts, Alert{Time: tm(), Rule: str(), Severity: str(), State: str(), GPU: str(), PID: uint32(r.IntN(3)) * r.Uint32(), StartTime: tm(), Message: str()})
		}
	}
	if r.IntN(6) > 0 {
		for range r.IntN(40) {
			p := Process{GPU: str(), GPUIndex: r.IntN(9) - 1, PID: r.Uint32(), StartTime: tm(), Signalable: r.IntN(2) == 0, NotSignalableReason: str(),
				User: str(), Command: str(), UsedBytes: r.Uint64(), MemoryKnown: r.IntN(2) == 0, Flags: strs(), Container: str(), Pod: str(),
				Namespace: str(), ContainerName: str(), Recent: uints(), RecentStep: flt()}
			if r.IntN(2) == 0 {
				p.Leak = &Leak{Verdict: str(), Slope: flt() * float64(1-2*r.IntN(2)), Confidence: flt(), Reason: str()}
			}
			switch r.IntN(3) {
			case 0: // not on vram's allocator
			case 1:
				p.SetAllocator(&Allocator{AllocatedBytes: r.Int64(), AllocatedPeak: r.Int64(), ReservedBytes: r.Int64() >> r.IntN(63),
					ReservedPeak: -r.Int64N(3), ActiveBytes: r.Int64(), InactiveSplitBytes: r.Int64(), RequestedBytes: r.Int64(),
					FreeCachedBytes: r.Int64(), LargestFreeBlock: r.Int64(), Fragmentation: flt(), NumOOMs: r.Int64N(5), NumAllocRetries: r.Int64(),
					CapBytes: r.Int64(), CUDADevice: r.IntN(8), Backend: str(), Config: str(), Version: str(), Updated: tm()})
			default: // figures without the object (a client's own)
				a, res := r.Int64(), -r.Int64N(2)
				p.AllocatedBytes, p.ReservedBytes = &a, &res
			}
			s.Processes = append(s.Processes, p)
		}
	}
	return s
}

// appendStateJSON appends what marshalState returns, fast encoder or
// encoding/json alike, and leaves the buffer as it was on an error.
func TestAppendStateJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	prefix := []byte("event: state\ndata: ")
	failed := 0
	for i := range 500 {
		s := randomState(r)
		want, werr := marshalState(s)
		got, err := appendStateJSON(slices.Clone(prefix), s)
		switch {
		case werr != nil:
			failed++
			if err == nil || !bytes.Equal(got, prefix) {
				t.Fatalf("state %d: %q, %v; want the prefix alone and marshalState's error %v", i, got, err, werr)
			}
		case err != nil || !bytes.Equal(got, append(slices.Clone(prefix), want...)):
			t.Fatalf("state %d: %q, %v; want the prefix and marshalState's bytes", i, got, err)
		}
	}
	if failed == 0 {
		t.Error("no random state failed to encode: the error path was not tested")
	}
}

func TestAppendStateMatchesEncodingJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	fast := 0
	for i := range 3000 {
		s := randomState(r)
		want, werr := json.Marshal(toWire(s))
		got, ok := appendState(nil, s, nil)
		if !ok {
			if werr == nil {
				// Only values encoding/json writes are left to it here;
				// marshalState still gives its bytes.
				if m, err := marshalState(s); err != nil || !bytes.Equal(m, want) {
					t.Fatalf("state %d: marshalState = %s, %v; want encoding/json's bytes", i, m, err)
				}
			}
			continue
		}
		fast++
		if werr != nil {
			t.Fatalf("state %d: encoding/json fails (%v), the fast encoder does not", i, werr)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("state %d differs\n got %s\nwant %s", i, got, want)
		}
		gp, err := marshalProcesses(s.Time, s.Processes)
		wp, werr := json.Marshal(struct {
			Schema    string        `json:"schema"`
			Time      time.Time     `json:"time"`
			Processes []wireProcess `json:"processes"`
		}{Schema, s.Time, wireProcesses(s.Processes)})
		if err != nil || werr != nil || !bytes.Equal(gp, wp) {
			t.Fatalf("state %d: processes document differs (%v, %v)\n got %s\nwant %s", i, err, werr, gp, wp)
		}
	}
	if fast < 2000 {
		t.Errorf("the fast encoder wrote only %d of 3000 states", fast)
	}
}

func TestMarshalStateFallsBack(t *testing.T) {
	base := State{Schema: Schema, Time: time.Unix(1_700_000_000, 0).UTC(), Devices: []Device{{UUID: "GPU-0", RecentStep: 1}}, Processes: []Process{{PID: 7}}}
	tests := []struct {
		name    string
		change  func(*State)
		wantErr bool
	}{
		{"plain", func(*State) {}, false},
		{"NaN slope", func(s *State) { s.Processes[0].Leak = &Leak{Slope: math.NaN()} }, true},
		{"infinite step", func(s *State) { s.Devices[0].RecentStep = math.Inf(1) }, true},
		{"year 10000", func(s *State) { s.Time = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) }, true},
		{"offset of a day", func(s *State) { s.Time = s.Time.In(time.FixedZone("far", 24*3600)) }, true},
		{"offset with seconds", func(s *State) { s.Time = s.Time.In(time.FixedZone("lmt", 3600+17)) }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := base
			s.Devices = append([]Device(nil), base.Devices...)
			s.Processes = append([]Process(nil), base.Processes...)
			tt.change(&s)
			want, werr := json.Marshal(toWire(s))
			got, err := marshalState(s)
			if (err != nil) != tt.wantErr || (werr != nil) != tt.wantErr {
				t.Fatalf("marshalState error %v, encoding/json's %v; want an error: %v", err, werr, tt.wantErr)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("got %s\nwant %s", got, want)
			}
		})
	}
}

func FuzzAppendState(f *testing.F) {
	for _, s := range trickyStrings {
		f.Add(s, 1.5, int64(1_700_000_000), int64(0))
	}
	f.Add("x", 1e-7, int64(-62135596800), int64(3600))
	f.Fuzz(func(t *testing.T, str string, v float64, sec, off int64) {
		tm := time.Unix(sec, 0).In(time.FixedZone("z", int(off%(48*3600))))
		s := State{Schema: Schema, Time: tm, Hostname: str, Warnings: []string{str},
			Devices:   []Device{{UUID: str, Name: str, Error: str, RecentStep: v, Recent: []uint64{uint64(sec)}}},
			Alerts:    []Alert{{Time: tm, Rule: str, Message: str, StartTime: tm}},
			Processes: []Process{{GPU: str, User: str, Command: str, Flags: []string{str}, StartTime: tm, Leak: &Leak{Slope: v, Reason: str}, RecentStep: v}}}
		s.Processes[0].SetAllocator(&Allocator{AllocatedBytes: sec, Fragmentation: v, Config: str, Backend: str, Updated: tm})
		want, werr := json.Marshal(toWire(s))
		got, err := marshalState(s)
		if (err != nil) != (werr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("got %s, %v\nwant %s, %v", got, err, want, werr)
		}
	})
}

// BenchmarkMarshalState is a State of 1,600 processes with 120 recent
// values each, as the daemon publishes at 8 GPUs × 200 processes.
func BenchmarkMarshalState(b *testing.B) {
	s := benchState()
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalState(s); err != nil {
				b.Fatal(err)
			}
		}
	})
	flat := benchState() // memory that does not move, as most processes' does
	for i := range flat.Processes {
		flat.Processes[i].Recent = slices.Repeat([]uint64{300 << 20}, 120)
	}
	b.Run("fast-flat", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := marshalState(flat); err != nil {
				b.Fatal(err)
			}
		}
	})
	// An event stream's states, one a second at 10 samples a second: each
	// process's sparkline moved on by ten values, its memory changed.
	states := []State{benchState()}
	for i := 1; i < 20; i++ {
		n := states[i-1]
		n.Processes = slices.Clone(n.Processes)
		for j := range n.Processes {
			p := &n.Processes[j]
			p.Recent = append(slices.Clone(p.Recent[10:]), make([]uint64, 10)...)
			for k := 110; k < 120; k++ {
				p.Recent[k] = p.Recent[k-1] + 1<<20
			}
			p.UsedBytes = p.Recent[119]
		}
		states = append(states, n)
	}
	b.Run("stream", func(b *testing.B) {
		b.ReportAllocs()
		var c stateCache
		var bufs [2][]byte
		i := 0
		for b.Loop() {
			var err error
			if bufs[i%2], err = appendStateCached(bufs[i%2][:0], states[i%len(states)], &c); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(toWire(s)); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func benchState() State {
	s := State{Schema: Schema, Time: time.Unix(1_700_000_000, 123).UTC(), Hostname: "node-1"}
	recent := func(base uint64) []uint64 {
		out := make([]uint64, 120)
		for i := range out {
			out[i] = base + uint64(i)<<20
		}
		return out
	}
	for i := range 8 {
		s.Devices = append(s.Devices, Device{Index: i, UUID: "GPU-8c1b1f4e-0000-0000-0000-00000000000" + string(rune('0'+i)), Name: "NVIDIA H200",
			Healthy: true, TotalBytes: 150 << 30, UsedBytes: 90 << 30, Recent: recent(90 << 30), RecentStep: 0.1})
	}
	for i := range 1600 {
		s.Processes = append(s.Processes, Process{GPU: s.Devices[i%8].UUID, GPUIndex: i % 8, PID: uint32(100000 + i), StartTime: time.Unix(1_699_000_000, 0).UTC(),
			Signalable: true, User: "user3", Command: "python train.py --rank 3", UsedBytes: 300 << 20, MemoryKnown: true, Flags: []string{},
			Leak: &Leak{Verdict: detect.VerdictNoLeak, Slope: 12.5, Confidence: 0.93, Reason: "the floor is flat"}, Recent: recent(300 << 20), RecentStep: 0.1})
	}
	return s
}
