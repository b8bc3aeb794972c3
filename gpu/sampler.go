package gpu

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
	"github.com/vramhq/vram/proc"
)

// Flags classify a process; see the package documentation for each rule.
type Flags uint16

// The flags, in the order Names lists them.
const (
	FlagNoSuchProcess Flags = 1 << iota
	FlagZombie
	FlagOrphaned
	FlagJupyter
	FlagIdle
	FlagNoPermission
)

var flagNames = []struct {
	f    Flags
	name string
}{
	{FlagNoSuchProcess, "no-such-process"},
	{FlagZombie, "zombie"},
	{FlagOrphaned, "orphaned"},
	{FlagJupyter, "jupyter"},
	{FlagIdle, "idle"},
	{FlagNoPermission, "no-permission"},
}

// Names returns the flags' names ("zombie", "idle", ...) in a fixed order;
// never nil.
func (f Flags) Names() []string { return f.AppendNames([]string{}) }

// AppendNames appends the flags' names to dst in Names's order, so that a
// caller can reuse one slice.
func (f Flags) AppendNames(dst []string) []string {
	for _, n := range flagNames {
		if f&n.f != 0 {
			dst = append(dst, n.name)
		}
	}
	return dst
}

// String joins Names with commas.
func (f Flags) String() string { return strings.Join(f.Names(), ",") }

// IdleMethod says how a device's processes were judged idle.
type IdleMethod uint8

const (
	// IdleUnknown: neither method could judge yet.
	IdleUnknown IdleMethod = iota
	// IdleByUtilization: the driver's per-process utilization samples
	// (GetProcessUtilization) showed no SM or memory activity over the
	// window, and this sampler has watched for the whole window (the
	// driver buffers only about a second, so a one-shot sample never
	// flags a process idle).
	IdleByUtilization
	// IdleByMemory: per-process utilization is unsupported; the process's
	// memory did not change and the device was at 0 % utilization at every
	// sample over the window. Needs a window of history: a one-shot sample
	// never flags a process idle this way.
	IdleByMemory
)

func (m IdleMethod) String() string {
	switch m {
	case IdleByUtilization:
		return "process-utilization"
	case IdleByMemory:
		return "memory-history"
	}
	return "unknown"
}

// Snapshot is one full sample of the host.
type Snapshot struct {
	Time      time.Time
	Host      HostInfo
	Devices   []DeviceState
	Processes []Process // sorted by memory, largest first
	Warnings  []string  // per-device failures, unmapped visible-device entries
}

// DeviceState is one device in a Snapshot.
type DeviceState struct {
	Identity
	Memory      Memory
	Utilization Utilization
	// ProcessMemory is the sum of the listed processes' memory;
	// Unattributed is Memory.Used minus that, clamped at zero.
	ProcessMemory, Unattributed uint64
	Processes                   int // how many processes the driver listed
	IdleMethod                  IdleMethod
	Err                         error // the query that failed, if any
}

// Process is one process on one device (a process on two devices appears
// twice, once per device).
type Process struct {
	PID         uint32
	Device      int    // NVML index
	DeviceUUID  string // "GPU-..."
	Memory      uint64 // bytes
	MemoryKnown bool
	Kind        ProcessKind

	// From /proc (zero when FlagNoSuchProcess or without a ProcSource),
	// exactly as read: text output passes them through Printable.
	User      string
	UID       uint32
	Cmdline   []string
	Comm      string
	Cgroup    string
	Container Container
	StartTime time.Time
	PPID      int
	State     string

	// Utilization from the driver's per-process samples in the last sample
	// period, when UtilKnown.
	SM, MemUtil uint32
	UtilKnown   bool

	Flags Flags

	// Alloc is the process's allocator as its statistics channel reports
	// it for this device (allocated, reserved, fragmentation, ...), when it
	// runs vram's allocator (libvram); nil otherwise.
	Alloc *statchan.Record
}

// Command is the command line joined with spaces, or [comm] when the
// command line is empty, exactly as /proc has it: it may hold newlines and
// escape sequences. Text output shows DisplayCommand instead.
func (p Process) Command() string {
	if len(p.Cmdline) > 0 {
		return strings.Join(p.Cmdline, " ")
	}
	if p.Comm != "" {
		return "[" + p.Comm + "]"
	}
	return ""
}

// DisplayCommand is Command made safe for a terminal (Printable): what
// tables and screens show. Command itself is exact.
func (p Process) DisplayCommand() string { return proc.Printable(p.Command()) }

