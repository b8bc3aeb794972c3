package gpu

import (
	"fmt"
	"math"
	"math/rand"
	"sync"
	"time"

	"github.com/vramhq/vram/proc"
)

// Sim is a simulated GPU host: N devices with synthetic processes whose
// memory moves over time (a training job's sawtooth, a flat inference
// server, a forgotten Jupyter kernel, a slow leak, an orphaned worker, a
// zombie, a process from another PID namespace). Everything derives from the
// seed and the time elapsed since NewSim, so two hosts with the same seed
// and clock report the same figures. Sim is also the ProcSource of its
// processes. HostInfo.Simulated is true: every output says so.
type Sim struct {
	start time.Time
	now   func() time.Time
	seed  int64
	devs  []Device
	procs map[int]*simProc // by PID, including non-GPU parents
	byDev [][]*simProc     // per device, by PID: fixed after NewSim
	loads [][]simLoad      // loads[d][i] is byDev[d][i]'s

	mu        sync.Mutex
	exitedAcc map[int][]AccountingRecord
	faults    map[int]error // FailDevice (sim_fault.go)

	ch *simChannel // AdoptChannel (alloc.go); nil: synthetic processes only
}

// simProc is one synthetic process as /proc shows it.
type simProc struct {
	stat   ProcStat
	det    ProcDetails
	onGPU  bool
	hidden bool // listed by the driver, absent from /proc
}

// simLoad is what the device queries read of a synthetic process at every
// sample: how its memory moves, whether it is busy, its peak. A device
// keeps its processes' loads in one array (Sim.loads), in the order of
// Sim.byDev, so that the queries of a host of many processes walk one
// block of memory instead of every process's record.
type simLoad struct {
	pid    uint32
	shape  simShape
	busy   bool    // shows SM activity
	base   uint64  // bytes
	amp    uint64  // bytes
	period float64 // seconds
	phase  float64
	peak   uint64 // the highest memory reported on its device (Sim.mu)
}

// simShape is how a synthetic process's memory moves.
type simShape uint8

const (
	shapeFlat  simShape = iota // base bytes throughout
	shapeTrain                 // a step pattern: forward grows, backward peaks, step frees
	shapeServe                 // a slow swing around a large base
	shapeLeak                  // a rise that starts over every period
)

const simTotal = 143771 << 20 // the memory of an H200 card

// NewSim builds a simulated host of n GPUs. now is the clock (nil: the
// wall clock); the simulation's time origin is now() at creation.
func NewSim(n int, seed int64, now func() time.Time) (*Sim, error) {
	return NewSimProcs(n, 0, seed, now)
}

// MaxSimProcs bounds NewSimProcs' processes per GPU.
const MaxSimProcs = 1000

// NewSimProcs is NewSim with perGPU processes on every GPU instead of the
// usual one to four (0: the usual), for load tests of the tools that read
// a host: GPU 0 still shows every case first, the others draw their cases
// at random, and every process's memory is scaled down so that a GPU's
// total stays near what a few processes would hold. perGPU = 0 gives
// exactly NewSim's host.
func NewSimProcs(n, perGPU int, seed int64, now func() time.Time) (*Sim, error) {
	if n < 1 || n > 64 {
		return nil, fmt.Errorf("simulated GPUs: %d out of range: must be 1 to 64", n)
	}
	if perGPU < 0 || perGPU > MaxSimProcs {
		return nil, fmt.Errorf("simulated processes per GPU: %d out of range: must be 1 to %d (0: one to four)", perGPU, MaxSimProcs)
	}
	if now == nil {
		now = time.Now
	}
	s := &Sim{start: now(), now: now, seed: seed, procs: map[int]*simProc{}, exitedAcc: map[int][]AccountingRecord{},
		byDev: make([][]*simProc, n), loads: make([][]simLoad, n)}
	rng := rand.New(rand.NewSource(seed))
	boot := s.start.Add(-72 * time.Hour).Truncate(time.Second)
	// Parents: init, a user manager, a shell, a Jupyter server, a container shim.
	s.addParent(1, 0, 1, "systemd", boot)
	s.addParent(900, 1, 900, "systemd", boot.Add(time.Minute))
	s.addParent(2100, 1, 2100, "bash", boot.Add(2*time.Hour))
	s.addParent(3100, 900, 3100, "jupyter-lab", boot.Add(3*time.Hour))
	s.addParent(4100, 1, 4100, "containerd-shim", boot.Add(time.Hour))
	shapes := []string{"train", "serve", "jupyter", "leak", "orphan", "zombie", "foreign"}
	pidNext := 10000 + rng.Intn(20000)
	for d := 0; d < n; d++ {
		s.devs = append(s.devs, &simDevice{sim: s, index: d, uuid: simUUID(rng)})
		k := 1 + rng.Intn(4)
		if d == 0 {
			k = len(shapes) // GPU 0 shows every case
		}
		if perGPU > 0 {
			k = perGPU
		}
		for j := 0; j < k; j++ {
			shape := shapes[j%len(shapes)]
			if d > 0 || j >= len(shapes) {
				shape = shapes[rng.Intn(len(shapes))]
			}
			if perGPU > 0 {
				pidNext += 1 + rng.Intn(20) // keeps 64 × 1000 PIDs under Linux's pid_max
			} else {
				pidNext += 1 + rng.Intn(500)
			}
			p, l := s.addGPUProc(rng, pidNext, shape, boot)
			if perGPU > 3 { // about what three processes would hold
				l.base = l.base * 3 / uint64(perGPU)
				l.amp = l.amp * 3 / uint64(perGPU)
			}
			// PIDs only grow: the lists are in PID order.
			s.byDev[d] = append(s.byDev[d], p)
			s.loads[d] = append(s.loads[d], l)
		}
	}
	return s, nil
}

