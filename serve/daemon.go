package serve

// The daemon: options, construction, the sampling loop and shutdown. See
// doc.go for the design.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vramhq/vram/detect"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/proc"
	"github.com/vramhq/vram/serve/alert"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/metrics"
	"github.com/vramhq/vram/serve/sample"
	"github.com/vramhq/vram/serve/store"
	"github.com/vramhq/vram/serve/workload"
)

// Defaults of Options.
const (
	// DefaultRecent is how many samples of used memory each device and
	// process keeps for the live views' sparklines (2 minutes at 1 s).
	DefaultRecent = 120
	// DefaultXidHold is how long an Xid keeps its device unhealthy.
	DefaultXidHold = 5 * time.Minute
	// DefaultVerdictEvery is how often a process's leak verdict is
	// recomputed: once per detector window.
	DefaultVerdictEvery = 5 * time.Second
	// DefaultMaxVerdicts bounds the verdicts computed in one sample. A
	// verdict costs 15-30 µs over the daemon's 64 windows (development
	// VM), so 64 of them cost 1-2 ms; on a node with more processes than
	// 64 × (DefaultVerdictEvery / interval), verdicts come less often
	// (round robin, oldest first).
	DefaultMaxVerdicts = 64
	// DefaultIdleWindow is the sampler's idle window (gpu.OpenOptions).
	DefaultIdleWindow = 30 * time.Second
)

// DetectorConfig is the leak detector's configuration in the daemon:
// detect's defaults with 64 windows instead of 256. A verdict on a floor
// that moves costs O(windows²) slopes (about 26 µs at 64 windows and 190
// µs at 256 on a 2-vCPU VM; a flat floor, 1 µs either way: docs/detect.md,
// "Cost"), and the daemon asks for one per process every 5 s; the 64
// newest windows (5 min at 5 s) keep full resolution and older ones are
// merged, so long slow leaks are still seen, at a coarser resolution.
func DetectorConfig() detect.Config {
	c := detect.DefaultConfig()
	c.MaxWindows = 64
	return c
}

// Options configure a Daemon.
type Options struct {
	// Config is the configuration (DefaultConfig without a file).
	Config Config
	// Flags, when set, applies to a configuration what the command line
	// overrides (--interval, --read-only): Config is the file with them
	// applied, and a reload applies them to the file read again, so that
	// it compares like with like.
	Flags func(*Config)
	// Opened is the GPU host to sample (gpu.Open). Its Sampler belongs to
	// the daemon from now on; Close closes its Host.
	Opened *gpu.Opened
	// DB is the history file; "" is store.DefaultPath. The daemon is its
	// only writer: New fails with a store.LockedError while another
	// daemon (or Store opened with store.Options.Lock) has it open.
	DB string
	// Durable makes every history commit fsync (store.Options.Durable).
	Durable bool
	// Logger receives the daemon's log; nil: slog.Default().
	Logger *slog.Logger
	// Now is the clock; nil: time.Now. It must be the clock the Sampler
	// was opened with.
	Now func() time.Time
	// IdleWindow is the Sampler's idle window, so that idle_for counts
	// the time before the idle flag was set (default DefaultIdleWindow).
	IdleWindow time.Duration
	// Self is the daemon's PID, never signalled (default os.Getpid()).
	Self int
	// Signaller sends signals (default proc.Pidfd; on a simulated host a
	// stand-in that sends nothing). Stater re-reads identities (default
	// Opened.Procs).
	Signaller proc.Signaller
	Stater    proc.Stater
	// Xid delivers Xid events; nil: the host's (gpu.XidWatcher) when it
	// has them. NoXid turns them off.
	Xid   gpu.XidSource
	NoXid bool
	// XidHold is how long an Xid marks its device unhealthy (default
	// DefaultXidHold).
	XidHold time.Duration
	// Workload names a process's pod, namespace and container (package
	// serve/workload); nil: none.
	Workload func(gpu.Process) workload.Workload
	// Detector configures the leak detectors (zero: DetectorConfig()).
	Detector detect.Config
	// Recent, VerdictEvery and MaxVerdicts: see their defaults.
	Recent       int
	VerdictEvery time.Duration
	MaxVerdicts  int
	// Notifier options for the alert webhooks (Logger and Hostname are
	// filled in).
	Notifier alert.NotifierOptions
}