// MemorySample is one device's memory at one instant (the fast path).
type MemorySample struct {
	Device int
	Memory Memory
}

// SamplerOptions configure a Sampler. The zero value works: no /proc
// enrichment, defaults below.
type SamplerOptions struct {
	// Procs enriches PIDs; nil leaves processes bare (and classifies
	// only what the driver says).
	Procs ProcSource
	// ProcRefresh is how often a known process's /proc/PID/stat is re-read
	// (state, parent). Default 1 s. The command line, owner and cgroup are
	// read once per (PID, start time).
	ProcRefresh time.Duration
	// IdleWindow is how long a process must show no GPU activity to be
	// flagged idle. Default 30 s.
	IdleWindow time.Duration
	// Devices restricts sampling to these NVML indices; nil samples all.
	Devices []int
	// Channel reads the statistics channel of processes on vram's
	// allocator (Process.Alloc); nil reads none.
	Channel ChannelReader
	// ChannelRefresh is the least time between two reads of Channel;
	// between them a sample reuses the last read's records (and its
	// warning). Zero reads it at every sample. A writer publishes at most
	// every 100 ms, and a read opens every file of the channel (about
	// 2.5 ms of CPU at 1,600 files), so a sampler at 10 Hz reads it at 1 Hz
	// (SetChannelRefresh).
	ChannelRefresh time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time
}

// Sampler samples a Host. It keeps the history classification needs, so
// use one Sampler per monitor loop. It is not safe for concurrent use.
type Sampler struct {
	host  Host
	opts  SamplerOptions
	all   []Identity
	devs  []Device // selected, in order
	ids   []Identity
	cache *procCache
	idle  []*idleState // per selected device
	// Per selected device, this sample's driver queries (reused).
	queried []deviceSample
	// Per selected device, the last sample's entries of each listed
	// process, in the driver's order: when the driver lists the same PID
	// at the same place again (the usual case), the caches' maps are not
	// looked up.
	hints [][]procHint
	order procOrder
	// Where each listed process goes in the snapshot (processes), reused.
	rank    []int32
	rankOff []int
	sampled bool
	chanBuf []statchan.Record
	allocs  AllocIndex
	// When the channel was last read and its warning then ("" when none).
	chanRead time.Time
	chanWarn string
	// spare is the process list of a snapshot handed back (Recycle), which
	// the next Sample fills instead of allocating one.
	spare []Process
}

// SetChannelRefresh sets SamplerOptions.ChannelRefresh.
func (s *Sampler) SetChannelRefresh(d time.Duration) { s.opts.ChannelRefresh = max(d, 0) }

