package job_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/vramhq/vram/internal/jsondoc"
	"github.com/vramhq/vram/job"
)

// TestJSONDoc checks vram run's report against docs/json.md: a job that
// holds memory, one a limit ends, one that runs out of memory beside
// another process, one whose PyTorch message states its figures, and one
// without memory figures.
func TestJSONDoc(t *testing.T) {
	oom := func(name string) string {
		p, _ := filepath.Abs(filepath.Join("testdata", "oom", name))
		return p
	}
	for _, tt := range []struct {
		name  string
		total uint64
		setup func(*fake, *job.Spec)
		args  []string
	}{
		{"memory", 80 * gib, nil, []string{"mem", itoa(256 * mib), "300"}},
		{"limit", 80 * gib, func(_ *fake, s *job.Spec) { s.Limit = job.Limit{Bytes: 500 * mib} }, []string{"stubborn", itoa(600 * mib)}},
		{"other process", 40 * gib, func(f *fake, s *job.Spec) {
			f.src.Others = []job.ProcMemory{{PID: 1, Device: 0, Bytes: 30 * gib}}
			s.Env = append(s.Env, "VRAM_FAKEJOB_A="+itoa(2*gib), "VRAM_FAKEJOB_B="+itoa(100*mib), "VRAM_FAKEJOB_CAP="+itoa(10*gib))
		}, []string{"batch", "100"}},
		{"pytorch message", 80 * gib, func(_ *fake, s *job.Spec) { s.Stderr = &bytes.Buffer{} }, []string{"stderr", oom("pytorch_2x_fragmented.txt"), "1"}},
		{"no memory figures", 80 * gib, func(_ *fake, s *job.Spec) {
			s.Source, s.SourceNote, s.Stderr = nil, "NVML library not found", &bytes.Buffer{}
		},
			[]string{"stderr", oom("jax.txt"), "1"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t, tt.total)
			spec := f.spec(tt.args...)
			if tt.setup != nil {
				tt.setup(f, &spec)
			}
			res := run(t, spec)
			var b bytes.Buffer
			if err := res.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			jsondoc.Test(t, "vram run --json", b.Bytes())
		})
	}
}