// Daemon is the node daemon: it samples the GPUs on its own goroutine
// (Run) and serves what it sees through api.Backend and a Prometheus
// handler. Create it with New, run it with Run, then Close it.
type Daemon struct {
	opts     Options
	log      *slog.Logger
	now      func() time.Time
	host     gpu.Host
	sampler  *gpu.Sampler
	ids      []gpu.Identity // sampled devices, in order
	hostname string
	info     gpu.HostInfo
	st       *store.Store
	w        *writer
	coll     *metrics.Collector
	reg      *prometheus.Registry
	hub      *hub
	xid      gpu.XidSource
	xidCh    chan gpu.XidEvent
	reloads  chan reloadRequest
	inspect  chan func() // runs a function on the sampling goroutine (tests)
	acts     *actor
	notifier atomic.Pointer[alert.Notifier]
	// Notifiers that reloads replaced, for their delivery counts.
	retiredMu sync.Mutex
	retired   []*alert.Notifier

	// The State is built from the latest sample when it is first asked
	// for (State), not at every sample: at 10 samples a second with one
	// dashboard open it is read once a second, and building it for 1,600
	// processes costs as much as a tenth of the sample. stateMu is held
	// by the sampling goroutine from the end of the GPU sample to the end
	// of the tick (and by reloads), and by State while it builds, so the
	// build reads the sampling goroutine's records and tracks as the
	// latest sample left them.
	stateMu sync.Mutex
	latest  latestSample // under stateMu
	built   *api.State   // the latest sample's State once built; under stateMu

	ticks     atomic.Int64 // samples taken
	sampleErr atomic.Int64 // samples that failed as a whole
	overruns  atomic.Int64 // samples that took longer than the interval

	// Owned by the sampling goroutine.
	cfg     Config
	pol     *policy.Policy
	engine  *alert.Engine
	devs    []*devTrack
	procs   map[uint64]*procTrack // by procKey.slot
	offsets trackClock            // the tracks' times
	// The latest sample's records, one per process (sampleRecords), and
	// their tracks: tracks[i] is the lifetime of records[i] and of the
	// snapshot's Processes[i] (nil in the one case a track could not be
	// made). The tracks are listed at every sample; the records are made
	// in place when first asked for, for the sample recordsAt.
	records   []sample.Process
	recordsAt uint64
	tracks    []*procTrack
	// prevTracks is the sample before's tracks (its place is reused).
	prevTracks []*procTrack
	due        []dueVerdict           // the sample's lifetimes whose verdict is due (observe)
	names      map[gpu.Flags][]string // flagNames
	hist       histAcc
	lastHW     time.Time // last history write
	tickNo     uint64
	enforce    *enforcer

	runMu   sync.Mutex
	running bool
	closed  bool
}

