package sim_test

import (
	"errors"
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/sim"
)

func Example() {
	dev := sim.MustNew(sim.Config{Capacity: 64 << 20}) // a 64 MiB device

	p, _ := dev.Malloc(3 << 20) // rounded to 4 MiB, like cuMemAlloc
	_ = dev.CopyHtoD(p, []byte("hello"))
	buf := make([]byte, 5)
	_ = dev.CopyDtoH(buf, p)
	fmt.Printf("%#x %s\n", p, buf)

	// The device is full past its capacity...
	_, err := dev.Malloc(64 << 20)
	fmt.Println(errors.Is(err, alloc.ErrDeviceOutOfMemory))

	// ...and faults can be injected to test the allocator's retry path.
	dev.FailNth(sim.KindMalloc, 1)
	_, err = dev.Malloc(1 << 20)
	fmt.Println(err)

	free, total, _ := dev.MemInfo()
	fmt.Println(free>>20, total>>20, dev.Calls().Malloc)
	// Output:
	// 0x7f0000000000 hello
	// true
	// sim: injected fault: Malloc #3 of 1048576 bytes: device out of memory
	// 60 64 3
}
