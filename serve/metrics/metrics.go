// Package metrics exposes the latest GPU memory sample as Prometheus metrics.
//
// The daemon samples the host on its own clock (gpu.Sampler) and hands each
// snapshot to Collector.Update; a scrape then mirrors the latest snapshot
// with prometheus.MustNewConstMetric, as client_golang recommends for numbers
// that exist outside Prometheus. A scrape never calls the driver, so scrapes
// cost no NVML time and any number of scrapers see the same sample. The
// Collector belongs on a private registry (prometheus.NewRegistry), not the
// global one, so tests and embedders control exactly what is exposed.
//
// # Metrics
//
// Device metrics carry dcgm-exporter's labels, so dashboards can join the
// two: gpu (the NVML index), UUID, modelName and Hostname.
//
//	vram_gpu_memory_total_bytes      device memory
//	vram_gpu_memory_used_bytes       allocated by programs (incl. each context's overhead)
//	vram_gpu_memory_free_bytes       available
//	vram_gpu_memory_reserved_bytes   kept by the driver and firmware (only where NVML's v2 memory info exists)
//	vram_gpu_unattributed_bytes      used minus the sum over the listed processes
//	vram_orphaned_memory_bytes       held by processes flagged orphaned
//	vram_dead_process_memory_bytes   held by processes that are exiting (reason="zombie") or that /proc does not show (reason="not_in_proc": exited, or another PID namespace)
//
// Process metrics add pid, user, command, pod, namespace and container:
//
//	vram_process_memory_used_bytes            per process, bounded (below)
//	vram_process_leak_slope_bytes_per_second  the leak detector's slope, for processes with one
//	vram_process_allocator_allocated_bytes    per process on vram's allocator (libvram), from its
//	vram_process_allocator_reserved_bytes     statistics channel (docs/channel.md): what it
//	vram_process_allocator_fragmentation_ratio allocated, what it holds, the share of that cached
//	vram_process_allocator_ooms_total         outside the largest free block, its OOM errors;
//	                                          the top processes per GPU only, as above
//
// The gpu layer reads only the Kubernetes pod UID and the container ID from
// the process's cgroup; names need the kubelet's pod-resources API, which
// this package does not query: Options.Workload is where the daemon will
// plug that in. Without it pod and namespace are empty and container holds
// the 12-digit container ID. command is the command line cut to MaxCommand
// bytes, made valid UTF-8.
//
// modelName is camelCase, as dcgm-exporter spells it, so that dashboards
// and rules written for dcgm-exporter (and ours in deploy/) work on both;
// promlint flags it and it is the one lint exception (TestLint checks that
// nothing else is flagged).
//
// Daemon metrics:
//
//	vram_policy_actions_total{gpu,Hostname,policy,action,result}  policy actions taken (counter)
//	vram_scrape_duration_seconds                   how long the latest sample took
//	vram_scrape_success                            1 when the latest sample succeeded and is fresh
//
// The scrape-health pair describes the sample being mirrored, like
// node_exporter's per-collector pair: a sample that failed, or one older
// than Options.MaxAge, gives vram_scrape_success 0 and no device or process
// series, so a stale sample is never exposed as current.
//
// # Cardinality
//
// A process label set lives only as long as the process, and a PID label
// churns with the processes. To keep a node's series bounded whatever runs
// on it, each GPU exposes at most TopN processes (Options.TopN, default 10)
// by memory, largest first (PID breaks ties), plus one series with
// pid="other" that sums the rest (0 when there is no rest, so the series is
// stable). Per GPU that is at most TopN+1 memory series and TopN slope
// series. The slope series go to the TopN processes with the steepest slope
// among those that have one.
//
// # Concurrency
//
// Update, SetLeakSlope, DropLeakSlope and CountAction may be called from
// the sampling loop while Collect runs on scrapes; a mutex guards the
// state. Under it Collect copies the leak slopes and the action counts
// (small maps) and the snapshot pointer, not the snapshot. The Snapshot
// handed to Update must not be modified afterwards.
package metrics

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve/workload"
)

