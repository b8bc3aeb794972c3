package torchsnap_test

import (
	"fmt"
	"os"

	"github.com/vramhq/vram/trace/torchsnap"
)

func Example() {
	f, err := os.Open("testdata/snapshot.pickle") // from torch.cuda.memory._dump_snapshot
	if err != nil {
		fmt.Println(err)
		return
	}
	defer f.Close()
	snap, err := torchsnap.Decode(f)
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range snap.Segments {
		fmt.Printf("segment %#x %s %d MiB, %d blocks\n", s.Address, s.SegmentType, s.TotalSize>>20, len(s.Blocks))
	}
	recs, stats, _ := snap.Records(0)
	for _, r := range recs {
		fmt.Println(r.Time, r.Action, r.Size)
	}
	fmt.Printf("%+v\n", stats)
	// Output:
	// segment 0x7f5a3fe00000 small 2 MiB, 2 blocks
	// segment 0x7f5a40000000 large 20 MiB, 3 blocks
	// 5µs allocate 8388508
	// 9µs allocate 4194304
	// 11µs allocate 1000
	// 30µs allocate failure 67108864
	// {Entries:9 Records:4 Skipped:4 UnmatchedFrees:1}
}
