// Package replay runs recorded or synthetic allocation traces through the
// caching allocator (package alloc) and measures what a job would have
// needed: how much memory it held at its peak, how much the allocator had to
// reserve for it, the smallest device on which it would still complete, how
// often the driver was called and how long each allocation and free took on
// the host.
//
// # Glossary
//
//   - trace: a sequence of rmm.Records (allocate, allocate failure, free), from
//     an RMM log, a PyTorch snapshot or a generator of package trace/synth.
//   - trace pointer: the address a record names. It only pairs a free with
//     its allocation; the allocator under test chooses its own addresses.
//   - live bytes: the sum of the requested sizes of the trace's allocations
//     that are allocated and not yet freed. Its peak ("live") is the least
//     memory any allocator could have served the trace with.
//   - reserved bytes: what the allocator holds from the device (its
//     reserved_bytes statistic). reserved/live at their peaks is the memory
//     ratio: 1 is perfect, PyTorch's default reaches 2.2 on a real LSTM trace.
//   - policy: a named allocator configuration (Policies).
//   - pass: one replay of a whole trace on a fresh allocator.
//
// # One pass (Replay)
//
//  1. Read the next record from a Source (an rmm.Reader streams a file in
//     constant memory; Compact holds a trace in 24 bytes per record).
//  2. An "allocate failure" record is skipped and counted: the recorded
//     program's allocator failed there, so the program did not get memory.
//  3. An "allocate" record calls Allocator.Malloc with the recorded size on
//     the stream the record's stream maps to (stream 0 stays the default
//     stream; other handles become 1, 2, ... in order of first appearance,
//     which the allocator uses only as pool keys: nothing is launched on
//     them). The allocator's pointer is kept in a map keyed by the trace
//     pointer. A trace pointer that is allocated again while still live is
//     counted; the earlier allocation stays allocated and counts as leaked.
//  4. A "free" record looks the trace pointer up and frees the allocator's
//     pointer. A free of a pointer that is not live (its allocation was
//     before the recording started, or a free was logged twice) is counted
//     and skipped, not fatal.
//  5. If Malloc runs out of memory the pass stops there and the Result says
//     at which record (Result.OOM): the trace does not fit.
//  6. At the end, what is still live is the leak (Result.LeakedBytes). The
//     statistics and the device call counts are taken then; afterwards the
//     pass frees what is live and closes the allocator, so that a real
//     device gets its memory back.
//
// # Host time per operation
//
// With Options.Time set, each Malloc and Free is timed by itself with the
// monotonic clock (time.Now before, time.Since after) and the median cost of
// an empty time.Now/time.Since pair, measured at the start of the pass
// (calibrateTimer), is subtracted; results below zero count as zero. The
// samples go into a log-linear histogram (exact to the nanosecond below 1 µs,
// within 1/64 above), so a trace of any length is timed in fixed memory, and
// p50 and p99 are read from it. The clock's own jitter (tens of nanoseconds on
// a virtual machine) stays in the figures: a p50 of 60 ns means "about 60 ns",
// not "60 ± 1 ns".
//
// # Where the timed pass reads the trace
//
// The timed pass's wall time (Result.WallSeconds) is meant to be compared
// with PyTorch's replay harness (bench/torchreplay), which parses its CSV
// into memory before its clock starts. Measure therefore replays the timed
// pass from the trace's Compact copy, built by the first pass (or, if that
// pass stopped short, read before the timed pass), so the clock counts the
// allocator, the driver calls, the engine's bookkeeping (the pointer map),
// the per-operation clocks and, with Verify, the verification, as the
// harness's does. The copy costs 24 bytes per record: 1.3 MB for a real
// trace of 56 thousand records, 240 MB for ten million.
// MeasureOptions.Stream keeps the timed pass streaming the file in constant
// memory instead; its wall time then includes reading, decompressing and
// parsing the log.
//
// # Smallest capacity that completes (MinCapacity)
//
// The allocator is given a cap (max_bytes): past it, growth first releases
// the cache and retries, as PyTorch does under
// set_per_process_memory_fraction, and only then fails. MinCapacity bisects
// that cap between the peak of live bytes minus one (which cannot complete:
// the allocator must hold at least what is live) and the peak reserved
// without a cap (which completed), to a resolution of 0.1 % of live or 2 MiB,
// whichever is larger, and reports the smallest cap that completed. Each
// step is a full pass, so the trace must be replayed about a dozen times:
// Measure keeps it as a Compact array (pointer, size, stream index, action;
// threads and times are dropped) built during the first pass and replays
// that, rather than reading and parsing the file again. The bisection
// assumes that a trace which completes under a cap also completes under any
// larger cap. That holds for the release-and-retry path but is not
// guaranteed for every policy (a larger cap changes which blocks stay
// cached, so placement differs); the result is the smallest cap found to
// complete, within the resolution, on that assumption.
//
// # Verification and leaks (Options.Verify, Result.DeviceLeakedBytes)
//
// With Verify, every allocation gets a pattern derived from its record's
// index written into its first and last 8 bytes (all of it below 16
// bytes; CopyHtoD, outside the per-operation clocks), which is read back and
// compared before its free (CopyDtoH): memory handed out twice, or
// unmapped under a live block, shows as a mismatch. Only the ends are checked, so that a simulated
// device does not hold every byte of a trace in host memory. Every pass
// also reads how much device memory is held before the allocator is
// created and after the teardown: this process's own figure when
// Options.ProcessMemory gives it (vram replay --device cuda reads the
// driver's per-process memory through NVML), else the device's free
// memory (MemInfo), which other processes move too. The difference is
// DeviceDeltaBytes; DeviceLeakedBytes is the same when positive, 0 when
// everything went back, and never negative: memory another process freed
// during the pass is no leak of this one. Measure verifies in
// the timed pass when there is one, so the wall time includes the
// verification, as the harness's total does with its --verify.
//
// # Devices
//
// By default every pass runs on a fresh simulated device (package alloc/sim)
// of the given capacity, and the driver calls are the simulated device's
// call counts (Malloc, Free and the virtual-memory calls). A device that
// offers what alloc/cudadev's does (memory, virtual-memory management,
// stream and event waits) is wrapped in a counter of the same calls, so
// that --device cuda reports the same figures; on any other alloc.Device
// they come from the allocator's statistics (num_device_alloc +
// num_device_free).
//
// # Where it sits
//
// Package replay is a top-level package, above alloc rather than inside
// trace/ or alloc/: it drives the allocator (alloc, alloc/sim) with records
// from every trace format (trace/rmm, trace/torchsnap, trace/synth). The
// formats are leaves that alloc itself may import (alloc writes its own
// history as rmm records), so replay cannot live among them without a cycle;
// and it is a consumer of the allocator, not a part of it, so it does not
// belong under alloc/ either. The dependency runs one way: replay → alloc →
// trace/rmm.
package replay
