package dashboard_test

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/serve/api"
)

// The fake node: two H200s, seven processes on them (a leaking one, an
// orphan, an idle notebook, one that /proc does not show, a zombie) and one
// firing alert.
const (
	gib = 1 << 30
	mib = 1 << 20

	h200Total    = 143771 * mib
	h200Reserved = 520 * mib

	gpu0 = "GPU-5f0c2e7a-9d41-4b8e-a3c6-1e2f3a4b5c6d"
	gpu1 = "GPU-a81d6b3f-2c57-4e90-b1d8-7f6e5d4c3b2a"

	pidTrain   = 4242
	pidServe   = 5120
	pidNote    = 6001
	pidLeak    = 7331
	pidOrphan  = 8123
	pidGone    = 9001 // not visible in /proc: no start time
	pidZombie  = 9100 // exited, not reaped
	pidNewJob  = 9999
	leakSlope  = 0.75 * mib // bytes per second: 45.0 MiB/min
	shownSlope = "+45.0 MiB/min"
)

// fakeBackend implements api.Backend over a State the test sets, and records
// what the page asked for.
type fakeBackend struct {
	mu      sync.Mutex
	start   time.Time // process start times are relative to it
	state   api.State
	subs    map[chan api.Event]struct{}
	devQ    []histQuery
	procQ   []histQuery
	signals []api.SignalRequest
	actions []api.Action
}

type histQuery struct {
	GPU string
	PID uint32
	Q   api.HistoryQuery
}

func newFakeBackend(now time.Time) *fakeBackend {
	b := &fakeBackend{start: now.Add(-3 * time.Hour), subs: make(map[chan api.Event]struct{})}
	b.state = b.build(now, false)
	b.actions = []api.Action{
		{Time: now.Add(-95 * time.Minute), Rule: "reclaim-orphans-on-the-shared-training-nodes", PID: 3100,
			Action: "SIGTERM", Reason: "orphaned (its parent exited), holding 4.00 GiB on GPU 1 for 31 min, above min_bytes 256 MiB; no process of this user has touched the GPU since",
			Result: "refused: /proc has no such process (another PID namespace, or it exited), so its identity cannot be checked"},
		{Time: now.Add(-40 * time.Minute), Rule: "quota-interns", PID: 3377, StartTime: b.start,
			Action: "SIGTERM", Reason: "user intern1 above quota 16 GiB for 10 min", Result: "exited after 2.1 s"},
	}
	return b
}

