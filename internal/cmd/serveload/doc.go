// Command serve-load measures the real vram serve binary under load and
// faults, from the outside, the way an operator would see it: what the
// kernel says the process costs, what its files weigh, what its clients
// wait for, and what survives a kill -9.
//
//	go build -o /tmp/vram ./cmd/vram
//	go run ./internal/cmd/serveload -out /tmp/serve-load load crash faults
//
// scripts/serve-load.sh runs the whole set (and the fuzz targets) and
// docs/serve.md ("Load and faults") has the figures.
//
// # The host
//
// The daemon runs with --simulate N (package gpu's Sim) and
// VRAM_SIMULATE_PROCS=200, which gives every simulated GPU 200 processes
// (gpu.NewSimProcs) of the simulator's usual kinds (training sawtooth,
// inference server, idle notebook, slow leak, orphan, zombie, a process of
// another PID namespace), so the daemon's detectors, history and State
// see 1,600 process lifetimes. The simulated GPUs cost the daemon what
// NVML's answers would not: nothing. The figures are the daemon's own work
// (detectors, history, State, HTTP), not the driver's.
//
// # load
//
// One run per history interval (-history 10s,1s,...). Each starts a fresh
// history file and the daemon (with GODEBUG=gctrace=1), waits for
// /healthz, and for -duration keeps:
//
//   - a scraper that GETs /metrics every 15 s, as Prometheus would, timing
//     each response and reading the daemon's own counters (samples taken
//     and overrun, history ticks committed and dropped, the duration of
//     the latest GPU sample);
//   - one /events stream open, like one dashboard tab, counting events;
//   - a monitor that reads /proc/PID/stat (utime + stime, in USER_HZ
//     ticks) and /proc/PID/status (VmRSS, VmHWM), the load average, and the
//     history file's and -wal's sizes every 5 s.
//
// The Go heap is read from the runtime's GC trace on the daemon's standard
// error (its registry exports no Go runtime metrics). After -duration the
// steady phase ends; then 200 GETs of /api/v1/state, one after the other,
// give the latency under the same load, and SIGTERM stops the daemon,
// which checkpoints its WAL. The file is then read with SQLite's dbstat
// table: the bytes of the raw sample tables per tick are what the history
// costs before the raw retention (24 h) folds it; a copy of the file is
// folded into minute aggregates with the store package, as the daemon
// does after the raw retention, to measure the aggregates per minute. The
// per-day figures multiply these: they are extrapolated, not measured over
// a day.
//
// # crash
//
// One run per -kill-history interval (1s,100ms: at 100 ms a kill lands in
// a tick's transaction far more often), each of -kills rounds: start the
// daemon on the same history file, keep a scraper and an event stream,
// wait a uniform random time in [-min-up, -max-up] (seeded, the seed is
// printed), read what the daemon reports as committed, send SIGKILL. What
// the daemon reports is vram_history_ticks_written_total (the writer
// counts a tick once WriteTick's transaction has committed) and the ticks
// GPU 0's history shows through /api/v1/history, which reads the file.
// After the restart (the daemon opens the file and SQLite replays the WAL)
// a second connection runs PRAGMA integrity_check and counts the distinct
// tick times between that life's start and its kill: there must be at
// least as many as were reported, and no gap between ticks longer than two
// history intervals. Ticks that were queued but not committed at the kill
// are lost by design (serve's package doc); an unreported tick leaves no
// trace, so how many were lost is not measured.
//
// # faults
//
// SIGTERM in the middle of a history interval under load (the interval in
// progress must reach the file, the WAL must be checkpointed, the event
// stream must end, the log must end with "stopped"); history files the
// daemon cannot use (random bytes, a directory, a path under a regular
// file, /proc, a schema from a newer vram, a truncated or overwritten
// file); configuration files with mistakes, each of which must be refused
// with its file and line named and no stack trace.
//
// # report
//
// Each run leaves result.json (every figure) and, for load runs,
// series.csv (the monitor's readings); "report" prints the tables again
// from them.
package main

import "runtime"

func numCPU() int { return runtime.NumCPU() }
