package job

import (
	"os"
	"testing"
)

// BenchmarkTreeScan measures one re-scan of a tree (this test process as
// the root) on the host's /proc: the per-sample cost of following the job.
func BenchmarkTreeScan(b *testing.B) {
	t, err := newTree("/proc", os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	t.scan()
	b.ResetTimer()
	for b.Loop() {
		if _, err := t.scan(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTreeFirstScan measures the first scan, which reads every
// process's stat once.
func BenchmarkTreeFirstScan(b *testing.B) {
	for b.Loop() {
		t, err := newTree("/proc", os.Getpid())
		if err != nil {
			b.Fatal(err)
		}
		if _, err := t.scan(); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMatchLine(b *testing.B) {
	line := "epoch 3 step 120 loss 0.4121 lr 3e-4 throughput 1234.5 samples/s grad-norm 0.98"
	for b.Loop() {
		MatchLine(line)
	}
}
