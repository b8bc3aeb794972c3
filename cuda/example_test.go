package cuda_test

import (
	"errors"
	"fmt"

	"github.com/vramhq/vram/cuda"
)

// This example lists the devices, or says why it cannot.
func Example() {
	if err := cuda.Init(); err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			fmt.Println("no CUDA driver:", err)
			return
		}
		fmt.Println(err)
		return
	}
	n, err := cuda.DeviceCount()
	if err != nil {
		fmt.Println(err)
		return
	}
	for i := range n {
		dev, err := cuda.GetDevice(i)
		if err != nil {
			fmt.Println(err)
			return
		}
		p, err := dev.Properties()
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("%d %s %s %d MiB sm_%d%d\n", i, p.Name, p.UUID, p.TotalMem>>20, p.Major, p.Minor)
	}
}

// This example copies bytes to the device and back through the primary context.
func ExampleContext_MemAlloc() {
	if err := cuda.Init(); err != nil {
		fmt.Println(err)
		return
	}
	dev, err := cuda.GetDevice(0)
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, err := dev.PrimaryContext()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Release()

	p, err := ctx.MemAlloc(1 << 20)
	if cuda.IsOutOfMemory(err) {
		fmt.Println("the device is full:", err)
		return
	} else if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.MemFree(p)

	in := []byte("hello, device")
	out := make([]byte, len(in))
	if err := ctx.MemcpyHtoD(p, in); err != nil {
		fmt.Println(err)
		return
	}
	if err := ctx.MemcpyDtoH(out, p); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(string(out))
}

// This example maps physical memory into a reserved address range with the
// virtual-memory calls, then undoes it.
func ExampleContext_MemMap() {
	if err := cuda.Init(); err != nil {
		fmt.Println(err)
		return
	}
	dev, _ := cuda.GetDevice(0)
	ctx, err := dev.PrimaryContext()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.Release()

	prop := cuda.DeviceAllocationProp(dev.Ordinal())
	page, err := ctx.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
	if err != nil {
		fmt.Println(err)
		return
	}
	va, err := ctx.MemAddressReserve(4*page, 0, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.MemAddressFree(va, 4*page)
	h, err := ctx.MemCreate(page, &prop)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.MemRelease(h)
	if err := ctx.MemMap(va, page, 0, h); err != nil {
		fmt.Println(err)
		return
	}
	defer ctx.MemUnmap(va, page)
	if err := ctx.MemSetAccess(va, page, []cuda.AccessDesc{cuda.ReadWriteAccess(dev.Ordinal())}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(ctx.MemsetD8(va, 0, page))
}
