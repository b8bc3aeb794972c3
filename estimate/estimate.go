package estimate

import (
	"errors"
	"fmt"
	"math"
	"strings"
)

// Mode is what the job does on the GPU.
type Mode string

// The modes.
const (
	Train    Mode = "train"    // forward, backward and optimizer step
	Infer    Mode = "infer"    // one forward pass without gradients
	Generate Mode = "generate" // greedy text generation with the KV cache
)

// Options describe the job to estimate.
type Options struct {
	Mode      Mode
	Batch     int
	SeqLen    int // prompt length for Generate; ignored for ViT
	NewTokens int // Generate
	// Dtype of the weights: fp32, bf16 or fp16 ("" fp32, or the
	// safetensors' dtype when Tensors is set).
	Dtype string
	// AMP is autocast's dtype (bf16, fp16) over fp32 weights; "" none.
	AMP string
	// Quantize packs the linear layers' weights for inference: int8
	// (bitsandbytes LLM.int8) or int4 (NF4); "" none.
	Quantize string
	// Optimizer: adamw, adam, sgd (with momentum) or none.
	Optimizer         string
	GradCheckpointing bool
	// Tensors, when set, gives the exact parameter count (and default
	// dtype) from safetensors headers.
	Tensors *Tensors
	// Context is the CUDA context's size; 0 uses DefaultContext.
	Context uint64
}

// DefaultContext is the device memory a PyTorch process holds before it
// allocates anything: the CUDA context and the kernels it loads. Measured on
// an H200 with PyTorch 2.11 and CUDA 13.0 (docs/gpu-runs/2026-12-01/train:
// device_used_before, 552,402,944 bytes).
const DefaultContext = 552402944

// Workspace is cuBLAS's workspace on Hopper GPUs (PyTorch's default, 32
// MiB per handle and stream, allocated through the caching allocator):
// one for the forward thread, one more for autograd's backward thread.
const Workspace = 32 << 20

// Parts are the memory at the peak, in bytes.
type Parts struct {
	Weights     uint64 `json:"weights_bytes"`
	Gradients   uint64 `json:"gradients_bytes"`
	Optimizer   uint64 `json:"optimizer_states_bytes"`
	Activations uint64 `json:"activations_bytes"`
	Temporaries uint64 `json:"temporaries_bytes"`
	KVCache     uint64 `json:"kv_cache_bytes"`
	Context     uint64 `json:"cuda_context_bytes"`
}

// Allocated is the parts PyTorch's allocator counts (all but the context).
func (p Parts) Allocated() uint64 {
	return p.Weights + p.Gradients + p.Optimizer + p.Activations + p.Temporaries + p.KVCache
}

// Result is an estimate.
type Result struct {
	Parts Parts
	// Peak is the device memory at the peak, the context included;
	// Allocated what torch.cuda.max_memory_allocated would report.
	Peak, Allocated uint64
	// Phase says where the peak is: "backward start", "recompute" (a
	// checkpointed layer in the backward pass), "optimizer step",
	// "forward", "output", "prefill", "decode".
	Phase string
	// Workspaces is the cuBLAS workspaces' share of Temporaries.
	Workspaces uint64
	Params     uint64
	// ParamsFrom says where the parameter count comes from: config,
	// safetensors or --params.
	ParamsFrom string
	Dtype      string
	// Notes are the assumptions that matter for this estimate.
	Notes []string
}

// dtypes of the weights, the compute and the residual stream, in bytes.
type precision struct {
	w, c, r float64
	amp     bool
	name    string
}

func dtypeBytes(s string) (float64, error) {
	switch strings.ToLower(s) {
	case "fp32", "float32", "f32", "float":
		return 4, nil
	case "bf16", "bfloat16", "fp16", "float16", "f16", "half":
		return 2, nil
	}
	return 0, fmt.Errorf("dtype %q: want fp32, bf16 or fp16", s)
}

// normDtype maps the names of configs and safetensors to fp32, bf16, fp16.
func normDtype(s string) string {
	switch strings.ToLower(s) {
	case "f32", "float32", "float", "fp32":
		return "fp32"
	case "bf16", "bfloat16":
		return "bf16"
	case "f16", "float16", "fp16", "half":
		return "fp16"
	}
	return s
}

