package estimate

// The memory model, family by family. Sizes are bytes per token (one
// position of one sample) unless said otherwise. c is the compute dtype's
// size (2 under autocast), r the residual stream's (fp32 under autocast), w
// the weights'. "Saved" is what autograd keeps from the forward pass for
// the backward pass; "live" is what is alive at once in a forward pass
// without gradients. See docs/estimate.md for the derivation.

import "fmt"

type model struct {
	a      Arch
	o      Options
	p      precision
	pc     Params
	params float64
}

func (m model) H() float64  { return float64(m.a.Hidden) }
func (m model) Hq() float64 { return float64(m.a.Heads * m.a.HeadDim) }
func (m model) KV() float64 { return float64(m.a.KVHeads * m.a.HeadDim) }
func (m model) I() float64  { return float64(m.a.Inter) }
func (m model) V() float64  { return float64(m.a.Vocab) }
func (m model) L() float64  { return float64(m.a.Layers) }

// mask is the bytes of a dropout mask per element (1: a bool), 0 without
// dropout.
func (m model) mask() float64 {
	if m.o.Mode == Train && m.a.Dropout > 0 {
		return 1
	}
	return 0
}

// lse is the attention kernel's log-sum-exp, kept for backward (fp32, one
// per head).
func (m model) lse() float64 { return 4 * float64(m.a.Heads) }

// casts is the bytes of the inputs of n linear layers that read the same
// tensor: under autocast each casts it to half on its own; otherwise they
// share it.
func (m model) casts(n float64) float64 {
	if m.p.amp {
		return n * m.p.c * m.H()
	}
	return m.p.r * m.H()
}

// layerSaved is one layer's saved activations per token.
func (m model) layerSaved() float64 {
	c, r, H, I, d := m.p.c, m.p.r, m.H(), m.I(), m.mask()
	switch m.a.Family {
	case GPT2:
		// ln_1 input, c_attn input, qkv (the attention keeps q, a view of
		// it, so all of it stays), attention output (also c_proj's input),
		// dropout mask, ln_2 input, c_fc input, gelu_new (geluSaved),
		// dropout mask.
		s := 2*r*H + c*H + 3*c*H + c*H + d*H + c*H + m.geluSaved() + d*H + m.lse()
		if m.cacheInTraining() {
			// The attention reads k and v from the DynamicCache, which
			// holds contiguous copies (torch.cat onto an empty tensor):
			// those are what it saves, beside the qkv that q keeps.
			s += 2 * c * H
		}
		return s
	case BERT:
		// q, k, v inputs, q, k, v, attention output, dropout mask,
		// LayerNorm input, its output (intermediate's input), GELU input
		// and output, dropout mask, LayerNorm input.
		return m.casts(3) + 3*c*H + c*H + d*H + r*H + c*H + 2*c*I + d*H + r*H + m.lse()
	case ViT:
		// LayerNorm input, q, k, v inputs, q, k, v, attention output,
		// LayerNorm input, intermediate's input, GELU input and output.
		return r*H + m.casts(3) + 3*c*H + c*H + r*H + c*H + 2*c*I + 2*d*H + m.lse()
	case Llama:
		// RMSNorm keeps its input in fp32 and the normalized value in the
		// input's dtype, twice; q, k, v projections' input; the attention's
		// q, k (after RoPE) and v; its output (o_proj's input); gate/up
		// input; SwiGLU: gate, silu(gate), up, their product.
		Hq, KV := m.Hq(), m.KV()
		s := 2*(4*H+r*H) + m.casts(3) + c*(Hq+2*KV) + c*Hq + m.casts(2) + 4*c*I + m.lse()
		if m.a.QKNorm {
			s += (4 + r) * (Hq + KV)
		}
		return s
	}
	return 0
}

// geluDtype is the bytes per element of gelu_new's tanh chain. It is
// unfused Python, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))): under
// autocast torch.pow is on the fp32 list, so x³ and everything computed
// from it (the sum, tanh, 1 + tanh) are fp32 even though x is half;
// without autocast they have x's dtype.
func (m model) geluDtype() float64 {
	if m.p.amp {
		return 4
	}
	return m.p.c
}

