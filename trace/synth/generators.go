package synth

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/trace/rmm"
)

// RandomConfig configures Random. Zero fields take the defaults in brackets
// (in a spec read by ParseSpec, a key given is its value, 0 included).
type RandomConfig struct {
	Seed        uint64
	Allocations int    // allocations in the trace [1000]
	MinSize     uint64 // sizes are uniform in [MinSize, MaxSize] [1 B, 64 MiB]
	MaxSize     uint64
	// MaxLive caps the number of live allocations (0: no cap).
	MaxLive int
	// MaxLiveBytes caps the live bytes [16000 MiB, RMM's max_usage].
	MaxLiveBytes uint64
	// AllocProbability is the chance that a step allocates rather than
	// frees, when the caps allow it [0.73, as in RMM].
	AllocProbability float64
	Step             time.Duration // time between records [1 µs]
}

// Random generates the workload of RMM's random_allocations benchmark: a
// step allocates when nothing is live; otherwise it allocates with
// probability AllocProbability if the caps allow, and frees a uniformly
// chosen live allocation if not. When the allocations are all made, the
// remaining live ones are freed in random order.
func Random(cfg RandomConfig) ([]rmm.Record, error) { return generate("random", cfg, random) }

// config is a generator's configuration: it takes its defaults (fill)
// and refuses what the generator cannot make (check).
type config[C any] interface {
	*C
	fill(given fields)
	check(n names) error
}

// generate is a generator's Go entry point: cfg with its defaults, checked,
// then made by gen; what names the generator in the error.
func generate[C any, P config[C]](what string, cfg C, gen func(C) []rmm.Record) ([]rmm.Record, error) {
	P(&cfg).fill(nil)
	if err := P(&cfg).check(goNames); err != nil {
		return nil, fmt.Errorf("synth: %s: %w", what, err)
	}
	return gen(cfg), nil
}

// fill sets the zero fields to their defaults, except those given.
func (c *RandomConfig) fill(given fields) {
	setDefault(&c.Allocations, 1000, given["Allocations"])
	setDefault(&c.MinSize, 1, given["MinSize"])
	setDefault(&c.MaxSize, max(64<<20, c.MinSize), given["MaxSize"])
	setDefault(&c.MaxLiveBytes, 16000<<20, given["MaxLiveBytes"])
	setDefault(&c.AllocProbability, 0.73, given["AllocProbability"])
}

// check refuses what Random cannot generate, once the defaults are filled.
func (c *RandomConfig) check(n names) error {
	switch {
	case c.Allocations < 1:
		return fmt.Errorf("%s: must be at least 1", n.int("Allocations", c.Allocations))
	case c.MinSize < 1:
		return fmt.Errorf("%s: must be at least 1 B", n.size("MinSize", c.MinSize))
	case c.MinSize > c.MaxSize:
		return fmt.Errorf("%s is above %s", n.size("MinSize", c.MinSize), n.size("MaxSize", c.MaxSize))
	case c.MaxSize > c.MaxLiveBytes:
		return fmt.Errorf("%s is above %s: the largest allocation would not fit", n.size("MaxSize", c.MaxSize), n.size("MaxLiveBytes", c.MaxLiveBytes))
	case c.MaxLive < 0 || c.MaxLive == 0 && n.given["MaxLive"]:
		return fmt.Errorf("%s: must be at least 1 (left unset, there is no cap)", n.int("MaxLive", c.MaxLive))
	case !(c.AllocProbability > 0 && c.AllocProbability <= 1):
		return fmt.Errorf("%s: must be in (0, 1]", n.float("AllocProbability", c.AllocProbability))
	}
	return nil
}

// random is Random of a filled and checked configuration.
func random(cfg RandomConfig) []rmm.Record {
	r := newRNG(cfg.Seed)
	b := newBuilder(stepOr(cfg.Step), 0)
	var live []uint64
	for made := 0; made < cfg.Allocations; {
		size := r.between(cfg.MinSize, cfg.MaxSize)
		room := (cfg.MaxLive == 0 || len(live) < cfg.MaxLive) && b.liveBytes+size <= cfg.MaxLiveBytes
		if len(live) == 0 || (room && r.float() < cfg.AllocProbability) {
			live = append(live, b.alloc(size))
			made++
			continue
		}
		live = freeRandom(b, r, live)
	}
	for len(live) > 0 {
		live = freeRandom(b, r, live)
	}
	return b.recs
}

