package estimate

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func load(t *testing.T, name string) Arch {
	t.Helper()
	a, _, err := LoadConfig(filepath.Join("testdata", "models", name))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The parameter counts of the test configs against the published counts
// of the models they copy (transformers' num_parameters()).
func TestCountParamsMatchesPublishedCounts(t *testing.T) {
	tests := []struct {
		model string
		want  uint64
	}{
		{"gpt2", 124439808},        // GPT2LMHeadModel, gpt2
		{"gpt2-medium", 354823168}, // gpt2-medium
		{"qwen2-0.5b", 494032768},  // Qwen2-0.5B, tied embeddings
		{"bert-base", 109514298},   // BertForMaskedLM, bert-base-uncased
		{"vit-base", 86567656},     // ViTForImageClassification, vit-base-patch16-224
	}
	for _, tt := range tests {
		if got := CountParams(load(t, tt.model)).Total; got != tt.want {
			t.Errorf("%s: %d parameters, want %d", tt.model, got, tt.want)
		}
	}
	// Untied LLaMA: the head adds V·H.
	a := load(t, "llama-1b")
	tied := a
	tied.Tied = true
	if d := CountParams(a).Total - CountParams(tied).Total; d != uint64(a.Vocab*a.Hidden) {
		t.Errorf("untied head adds %d, want %d", d, a.Vocab*a.Hidden)
	}
}

func TestParseConfigErrorsNameTheField(t *testing.T) {
	tests := []struct{ in, want string }{
		{`[1]`, "not a JSON object"},
		{`{}`, `"model_type" is missing`},
		{`{"model_type": "t5"}`, `model_type "t5": not a family`},
		{`{"model_type": 5}`, `field "model_type": want a string`},
		{`{"model_type": "llama", "hidden_size": 64}`, `field "num_hidden_layers" is missing`},
		{`{"model_type": "gpt2", "n_layer": "twelve"}`, `field "n_layer": want a whole number, got "twelve"`},
		{`{"model_type": "gpt2", "n_layer": 1.5}`, `field "n_layer": want a whole number`},
		{`{"model_type": "gpt2", "n_embd": -8}`, `field "n_embd": -8 is out of range`},
		{`{"model_type": "gpt2", "n_head": 7}`, "not a multiple of the 7 attention heads"},
		{`{"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 3, "intermediate_size": 128, "vocab_size": 10}`, `"num_key_value_heads": 3 does not divide`},
		{`{"model_type": "gpt2", "tie_word_embeddings": "yes"}`, `field "tie_word_embeddings": want true or false`},
		{`{"model_type": "vit", "patch_size": 0}`, "patch_size 0"},
		{`{"model_type": "bert", "vocab_size": 0}`, `"vocab_size" is missing or not positive`},
	}
	for _, tt := range tests {
		_, err := ParseConfig([]byte(tt.in))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err %v, want %q", tt.in, err, tt.want)
		}
	}
	// LoadConfig names the file.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"model_type": "gpt2", "n_layer": "x"}`), 0o644)
	if _, _, err := LoadConfig(dir); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "config.json")+`: field "n_layer"`) {
		t.Errorf("err %v", err)
	}
	if _, _, err := LoadConfig(t.TempDir()); err == nil || !strings.Contains(err.Error(), "no config.json") {
		t.Errorf("empty dir: err %v", err)
	}
}

// safetensorsFile builds a file: the header JSON, then size bytes of data.
func safetensorsFile(header string, size int) []byte {
	var buf bytes.Buffer
	binary.Write(&buf, binary.LittleEndian, uint64(len(header)))
	buf.WriteString(header)
	buf.Write(make([]byte, size))
	return buf.Bytes()
}