// New checks the options, reads the policy file and the alert rules that
// the configuration names, opens the history file (resolving the alerts an
// earlier run left firing in it) and prepares the metrics; nothing is
// sampled until Run.
func New(ctx context.Context, o Options) (*Daemon, error) {
	if o.Opened == nil || o.Opened.Sampler == nil || o.Opened.Host == nil {
		return nil, errors.New("serve: no GPU host")
	}
	if o.Config.Interval == 0 {
		f := o.Config.File
		o.Config = DefaultConfig()
		o.Config.File = f
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.IdleWindow <= 0 {
		o.IdleWindow = DefaultIdleWindow
	}
	if o.Self == 0 {
		o.Self = os.Getpid()
	}
	if o.XidHold <= 0 {
		o.XidHold = DefaultXidHold
	}
	if o.Detector == (detect.Config{}) {
		o.Detector = DetectorConfig()
	}
	if _, err := detect.New(o.Detector); err != nil {
		return nil, fmt.Errorf("serve: leak detector: %w", err)
	}
	if o.Recent <= 0 {
		o.Recent = DefaultRecent
	}
	if o.VerdictEvery <= 0 {
		o.VerdictEvery = DefaultVerdictEvery
	}
	if o.MaxVerdicts <= 0 {
		o.MaxVerdicts = DefaultMaxVerdicts
	}
	info := o.Opened.Host.Info()
	if o.Stater == nil && o.Opened.Procs != nil {
		o.Stater = o.Opened.Procs
	}
	if o.Signaller == nil {
		if info.Simulated {
			o.Signaller = simSignaller{}
		} else {
			o.Signaller = proc.Pidfd
		}
	}
	pol, rules, err := loadRules(o.Config)
	if err != nil {
		return nil, err
	}
	if o.DB == "" {
		if o.DB, err = store.DefaultPath(os.Getenv); err != nil {
			return nil, fmt.Errorf("serve: history file: %w (name one with --db)", err)
		}
	}
	st, err := store.Open(ctx, o.DB, store.Options{
		RawRetention: o.Config.RawRetention, AggregateRetention: o.Config.AggregateRetention,
		Durable: o.Durable, Now: o.Now, Lock: true,
	})
	var locked *store.LockedError
	switch {
	case errors.As(err, &locked):
		return nil, fmt.Errorf("serve: %w: one daemon per history file; stop that one, or name another file with --db", err)
	case err != nil:
		return nil, fmt.Errorf("serve: %w", err)
	}
	d := &Daemon{
		opts: o, log: o.Logger, now: o.Now, host: o.Opened.Host, sampler: o.Opened.Sampler,
		ids: o.Opened.Sampler.Devices(), hostname: o.Opened.Hostname, info: info,
		st: st, hub: newHub(), xidCh: make(chan gpu.XidEvent, 64), reloads: make(chan reloadRequest), inspect: make(chan func()),
		cfg: o.Config, pol: pol, engine: alert.NewEngine(rules.Rules), procs: map[uint64]*procTrack{}, names: map[gpu.Flags][]string{},
	}
	// The statistics channel at most once a second (its writers publish
	// every 100 ms at most, and each read opens every file): half an
	// interval less, so that at intervals of a second or more every sample
	// still reads it despite the ticker's jitter.
	d.sampler.SetChannelRefresh(channelRefresh - o.Config.Interval/2)
	d.w = newWriter(st, d.log)
	d.coll = metrics.New(metrics.Options{Hostname: d.hostname, TopN: o.Config.TopN, Now: o.Now, MaxAge: max(metrics.DefaultMaxAge, 3*o.Config.Interval), Workload: o.Workload})
	d.reg = prometheus.NewRegistry()
	if err := d.reg.Register(d.coll); err != nil {
		d.w.close(ctx)
		st.Close()
		return nil, fmt.Errorf("serve: metrics: %w", err)
	}
	if err := d.reg.Register(selfCollector{d}); err != nil {
		d.w.close(ctx)
		st.Close()
		return nil, fmt.Errorf("serve: metrics: %w", err)
	}
	for _, id := range d.ids {
		d.devs = append(d.devs, &devTrack{id: id, recent: newRing(o.Recent), healthy: true})
	}
	d.acts = &actor{d: d, st: o.Stater, sg: o.Signaller, self: o.Self}
	d.enforce = &enforcer{a: d.acts, seen: map[actKey]struct{}{}, pending: map[procIdentity]*pendingKill{}}
	d.notifier.Store(d.newNotifier(rules))
	d.resolveLeftOpen(ctx)
	d.xid = o.Xid
	if d.xid == nil && !o.NoXid {
		if xw, ok := d.host.(gpu.XidWatcher); ok {
			idx := make([]int, len(d.ids))
			for i, id := range d.ids {
				idx[i] = id.Index
			}
			src, skipped, err := xw.XidEvents(idx)
			switch {
			case err != nil:
				d.log.Info("Xid events unavailable: a GPU fault shows only when its queries fail", "err", err)
			case len(skipped) > 0:
				d.log.Info("Xid events unavailable on some GPUs", "skipped", skipped)
			}
			d.xid = src
		}
	}
	return d, nil
}

// loadRules reads the policy file and the alert rules a configuration
// names.
func loadRules(c Config) (*policy.Policy, alert.Config, error) {
	var pol *policy.Policy
	if c.PolicyFile != "" {
		p, err := policy.ReadFile(c.PolicyFile)
		var perrs policy.Errors
		switch {
		case errors.As(err, &perrs):
			return nil, alert.Config{}, err // each names the policy file and line
		case err != nil && c.File != "":
			return nil, alert.Config{}, fmt.Errorf("%s: policy_file: %w", c.File, err)
		case err != nil:
			return nil, alert.Config{}, fmt.Errorf("policy_file: %w", err)
		}
		pol = p
	}
	name := c.File
	if name == "" {
		name = "config"
	}
	rules, err := alert.Decode(name, c.Alerts)
	if err != nil {
		return nil, alert.Config{}, err
	}
	return pol, rules, nil
}

func (d *Daemon) newNotifier(c alert.Config) *alert.Notifier {
	o := d.opts.Notifier
	if o.Logger == nil {
		o.Logger = d.log
	}
	if o.Hostname == "" {
		o.Hostname = d.hostname
	}
	return alert.NewNotifier(c, o)
}

// MetricsHandler serves the daemon's private Prometheus registry.
func (d *Daemon) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(d.reg, promhttp.HandlerOpts{
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 8,
		Timeout:             10 * time.Second,
	})
}