// freeRandom frees a uniformly chosen element of live and swap-removes it.
func freeRandom(b *builder, r rng, live []uint64) []uint64 {
	i := r.between(0, uint64(len(live)-1))
	b.free(live[i])
	live[i] = live[len(live)-1]
	return live[:len(live)-1]
}

func stepOr(d time.Duration) time.Duration {
	if d <= 0 {
		return time.Microsecond
	}
	return d
}

// BatchWalkConfig configures BatchWalk. Zero fields take the defaults in
// brackets (in a spec read by ParseSpec, a key given is its value).
type BatchWalkConfig struct {
	Seed uint64
	// The batch size walks from StartBatch to EndBatch, both included [1, 8].
	StartBatch, EndBatch int
	StepsPerBatch        int // training steps at each batch size [3]
	Layers               int // [12]
	// ActivationBytesPerSample is the mean size of one layer's activation
	// for one sample [4 MiB]; each layer scales it by a factor in [0.5, 1.5)
	// drawn once from the seed.
	ActivationBytesPerSample uint64
	// WeightBytes is the size of the model's weights, spread over the layers
	// [256 MiB]. Weights live for the whole trace, and so do their
	// gradients from the first backward pass on, as in PyTorch.
	WeightBytes uint64
	// WorkspaceBytes, if set, is a scratch buffer allocated and freed around
	// every layer's forward and backward computation.
	WorkspaceBytes uint64
	Step           time.Duration // time between records [1 µs]
}

// BatchWalk generates training steps at batch sizes StartBatch, StartBatch+1,
// ..., EndBatch. A step's forward pass allocates each layer's activation,
// batch × per-sample bytes; the backward pass walks the layers in reverse,
// allocating the gradient of each activation and freeing the activation and
// the gradient that came before. It is the shape of memory that decides the
// largest batch that fits.
func BatchWalk(cfg BatchWalkConfig) ([]rmm.Record, error) {
	return generate("batch walk", cfg, batchWalk)
}

// fill sets the zero fields to their defaults, except those given.
func (c *BatchWalkConfig) fill(given fields) {
	setDefault(&c.StartBatch, 1, given["StartBatch"])
	setDefault(&c.EndBatch, max(8, c.StartBatch), given["EndBatch"])
	setDefault(&c.StepsPerBatch, 3, given["StepsPerBatch"])
	setDefault(&c.Layers, 12, given["Layers"])
	setDefault(&c.ActivationBytesPerSample, 4<<20, given["ActivationBytesPerSample"])
	setDefault(&c.WeightBytes, 256<<20, given["WeightBytes"])
}

// check refuses what BatchWalk cannot generate, once the defaults are
// filled.
func (c *BatchWalkConfig) check(n names) error {
	switch {
	case c.StartBatch < 1:
		return fmt.Errorf("%s: must be at least 1", n.int("StartBatch", c.StartBatch))
	case c.StartBatch > c.EndBatch:
		return fmt.Errorf("%s is above %s", n.int("StartBatch", c.StartBatch), n.int("EndBatch", c.EndBatch))
	case c.StepsPerBatch < 1:
		return fmt.Errorf("%s: must be at least 1", n.int("StepsPerBatch", c.StepsPerBatch))
	case c.Layers < 1:
		return fmt.Errorf("%s: must be at least 1", n.int("Layers", c.Layers))
	case c.ActivationBytesPerSample < 1 || c.ActivationBytesPerSample > 1<<40:
		return fmt.Errorf("%s: must be between 1 B and %s", n.size("ActivationBytesPerSample", c.ActivationBytesPerSample), units.FormatBytes(1<<40))
	case c.WeightBytes < 1:
		return fmt.Errorf("%s: must be at least 1 B", n.size("WeightBytes", c.WeightBytes))
	}
	return nil
}

