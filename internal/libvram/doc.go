// Package libvram is the Go side of libvram, the allocator as a C shared
// library (cmd/libvram): what runs between a framework's allocation call
// and the allocator, kept apart from cgo so that it is tested with plain Go
// tests and the race detector.
//
// # One Host per process
//
// A Host holds one *alloc.Allocator per device index, created on the first
// call that names the device, on that device's primary context (the
// context the CUDA runtime, PyTorch and CuPy use), with the settings of
// VRAM_ALLOC_CONF or of Configure. Allocators live as long as the process:
// PyTorch frees tensors during interpreter shutdown, after any atexit hook
// would have closed them, and the driver reclaims everything at exit.
//
// The cached path is an atomic load of the device's allocator followed by
// Allocator.Malloc or Free: no map, no allocation, no lock but the
// allocator's own. Creating an allocator takes the Host's mutex once per
// device.
//
// # Backends
//
// The backend is chosen once, from VRAM_DEVICE: unset or "cuda" is the GPU
// through package alloc/cudadev; "sim" is the simulated device
// (alloc/sim), one per device index, of VRAM_SIM_CAPACITY bytes (default
// 80 GiB), for tests on machines without a GPU.
//
// # Errors in the frameworks' terms
//
// Out-of-memory errors are rewritten to begin as PyTorch's do ("CUDA out of
// memory. Tried to allocate 2.00 GiB. GPU 0 ...") followed by the
// allocator's own explanation (cap, fragmentation, largest free block, what
// to do), so that code and people who look for PyTorch's wording find it.
//
// # Snapshots
//
// TorchSnapshot returns every device's segments and recent history shaped
// like torch.cuda.memory._snapshot(), so that the Python package can pickle
// it for PyTorch's memory_viz, and vram replay can read it back
// (trace/torchsnap).
package libvram
