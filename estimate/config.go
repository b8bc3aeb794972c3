package estimate

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Family is a model architecture the estimator knows layer by layer.
type Family string

// The families.
const (
	GPT2  Family = "gpt2"  // GPT-2: learned positions, LayerNorm, fused QKV, GELU (tanh), dropout
	Llama Family = "llama" // LLaMA, Mistral, Qwen2/3: RMSNorm, RoPE, grouped-query attention, SwiGLU
	BERT  Family = "bert"  // BERT, RoBERTa: post-LayerNorm encoder, GELU, masked-LM head
	ViT   Family = "vit"   // ViT: pre-LayerNorm encoder on image patches, classification head
)

// Arch is the shape of a model, read from its config.json.
type Arch struct {
	Family    Family
	ModelType string // config's model_type
	Layers    int
	Hidden    int
	Heads     int
	KVHeads   int // = Heads without grouped-query attention
	HeadDim   int
	Inter     int // the MLP's inner width
	Vocab     int
	MaxPos    int // longest sequence (0: no limit stated)
	// Tied: the output projection shares the input embedding's weights.
	Tied bool
	// QKVBias: the q, k, v projections have biases (Qwen2); QKNorm:
	// RMSNorm on each head's q and k (Qwen3).
	QKVBias, QKNorm bool
	TypeVocab       int     // BERT's token types
	Dropout         float64 // hidden/residual dropout in training
	// UseCache: a decoder's forward pass builds a KV cache (the config's
	// use_cache, true unless it says otherwise; transformers turns it off
	// under gradient checkpointing).
	UseCache bool
	// ViT.
	ImageSize, PatchSize, Channels, Labels int
	// Dtype is the config's torch_dtype ("" when not stated).
	Dtype string
}

// Tokens is the sequence length of one sample: the patches plus the class
// token for ViT, seq otherwise.
func (a Arch) Tokens(seq int) int {
	if a.Family == ViT {
		n := a.ImageSize / a.PatchSize
		return n*n + 1
	}
	return seq
}

// config is the part of a Hugging Face config.json the estimator reads.
type config map[string]json.RawMessage

// LoadConfig reads MODEL: a config.json, or a directory holding one.
func LoadConfig(path string) (Arch, string, error) {
	file := path
	if st, err := os.Stat(path); err != nil {
		return Arch{}, "", fmt.Errorf("model %s: %w", path, err)
	} else if st.IsDir() {
		file = filepath.Join(path, "config.json")
	}
	b, err := os.ReadFile(file)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) && file != path {
			return Arch{}, "", fmt.Errorf("model %s: no config.json in the directory", path)
		}
		return Arch{}, "", fmt.Errorf("model: %w", err)
	}
	a, err := ParseConfig(b)
	if err != nil {
		return Arch{}, "", fmt.Errorf("%s: %w", file, err)
	}
	return a, file, nil
}