// geluSaved is what gelu_new saves per token: pow's input (its fp32 cast
// under autocast, x itself otherwise), tanh's output and 1 + tanh in the
// chain's dtype; 0.5·x in x's dtype; and c_proj's input, the output in
// the compute dtype (cast back to half under autocast).
func (m model) geluSaved() float64 {
	return (3*m.geluDtype() + 2*m.p.c) * m.I()
}

// cacheInTraining: a decoder whose config keeps use_cache builds a KV
// cache in its training forward pass too, unless gradient checkpointing
// is on (transformers then turns use_cache off).
func (m model) cacheInTraining() bool {
	return m.o.Mode == Train && m.useCache() && !m.o.GradCheckpointing
}

// embedSaved and tailSaved are what the embeddings and the layers after the
// last block (final norm, head) save per token.
func (m model) embedSaved() float64 {
	c, r, H, d := m.p.c, m.p.r, m.H(), m.mask()
	switch m.a.Family {
	case GPT2:
		return d * H
	case BERT:
		return r*H + d*H
	case ViT:
		px := float64(m.a.Channels * m.a.PatchSize * m.a.PatchSize)
		if m.p.amp {
			return px * c
		}
		return 0 // the convolution keeps the input images, counted with the inputs
	}
	return 0
}

func (m model) tailSaved() float64 {
	c, r, H := m.p.c, m.p.r, m.H()
	switch m.a.Family {
	case GPT2:
		return r*H + c*H
	case BERT:
		ln := c * H
		if m.p.amp {
			ln = 4 * H
		}
		return c*H + c*H + ln + c*H
	case ViT:
		return r * H
	case Llama:
		return 4*H + r*H + m.casts(1)
	}
	return 0
}

// inputs is the batch itself on the GPU, per token: token ids (int64, and
// labels in training) or the images (fp32).
func (m model) inputs() float64 {
	if m.a.Family == ViT {
		return 4 * float64(m.a.Channels*m.a.PatchSize*m.a.PatchSize)
	}
	if m.o.Mode == Train {
		return 16
	}
	return 8
}

// lossPeak is the loss's memory at the start of the backward pass, per
// token: the fp32 log-probabilities, their gradient and the logits'
// gradient, V each (transformers casts the logits to fp32 for the loss).
func (m model) lossPeak() float64 {
	if m.a.Family == ViT {
		return 0
	}
	return 12 * m.V()
}

// layerLive is the most one layer holds at once without gradients, per
// token, the residual stream included.
func (m model) layerLive() float64 {
	c, r, H, I := m.p.c, m.p.r, m.H(), m.I()
	switch m.a.Family {
	case GPT2:
		// gelu_new: its input and 0.5·x, and two temporaries of the tanh
		// chain (fp32 under autocast).
		return r*H + (2*c+2*m.geluDtype())*I
	case BERT, ViT:
		return r*H + r*H + 2*c*I
	case Llama:
		return 2*r*H + 3*c*I // silu(gate), up, product
	}
	return 0
}

// kvPerToken is the KV cache per token and layer as transformers keeps it
// after the prefill, and after the first decoding step (contiguous).
func (m model) kvPerToken() (prefill, decode float64) {
	c := m.p.c
	switch m.a.Family {
	case GPT2:
		// DynamicCache concatenates each layer's k and v onto an empty
		// tensor: contiguous copies, and the fused qkv output is freed
		// with its layer.
		return 2 * c * m.H(), 2 * c * m.H()
	case Llama:
		k := c
		if m.p.amp {
			k = 4 // RoPE with fp32 cos/sin promotes k to fp32 under autocast
		}
		return (k + c) * m.KV(), (k + c) * m.KV()
	}
	return 0, 0
}

