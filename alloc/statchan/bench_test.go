package statchan

import (
	"testing"
	"time"
)

// BenchmarkReader8x200 is one read of the channel of 8 GPUs × 200
// processes (1,600 files), as the daemon does at every sample: at 10 Hz
// the CPU share is ns/op × 10 / 1e9. "steady" is the reader's usual read
// (every file mapped, identities checked within Recheck); "recheck" also
// checks every identity (once a second in the default setting).
func BenchmarkReader8x200(b *testing.B) {
	dir, root := b.TempDir(), b.TempDir()
	const procs, gpus = 200, 8
	for p := 0; p < procs*gpus; p++ {
		pid := 1000 + p
		fakeProc(b, root, pid, 5000)
		h := Header{PID: pid, Device: p % gpus, StartTicks: 5000, Backend: "cuda", Interval: 100 * time.Millisecond}
		w, err := Create(dir, h)
		if err != nil {
			b.Fatal(err)
		}
		w.Publish(sampleFigures(), time.Now())
		defer w.Close()
	}
	for _, bc := range []struct {
		name    string
		recheck time.Duration
	}{{"steady", time.Hour}, {"recheck", time.Nanosecond}} {
		b.Run(bc.name, func(b *testing.B) {
			r := &Reader{Dir: dir, ProcRoot: root, Recheck: bc.recheck}
			defer r.Close()
			recs, err := r.Read(nil)
			if err != nil || len(recs) != procs*gpus {
				b.Fatalf("read %d records: %v", len(recs), err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				recs, _ = r.Read(recs)
			}
			if len(recs) != procs*gpus {
				b.Fatalf("read %d records", len(recs))
			}
		})
	}
}