// DefaultTopN is how many processes per GPU get their own series.
const DefaultTopN = 10

// MaxCommand is the longest command label value, in bytes.
const MaxCommand = 64

// DefaultMaxAge is how old the latest sample may be before a scrape says it
// is stale.
const DefaultMaxAge = time.Minute

// Options configure a Collector.
type Options struct {
	Hostname string
	TopN     int           // processes with their own series per GPU; default DefaultTopN
	MaxAge   time.Duration // default DefaultMaxAge
	Now      func() time.Time
	// Workload names the pod, namespace and container of a process (the
	// daemon resolves them through the kubelet's pod-resources API). Nil:
	// pod and namespace are empty and container is the short container ID
	// from the process's cgroup, or empty outside containers.
	Workload func(gpu.Process) workload.Workload
}

// ProcessKey identifies a process on a GPU for SetLeakSlope.
type ProcessKey struct {
	GPU int // NVML index
	PID uint32
}

type actionKey struct {
	gpu                    string
	policy, action, result string
}

// Collector is a prometheus.Collector mirroring the latest sample.
type Collector struct {
	opts Options

	mu      sync.Mutex
	snap    *gpu.Snapshot
	took    time.Duration
	err     error
	sampled bool
	// How many scrapes read snap (Collect reads it outside mu), and which
	// snap they read: gen counts the Updates.
	readers int
	gen     uint64
	slopes  map[ProcessKey]float64
	actions map[actionKey]float64
}

var (
	devLabels  = []string{"gpu", "UUID", "modelName", "Hostname"}
	procLabels = append(slices.Clone(devLabels), "pid", "user", "command", "pod", "namespace", "container")

	descTotal      = prometheus.NewDesc("vram_gpu_memory_total_bytes", "Device memory of the GPU.", devLabels, nil)
	descUsed       = prometheus.NewDesc("vram_gpu_memory_used_bytes", "Device memory allocated by programs, including each CUDA context's overhead.", devLabels, nil)
	descFree       = prometheus.NewDesc("vram_gpu_memory_free_bytes", "Device memory available to programs.", devLabels, nil)
	descReserved   = prometheus.NewDesc("vram_gpu_memory_reserved_bytes", "Device memory kept by the driver and firmware; absent where the driver reports only v1 memory info.", devLabels, nil)
	descUnattr     = prometheus.NewDesc("vram_gpu_unattributed_bytes", "Used device memory that no listed process accounts for (other PID namespaces, processes being torn down).", devLabels, nil)
	descOrphaned   = prometheus.NewDesc("vram_orphaned_memory_bytes", "Device memory held by processes whose parent or session is gone.", devLabels, nil)
	descDead       = prometheus.NewDesc("vram_dead_process_memory_bytes", "Device memory held by processes that are exiting (zombie) or absent from /proc (not_in_proc).", append(slices.Clone(devLabels), "reason"), nil)
	descProcMem    = prometheus.NewDesc("vram_process_memory_used_bytes", "Device memory held by a process: the top processes per GPU, the rest summed under pid=\"other\".", procLabels, nil)
	descAllocated  = prometheus.NewDesc("vram_process_allocator_allocated_bytes", "Memory a process on vram's allocator (libvram) has allocated on the GPU, from its statistics channel: the top processes per GPU.", procLabels, nil)
	descAllocRes   = prometheus.NewDesc("vram_process_allocator_reserved_bytes", "Memory vram's allocator inside a process holds on the GPU, allocated or cached: the top processes per GPU.", procLabels, nil)
	descAllocFrag  = prometheus.NewDesc("vram_process_allocator_fragmentation_ratio", "Share of a process's allocator-reserved memory that is cached free outside the largest free block, 0 to 1: the top processes per GPU.", procLabels, nil)
	descAllocOOMs  = prometheus.NewDesc("vram_process_allocator_ooms_total", "Out-of-memory errors vram's allocator inside a process has returned: the top processes per GPU.", procLabels, nil)
	descSlope      = prometheus.NewDesc("vram_process_leak_slope_bytes_per_second", "Rate at which the floor of a process's memory rises, as estimated by the leak detector.", procLabels, nil)
	descActions    = prometheus.NewDesc("vram_policy_actions_total", "Policy actions taken, by GPU, policy, action and result.", []string{"gpu", "Hostname", "policy", "action", "result"}, nil)
	descScrapeTime = prometheus.NewDesc("vram_scrape_duration_seconds", "How long the latest GPU sample took.", nil, nil)
	descScrapeOK   = prometheus.NewDesc("vram_scrape_success", "1 when the latest GPU sample succeeded and is fresh, else 0.", nil, nil)
)