// ParseConfig reads a Hugging Face config.json. Errors name the field.
func ParseConfig(b []byte) (Arch, error) {
	var c config
	if err := json.Unmarshal(b, &c); err != nil {
		return Arch{}, fmt.Errorf("not a JSON object: %v", err)
	}
	mt, err := c.str("model_type", "")
	if err != nil {
		return Arch{}, err
	}
	if mt == "" {
		return Arch{}, errors.New(`field "model_type" is missing: the estimator needs it to know the architecture (or use --params N)`)
	}
	a := Arch{ModelType: mt}
	if a.Dtype, err = c.str("torch_dtype", ""); err != nil {
		return Arch{}, err
	}
	if a.Dtype == "" {
		if a.Dtype, err = c.str("dtype", ""); err != nil {
			return Arch{}, err
		}
	}
	var errs []error
	geti := func(def int, names ...string) int {
		v, err := c.int(def, names...)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	getf := func(name string, def float64) float64 {
		v, err := c.float(name, def)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	getb := func(name string, def bool) bool {
		v, err := c.bool(name, def)
		if err != nil {
			errs = append(errs, err)
		}
		return v
	}
	switch mt {
	case "gpt2":
		a.Family = GPT2
		a.Layers = geti(12, "n_layer")
		a.Hidden = geti(768, "n_embd")
		a.Heads = geti(12, "n_head")
		a.Vocab = geti(50257, "vocab_size")
		a.MaxPos = geti(1024, "n_positions")
		a.Inter = geti(0, "n_inner")
		if a.Inter == 0 {
			a.Inter = 4 * a.Hidden
		}
		a.Tied = getb("tie_word_embeddings", true)
		a.Dropout = getf("resid_pdrop", 0.1)
		a.UseCache = getb("use_cache", true)
	case "llama", "mistral", "qwen2", "qwen3":
		a.Family = Llama
		a.Layers = geti(-1, "num_hidden_layers")
		a.Hidden = geti(-1, "hidden_size")
		a.Heads = geti(-1, "num_attention_heads")
		a.KVHeads = geti(0, "num_key_value_heads")
		a.Inter = geti(-1, "intermediate_size")
		a.Vocab = geti(-1, "vocab_size")
		a.MaxPos = geti(0, "max_position_embeddings")
		a.HeadDim = geti(0, "head_dim")
		a.Tied = getb("tie_word_embeddings", false)
		a.QKVBias = mt == "qwen2" || getb("attention_bias", false)
		a.QKNorm = mt == "qwen3"
		a.UseCache = getb("use_cache", true)
	case "bert", "roberta":
		a.Family = BERT
		a.Layers = geti(12, "num_hidden_layers")
		a.Hidden = geti(768, "hidden_size")
		a.Heads = geti(12, "num_attention_heads")
		a.Inter = geti(3072, "intermediate_size")
		a.Vocab = geti(-1, "vocab_size")
		a.MaxPos = geti(512, "max_position_embeddings")
		a.TypeVocab = geti(2, "type_vocab_size")
		a.Tied = getb("tie_word_embeddings", true)
		a.Dropout = getf("hidden_dropout_prob", 0.1)
	case "vit":
		a.Family = ViT
		a.Layers = geti(12, "num_hidden_layers")
		a.Hidden = geti(768, "hidden_size")
		a.Heads = geti(12, "num_attention_heads")
		a.Inter = geti(3072, "intermediate_size")
		a.ImageSize = geti(224, "image_size")
		a.PatchSize = geti(16, "patch_size")
		a.Channels = geti(3, "num_channels")
		a.Dropout = getf("hidden_dropout_prob", 0)
		a.Labels = geti(0, "num_labels")
		if a.Labels == 0 {
			if raw, ok := c["id2label"]; ok {
				var m map[string]any
				if json.Unmarshal(raw, &m) != nil {
					errs = append(errs, errors.New(`field "id2label": want an object`))
				}
				a.Labels = len(m)
			}
		}
		if a.Labels == 0 {
			a.Labels = 2 // transformers' default
		}
	default:
		return Arch{}, fmt.Errorf("model_type %q: not a family the estimator knows (gpt2, llama, mistral, qwen2, qwen3, bert, roberta, vit); use --params N for weights and optimizer states only", mt)
	}
	if err := errors.Join(errs...); err != nil {
		return Arch{}, err
	}
	if a.KVHeads == 0 {
		a.KVHeads = a.Heads
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"layers", a.Layers}, {"hidden size", a.Hidden}, {"attention heads", a.Heads}, {"intermediate size", a.Inter}} {
		if f.v <= 0 {
			return Arch{}, fmt.Errorf("the %s is missing or not positive (%d)", f.name, f.v)
		}
	}
	if a.Family != ViT && a.Vocab <= 0 {
		return Arch{}, fmt.Errorf(`field "vocab_size" is missing or not positive (%d)`, a.Vocab)
	}
	if a.HeadDim == 0 {
		if a.Hidden%a.Heads != 0 {
			return Arch{}, fmt.Errorf("hidden size %d is not a multiple of the %d attention heads", a.Hidden, a.Heads)
		}
		a.HeadDim = a.Hidden / a.Heads
	}
	if a.Heads%a.KVHeads != 0 {
		return Arch{}, fmt.Errorf(`field "num_key_value_heads": %d does not divide the %d attention heads`, a.KVHeads, a.Heads)
	}
	if a.Family == ViT && (a.PatchSize <= 0 || a.ImageSize < a.PatchSize || a.Channels <= 0 || a.Labels < 0) {
		return Arch{}, fmt.Errorf("image_size %d, patch_size %d, num_channels %d: want 0 < patch_size ≤ image_size and channels > 0", a.ImageSize, a.PatchSize, a.Channels)
	}
	if a.Dropout < 0 || a.Dropout >= 1 {
		return Arch{}, fmt.Errorf("dropout %g: want 0 ≤ p < 1", a.Dropout)
	}
	return a, nil
}

// limit is a bound on config sizes: a config with a billion layers is a
// mistake, and the arithmetic stays within float64's exact integers.
const limit = 1 << 24

func (c config) int(def int, names ...string) (int, error) {
	for _, n := range names {
		raw, ok := c[n]
		if !ok || string(raw) == "null" {
			continue
		}
		var f float64
		if err := json.Unmarshal(raw, &f); err != nil || f != math.Trunc(f) {
			return 0, fmt.Errorf("field %q: want a whole number, got %s", n, short(raw))
		}
		if f < 0 || f > limit {
			return 0, fmt.Errorf("field %q: %g is out of range (0 to %d)", n, f, limit)
		}
		return int(f), nil
	}
	if def < 0 {
		return 0, fmt.Errorf("field %q is missing", names[0])
	}
	return def, nil
}

func (c config) float(name string, def float64) (float64, error) {
	raw, ok := c[name]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return 0, fmt.Errorf("field %q: want a number, got %s", name, short(raw))
	}
	return f, nil
}

func (c config) bool(name string, def bool) (bool, error) {
	raw, ok := c[name]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var v bool
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, fmt.Errorf("field %q: want true or false, got %s", name, short(raw))
	}
	return v, nil
}

func (c config) str(name, def string) (string, error) {
	raw, ok := c[name]
	if !ok || string(raw) == "null" {
		return def, nil
	}
	var v string
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("field %q: want a string, got %s", name, short(raw))
	}
	return v, nil
}

func short(raw json.RawMessage) string {
	s := strings.TrimSpace(string(raw))
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	return s
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