// NewSampler lists the host's devices and reads their identities.
func NewSampler(h Host, opts SamplerOptions) (*Sampler, error) {
	if opts.ProcRefresh <= 0 {
		opts.ProcRefresh = time.Second
	}
	if opts.IdleWindow <= 0 {
		opts.IdleWindow = 30 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	devs, err := h.Devices()
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	s := &Sampler{host: h, opts: opts}
	for _, d := range devs {
		id, err := d.Identity()
		if err != nil {
			return nil, fmt.Errorf("identify device: %w", err)
		}
		s.all = append(s.all, id)
	}
	want := func(i int) bool { return true }
	if opts.Devices != nil {
		set := map[int]bool{}
		for _, i := range opts.Devices {
			if i < 0 || i >= len(devs) {
				return nil, fmt.Errorf("no GPU %d: this host has %d (0-%d)", i, len(devs), len(devs)-1)
			}
			set[i] = true
		}
		want = func(i int) bool { return set[i] }
	}
	for i, d := range devs {
		if want(i) {
			s.devs = append(s.devs, d)
			s.ids = append(s.ids, s.all[i])
			s.idle = append(s.idle, newIdleState())
		}
	}
	if opts.Procs != nil {
		s.cache = newProcCache(opts.Procs, opts.ProcRefresh)
	}
	return s, nil
}

// AllDevices returns the identities of every device on the host.
func (s *Sampler) AllDevices() []Identity { return s.all }

// Devices returns the identities of the sampled devices.
func (s *Sampler) Devices() []Identity { return s.ids }

// Host describes the host.
func (s *Sampler) Host() HostInfo { return s.host.Info() }

// SampleMemory is the fast path: one memory query per sampled device,
// appended to dst[:0]. A device whose query fails is left out and its
// error joined into err.
func (s *Sampler) SampleMemory(dst []MemorySample) ([]MemorySample, error) {
	dst = dst[:0]
	var errs []error
	for i, d := range s.devs {
		m, err := d.Memory()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		dst = append(dst, MemorySample{Device: s.ids[i].Index, Memory: m})
	}
	return dst, errors.Join(errs...)
}

// Sample takes a full snapshot: memory, utilization and processes of every
// sampled device, each process enriched from /proc and classified. A device
// whose queries fail appears with Err set and a warning; Sample fails only
// when no device could be read.
func (s *Sampler) Sample() (*Snapshot, error) {
	now := s.opts.Now()
	snap := &Snapshot{Time: now, Host: s.host.Info()}
	s.readChannel(snap)
	if s.queried == nil {
		s.queried = make([]deviceSample, len(s.devs))
		s.hints = make([][]procHint, len(s.devs))
	}
	failed := 0
	for i, d := range s.devs {
		ds, err := s.queryDevice(i, d, now, &s.queried[i])
		if err != nil {
			failed++
			ds.Err = err
			s.queried[i] = deviceSample{failed: true}
			snap.Warnings = append(snap.Warnings, fmt.Sprintf("GPU %d: %v", ds.Index, err))
		}
		snap.Devices = append(snap.Devices, ds)
	}
	if failed > 0 && failed == len(s.devs) {
		return nil, fmt.Errorf("sample: every GPU failed: %w", snap.Devices[0].Err)
	}
	if s.cache != nil && s.cache.pruneDue(now) {
		live := map[int]bool{}
		for _, q := range s.queried {
			for _, p := range q.list {
				live[int(p.PID)] = true
			}
		}
		s.cache.prune(now, live)
	}
	snap.Processes = s.processes(snap.Devices, now)
	s.sampled = true
	return snap, nil
}

// Recycle hands back a snapshot this Sampler returned that nothing reads
// any more, so that a later Sample fills its process list instead of
// allocating one: at 1,600 processes the list is about half a megabyte,
// most of what a daemon sampling at 10 Hz allocates, and the collector's
// work. The snapshot's Processes is set to nil; nothing may hold on to
// the list (or a pointer into it) after the call. Like Sample, Recycle is
// not safe for concurrent use.
func (s *Sampler) Recycle(snap *Snapshot) {
	if snap == nil || cap(snap.Processes) <= cap(s.spare) {
		return
	}
	s.spare, snap.Processes = snap.Processes[:0], nil
}

// deviceSample is what the driver said of one device in a sample, before
// its processes are made.
type deviceSample struct {
	failed  bool
	list    []DriverProcess
	util    map[uint32]ProcessUtilization
	utilGen uint64 // tells util's maps apart (idleState.utilGen); 0 without one
	method  IdleMethod
}

// queryDevice asks the driver about device i (memory, utilization,
// processes; per-process utilization for the idle rule) into q.
func (s *Sampler) queryDevice(i int, d Device, now time.Time, q *deviceSample) (DeviceState, error) {
	ds := DeviceState{Identity: s.ids[i]}
	var err error
	if ds.Memory, err = d.Memory(); err != nil {
		return ds, err
	}
	if ds.Utilization, err = d.Utilization(); err != nil && !errors.Is(err, ErrNotSupported) {
		return ds, err
	}
	list, err := d.Processes()
	if err != nil {
		return ds, err
	}
	ds.Processes = len(list)
	idle := s.idle[i]
	idle.observeDevice(now, ds.Utilization)
	util, method := idle.processUtilization(d, now)
	ds.IdleMethod = method
	for _, dp := range list {
		ds.ProcessMemory += dp.Memory
	}
	if ds.Memory.Used > ds.ProcessMemory {
		ds.Unattributed = ds.Memory.Used - ds.ProcessMemory
	}
	*q = deviceSample{list: list, util: util, method: method}
	if util != nil {
		q.utilGen = idle.utilGen
	}
	return ds, nil
}

// processes makes the sample's processes in the snapshot's order. The
// order depends only on what the driver listed (memory, PID, device), so
// it is settled first and each process is made once, in its place in the
// snapshot: a Process is a large struct, and there are as many as the
// host has processes at every sample. They are made in the driver's
// order, list by list, so that the lists and the last sample's hints are
// read in the order they lie in memory.
func (s *Sampler) processes(devs []DeviceState, now time.Time) []Process {
	keys := s.order.sorted(s.queried, devs)
	// This sample's hints replace the last one's in place where a list
	// kept its length: each place is read before it is written.
	next := make([][]procHint, len(s.queried))
	for i, q := range s.queried {
		switch {
		case q.failed:
			next[i] = s.hints[i] // kept for when the device answers again
		case len(s.hints[i]) == len(q.list):
			next[i] = s.hints[i]
		default:
			next[i] = make([]procHint, len(q.list))
		}
	}
	var out []Process // nil when there are none
	switch {
	case len(keys) == 0:
	case cap(s.spare) >= len(keys):
		// Every place is written whole below (rank is a permutation).
		out, s.spare = s.spare[:len(keys)], nil
	default:
		out = make([]Process, len(keys))
	}
	// Where each listed process goes in the snapshot: rank[off[i]+at] for
	// the process at place at of list i.
	off := s.rankOff[:0]
	n := 0
	for _, q := range s.queried {
		off = append(off, n)
		n += len(q.list)
	}
	s.rankOff = off
	rank := slices.Grow(s.rank[:0], n)[:n]
	s.rank = rank
	for n, k := range keys {
		rank[off[k.list]+int(k.at)] = int32(n)
	}
	for li := range s.queried {
		q, ds := &s.queried[li], &devs[li]
		prev, nxt, idle := s.hints[li], next[li], s.idle[li]
		for at := range q.list {
			dp := &q.list[at]
			var h procHint
			if at < len(prev) && prev[at].pid == dp.PID {
				h = prev[at]
			}
			h.pid = dp.PID
			p := &out[rank[off[li]+at]]
			*p = Process{PID: dp.PID, Device: ds.Index, DeviceUUID: ds.UUID, Memory: dp.Memory, MemoryKnown: dp.MemoryKnown, Kind: dp.Kind}
			if q.util != nil && h.utilGen != q.utilGen {
				// The driver's utilization samples are read once a
				// second: the hint keeps the PID's until the next read.
				u, ok := q.util[dp.PID]
				h.utilGen, h.util, h.utilOK = q.utilGen, u, ok
			}
			if q.util != nil && h.utilOK {
				p.SM, p.MemUtil, p.UtilKnown = h.util.SM, h.util.Memory, true
			} else if q.method == IdleByUtilization {
				p.UtilKnown = true // no sample in the period: no activity
			}
			h.proc = s.enrich(p, now, h.proc)
			if r := s.allocs.Lookup(p.PID, ds.Index, ds.UUID); r != nil {
				rec := *r
				p.Alloc = &rec
			}
			var isIdle bool
			if isIdle, h.idle = idle.isIdle(p, h.idle, now, s.opts.IdleWindow, q.method); isIdle {
				p.Flags |= FlagIdle
			}
			nxt[at] = h
		}
	}
	for i, q := range s.queried {
		if !q.failed {
			s.idle[i].forget()
		}
	}
	s.hints = next
	return out
}

// procOrder orders the snapshot's processes: the devices' lists joined
// into one, by memory, largest first, then PID and device (a total order,
// so every sort gives the same answer). A Process is a large struct, so
// the sort moves small keys (the order's fields and where the process is)
// and each process is copied once, into place: sorting the structs
// themselves cost several times the rest of a sample at 1,600 processes.
//
// The keys are kept from one sample to the next. When the driver lists as
// many processes per device as last time (the usual case), the keys start
// in the last sample's order with this sample's figures: memory moves a
// little between samples, so the order is nearly right and an insertion
// sort finishes it in about one pass, where a full sort of 1,600 keys
// costs ten. A sample where many processes changed places falls back to
// the full sort.
type procOrder struct {
	keys []procKey
	lens []int // the lists' lengths the keys were made for
}

// sorted returns the keys of the devices' listed processes (qs, devs:
// the devices' driver answers and states, in the same order) in the
// snapshot's order; the slice is the procOrder's, valid until the next
// call.
func (o *procOrder) sorted(qs []deviceSample, devs []DeviceState) []procKey {
	n := 0
	same := len(o.lens) == len(qs)
	for i, q := range qs {
		n += len(q.list)
		same = same && o.lens[i] == len(q.list)
	}
	o.lens = o.lens[:0]
	for _, q := range qs {
		o.lens = append(o.lens, len(q.list))
	}
	if same && len(o.keys) == n {
		for i := range o.keys {
			k := &o.keys[i]
			p := &qs[k.list].list[k.at]
			k.mem, k.pid, k.dev = p.Memory, p.PID, int32(devs[k.list].Index)
		}
		if !insertKeys(o.keys, 8*n) {
			sortKeys(o.keys)
		}
		return o.keys
	}
	o.keys = o.keys[:0]
	for li, q := range qs {
		for i := range q.list {
			o.keys = append(o.keys, procKey{q.list[i].Memory, q.list[i].PID, int32(devs[li].Index), int32(li), int32(i)})
		}
	}
	sortKeys(o.keys)
	return o.keys
}

// insertKeys insertion-sorts k by procKey.before, giving up (false, k
// then holds its keys in some order) after budget moves.
func insertKeys(k []procKey, budget int) bool {
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j].before(&k[j-1]); j-- {
			k[j], k[j-1] = k[j-1], k[j]
			if budget--; budget < 0 {
				return false
			}
		}
	}
	return true
}

