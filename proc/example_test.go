package proc_test

import (
	"fmt"
	"time"

	"github.com/vramhq/vram/proc"
)

func ExampleRefuse() {
	self := 4242
	for _, id := range []proc.Identity{
		{PID: 1, StartTime: time.Unix(0, 0)},
		{PID: 4242, StartTime: time.Unix(100, 0)},
		{PID: 777},
		{PID: 1234, StartTicks: 991},
	} {
		fmt.Println(proc.Refuse(id, self))
	}
	// Output:
	// PID 1 is init (or not a process): vram never signals it: refused
	// PID 4242 is vram itself: refused
	// PID 777 is not visible in /proc (another PID namespace, or it exited), so its identity cannot be checked; try `sudo lsof /dev/nvidia*` on the host: refused
	// <nil>
}
