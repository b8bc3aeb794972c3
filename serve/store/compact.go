package store

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"
)

// CompactStats says what one Compact did.
type CompactStats struct {
	DeviceRowsFolded, ProcessRowsFolded         int64 // raw rows folded into minutes and deleted
	DeviceMinutesDeleted, ProcessMinutesDeleted int64 // aggregates past retention
	ProcessesDeleted                            int64 // lifetimes no longer referenced
	OtherDeleted                                int64 // actions and alerts past retention
}

// Fold raw rows older than end into minute aggregates, merging with any
// minute already there. SQLite evaluates every SET expression on the old row.
const foldDevices = `
INSERT INTO device_minutes (t, gpu, n, used_min, used_max, used_mean, res_min, res_max, res_mean,
	free_min, free_max, free_mean, total, util_min, util_max, util_mean)
SELECT (t / 60000) * 60000 AS m, gpu, count(*),
	min(used), max(used), avg(used), min(reserved), max(reserved), avg(reserved),
	min(free), max(free), avg(free), max(total),
	coalesce(min(CASE WHEN util >= 0 THEN util END), -1),
	coalesce(max(CASE WHEN util >= 0 THEN util END), -1),
	coalesce(avg(CASE WHEN util >= 0 THEN util END), -1)
FROM device_samples WHERE t < ? GROUP BY m, gpu
ON CONFLICT (t, gpu) DO UPDATE SET
	n = n + excluded.n,
	used_min = min(used_min, excluded.used_min), used_max = max(used_max, excluded.used_max),
	used_mean = (used_mean * n + excluded.used_mean * excluded.n) / (n + excluded.n),
	res_min = min(res_min, excluded.res_min), res_max = max(res_max, excluded.res_max),
	res_mean = (res_mean * n + excluded.res_mean * excluded.n) / (n + excluded.n),
	free_min = min(free_min, excluded.free_min), free_max = max(free_max, excluded.free_max),
	free_mean = (free_mean * n + excluded.free_mean * excluded.n) / (n + excluded.n),
	total = max(total, excluded.total),
	util_min = CASE WHEN util_min < 0 THEN excluded.util_min WHEN excluded.util_min < 0 THEN util_min ELSE min(util_min, excluded.util_min) END,
	util_max = max(util_max, excluded.util_max),
	util_mean = CASE WHEN util_mean < 0 THEN excluded.util_mean WHEN excluded.util_mean < 0 THEN util_mean
		ELSE (util_mean * n + excluded.util_mean * excluded.n) / (n + excluded.n) END`

// orFlags ORs the flags of a group: SQLite has no bitwise-OR aggregate, so
// each of the 16 bits is the maximum of that bit.
var orFlags = func() string {
	var b strings.Builder
	for i := range 16 {
		if i > 0 {
			b.WriteString(" | ")
		}
		fmt.Fprintf(&b, "max(flags & %d)", 1<<i)
	}
	return b.String()
}()

var foldProcesses = `
INSERT INTO process_minutes (t, proc, n, bytes_min, bytes_max, bytes_mean, flags,
	alloc_n, allocated_min, allocated_max, allocated_mean, reserved_min, reserved_max, reserved_mean)
SELECT (t / 60000) * 60000 AS m, proc, count(*), min(bytes), max(bytes), avg(bytes), ` + orFlags + `,
	count(allocated), min(allocated), max(allocated), avg(allocated), min(reserved), max(reserved), avg(reserved)
FROM process_samples WHERE t < ? GROUP BY m, proc
ON CONFLICT (t, proc) DO UPDATE SET
	n = n + excluded.n, flags = flags | excluded.flags,
	bytes_min = min(bytes_min, excluded.bytes_min), bytes_max = max(bytes_max, excluded.bytes_max),
	bytes_mean = (bytes_mean * n + excluded.bytes_mean * excluded.n) / (n + excluded.n),
	alloc_n = alloc_n + excluded.alloc_n,
	` + mergeNullable("allocated") + `,
	` + mergeNullable("reserved")

// mergeNullable merges the min, max and mean of column c of a process
// minute (NULL where no row had figures, alloc_n of them did) with those
// of the rows folded into it. SQLite's two-argument min and max are NULL
// when either argument is, hence the coalesce.
func mergeNullable(c string) string {
	return fmt.Sprintf(`%[1]s_min = coalesce(min(%[1]s_min, excluded.%[1]s_min), %[1]s_min, excluded.%[1]s_min),
	%[1]s_max = coalesce(max(%[1]s_max, excluded.%[1]s_max), %[1]s_max, excluded.%[1]s_max),
	%[1]s_mean = CASE WHEN alloc_n + excluded.alloc_n = 0 THEN NULL
		ELSE (coalesce(%[1]s_mean * alloc_n, 0) + coalesce(excluded.%[1]s_mean * excluded.alloc_n, 0)) / (alloc_n + excluded.alloc_n) END`, c)
}

