package monitor

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"strconv"
	"testing"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/internal/units"
)

// refPrint is the watch output written with fmt, encoding/csv and
// encoding/json, as vram watch first did: the reference the printer must
// match byte for byte.
func refPrint(w io.Writer, format string, processes bool, pids []uint32, info gpu.HostInfo, interval time.Duration, ivs []*gpu.Interval) {
	want := map[uint32]bool{}
	for _, p := range pids {
		want[p] = true
	}
	keep := func(p gpu.ProcessStat) bool { return processes && (len(want) == 0 || want[p.Process.PID]) }
	switch format {
	case "table":
		if info.Simulated {
			fmt.Fprintf(w, "# SIMULATED HOST (seed %d): synthetic GPUs and processes\n", info.SimSeed)
		}
		fmt.Fprintf(w, "%-12s %4s %8s %11s %11s %11s %11s %7s", "TIME", "GPU", "PID", "USED", "MIN", "MAX", "MEAN", "SAMPLES")
		if processes {
			fmt.Fprintf(w, " %11s %11s %5s", "ALLOCATED", "RESERVED", "FRAG")
		}
		fmt.Fprintln(w)
		row := func(t time.Time, gpuIdx int, pid string, st gpu.Stat, alloc *statchan.Record) {
			fmt.Fprintf(w, "%-12s %4d %8s %11s %11s %11s %11s %7d", t.Format("15:04:05.000"), gpuIdx, pid,
				units.FormatBytes(st.Last), units.FormatBytes(st.Min), units.FormatBytes(st.Max), units.FormatBytes(st.Mean()), st.N)
			if processes {
				a, r, f := "-", "-", "-"
				if alloc != nil {
					a, r = units.FormatBytes(uint64(alloc.Allocated)), units.FormatBytes(uint64(alloc.Reserved))
					f = fmt.Sprintf("%.0f%%", alloc.Fragmentation()*100)
				}
				fmt.Fprintf(w, " %11s %11s %5s", a, r, f)
			}
			fmt.Fprintln(w)
		}
		for _, iv := range ivs {
			for _, d := range iv.Devices {
				if d.Used.N > 0 {
					row(iv.End, d.Index, "-", d.Used, nil)
				}
			}
			for _, p := range iv.Processes {
				if keep(p) {
					row(iv.End, p.Process.Device, strconv.FormatUint(uint64(p.Process.PID), 10), p.Memory, p.Process.Alloc)
				}
			}
		}
	case "csv":
		cw := csv.NewWriter(w)
		_ = cw.Write([]string{"time", "simulated", "gpu", "pid", "used_bytes", "min_bytes", "max_bytes", "mean_bytes", "samples", "total_bytes", "allocated_bytes", "allocator_reserved_bytes"})
		u := func(v uint64) string { return strconv.FormatUint(v, 10) }
		for _, iv := range ivs {
			sim := strconv.FormatBool(iv.Simulated)
			t := iv.End.Format(timeFormat)
			for _, d := range iv.Devices {
				if d.Used.N > 0 {
					_ = cw.Write([]string{t, sim, strconv.Itoa(d.Index), "", u(d.Used.Last), u(d.Used.Min), u(d.Used.Max), u(d.Used.Mean()), strconv.Itoa(d.Used.N), u(d.Total), "", ""})
				}
			}
			for _, p := range iv.Processes {
				if keep(p) {
					m := p.Memory
					a, r := "", ""
					if al := p.Process.Alloc; al != nil {
						a, r = strconv.FormatInt(al.Allocated, 10), strconv.FormatInt(al.Reserved, 10)
					}
					_ = cw.Write([]string{t, sim, strconv.Itoa(p.Process.Device), u(uint64(p.Process.PID)), u(m.Last), u(m.Min), u(m.Max), u(m.Mean()), strconv.Itoa(m.N), "", a, r})
				}
			}
		}
		cw.Flush()
	case "json":
		enc := json.NewEncoder(w)
		for _, iv := range ivs {
			line := watchJSONOf(iv, interval)
			for _, p := range iv.Processes {
				if keep(p) {
					line.Processes = append(line.Processes, watchProcessJSON(p))
				}
			}
			_ = enc.Encode(line)
		}
	}
}

