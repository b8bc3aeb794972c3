package main

// Reading the daemon's history file from outside: integrity, the ticks it
// holds, and how many bytes each table takes. The file is opened with the
// same SQLite (modernc.org/sqlite) the daemon uses, as a second connection:
// in WAL mode a reader sees exactly the transactions committed before its
// read began, and never blocks the daemon's writer.

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/vramhq/vram/serve/store"
)

func openDB(path string) (*sql.DB, error) {
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("history file: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	return db, nil
}

// integrity runs PRAGMA integrity_check; "ok" when the file is whole.
func integrity(ctx context.Context, path string) (string, error) {
	db, err := openDB(path)
	if err != nil {
		return "", err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "PRAGMA integrity_check")
	if err != nil {
		return "", fmt.Errorf("integrity_check %s: %w", path, err)
	}
	defer rows.Close()
	var out string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return "", fmt.Errorf("integrity_check %s: %w", path, err)
		}
		if out != "" {
			out += "; "
		}
		out += s
	}
	if err := rows.Err(); err != nil {
		return "", fmt.Errorf("integrity_check %s: %w", path, err)
	}
	return out, nil
}

// tickTimes returns the distinct tick times (Unix ms) in [from, to], in
// order. A tick writes one row per GPU into device_samples in one
// transaction, so each distinct time there is one committed tick.
func tickTimes(ctx context.Context, path string, from, to time.Time) ([]int64, error) {
	db, err := openDB(path)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT DISTINCT t FROM device_samples WHERE t BETWEEN ? AND ? ORDER BY t", from.UnixMilli(), to.UnixMilli())
	if err != nil {
		return nil, fmt.Errorf("read ticks of %s: %w", path, err)
	}
	defer rows.Close()
	var ts []int64
	for rows.Next() {
		var t int64
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("read ticks of %s: %w", path, err)
		}
		ts = append(ts, t)
	}
	return ts, rows.Err()
}

// tableBytes returns the bytes of every table and index (pages in use,
// from the dbstat virtual table) and the file's free pages' bytes.
func tableBytes(ctx context.Context, path string) (map[string]int64, int64, error) {
	db, err := openDB(path)
	if err != nil {
		return nil, 0, err
	}
	defer db.Close()
	rows, err := db.QueryContext(ctx, "SELECT name, SUM(pgsize) FROM dbstat GROUP BY name")
	if err != nil {
		return nil, 0, fmt.Errorf("dbstat of %s: %w", path, err)
	}
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var name string
		var n int64
		if err := rows.Scan(&name, &n); err != nil {
			return nil, 0, fmt.Errorf("dbstat of %s: %w", path, err)
		}
		out[name] = n
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("dbstat of %s: %w", path, err)
	}
	var free, size int64
	if err := db.QueryRowContext(ctx, "PRAGMA freelist_count").Scan(&free); err != nil {
		return nil, 0, fmt.Errorf("freelist of %s: %w", path, err)
	}
	if err := db.QueryRowContext(ctx, "PRAGMA page_size").Scan(&size); err != nil {
		return nil, 0, fmt.Errorf("page size of %s: %w", path, err)
	}
	return out, free * size, nil
}

// count runs a SELECT COUNT(*)-like query that returns one integer.
func count(ctx context.Context, path, query string, args ...any) (int64, error) {
	db, err := openDB(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n int64
	if err := db.QueryRowContext(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s on %s: %w", query, path, err)
	}
	return n, nil
}

// tickRate returns the ticks per second the file holds: (ticks - 1) over
// the time from the oldest to the newest. The daemon writes a tick when a
// sample comes history_interval or more after the last tick, so with
// samples every 100 ms the spacing is history_interval plus up to a
// sample's worth: the rate is what the per-day figures must use.
func tickRate(ctx context.Context, path string) (float64, error) {
	db, err := openDB(path)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	var n, t0, t1 int64
	if err := db.QueryRowContext(ctx, "SELECT COUNT(DISTINCT t), COALESCE(MIN(t), 0), COALESCE(MAX(t), 0) FROM device_samples").Scan(&n, &t0, &t1); err != nil {
		return 0, fmt.Errorf("tick rate of %s: %w", path, err)
	}
	if n < 2 || t1 <= t0 {
		return 0, fmt.Errorf("tick rate of %s: %d ticks, too few", path, n)
	}
	return float64(n-1) / (float64(t1-t0) / 1e3), nil
}

// fileSizes returns the sizes of the history file and of its -wal file (0
// when absent).
func fileSizes(path string) (db, wal int64) {
	if fi, err := os.Stat(path); err == nil {
		db = fi.Size()
	}
	if fi, err := os.Stat(path + "-wal"); err == nil {
		wal = fi.Size()
	}
	return db, wal
}

// aggregates measures what the history costs once it is folded: it copies
// the (closed) history file to dir, opens the copy with the store package
// and a clock set after the last tick so that Compact folds every raw
// sample into 1-minute aggregates, as the daemon does with ticks older
// than the raw retention, and returns the aggregate tables' bytes per
// minute of history they cover.
func aggregates(ctx context.Context, src, dir string) (perMinute float64, minutes int64, err error) {
	dst := filepath.Join(dir, "folded.db")
	if err := copyFile(src, dst); err != nil {
		return 0, 0, err
	}
	last, err := count(ctx, dst, "SELECT COALESCE(MAX(t), 0) FROM device_samples")
	if err != nil {
		return 0, 0, err
	}
	after := time.UnixMilli(last).Add(2 * time.Minute)
	st, err := store.Open(ctx, dst, store.Options{RawRetention: time.Minute, Now: func() time.Time { return after }})
	if err != nil {
		return 0, 0, fmt.Errorf("open the copy: %w", err)
	}
	if _, err := st.Compact(ctx); err != nil {
		st.Close()
		return 0, 0, fmt.Errorf("fold the copy: %w", err)
	}
	if err := st.Close(); err != nil {
		return 0, 0, fmt.Errorf("close the copy: %w", err)
	}
	if raw, err := count(ctx, dst, "SELECT COUNT(*) FROM device_samples"); err != nil || raw != 0 {
		return 0, 0, fmt.Errorf("the copy still has %d raw device samples after folding (%v)", raw, err)
	}
	if minutes, err = count(ctx, dst, "SELECT COUNT(DISTINCT t) FROM device_minutes"); err != nil {
		return 0, 0, err
	}
	if minutes == 0 {
		return 0, 0, fmt.Errorf("folding gave no minute")
	}
	tb, _, err := tableBytes(ctx, dst)
	if err != nil {
		return 0, 0, err
	}
	b := tb["device_minutes"] + tb["process_minutes"]
	return float64(b) / float64(minutes), minutes, nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("copy history file: %w", err)
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return fmt.Errorf("copy history file: %w", err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy history file to %s: %w", dst, err)
	}
	return out.Close()
}