// New returns a Collector with no sample yet (it exposes vram_scrape_success
// 0 until the first Update).
func New(opts Options) *Collector {
	if opts.TopN <= 0 {
		opts.TopN = DefaultTopN
	}
	if opts.MaxAge <= 0 {
		opts.MaxAge = DefaultMaxAge
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return &Collector{opts: opts, slopes: map[ProcessKey]float64{}, actions: map[actionKey]float64{}}
}

// Update makes s the sample that scrapes mirror; took is how long taking it
// lasted and err why it failed (s may then be nil). It returns the sample
// it mirrored before when no scrape still reads it, so that the caller may
// reuse it (gpu.Sampler.Recycle); nil when a scrape does, or there was
// none.
func (c *Collector) Update(s *gpu.Snapshot, took time.Duration, err error) (done *gpu.Snapshot) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readers == 0 {
		done = c.snap
	}
	c.sampled = true
	c.snap, c.took, c.err = s, took, err
	c.readers, c.gen = 0, c.gen+1
	return done
}

// SetLeakSlope sets the leak slope (bytes per second) of one process, and
// DropLeakSlope forgets it: the daemon calls them as its verdicts change,
// so that a sample that changes no slope costs nothing, and one that does
// costs its changes, not a copy of every slope (Collect makes that copy,
// once a scrape).
func (c *Collector) SetLeakSlope(k ProcessKey, slope float64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slopes[k] = slope
}

// DropLeakSlope: see SetLeakSlope.
func (c *Collector) DropLeakSlope(k ProcessKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.slopes, k)
}

// CountAction counts one policy action on the GPU with NVML index gpuIndex
// (negative: not about one GPU, the gpu label is then empty).
func (c *Collector) CountAction(gpuIndex int, policy, action, result string) {
	g := ""
	if gpuIndex >= 0 {
		g = strconv.Itoa(gpuIndex)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.actions[actionKey{g, policy, action, result}]++
}

// Describe sends the descriptors of every metric the Collector can emit.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descTotal, descUsed, descFree, descReserved, descUnattr, descOrphaned, descDead,
		descProcMem, descAllocated, descAllocRes, descAllocFrag, descAllocOOMs, descSlope, descActions, descScrapeTime, descScrapeOK} {
		ch <- d
	}
}

