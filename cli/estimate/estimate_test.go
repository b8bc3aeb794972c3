package estimate_test

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vramhq/vram/cli"
	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/internal/jsondoc"
)

func vram(args ...string) (string, string, int) {
	f := cmdutil.New()
	var out, errb bytes.Buffer
	f.In, f.Out, f.Err = strings.NewReader(""), &out, &errb
	code := cli.Run(f, args)
	return out.String(), errb.String(), code
}

var gpt2 = filepath.Join("..", "..", "estimate", "testdata", "models", "gpt2")

func TestEstimateJSON(t *testing.T) {
	f := cmdutil.New()
	var out, errb bytes.Buffer
	f.In, f.Out, f.Err = strings.NewReader(""), &out, &errb
	if code := cli.Run(f, []string{"estimate", "--json", "--batch", "4", "--seq-len", "256", "--capacity", "8GiB", gpt2}); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	jsondoc.Test(t, "vram estimate --json", out.Bytes())
	var r struct {
		Schema    string           `json:"schema"`
		Peak      uint64           `json:"peak_bytes"`
		Allocated uint64           `json:"allocated_bytes"`
		Parts     map[string]int64 `json:"parts"`
		Params    uint64           `json:"params"`
		Capacity  struct {
			MaxBatch int  `json:"max_batch"`
			Fits     bool `json:"fits"`
		} `json:"capacity"`
	}
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	var sum int64
	for _, v := range r.Parts {
		sum += v
	}
	if r.Schema != "vram.estimate/v1" || r.Params != 124439808 || uint64(sum) != r.Peak || r.Allocated >= r.Peak || len(r.Parts) != 7 {
		t.Errorf("%+v", r)
	}
	if !r.Capacity.Fits || r.Capacity.MaxBatch < 4 {
		t.Errorf("capacity %+v", r.Capacity)
	}
}

func TestEstimateText(t *testing.T) {
	out, stderr, code := vram("estimate", "--mode", "generate", "--dtype", "bf16", "--batch", "2", "--seq-len", "64", "--new-tokens", "32", gpt2)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"generate, batch 2, 64 tokens + 32 new, bf16", "KV cache", "CUDA context", "peak (", "assumptions:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestEstimateErrors(t *testing.T) {
	tests := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"estimate"}, 2, "name one MODEL"},
		{[]string{"estimate", "--params", "7B", gpt2}, 2, "not both"},
		{[]string{"estimate", "--params", "lots"}, 2, `--params "lots"`},
		{[]string{"estimate", "--capacity", "big", gpt2}, 2, "--capacity"},
		{[]string{"estimate", "--mode", "fly", gpt2}, 2, `mode "fly"`},
		{[]string{"estimate", "--seq-len", "4096", gpt2}, 2, "learned positions stop at 1024"},
		{[]string{"estimate", "/nonexistent/model"}, 1, "/nonexistent/model"},
	}
	for _, tt := range tests {
		_, stderr, code := vram(tt.args...)
		if code != tt.code || !strings.Contains(stderr, tt.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tt.args, code, stderr, tt.code, tt.want)
		}
	}
}
