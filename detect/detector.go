package detect

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// MiB is 2^20 bytes.
const MiB = 1 << 20

// Config tunes a Detector. The zero value of every field means "use the
// default" (DefaultConfig lists them); negative or out-of-range values are
// rejected by New.
type Config struct {
	// Window is the width of a window; the detector keeps one floor (minimum)
	// and one peak (maximum) per window. It must be longer than one step of
	// the workload (one training iteration, one request batch), so that every
	// window sees the memory at rest at least once, and hold several
	// samples. At 1 s sampling under a sawtooth, 15s finds the floor more
	// often but calls a leak only after about 2 minutes (docs/detect.md).
	// Default 5s.
	Window time.Duration
	// MaxWindows bounds the memory: at most this many windows are kept.
	// When full, the oldest half is coarsened by merging adjacent windows;
	// the newest half always keeps full resolution. Even, ≥ 4×MinWindows.
	// Default 256.
	MaxWindows int
	// MinWindows and MinSpan are the least data a verdict needs: fewer
	// windows, or windows spanning less time, give Insufficient.
	// Defaults 8 and 30s.
	MinWindows int
	MinSpan    time.Duration
	// Alpha is the significance level of the trend test, shared by all the
	// horizons tested in one verdict (Bonferroni). Default 0.001.
	Alpha float64
	// MinSlope (bytes/s) and MinGrowth (bytes over the tested horizon) are
	// the smallest trend worth calling a leak, however significant.
	// Defaults 1 KiB/s and 16 MiB.
	MinSlope  float64
	MinGrowth float64
	// WarmupRate (bytes/s) is the floor's rise rate above which leading
	// windows count as warm-up, for at most MaxWarmup, unless the rise
	// has kept its pace for SteadyRise (then it is a leak, not a warm-up:
	// a warm-up slows down). Defaults 8 MiB/s, 2 minutes and 45s.
	WarmupRate float64
	MaxWarmup  time.Duration
	SteadyRise time.Duration
	// StepMin (bytes) is the smallest window-to-window jump of the floor that
	// can count as a one-off step (a cache that grows once, a model switch)
	// rather than as part of a continuous trend. Default 32 MiB.
	StepMin float64
	// RatchetSteps is how many steps up, with none down, make a leak even
	// when the floor is flat between them. Default 4.
	RatchetSteps int
	// Capacity (bytes), when set, adds the projected time to out-of-memory
	// to the reason of a Leak verdict. Verdict.TimeToOOM works without it.
	Capacity uint64
}

// DefaultConfig returns the configuration New uses for zero fields.
func DefaultConfig() Config {
	return Config{
		Window:       5 * time.Second,
		MaxWindows:   256,
		MinWindows:   8,
		MinSpan:      30 * time.Second,
		Alpha:        0.001,
		MinSlope:     1024,
		MinGrowth:    16 * MiB,
		WarmupRate:   8 * MiB,
		MaxWarmup:    2 * time.Minute,
		SteadyRise:   45 * time.Second,
		StepMin:      32 * MiB,
		RatchetSteps: 4,
	}
}