// Collect mirrors the latest sample.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	snap, took, err, sampled := c.snap, c.took, c.err, c.sampled
	slopes := maps.Clone(c.slopes) // SetLeakSlope changes it in place
	actions := maps.Clone(c.actions)
	gen := c.gen
	c.readers++
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		if c.gen == gen { // else Update has let go of snap
			c.readers--
		}
		c.mu.Unlock()
	}()

	for k, v := range actions {
		ch <- prometheus.MustNewConstMetric(descActions, prometheus.CounterValue, v, k.gpu, c.opts.Hostname, k.policy, k.action, k.result)
	}
	ok := sampled && err == nil && snap != nil && c.opts.Now().Sub(snap.Time) <= c.opts.MaxAge
	ch <- prometheus.MustNewConstMetric(descScrapeTime, prometheus.GaugeValue, took.Seconds())
	ch <- prometheus.MustNewConstMetric(descScrapeOK, prometheus.GaugeValue, b2f(ok))
	if !ok {
		return
	}
	c.collectSnapshot(ch, snap, slopes)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func (c *Collector) collectSnapshot(ch chan<- prometheus.Metric, snap *gpu.Snapshot, slopes map[ProcessKey]float64) {
	byDev := map[int][]gpu.Process{}
	for _, p := range snap.Processes {
		byDev[p.Device] = append(byDev[p.Device], p)
	}
	gauge := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, float64(v), labels...)
	}
	for _, d := range snap.Devices {
		if d.Err != nil {
			continue // the device could not be read: no series rather than zeros
		}
		dl := []string{strconv.Itoa(d.Index), d.UUID, d.Name, c.opts.Hostname}
		gauge(descTotal, d.Memory.Total, dl...)
		gauge(descUsed, d.Memory.Used, dl...)
		gauge(descFree, d.Memory.Free, dl...)
		if d.Memory.ReservedKnown {
			gauge(descReserved, d.Memory.Reserved, dl...)
		}
		gauge(descUnattr, d.Unattributed, dl...)

		procs := byDev[d.Index]
		var orphaned, zombie, gone uint64
		for _, p := range procs {
			switch {
			case p.Flags&gpu.FlagZombie != 0:
				zombie += p.Memory
			case p.Flags&gpu.FlagNoSuchProcess != 0:
				gone += p.Memory
			}
			if p.Flags&gpu.FlagOrphaned != 0 {
				orphaned += p.Memory
			}
		}
		gauge(descOrphaned, orphaned, dl...)
		gauge(descDead, zombie, append(dl, "zombie")...)
		gauge(descDead, gone, append(dl, "not_in_proc")...)

		slices.SortFunc(procs, func(a, b gpu.Process) int {
			return cmp.Or(cmp.Compare(b.Memory, a.Memory), cmp.Compare(a.PID, b.PID))
		})
		n := min(len(procs), c.opts.TopN)
		var other uint64
		for _, p := range procs[n:] {
			other += p.Memory
		}
		for _, p := range procs[:n] {
			labels := c.procLabels(dl, p)
			gauge(descProcMem, p.Memory, labels...)
			if a := p.Alloc; a != nil {
				gauge(descAllocated, uint64(a.Allocated), labels...)
				gauge(descAllocRes, uint64(a.Reserved), labels...)
				ch <- prometheus.MustNewConstMetric(descAllocFrag, prometheus.GaugeValue, a.Fragmentation(), labels...)
				ch <- prometheus.MustNewConstMetric(descAllocOOMs, prometheus.CounterValue, float64(a.NumOOMs), labels...)
			}
		}
		gauge(descProcMem, other, append(slices.Clone(dl), "other", "", "", "", "", "")...)

		type sl struct {
			p gpu.Process
			v float64
		}
		var withSlope []sl
		for _, p := range procs {
			if v, ok := slopes[ProcessKey{d.Index, p.PID}]; ok {
				withSlope = append(withSlope, sl{p, v})
			}
		}
		slices.SortFunc(withSlope, func(a, b sl) int { return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.p.PID, b.p.PID)) })
		for _, s := range withSlope[:min(len(withSlope), c.opts.TopN)] {
			ch <- prometheus.MustNewConstMetric(descSlope, prometheus.GaugeValue, s.v, c.procLabels(dl, s.p)...)
		}
	}
}

func (c *Collector) procLabels(dl []string, p gpu.Process) []string {
	var w workload.Workload
	if c.opts.Workload != nil {
		w = c.opts.Workload(p)
	} else {
		w.Container = shortID(p.Container.ID)
	}
	l := slices.Clone(dl)
	return append(l, strconv.FormatUint(uint64(p.PID), 10), label(p.User, 64), label(p.Command(), MaxCommand),
		label(w.Pod, 253), label(w.Namespace, 63), label(w.Container, 253))
}

// label makes s a valid UTF-8 label value of at most n bytes, cut at a
// character boundary.
func label(s string, n int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// shortID is the 12-digit form of a container ID that docker and crictl show.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
