// Package estimate is the vram estimate command: the peak device memory of
// a training step, a forward pass or text generation of a Hugging Face
// model, before anything runs and without a GPU. The model is package
// estimate (top level); this package reads the flags and the model's files
// and prints the parts.
package estimate

import (
	"encoding/json"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	est "github.com/vramhq/vram/estimate"
	"github.com/vramhq/vram/internal/units"
)

// Schema names the JSON layout of vram estimate.
const Schema = "vram.estimate/v1"

type flags struct {
	mode, dtype, amp, quantize, optimizer, capacity, params string
	batch, seqLen, newTokens                                int
	ckpt, json                                              bool
}

// NewCmd builds vram estimate on the outside world fac.
func NewCmd(fac *cmdutil.Factory) *cobra.Command {
	f := &flags{}
	cmd := &cobra.Command{
		Use:   "estimate [flags] MODEL",
		Short: "Estimate the peak GPU memory of training, inference or generation, before it runs",
		Long: `Estimate the peak device memory of one training step (--mode train), a forward
pass (infer) or text generation (generate) of a Hugging Face model, from its
config.json: MODEL is the file or a directory holding it. Safetensors files in
that directory, if any, give the exact parameter count and the weights' dtype
(their headers only are read). No GPU is needed.

Families: GPT-2; LLaMA, Mistral, Qwen2 and Qwen3 (grouped-query attention,
tied or untied embeddings); BERT and RoBERTa (masked-LM head); ViT (image
classification). For any other model, --params N (no MODEL) counts weights,
gradients and optimizer states only.

The parts: weights, gradients, optimizer states, saved activations,
temporaries at the peak (the loss's fp32 log-probabilities, autocast's weight
copies, Adam's step, cuBLAS workspaces), the KV cache and the CUDA context.
"allocated" is comparable with torch.cuda.max_memory_allocated; PyTorch's
cache may reserve more. Assumptions: PyTorch 2.x, transformers' defaults
(SDPA attention), the training loop of docs/estimate.md.

--capacity SIZE also reports the largest batch, and the longest sequence at
--batch, whose peak fits in SIZE.`,
		Example: `  vram estimate --batch 8 --seq-len 1024 path/to/gpt2
  vram estimate --mode train --amp bf16 --grad-checkpointing --batch 4 --seq-len 2048 config.json
  vram estimate --mode generate --dtype bf16 --batch 16 --seq-len 512 --new-tokens 256 ./llama
  vram estimate --mode infer --quantize int4 --capacity 24GiB ./mistral
  vram estimate --params 7e9 --dtype bf16 --optimizer adamw --json`,
		RunE: func(cmd *cobra.Command, args []string) error { return run(cmd, f, args) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.mode, "mode", "train", "train, infer or generate")
	fl.IntVar(&f.batch, "batch", 1, "batch size")
	fl.IntVar(&f.seqLen, "seq-len", 512, "sequence length (the prompt, for generate; ignored for ViT)")
	fl.IntVar(&f.newTokens, "new-tokens", 128, "tokens to generate (generate)")
	fl.StringVar(&f.dtype, "dtype", "", "weights' dtype: fp32, bf16 or fp16 (default: the safetensors' dtype, else fp32)")
	fl.StringVar(&f.amp, "amp", "", "autocast dtype over fp32 weights: bf16 or fp16")
	fl.StringVar(&f.quantize, "quantize", "", "inference weights quantized: int8 or int4")
	fl.StringVar(&f.optimizer, "optimizer", "adamw", "adamw, adam, sgd (with momentum) or none")
	fl.BoolVar(&f.ckpt, "grad-checkpointing", false, "gradient checkpointing (train)")
	fl.StringVar(&f.capacity, "capacity", "", "report the largest batch and sequence length whose peak fits in `SIZE` (24GiB)")
	fl.StringVar(&f.params, "params", "", "no MODEL: estimate weights and states of a model of `N` parameters (7e9, 7B)")
	fl.BoolVar(&f.json, "json", false, "print the estimate as JSON, sizes in bytes")
	return cmd
}

// parseCount reads 7e9, 7000000000, 7B, 350M.
func parseCount(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	switch {
	case strings.HasSuffix(t, "B"), strings.HasSuffix(t, "b"):
		mult, t = 1e9, t[:len(t)-1]
	case strings.HasSuffix(t, "M"), strings.HasSuffix(t, "m"):
		mult, t = 1e6, t[:len(t)-1]
	case strings.HasSuffix(t, "K"), strings.HasSuffix(t, "k"):
		mult, t = 1e3, t[:len(t)-1]
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || v*mult < 1 || v*mult > 1e15 {
		return 0, fmt.Errorf("--params %q: want a parameter count such as 7e9 or 7B", s)
	}
	return uint64(v * mult), nil
}

type output struct {
	Schema            string    `json:"schema"`
	Model             string    `json:"model,omitempty"`
	Family            string    `json:"family,omitempty"`
	Mode              est.Mode  `json:"mode"`
	Batch             int       `json:"batch"`
	SeqLen            int       `json:"seq_len"`
	NewTokens         int       `json:"new_tokens,omitempty"`
	Dtype             string    `json:"dtype"`
	Quantize          string    `json:"quantize,omitempty"`
	Optimizer         string    `json:"optimizer,omitempty"`
	GradCheckpointing bool      `json:"grad_checkpointing"`
	Params            uint64    `json:"params"`
	ParamsFrom        string    `json:"params_from"`
	Peak              uint64    `json:"peak_bytes"`
	Allocated         uint64    `json:"allocated_bytes"`
	Phase             string    `json:"phase"`
	Parts             est.Parts `json:"parts"`
	Assumptions       []string  `json:"assumptions"`
	Capacity          *capJSON  `json:"capacity,omitempty"`
}

type capJSON struct {
	Bytes     uint64 `json:"capacity_bytes"`
	MaxBatch  int    `json:"max_batch"`
	MaxSeqLen int    `json:"max_seq_len,omitempty"`
	Fits      bool   `json:"fits"`
}

func run(cmd *cobra.Command, f *flags, args []string) error {
	o := est.Options{Mode: est.Mode(f.mode), Batch: f.batch, SeqLen: f.seqLen, NewTokens: f.newTokens, Dtype: f.dtype,
		AMP: f.amp, Quantize: f.quantize, Optimizer: f.optimizer, GradCheckpointing: f.ckpt}
	if o.Mode != est.Generate {
		o.NewTokens = 0
	}
	if o.Mode != est.Train {
		o.Optimizer = "none"
	}
	var capacity uint64
	if f.capacity != "" {
		c, err := units.ParseBytes(f.capacity)
		if err != nil || c == 0 {
			return cmdutil.Usagef("--capacity %q: want a size such as 24GiB", f.capacity)
		}
		capacity = c
	}
	switch {
	case f.params != "" && len(args) > 0:
		return cmdutil.Usagef("estimate: give MODEL or --params, not both")
	case f.params == "" && len(args) != 1:
		return cmdutil.Usagef("estimate: name one MODEL (a config.json or a directory holding one), or give --params N")
	}
	out := output{Schema: Schema, Mode: o.Mode, Batch: o.Batch, SeqLen: o.SeqLen, NewTokens: o.NewTokens,
		Quantize: o.Quantize, Optimizer: o.Optimizer, GradCheckpointing: o.GradCheckpointing}
	var res est.Result
	var at func(o est.Options) (est.Result, error)
	var arch *est.Arch
	if f.params != "" {
		n, err := parseCount(f.params)
		if err != nil {
			return cmdutil.Usage(err)
		}
		at = func(o est.Options) (est.Result, error) { return est.EstimateParams(n, o) }
	} else {
		a, file, err := est.LoadConfig(args[0])
		if err != nil {
			return err
		}
		t, err := est.LoadSafetensors(filepath.Dir(file))
		if err != nil {
			return err
		}
		if t.Count > 0 {
			o.Tensors = &t
		}
		out.Model, out.Family, arch = args[0], string(a.Family), &a
		at = func(o est.Options) (est.Result, error) { return est.Estimate(a, o) }
	}
	res, err := at(o)
	if err != nil {
		return cmdutil.Usage(err)
	}
	out.Dtype, out.Params, out.ParamsFrom = res.Dtype, res.Params, res.ParamsFrom
	out.Peak, out.Allocated, out.Phase, out.Parts, out.Assumptions = res.Peak, res.Allocated, res.Phase, res.Parts, res.Notes
	if capacity > 0 {
		c := &capJSON{Bytes: capacity, Fits: res.Peak <= capacity}
		if arch != nil {
			if c.MaxBatch, err = est.MaxBatch(*arch, o, capacity); err != nil {
				return err
			}
			if arch.Family != est.ViT {
				if c.MaxSeqLen, err = est.MaxSeqLen(*arch, o, capacity); err != nil {
					return err
				}
			}
		} else {
			c.MaxBatch = map[bool]int{true: 1 << 20, false: 0}[c.Fits] // no activations: the batch does not matter
		}
		out.Capacity = c
	}
	w := cmd.OutOrStdout()
	if f.json {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	return writeText(w, out)
}

func writeText(w io.Writer, o output) error {
	what := o.Model
	if what == "" {
		what = fmt.Sprintf("%s parameters", formatCount(o.Params))
	}
	fmt.Fprintf(w, "%s", what)
	if o.Family != "" {
		fmt.Fprintf(w, " (%s, %s parameters from %s)", o.Family, formatCount(o.Params), o.ParamsFrom)
	}
	fmt.Fprintf(w, "\n%s, batch %d", o.Mode, o.Batch)
	if o.Family != string(est.ViT) && o.Family != "" {
		fmt.Fprintf(w, ", %d tokens", o.SeqLen)
	}
	if o.Mode == est.Generate {
		fmt.Fprintf(w, " + %d new", o.NewTokens)
	}
	fmt.Fprintf(w, ", %s", o.Dtype)
	if o.Quantize != "" {
		fmt.Fprintf(w, ", %s weights", o.Quantize)
	}
	if o.Mode == est.Train {
		fmt.Fprintf(w, ", optimizer %s", o.Optimizer)
		if o.GradCheckpointing {
			fmt.Fprint(w, ", gradient checkpointing")
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	p := o.Parts
	for _, r := range []struct {
		name string
		v    uint64
	}{{"weights", p.Weights}, {"gradients", p.Gradients}, {"optimizer states", p.Optimizer}, {"saved activations", p.Activations},
		{"temporaries at the peak", p.Temporaries}, {"KV cache", p.KVCache}, {"CUDA context", p.Context}} {
		fmt.Fprintf(tw, "  %s\t%s\t\n", r.name, units.FormatBytes(r.v))
	}
	fmt.Fprintf(tw, "  peak (%s)\t%s\t\n", o.Phase, units.FormatBytes(o.Peak))
	fmt.Fprintf(tw, "  allocated by PyTorch\t%s\t\n", units.FormatBytes(o.Allocated))
	if err := tw.Flush(); err != nil {
		return err
	}
	if c := o.Capacity; c != nil {
		verdict := "fits in"
		if !c.Fits {
			verdict = "does not fit in"
		}
		fmt.Fprintf(w, "\n%s %s; largest batch that fits: %d", verdict, units.FormatBytes(c.Bytes), c.MaxBatch)
		if c.MaxSeqLen > 0 {
			fmt.Fprintf(w, "; longest sequence at batch %d: %d", o.Batch, c.MaxSeqLen)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nassumptions:")
	for _, a := range o.Assumptions {
		fmt.Fprintf(w, "  - %s\n", a)
	}
	return nil
}

// formatCount prints a parameter count: 124.44M, 1.10B.
func formatCount(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2fB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.2fM", float64(n)/1e6)
	}
	return strconv.FormatUint(n, 10)
}