func simUUID(rng *rand.Rand) string {
	b := make([]byte, 16)
	rng.Read(b)
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func (s *Sim) addParent(pid, ppid, sid int, comm string, started time.Time) {
	s.procs[pid] = &simProc{
		stat: ProcStat{PID: pid, PPID: ppid, Session: sid, State: "S", Comm: comm, StartTicks: uint64(started.Unix()), StartTime: started},
		det:  ProcDetails{UID: 0, User: "root", Cmdline: []string{comm}, Cgroup: "/init.scope"},
	}
}

func (s *Sim) addGPUProc(rng *rand.Rand, pid int, shape string, boot time.Time) (*simProc, simLoad) {
	started := s.start.Add(-time.Duration(10+rng.Intn(7200)) * time.Second).Truncate(time.Second)
	gib := func(lo, hi float64) uint64 { return uint64((lo + rng.Float64()*(hi-lo)) * (1 << 30)) }
	p := &simProc{onGPU: true}
	l := simLoad{pid: uint32(pid), period: 20 + 40*rng.Float64(), phase: rng.Float64() * 100}
	p.stat = ProcStat{PID: pid, PPID: 2100, Session: 2100, State: "S", StartTime: started, StartTicks: uint64(started.Sub(boot) / (time.Second / proc.UserHZ))}
	p.det = ProcDetails{UID: 1000, User: "alice", Cgroup: "/user.slice/user-1000.slice/session-3.scope"}
	switch shape {
	case "train":
		l.shape, l.base, l.amp, l.busy = shapeTrain, gib(18, 30), gib(4, 10), true
		p.stat.Comm = "python"
		p.det.Cmdline = []string{"python", "train.py", "--model", "resnet152", "--batch-size", fmt.Sprint(32 << rng.Intn(3))}
		id := fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
		p.det.Cgroup = "/system.slice/docker-" + id + ".scope"
		p.stat.PPID, p.stat.Session = 4100, pid
	case "serve":
		l.shape, l.base, l.busy = shapeServe, gib(20, 35), true
		l.amp = l.base / 50
		p.stat.Comm = "python3"
		p.det.UID, p.det.User = 1001, "svc-infer"
		p.det.Cmdline = []string{"python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "meta-llama/Llama-3.1-8B"}
		id := fmt.Sprintf("%016x%016x%016x%016x", rng.Uint64(), rng.Uint64(), rng.Uint64(), rng.Uint64())
		p.det.Cgroup = fmt.Sprintf("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod%08x_%04x_%04x_%04x_%012x.slice/cri-containerd-%s.scope",
			rng.Uint32(), rng.Intn(1<<16), rng.Intn(1<<16), rng.Intn(1<<16), rng.Int63n(1<<48), id)
		p.stat.PPID, p.stat.Session = 4100, pid
	case "jupyter":
		l.base = gib(2, 12)
		p.stat.Comm = "python"
		p.det.Cmdline = []string{"/opt/conda/bin/python", "-m", "ipykernel_launcher", "-f", "/home/alice/.local/share/jupyter/runtime/kernel-7f3a.json"}
		p.stat.PPID, p.stat.Session = 3100, 3100
		p.det.Cgroup = "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service"
		p.stat.StartTime = s.start.Add(-3 * time.Hour).Truncate(time.Second)
	case "leak":
		l.shape, l.base, l.amp, l.busy = shapeLeak, gib(1, 3), gib(8, 16), true
		l.period = 600
		p.stat.Comm = "python"
		p.det.UID, p.det.User = 1002, "bob"
		p.det.Cmdline = []string{"python", "serve_features.py", "--port", "8080"}
	case "orphan":
		l.base = gib(4, 8)
		p.stat.Comm = "python"
		p.det.Cmdline = []string{"/usr/bin/python3", "-u", "worker.py", "--rank", "3"}
		p.stat.PPID, p.stat.Session = 1, 5555 // its launcher's session is gone
	case "zombie":
		l.base = gib(0.5, 2)
		p.stat.Comm, p.stat.State = "python", "Z"
		p.det.Cmdline = nil
	case "foreign":
		l.base = gib(1, 6)
		p.hidden = true
	}
	s.procs[pid] = p
	return p, l
}

// memory is the process's memory at elapsed seconds t.
func (l *simLoad) memory(t float64) uint64 {
	x := t + l.phase
	switch l.shape {
	case shapeTrain:
		f := math.Mod(x, l.period) / l.period
		v := float64(l.amp) * f
		if f > 0.9 {
			v = float64(l.amp) * 1.0
		}
		return roundMiB(l.base + uint64(v))
	case shapeServe:
		return roundMiB(l.base + uint64(float64(l.amp)*(0.5+0.5*math.Sin(x/7))))
	case shapeLeak:
		return roundMiB(l.base + uint64(float64(l.amp)*math.Mod(x, l.period)/l.period))
	}
	return l.base
}

func roundMiB(v uint64) uint64 { return v &^ (1<<20 - 1) }

func (s *Sim) elapsed() float64 { return s.now().Sub(s.start).Seconds() }

// Info says the host is simulated.
func (s *Sim) Info() HostInfo {
	return HostInfo{Driver: "simulated", NVML: "simulated", CUDA: "13.0", Simulated: true, SimSeed: s.seed, Backend: "simulated"}
}

// Devices lists the simulated devices.
func (s *Sim) Devices() ([]Device, error) { return s.devs, nil }

// Close does nothing.
func (s *Sim) Close() error { return nil }

// Stat implements ProcSource for the simulated processes.
func (s *Sim) Stat(pid int) (ProcStat, error) {
	if ps := s.adopted(pid); ps != nil {
		return ps.Stat(pid)
	}
	p, ok := s.procs[pid]
	if !ok || p.hidden {
		return ProcStat{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	return p.stat, nil
}

// Details implements ProcSource for the simulated processes.
func (s *Sim) Details(pid int) (ProcDetails, error) {
	if ps := s.adopted(pid); ps != nil {
		return ps.Details(pid)
	}
	p, ok := s.procs[pid]
	if !ok || p.hidden {
		return ProcDetails{}, fmt.Errorf("pid %d: %w", pid, ErrNoProcess)
	}
	d := p.det
	d.Container = ParseContainer(d.Cgroup)
	return d, nil
}

// devLoads returns the loads of the synthetic processes on device dev
// (in Sim.byDev's order) and the PIDs of those that an adopted process
// hides, which the queries skip (nil when it hides none: the usual case).
// Callers only read the loads, but for their peaks under Sim.mu.
func (s *Sim) devLoads(dev int) (ls []simLoad, hidden map[int]bool) {
	return s.loads[dev], s.hiddenPIDs()
}

// hides says whether devLoads' hidden holds pid (without a map lookup in
// the usual case, where it is nil).
func hides(hidden map[int]bool, pid uint32) bool { return hidden != nil && hidden[int(pid)] }

// simDevice is one simulated GPU.
type simDevice struct {
	sim   *Sim
	index int
	uuid  string
}

func (d *simDevice) Identity() (Identity, error) {
	return Identity{Index: d.index, UUID: d.uuid, Name: "Simulated H200"}, nil
}

const simReserved = 512 << 20

func (d *simDevice) Memory() (Memory, error) {
	if err := d.fault("nvmlDeviceGetMemoryInfo_v2"); err != nil {
		return Memory{}, err
	}
	t := d.sim.elapsed()
	var used uint64 = 0
	for _, p := range d.sim.channelProcs(d.index) { // first: it refreshes what devLoads hides
		used += p.Memory
	}
	ls, hidden := d.sim.devLoads(d.index)
	for i := range ls {
		if l := &ls[i]; !hides(hidden, l.pid) {
			used += l.memory(t)
		}
	}
	used += uint64(d.index+1) * 3 << 20 // driver-side bookkeeping not listed per process
	if used > simTotal-simReserved {
		used = simTotal - simReserved
	}
	return Memory{Total: simTotal, Reserved: simReserved, Used: used, Free: simTotal - simReserved - used, ReservedKnown: true}, nil
}

func (d *simDevice) Utilization() (Utilization, error) {
	if err := d.fault("nvmlDeviceGetUtilizationRates"); err != nil {
		return Utilization{}, err
	}
	t := d.sim.elapsed()
	var u uint32
	ls, hidden := d.sim.devLoads(d.index)
	for i := range ls {
		if l := &ls[i]; l.busy && !hides(hidden, l.pid) {
			u += uint32(40 + 30*math.Sin(t/3+l.phase))
		}
	}
	return Utilization{GPU: min(u, 100), Memory: min(u/2, 100), Known: true}, nil
}

func (d *simDevice) Processes() ([]DriverProcess, error) {
	if err := d.fault("nvmlDeviceGetComputeRunningProcesses"); err != nil {
		return nil, err
	}
	t := d.sim.elapsed()
	adopted := d.sim.channelProcs(d.index) // first: it refreshes what devLoads hides
	ls, hidden := d.sim.devLoads(d.index)
	out := make([]DriverProcess, 0, len(ls)+len(adopted))
	d.sim.mu.Lock()
	defer d.sim.mu.Unlock()
	for i := range ls {
		l := &ls[i]
		if hides(hidden, l.pid) {
			continue
		}
		m := l.memory(t)
		l.peak = max(l.peak, m)
		out = append(out, DriverProcess{PID: l.pid, Memory: m, MemoryKnown: true, Kind: KindCompute})
	}
	return append(out, adopted...), nil
}

func (d *simDevice) ProcessUtilization(since time.Time) ([]ProcessUtilization, error) {
	now := d.sim.now()
	t := d.sim.elapsed()
	var out []ProcessUtilization
	ls, hidden := d.sim.devLoads(d.index)
	for i := range ls {
		if l := &ls[i]; l.busy && !hides(hidden, l.pid) && now.After(since) {
			out = append(out, ProcessUtilization{PID: l.pid, Time: now, SM: uint32(30 + 30*math.Sin(t/3+l.phase)), Memory: 10})
		}
	}
	return out, nil
}

func (d *simDevice) AccountingEnabled() (bool, error) { return d.index%2 == 0, nil }

func (d *simDevice) Accounting() ([]AccountingRecord, error) {
	if d.index%2 != 0 {
		return nil, fmt.Errorf("device %d: accounting is disabled: %w", d.index, ErrNotSupported)
	}
	t := d.sim.elapsed()
	d.sim.mu.Lock()
	defer d.sim.mu.Unlock()
	var out []AccountingRecord
	ls, hidden := d.sim.devLoads(d.index)
	for i, p := range d.sim.byDev[d.index] {
		l := &ls[i]
		if hides(hidden, l.pid) {
			continue
		}
		peak := max(l.peak, l.memory(t))
		if l.amp > 0 {
			peak = max(peak, roundMiB(l.base+l.amp))
		}
		out = append(out, AccountingRecord{PID: l.pid, MaxMemory: peak, Running: true, StartTime: p.stat.StartTime, GPUUtil: simUtil(l.busy)})
	}
	// Two jobs that finished before the simulation started.
	out = append(out,
		AccountingRecord{PID: uint32(8000 + d.index), MaxMemory: 61 << 30, GPUUtil: 88, MemUtil: 40, StartTime: d.sim.start.Add(-5 * time.Hour).Truncate(time.Second), Duration: 3*time.Hour + 12*time.Minute},
		AccountingRecord{PID: uint32(8100 + d.index), MaxMemory: 79<<30 + 700<<20, GPUUtil: 95, MemUtil: 52, StartTime: d.sim.start.Add(-90 * time.Minute).Truncate(time.Second), Duration: 4 * time.Minute},
	)
	return out, nil
}

// String describes the simulated host.
func (s *Sim) String() string {
	return fmt.Sprintf("simulated host: %d GPUs, seed %d", len(s.devs), s.seed)
}

func simUtil(busy bool) uint32 {
	if busy {
		return 45
	}
	return 0
}