// batchWalk is BatchWalk of a filled and checked configuration.
func batchWalk(cfg BatchWalkConfig) []rmm.Record {
	r := newRNG(cfg.Seed)
	factor := make([]float64, cfg.Layers)
	for i := range factor {
		factor[i] = 0.5 + r.float()
	}
	b := newBuilder(stepOr(cfg.Step), 0)
	perLayer := max(cfg.WeightBytes/uint64(max(cfg.Layers, 1)), 1)
	weights := make([]uint64, cfg.Layers)
	for i := range weights {
		weights[i] = b.alloc(perLayer)
	}
	var wgrads []uint64
	workspace := func() {
		if cfg.WorkspaceBytes > 0 {
			b.free(b.alloc(cfg.WorkspaceBytes))
		}
	}
	acts := make([]uint64, cfg.Layers)
	for batch := cfg.StartBatch; batch <= cfg.EndBatch; batch++ {
		for range cfg.StepsPerBatch {
			for i := range acts {
				workspace()
				size := uint64(float64(batch) * float64(cfg.ActivationBytesPerSample) * factor[i])
				acts[i] = b.alloc(max(size, 1))
			}
			var grad uint64
			for i := len(acts) - 1; i >= 0; i-- {
				workspace()
				g := b.alloc(b.live[acts[i]])
				if len(wgrads) < cfg.Layers-i { // first backward pass
					wgrads = append(wgrads, b.alloc(perLayer))
				}
				b.free(acts[i])
				if grad != 0 {
					b.free(grad)
				}
				grad = g
			}
			if grad != 0 {
				b.free(grad)
			}
		}
	}
	for i := len(wgrads) - 1; i >= 0; i-- {
		b.free(wgrads[i])
	}
	for i := len(weights) - 1; i >= 0; i-- {
		b.free(weights[i])
	}
	return b.recs
}

// KVCacheConfig configures KVCache. Zero fields take the defaults in brackets
// (in a spec read by ParseSpec, a key given is its value).
type KVCacheConfig struct {
	Seed          uint64
	Sequences     int // sequences served in the trace [64]
	MaxConcurrent int // sequences decoded together [8]
	// TokensPerBlock and BlockBytes shape the paged cache: a block holds
	// the keys and values of TokensPerBlock tokens [16 tokens, 2 MiB].
	TokensPerBlock int
	BlockBytes     uint64
	// Prompt and output lengths in tokens, uniform in [Min, Max]
	// [32..512 and 16..256].
	MinPromptTokens, MaxPromptTokens int
	MinOutputTokens, MaxOutputTokens int
	// ScratchBytesPerSequence is the temporary memory of one decode step,
	// per sequence decoded [1 MiB].
	ScratchBytesPerSequence uint64
	// WeightBytes is the model, live for the whole trace [1 GiB].
	WeightBytes uint64
	Step        time.Duration // time between records [1 µs]
}

// KVCache generates a serving workload. Up to MaxConcurrent sequences are
// decoded together; a sequence is admitted with its prompt's blocks, gains a
// block each time its tokens fill the last one, and frees all its blocks
// when its output is complete. Each decode step also allocates and frees a
// scratch buffer sized by the number of sequences decoded.
func KVCache(cfg KVCacheConfig) ([]rmm.Record, error) { return generate("kv cache", cfg, kvCache) }

// fill sets the zero fields to their defaults, except those given.
func (c *KVCacheConfig) fill(given fields) {
	setDefault(&c.Sequences, 64, given["Sequences"])
	setDefault(&c.MaxConcurrent, 8, given["MaxConcurrent"])
	setDefault(&c.TokensPerBlock, 16, given["TokensPerBlock"])
	setDefault(&c.MinPromptTokens, 32, given["MinPromptTokens"])
	setDefault(&c.MaxPromptTokens, max(512, c.MinPromptTokens), given["MaxPromptTokens"])
	setDefault(&c.MinOutputTokens, 16, given["MinOutputTokens"])
	setDefault(&c.MaxOutputTokens, max(256, c.MinOutputTokens), given["MaxOutputTokens"])
	setDefault(&c.BlockBytes, 2<<20, given["BlockBytes"])
	setDefault(&c.ScratchBytesPerSequence, 1<<20, given["ScratchBytesPerSequence"])
	setDefault(&c.WeightBytes, 1<<30, given["WeightBytes"])
}

