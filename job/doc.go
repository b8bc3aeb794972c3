// Package job runs a GPU job as a child process and explains its memory:
// the true peak of its whole process tree, its steady state, whether it
// leaks, why it ran out of memory, an optional hard limit, and, for vram
// fit, the largest batch size that fits. It only watches from outside:
// the job can be PyTorch, TensorFlow, JAX, CuPy or anything that uses CUDA;
// nothing is injected into it.
//
// # Supervision (run.go)
//
// Run starts the command with vram's standard input and output handed over
// as they are (the same file descriptors: a terminal stays a terminal, and
// Python's stdout keeps its line buffering). Standard error goes through
// a pipe: each chunk read is written to vram's standard error at once and
// only then given to the OOM scanner, so the user sees the job's errors
// as early as without vram. The cost is that the job's stderr is a pipe,
// not a terminal (no colours from libraries that check).
//
// The job stays in vram's process group. Signals vram receives (the CLI
// passes SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) are forwarded
// to the job's main process through Spec.Signals; the CLI leaves out SIGINT
// and SIGQUIT when vram is in the foreground of a terminal, because the
// terminal has already sent them to the whole group, the job included.
// The exit status is kept: a job killed by signal N reports 128+N.
//
// # The process tree (tree.go)
//
// Every sample re-scans the tree: the job's main process and its
// descendants, found through the PPid links of /proc/PID/stat. A scan
// lists /proc once and reads stat only for PIDs it has not classified
// before and for members (to see exits, zombies and PID reuse): the cost is
// one getdents plus a read per member, whatever the size of the host (the
// first scan reads every process once). A member stays a member while its
// (PID, start time) lives, so workers whose launcher exited still count;
// with Spec.Subreaper vram also adopts orphans that were never seen and
// reaps the zombies among them.
//
// Signals to the tree (limit, timeout, cancellation) check each process's
// identity first: a pidfd is opened, the start time is read again, and the
// signal goes through the pidfd only when it still matches, so a PID reused
// by an unrelated process is never hit. Only members are signalled.
//
// # Memory (source.go)
//
// A Source reads, per sample, each device's used memory and the driver's
// per-process list (two NVML calls per device through package gpu). The
// job's memory is the sum over the processes of the tree. Without NVML (no
// driver, a container without the device) Source is nil: the job still
// runs, its exit status and OOM messages are still read, and the result
// says why memory figures are missing.
//
// Sampling at 50 ms sees most steps of a training loop but can miss a peak
// that lasts less than one interval: the peak is the highest sample, a
// lower bound of the true peak. The samples are kept in memory (about
// 40 bytes per sample and GPU: one hour at 50 ms is about 3 MiB per GPU).
//
// # Figures at exit (run.go, report.go)
//
//   - Peak: the highest total of the tree, with its time, the GPU holding
//     most of it and the process holding most at that sample.
//   - Steady state: the median of the window floors (minimum per window)
//     after the leak detector's warm-up; windows are the detector's
//     (5 s), shortened so that at least eight fit in a short job.
//   - Leak: package detect's verdict on the tree's total, without the
//     trailing samples where the job held nothing (its exit).
//   - Time above 90 %: per GPU the job used, how long the device's used
//     memory (all processes) stood at or above 90 % of its total.
//
// # OOM diagnosis (oom.go, diagnose.go)
//
// The scanner matches each line of standard error, of any length (see
// MaxLine: a long line is searched in bounded windows), against the
// markers of PyTorch (CUDA out of memory, OutOfMemoryError), TensorFlow
// (ResourceExhaustedError, OOM when allocating), JAX/XLA
// (RESOURCE_EXHAUSTED), CuPy (cupy.cuda.memory.OutOfMemoryError) and CUDA
// (cudaErrorMemoryAllocation, CUDA_ERROR_OUT_OF_MEMORY, "CUDA error: out of
// memory") and parses the figures PyTorch states in both its 2.x and older
// wordings (tried to allocate, capacity, free, allocated, reserved but
// unallocated, private pools, allowed, the processes listed), and the
// request size of XLA and CuPy. An OOM is Detected when such a message was
// printed and the job failed; a message from a job that exits 0 is Caught
// (it handled the error). The cause is the first that holds, in order:
//
//  1. other-process: processes outside the job held at least 10 % of the
//     GPU and at least the failed request at the last sample where the job
//     held memory; the largest is named (PID, command, bytes). Without
//     samples, the processes the PyTorch message lists that are not in the
//     job's tree are used.
//  2. leak: the leak detector called the job's memory a leak.
//  3. fragmentation: PyTorch's reserved-but-unallocated memory was at least
//     the failed request and at least 1/32 of the capacity: the cache held
//     enough free bytes, not in one piece (advice: expandable segments).
//  4. unknown: the message states no sizes and vram saw none of the job's
//     memory (no memory figures, or nothing held in the samples): nothing
//     tells, and the advice says what would (memory figures, a message
//     with sizes such as PyTorch's).
//  5. demand: otherwise the job needs more than the GPU has; without
//     memory figures the explanation says that other processes cannot be
//     ruled out.
//
// # Limit (limit.go)
//
// A limit (bytes, or a percentage of each GPU's total) applies per GPU to
// the tree's memory on it: a warning at 90 %, SIGTERM to every member at
// the limit, SIGKILL to what is left after the grace period (10 s). The
// result and the report say the limit ended the job. The check runs at
// each sample: a job can exceed its limit for up to one interval, and
// what it allocates in that time is not prevented (this is a watchdog, not
// an allocator quota).
//
// # Batch search (fit.go)
//
// See the documentation of Fit.
//
// # OOM recovery (retry.go)
//
// Retry runs the command with a batch size and starts it again with a
// smaller one each time it dies of running out of memory, learning the
// capacity with the same evidence as Fit. It only restarts the process:
// the job resumes from its own checkpoint. See the documentation of Retry.
package job