func (o *Options) check() error {
	switch o.Mode {
	case Train, Infer, Generate:
	case "":
		o.Mode = Train
	default:
		return fmt.Errorf("mode %q: want train, infer or generate", o.Mode)
	}
	if o.Batch < 1 {
		return fmt.Errorf("batch %d: want at least 1", o.Batch)
	}
	if o.SeqLen < 1 {
		return fmt.Errorf("sequence length %d: want at least 1", o.SeqLen)
	}
	if o.Mode == Generate && o.NewTokens < 1 {
		return fmt.Errorf("new tokens %d: generation needs at least 1", o.NewTokens)
	}
	if o.Batch > limit || o.SeqLen > limit || o.NewTokens > limit {
		return fmt.Errorf("batch %d, sequence %d, new tokens %d: at most %d each", o.Batch, o.SeqLen, o.NewTokens, limit)
	}
	switch o.Optimizer {
	case "":
		o.Optimizer = "adamw"
	case "adamw", "adam", "sgd", "none":
	default:
		return fmt.Errorf("optimizer %q: want adamw, adam, sgd or none", o.Optimizer)
	}
	switch o.AMP {
	case "", "bf16", "fp16":
	default:
		return fmt.Errorf("amp %q: want bf16 or fp16", o.AMP)
	}
	switch o.Quantize {
	case "":
	case "int8", "int4":
		if o.Mode == Train {
			return fmt.Errorf("quantize %s: only for infer and generate (quantized training, QLoRA, is not modelled)", o.Quantize)
		}
	default:
		return fmt.Errorf("quantize %q: want int8 or int4", o.Quantize)
	}
	if o.Mode != Train && o.GradCheckpointing {
		return errors.New("gradient checkpointing applies to training only")
	}
	return nil
}

func (o *Options) precision() (precision, error) {
	d := normDtype(o.Dtype)
	if d == "" && o.Tensors != nil && o.Tensors.Count > 0 {
		d = normDtype(o.Tensors.Dtype())
	}
	if d == "" {
		d = "fp32"
	}
	w, err := dtypeBytes(d)
	if err != nil {
		return precision{}, err
	}
	p := precision{w: w, c: w, r: w, name: d}
	if o.AMP != "" {
		if w != 4 {
			return precision{}, fmt.Errorf("amp %s over %s weights: autocast is for fp32 weights (drop --amp, or use --dtype fp32)", o.AMP, d)
		}
		p.c, p.amp, p.name = 2, true, "fp32 weights, "+o.AMP+" autocast"
	}
	return p, nil
}

// Estimate estimates the peak device memory of a job on model a.
func Estimate(a Arch, o Options) (Result, error) {
	if err := o.check(); err != nil {
		return Result{}, err
	}
	pr, err := o.precision()
	if err != nil {
		return Result{}, err
	}
	if o.Mode == Generate && (a.Family == BERT || a.Family == ViT) {
		return Result{}, fmt.Errorf("generate: %s is not a text generator (use infer)", a.Family)
	}
	if a.MaxPos > 0 && a.Family != ViT && o.SeqLen+o.NewTokens > a.MaxPos && (a.Family == GPT2 || a.Family == BERT) {
		return Result{}, fmt.Errorf("sequence of %d tokens: the model's learned positions stop at %d", o.SeqLen+o.NewTokens, a.MaxPos)
	}
	pc := CountParams(a)
	res := Result{Params: pc.Total, ParamsFrom: "config", Dtype: pr.name}
	params := float64(pc.Total)
	if o.Tensors != nil && o.Tensors.Count > 0 {
		params, res.Params, res.ParamsFrom = float64(o.Tensors.Params), o.Tensors.Params, "safetensors"
	}
	m := model{a: a, o: o, p: pr, pc: pc, params: params}
	res.Parts, res.Phase, res.Workspaces = m.peak()
	res.Parts.Context = o.Context
	if res.Parts.Context == 0 {
		res.Parts.Context = DefaultContext
	}
	res.Allocated = res.Parts.Allocated()
	res.Peak = res.Allocated + res.Parts.Context
	res.Notes = m.notes()
	return res, nil
}