// check refuses what KVCache cannot generate, once the defaults are filled.
func (c *KVCacheConfig) check(n names) error {
	for _, f := range []struct {
		name string
		v    int
	}{{"Sequences", c.Sequences}, {"MaxConcurrent", c.MaxConcurrent}, {"TokensPerBlock", c.TokensPerBlock}, {"MinPromptTokens", c.MinPromptTokens}, {"MinOutputTokens", c.MinOutputTokens}} {
		if f.v < 1 {
			return fmt.Errorf("%s: must be at least 1", n.int(f.name, f.v))
		}
	}
	for _, f := range []struct {
		name string
		v    uint64
	}{{"BlockBytes", c.BlockBytes}, {"ScratchBytesPerSequence", c.ScratchBytesPerSequence}, {"WeightBytes", c.WeightBytes}} {
		if f.v < 1 {
			return fmt.Errorf("%s: must be at least 1 B", n.size(f.name, f.v))
		}
	}
	switch {
	case c.MinPromptTokens > c.MaxPromptTokens:
		return fmt.Errorf("%s is above %s", n.int("MinPromptTokens", c.MinPromptTokens), n.int("MaxPromptTokens", c.MaxPromptTokens))
	case c.MinOutputTokens > c.MaxOutputTokens:
		return fmt.Errorf("%s is above %s", n.int("MinOutputTokens", c.MinOutputTokens), n.int("MaxOutputTokens", c.MaxOutputTokens))
	}
	return nil
}

// kvCache is KVCache of a filled and checked configuration.
func kvCache(cfg KVCacheConfig) []rmm.Record {
	type seq struct {
		tokens, left int      // tokens held, tokens still to generate
		blocks       []uint64 // the cache, one allocation per block
	}
	r := newRNG(cfg.Seed)
	b := newBuilder(stepOr(cfg.Step), 0)
	weights := b.alloc(cfg.WeightBytes)
	tpb := cfg.TokensPerBlock
	var active []*seq
	for admitted := 0; admitted < cfg.Sequences || len(active) > 0; {
		for len(active) < cfg.MaxConcurrent && admitted < cfg.Sequences {
			s := &seq{
				tokens: int(r.between(uint64(cfg.MinPromptTokens), uint64(cfg.MaxPromptTokens))),
				left:   int(r.between(uint64(cfg.MinOutputTokens), uint64(cfg.MaxOutputTokens))),
			}
			for range (s.tokens + tpb - 1) / tpb {
				s.blocks = append(s.blocks, b.alloc(cfg.BlockBytes))
			}
			active = append(active, s)
			admitted++
		}
		scratch := b.alloc(cfg.ScratchBytesPerSequence * uint64(len(active)))
		kept := active[:0]
		for _, s := range active {
			s.tokens++
			s.left--
			if s.tokens > len(s.blocks)*tpb {
				s.blocks = append(s.blocks, b.alloc(cfg.BlockBytes))
			}
			if s.left > 0 {
				kept = append(kept, s)
				continue
			}
			for _, p := range s.blocks {
				b.free(p)
			}
		}
		active = kept
		b.free(scratch)
	}
	b.free(weights)
	return b.recs
}

// SizeWeight is one size of a profile's distribution and its relative weight.
type SizeWeight struct {
	Size   uint64
	Weight float64
}

// Profile describes a workload statistically.
type Profile struct {
	Sizes      []SizeWeight // allocation sizes, drawn in proportion to Weight
	Rate       float64      // allocations per second
	TargetLive int          // allocations live at once
}

// ProfileConfig configures FromProfile. Zero fields take the defaults in brackets.
type ProfileConfig struct {
	Seed        uint64
	Profile     Profile // Rate [10000/s], TargetLive [100]
	Allocations int     // allocations in the trace, ramp-up included [10000]
}

