package estimate_test

import (
	"fmt"

	"github.com/vramhq/vram/estimate"
)

// A GPT-2 training step at 8 × 512 tokens in fp32 with AdamW.
func ExampleEstimate() {
	a, err := estimate.ParseConfig([]byte(`{"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	r, err := estimate.Estimate(a, estimate.Options{Mode: estimate.Train, Batch: 8, SeqLen: 512, Optimizer: "adamw"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d parameters; peak at the %s; weights %d MiB, optimizer states %d MiB\n",
		r.Params, r.Phase, r.Parts.Weights>>20, r.Parts.Optimizer>>20)
	// Output: 124439808 parameters; peak at the backward start; weights 474 MiB, optimizer states 949 MiB
}