// Compact folds raw samples older than the raw retention into 1-minute
// aggregates and deletes what is older than the aggregate retention. It
// works an hour of raw data per transaction.
func (s *Store) Compact(ctx context.Context) (CompactStats, error) {
	var st CompactStats
	now := ms(s.opts.Now())
	cutoff := now - s.opts.RawRetention.Milliseconds()
	cutoff -= cutoff % minute // fold whole minutes only
	for {
		done, err := s.foldChunk(ctx, cutoff, &st)
		if err != nil {
			return st, err
		}
		if done {
			break
		}
	}
	aggCutoff := now - s.opts.AggregateRetention.Milliseconds()
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return st, fmt.Errorf("history: compact: %w", err)
	}
	defer tx.Rollback()
	for _, d := range []struct {
		q string
		n *int64
	}{
		{"DELETE FROM device_minutes WHERE t < ?", &st.DeviceMinutesDeleted},
		{"DELETE FROM process_minutes WHERE t < ?", &st.ProcessMinutesDeleted},
		{"DELETE FROM actions WHERE t < ?", &st.OtherDeleted},
		{"DELETE FROM alerts WHERE t < ?", &st.OtherDeleted},
		// last is refreshed once a minute: a lifetime last written two
		// minutes before the cutoff has no row left at or after it.
		{"DELETE FROM processes WHERE last < ?", &st.ProcessesDeleted},
	} {
		arg := aggCutoff
		if d.n == &st.ProcessesDeleted {
			arg = aggCutoff - 2*minute
		}
		n, err := execN(ctx, tx, d.q, arg)
		if err != nil {
			return st, fmt.Errorf("history: compact: %w", err)
		}
		*d.n += n
	}
	if err := tx.Commit(); err != nil {
		return st, fmt.Errorf("history: compact: %w", err)
	}
	if st.ProcessesDeleted > 0 {
		clear(s.procs)
	}
	return st, nil
}

// foldChunk folds at most compactChunk of raw data older than cutoff; it
// reports done when nothing older than cutoff is left.
func (s *Store) foldChunk(ctx context.Context, cutoff int64, st *CompactStats) (done bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, fmt.Errorf("history: compact: %w", err)
	}
	defer tx.Rollback()
	var d, p sql.NullInt64
	if err := tx.QueryRowContext(ctx, "SELECT min(t) FROM device_samples").Scan(&d); err != nil {
		return false, fmt.Errorf("history: compact: %w", err)
	}
	if err := tx.QueryRowContext(ctx, "SELECT min(t) FROM process_samples").Scan(&p); err != nil {
		return false, fmt.Errorf("history: compact: %w", err)
	}
	oldest := cutoff
	if d.Valid && d.Int64 < oldest {
		oldest = d.Int64
	}
	if p.Valid && p.Int64 < oldest {
		oldest = p.Int64
	}
	if oldest >= cutoff {
		return true, nil
	}
	start := oldest - ((oldest%minute)+minute)%minute // floor, also for negative times
	end := min(cutoff, start+compactChunk)
	steps := []struct {
		q    string
		args []any
		n    *int64
	}{
		{foldDevices, []any{end}, nil},
		{"DELETE FROM device_samples WHERE t < ?", []any{end}, &st.DeviceRowsFolded},
		{foldProcesses, []any{end}, nil},
		{"DELETE FROM process_samples WHERE t < ?", []any{end}, &st.ProcessRowsFolded},
	}
	for _, x := range steps {
		n, err := execN(ctx, tx, x.q, x.args...)
		if err != nil {
			return false, fmt.Errorf("history: compact: %w", err)
		}
		if x.n != nil {
			*x.n += n
		}
	}
	if err := tx.Commit(); err != nil {
		return false, fmt.Errorf("history: compact: %w", err)
	}
	return end >= cutoff, nil
}

func execN(ctx context.Context, tx *sql.Tx, q string, args ...any) (int64, error) {
	r, err := tx.ExecContext(ctx, q, args...)
	if err != nil {
		return 0, err
	}
	return r.RowsAffected()
}

// Maintain runs Compact every interval (DefaultMaintainEvery when 0) until
// ctx ends, reporting each failure to onErr (which may be nil). It returns
// ctx's error.
func (s *Store) Maintain(ctx context.Context, every time.Duration, onErr func(error)) error {
	if every <= 0 {
		every = DefaultMaintainEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if _, err := s.Compact(ctx); err != nil && onErr != nil && ctx.Err() == nil {
			onErr(err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
