// Package serve is the node daemon behind `vram serve`: it samples every GPU
// of a host and every process holding GPU memory, keeps their history,
// exposes them to Prometheus and to the JSON API, raises alerts and
// enforces the policy file's quotas and reclaim rules.
//
// # One owner for the mutable state
//
// One goroutine, the sampling loop (Daemon.Run), owns everything that
// changes between samples: the per-device health, the per-process leak
// detectors, the ring buffers of recent memory, the history interval being
// folded, the alert engine's instances, the policy state (quota timers,
// actions already audited, SIGKILLs waiting for their grace). The one
// thing shared is the State: it is made from what the loop keeps (the
// records, rings and verdicts of the latest sample), but only when a
// reader first asks for it, since at 10 samples a second it is read about
// once a second and building it for every sample of 1,600 processes cost
// a tenth of the sample. A mutex is held by the loop from the end of the
// GPU sample to the end of the tick (and during a reload) and by the
// reader that builds the State; so a reader waits for a tick in progress
// (never for the driver), sees a complete State, and every reader of one
// sample shares one State, never modified once built. The loop never
// waits for a reader except one that is building a State.
//
// # Data flow
//
// Each sample (every Config.Interval, 1 s by default) goes one way:
//
//	gpu.Sampler.Sample ──► health ──► detectors ──► records ──► history ──► alerts ──► policies ──► State
//	     (NVML, /proc)    (Xid too)   (rings)    (one per     (fold)      (engine)    (signals)    (when read,
//	                                              process)                                          event hub)
//
// The stages, in order:
//
//  1. Sample. One full gpu.Snapshot: memory, utilization and processes of
//     every selected GPU, each process enriched from /proc and flagged
//     (zombie, orphaned, idle, ...). The metrics collector (serve/metrics)
//     mirrors it from now on: a scrape reads the snapshot, never NVML.
//  2. Health. A GPU whose queries fail (GPU lost, driver errors) is
//     unhealthy with the error as its reason, and the loop goes on with
//     the others; when every GPU fails, the sample fails, every GPU is
//     unhealthy and the loop goes on. An Xid error (gpu.XidSource: NVML's
//     event set, read by a helper goroutine with a 1 s timeout and handed
//     over through a channel) marks its GPU unhealthy for XidHold (5 min)
//     with the Xid number in the reason. A GPU that answers again, with no
//     recent Xid, is healthy again.
//  3. Detectors. One detect.Detector per process lifetime (GPU, PID, start
//     time), fed every sample, dropped when the process is gone (but kept
//     while its GPU fails to answer: its absence then says nothing).
//     Verdicts are recomputed every VerdictEvery (5 s, one detector
//     window), at most MaxVerdicts (64) per sample, oldest first, so a
//     node with thousands of processes costs a bounded time per sample.
//     A leak is reported once detect.Confirm has seen it called for 15 s;
//     only confirmed leaks reach the alerts and the slope metric (the
//     deploy/ alert rules read a positive slope as "leaking").
//  4. Records. One serve/sample.Process per process of the sample, made
//     from the snapshot and the process lifetime's track (its command
//     line, read once; how long it has been idle; a confirmed leak and its
//     slope; its workload). Memory the driver cannot report is 0 bytes in
//     the record, decided there once. The stages below read the records:
//     the history folds them, the alert engine evaluates them, the
//     policies merge them per PID (policy.FromProcesses), and the State's
//     processes are made from them. Each process lifetime's track is
//     looked up once per sample.
//  5. History. The samples of each HistoryInterval (10 s) are folded into
//     one tick that keeps the peaks (per GPU the highest used memory, per
//     process the most bytes and every flag it had) and queued to a writer
//     goroutine that owns the SQLite store (serve/store), so a slow disk
//     delays history, not sampling. store.Maintain compacts and applies the
//     retention in the background. A committed tick survives kill -9 (WAL,
//     see serve/store); ticks still queued when the process dies are lost,
//     at most a few seconds' worth. At a clean stop the interval in
//     progress is written too.
//  6. Alerts. The alert engine (serve/alert) evaluates the configuration's
//     rules on the sample; each transition (firing, resolved) is recorded
//     in the store, handed to the notifier (log and webhooks, which retry
//     in their own goroutines) and streamed. The engine's state lives in
//     memory only: at its start the daemon resolves the alerts an earlier
//     run left firing in the store, so none stays open forever.
//  7. Policies. The policy file (package policy) is evaluated on the
//     sample: reclaim rules and quotas (with their timers). Each planned
//     action on a process lifetime is taken and audited once, not again
//     while the rule keeps planning it. Signals go through package proc,
//     which re-checks the PID's start time right before each one and never
//     signals PID 1 or the daemon; a process no rule names is never
//     signalled. A SIGTERM starts the grace; a later sample sends SIGKILL
//     (identity checked again) if the process is still alive, so the loop
//     never sleeps. With dry_run (the default) every decision is taken
//     as in a live run (zombies and invisible PIDs refused, identity
//     checked, the handle probed with signal 0) and only the signal is
//     held back, so the audit says what a live run would do. Every action, dry or not, is written to the store,
//     logged, counted in vram_policy_actions_total and streamed.
//  8. State. The sample becomes the latest, whose State is built when it
//     is first read, and a "state" event (without the State: the stream
//     reads it when it writes) goes to the event hub, which fans events
//     out to subscribers through bounded channels: a subscriber that falls
//     behind loses events, never blocks the loop.
//
// # Outside the loop
//
// Daemon implements api.Backend for the HTTP layer (serve/api): State and
// Subscribe read the latest sample's State and the hub; the history, alert and
// action queries read the store (SQLite in WAL mode lets them run beside
// the writer); Signal re-checks that the named process (PID and start
// time) holds memory in the latest State and goes through the same
// checked path as the policies, audited with rule "api"; Reload reads the
// configuration, the policy file and the alert rules again and hands them
// to the loop, keeping the old ones on any error.
//
// # Costs and limits
//
// Each process lifetime costs a detector with 64 windows (about 30 KB once
// its windows are full, scratch included) and a ring of Recent values. At
// sample intervals under a second a process's Recent in the State is
// refreshed once a second, which is all a sparkline needs. The State
// carries every process with its ring, so at 1,600 processes it is a few MB
// of JSON; the HTTP layer sends at most one per StatePeriod. Measured on a
// simulated host of 8 GPUs × 200 processes at 10 samples a second
// (docs/serve.md, "Load and faults"): the CPU figures there; the sample
// itself (gpu.Sampler) and the leak verdicts are most of it.
package serve