func (c Config) withDefaults() (Config, error) {
	d := DefaultConfig()
	if c.Window < 0 || c.MaxWindows < 0 || c.MinWindows < 0 || c.MinSpan < 0 || c.MaxWarmup < 0 || c.SteadyRise < 0 || c.RatchetSteps < 0 {
		return c, errors.New("detect: negative Window, MaxWindows, MinWindows, MinSpan, MaxWarmup, SteadyRise or RatchetSteps")
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"Alpha", c.Alpha}, {"MinSlope", c.MinSlope}, {"MinGrowth", c.MinGrowth}, {"WarmupRate", c.WarmupRate}, {"StepMin", c.StepMin}} {
		if f.v < 0 || math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return c, fmt.Errorf("detect: %s must be a finite number ≥ 0, got %v", f.name, f.v)
		}
	}
	if c.Alpha >= 1 {
		return c, fmt.Errorf("detect: Alpha must be below 1, got %v", c.Alpha)
	}
	if c.Window == 0 {
		c.Window = d.Window
	}
	if c.Window < time.Millisecond {
		return c, fmt.Errorf("detect: Window %v is below 1ms", c.Window)
	}
	if c.MinWindows == 0 {
		c.MinWindows = d.MinWindows
	}
	if c.MinWindows < 4 {
		return c, fmt.Errorf("detect: MinWindows %d is below 4: the trend test needs more points", c.MinWindows)
	}
	if c.MaxWindows == 0 {
		c.MaxWindows = max(d.MaxWindows, 4*c.MinWindows)
	}
	if c.MaxWindows%2 != 0 || c.MaxWindows < 4*c.MinWindows {
		return c, fmt.Errorf("detect: MaxWindows %d must be even and at least 4×MinWindows (%d)", c.MaxWindows, 4*c.MinWindows)
	}
	if c.MinSpan == 0 {
		c.MinSpan = d.MinSpan
	}
	if c.Alpha == 0 {
		c.Alpha = d.Alpha
	}
	if c.MinSlope == 0 {
		c.MinSlope = d.MinSlope
	}
	if c.MinGrowth == 0 {
		c.MinGrowth = d.MinGrowth
	}
	if c.WarmupRate == 0 {
		c.WarmupRate = d.WarmupRate
	}
	if c.MaxWarmup == 0 {
		c.MaxWarmup = d.MaxWarmup
	}
	if c.SteadyRise == 0 {
		c.SteadyRise = d.SteadyRise
	}
	if c.StepMin == 0 {
		c.StepMin = d.StepMin
	}
	if c.RatchetSteps == 0 {
		c.RatchetSteps = d.RatchetSteps
	}
	return c, nil
}

// Sample is one reading of a memory counter.
type Sample struct {
	T     time.Time
	Bytes uint64
}

// window summarises the samples of one time window. Times are seconds since
// the detector's first sample.
type window struct {
	first, last float64 // times of the first and last sample in the window
	t           float64 // the time of the minimum (the earliest, on ties); weighted mean after merging
	floor       float64 // minimum; weighted mean of the merged minima after merging
	peak        float64 // maximum
	weight      int     // number of base windows merged into this one
	n           int     // number of samples
}

func (w *window) add(t, b float64) {
	if w.n == 0 {
		*w = window{first: t, t: t, floor: b, peak: b, weight: 1}
	}
	w.last = t
	if b < w.floor {
		// The floor is placed at the time it was read, not at the
		// window's middle: on a fast rise the minimum is the earliest
		// sample, and irregular sampling moves it inside the window.
		w.floor, w.t = b, t
	}
	w.peak = max(w.peak, b)
	w.n++
}

// merge folds b (the window right after a) into a. The floor becomes the
// weighted mean of the two floors, not their minimum: the minimum of more
// samples is lower under noise, and coarse old windows with lower floors
// would read as a rising trend.
func merge(a, b window) window {
	wa, wb := float64(a.weight), float64(b.weight)
	return window{
		first:  a.first,
		last:   b.last,
		t:      (a.t*wa + b.t*wb) / (wa + wb),
		floor:  (a.floor*wa + b.floor*wb) / (wa + wb),
		peak:   max(a.peak, b.peak),
		weight: a.weight + b.weight,
		n:      a.n + b.n,
	}
}

// Detector is the online form: feed it samples in time order with Add and
// ask for a Verdict at any time. Its memory is bounded by Config.MaxWindows
// whatever the length of the series. A Detector is not safe for concurrent
// use; guard it with a mutex when a sampler and a reader share it.
//
// The fields Add reads and writes come first, so that they share the
// Detector's first cache lines: a daemon feeds thousands of detectors at
// every sample, and touching each one's memory is most of what Add costs.
type Detector struct {
	started bool
	win     float64 // window width, seconds
	t0      time.Time
	cur     window // the open window
	curIdx  int64  // its index: floor(time / win)
	samples int
	wins    []window
	ignored int
	cfg     Config

	// scratch buffers of the Verdict in progress (borrowed from scratchPool)
	pairs []float64
	tmp   []float64
	arena *arena
}