type watchLine struct {
	Schema          string         `json:"schema"`
	Time            string         `json:"time"`
	Start           string         `json:"start"`
	Simulated       bool           `json:"simulated"`
	IntervalSeconds float64        `json:"interval_seconds"`
	MemorySamples   int            `json:"memory_samples"`
	ProcessSamples  int            `json:"process_samples"`
	Devices         []watchDevice  `json:"devices"`
	Processes       []watchProcess `json:"processes"`
}

type watchDevice struct {
	Index int    `json:"gpu_index"`
	UUID  string `json:"gpu_uuid"`
	statJSON
	TotalBytes uint64 `json:"total_bytes"`
}

type statJSON struct {
	UsedBytes uint64 `json:"used_bytes"`
	MinBytes  uint64 `json:"min_bytes"`
	MaxBytes  uint64 `json:"max_bytes"`
	MeanBytes uint64 `json:"mean_bytes"`
	Samples   int    `json:"samples"`
}

type watchProcess struct {
	PID     uint32 `json:"pid"`
	GPU     int    `json:"gpu_index"`
	GPUUUID string `json:"gpu_uuid"`
	User    string `json:"user,omitempty"`
	Command string `json:"command,omitempty"`
	statJSON
	Flags          []string `json:"flags"`
	AllocatedBytes *int64   `json:"allocated_bytes"`
	ReservedBytes  *int64   `json:"reserved_bytes"`
}

func statOf(s gpu.Stat) statJSON {
	return statJSON{UsedBytes: s.Last, MinBytes: s.Min, MaxBytes: s.Max, MeanBytes: s.Mean(), Samples: s.N}
}

func watchProcessJSON(p gpu.ProcessStat) watchProcess {
	w := watchProcess{PID: p.Process.PID, GPU: p.Process.Device, GPUUUID: p.Process.DeviceUUID, User: p.Process.User, Command: p.Process.Command(), statJSON: statOf(p.Memory), Flags: p.Process.Flags.Names()}
	if r := p.Process.Alloc; r != nil {
		a, res := r.Allocated, r.Reserved
		w.AllocatedBytes, w.ReservedBytes = &a, &res
	}
	return w
}

func watchJSONOf(iv *gpu.Interval, interval time.Duration) watchLine {
	l := watchLine{Schema: WatchSchema, Time: iv.End.Format(time.RFC3339Nano), Start: iv.Start.Format(time.RFC3339Nano), Simulated: iv.Simulated,
		IntervalSeconds: interval.Seconds(), MemorySamples: iv.MemorySamples, ProcessSamples: iv.ProcessSamples, Devices: []watchDevice{}, Processes: []watchProcess{}}
	for _, d := range iv.Devices {
		if d.Used.N > 0 {
			l.Devices = append(l.Devices, watchDevice{Index: d.Index, UUID: d.UUID, statJSON: statOf(d.Used), TotalBytes: d.Total})
		}
	}
	return l
}

