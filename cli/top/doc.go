// Package top is `vram top`: an interactive terminal monitor of GPU memory
// and of the processes that hold it, built on package gpu (NVML, /proc and
// the simulated host) and on Bubble Tea.
//
// # Architecture
//
// The program is one Bubble Tea model (model.go) with three rules:
//
//  1. All I/O happens in commands. The only NVML and /proc reads are the
//     poll command, which takes one full gpu.Snapshot through the sampler,
//     and the signal command, which re-reads a process's identity and sends
//     the signal. Polls never overlap: the next one is armed (with tea.Tick)
//     only when the previous sample arrives, delayed by the interval minus
//     the time the sample took, so the sampler, which is not safe for
//     concurrent use, is only ever called from one command at a time.
//  2. Update is a state transition: it records samples into the history,
//     moves the selection, changes the sort, filter and screen, and opens or
//     answers the confirmation dialog. It reads no clock: durations come in
//     the messages.
//  3. View renders the state and nothing else (view.go). Every line is cut
//     to the terminal's width and the frame to its height; a terminal below
//     60 columns (or too short for the GPUs shown) gets a one-line message.
//
// # History and growth (history.go)
//
// The model keeps each device's used memory and each listed process's
// memory over the last Window samples (the --window span divided by the
// interval, 16 to 4096 samples; when that bound changes the span, the
// footer shows the span and the one asked for). A process that leaves the driver's list is
// forgotten; a PID reused by a process with another start time starts a new
// history. Graphs are drawn on a fixed time axis: the full width is always
// Window samples, newest on the right, a column holding several samples shows
// their maximum so that a spike is never averaged away.
//
// The growth column is a robust slope in MiB per minute: the window is cut
// into 3 to 6 groups of consecutive samples (each longer, one hopes, than a step of the workload), each group contributes its
// minimum (the floor of a training job's saw-tooth, which is what rises when
// memory leaks), and the slope is the Theil–Sen estimate (median of the
// pairwise slopes) of those minima. It needs six samples; before that the
// column shows –; it also needs the samples to span 10 s. It is an indicator over the visible window, not a leak
// verdict: package detect is where verdicts are made.
//
// # Signals (signal.go)
//
// t (SIGTERM) and k (SIGKILL) open a dialog naming the PID, command, GPU,
// memory and start time; only y sends. Right before the signal the command
// re-reads the PID's start time from /proc and refuses when it differs from
// the one the monitor showed (the PID was reused) or the process is gone.
// PID 1, vram's own PID and processes absent from /proc (whose identity
// cannot be checked) are refused before any dialog. --read-only disables both
// keys and the help says so. The result, or the refusal, is shown in the
// status line. Signals go through package proc's checked path and its
// Signaller and Stater interfaces: a pidfd opened before the identity
// re-check on a real host (kill(2) on kernels without pidfds), a no-op on the
// simulated one (its PIDs may exist on the machine), a recording fake in
// tests.
//
// Known limits: signalling another user's process fails with a clear message
// unless vram runs as that user or root.
package top
