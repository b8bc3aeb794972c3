package synth

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/vramhq/vram/trace/rmm"
)

// RandomConfig configures Random. Zero fields take the defaults in brackets.
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
func Random(cfg RandomConfig) ([]rmm.Record, error) {
	if cfg.Allocations == 0 {
		cfg.Allocations = 1000
	}
	if cfg.MinSize == 0 {
		cfg.MinSize = 1
	}
	if cfg.MaxSize == 0 {
		cfg.MaxSize = max(64<<20, cfg.MinSize)
	}
	if cfg.MaxLiveBytes == 0 {
		cfg.MaxLiveBytes = 16000 << 20
	}
	if cfg.AllocProbability == 0 {
		cfg.AllocProbability = 0.73
	}
	switch {
	case cfg.Allocations < 0:
		return nil, fmt.Errorf("synth: random: Allocations is negative (%d)", cfg.Allocations)
	case cfg.MinSize > cfg.MaxSize:
		return nil, fmt.Errorf("synth: random: MinSize %d is above MaxSize %d", cfg.MinSize, cfg.MaxSize)
	case cfg.MaxSize > cfg.MaxLiveBytes:
		return nil, fmt.Errorf("synth: random: MaxSize %d is above MaxLiveBytes %d", cfg.MaxSize, cfg.MaxLiveBytes)
	case cfg.MaxLive < 0:
		return nil, fmt.Errorf("synth: random: MaxLive is negative (%d)", cfg.MaxLive)
	case !(cfg.AllocProbability > 0 && cfg.AllocProbability <= 1):
		return nil, fmt.Errorf("synth: random: AllocProbability %v is not in (0, 1]", cfg.AllocProbability)
	}
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
	return b.recs, nil
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
// brackets.
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
	if cfg.StartBatch == 0 {
		cfg.StartBatch = 1
	}
	if cfg.EndBatch == 0 {
		cfg.EndBatch = max(8, cfg.StartBatch)
	}
	if cfg.StepsPerBatch == 0 {
		cfg.StepsPerBatch = 3
	}
	if cfg.Layers == 0 {
		cfg.Layers = 12
	}
	if cfg.ActivationBytesPerSample == 0 {
		cfg.ActivationBytesPerSample = 4 << 20
	}
	if cfg.WeightBytes == 0 {
		cfg.WeightBytes = 256 << 20
	}
	switch {
	case cfg.StartBatch < 1 || cfg.EndBatch < cfg.StartBatch:
		return nil, fmt.Errorf("synth: batch walk: batches %d..%d are not a range of positive sizes", cfg.StartBatch, cfg.EndBatch)
	case cfg.StepsPerBatch < 0 || cfg.Layers < 0:
		return nil, errors.New("synth: batch walk: StepsPerBatch and Layers must not be negative")
	case cfg.ActivationBytesPerSample > 1<<40:
		return nil, fmt.Errorf("synth: batch walk: ActivationBytesPerSample %d is over 1 TiB", cfg.ActivationBytesPerSample)
	}
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
	return b.recs, nil
}

// KVCacheConfig configures KVCache. Zero fields take the defaults in brackets.
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
func KVCache(cfg KVCacheConfig) ([]rmm.Record, error) {
	def := func(p *int, v int) {
		if *p == 0 {
			*p = v
		}
	}
	def(&cfg.Sequences, 64)
	def(&cfg.MaxConcurrent, 8)
	def(&cfg.TokensPerBlock, 16)
	def(&cfg.MinPromptTokens, 32)
	def(&cfg.MaxPromptTokens, max(512, cfg.MinPromptTokens))
	def(&cfg.MinOutputTokens, 16)
	def(&cfg.MaxOutputTokens, max(256, cfg.MinOutputTokens))
	if cfg.BlockBytes == 0 {
		cfg.BlockBytes = 2 << 20
	}
	if cfg.ScratchBytesPerSequence == 0 {
		cfg.ScratchBytesPerSequence = 1 << 20
	}
	if cfg.WeightBytes == 0 {
		cfg.WeightBytes = 1 << 30
	}
	switch {
	case cfg.Sequences < 0 || cfg.MaxConcurrent < 0 || cfg.TokensPerBlock < 0:
		return nil, errors.New("synth: kv cache: Sequences, MaxConcurrent and TokensPerBlock must not be negative")
	case cfg.MinPromptTokens < 1 || cfg.MaxPromptTokens < cfg.MinPromptTokens:
		return nil, fmt.Errorf("synth: kv cache: prompt tokens %d..%d are not a range of positive lengths", cfg.MinPromptTokens, cfg.MaxPromptTokens)
	case cfg.MinOutputTokens < 1 || cfg.MaxOutputTokens < cfg.MinOutputTokens:
		return nil, fmt.Errorf("synth: kv cache: output tokens %d..%d are not a range of positive lengths", cfg.MinOutputTokens, cfg.MaxOutputTokens)
	}
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
	return b.recs, nil
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
			return nil, fmt.Errorf("synth: profile: size %d (entry %d) has weight %v", sw.Size, i, sw.Weight)
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
