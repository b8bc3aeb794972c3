package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/vramhq/vram/gpu"
)

// Range is the spread of one quantity over a bucket.
type Range struct {
	Min, Max uint64
	Mean     float64
}

// DevicePoint is one GPU over one bucket of a history query.
type DevicePoint struct {
	Time                 time.Time // the bucket's start
	Samples              int       // raw samples behind the point (minute aggregates count theirs)
	Used, Reserved, Free Range
	Total                uint64
	// Util is the GPU utilization in percent; UtilKnown is false when no
	// sample in the bucket had it.
	Util      Range
	UtilKnown bool
}

// ProcessPoint is one process lifetime over one bucket.
type ProcessPoint struct {
	Time      time.Time
	PID       uint32
	StartTime time.Time
	User      string
	Command   string
	Samples   int
	Bytes     Range
	Flags     gpu.Flags // ORed over the bucket
	// Allocated and Reserved are what vram's allocator inside the process
	// said, over the samples of the bucket that carried its figures
	// (AllocSamples of them); both are zero when none did.
	Allocated, Reserved Range
	AllocSamples        int
}

// bucket checks a query's range and returns t0, t1 and the resolution in ms.
func bucket(t0, t1 time.Time, res time.Duration) (int64, int64, int64, error) {
	if !t1.After(t0) {
		return 0, 0, 0, fmt.Errorf("history: empty range %v to %v", t0, t1)
	}
	r := res.Milliseconds()
	if r < 1 {
		r = 1 // every sample its own point
	}
	return ms(t0), ms(t1), r, nil
}

// DeviceHistory returns the GPU's memory in [t0, t1) in buckets of res
// (res <= 0: one point per stored row). Buckets start at t0; a bucket with
// no data has no point. Ranges older than the raw retention come from the
// minute aggregates, so a finer resolution than a minute there still gives
// one point a minute.
func (s *Store) DeviceHistory(ctx context.Context, uuid string, t0, t1 time.Time, res time.Duration) ([]DevicePoint, error) {
	a, b, r, err := bucket(t0, t1, res)
	if err != nil {
		return nil, err
	}
	var g int64
	switch err := s.db.QueryRowContext(ctx, "SELECT id FROM gpus WHERE uuid = ?", uuid).Scan(&g); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("history: GPU %s: %w", uuid, err)
	}
	rows, err := s.db.QueryContext(ctx, `
WITH r AS (
	SELECT t, 1 AS n, used AS umin, used AS umax, used AS umean, reserved AS rmin, reserved AS rmax, reserved AS rmean,
		free AS fmin, free AS fmax, free AS fmean, total,
		CASE WHEN util >= 0 THEN util END AS xmin, CASE WHEN util >= 0 THEN util END AS xmax,
		CASE WHEN util >= 0 THEN util END AS xmean, CASE WHEN util >= 0 THEN 1 ELSE 0 END AS xn
	FROM device_samples WHERE t >= ?1 AND t < ?2 AND gpu = ?3
	UNION ALL
	SELECT t, n, used_min, used_max, used_mean, res_min, res_max, res_mean, free_min, free_max, free_mean, total,
		CASE WHEN util_min >= 0 THEN util_min END, CASE WHEN util_max >= 0 THEN util_max END,
		CASE WHEN util_mean >= 0 THEN util_mean END, CASE WHEN util_mean >= 0 THEN n ELSE 0 END
	FROM device_minutes WHERE t >= ?1 AND t < ?2 AND gpu = ?3
)
SELECT ?1 + ((t - ?1) / ?4) * ?4 AS b, sum(n),
	min(umin), max(umax), sum(umean * n) / sum(n),
	min(rmin), max(rmax), sum(rmean * n) / sum(n),
	min(fmin), max(fmax), sum(fmean * n) / sum(n),
	max(total),
	coalesce(min(xmin), 0), coalesce(max(xmax), 0), coalesce(sum(xmean * xn) / sum(xn), 0), sum(xn)
FROM r GROUP BY b ORDER BY b`, a, b, g, r)
	if err != nil {
		return nil, fmt.Errorf("history: device %s: %w", uuid, err)
	}
	defer rows.Close()
	var out []DevicePoint
	for rows.Next() {
		var p DevicePoint
		var t, xn int64
		var umin, umax, rmin, rmax, fmin, fmax, total, xmin, xmax int64
		if err := rows.Scan(&t, &p.Samples, &umin, &umax, &p.Used.Mean, &rmin, &rmax, &p.Reserved.Mean,
			&fmin, &fmax, &p.Free.Mean, &total, &xmin, &xmax, &p.Util.Mean, &xn); err != nil {
			return nil, fmt.Errorf("history: device %s: %w", uuid, err)
		}
		p.Time = fromMS(t)
		p.Used.Min, p.Used.Max = uint64(umin), uint64(umax)
		p.Reserved.Min, p.Reserved.Max = uint64(rmin), uint64(rmax)
		p.Free.Min, p.Free.Max = uint64(fmin), uint64(fmax)
		p.Total = uint64(total)
		p.Util.Min, p.Util.Max, p.UtilKnown = uint64(xmin), uint64(xmax), xn > 0
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: device %s: %w", uuid, err)
	}
	return out, nil
}

