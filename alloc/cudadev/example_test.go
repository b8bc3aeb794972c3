package cudadev_test

import (
	"errors"
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/cudadev"
)

// This example opens GPU 0 as an allocator backend and allocates from it
// directly; normally the allocator does this on its slow path.
func ExampleOpen() {
	dev, err := cudadev.Open(0)
	if err != nil {
		fmt.Println(err) // e.g. no driver: names libcuda.so.1
		return
	}
	defer dev.Close()

	free, total, err := dev.MemInfo()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("GPU 0: %d of %d MiB free\n", free>>20, total>>20)

	addr, err := dev.Malloc(total * 2)
	if errors.Is(err, alloc.ErrDeviceOutOfMemory) {
		fmt.Println("too large, as expected:", err)
		return
	}
	if err == nil {
		dev.Free(addr)
	}
}
