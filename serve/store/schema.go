package store

import (
	"context"
	"database/sql"
	"fmt"
)

// migrations are applied in order; migrations[i] takes the file from
// user_version i to i+1. Never edit one that has shipped: add another.
var migrations = []string{
	// 1: the first schema.
	`
CREATE TABLE gpus (
	id    INTEGER PRIMARY KEY,
	uuid  TEXT NOT NULL UNIQUE,
	model TEXT NOT NULL DEFAULT ''
);
CREATE TABLE processes (
	id      INTEGER PRIMARY KEY,
	gpu     INTEGER NOT NULL REFERENCES gpus(id),
	pid     INTEGER NOT NULL,
	start   INTEGER NOT NULL, -- process start, Unix ms (0 unknown)
	user    TEXT NOT NULL DEFAULT '',
	command TEXT NOT NULL DEFAULT '',
	last    INTEGER NOT NULL, -- last sampled, Unix ms, refreshed at most once a minute
	UNIQUE (gpu, pid, start)
);
CREATE TABLE device_samples (
	t        INTEGER NOT NULL,
	gpu      INTEGER NOT NULL,
	used     INTEGER NOT NULL,
	reserved INTEGER NOT NULL,
	free     INTEGER NOT NULL,
	total    INTEGER NOT NULL,
	util     INTEGER NOT NULL, -- percent, -1 unknown
	PRIMARY KEY (t, gpu)
) WITHOUT ROWID;
CREATE TABLE process_samples (
	t     INTEGER NOT NULL,
	proc  INTEGER NOT NULL,
	bytes INTEGER NOT NULL,
	flags INTEGER NOT NULL,
	PRIMARY KEY (t, proc)
) WITHOUT ROWID;
CREATE TABLE device_minutes (
	t        INTEGER NOT NULL, -- start of the minute, Unix ms
	gpu      INTEGER NOT NULL,
	n        INTEGER NOT NULL,
	used_min INTEGER NOT NULL, used_max INTEGER NOT NULL, used_mean REAL NOT NULL,
	res_min  INTEGER NOT NULL, res_max  INTEGER NOT NULL, res_mean  REAL NOT NULL,
	free_min INTEGER NOT NULL, free_max INTEGER NOT NULL, free_mean REAL NOT NULL,
	total    INTEGER NOT NULL,
	util_min INTEGER NOT NULL, util_max INTEGER NOT NULL, util_mean REAL NOT NULL,
	PRIMARY KEY (t, gpu)
) WITHOUT ROWID;
CREATE TABLE process_minutes (
	t          INTEGER NOT NULL,
	proc       INTEGER NOT NULL,
	n          INTEGER NOT NULL,
	bytes_min  INTEGER NOT NULL,
	bytes_max  INTEGER NOT NULL,
	bytes_mean REAL NOT NULL,
	flags      INTEGER NOT NULL,
	PRIMARY KEY (t, proc)
) WITHOUT ROWID;
CREATE TABLE actions (
	id     INTEGER PRIMARY KEY,
	t      INTEGER NOT NULL,
	rule   TEXT NOT NULL,
	pid    INTEGER NOT NULL,
	start  INTEGER NOT NULL,
	action TEXT NOT NULL,
	reason TEXT NOT NULL,
	result TEXT NOT NULL
);
CREATE INDEX processes_last ON processes (last);
CREATE INDEX actions_t ON actions (t);
CREATE TABLE alerts (
	id       INTEGER PRIMARY KEY,
	t        INTEGER NOT NULL,
	name     TEXT NOT NULL,
	severity TEXT NOT NULL,
	gpu      TEXT NOT NULL,
	pid      INTEGER NOT NULL,
	message  TEXT NOT NULL,
	state    TEXT NOT NULL
);
CREATE INDEX alerts_t ON alerts (t);
`,
	// 2: what vram's allocator inside a process (libvram) says it has
	// allocated and reserved, NULL for a process not on it (and for every
	// row written before this version). A minute keeps min, max and mean
	// over its rows that have figures, and how many did (alloc_n).
	`
ALTER TABLE process_samples ADD COLUMN allocated INTEGER;
ALTER TABLE process_samples ADD COLUMN reserved INTEGER;
ALTER TABLE process_minutes ADD COLUMN alloc_n INTEGER NOT NULL DEFAULT 0;
ALTER TABLE process_minutes ADD COLUMN allocated_min INTEGER;
ALTER TABLE process_minutes ADD COLUMN allocated_max INTEGER;
ALTER TABLE process_minutes ADD COLUMN allocated_mean REAL;
ALTER TABLE process_minutes ADD COLUMN reserved_min INTEGER;
ALTER TABLE process_minutes ADD COLUMN reserved_max INTEGER;
ALTER TABLE process_minutes ADD COLUMN reserved_mean REAL;
`,
}

// SchemaVersion is the schema version this build writes.
var SchemaVersion = len(migrations)

// migrate brings db to SchemaVersion.
func migrate(ctx context.Context, db *sql.DB) error {
	var v int
	if err := db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if v > len(migrations) {
		return fmt.Errorf("history file has schema version %d, newer than this vram knows (%d): use a newer vram or another file", v, len(migrations))
	}
	for i := v; i < len(migrations); i++ {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, migrations[i]); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
		// PRAGMA takes no bound parameters; i+1 is an integer we made.
		if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", i+1)); err != nil {
			tx.Rollback()
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("migrate to version %d: %w", i+1, err)
		}
	}
	return nil
}