// build returns the fake node's state at now; after is the state the test
// pushes later: the training job has grown, a new job started on GPU 1 and
// GPU 1 has fallen off the bus.
func (b *fakeBackend) build(now time.Time, after bool) api.State {
	proc := func(gpu string, idx int, pid uint32, user, cmd string, used uint64, flags ...string) api.Process {
		if flags == nil {
			flags = []string{}
		}
		return api.Process{
			GPU: gpu, GPUIndex: idx, PID: pid, StartTime: b.start.Add(time.Duration(pid) * time.Second),
			User: user, Command: cmd, UsedBytes: used, MemoryKnown: true, Flags: flags,
			Recent: flat(used, 60), RecentStep: 1,
		}
	}
	train := proc(gpu0, 0, pidTrain, "alice",
		"python train.py --model llama-3-8b --batch-size 16 --grad-accum 4 --data /datasets/pile --out /ckpt/llama-ft",
		71*gib+gib/4)
	train.Pod, train.Namespace, train.ContainerName, train.Container = "llama-ft-0", "ml-train", "trainer", "3f9a1c2b7d8e"
	serveP := proc(gpu0, 0, pidServe, "bob",
		"python -m vllm.entrypoints.openai.api_server --model mistral-7b --gpu-memory-utilization 0.35", 48*gib+gib/2)
	serveP.Pod, serveP.Namespace = "vllm-7b-6f9c8d", "serving"
	note := proc(gpu0, 0, pidNote, "carol",
		"/opt/conda/bin/python -m ipykernel_launcher -f /run/user/1000/jupyter/kernel-3.json", 5*gib+3*gib/4,
		"jupyter", "idle")
	leak := proc(gpu1, 1, pidLeak, "dave", "python eval_loop.py --ckpt /ckpt/step-12000 --split val", 22*gib+2*gib/5)
	leak.Recent = ramp(leak.UsedBytes, 60, leakSlope)
	leak.Leak = &api.Leak{Verdict: "leak", Slope: leakSlope, Confidence: 0.97,
		Reason: "grew 2.6 GiB in 58 min, steady (R² 0.98)"}
	// It runs vram's allocator: of what it holds, the context (500 MiB)
	// is outside, the rest reserved, three quarters of that allocated.
	leakRes := int64(leak.UsedBytes) - 500*mib
	leak.SetAllocator(&api.Allocator{AllocatedBytes: leakRes * 3 / 4, ReservedBytes: leakRes, FreeCachedBytes: leakRes / 4,
		LargestFreeBlock: leakRes / 8, Fragmentation: 0.125, Backend: "cuda", Updated: now})
	orphan := proc(gpu1, 1, pidOrphan, "erin", "python worker.py --shard 3", 9*gib+gib/2, "orphaned")
	// The sampler spells this flag with hyphens (gpu.Flags names), and
	// knows no start time for such a process.
	gone := proc(gpu1, 1, pidGone, "frank", "python train_dist.py --rank 1", gib+gib/4, "no-such-process")
	gone.StartTime = time.Time{}
	zombie := proc(gpu1, 1, pidZombie, "grace", "python prep.py", 3*mib, "zombie")
	zombie.Recent = ramp(zombie.UsedBytes, 60, 0) // what it holds no longer changes
	// The detector's two other verdicts: no leak (the slope shown, muted)
	// and unknown (nothing shown).
	train.Leak = &api.Leak{Verdict: detect.VerdictNoLeak, Slope: 0.2 * mib / 60, Confidence: 0.8, Reason: "floor not rising"}
	serveP.Leak = &api.Leak{Verdict: detect.VerdictInsufficient, Reason: "still warming up"}

	gpu0Unattr := uint64(gib + gib/2)
	if after {
		train.UsedBytes = 74 * gib
		train.Recent = ramp(train.UsedBytes, 60, 8*mib)
	}
	procs0 := []api.Process{train, serveP, note}
	procs1 := []api.Process{leak, orphan, gone, zombie}
	if after {
		procs1 = append(procs1, proc(gpu1, 1, pidNewJob, "alice", "python new_job.py", 2*gib))
	}
	sum := func(ps []api.Process) (n uint64) {
		for _, p := range ps {
			n += p.UsedBytes
		}
		return n
	}
	dev := func(idx int, uuid string, used, unattr uint64, util int, recent []uint64) api.Device {
		return api.Device{
			Index: idx, UUID: uuid, Name: "NVIDIA H200", Healthy: true,
			TotalBytes: h200Total, UsedBytes: used, FreeBytes: h200Total - used - h200Reserved,
			ReservedBytes: h200Reserved, ReservedKnown: true, UnattributedBytes: unattr,
			UtilPercent: util, Recent: recent, RecentStep: 5,
		}
	}
	used0 := sum(procs0) + gpu0Unattr
	used1 := sum(procs1)
	d0 := dev(0, gpu0, used0, gpu0Unattr, 87, wave(used0, 120))
	d1 := dev(1, gpu1, used1, 0, 34, ramp(used1, 120, 5*leakSlope))
	if after {
		d1.Healthy = false
		d1.Error = "Xid 79: GPU has fallen off the bus"
		d1.UtilPercent = -1
	}
	procs := append(procs0, procs1...)
	sortBySize(procs)
	return api.State{
		Schema: api.Schema, Time: now, Hostname: "gpu-node-07", Simulated: true, Mutations: true,
		Devices:   []api.Device{d0, d1},
		Processes: procs,
		Alerts: []api.Alert{{
			Time: now.Add(-12 * time.Minute), Rule: "leak", Severity: "critical", State: "firing",
			GPU: gpu1, PID: pidLeak, StartTime: leak.StartTime,
			Message: "PID 7331 (python eval_loop.py) grows 45 MiB/min; GPU 1 full in about 40 h",
		}},
	}
}