// procHint is what the last sample found for the process the driver
// listed at one place of a device's list.
type procHint struct {
	pid  uint32
	proc *procEntry
	idle *pidIdle
	// The PID's utilization sample in the device's map of generation
	// utilGen (deviceSample.utilGen), utilOK when the map has one.
	utilGen uint64
	util    ProcessUtilization
	utilOK  bool
}

// procKey is where a process is in its device's list and the fields of
// the snapshot's order.
type procKey struct {
	mem      uint64
	pid      uint32
	dev      int32
	list, at int32
}

// before is the snapshot's order: memory, largest first, then PID, then
// device.
func (a *procKey) before(b *procKey) bool {
	if a.mem != b.mem { // most memory figures differ: the first test decides
		return a.mem > b.mem
	}
	if a.pid != b.pid {
		return a.pid < b.pid
	}
	return a.dev < b.dev
}

// sortKeys sorts k by procKey.before: an introsort written for the one key
// type, whose comparisons inline (slices.SortFunc calls its comparison
// through a function value, which was most of the sort's cost).
func sortKeys(k []procKey) {
	depth := 0
	for n := len(k); n > 0; n >>= 1 {
		depth += 2
	}
	quickKeys(k, depth)
}

func quickKeys(k []procKey, depth int) {
	for len(k) > 12 {
		if depth == 0 {
			heapKeys(k)
			return
		}
		depth--
		// Median of three into k[0], then a Hoare partition around it.
		m, l := len(k)/2, len(k)-1
		if k[m].before(&k[0]) {
			k[m], k[0] = k[0], k[m]
		}
		if k[l].before(&k[0]) {
			k[l], k[0] = k[0], k[l]
		}
		if k[l].before(&k[m]) {
			k[l], k[m] = k[m], k[l]
		}
		k[0], k[m] = k[m], k[0]
		p := k[0]
		i, j := 1, l
		for {
			for i <= j && k[i].before(&p) {
				i++
			}
			for i <= j && p.before(&k[j]) {
				j--
			}
			if i >= j {
				break
			}
			k[i], k[j] = k[j], k[i]
			i++
			j--
		}
		k[0], k[j] = k[j], k[0]
		// Recurse into the smaller side, loop on the larger.
		if j < len(k)-1-j {
			quickKeys(k[:j], depth)
			k = k[j+1:]
		} else {
			quickKeys(k[j+1:], depth)
			k = k[:j]
		}
	}
	for i := 1; i < len(k); i++ {
		for j := i; j > 0 && k[j].before(&k[j-1]); j-- {
			k[j], k[j-1] = k[j-1], k[j]
		}
	}
}

