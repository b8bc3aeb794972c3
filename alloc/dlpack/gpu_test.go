//go:build gpu

package dlpack_test

// DLPack on the real device (alloc/cudadev, device 0). On a GPU host:
//
//	go test -c -tags gpu -o .gpu/dlpack.test ./alloc/dlpack   # here
//	./.gpu/dlpack.test -test.v -test.run GPU                  # there
//
// VRAM_GPU_TEST_SIM=1 runs it on the simulated device instead.

import (
	"bytes"
	"os"
	"testing"

	"github.com/vramhq/vram/alloc"
	"github.com/vramhq/vram/alloc/cudadev"
	"github.com/vramhq/vram/alloc/dlpack"
	"github.com/vramhq/vram/alloc/sim"
)

func openDevice(t *testing.T) alloc.Device {
	if os.Getenv("VRAM_GPU_TEST_SIM") == "1" {
		return sim.MustNew(sim.Config{Capacity: 4 << 30})
	}
	d, err := cudadev.Open(0)
	if err != nil {
		t.Fatalf("opening GPU 0: %v", err)
	}
	return d
}

// TestGPUDLPackAcrossAllocators exports memory of one allocator (the
// "producer", standing for another framework) and imports it into
// another: the same device address, data written by one read by the
// other, and the import's Free returns the memory to the producer.
func TestGPUDLPackAcrossAllocators(t *testing.T) {
	dev := openDevice(t)
	producer, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	consumer, err := alloc.New(dev, alloc.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := consumer.Close(); err != nil {
			t.Error(err)
		}
		if err := producer.Close(); err != nil {
			t.Error(err)
		}
	}()
	for _, n := range []int64{1, 1000, 1 << 18, 6 << 20} { // float32 elements
		b, err := producer.Alloc(uint64(4*n), 0)
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 4*n)
		for i := range want {
			want[i] = byte(i*7 + int(n))
		}
		if err := b.CopyFromHost(want); err != nil {
			t.Fatal(err)
		}
		m, err := dlpack.Export(b, dlpack.Spec{Shape: []int64{n}, DType: dlpack.Float32, Device: dlpack.Device{Type: dlpack.CUDA, ID: 0}})
		if err != nil {
			t.Fatal(err)
		}
		im, err := dlpack.Import(consumer, m, dlpack.ImportOptions{DeviceID: 0})
		if err != nil {
			t.Fatal(err)
		}
		if im.Buffer.Ptr() != b.Ptr() {
			t.Fatalf("imported at %#x, exported %#x: not the same memory", im.Buffer.Ptr(), b.Ptr())
		}
		got := make([]byte, 4*n)
		if err := im.Buffer.CopyToHost(got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d floats read through the import: %v, equal %v", n, err, bytes.Equal(got, want))
		}
		// A device-to-device copy into consumer memory, and back.
		own, err := consumer.Alloc(uint64(4*n), 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := own.CopyFrom(im.Buffer); err != nil {
			t.Fatal(err)
		}
		if err := im.Buffer.Memset(0); err != nil {
			t.Fatal(err)
		}
		if err := im.Buffer.CopyFrom(own); err != nil {
			t.Fatal(err)
		}
		if err := b.CopyToHost(got); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("producer's view after the consumer's copies: %v", err)
		}
		_ = own.Free()
		if producer.Stats().Allocation.All.Current != 1 {
			t.Fatal("producer memory gone before the import was freed")
		}
		if err := im.Buffer.Free(); err != nil {
			t.Fatal(err)
		}
		if c := producer.Stats().Allocation.All.Current; c != 0 {
			t.Fatalf("after the import's Free the producer still has %d live allocations", c)
		}
	}
	if dlpack.Live() != 0 {
		t.Errorf("%d exported tensors live at the end", dlpack.Live())
	}
	t.Logf("producer: %d device allocations; consumer: %d (its own copies; imports allocate nothing)",
		producer.Stats().NumDeviceAlloc, consumer.Stats().NumDeviceAlloc)
}
