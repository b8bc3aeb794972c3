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
// allocator's own (and two atomic loads for the keeper, below). Creating
// an allocator takes the Host's mutex once per device.
//
// # Keeping the scheduler awake
//
// Every allocation call from a framework is a call from a C thread into
// Go. That call is cheap (about 100 ns) only while the Go scheduler is
// awake. When every P of the process has been idle for a while, the
// scheduler's monitor thread (sysmon) goes to a deep sleep, and the next
// call from C must wake it up on its way in: a futex wake-up and a wait
// for the scheduler's lock, 10 to 40 µs on the machines measured, on the
// framework's own thread. Inside training this is the common case, not an
// exception: between two allocations the framework launches kernels and
// waits for the GPU for hundreds of microseconds, so nearly every call
// found the scheduler asleep, and PyTorch jobs on libvram ran 10 to 50 %
// slower than on PyTorch's allocator although no figure of the allocator
// itself had changed (docs/torch.md, "The cost of a call").
//
// A keeper goroutine prevents it: it sleeps in 2 ms nanosleep system calls
// and yields to the scheduler between them. While it sleeps in the system
// call its P is busy, not idle, so the monitor never finds every P idle and
// never goes to its deep sleep; yielding makes the scheduler see the
// goroutine as fresh, so the monitor does not take its P away either (it
// would after 10 ms). The period must stay well under those 10 ms.
//
// It runs only while the allocator is in use: the hot path marks the Host
// active (one atomic load, and a store when the mark was clear) and starts
// the keeper when none runs; the keeper clears the mark every period and
// ends after idleAfter without a call. Its cost, measured on a 2-core
// virtual machine, is some 3 % of one core while it runs.
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