// ProcessHistory returns the memory of the process(es) with this PID on the
// GPU in [t0, t1) in buckets of res: one series per lifetime (start time),
// ordered by bucket then start time.
func (s *Store) ProcessHistory(ctx context.Context, uuid string, pid uint32, t0, t1 time.Time, res time.Duration) ([]ProcessPoint, error) {
	a, b, r, err := bucket(t0, t1, res)
	if err != nil {
		return nil, err
	}
	rows, err := s.db.QueryContext(ctx, `
WITH p AS (
	SELECT p.id, p.pid, p.start, p.user, p.command FROM processes p JOIN gpus g ON g.id = p.gpu
	WHERE g.uuid = ?3 AND p.pid = ?4
), r AS (
	SELECT s.t, s.proc, 1 AS n, s.bytes AS bmin, s.bytes AS bmax, s.bytes AS bmean, s.flags,
		CASE WHEN s.allocated IS NOT NULL THEN 1 ELSE 0 END AS an,
		s.allocated AS amin, s.allocated AS amax, s.allocated AS amean, s.reserved AS rmin, s.reserved AS rmax, s.reserved AS rmean
	FROM process_samples s WHERE s.t >= ?1 AND s.t < ?2 AND s.proc IN (SELECT id FROM p)
	UNION ALL
	SELECT m.t, m.proc, m.n, m.bytes_min, m.bytes_max, m.bytes_mean, m.flags,
		m.alloc_n, m.allocated_min, m.allocated_max, m.allocated_mean, m.reserved_min, m.reserved_max, m.reserved_mean
	FROM process_minutes m WHERE m.t >= ?1 AND m.t < ?2 AND m.proc IN (SELECT id FROM p)
)
SELECT ?1 + ((r.t - ?1) / ?5) * ?5 AS b, p.pid, p.start, p.user, p.command, sum(r.n),
	min(r.bmin), max(r.bmax), sum(r.bmean * r.n) / sum(r.n), `+orFlags+`, sum(r.an),
	coalesce(min(r.amin), 0), coalesce(max(r.amax), 0), coalesce(sum(r.amean * r.an) / sum(r.an), 0),
	coalesce(min(r.rmin), 0), coalesce(max(r.rmax), 0), coalesce(sum(r.rmean * r.an) / sum(r.an), 0)
FROM r JOIN p ON p.id = r.proc GROUP BY b, r.proc ORDER BY b, p.start`, a, b, uuid, pid, r)
	if err != nil {
		return nil, fmt.Errorf("history: process %d on %s: %w", pid, uuid, err)
	}
	defer rows.Close()
	var out []ProcessPoint
	for rows.Next() {
		var p ProcessPoint
		var t, start, bmin, bmax, flags, amin, amax, rmin, rmax int64
		if err := rows.Scan(&t, &p.PID, &start, &p.User, &p.Command, &p.Samples, &bmin, &bmax, &p.Bytes.Mean, &flags,
			&p.AllocSamples, &amin, &amax, &p.Allocated.Mean, &rmin, &rmax, &p.Reserved.Mean); err != nil {
			return nil, fmt.Errorf("history: process %d on %s: %w", pid, uuid, err)
		}
		p.Time, p.StartTime = fromMS(t), fromMS(start)
		p.Bytes.Min, p.Bytes.Max = uint64(bmin), uint64(bmax)
		p.Allocated.Min, p.Allocated.Max = uint64(amin), uint64(amax)
		p.Reserved.Min, p.Reserved.Max = uint64(rmin), uint64(rmax)
		p.Flags = gpu.Flags(flags)
		out = append(out, p)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("history: process %d on %s: %w", pid, uuid, err)
	}
	return out, nil
}