// randomIntervals makes intervals with sizes across every unit and its
// edges, PIDs and GPU indices of every width, random strings (control
// characters, HTML, invalid UTF-8, U+2028) and times in a few zones.
func randomIntervals(rng *rand.Rand, n int) []*gpu.Interval {
	sizes := []uint64{0, 1, 1023, 1024, 1<<20 - 1, 1 << 20, 1<<30 - 1, 1 << 30, 1<<40 - 1, 1 << 40, 143771 << 20, math.MaxUint64}
	size := func() uint64 {
		if rng.Intn(3) == 0 {
			return sizes[rng.Intn(len(sizes))]
		}
		return rng.Uint64() >> rng.Intn(64)
	}
	alphabet := []string{"a", "Z", " ", "-", "\"", "\\", "<", ">", "&", "\b", "\f", "\n", "\r", "\t", "\x00", "\x1f", "\x7f", "é", "\u2028", "\u2029", "\xff", "\xe2\x28", "日本", "\U0001F600", "%d"}
	str := func() string {
		var s string
		for range rng.Intn(8) {
			s += alphabet[rng.Intn(len(alphabet))]
		}
		return s
	}
	stat := func() gpu.Stat {
		var s gpu.Stat
		for range rng.Intn(4) {
			s.Add(size())
		}
		return s
	}
	zones := []*time.Location{time.UTC, time.FixedZone("X", 5*3600+1800), time.FixedZone("Y", -7*3600)}
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(rng.Int63n(int64(400 * 24 * time.Hour))))
	var out []*gpu.Interval
	for range n {
		iv := &gpu.Interval{Start: t, MemorySamples: rng.Intn(300), ProcessSamples: rng.Intn(3)}
		t = t.Add(time.Duration(rng.Int63n(int64(2 * time.Second))))
		iv.End = t.In(zones[rng.Intn(len(zones))])
		for i := range rng.Intn(5) {
			iv.Devices = append(iv.Devices, gpu.DeviceStat{Identity: gpu.Identity{Index: i * (1 + rng.Intn(30)), UUID: "GPU-" + str()}, Total: size(), Used: stat()})
		}
		for range rng.Intn(6) {
			p := gpu.Process{PID: uint32(rng.Int63n(1 << 32)), Device: rng.Intn(100000), DeviceUUID: str(), User: str(), Comm: str(), Flags: gpu.Flags(rng.Intn(64))}
			for range rng.Intn(4) {
				p.Cmdline = append(p.Cmdline, str())
			}
			if rng.Intn(2) == 0 {
				a := int64(size() >> 2)
				p.Alloc = &statchan.Record{Figures: statchan.Figures{Allocated: a, Reserved: a + int64(size()>>2)}}
			}
			iv.Processes = append(iv.Processes, gpu.ProcessStat{Process: p, Memory: stat()})
		}
		out = append(out, iv)
	}
	return out
}

func TestWatchPrinterMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	intervals := []time.Duration{10 * time.Millisecond, 15 * time.Millisecond, time.Second, 1234567 * time.Microsecond, time.Hour}
	for trial := range 300 {
		ivs := randomIntervals(rng, 1+rng.Intn(4))
		info := gpu.HostInfo{Simulated: rng.Intn(2) == 0, SimSeed: rng.Int63() - rng.Int63()}
		for _, iv := range ivs {
			iv.Simulated = info.Simulated
		}
		var pids []uint32
		if rng.Intn(3) == 0 && len(ivs[0].Processes) > 0 {
			pids = []uint32{ivs[0].Processes[0].Process.PID, 12345}
		}
		processes := rng.Intn(4) != 0
		interval := intervals[rng.Intn(len(intervals))]
		for _, format := range []string{"table", "csv", "json"} {
			var got, want bytes.Buffer
			p := newWatchPrinter(&got, format, processes, pids, info, interval)
			if err := p.header(); err != nil {
				t.Fatal(err)
			}
			for _, iv := range ivs {
				if err := p.print(iv); err != nil {
					t.Fatal(err)
				}
			}
			refPrint(&want, format, processes, pids, info, interval, ivs)
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Fatalf("trial %d, %s: printer and reference differ\n--- printer\n%q\n--- reference\n%q", trial, format, got.String(), want.String())
			}
		}
	}
}

func TestJSONFloat(t *testing.T) {
	for _, f := range []float64{0, 0.01, 0.015, 1, 1.5, 3600, 1e-7, 1.5e-7, 1e-6, 1e20, 1e21, 1.2345e22, -0.5, -1e-9, math.SmallestNonzeroFloat64, math.MaxFloat64} {
		want, _ := json.Marshal(f)
		if got := appendJSONFloat(nil, f); !bytes.Equal(got, want) {
			t.Errorf("%v: got %s, encoding/json %s", f, got, want)
		}
	}
}

// tickRig runs the watch loop of vram watch by hand on a simulated host
// whose clock moves one sample interval per tick: sample, aggregate and,
// at the end of each interval, print.
type tickRig struct {
	now time.Time
	w   *gpu.Watcher
	p   *watchPrinter
}

