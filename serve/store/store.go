package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/vramhq/vram/serve/sample"
)

// Defaults of Options.
const (
	DefaultRawRetention       = 24 * time.Hour
	DefaultAggregateRetention = 30 * 24 * time.Hour
	DefaultMaintainEvery      = 5 * time.Minute
)

// minute is the aggregate resolution in milliseconds.
const minute = int64(time.Minute / time.Millisecond)

// compactChunk is how much raw time one Compact transaction folds.
const compactChunk = int64(time.Hour / time.Millisecond)

// Options configure Open. The zero value is the defaults.
type Options struct {
	// RawRetention is how long raw samples are kept before they are folded
	// into 1-minute aggregates (default 24 h).
	RawRetention time.Duration
	// AggregateRetention is how long the 1-minute aggregates, actions and
	// alerts are kept (default 30 days). It must not be shorter than
	// RawRetention.
	AggregateRetention time.Duration
	// Durable sets synchronous=FULL: every commit is fsynced, so committed
	// ticks survive power loss too, at one fsync per tick. The default,
	// NORMAL, survives a killed daemon (see the package documentation).
	Durable bool
	// Now is the clock used by Compact (default time.Now).
	Now func() time.Time
	// Lock makes this Store the file's only writer while it is open: Open
	// takes an exclusive lock on a lock file beside it (path + ".lock",
	// holding the PID) and fails with a *LockedError while another
	// Store holds it, in this process or another. The kernel releases the
	// lock when the Store is closed or its process dies, kill -9 included.
	// Stores opened without Lock (readers beside the writer) neither take
	// nor check it.
	Lock bool
}

// DeviceSample is one GPU's memory at one tick.
type DeviceSample struct {
	UUID  string // "GPU-..."
	Model string // "NVIDIA H200"; stored once per GPU
	// Used, Reserved, Free and Total in bytes. Reserved is 0 where the
	// driver reports only the v1 memory info (Used then includes it).
	Used, Reserved, Free, Total uint64
	Util                        int // GPU utilization, percent; negative when unknown
}

// Tick is everything one sample writes. Of each process record the
// store keeps GPU, PID and StartTime (its identity), User and Command
// (once per lifetime), Bytes and Flags, and of Alloc (when set) Allocated
// and Reserved.
type Tick struct {
	Time      time.Time
	Devices   []DeviceSample
	Processes []sample.Process
}

// Store is an open history file. Its methods are safe for concurrent use:
// writes are serialised, reads run beside them.
type Store struct {
	db   *sql.DB
	path string
	opts Options
	lock *os.File // the held lock file, with Options.Lock

	mu      sync.Mutex // serialises writes; guards the caches
	gpus    map[string]int64
	procs   map[procKey]procEntry
	rowArgs []any // WriteTick's batch of row arguments, kept for the next tick
}

type procKey struct {
	gpu   int64
	pid   uint32
	start int64
}

type procEntry struct {
	id   int64
	last int64 // the last time written to processes.last, Unix ms
}

// DefaultPath returns the history file's default location:
// $XDG_STATE_HOME/vram/history.db, else ~/.local/state/vram/history.db.
// getenv is os.Getenv in production.
func DefaultPath(getenv func(string) string) (string, error) {
	if d := getenv("XDG_STATE_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "vram", "history.db"), nil
	}
	home := getenv("HOME")
	if home == "" {
		h, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("history file: no XDG_STATE_HOME and no home directory: %w", err)
		}
		home = h
	}
	return filepath.Join(home, ".local", "state", "vram", "history.db"), nil
}

// Open opens (creating it and its directory if needed) the history file at
// path and migrates its schema to SchemaVersion.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	if path == "" {
		return nil, errors.New("history file: empty path")
	}
	if opts.RawRetention == 0 {
		opts.RawRetention = DefaultRawRetention
	}
	if opts.AggregateRetention == 0 {
		opts.AggregateRetention = DefaultAggregateRetention
	}
	if opts.RawRetention < time.Minute {
		return nil, fmt.Errorf("history: raw retention %v is under a minute", opts.RawRetention)
	}
	if opts.AggregateRetention < opts.RawRetention {
		return nil, fmt.Errorf("history: aggregate retention %v is shorter than raw retention %v", opts.AggregateRetention, opts.RawRetention)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return nil, fmt.Errorf("history file %s: %w", path, err)
	}
	var lk *os.File
	if opts.Lock {
		f, err := lock(path)
		if err != nil {
			return nil, err
		}
		lk = f
	}
	s, err := open(ctx, path, opts)
	if err != nil {
		if lk != nil {
			lk.Close()
		}
		return nil, err
	}
	s.lock = lk
	return s, nil
}

