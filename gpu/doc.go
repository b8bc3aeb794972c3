// Package gpu reads what a GPU host's driver and kernel know about device
// memory: per device how much is used, reserved and free, and per process how
// much each one holds, who runs it and in which container, and whether it
// looks stale. The monitor commands (vram status, watch, top) and the node
// daemon are built on it. It only reads; it never changes a device setting.
//
// # Layers
//
// The package has four layers, each one behind a small interface so that the
// layer above can be tested without a GPU:
//
//  1. Host and Device (host.go) are what the sampler needs from a driver:
//     identity, memory, utilization, the process lists, per-process
//     utilization and accounting. Two implementations exist: NVML
//     (nvml.go) wraps go-nvml's nvml.Interface at the edge and turns every
//     nvml.Return into an error that names the NVML function; Sim
//     (sim.go) is a deterministic simulated host whose processes' memory
//     moves over time. Tests drive the NVML implementation with go-nvml's
//     mock (mock/dgxa100).
//  2. ProcSource (proc.go) enriches a PID from /proc: user, command line,
//     cgroup and container, start time, parent and state. The procfs
//     implementation reads a configurable proc root (testdata/proc in the
//     tests): /proc/PID/stat through package proc (ReadStat), the rest
//     through github.com/prometheus/procfs. A cache keyed by
//     (PID, start time) means a sample re-reads only /proc/PID/stat, and
//     only once per ProcRefresh; the command line, owner and cgroup are read
//     once per process lifetime. A PID that is reused by a new process has a
//     new start time and is therefore read afresh. These strings are kept
//     exactly as read (a command line may hold newlines and escape
//     sequences); Printable (package proc's) is the one-line, terminal-safe
//     form that every text output shows.
//  3. Sampler (sampler.go) takes a full Snapshot (every NVML query plus the
//     enrichment and the classification of each process) or a memory-only
//     sample (one GetMemoryInfo_v2 per device, the fast path). It keeps the
//     little history that classification needs (first-seen parent PID,
//     memory over the idle window).
//  4. Watch (window.go) runs the sampler on a clock: device memory at the
//     sample interval (fast path), processes at the process interval, and
//     hands the caller one Interval per print interval with the minimum,
//     maximum and mean of every device's and process's used memory over
//     that interval, so peaks between printed lines are not lost. The loop
//     is a Watcher ticked by a Clock: a time.Ticker (ClockTimer), or for a
//     process that only watches, absolute-deadline sleeps in the kernel
//     that wake one thread per sample (ClockSleep, clock_linux.go). At 100
//     lines a second it wakes 200 times a second, so a tick reuses
//     everything it touches (the Interval handed out included) and
//     allocates nothing unless a full sample is due; its cost is then the
//     wakeup itself.
//
// Open (open.go) is what the commands share above these layers: it opens
// the driver and /proc, or a simulated host, applies --gpu, --all-gpus or
// the visible-devices variables, and says what is missing (no driver, an
// unreadable /proc, entries that name no GPU).
//
// # Accounting of device memory
//
// NVML's GetMemoryInfo_v2 splits a device's memory into total = reserved +
// used + free, where reserved is what the driver and firmware keep for
// themselves (it never becomes available to programs) and used is memory
// allocated by programs, including each CUDA context's own overhead. The
// older GetMemoryInfo (v1) folds reserved into used; when only v1 is
// available the device's Memory has ReservedKnown false. Each process's
// memory comes from the driver's process lists (compute and graphics merged
// by PID). Unattributed memory is used minus the sum over the processes the
// driver listed for this device: allocations of processes the driver does
// not list to us (other PID namespaces on drivers from 535.113 on, which
// hide them) and memory still held by the driver for processes being torn
// down. It is clamped at zero. docs/monitor.md explains this with figures.
//
// # Classification
//
// Each process carries flags (Flags):
//
//   - FlagNoSuchProcess: the driver lists the PID but /proc has no such
//     process: it lives in another PID namespace (older drivers report host
//     PIDs to containers) or it exited between the two reads.
//   - FlagZombie: /proc/PID/stat says Z (zombie) or X (dead), or the process
//     exists with an empty command line (the kernel has already released its
//     address space: it is exiting).
//   - FlagOrphaned: the process was started by something that is gone. The
//     rule: its parent PID does not exist; or its parent changed since the
//     sampler first saw it (it was reparented while we watched); or its
//     parent is PID 1 or a subreaper (a process named systemd, the per-user
//     manager) while the process is not the leader of its own session and
//     its session leader no longer exists (it was started from a shell,
//     terminal or launcher that has exited, rather than by a service
//     manager, which makes its services session leaders). A nohup'ed job
//     whose shell exited is therefore orphaned: the flag is a fact, not a
//     verdict.
//   - FlagJupyter: the command line contains ipykernel_launcher (or
//     ipykernel), the usual holder of forgotten tensors.
//   - FlagIdle: no GPU activity over the idle window. Where the driver
//     supports per-process utilization (GetProcessUtilization), a process is
//     idle when the sampler has watched it for the whole window and no
//     sample in the window shows SM or memory activity (IdleByUtilization).
//     The driver buffers only about a second of these samples, so a one-shot
//     vram status cannot flag idleness; vram watch and vram top can. The
//     call costs about 1.5 ms of CPU, so it is made at most once a second. Where it does
//     not (MIG, old drivers), the sampler falls back to history: the
//     process's memory has not changed over a full window and the device's
//     utilization was 0 at every sample in it (IdleByMemory). Snapshot
//     records which method was used.
//   - FlagNoPermission: /proc refused to show the process.
//
// # Visible devices
//
// ParseVisible interprets CUDA_VISIBLE_DEVICES and NVIDIA_VISIBLE_DEVICES
// (indices, full or prefix UUIDs with or without GPU-, all, none, void,
// empty) the way CUDA does: the list stops at the first entry that names no
// device. Entries that cannot be mapped to a whole GPU (MIG-...) produce a
// warning. Indices are NVML indices (PCI bus order, the order CUDA uses with
// CUDA_DEVICE_ORDER=PCI_BUS_ID).
//
// All exported functions are safe for concurrent use unless a type's
// documentation says otherwise; Sampler is not (one goroutine samples).
package gpu