func sortBySize(ps []api.Process) {
	for i := 1; i < len(ps); i++ {
		for j := i; j > 0 && ps[j].UsedBytes > ps[j-1].UsedBytes; j-- {
			ps[j], ps[j-1] = ps[j-1], ps[j]
		}
	}
}

func flat(v uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v - uint64(i%3)*mib
	}
	out[n-1] = v
	return out
}

// ramp ends at v, growing by perStep per sample.
func ramp(v uint64, n int, perStep float64) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v - uint64(float64(n-1-i)*perStep)
	}
	return out
}

func wave(v uint64, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = v - uint64((1+math.Sin(float64(i)/7))*float64(gib))
	}
	out[n-1] = v
	return out
}

// push makes s the latest state and sends it to every subscriber.
func (b *fakeBackend) push(s api.State) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.state = s
	b.sendLocked(api.Event{Kind: "state", State: &s})
}

func (b *fakeBackend) sendLocked(ev api.Event) {
	for ch := range b.subs {
		select {
		case ch <- ev:
		default:
		}
	}
}

func (b *fakeBackend) State() (api.State, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state, true
}

func (b *fakeBackend) Subscribe() (<-chan api.Event, func()) {
	ch := make(chan api.Event, 16)
	b.mu.Lock()
	b.subs[ch] = struct{}{}
	b.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			b.mu.Lock()
			delete(b.subs, ch)
			b.mu.Unlock()
			close(ch)
		})
	}
}

func (b *fakeBackend) device(uuid string) (api.Device, bool) {
	for _, d := range b.state.Devices {
		if d.UUID == uuid {
			return d, true
		}
	}
	return api.Device{}, false
}

// buckets returns the bucket starts of q, at most max of them.
func buckets(q api.HistoryQuery, max int) ([]time.Time, time.Duration, error) {
	step := q.Step
	if step <= 0 {
		step = 10 * time.Second
	}
	var ts []time.Time
	for t := q.From.Truncate(step); t.Before(q.To); t = t.Add(step) {
		if t.Before(q.From) {
			continue
		}
		if len(ts) == max {
			return nil, 0, fmt.Errorf("%w: more than %d points", api.ErrInvalid, max)
		}
		ts = append(ts, t)
	}
	return ts, step, nil
}

// DeviceHistory draws a slow daily-ish wave with a faster ripple, and a
// min-max spread that widens with the step, as real buckets do.
func (b *fakeBackend) DeviceHistory(ctx context.Context, uuid string, q api.HistoryQuery) ([]api.DevicePoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.devQ = append(b.devQ, histQuery{GPU: uuid, Q: q})
	d, ok := b.device(uuid)
	if !ok {
		return nil, fmt.Errorf("GPU %s: %w", uuid, api.ErrNotFound)
	}
	ts, step, err := buckets(q, 20000)
	if err != nil {
		return nil, err
	}
	pts := make([]api.DevicePoint, 0, len(ts))
	base := float64(d.UsedBytes)
	for _, t := range ts {
		x := float64(t.Unix())
		// A slow wave, and every half hour or so a burst of a few minutes
		// (an evaluation pass) whose peak the bucket's max keeps while its
		// mean smooths it out.
		burst := 9 * gib * math.Pow(math.Max(0, math.Sin(x/300)), 12)
		spread := math.Min(2*gib, float64(step/time.Second)*8*mib) + 128*mib
		mean := base*0.8 + 0.1*base*math.Sin(x/3600) + 0.35*burst
		used := api.Range{Min: uint64(mean - spread), Max: uint64(mean + spread + burst), Mean: mean}
		free := float64(d.TotalBytes) - mean - float64(d.ReservedBytes)
		pts = append(pts, api.DevicePoint{
			Time: t, Samples: int(max(1, step/(10*time.Second))), Used: used,
			Reserved: api.Range{Min: d.ReservedBytes, Max: d.ReservedBytes, Mean: float64(d.ReservedBytes)},
			Free:     api.Range{Min: uint64(free - spread), Max: uint64(free + spread), Mean: free},
			Total:    d.TotalBytes,
			Util:     &api.Range{Min: 20, Max: 95, Mean: 70},
		})
	}
	return pts, nil
}

