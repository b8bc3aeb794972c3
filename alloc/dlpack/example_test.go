package dlpack_test

import (
	"fmt"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/dlpack"
	"github.com/vramhq/vram/alloc/sim"
)

// Export a 3×4 float32 tensor of vram memory, then import it back as
// another framework's tensor would be imported: the same device memory,
// no copy. Freeing the import calls the producer's deleter, which returns
// the memory to the allocator.
func Example() {
	a, _ := alloc.New(sim.MustNew(sim.Config{Capacity: 1 << 30}), alloc.Config{}) // or cudadev.Open(0)
	buf, _ := a.Alloc(3*4*4, 0)

	m, err := dlpack.Export(buf, dlpack.Spec{Shape: []int64{3, 4}, DType: dlpack.Float32, Device: dlpack.Device{Type: dlpack.CUDA, ID: 0}})
	if err != nil {
		panic(err)
	}
	fmt.Println("exported: version", m.Version.Major, "device", m.DLTensor.Device.Type, "same memory", m.DLTensor.Data == uintptr(buf.Ptr()))

	// A consumer (here vram itself) takes the tensor over.
	im, err := dlpack.Import(a, m, dlpack.ImportOptions{DeviceID: 0})
	if err != nil {
		panic(err)
	}
	fmt.Println("imported:", im.Shape, im.Strides, im.DType, im.Buffer.Len(), "bytes, same memory", im.Buffer.Ptr() == buf.Ptr())
	fmt.Println("live allocations:", a.Stats().Allocation.All.Current)

	_ = im.Buffer.Free() // calls the deleter once; the memory goes back to the allocator
	fmt.Println("live allocations:", a.Stats().Allocation.All.Current)
	// Output:
	// exported: version 1 device kDLCUDA (2) same memory true
	// imported: [3 4] [4 1] float32 48 bytes, same memory true
	// live allocations: 1
	// live allocations: 0
}

// A tensor that is not CUDA device memory is refused, and stays the
// caller's.
func ExampleImport_refused() {
	a, _ := alloc.New(sim.MustNew(sim.Config{Capacity: 1 << 30}), alloc.Config{})
	buf, _ := a.Alloc(16, 0)
	m, _ := dlpack.Export(buf, dlpack.Spec{Shape: []int64{4}, DType: dlpack.Float32})
	m.DLTensor.Device.Type = dlpack.CPU // as a host tensor would say
	_, err := dlpack.Import(a, m, dlpack.ImportOptions{DeviceID: -1})
	fmt.Println(err)
	m.DLTensor.Device.Type = dlpack.CUDA
	dlpack.Delete(m) // the caller still owns it
	fmt.Println("live allocations:", a.Stats().Allocation.All.Current)
	// Output:
	// dlpack: import: invalid tensor: device type kDLCPU (1): only CUDA device memory (kDLCUDA, kDLCUDAManaged) can be imported
	// live allocations: 0
}