// Registry is the daemon's private Prometheus registry.
func (d *Daemon) Registry() *prometheus.Registry { return d.reg }

// DB is the history file's path.
func (d *Daemon) DB() string { return d.st.Path() }

// Devices are the sampled GPUs.
func (d *Daemon) Devices() []gpu.Identity { return d.ids }

// channelRefresh is how often the daemon reads the statistics channel at
// most (gpu.SamplerOptions.ChannelRefresh).
const channelRefresh = time.Second

// Run samples every Config.Interval until ctx ends, then writes the last
// partial history interval and stops its helpers; it returns nil after a
// clean stop. Run may be called once.
func (d *Daemon) Run(ctx context.Context) error {
	d.runMu.Lock()
	if d.running || d.closed {
		d.runMu.Unlock()
		return errors.New("serve: Run called twice, or after Close")
	}
	d.running = true
	d.runMu.Unlock()

	bg, stopBG := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		_ = d.st.Maintain(bg, 0, func(err error) { d.log.Error("history maintenance failed", "err", err) })
	})
	if d.xid != nil {
		wg.Go(func() { d.watchXid(bg) })
	}

	t := time.NewTicker(d.cfg.Interval)
	d.tick()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-t.C:
			d.tick()
		case r := <-d.reloads:
			d.stateMu.Lock()
			err := d.apply(r)
			d.stateMu.Unlock()
			r.done <- err
		case f := <-d.inspect:
			f()
		}
	}
	t.Stop()
	d.flushHistory()
	stopBG()
	wg.Wait()
	d.hub.close()
	return nil
}

// Close writes what is queued, closes the history file and the host, and
// delivers the queued alert notifications for up to 5 s. Run must have
// returned.
func (d *Daemon) Close() error {
	d.runMu.Lock()
	if d.closed {
		d.runMu.Unlock()
		return nil
	}
	d.closed = true
	d.runMu.Unlock()
	d.hub.close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var errs []error
	if err := d.w.close(ctx); err != nil {
		errs = append(errs, fmt.Errorf("history writes still queued: %w", err))
	}
	if n := d.notifier.Load(); n != nil {
		if err := n.Close(ctx); err != nil {
			errs = append(errs, fmt.Errorf("alert notifications: %w", err))
		}
	}
	if d.xid != nil {
		if err := d.xid.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.st.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close history: %w", err))
	}
	if err := d.host.Close(); err != nil {
		errs = append(errs, fmt.Errorf("close GPU host: %w", err))
	}
	return errors.Join(errs...)
}