func heapKeys(k []procKey) {
	down := func(root, n int) {
		for {
			c := 2*root + 1
			if c >= n {
				return
			}
			if c+1 < n && k[c].before(&k[c+1]) {
				c++
			}
			if !k[root].before(&k[c]) {
				return
			}
			k[root], k[c] = k[c], k[root]
			root = c
		}
	}
	for i := len(k)/2 - 1; i >= 0; i-- {
		down(i, len(k))
	}
	for i := len(k) - 1; i > 0; i-- {
		k[0], k[i] = k[i], k[0]
		down(0, i)
	}
}

// readChannel reads the statistics channel for this sample. A channel
// that cannot be read is a warning: the processes then lack Alloc.
func (s *Sampler) readChannel(snap *Snapshot) {
	if s.opts.Channel == nil {
		s.allocs = AllocIndex{}
		return
	}
	if !s.chanRead.IsZero() && snap.Time.Sub(s.chanRead) < s.opts.ChannelRefresh && !snap.Time.Before(s.chanRead) {
		if s.chanWarn != "" { // the last read's records and warning stand
			snap.Warnings = append(snap.Warnings, s.chanWarn)
		}
		return
	}
	var err error
	s.chanBuf, err = s.opts.Channel.Read(s.chanBuf)
	s.chanRead, s.chanWarn = snap.Time, ""
	if err != nil {
		s.chanWarn = err.Error()
		snap.Warnings = append(snap.Warnings, s.chanWarn)
	}
	s.allocs = NewAllocIndex(s.chanBuf, snap.Host.Simulated)
}