func TestSafetensorsHeader(t *testing.T) {
	good := `{"__metadata__": {"format": "pt"}, "a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}, "b": {"dtype": "F32", "shape": [3], "data_offsets": [64, 76]}}`
	f := safetensorsFile(good, 76)
	got, err := ParseSafetensorsHeader(bytes.NewReader(f), int64(len(f)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Count != 2 || got.Params != 35 || got.Bytes != 76 || got.Dtype() != "BF16" {
		t.Errorf("%+v", got)
	}
	bad := []struct {
		file []byte
		want string
	}{
		{[]byte{1, 2, 3}, "shorter than its 8-byte header length"},
		{safetensorsFile(good, 76)[:20], "runs past the end of the 20-byte file"},
		{safetensorsFile(good, 10), "past the file's"},
		{safetensorsFile(`{"a": {"dtype": "Q9", "shape": [1], "data_offsets": [0, 1]}}`, 1), `unknown dtype "Q9"`},
		{safetensorsFile(`{"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}`, 4), "4 bytes of data for 2 elements of F32 (want 8)"},
		{safetensorsFile(`{"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}`, 4), "begin ≤ end"},
		{safetensorsFile(`{"a": {"dtype": "U8", "shape": [4], "data_offsets": [0, 4]}, "b": {"dtype": "U8", "shape": [4], "data_offsets": [2, 6]}}`, 6), "overlap"},
		{safetensorsFile(`not json`, 0), "not a JSON object"},
		{safetensorsFile(`{"a": 3}`, 0), `tensor "a"`},
		{safetensorsFile(`{"__metadata__": {"x": 1}}`, 0), "__metadata__"},
		{safetensorsFile(`{"a": {"dtype": "F32", "shape": [4294967296, 4294967296, 4294967296], "data_offsets": [0, 0]}}`, 0), "too large"},
	}
	for _, tt := range bad {
		_, err := ParseSafetensorsHeader(bytes.NewReader(tt.file), int64(len(tt.file)))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("err %v, want %q", err, tt.want)
		}
	}
	if _, err := ParseSafetensorsHeader(bytes.NewReader(safetensorsFile(good, 76)[:20]), 0); err == nil || !strings.Contains(err.Error(), "cut short") {
		t.Errorf("a short header, size unknown: %v", err)
	}
	var huge [8]byte
	binary.LittleEndian.PutUint64(huge[:], 1<<40)
	if _, err := ParseSafetensorsHeader(bytes.NewReader(huge[:]), 0); err == nil || !strings.Contains(err.Error(), "header length") {
		t.Errorf("huge header: %v", err)
	}
	// A directory of shards adds up; the estimate then uses their count.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), f, 0o644)
	os.WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), f, 0o644)
	all, err := LoadSafetensors(dir)
	if err != nil || all.Params != 70 || len(all.Files) != 2 {
		t.Errorf("shards: %+v, %v", all, err)
	}
	os.WriteFile(filepath.Join(dir, "z.safetensors"), []byte("junk"), 0o644)
	if _, err := LoadSafetensors(dir); err == nil || !strings.Contains(err.Error(), "z.safetensors") {
		t.Errorf("a bad shard is not named: %v", err)
	}
}

func FuzzSafetensorsHeader(f *testing.F) {
	f.Add(safetensorsFile(`{"a": {"dtype": "BF16", "shape": [4, 8], "data_offsets": [0, 64]}}`, 64))
	f.Add(safetensorsFile(`{"__metadata__": {}, "b": {"dtype": "F4", "shape": [3], "data_offsets": [0, 2]}}`, 2))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, file []byte) {
		got, err := ParseSafetensorsHeader(bytes.NewReader(file), int64(len(file)))
		if err != nil {
			return
		}
		// What parses is consistent: its data fits in the file.
		if got.Bytes > uint64(len(file)) || got.Count < 0 {
			t.Fatalf("%+v from %d bytes", got, len(file))
		}
		var sum int64
		for _, v := range got.DTypes {
			sum += v
		}
		if uint64(sum) != got.Params {
			t.Fatalf("dtype counts %d, params %d", sum, got.Params)
		}
	})
}

func FuzzParseConfig(f *testing.F) {
	for _, m := range []string{"gpt2", "llama-1b", "bert-base", "vit-base", "qwen2-0.5b"} {
		b, _ := os.ReadFile(filepath.Join("testdata", "models", m, "config.json"))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, err := ParseConfig(b)
		if err != nil {
			return
		}
		// Whatever parses can be estimated without a panic.
		for _, mode := range []Mode{Train, Infer, Generate} {
			Estimate(a, Options{Mode: mode, Batch: 2, SeqLen: 16, NewTokens: 4})
		}
	})
}