// watchXid forwards Xid events to the sampling loop until ctx ends.
func (d *Daemon) watchXid(ctx context.Context) {
	backoff := time.Second
	var lastErr string
	for ctx.Err() == nil {
		ev, ok, err := d.xid.Wait(time.Second)
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				d.log.Warn("waiting for Xid events failed", "err", err)
				lastErr = msg
			}
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff, lastErr = time.Second, ""
		if !ok {
			continue
		}
		select {
		case d.xidCh <- ev:
		default:
			d.log.Warn("Xid event dropped: too many at once", "gpu", ev.Index, "xid", ev.Xid)
		}
	}
}

// tick takes one sample and passes it through every consumer. It runs on
// the sampling goroutine only.
func (d *Daemon) tick() {
	start := time.Now()
	snap, err := d.sampler.Sample()
	took := time.Since(start)
	// Not held during the GPU sample: the State of the last sample can be
	// read while the driver is slow to answer.
	d.stateMu.Lock()
	defer d.stateMu.Unlock()
	d.tickNo++
	d.ticks.Add(1)
	now := d.now()
	if snap != nil {
		now = snap.Time
	}
	scraped := d.coll.Update(snap, took, err) // nil while a scrape reads it
	if err != nil {
		d.sampleErr.Add(1)
	}
	d.health(now, snap, err)
	// From here on the sample is the latest: its records (sampleRecords)
	// are made from it when first asked for.
	prev := d.latest.snap
	d.latest, d.built = latestSample{ok: true, now: now, snap: snap}, nil
	if prev != nil && prev == scraped {
		// Nothing reads the sample before any more: the States, records,
		// history and alerts copy what they keep, the State is built under
		// stateMu, and the collector let go of it.
		d.sampler.Recycle(prev)
	}
	// The sample before's tracks, in its order, are observe's first guess.
	d.prevTracks, d.tracks = d.tracks, d.prevTracks[:0]
	if snap != nil {
		d.observe(snap)
		d.judge(now)
		if d.opts.Workload != nil {
			// The workload is looked up at the sample, as it was then.
			d.sampleRecords()
		}
		d.history(snap)
	}
	d.latest.firing = d.evaluateAlerts(now, snap)
	if snap != nil && d.pol != nil {
		d.enforce.step(now, d.sampleRecords(), d.pol)
	}
	d.enforce.kills(now)
	d.latest.warning = d.w.warning()
	d.hub.publish(api.Event{Kind: "state"}) // subscribers read the State when they write it
	if total := time.Since(start); total > d.cfg.Interval {
		if d.overruns.Add(1)%100 == 1 {
			d.log.Warn("a sample took longer than the interval", "took", total.Round(time.Millisecond), "interval", d.cfg.Interval, "overruns", d.overruns.Load())
		}
	}
}

// latestSample is what the State of the latest sample is built from,
// besides the records and tracks the sample left.
type latestSample struct {
	ok      bool // a sample was taken
	now     time.Time
	snap    *gpu.Snapshot // nil when the sample failed as a whole
	firing  []api.Alert
	warning string // the history writer's warning then ("" when none)
}

// simSignaller stands in for the kernel on a simulated host: a simulated
// PID may exist on this machine, so nothing is ever sent.
type simSignaller struct{}

func (simSignaller) Open(int) (proc.Handle, error) { return simHandle{}, nil }

type simHandle struct{}

func (simHandle) Signal(syscall.Signal) error { return nil }
func (simHandle) Close() error                { return nil }
