package statchan_test

import (
	"fmt"
	"os"
	"time"

	"github.com/vramhq/vram/alloc/statchan"
)

// A process publishes its figures; another reads them. Here both are this
// program: the reader checks that the PID and start time in the file are
// those of a live process, which this one is.
func Example() {
	dir, _ := os.MkdirTemp("", "channel")
	defer os.RemoveAll(dir)
	start, err := statchan.SelfStartTicks("/proc")
	if err != nil {
		fmt.Println(err)
		return
	}
	w, err := statchan.Create(dir, statchan.Header{PID: os.Getpid(), Device: 0, StartTicks: start, Backend: "sim"})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer w.Close()
	w.Publish(statchan.Figures{Allocated: 6 << 30, Reserved: 10 << 30, FreeCached: 4 << 30, LargestFree: 1 << 30, MaxSplitSize: -1}, time.Now())

	r := &statchan.Reader{Dir: dir}
	defer r.Close()
	recs, err := r.Read(nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, rec := range recs {
		fmt.Printf("device %d: allocated %d GiB, reserved %d GiB, fragmentation %.0f%%\n",
			rec.Device, rec.Allocated>>30, rec.Reserved>>30, 100*rec.Fragmentation())
	}
	// Output:
	// device 0: allocated 6 GiB, reserved 10 GiB, fragmentation 30%
}