// The estimate grows with the batch and the sequence, and the levers the
// seeds name lower it: checkpointing, autocast, quantization.
func TestEstimateMovesTheRightWay(t *testing.T) {
	gpt2, llama := load(t, "gpt2"), load(t, "llama-1b")
	peak := func(a Arch, o Options) uint64 {
		t.Helper()
		r, err := Estimate(a, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.Peak != r.Allocated+r.Parts.Context || r.Allocated != r.Parts.Allocated() {
			t.Fatalf("parts do not add up: %+v", r)
		}
		return r.Peak
	}
	base := Options{Mode: Train, Batch: 8, SeqLen: 512}
	for _, a := range []Arch{gpt2, llama, load(t, "bert-base"), load(t, "vit-base")} {
		more := base
		more.Batch = 16
		if peak(a, more) <= peak(a, base) {
			t.Errorf("%s: batch 16 not above batch 8", a.ModelType)
		}
		ck := base
		ck.GradCheckpointing = true
		if peak(a, ck) >= peak(a, base) {
			t.Errorf("%s: checkpointing does not lower the peak", a.ModelType)
		}
	}
	longer := base
	longer.SeqLen = 1024
	if peak(gpt2, longer) <= peak(gpt2, base) {
		t.Error("a longer sequence is not more")
	}
	inf := Options{Mode: Infer, Batch: 8, SeqLen: 512, Dtype: "bf16"}
	q8, q4 := inf, inf
	q8.Quantize, q4.Quantize = "int8", "int4"
	if !(peak(llama, q4) < peak(llama, q8) && peak(llama, q8) < peak(llama, inf)) {
		t.Errorf("quantized: int4 %d, int8 %d, bf16 %d", peak(llama, q4), peak(llama, q8), peak(llama, inf))
	}
	gen := Options{Mode: Generate, Batch: 8, SeqLen: 128, NewTokens: 128, Dtype: "bf16"}
	r, _ := Estimate(llama, gen)
	if r.Parts.KVCache == 0 || r.Parts.Gradients != 0 || r.Parts.Optimizer != 0 {
		t.Errorf("generate parts %+v", r.Parts)
	}
	gen2 := gen
	gen2.NewTokens = 1024
	if peak(llama, gen2) <= peak(llama, gen) {
		t.Error("more new tokens are not more")
	}
	// The KV cache of grouped-query attention: 2 · layers · kv heads ·
	// head dim · positions · batch · 2 bytes after the last step.
	r, _ = Estimate(llama, Options{Mode: Generate, Batch: 1, SeqLen: 8, NewTokens: 4000, Dtype: "bf16"})
	if want := uint64(2 * 16 * 8 * 64 * 4008 * 2); r.Phase != "decode" || r.Parts.KVCache != want {
		t.Errorf("KV cache %d in phase %s, want %d", r.Parts.KVCache, r.Phase, want)
	}
}

// Weights and states of a training step: by the parameter count alone,
// 16 bytes per parameter for fp32 AdamW.
func TestEstimateParams(t *testing.T) {
	r, err := EstimateParams(1e9, Options{Mode: Train, Optimizer: "adamw"})
	if err != nil {
		t.Fatal(err)
	}
	if r.Allocated != 16e9 || r.Parts.Activations != 0 {
		t.Errorf("%+v", r.Parts)
	}
	r, _ = EstimateParams(1e9, Options{Mode: Infer, Dtype: "bf16"})
	if r.Allocated != 2e9 {
		t.Errorf("bf16 inference weights %d", r.Allocated)
	}
}

func TestOptionErrors(t *testing.T) {
	a := load(t, "gpt2")
	tests := []struct {
		o    Options
		want string
	}{
		{Options{Mode: "fly", Batch: 1, SeqLen: 1}, `mode "fly"`},
		{Options{Batch: 0, SeqLen: 1}, "batch 0"},
		{Options{Batch: 1, SeqLen: 2048}, "learned positions stop at 1024"},
		{Options{Batch: 1, SeqLen: 1, Dtype: "int3"}, `dtype "int3"`},
		{Options{Batch: 1, SeqLen: 1, AMP: "bf16", Dtype: "bf16"}, "autocast is for fp32 weights"},
		{Options{Batch: 1, SeqLen: 1, Quantize: "int8"}, "only for infer and generate"},
		{Options{Mode: Generate, Batch: 1, SeqLen: 1}, "at least 1"},
		{Options{Mode: Infer, Batch: 1, SeqLen: 1, GradCheckpointing: true}, "training only"},
		{Options{Batch: 1, SeqLen: 1, Optimizer: "lion"}, `optimizer "lion"`},
	}
	for _, tt := range tests {
		if _, err := Estimate(a, tt.o); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: err %v, want %q", tt.o, err, tt.want)
		}
	}
	if _, err := Estimate(load(t, "bert-base"), Options{Mode: Generate, Batch: 1, SeqLen: 1, NewTokens: 1}); err == nil {
		t.Error("BERT generates")
	}
}

