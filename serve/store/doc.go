// Package store keeps the node daemon's history in one embedded SQLite file:
// device memory per GPU and process memory per process over time, the audit
// trail of policy actions, and alerts. The daemon writes one Tick per history
// interval; the dashboard and the API read ranges back at the resolution they
// draw.
//
// # Engine and durability
//
// The file is opened with modernc.org/sqlite, a pure-Go translation of SQLite,
// so the daemon needs no C library for its history (the binary already uses
// cgo for NVML; the store adds none). The journal is in WAL mode: readers
// (API requests) never block the writer (the sampling loop) and the writer
// never blocks them.
//
// synchronous=NORMAL is the default, and it is enough for the promise this
// package makes: no committed tick is lost when the daemon is killed (kill -9,
// OOM killer, a crash). In WAL mode a commit appends the transaction to the
// -wal file with write(2) before it returns; the bytes are then in the
// kernel's page cache, which outlives the process, and the next open replays
// them. What NORMAL gives up is the fsync of the WAL at each commit: after a
// power loss or a kernel crash the last transactions before the last
// checkpoint may be missing, but the file is never corrupt (the WAL's
// checksums stop replay at the first torn frame). FULL (Options.Durable)
// fsyncs at every commit and survives power loss too, for the cost of one
// fsync per tick. For monitoring history, losing the last seconds on power
// loss is acceptable and an fsync per tick on a busy node's disk is not, so
// NORMAL is the default. The crash test (TestCrashKeepsCommittedTicks)
// re-executes the test binary as a writer, kills it with SIGKILL mid-stream
// and checks every tick it reported committed, and PRAGMA integrity_check.
//
// # Schema
//
// The schema version is SQLite's user_version. Open applies every migration
// above the file's version in order, each in its own transaction that also
// sets the new version, so a crash during a migration leaves the file at the
// old version, whole. A file written by a newer vram (a version above the
// migrations this build knows) is refused with an error that says so, rather
// than written with the wrong schema.
//
// Times are Unix milliseconds. Strings that repeat at every tick are stored
// once: gpus holds each device (UUID, model name) and processes each process
// lifetime (GPU, PID, start time, user, command); samples refer to them by
// integer id. A process is identified by (GPU, PID, start time), so a reused
// PID is a new process. The sample tables are keyed by (time, id) WITHOUT
// ROWID: inserts append at the end of the B-tree, retention deletes a prefix,
// and a range query reads one contiguous run. There is no second index by
// process: a process's history is read by scanning the time range and
// keeping its rows, which is cheap for the ranges a dashboard shows and grows
// with the number of processes on the node for long ranges (ProcessHistory
// over days reads the minute aggregates, 60 times fewer rows).
//
//	device_samples   (t, gpu) -> used, reserved, free, total, util
//	process_samples  (t, proc) -> bytes, flags; allocated, reserved (NULL: not on libvram)
//	device_minutes   (t, gpu) -> n, min/max/mean of used, reserved, free, util; total
//	process_minutes  (t, proc) -> n, min/max/mean of bytes; flags ORed;
//	                              alloc_n, min/max/mean of allocated and reserved
//	actions          audit: time, rule, pid, start time, action, reason, result
//	alerts           time, name, severity, gpu, pid, message, state
//
// Version 2 added the figures of vram's allocator inside a process
// (libvram's statistics channel, docs/channel.md): allocated and reserved
// bytes, nullable columns added to the sample tables with ALTER TABLE, so a
// version 1 file is migrated in place and its rows read back as "no
// figures". A minute aggregate counts the rows that had figures (alloc_n):
// its means are over those rows only, and merging minutes weights them by
// that count (TestMigrationFromVersion1, TestAllocatorFigures).
//
// # Writing
//
// WriteTick inserts one tick (every device and process of one sample) in one
// transaction with prepared statements: a tick is in the file whole or not at
// all. Writes are serialised by the Store; reads run beside them.
//
// One file has one writer. With Options.Lock (the daemon sets it) Open takes
// an exclusive flock(2) on path + ".lock" and writes its PID there; a second
// Open with Lock, in another process or this one, fails with a LockedError
// that names the holder's PID instead of interleaving its ticks with the
// first's. The kernel releases an flock when its file is closed or its
// process dies, so a lock file left by kill -9 holds nothing and is simply
// taken again. The lock is a separate file, never the database itself:
// SQLite keeps POSIX locks on the database, which a second descriptor on it
// closed by this process would silently drop.
//
// # Retention and downsampling
//
// Compact, run periodically by Maintain, keeps raw samples for
// Options.RawRetention (24 h by default). Older raw samples are folded into
// 1-minute aggregates (n, min, max, mean) and deleted, in the same
// transaction, an hour of data per transaction so that a first run after a
// long stop does not hold the write lock for long. A minute that already has
// an aggregate (samples that arrived late) is merged into it: min of the
// minima, max of the maxima, the mean weighted by the counts. Aggregates are
// kept for Options.AggregateRetention (30 days); actions and alerts as long
// as the aggregates. Process lifetimes that no sample refers to any more are
// deleted.
//
// # Reading
//
// DeviceHistory returns a GPU's memory between t0 and t1 in buckets of a
// resolution: each point carries the min, max and mean of the raw samples and
// aggregates that fall in its bucket, so a peak is never averaged away by a
// coarse resolution. ProcessHistory does the same for one process (by GPU and
// PID; every lifetime of the PID in the range). Actions and Alerts return
// the audit trail and the alerts in a range; OpenAlerts the alerts whose
// latest transition is "firing".
package store