// enrich fills the /proc fields and the flags that come from /proc.
// hint is the PID's cache entry as the last sample had it (nil when
// none); the entry used is returned, for the next sample.
func (s *Sampler) enrich(p *Process, now time.Time, hint *procEntry) *procEntry {
	if s.cache == nil {
		return nil
	}
	e := s.cache.get(int(p.PID), now, hint)
	switch {
	case e.err == nil:
	case e.noProc:
		p.Flags |= FlagNoSuchProcess
		return e
	default:
		p.Flags |= FlagNoPermission
		return e
	}
	st := &e.stat
	p.Comm, p.StartTime, p.PPID, p.State = st.Comm, st.StartTime, st.PPID, st.State
	if err := s.cache.details(e); err != nil {
		if e.detNoProc {
			p.Flags |= FlagNoSuchProcess
		} else {
			p.Flags |= FlagNoPermission
		}
	} else {
		det := &e.det
		p.User, p.UID, p.Cmdline, p.Cgroup, p.Container = det.User, det.UID, det.Cmdline, det.Cgroup, det.Container
		if len(det.Cmdline) == 0 {
			p.Flags |= FlagZombie // address space already released: exiting
		}
		if e.jupyter {
			p.Flags |= FlagJupyter
		}
	}
	if st.State == "Z" || st.State == "X" {
		p.Flags |= FlagZombie
	}
	if s.orphaned(e, now) {
		p.Flags |= FlagOrphaned
	}
	return e
}

func isJupyter(cmd []string) bool {
	for _, a := range cmd {
		if strings.Contains(a, "ipykernel_launcher") || strings.Contains(a, "ipykernel") {
			return true
		}
	}
	return false
}

// orphaned applies the rule in the package documentation.
func (s *Sampler) orphaned(e *procEntry, now time.Time) bool {
	st := &e.stat
	if st.PPID == 0 { // the namespace's init, or a kernel thread
		return false
	}
	parent := s.cache.related(st.PPID, now, &e.parent, &e.parentPID)
	if parent.err != nil {
		return parent.noProc // parent gone
	}
	if e.firstPPID != st.PPID {
		return true // reparented while we watched
	}
	if st.PPID != 1 && parent.stat.Comm != "systemd" {
		return false
	}
	if st.Session == st.PID || st.Session == 0 {
		return false // a session leader: started as a service
	}
	if s.cache.related(st.Session, now, &e.leader, &e.leaderPID).noProc {
		return true // the shell or launcher that started it is gone
	}
	return false
}

// AccountingDevice is one device's accounting state and records.
type AccountingDevice struct {
	Identity
	// Enabled says whether accounting mode is on. When it is off, Records
	// is empty and EnableHint says how to turn it on.
	Enabled bool
	Records []AccountingRecord // by maximum memory, largest first
	Err     error              // the query failed (e.g. not supported)
}

// EnableHint tells how to turn accounting on; vram never does it itself.
const EnableHint = "accounting mode is off; a root user can enable it with `sudo nvidia-smi -am 1` (all GPUs) or `sudo nvidia-smi -i N -am 1`; it resets when the driver unloads unless persistence mode is on"

// Accounting reads the driver's per-process accounting of every sampled
// device: each process's exact maximum memory, including processes that
// have exited (the driver keeps them in a circular buffer). A device
// where the query fails carries Err; Accounting itself does not fail.
func (s *Sampler) Accounting() []AccountingDevice {
	out := make([]AccountingDevice, 0, len(s.devs))
	for i, d := range s.devs {
		ad := AccountingDevice{Identity: s.ids[i]}
		on, err := d.AccountingEnabled()
		switch {
		case err != nil:
			ad.Err = err
		case on:
			ad.Enabled = true
			ad.Records, ad.Err = d.Accounting()
			sort.SliceStable(ad.Records, func(a, b int) bool {
				if ad.Records[a].MaxMemory != ad.Records[b].MaxMemory {
					return ad.Records[a].MaxMemory > ad.Records[b].MaxMemory
				}
				return ad.Records[a].PID < ad.Records[b].PID
			})
		}
		out = append(out, ad)
	}
	return out
}
