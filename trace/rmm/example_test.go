package rmm_test

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/vramhq/vram/trace/rmm"
)

func Example() {
	w := rmm.NewWriter(os.Stdout)
	w.Write(rmm.Record{Time: 5 * time.Microsecond, Action: rmm.Allocate, Pointer: 0x7f0000000000, Size: 4096})
	w.Write(rmm.Record{Time: 9 * time.Microsecond, Action: rmm.AllocateFailure, Size: 1 << 40})
	w.Write(rmm.Record{Time: 12 * time.Microsecond, Action: rmm.Free, Pointer: 0x7f0000000000, Size: 4096})
	w.Flush()

	recs, err := rmm.ReadAll(strings.NewReader("Thread,Time,Action,Pointer,Size,Stream\n0,00:00:01.000002,free,0x10,16,0\n"))
	fmt.Println(recs, err)
	// Output:
	// Thread,Time,Action,Pointer,Size,Stream
	// 0,00:00:00.000005,allocate,0x7f0000000000,4096,0
	// 0,00:00:00.000009,allocate failure,(nil),1099511627776,0
	// 0,00:00:00.000012,free,0x7f0000000000,4096,0
	// [{0 1.000002s free 16 16 0}] <nil>
}