// New returns a Detector with cfg's zero fields set to their defaults, or an
// error naming the first invalid field.
func New(cfg Config) (*Detector, error) {
	d, err := Make(cfg)
	if err != nil {
		return nil, err
	}
	return &d, nil
}

// Make is New returning the Detector itself, for a caller that keeps its
// detectors inside its own structs (one allocation, and one place in
// memory, per tracked series). A Detector may be copied until its first
// Add, not after.
func Make(cfg Config) (Detector, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return Detector{}, err
	}
	return Detector{
		cfg:  c,
		win:  c.Window.Seconds(),
		wins: make([]window, 0, c.MaxWindows),
	}, nil
}

// Config returns the detector's configuration with defaults filled in.
func (d *Detector) Config() Config { return d.cfg }

// Samples returns how many samples were accepted and how many were ignored
// because they came earlier than a sample already seen in a later window.
func (d *Detector) Samples() (accepted, ignored int) { return d.samples, d.ignored }

// Add records that the counter read bytes at time t. Samples must come in
// time order; equal times are fine; a sample older than the open window is
// ignored (and counted, see Samples).
func (d *Detector) Add(t time.Time, bytes uint64) {
	if !d.started {
		d.started, d.t0 = true, t
	}
	sec := t.Sub(d.t0).Seconds() // saturates at ±292 years, never overflows
	if sec < 0 {
		d.ignored++
		return
	}
	idx := int64(math.Floor(sec / d.win))
	switch {
	case d.cur.n == 0:
		d.curIdx = idx
	case idx < d.curIdx:
		d.ignored++
		return
	case idx > d.curIdx:
		d.closeWindow()
		d.curIdx = idx
	}
	d.cur.add(sec, float64(bytes))
	d.samples++
}

// closeWindow moves the open window into the list, coarsening the oldest
// half when the list is full.
func (d *Detector) closeWindow() {
	if len(d.wins) == d.cfg.MaxWindows {
		d.compact()
	}
	d.wins = append(d.wins, d.cur)
	d.cur = window{}
}

// compact merges one adjacent pair in the oldest half of the list: the pair
// with the smallest combined weight, the oldest one on ties. Repeated, this
// keeps weights non-decreasing towards the past, so resolution falls off
// roughly geometrically with age while the newest half stays at full
// resolution.
func (d *Detector) compact() {
	half := len(d.wins) / 2
	best, bestW := 0, math.MaxInt
	for i := 0; i+1 < half; i++ {
		if w := d.wins[i].weight + d.wins[i+1].weight; w < bestW {
			best, bestW = i, w
		}
	}
	d.wins[best] = merge(d.wins[best], d.wins[best+1])
	d.wins = append(d.wins[:best+1], d.wins[best+2:]...)
}

// points returns the windows a verdict looks at: the closed ones, plus the
// open one when it already covers half a window (then in a copy, made in
// buf).
func (d *Detector) points(buf []window) []window {
	if !d.hasOpen() {
		return d.wins
	}
	return append(append(buf[:0], d.wins...), d.cur)
}

// hasOpen reports whether the open window is one of points().
func (d *Detector) hasOpen() bool { return d.cur.n > 0 && d.cur.last-d.cur.first >= d.win/2 }

// Analyze runs a fresh Detector over samples (in time order) and returns its
// verdict. It is the batch form of Detector.
func Analyze(samples []Sample, cfg Config) (Verdict, error) {
	d, err := New(cfg)
	if err != nil {
		return Verdict{}, err
	}
	for _, s := range samples {
		d.Add(s.T, s.Bytes)
	}
	return d.Verdict(), nil
}
