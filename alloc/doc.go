// Package alloc is a caching device-memory allocator for Go programs.
//
// It sits between a program and a device backend (the CUDA driver in
// package alloc/cudadev, or the simulated device in package alloc/sim) and
// keeps device memory that the program has freed, so that the next request
// of a similar size is served without calling the driver. Its policy follows
// PyTorch's CUDA caching allocator, whose vocabulary (allocated, reserved,
// active, inactive split, peaks, EmptyCache, the summary table, snapshots)
// the users of this package already know; it fixes the gaps that PyTorch
// users report (see "Out of memory" below) and adds what PyTorch lacks:
// leaks attributed to Go call sites, scopes, and use-after-free checks.
//
// # Glossary
//
//   - segment: one region obtained from Device.Malloc. Segments are never
//     merged with each other: the driver gives no guarantee that two of them
//     are adjacent. A segment is released (Device.Free) only as a whole.
//   - block: a contiguous part of a segment. The blocks of a segment tile it
//     exactly and form a doubly linked list in address order (prev, next).
//     A block is allocated (handed to the caller), pending (freed by the
//     caller but still in use by other streams, waiting on events) or free
//     (cached, in a pool, reusable).
//   - pool: the set of free blocks of one size class. The small pool holds
//     requests of at most 1 MiB, carved from 2 MiB segments; the large pool
//     holds everything else, carved from 20 MiB segments (requests under
//     10 MiB) or from segments of the request rounded up to 2 MiB.
//   - stream: the backend stream a block was allocated on. A free block is
//     reused only by requests on the same stream, because work queued on one
//     stream runs in order while different streams run concurrently.
//   - reserved: bytes held in segments. allocated: bytes in allocated
//     blocks (after rounding). active: allocated plus pending. requested:
//     the sizes callers asked for, before rounding. inactive split: free
//     blocks that are part of a split segment; they cannot be released
//     without releasing their live neighbours ("non-releasable").
//   - cap: the most the allocator may reserve: the smaller of max_bytes and
//     max_fraction × device total, or the device total when neither is set.
//
// # Allocation (Malloc, Alloc)
//
//  1. Round the request: up to 512 B at least, then to a multiple of 512 B,
//     or to the next of roundup_power2_divisions steps between two powers of
//     two when that option is set (less fragmentation for requests of
//     varying size, at the cost of some padding).
//  2. If some block is waiting on events, poll them (EventQuery, one queue
//     per stream so a slow stream never holds back the others) and return
//     the completed blocks to their pools. With no RecordStream in use this
//     step is a single comparison.
//  3. Best fit: in the pool for the rounded size, find the smallest free
//     block on the same stream that is at least the rounded size, lowest
//     address first among equals. Each pool keeps, per stream, a two-level
//     segregated-fit index (TLSF): size classes with intrusive lists and a
//     bitmap, so insert, remove and search are O(1) and allocate nothing
//     (index.go says exactly how close to best fit the search is). With
//     max_split_size set, blocks of that size or more ("oversize") serve
//     only oversize requests, and only when they waste less than 20 MiB.
//  4. Split: if the block is larger than needed, cut the request from its
//     front and return the rest to the pool (small pool: when 512 B or more
//     remain; large pool: when more than 1 MiB remains and the request is
//     below max_split_size).
//  5. Grow: with no fitting block, call Device.Malloc for a new segment. If
//     garbage_collection_threshold is set and the growth would take reserved
//     past that fraction of the cap, first release cached whole segments,
//     least recently used first, until it would not.
//
// Steps 1 to 4 are pure bookkeeping under one mutex: a cached allocation and
// free never call the device. Block structs are recycled through a free
// list and live blocks are found by pointer in an open-addressed table
// (ptrmap.go), so the cached path allocates no Go memory in steady state.
//
// # Out of memory
//
// Growth fails when it would pass the cap or when the device returns an
// error wrapping ErrDeviceOutOfMemory. The allocator then (a) waits for all
// outstanding stream events, returning their blocks to the pools, and
// searches the pool again, because those blocks may fit (PyTorch does not
// re-search, pytorch/pytorch#189504); (b) releases every cached segment that
// holds no live block; (c) tries to grow again. Only then does
// it return an *OutOfMemoryError. Its message says what PyTorch's says
// (request, device total and free, allocated, reserved but unallocated) plus
// the cap, the largest free block, how much of the free reserve is too
// fragmented to serve the request, and what to do about it. Any other
// device error is returned wrapped, with the allocator's state unchanged.
//
// # Free (Free, Buffer.Free, Scope.Close)
//
//  1. Look the pointer up among live blocks. A pointer that is not the start
//     of a live block is an error (ErrDoubleFree, ErrInteriorPointer,
//     ErrUnknownPointer) and changes nothing.
//  2. If the block was used on other streams (RecordStream), record an
//     event on each of them and keep the block pending until all complete.
//  3. Otherwise, and when its events complete, poison it if poison_on_free
//     is set, merge it with a free neighbour on either side, and insert the
//     merged block into its pool.
//
// # Asynchronous copies (Buffer.CopyFromHostAsync, CopyToHostAsync, FreeAsync)
//
// Host memory from the allocator's PinnedPool is copied directly, in one
// copy queued on the stream (AsyncCopier); other host memory is staged
// through 4 MiB page-locked buffers from that pool, chunk by chunk, so that
// the host-side copy of one chunk and the DMA of another overlap. An event
// recorded after each copy decides when its pinned memory may go back to
// the pool (a Put of a pool buffer in use is deferred until then); until
// then it stays out, whatever the caller does. A staged copy to the host
// delivers its bytes only in Transfer.Wait. A copy on a stream other than
// the buffer's records that use (RecordStream), so the block is not reused
// before the copy is done. FreeAsync(s) is Free made stream-ordered on s:
// on the buffer's own stream Free already is; on another it adds s's use
// first. async.go describes the pipeline.
//
// # Release
//
// EmptyCache waits for outstanding events and returns every segment that
// holds no live or pending block to the device, except segments created by
// prealloc_bytes, which are kept until Close. Memory in segments that still
// hold a live block stays reserved; Stats reports it as inactive split.
//
// # Statistics
//
// Counters are kept incrementally, under the allocator's mutex, with
// PyTorch's key names and semantics (allocation, segment, active,
// inactive_split, allocated_bytes, reserved_bytes, active_bytes,
// inactive_split_bytes, requested_bytes, each for all, small_pool and
// large_pool, each with current, peak, allocated and freed). Only what
// must be written per operation is: a pool's current, allocated and peak,
// and the all-pools current and peak; freed, and all-pools allocated and
// freed, are derived when Stats reads them (stats.go). Tests recount them
// from the blocks the slow way after every step and compare.
//
// # Invariants (checked by the property tests after every operation)
//
//   - the blocks of each segment tile it: the first starts at the segment's
//     address, each starts where the previous ends, the last ends at the
//     segment's end; no two blocks overlap and every reserved byte is in
//     exactly one block;
//   - no two adjacent blocks of a segment are both free (they would have
//     been merged; in a page-mapped arena, both free and of the same kind);
//   - a block is in its pool's index, in the list of its size class, if
//     and only if it is free;
//   - the live table holds exactly the allocated blocks;
//   - the incremental statistics equal a recount from the blocks;
//   - after EmptyCache, every segment (other than preallocated ones) holds
//     a live or pending block.
//
// # Concurrency
//
// All methods of Allocator, Buffer and Scope are safe for concurrent use.
// One mutex guards an allocator's state; it is held for the cached paths
// (tens of nanoseconds) and also across device calls on the slow paths
// (growth, release, event polling, poisoning), which keeps the state simple
// and consistent at the cost of serialising those. A Buffer must not be
// freed while another goroutine copies to or from it: the check that it is
// live and the copy are not atomic together.
//
// # Leak finding
//
// With record_call_sites set to all (or sampled, one allocation in
// 1/sample_rate), each allocation keeps its Go call stack as program
// counters in a fixed array (runtime.Callers); frames are resolved only
// when a report asks for them. LiveBySite groups live allocations by call
// site, Mark and Since list what a phase allocated and did not free, and
// Buffers that the garbage collector finds unreachable without Free are
// freed by a cleanup (runtime.AddCleanup) and listed by Leaked.
//
// # Page-mapped mode (page_mapped:true)
//
// Segments cannot merge, so free memory split between them stays unusable
// for a larger request ("slivers"). In page-mapped mode the large pool is
// built from physical pages instead (VirtualMemory; the page is the
// device's granularity, 2 MiB on current GPUs):
//
//   - arena: one reserved address range per stream, four times the
//     device's memory (address space costs nothing). Its blocks tile the
//     whole range. A free block is either mapped (all the pages it touches
//     are mapped; it is in the pool's index like any free block) or
//     unmapped (page-aligned, nothing mapped, kept in the arena's own list,
//     invisible to the cached path). Two free neighbours of the same kind
//     are merged.
//   - idle page: a mapped page wholly inside a mapped free block, that is,
//     a page no live or pending block touches.
//
// Allocation of a large request:
//
//  1. Best fit among mapped free blocks, as in the default mode: no device
//     call. Frees leave pages mapped, so this is the steady state.
//  2. Otherwise place the request on an unmapped block of the stream,
//     starting at the mapped free block just before it if any: the place
//     needing the fewest new pages wins, then the tightest, then the lowest.
//  3. Map the missing pages: first whole idle chunks taken from anywhere
//     (any stream), one MemUnmap and one MemMap each; only for the rest,
//     MemCreate new chunks. cuMemUnmap does not wait for work in flight,
//     so a chunk whose stream may still use it is moved only after a wait
//     for that stream, unless it is settled: after each growth and release
//     window the allocator records an event (a marker, at most 4 pending
//     per stream) on each stream with new frees, tagged with the count of
//     frees so far, and a block freed before the tag of a completed marker
//     (cuEventQuery, which does not block) needs no wait. An unsettled
//     chunk moving to a placement of its own stream needs none either
//     (page_defer_unmap, the default): it is mapped at its new address
//     while its old mapping stays, as a retiring block with a ghost
//     record that nothing is placed over, and the old mapping is unmapped
//     at a later growth or release window once its stream is settled past
//     the free (the stream's order keeps the new block's work after the
//     old block's, as for any cached block). Settled and same-stream
//     chunks move first; those of other streams only when creating the
//     rest would take the reserve more than 1 % above the active peak,
//     or past the cap.
//     A release window of the fine regime releases only settled chunks;
//     the coarse regime's waits for the others' streams and releases them
//     too. One MemSetAccess covers the run. In the fine regime (below) new physical
//     memory is created only when idle chunks cannot cover the request, so
//     reserved memory grows only when every chunk holds a live block; the
//     waste is the idle pages of chunks that a live block still uses. In
//     the coarse regime memory is created outright while the reserve stays
//     within 3 % of the active peak, and idle chunks move only beyond that.
//
// Chunks. Physical memory is created in chunks: one MemCreate of several
// pages, mapped by one MemMap. The driver maps a physical allocation from
// its start and unmaps only whole mappings, so a chunk moves or goes back
// to the device only when all of its pages are idle. Small chunks pin
// less (a live block holds only its own chunk's idle pages) but cost two
// driver calls each; large ones cost few calls and pin more. No single
// size wins both, so the mode has two regimes:
//
//   - coarse (no cap below the device's memory, the device never found
//     full): growth creates the shortfall, at least 20 MiB, in chunks of up
//     to 64 MiB, and creates memory rather than moving idle chunks while
//     the large pool's reserve stays within 3 % of its peak of active
//     bytes (a move costs as many calls as a growth, and a wait for the
//     stream besides). On the recorded traces this makes fewer driver calls
//     than PyTorch's expandable segments, counted exactly with CUPTI on an
//     H200 (leak_retained_graph 98 against 117, lstm_varlen 274 against
//     586, model_switch 170 against 459, resnet_varbatch 786 against 1,360),
//     at reserved/live 1.011-1.036 on the simulated device.
//   - fine (a cap below the device's memory, after MemCreate found the
//     device full, or page_regime:fine): growth creates the shortfall rounded up to pages, ahead
//     by up to 20 MiB once the large pool holds 64 times that, in chunks of
//     at most 20 MiB and of at most 1/256 of the most the large pool has
//     held (sizeShare): a job of 5 GiB or more grows in 20 MiB chunks, a
//     smaller one in chunks of a few pages, and idle chunks move before any
//     memory is created. A pinned chunk then costs the same small share of
//     every job: reserved/live 1.005-1.013 on the recorded traces and the
//     smallest capacity within 1.013 × live, at 4 to 11 times the driver
//     calls of the coarse regime.
//
// The alternatives measured on the seven traces (docs/alloc.md, "Two
// regimes"): 20 MiB chunks for every job (1.6 times expandable segments'
// calls, a KV-cache job at 1.076), chunks bounded by the job's size for
// every job (up to 11 times their calls), and larger coarse chunks (128 MiB
// and more: fewer calls, up to 1.19 on lstm_varlen).
//  4. Cap or device full: wait for pending frees, search again, release the
//     small pool's cached segments, try again, then report out of memory
//     (OutOfMemoryError.PageMapped says why fragmentation is not the cause).
//
// Chunks under memory pressure. A live block pins the idle pages of its
// chunk, and the chunks that end up pinned are often made in a job's
// first allocations, long before memory is tight. So with a cap below
// the device's memory (the fine regime from the first growth), a new
// chunk holds at most 1/512 of the cap
// (rounded to the nearest page, at least one): a pinned chunk then costs
// at most 0.2 % of the cap, and the smallest capacity of the four
// recorded traces drops to 1.001–1.009 × their live peak (simulated
// device, docs/alloc.md), at the price of more driver calls under caps
// below 10 GiB (20 MiB chunks stay from there up). When MemCreate finds the device out of memory, the same bound is
// taken from what the allocator holds plus what the device has left,
// growth stops ahead of need, and what is still needed is asked for in
// the smaller chunks; that bound only shrinks and lasts until Close, and
// the fine regime stays whatever the cap. Chunks made in the coarse regime
// before the device filled keep their size.
//
// Small requests keep the small pool (2 MiB segments from Device.Malloc);
// when the small pool hits the cap, idle pages are released for it.
//
// Release policy. Keeping every page mapped keeps reserved at the
// all-time peak; releasing idle pages at once would unmap and recreate
// memory on every iteration of a training loop. Instead the allocator
// follows the large pool's active bytes over windows of
// page_release_window allocations (default 4096). At the end of each
// window it keeps enough idle pages to grow back to the peak of the last
// 16 windows, plus page_release_slack (default 3 %) of that peak, and
// releases the rest in one batch (whole idle chunks, highest addresses
// first; MemUnmap and MemRelease per chunk; at least 4 pages or nothing).
// A job whose peak recurs within 16 windows releases nothing; one that
// moved to a smaller phase gives its memory back within 16 windows (with
// two windows, variable-length training released and recreated its
// longest steps' memory every few steps).
// EmptyCache releases every idle chunk at once.
//
// Statistics: reserved_bytes counts mapped pages (plus small segments);
// num_device_alloc and num_device_free count MemCreate and MemRelease
// too; num_mem_map, num_mem_unmap (calls, one per chunk),
// num_stream_syncs (stream_sync_ns, the time spent in those waits) and
// num_page_releases count the page work; device_call_ns is the time spent
// in the device calls themselves (in both modes). The segment
// statistics count an arena as one segment; a Snapshot shows an arena with its mapped size
// and without its unmapped ranges.
//
// Limits: idle pages inside a chunk that a live block still uses can serve
// requests only where they are; page_mapped cannot be combined with
// max_split_size_mb or prealloc_bytes; garbage_collection_threshold
// applies to the small pool only.
//
// # Not done yet
//
// The small pool is not page-mapped. Preallocated memory serves only
// large-pool requests on stream 0.
package alloc
