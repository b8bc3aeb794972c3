package estimate

// Params counts a model's parameters from its shape, as transformers builds
// it: the head named in the docs (causal LM for the decoders, masked LM for
// BERT, image classification for ViT), tied weights counted once.
type Params struct {
	Total uint64
	// Linear is the parameters of the matrix multiplications (the weights
	// autocast casts and quantization packs; the output projection
	// included), LMHead the output projection's (a share of Linear, or of
	// the embedding when tied), Embed the embedding tables'.
	Linear, LMHead, Embed uint64
	// LargestLinear is the largest single matrix (int4 dequantizes one at
	// a time).
	LargestLinear uint64
}

// CountParams counts a's parameters.
func CountParams(a Arch) Params {
	H, I, L := u(a.Hidden), u(a.Inter), u(a.Layers)
	q, kv := u(a.Heads*a.HeadDim), u(a.KVHeads*a.HeadDim)
	V := u(a.Vocab)
	var p Params
	linear := func(in, out uint64, bias bool) uint64 {
		p.Linear += in * out
		p.LargestLinear = max(p.LargestLinear, in*out)
		if bias {
			return in*out + out
		}
		return in * out
	}
	var perLayer, other uint64
	switch a.Family {
	case GPT2:
		p.Embed = V*H + u(a.MaxPos)*H
		for range a.Layers {
			perLayer = 2*H + linear(H, 3*H, true) + linear(H, H, true) + 2*H + linear(H, I, true) + linear(I, H, true)
		}
		other = 2 * H // ln_f
		p.LMHead = V * H
		if !a.Tied {
			other += linear(H, V, false)
		} else {
			p.Linear += V * H
		}
	case Llama:
		p.Embed = V * H
		for range a.Layers {
			perLayer = linear(H, q, a.QKVBias) + 2*linear(H, kv, a.QKVBias) + linear(q, H, false) +
				2*linear(H, I, false) + linear(I, H, false) + 2*H
			if a.QKNorm {
				perLayer += 2 * u(a.HeadDim)
			}
		}
		other = H
		p.LMHead = V * H
		if !a.Tied {
			other += linear(H, V, false)
		} else {
			p.Linear += V * H
		}
	case BERT:
		p.Embed = V*H + u(a.MaxPos)*H + u(a.TypeVocab)*H
		other = 2 * H // embeddings' LayerNorm
		for range a.Layers {
			perLayer = 4*linear(H, H, true) + 2*H + linear(H, I, true) + linear(I, H, true) + 2*H
		}
		// Masked-LM head: transform (dense + LayerNorm), decoder tied to
		// the word embeddings, with its own bias.
		other += linear(H, H, true) + 2*H + V
		p.LMHead = V * H
		if !a.Tied {
			other += linear(H, V, false)
		} else {
			p.Linear += V * H
		}
	case ViT:
		n := u(a.ImageSize / a.PatchSize)
		patch := u(a.Channels*a.PatchSize*a.PatchSize) * H
		p.Embed = H + (n*n+1)*H // class token, positions
		other = patch + H       // patch projection (a convolution) and its bias
		p.Linear += patch
		for range a.Layers {
			perLayer = 2*H + 4*linear(H, H, true) + linear(H, I, true) + linear(I, H, true) + 2*H
		}
		other += 2*H + linear(H, u(a.Labels), true) // final LayerNorm, classifier
	}
	p.Total = p.Embed + L*perLayer + other
	return p
}

func u(n int) uint64 { return uint64(max(n, 0)) }