// useCache: transformers' decoders return a KV cache from a plain forward
// pass too (use_cache defaults to true in their configs).
func (m model) useCache() bool { return (m.a.Family == GPT2 || m.a.Family == Llama) && m.a.UseCache }

// weights is the weights' bytes, quantized linear layers included.
func (m model) weights() float64 {
	w := m.params * m.p.w
	if q := m.o.Quantize; q != "" {
		packed := float64(m.pc.Linear - m.pc.LMHead)
		if m.a.Family == ViT {
			packed -= float64(m.a.Channels*m.a.PatchSize*m.a.PatchSize) * m.H()
		}
		packed = min(max(packed, 0), m.params)
		w = (m.params-packed)*m.p.w + packed*quantBytes(q)
	}
	return w
}

// ampCache is autocast's half copies of the weights (cached for the
// autocast region, and kept by the backward pass).
func (m model) ampCache() float64 {
	if !m.p.amp {
		return 0
	}
	if m.o.Mode == Train && m.o.GradCheckpointing {
		// The checkpointed layers' copies are freed with the forward
		// pass; the head's are kept.
		return 2 * float64(m.pc.LMHead)
	}
	return 2 * float64(m.pc.Linear)
}

func (m model) peak() (Parts, string, uint64) {
	switch m.o.Mode {
	case Train:
		return m.train()
	case Generate:
		return m.generate()
	}
	return m.infer()
}

func (m model) train() (Parts, string, uint64) {
	T := float64(m.o.Batch) * float64(m.a.Tokens(m.o.SeqLen))
	W := m.weights()
	G := m.params * m.p.w
	St := m.params * m.p.w * optStates(m.o.Optimizer)
	ws := float64(2 * Workspace)
	layer := m.layerSaved() * T
	ckptIn := m.p.r * m.H() * T
	A := (m.embedSaved()+m.tailSaved()+m.inputs())*T + m.L()*layer
	if m.o.GradCheckpointing {
		A = (m.embedSaved()+m.tailSaved()+m.inputs())*T + m.L()*ckptIn
	}
	amp := m.ampCache()
	flow := 2 * m.p.r * m.H() * T // the gradient flowing down, and the next one
	best := Parts{Weights: b(W), Optimizer: b(St), Activations: b(A), Temporaries: b(amp + m.lossPeak()*T + ws)}
	phase := "backward start"
	total := W + St + A + amp + m.lossPeak()*T + ws
	if m.o.GradCheckpointing {
		// Recomputing the top layer: its activations on top of the
		// checkpoints, the head's gradients, and its weight copies.
		head := float64(m.pc.LMHead) * m.p.w
		ampLayer := 0.0
		if m.p.amp {
			ampLayer = 2 * float64(m.pc.Linear-m.pc.LMHead) / m.L()
		}
		if t := W + St + A + layer + head + flow + ampLayer + amp + ws; t > total {
			total, phase = t, "recompute"
			best = Parts{Weights: b(W), Gradients: b(head), Optimizer: b(St), Activations: b(A + layer), Temporaries: b(flow + ampLayer + amp + ws)}
		}
	}
	// The optimizer step: every gradient, the states, and foreach Adam's
	// one parameter-sized temporary (sqrt of exp_avg_sq); or the tied
	// embedding's second gradient at the end of the backward pass.
	tmp := 0.0
	if m.o.Optimizer == "adam" || m.o.Optimizer == "adamw" {
		tmp = m.params * m.p.w
	}
	if m.a.Tied {
		tmp = max(tmp, m.V()*m.H()*m.p.w)
	}
	if t := W + G + St + tmp + ws; t > total {
		phase = "optimizer step"
		best = Parts{Weights: b(W), Gradients: b(G), Optimizer: b(St), Temporaries: b(tmp + ws)}
	}
	return best, phase, 2 * Workspace
}