func (b *fakeBackend) ProcessHistory(ctx context.Context, uuid string, pid uint32, q api.HistoryQuery) ([]api.ProcessPoint, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.procQ = append(b.procQ, histQuery{GPU: uuid, PID: pid, Q: q})
	var p *api.Process
	for i := range b.state.Processes {
		if c := &b.state.Processes[i]; c.GPU == uuid && c.PID == pid {
			p = c
		}
	}
	if p == nil {
		return nil, fmt.Errorf("PID %d on GPU %s: %w", pid, uuid, api.ErrNotFound)
	}
	ts, step, err := buckets(q, 20000)
	if err != nil {
		return nil, err
	}
	now := b.state.Time
	var pts []api.ProcessPoint
	for _, t := range ts {
		if t.Before(p.StartTime) {
			continue
		}
		v := float64(p.UsedBytes)
		if p.Leak != nil {
			v -= p.Leak.Slope * now.Sub(t).Seconds()
		} else {
			v += 256 * mib * math.Sin(float64(t.Unix())/300)
		}
		v = math.Max(v, gib)
		spread := math.Min(gib, float64(step/time.Second)*mib)
		pt := api.ProcessPoint{
			Time: t, PID: pid, StartTime: p.StartTime, Samples: int(max(1, step/(10*time.Second))),
			Bytes: api.Range{Min: uint64(v - spread), Max: uint64(v + spread), Mean: v},
			Flags: p.Flags,
		}
		if p.Allocator != nil { // as in the State: reserved is the memory less the context
			res := v - 500*mib
			pt.Reserved = &api.Range{Min: uint64(res - spread), Max: uint64(res + spread), Mean: res}
			pt.Allocated = &api.Range{Min: uint64(res*3/4 - spread), Max: uint64(res*3/4 + spread), Mean: res * 3 / 4}
		}
		pts = append(pts, pt)
	}
	return pts, nil
}

func (b *fakeBackend) Alerts(ctx context.Context, from, to time.Time) ([]api.Alert, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state.Alerts, nil
}

func (b *fakeBackend) Actions(ctx context.Context, from, to time.Time) ([]api.Action, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []api.Action
	for _, a := range b.actions {
		if !a.Time.Before(from) && a.Time.Before(to) {
			out = append(out, a)
		}
	}
	return out, nil
}

// Signal signals nothing: it checks the identity against the state and
// records the request in the audit trail, as the daemon would.
func (b *fakeBackend) Signal(ctx context.Context, r api.SignalRequest) (api.SignalResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.signals = append(b.signals, r)
	for _, p := range b.state.Processes {
		if p.PID == r.PID && p.StartTime.Equal(r.StartTime) {
			a := api.Action{Time: time.Now().UTC(), Rule: "manual", PID: r.PID, StartTime: r.StartTime,
				Action: "SIG" + r.Signal, Reason: r.Reason, Result: "sent"}
			b.actions = append(b.actions, a)
			b.sendLocked(api.Event{Kind: "action", Action: &a})
			return api.SignalResult{Action: a}, nil
		}
	}
	return api.SignalResult{}, fmt.Errorf("PID %d started at %s is not running: %w", r.PID, r.StartTime, api.ErrConflict)
}

func (b *fakeBackend) Reload(ctx context.Context) error { return nil }

func (b *fakeBackend) queries() (dev, proc []histQuery, sig []api.SignalRequest) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]histQuery(nil), b.devQ...), append([]histQuery(nil), b.procQ...),
		append([]api.SignalRequest(nil), b.signals...)
}