// open opens and migrates the file; Open has taken the lock.
func open(ctx context.Context, path string, opts Options) (*Store, error) {
	sync := "NORMAL"
	if opts.Durable {
		sync = "FULL"
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("history file %s: %w", path, err)
	}
	s := &Store{db: db, path: path, opts: opts, gpus: map[string]int64{}, procs: map[procKey]procEntry{}}
	var mode string
	if err := db.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		db.Close()
		return nil, fmt.Errorf("history file %s: not a usable SQLite file: %w", path, err)
	}
	if mode != "wal" {
		db.Close()
		return nil, fmt.Errorf("history file %s: journal mode is %q, WAL could not be enabled", path, mode)
	}
	if err := migrate(ctx, db); err != nil {
		db.Close()
		return nil, fmt.Errorf("history file %s: %w", path, err)
	}
	return s, nil
}

// Close closes the file, then releases its lock (Options.Lock).
func (s *Store) Close() error {
	err := s.db.Close()
	if s.lock != nil {
		s.lock.Close()
		s.lock = nil
	}
	return err
}

// Path is the file's path.
func (s *Store) Path() string { return s.path }

func ms(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v)
}

// WriteTick writes one tick in one transaction.
func (s *Store) WriteTick(ctx context.Context, t Tick) (err error) {
	if t.Time.IsZero() {
		return errors.New("history: tick without a time")
	}
	now := ms(t.Time)
	s.mu.Lock()
	defer s.mu.Unlock()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("history: write tick: %w", err)
	}
	defer func() {
		if err != nil {
			tx.Rollback()
			// Ids handed out inside the transaction are gone.
			clear(s.gpus)
			clear(s.procs)
		}
	}()
	devStmt, err := tx.PrepareContext(ctx, `INSERT INTO device_samples (t, gpu, used, reserved, free, total, util) VALUES (?,?,?,?,?,?,?)
		ON CONFLICT (t, gpu) DO UPDATE SET used=excluded.used, reserved=excluded.reserved, free=excluded.free, total=excluded.total, util=excluded.util`)
	if err != nil {
		return fmt.Errorf("history: write tick: %w", err)
	}
	defer devStmt.Close()
	for _, d := range t.Devices {
		g, err := s.gpuID(ctx, tx, d.UUID, d.Model)
		if err != nil {
			return err
		}
		if _, err := devStmt.ExecContext(ctx, now, g, int64(d.Used), int64(d.Reserved), int64(d.Free), int64(d.Total), d.Util); err != nil {
			return fmt.Errorf("history: write device %s: %w", d.UUID, err)
		}
	}
	if len(t.Processes) == 0 {
		return s.commit(tx)
	}
	// The process rows go in batchRows at a time, one statement each:
	// per row, a statement's execution costs more than the row itself.
	rows := &procRows{tx: tx, args: s.rowArgs[:0]}
	defer func() { s.rowArgs = rows.args[:0] }()
	defer rows.close()
	var upsert *sql.Stmt
	for _, p := range t.Processes {
		g, err := s.gpuID(ctx, tx, p.GPU, "")
		if err != nil {
			return err
		}
		k := procKey{g, p.PID, ms(p.StartTime)}
		e, ok := s.procs[k]
		// processes.last is refreshed at most once a minute: it only has
		// to tell Compact when the lifetime stopped being sampled.
		if !ok || now-e.last >= minute {
			if upsert == nil {
				upsert, err = tx.PrepareContext(ctx, `INSERT INTO processes (gpu, pid, start, user, command, last) VALUES (?,?,?,?,?,?)
					ON CONFLICT (gpu, pid, start) DO UPDATE SET last = max(last, excluded.last) RETURNING id`)
				if err != nil {
					return fmt.Errorf("history: write tick: %w", err)
				}
				defer upsert.Close()
			}
			if err := upsert.QueryRowContext(ctx, g, p.PID, k.start, p.User, p.Command, now).Scan(&e.id); err != nil {
				return fmt.Errorf("history: write process %d on %s: %w", p.PID, p.GPU, err)
			}
			e.last = now
			s.procs[k] = e
		}
		var allocated, reserved sql.NullInt64
		if a := p.Alloc; a != nil {
			allocated, reserved = sql.NullInt64{Int64: a.Allocated, Valid: true}, sql.NullInt64{Int64: a.Reserved, Valid: true}
		}
		if err := rows.add(ctx, now, e.id, int64(p.Bytes), int64(p.Flags), allocated, reserved); err != nil {
			return err
		}
	}
	if err := rows.flush(ctx); err != nil {
		return err
	}
	return s.commit(tx)
}