func newTickRig(tb testing.TB, gpus int, format string, opts gpu.WatchOptions, processes bool) *tickRig {
	tb.Helper()
	r := &tickRig{now: time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}
	clock := func() time.Time { return r.now }
	sim, err := gpu.NewSim(gpus, 1, clock)
	if err != nil {
		tb.Fatal(err)
	}
	s, err := gpu.NewSampler(sim, gpu.SamplerOptions{Procs: sim, Now: clock})
	if err != nil {
		tb.Fatal(err)
	}
	if r.w, err = s.NewWatcher(opts); err != nil {
		tb.Fatal(err)
	}
	r.p = newWatchPrinter(io.Discard, format, processes, nil, sim.Info(), opts.Interval)
	if err := r.p.header(); err != nil {
		tb.Fatal(err)
	}
	return r
}

func (r *tickRig) tick(tb testing.TB) {
	r.now = r.now.Add(r.w.Options().SampleInterval)
	iv, err := r.w.Tick()
	if err != nil {
		tb.Fatal(err)
	}
	if iv != nil {
		if err := r.p.print(iv); err != nil {
			tb.Fatal(err)
		}
	}
}

var tickCases = []struct {
	name      string
	opts      gpu.WatchOptions
	processes bool
}{
	{"memory-only", gpu.WatchOptions{Interval: 10 * time.Millisecond, MemoryOnly: true}, false},
	{"processes", gpu.WatchOptions{Interval: 10 * time.Millisecond}, true},
}

// BenchmarkWatchTick is one tick of vram watch --interval 10ms on a
// simulated host of 1 GPU (7 processes): a memory sample every tick, a
// full sample every 20th (processes), a printed line every 2nd. The
// simulator's own cost is in it; the driver's is not.
func BenchmarkWatchTick(b *testing.B) {
	for _, tc := range tickCases {
		for _, format := range []string{"table", "csv", "json"} {
			b.Run(tc.name+"/"+format, func(b *testing.B) {
				r := newTickRig(b, 1, format, tc.opts, tc.processes)
				b.ReportAllocs()
				for b.Loop() {
					r.tick(b)
				}
			})
		}
	}
}

// A memory tick and a printed line allocate nothing in steady state, in
// every format; only the full samples (one per process interval) do, for
// the Snapshot they hand out.
func TestWatchTickAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under the race detector")
	}
	for _, format := range []string{"table", "csv", "json"} {
		t.Run(format, func(t *testing.T) {
			opts := gpu.WatchOptions{Interval: 10 * time.Millisecond, ProcessInterval: time.Hour}
			r := newTickRig(t, 2, format, opts, true)
			for range 50 {
				r.tick(t)
			}
			// The first tick took a full sample: the lines carry processes
			// until the interval ends; after it only memory is sampled.
			// AllocsPerRun counts the whole process's allocations, so a
			// stray one elsewhere (the runtime, another goroutine) can land
			// in a run: the least of three runs is the ticks' own count,
			// and an allocation per tick or per line would be in all three.
			least := -1.0
			for range 3 {
				n := testing.AllocsPerRun(1, func() {
					for range 2000 {
						r.tick(t)
					}
				})
				if least < 0 || n < least {
					least = n
				}
			}
			if least != 0 {
				t.Errorf("%v allocations in 2000 ticks (1000 lines) at the least of three runs, want 0", least)
			}
			// Lines with processes: every tick a full sample, every line
			// printing each process. The printing adds nothing to the
			// sample's own allocations.
			full := newTickRig(t, 2, format, gpu.WatchOptions{Interval: 10 * time.Millisecond, SampleInterval: 10 * time.Millisecond, ProcessInterval: 10 * time.Millisecond}, true)
			bare := newTickRig(t, 2, format, gpu.WatchOptions{Interval: 10 * time.Millisecond, SampleInterval: 10 * time.Millisecond, ProcessInterval: 10 * time.Millisecond}, false)
			for range 50 {
				full.tick(t)
				bare.tick(t)
			}
			withLines := testing.AllocsPerRun(200, func() { full.tick(t) })
			sampleOnly := testing.AllocsPerRun(200, func() { bare.tick(t) })
			if withLines != sampleOnly {
				t.Errorf("a line with processes allocates %v, the sample alone %v", withLines, sampleOnly)
			}
		})
	}
}
