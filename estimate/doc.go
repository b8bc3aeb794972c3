// Package estimate predicts the peak device memory of a training step, a
// forward pass or text generation of a Hugging Face model before anything
// runs: from its config.json (and, when present, the headers of its
// safetensors files for the exact parameter count and dtype), the batch,
// the sequence length and the precision.
//
// The estimate is a sum of parts (Parts): weights, gradients, optimizer
// states, saved activations, temporaries at the peak, the KV cache and the
// CUDA context. The parts come from an account of what PyTorch keeps alive,
// layer by layer, for each family (model.go): GPT-2; LLaMA-style decoders
// (Mistral, Qwen2/3: grouped-query attention, tied or untied embeddings);
// BERT-style encoders; ViT. For training, the peak is the largest of three
// moments: the start of the backward pass (every saved activation and the
// loss's fp32 log-probabilities and gradients), the recomputation of a
// checkpointed block, and the optimizer step (every gradient, the states
// and foreach Adam's temporary). For inference it is the last layer's
// working set or the logits, with the KV cache transformers returns; for
// generation, the prefill or the last decoding step.
//
// Allocated is comparable with torch.cuda.max_memory_allocated: the CUDA
// context is outside it, and PyTorch's cache may reserve more
// (fragmentation). The assumptions are PyTorch 2.x and transformers'
// defaults (SDPA attention); docs/estimate.md states them and compares the
// estimate with measurements.
//
// EstimateParams covers any other model by its parameter count: weights and
// optimizer states only.
package estimate