// batchRows is how many process rows one INSERT writes.
const batchRows = 100

// procRows writes a tick's process_samples rows, batchRows per statement
// (the last statement takes the rest). A row that repeats one of the same
// statement updates it, as separate statements would: SQLite inserts the
// rows of a VALUES list in turn.
type procRows struct {
	tx    *sql.Tx
	args  []any
	n     int // rows in args
	full  *sql.Stmt
	wrote int // rows written before args
}

func (r *procRows) add(ctx context.Context, t, proc, bytes, flags int64, allocated, reserved sql.NullInt64) error {
	r.args = append(r.args, t, proc, bytes, flags, allocated, reserved)
	if r.n++; r.n == batchRows {
		return r.flush(ctx)
	}
	return nil
}

// flush writes the rows in args.
func (r *procRows) flush(ctx context.Context) error {
	if r.n == 0 {
		return nil
	}
	var err error
	if r.n == batchRows {
		if r.full == nil {
			if r.full, err = r.tx.PrepareContext(ctx, procInsert(batchRows)); err != nil {
				return fmt.Errorf("history: write tick: %w", err)
			}
		}
		_, err = r.full.ExecContext(ctx, r.args...)
	} else {
		_, err = r.tx.ExecContext(ctx, procInsert(r.n), r.args...)
	}
	if err != nil {
		return fmt.Errorf("history: write process rows %d to %d: %w", r.wrote+1, r.wrote+r.n, err)
	}
	r.wrote += r.n
	r.args, r.n = r.args[:0], 0
	return nil
}

func (r *procRows) close() {
	if r.full != nil {
		r.full.Close()
	}
}

// procInsert is the INSERT of n process_samples rows.
func procInsert(n int) string {
	var b strings.Builder
	b.WriteString("INSERT INTO process_samples (t, proc, bytes, flags, allocated, reserved) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("(?,?,?,?,?,?)")
	}
	b.WriteString(` ON CONFLICT (t, proc) DO UPDATE SET bytes=excluded.bytes, flags=excluded.flags,
			allocated=excluded.allocated, reserved=excluded.reserved`)
	return b.String()
}

func (s *Store) commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("history: commit: %w", err)
	}
	return nil
}

// gpuID returns the id of the GPU with this UUID, inserting it. s.mu is held.
func (s *Store) gpuID(ctx context.Context, tx *sql.Tx, uuid, model string) (int64, error) {
	if id, ok := s.gpus[uuid]; ok {
		return id, nil
	}
	if uuid == "" {
		return 0, errors.New("history: sample without a GPU UUID")
	}
	var id int64
	err := tx.QueryRowContext(ctx, `INSERT INTO gpus (uuid, model) VALUES (?, ?)
		ON CONFLICT (uuid) DO UPDATE SET model = CASE WHEN excluded.model != '' THEN excluded.model ELSE model END RETURNING id`, uuid, model).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("history: GPU %s: %w", uuid, err)
	}
	s.gpus[uuid] = id
	return id, nil
}

// Action is one entry of the policy audit trail.
type Action struct {
	Time      time.Time
	Rule      string // the policy rule that decided
	PID       uint32
	StartTime time.Time // with PID, identifies the process acted on
	Action    string    // e.g. "signal TERM", "alert only"
	Reason    string
	Result    string // "ok", or the error
}