func TestCapacity(t *testing.T) {
	a := load(t, "gpt2")
	o := Options{Mode: Train, Batch: 1, SeqLen: 512}
	const capacity = 16 << 30
	n, err := MaxBatch(a, o, capacity)
	if err != nil || n < 1 {
		t.Fatalf("max batch %d, %v", n, err)
	}
	at := func(b int) uint64 { o.Batch = b; r, _ := Estimate(a, o); return r.Peak }
	if at(n) > capacity || at(n+1) <= capacity {
		t.Errorf("max batch %d: %d fits, %d at n+1", n, at(n), at(n+1))
	}
	o.Batch = 4
	s, err := MaxSeqLen(a, o, capacity)
	if err != nil || s < 1 || s > 1024 {
		t.Errorf("max seq %d, %v", s, err)
	}
	if n, _ := MaxBatch(a, o, 1<<20); n != 0 {
		t.Errorf("1 MiB: batch %d fits", n)
	}
}

// caseSpec is one case of testdata/cases.json, and in truths.json its
// measurement.
type caseSpec struct {
	Name      string `json:"name"`
	Model     string `json:"model"`
	Mode      Mode   `json:"mode"`
	Batch     int    `json:"batch"`
	SeqLen    int    `json:"seq_len"`
	NewTokens int    `json:"new_tokens"`
	Dtype     string `json:"dtype"`
	AMP       string `json:"amp"`
	Optimizer string `json:"optimizer"`
	Ckpt      bool   `json:"grad_checkpointing"`
	// Measured (truths.json): torch.cuda.max_memory_allocated over three
	// steps, less what the process held before the case.
	Measured uint64 `json:"measured_bytes"`
	Error    string `json:"error"`
}

func (c caseSpec) options() Options {
	return Options{Mode: c.Mode, Batch: c.Batch, SeqLen: c.SeqLen, NewTokens: c.NewTokens, Dtype: c.Dtype, AMP: c.AMP,
		Optimizer: c.Optimizer, GradCheckpointing: c.Ckpt}
}