// EstimateParams is the weights-and-states estimate for a model known
// only by its parameter count: no activations, no KV cache.
func EstimateParams(n uint64, o Options) (Result, error) {
	if o.Batch == 0 {
		o.Batch = 1
	}
	if o.SeqLen == 0 {
		o.SeqLen = 1
	}
	if o.Mode == Generate && o.NewTokens == 0 {
		o.NewTokens = 1
	}
	if err := o.check(); err != nil {
		return Result{}, err
	}
	pr, err := o.precision()
	if err != nil {
		return Result{}, err
	}
	P := float64(n)
	var parts Parts
	parts.Weights = b(P * pr.w)
	if o.Quantize != "" {
		parts.Weights = b(P * quantBytes(o.Quantize))
	}
	if o.Mode == Train {
		parts.Gradients = b(P * pr.w)
		parts.Optimizer = b(P * pr.w * optStates(o.Optimizer))
	}
	parts.Context = o.Context
	if parts.Context == 0 {
		parts.Context = DefaultContext
	}
	res := Result{Parts: parts, Params: n, ParamsFrom: "--params", Dtype: pr.name, Phase: "weights and states only"}
	res.Allocated = parts.Allocated()
	res.Peak = res.Allocated + parts.Context
	res.Notes = []string{"weights, gradients and optimizer states only: activations, temporaries and the KV cache are not counted (give a config.json to count them)"}
	return res, nil
}

// optStates is the optimizer's state per parameter, in parameters.
func optStates(opt string) float64 {
	switch opt {
	case "adamw", "adam":
		return 2 // exp_avg, exp_avg_sq
	case "sgd":
		return 1 // momentum buffer
	}
	return 0
}

// quantBytes is the bytes per weight of a quantized linear layer, its
// scales included: int8 with one fp32 scale per row is about 1; NF4 packs
// two per byte with an fp32 absmax per 64 (0.5 + 4/64).
func quantBytes(q string) float64 {
	if q == "int4" {
		return 0.5 + 4.0/64
	}
	return 1
}

func b(x float64) uint64 {
	if x <= 0 || math.IsNaN(x) {
		return 0
	}
	if x >= math.MaxUint64 {
		return math.MaxUint64
	}
	return uint64(math.Ceil(x))
}

// Fits is the largest value of one dimension of the job (the batch, or the
// sequence length) whose peak is at most capacity bytes: 0 when even 1
// does not fit. hi bounds the search.
func Fits(capacity uint64, hi int, at func(n int) (Result, error)) (int, error) {
	r, err := at(1)
	if err != nil {
		return 0, err
	}
	if r.Peak > capacity {
		return 0, nil
	}
	lo := 1 // fits
	if r, err := at(hi); err != nil {
		return 0, err
	} else if r.Peak <= capacity {
		return hi, nil
	}
	for hi-lo > 1 { // lo fits, hi does not
		mid := lo + (hi-lo)/2
		r, err := at(mid)
		if err != nil {
			return 0, err
		}
		if r.Peak <= capacity {
			lo = mid
		} else {
			hi = mid
		}
	}
	return lo, nil
}

// MaxBatch is the largest batch of the job o on a whose peak fits in
// capacity bytes (at most 1<<20).
func MaxBatch(a Arch, o Options, capacity uint64) (int, error) {
	return Fits(capacity, 1<<20, func(n int) (Result, error) {
		o.Batch = n
		return Estimate(a, o)
	})
}

// MaxSeqLen is the longest sequence (the prompt, for generation) whose
// peak fits in capacity bytes, up to the model's positions (or 1<<20).
func MaxSeqLen(a Arch, o Options, capacity uint64) (int, error) {
	hi := 1 << 20
	if a.MaxPos > 0 {
		hi = a.MaxPos - o.NewTokens
		if o.Mode != Generate {
			hi = a.MaxPos
		}
	}
	if hi < 1 {
		return 0, nil
	}
	return Fits(capacity, hi, func(n int) (Result, error) {
		o.SeqLen = n
		return Estimate(a, o)
	})
}