func (m model) infer() (Parts, string, uint64) {
	T := float64(m.o.Batch) * float64(m.a.Tokens(m.o.SeqLen))
	W := m.weights() + m.ampCache()
	ws := float64(Workspace) + m.dequant()
	in := m.inputs() * T
	var kv float64
	if m.useCache() {
		p, _ := m.kvPerToken()
		kv = p * m.L() * T
	}
	// Inside the last layer, the cache of every layer before it is kept.
	fwd := W + kv + m.layerLive()*T + in + ws
	out, phase := fwd, "forward"
	parts := Parts{Weights: b(m.weights()), KVCache: b(kv), Activations: b(in + m.layerLive()*T), Temporaries: b(m.ampCache() + ws)}
	if m.a.Family != ViT {
		logits := (m.p.c*m.V() + m.p.r*m.H()) * T
		if t := W + kv + logits + in + ws; t > out {
			out, phase = t, "output"
			parts = Parts{Weights: b(m.weights()), KVCache: b(kv), Activations: b(in + logits), Temporaries: b(m.ampCache() + ws)}
		}
	}
	_ = out
	return parts, phase, Workspace
}

func (m model) generate() (Parts, string, uint64) {
	B, S, N := float64(m.o.Batch), float64(m.o.SeqLen), float64(m.o.NewTokens)
	W := m.weights()
	ws := float64(Workspace) + m.dequant()
	pre, dec := m.kvPerToken()
	kvPre := pre * m.L() * B * S
	logits := B * (m.p.c + 4) * m.V() // the last position's logits, and their fp32 copy
	prefill := W + m.ampCache() + kvPre + m.layerLive()*B*S + logits + 8*B*S + ws
	parts := Parts{Weights: b(W), KVCache: b(kvPre), Activations: b(m.layerLive()*B*S + logits + 8*B*S), Temporaries: b(m.ampCache() + ws)}
	phase := "prefill"
	// The last step: the cache at S+N positions, and one layer's K and V
	// concatenated anew beside the old ones.
	kvEnd := dec * m.L() * B * (S + N)
	step := dec * B * (S + N)
	if t := W + m.ampCache() + kvEnd + step + m.layerLive()*B + logits + 8*B*(S+N) + ws; t > prefill {
		phase = "decode"
		parts = Parts{Weights: b(W), KVCache: b(kvEnd), Activations: b(m.layerLive()*B + logits + 8*B*(S+N)), Temporaries: b(step + m.ampCache() + ws)}
	}
	return parts, phase, Workspace
}

// dequant is int4's temporary: one linear layer's weights dequantized to
// the compute dtype.
func (m model) dequant() float64 {
	if m.o.Quantize != "int4" {
		return 0
	}
	return max(m.H()*m.I(), m.H()*m.Hq()) * m.p.c
}

func (m model) notes() []string {
	n := []string{
		"PyTorch 2.x, transformers' defaults: SDPA attention on a fused kernel (flash or memory-efficient: no S×S matrix), dropout and use_cache as in the config",
	}
	switch m.o.Mode {
	case Train:
		n = append(n, fmt.Sprintf("training loop: loss = model(..., labels=...).loss; loss.backward(); opt.step(); opt.zero_grad(set_to_none=True); optimizer %s (foreach)", m.o.Optimizer))
		if m.o.GradCheckpointing {
			n = append(n, "gradient checkpointing as transformers enables it: each block keeps only its input and is recomputed in the backward pass")
		}
	case Infer:
		n = append(n, "forward pass without gradients (torch.no_grad or inference_mode), logits for every position")
	case Generate:
		n = append(n, "model.generate, greedy, DynamicCache; the prefill computes the last position's logits only")
	}
	if m.p.amp {
		n = append(n, "autocast keeps a half copy of every weight it casts for the whole forward (and backward) pass")
	}
	if m.o.Quantize != "" {
		n = append(n, "quantized weights as bitsandbytes packs them ("+m.o.Quantize+"), the output layer and norms left in the compute dtype; not measured")
	}
	n = append(n, "allocated memory only: PyTorch's cache can reserve 7–140 % more (fragmentation), and the CUDA context comes on top")
	return n
}
