// Package rmm reads and writes the allocation log of RAPIDS Memory Manager
// (RMM's logging_resource_adaptor), the CSV format vram uses for recorded
// allocation traces:
//
//	Thread,Time,Action,Pointer,Size,Stream
//	0,00:00:00.002353,allocate,0x7f7d26000000,16777216,0
//	0,00:00:00.006009,allocate failure,(nil),1073741824,0
//	0,00:00:00.006094,free,0x7f7d26000000,16777216,0
//
// Thread is a thread id; Time is a clock time %H:%M:%S.%f with microseconds
// (vram writes the time since the first event, so the hours may pass 24);
// Action is "allocate", "allocate failure" (the pointer is then "(nil)") or
// "free"; Pointer is hexadecimal; Size is the number of bytes asked for; Stream
// is the CUDA stream handle.
//
// The Reader streams: it holds one line at a time, so logs of millions of
// lines are read in constant memory. It accepts gzip-compressed input
// (detected by its magic bytes), CRLF line ends, columns in any order (found
// by the header) and a few variants seen in the wild: "deallocate" for
// "free", a time given as plain seconds ("1634567890.123456"), pointers and
// streams with or without "0x", blank lines. Every other irregularity is an
// error that names the line and the column. The Writer writes exactly the
// format above, which the Reader reads back to the same records.
package rmm

import (
	"fmt"
	"time"
)

// Action is what a log line records.
type Action uint8

// The actions of an RMM log.
const (
	Allocate        Action = iota // "allocate": Pointer was returned for Size bytes
	AllocateFailure               // "allocate failure": Size bytes could not be allocated
	Free                          // "free": Pointer (of Size bytes) was freed
)

func (a Action) String() string {
	switch a {
	case Allocate:
		return "allocate"
	case AllocateFailure:
		return "allocate failure"
	case Free:
		return "free"
	}
	return fmt.Sprintf("Action(%d)", uint8(a))
}

// Record is one line of the log.
type Record struct {
	Thread  uint64
	Time    time.Duration // since the start of the log (or of the day, in RMM's own logs)
	Action  Action
	Pointer uint64 // 0 for a failed allocation
	Size    uint64
	Stream  uint64
}

// header is the first line of every log.
const header = "Thread,Time,Action,Pointer,Size,Stream"
