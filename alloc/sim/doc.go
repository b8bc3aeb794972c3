// Package sim is a simulated CUDA device: it implements alloc.Device,
// alloc.VirtualMemory, alloc.HostMemory and alloc.AsyncCopier in host memory, so that the
// allocator can be tested without a GPU and recorded traces can be replayed
// against devices of any size ("what if this job ran on a 40 GiB card?").
//
// # What is modelled
//
// Capacity. A Device has a total capacity in bytes and, optionally, an amount
// "reserved by others" that stands for memory held by other processes on the
// same GPU. Malloc'd bytes and physical handles (MemCreate) both count against
// capacity; MemInfo reports free = total - reserved-by-others - in use.
//
// Address space. One virtual address space, starting at 0x7f0000000000 like a
// real GPU's, is shared by Malloc allocations and AddressReserve ranges, as it
// is in the CUDA driver. Free ranges are kept in an address-ordered list and
// allocated first fit, so freed ranges are reused and coalesced. Malloc
// follows cuMemAlloc's rounding: sizes below 2 MiB are rounded up to 512 B
// and aligned to 512 B, sizes of 2 MiB or more are rounded up to and aligned
// to 2 MiB. The rounded size is what counts against capacity.
//
// Contents. Device memory is readable and writable through Memset and the
// copies, so tests can write a pattern and read it back. The bytes live in a
// sparse backing store of 64 KiB chunks allocated on first write: a simulated
// 80 GiB device costs nothing until it is written, and unwritten memory reads
// as zero. Each Malloc allocation and each physical handle owns its backing,
// so the contents of virtual-memory pages follow the physical handle: unmap a
// handle, map it elsewhere, and its bytes are still there. Every access is
// checked: a range that is not wholly inside one Malloc allocation (its
// requested size, not the rounded one) or inside mapped pages whose access
// was set is an error. That catches allocator bugs that a real device would
// turn into silent corruption.
//
// Virtual memory. The page model mirrors the driver's four states of a
// virtual page: free, reserved (AddressReserve), mapped (MemMap of a physical
// handle from MemCreate) and accessible (MemSetAccess). Sizes and addresses
// must be multiples of the granularity (2 MiB unless configured). Misuse is an
// error: unaligned arguments, mapping over a mapped page, mapping outside a
// reservation, unmapping a page that is not mapped, freeing a reservation that
// still has mappings, releasing a handle that is still mapped (the real
// driver defers that release; Config.AllowReleaseMapped does the same here).
// Mappings may be unmapped or given access in parts; they are split as
// needed.
//
// Streams and events. The simulated device runs no kernels, so recorded
// events complete at once. With Config.HoldEvents (or HoldEvents(true)) a
// recorded event stays pending until the test calls CompleteEvents or
// CompleteStream, which is how the allocator's cross-stream (RecordStream)
// paths are exercised. Asynchronous copies (CopyHtoDAsync, CopyDtoHAsync)
// are queued on their stream and move their bytes only when the stream
// completes, so a test can tell whether a staging buffer was reused while a
// copy could still read or write it (async.go). LagCopies makes held
// streams run their copies a fixed number behind the host, as a DMA engine
// that keeps up only partly, for pipelines that reuse buffers as their
// events complete.
//
// Pinned host memory. HostAlloc returns ordinary Go slices and counts them.
//
// Accounting. Every driver-level call is counted by kind (Calls), including
// calls that fail. Stats reports bytes in use, their peak, the host bytes and
// the simulated driver time.
//
// Faults. Inject installs deterministic faults: fail the Nth matching call of
// a kind, fail every call at or above a size, or fail when a predicate says
// so. Injected failures of Malloc and MemCreate wrap alloc.ErrDeviceOutOfMemory
// (the allocator reacts to them by freeing its cache and retrying); others
// wrap ErrInjected.
//
// Latency. Config.Latency, off by default, gives each call a simulated
// duration. The durations are summed in Stats.DriverTime, so a replay can
// estimate the time spent in the driver; with Config.Sleep the device also
// sleeps for them. AnchorLatency is a model fitted to cuMemAlloc timings
// measured on an H200; other calls are unmeasured and cost nothing in it.
//
// # Concurrency and determinism
//
// A Device is safe for concurrent use: one mutex guards all of its state.
// For a given sequence of calls it returns the same addresses, handles and
// errors every time.
package sim