// Alert is one alert raised or resolved.
type Alert struct {
	Time     time.Time
	Name     string
	Severity string
	GPU      string // UUID, empty when not about one GPU
	PID      uint32 // 0 when not about one process
	Message  string
	State    string // "firing", "resolved"
}

// RecordAction appends a to the audit trail.
func (s *Store) RecordAction(ctx context.Context, a Action) error {
	if a.Time.IsZero() || a.Rule == "" || a.Action == "" {
		return errors.New("history: action needs a time, a rule and an action")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO actions (t, rule, pid, start, action, reason, result) VALUES (?,?,?,?,?,?,?)`,
		ms(a.Time), a.Rule, a.PID, ms(a.StartTime), a.Action, a.Reason, a.Result)
	if err != nil {
		return fmt.Errorf("history: record action: %w", err)
	}
	return nil
}

// RecordAlert appends a to the alerts.
func (s *Store) RecordAlert(ctx context.Context, a Alert) error {
	if a.Time.IsZero() || a.Name == "" {
		return errors.New("history: alert needs a time and a name")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, err := s.db.ExecContext(ctx, `INSERT INTO alerts (t, name, severity, gpu, pid, message, state) VALUES (?,?,?,?,?,?,?)`,
		ms(a.Time), a.Name, a.Severity, a.GPU, a.PID, a.Message, a.State)
	if err != nil {
		return fmt.Errorf("history: record alert: %w", err)
	}
	return nil
}

// Actions returns the audit trail in [t0, t1), oldest first.
func (s *Store) Actions(ctx context.Context, t0, t1 time.Time) ([]Action, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT t, rule, pid, start, action, reason, result FROM actions WHERE t >= ? AND t < ? ORDER BY t, id`, ms(t0), ms(t1))
	if err != nil {
		return nil, fmt.Errorf("history: actions: %w", err)
	}
	defer rows.Close()
	var out []Action
	for rows.Next() {
		var a Action
		var t, st int64
		if err := rows.Scan(&t, &a.Rule, &a.PID, &st, &a.Action, &a.Reason, &a.Result); err != nil {
			return nil, fmt.Errorf("history: actions: %w", err)
		}
		a.Time, a.StartTime = fromMS(t), fromMS(st)
		out = append(out, a)
	}
	return out, rows.Err()
}

// Alerts returns the alerts in [t0, t1), oldest first.
func (s *Store) Alerts(ctx context.Context, t0, t1 time.Time) ([]Alert, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT t, name, severity, gpu, pid, message, state FROM alerts WHERE t >= ? AND t < ? ORDER BY t, id`, ms(t0), ms(t1))
	if err != nil {
		return nil, fmt.Errorf("history: alerts: %w", err)
	}
	return scanAlerts(rows, "alerts")
}

// scanAlerts reads the rows of a query that selects an alert's columns
// (t, name, severity, gpu, pid, message, state) and closes them; what
// names the query in errors.
func scanAlerts(rows *sql.Rows, what string) ([]Alert, error) {
	defer rows.Close()
	var out []Alert
	for rows.Next() {
		var a Alert
		var t int64
		if err := rows.Scan(&t, &a.Name, &a.Severity, &a.GPU, &a.PID, &a.Message, &a.State); err != nil {
			return nil, fmt.Errorf("history: %s: %w", what, err)
		}
		a.Time = fromMS(t)
		out = append(out, a)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: %s: %w", what, err)
	}
	return out, nil
}

// OpenAlerts returns the alerts still open in the file: for each alert (its
// name, GPU and PID) whose latest transition is "firing", that transition,
// oldest first. At a start they are what an earlier run left firing when it
// stopped or was killed.
func (s *Store) OpenAlerts(ctx context.Context) ([]Alert, error) {
	rows, err := s.db.QueryContext(ctx, `
SELECT t, name, severity, gpu, pid, message, state FROM (
	SELECT id, t, name, severity, gpu, pid, message, state,
		row_number() OVER (PARTITION BY name, gpu, pid ORDER BY t DESC, id DESC) AS latest
	FROM alerts
) WHERE latest = 1 AND state = 'firing' ORDER BY t, id`)
	if err != nil {
		return nil, fmt.Errorf("history: open alerts: %w", err)
	}
	return scanAlerts(rows, "open alerts")
}