// FromProfile generates a trace that follows a profile: it allocates until
// TargetLive allocations are live, then replaces a uniformly chosen live
// allocation with a new one at each step until Allocations were made, and
// finally frees what is left in random order. Sizes are drawn from the
// profile's distribution and allocation times from a Poisson process of the
// profile's rate; a replacing free happens at the time of the allocation
// that follows it.
func FromProfile(cfg ProfileConfig) ([]rmm.Record, error) {
	p := cfg.Profile
	if p.Rate == 0 {
		p.Rate = 10000
	}
	if p.TargetLive == 0 {
		p.TargetLive = 100
	}
	if cfg.Allocations == 0 {
		cfg.Allocations = 10000
	}
	switch {
	case len(p.Sizes) == 0:
		return nil, errors.New("synth: profile: no sizes")
	case !(p.Rate > 0) || math.IsInf(p.Rate, 0):
		return nil, fmt.Errorf("synth: profile: rate %v is not a positive number", p.Rate)
	case p.TargetLive < 0 || cfg.Allocations < 0:
		return nil, errors.New("synth: profile: TargetLive and Allocations must not be negative")
	}
	cum := make([]float64, len(p.Sizes))
	total := 0.0
	for i, sw := range p.Sizes {
		if !(sw.Weight >= 0) || math.IsInf(sw.Weight, 0) {
			return nil, fmt.Errorf("synth: profile: size %s (entry %d) has weight %v", units.FormatBytes(sw.Size), i, sw.Weight)
		}
		total += sw.Weight
		cum[i] = total
	}
	if !(total > 0) || math.IsInf(total, 0) {
		return nil, fmt.Errorf("synth: profile: weights sum to %v", total)
	}
	r := newRNG(cfg.Seed)
	draw := func() uint64 {
		x := r.float() * total
		i := sort.SearchFloat64s(cum, x)
		for i < len(cum)-1 && cum[i] <= x { // skip zero-weight entries
			i++
		}
		return p.Sizes[min(i, len(cum)-1)].Size
	}
	b := newBuilder(0, 0)
	b.step = 0
	var clock float64 // seconds
	tick := func() {
		clock += -math.Log(1-r.float()) / p.Rate
		// Whole microseconds, which is what RMM's own tools read.
		b.now = time.Duration(clock*1e6) * time.Microsecond
	}
	var live []uint64
	for made := 0; made < cfg.Allocations; made++ {
		tick()
		if len(live) >= p.TargetLive && len(live) > 0 {
			live = freeRandom(b, r, live)
		}
		live = append(live, b.alloc(draw()))
	}
	for len(live) > 0 {
		live = freeRandom(b, r, live)
	}
	return b.recs, nil
}

// ProfileOf derives a profile from a trace: the distribution of its
// allocation sizes, its allocation rate over its duration, and its mean
// number of live allocations (over its records).
func ProfileOf(recs []rmm.Record) (Profile, error) {
	counts := make(map[uint64]float64)
	live := make(map[uint64]bool)
	var allocs int
	var liveSum float64
	for _, r := range recs {
		switch r.Action {
		case rmm.Allocate:
			counts[r.Size]++
			live[r.Pointer] = true
			allocs++
		case rmm.Free:
			delete(live, r.Pointer)
		}
		liveSum += float64(len(live))
	}
	if allocs == 0 {
		return Profile{}, errors.New("synth: profile of a trace without allocations")
	}
	var p Profile
	for size, n := range counts {
		p.Sizes = append(p.Sizes, SizeWeight{size, n})
	}
	sort.Slice(p.Sizes, func(i, j int) bool { return p.Sizes[i].Size < p.Sizes[j].Size })
	if d := recs[len(recs)-1].Time - recs[0].Time; d > 0 {
		p.Rate = float64(allocs) / d.Seconds()
	} else {
		p.Rate = 10000
	}
	p.TargetLive = max(1, int(math.Round(liveSum/float64(len(recs)))))
	return p, nil
}