func readCases(t *testing.T, path string) []caseSpec {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Cases []caseSpec `json:"cases"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f.Cases
}

// estimateCase is the estimate comparable with the measurement: the
// allocated peak without the cuBLAS workspaces (the truth script allocates
// them before the first case and counts from there).
func estimateCase(t *testing.T, c caseSpec) (Result, uint64) {
	t.Helper()
	r, err := Estimate(load(t, c.Model), c.options())
	if err != nil {
		t.Fatalf("%s: %v", c.Name, err)
	}
	return r, r.Allocated - r.Workspaces
}

// TestCasesEstimate: every case of the matrix can be estimated.
func TestCasesEstimate(t *testing.T) {
	cases := readCases(t, filepath.Join("testdata", "cases.json"))
	if len(cases) < 12 {
		t.Fatalf("%d cases, want at least 12", len(cases))
	}
	for _, c := range cases {
		estimateCase(t, c)
	}
}

const truthsFile = "testdata/truths.json"

// TestAgainstTruths holds the estimator to ±10 % of the peaks measured on
// a GPU by scripts/gpu/estimate_truth.py.
func TestAgainstTruths(t *testing.T) {
	if _, err := os.Stat(truthsFile); err != nil {
		t.Skipf("estimate/%s is missing: run scripts/gpu/estimate_truth.sh on a GPU host and copy its truths.json there (docs/estimate.md)", truthsFile)
	}
	for _, c := range readCases(t, truthsFile) {
		if c.Error != "" || c.Measured == 0 {
			t.Errorf("%s: not measured (%s)", c.Name, c.Error)
			continue
		}
		_, est := estimateCase(t, c)
		dev := float64(est)/float64(c.Measured) - 1
		t.Logf("%-28s measured %8.3f GiB, estimate %8.3f GiB, %+6.1f %%", c.Name, gib(c.Measured), gib(est), 100*dev)
		if dev > 0.10 || dev < -0.10 {
			t.Errorf("%s: estimate %.3f GiB, measured %.3f GiB: %+.1f %% (target ±10 %%)", c.Name, gib(est), gib(c.Measured), 100*dev)
		}
	}
}

func gib(b uint64) float64 { return float64(b) / (1 << 30) }

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

var update = flag.Bool("update", false, "rewrite the table of docs/estimate.md from testdata/cases.json and testdata/truths.json")

const docFile = "../docs/estimate.md"

// docTable is the comparison table of docs/estimate.md: per case, the
// estimate, accelerate's weight-only rule (weights in the dtype; ×4 for
// training with Adam) and the measured peak when truths exist.
func docTable(t *testing.T) string {
	cases := readCases(t, filepath.Join("testdata", "cases.json"))
	measured := map[string]caseSpec{}
	source := "not measured yet: run scripts/gpu/estimate_truth.sh on a GPU host, copy truths.json to estimate/testdata/, then `go test ./estimate -run TestDocTable -update`"
	if b, err := os.ReadFile(truthsFile); err == nil {
		var f struct {
			GPU, Torch, Transformers, Date string
			Cases                          []caseSpec `json:"cases"`
		}
		if err := json.Unmarshal(b, &f); err != nil {
			t.Fatalf("%s: %v", truthsFile, err)
		}
		for _, c := range f.Cases {
			measured[c.Name] = c
		}
		source = fmt.Sprintf("measured on %s, torch %s, transformers %s, %s (estimate/testdata/truths.json)", f.GPU, f.Torch, f.Transformers, f.Date)
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "Measured column: %s.\n\n", source)
	// The summary of the comparison: how many measured cases are within
	// ±10 %, and the worst.
	n, within, worst, worstName := 0, 0, 0.0, ""
	for _, c := range cases {
		m, ok := measured[c.Name]
		if !ok || m.Measured == 0 {
			continue
		}
		_, est := estimateCase(t, c)
		dev := float64(est)/float64(m.Measured) - 1
		n++
		if dev <= 0.10 && dev >= -0.10 {
			within++
		}
		if worstName == "" || abs(dev) > abs(worst) {
			worst, worstName = dev, c.Name
		}
	}
	if n > 0 {
		fmt.Fprintf(&sb, "Within ±10 %%: %d of %d measured cases; the largest error is %s, %+.1f %%.\n\n", within, n, worstName, 100*worst)
	}
	sb.WriteString("| case | job | estimate (allocated) | accelerate's rule | measured | estimate / measured |\n|---|---|---|---|---|---|\n")
	for _, c := range cases {
		r, est := estimateCase(t, c)
		w := float64(r.Params) * map[string]float64{"fp32": 4, "bf16": 2, "fp16": 2}[normDtype(c.Dtype)]
		rule := w
		if c.Mode == Train && (c.Optimizer == "adamw" || c.Optimizer == "adam") {
			rule = 4 * w
		}
		job := fmt.Sprintf("%s, batch %d", c.Mode, c.Batch)
		if a := load(t, c.Model); a.Family != ViT {
			job += fmt.Sprintf(" × %d", c.SeqLen)
		}
		if c.Mode == Generate {
			job += fmt.Sprintf(" + %d new", c.NewTokens)
		}
		job += ", " + c.Dtype
		if c.AMP != "" {
			job += " + " + c.AMP + " autocast"
		}
		if c.Mode == Train {
			job += ", " + c.Optimizer
			if c.Ckpt {
				job += ", checkpointing"
			}
		}
		meas, ratio := "—", "—"
		if m, ok := measured[c.Name]; ok && m.Measured > 0 {
			meas = fmt.Sprintf("%.2f GiB", gib(m.Measured))
			ratio = fmt.Sprintf("%.2f", float64(est)/float64(m.Measured))
		} else if ok {
			meas = "failed: " + m.Error
		}
		fmt.Fprintf(&sb, "| %s | %s | %.2f GiB (%s) | %.2f GiB | %s | %s |\n", c.Name, job, gib(est), r.Phase, rule/(1<<30), meas, ratio)
	}
	return sb.String()
}

// TestDocTable keeps the table of docs/estimate.md in step with the code
// and the truths; -update rewrites it.
func TestDocTable(t *testing.T) {
	const begin, end = "<!-- table: generated by go test ./estimate -run TestDocTable -update -->\n", "<!-- end of table -->"
	b, err := os.ReadFile(docFile)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("%s has no table markers", docFile)
	}
	want := docTable(t)
	if got := doc[i+len(begin) : j]; got != want {
		if !*update {
			t.Fatalf("the table in %s is out of date: run go test ./estimate -run TestDocTable -update\nwant:\n%s", docFile, want)
		}
		if err := os.WriteFile(docFile, []byte(doc[:i+len(begin)]+want+doc[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// The GPT-2 rules the H200 truths corrected: the DynamicCache holds
// contiguous copies of k and v (2c·H per layer and token), the training
// forward pass builds that cache unless the config or checkpointing turns
// it off, and gelu_new's tanh chain is fp32 under autocast.
func TestGPT2CacheAndGelu(t *testing.T) {
	a := load(t, "gpt2")
	L, H, I := uint64(a.Layers), uint64(a.Hidden), uint64(a.Inter)
	const B, S = 4, 256
	T := uint64(B * S)

	r, err := Estimate(a, Options{Mode: Infer, Batch: B, SeqLen: S})
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * 4 * H * L * T; r.Parts.KVCache != want {
		t.Errorf("fp32 forward pass: KV cache %d, want 2·4·H·L·T = %d", r.Parts.KVCache, want)
	}

	noCache := a
	noCache.UseCache = false
	acts := func(a Arch, o Options) uint64 {
		t.Helper()
		r, err := Estimate(a, o)
		if err != nil {
			t.Fatal(err)
		}
		return r.Parts.Activations
	}
	train := Options{Mode: Train, Batch: B, SeqLen: S}
	if d := acts(a, train) - acts(noCache, train); d != 2*4*H*L*T {
		t.Errorf("use_cache in training adds %d, want the copies of k and v, %d", d, 2*4*H*L*T)
	}
	ck := train
	ck.GradCheckpointing = true
	if acts(a, ck) != acts(noCache, ck) {
		t.Error("checkpointing turns use_cache off, yet the cache still counts")
	}
	if r, _ := Estimate(noCache, Options{Mode: Infer, Batch: B, SeqLen: S}); r.Parts.KVCache != 0 {
		t.Errorf("use_cache false: KV cache %d", r.Parts.KVCache)
	}
	// use_cache is read from the config.
	b, _ := os.ReadFile(filepath.Join("testdata", "models", "gpt2", "config.json"))
	var cfg map[string]any
	json.Unmarshal(b, &cfg)
	cfg["use_cache"] = false
	b, _ = json.Marshal(cfg)
	if p, err := ParseConfig(b); err != nil || p.UseCache {
		t.Errorf("use_cache false in the config: %+v, %v", p.UseCache, err)
	}
	cfg["use_cache"] = "no"
	b, _ = json.Marshal(cfg)
	if _, err := ParseConfig(b); err == nil || !strings.Contains(err.Error(), `"use_cache"`) {
		t.Errorf("use_cache \"no\": %v", err)
	}

	// gelu_new: (3g + 2c)·I per layer and token; under bf16 autocast g = 4
	// (torch.pow promotes) and c = 2: 16·I, where a half chain would be
	// 10·I. Compared as the difference between autocast and bf16 weights,
	// which differ only in the residual stream (r), the LayerNorm inputs
	// and the chain.
	amp := model{a: a, o: Options{Mode: Train, AMP: "bf16"}, p: precision{w: 4, c: 2, r: 4, amp: true}}
	half := model{a: a, o: Options{Mode: Train, Dtype: "bf16"}, p: precision{w: 2, c: 2, r: 2}}
	if got := amp.geluSaved(); got != float64(16*I) {
		t.Errorf("gelu_new under autocast saves %g per token, want 16·I = %d", got, 16*I)
	}
	if got := half.geluSaved(); got != float64(10*I) {
		t.Errorf("gelu_new in bf16 saves %g per token, want 10·I = %d", got, 10*I)
	}
	if d := amp.layerSaved() - half.layerSaved(); d != float64(6*I+4*H) {
		// 6·I from the chain, 2·(4-2)·H from the two fp32 LayerNorm inputs,
		// and nothing else: the cache copies are in the compute dtype in
		// both.
		t.Errorf("autocast layer saves %g more than bf16, want %d", d, 6*I+4*H)
	}
}
