package main

// The crash run: the daemon under load, killed with SIGKILL at random
// moments and restarted on the same history file, checking after each
// restart that the file is whole and holds every tick the daemon had
// reported committed.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"path/filepath"
	"time"

	"github.com/vramhq/vram/serve/api"
)

type crashOptions struct {
	Spec            daemonSpec
	HistoryInterval time.Duration
	Kills           int
	MinUp, MaxUp    time.Duration // each life lasts a uniform random time in [MinUp, MaxUp]
	Seed            uint64
	Out             string
}

// life is one run of the daemon between a start and a kill.
type life struct {
	N         int
	Start     time.Time // just before the process was started
	Healthy   time.Duration
	Up        time.Duration // from healthy to the kill
	KillAt    time.Time
	Reported  int64 // vram_history_ticks_written_total scraped just before the kill
	APITicks  int64 // ticks GPU 0's history showed through the API just before the kill
	InDB      int64 // ticks in the file afterwards, between Start and KillAt
	Expected  int64 // Up / history interval, roughly what it would have written
	MaxGap    time.Duration
	LongGaps  int    // steps between ticks longer than 2 intervals + gapSlack
	Integrity string // PRAGMA integrity_check after the restart that followed
	Missing   int64  // reported or shown ticks not in the file
	Err       string
}

type crashResult struct {
	Command         string
	Seed            uint64
	HistoryInterval time.Duration
	Lives           []life
	Final           string // integrity after the clean stop at the end
	StopExit        int
	Ticks           int64
	Problems        []string
}

func runCrash(ctx context.Context, o crashOptions) (*crashResult, error) {
	o.Spec.Log = filepath.Join(o.Out, "daemon.log")
	if err := prepareRun(o.Out, &o.Spec, o.HistoryInterval); err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0))
	res := &crashResult{Command: o.Spec.commandLine(), Seed: o.Seed, HistoryInterval: o.HistoryInterval}
	var prev *life
	var uuid string
	for i := 0; i <= o.Kills; i++ {
		start := time.Now()
		d, err := startDaemon(o.Spec)
		if err != nil {
			return res, err
		}
		if err := d.waitHealthy(ctx, time.Minute); err != nil {
			d.kill()
			return res, fmt.Errorf("restart %d: %w", i, err)
		}
		healthy := time.Since(start)
		if prev != nil {
			// The restarted daemon has opened the file and replayed its WAL;
			// read it beside the running daemon, as any reader would.
			checkLife(ctx, o, prev)
			res.Lives = append(res.Lives, *prev)
			if prev.Err != "" {
				res.Problems = append(res.Problems, fmt.Sprintf("life %d: %s", prev.N, prev.Err))
			}
		}
		if i == o.Kills {
			exit, _, err := d.stop(30 * time.Second)
			res.StopExit = exit
			if err != nil {
				res.Problems = append(res.Problems, err.Error())
			}
			break
		}
		if uuid == "" {
			var s api.State
			if err := getJSON(ctx, d.url("/api/v1/state"), &s); err != nil || len(s.Devices) == 0 {
				d.kill()
				return res, fmt.Errorf("read the GPUs: %v", err)
			}
			uuid = s.Devices[0].UUID
		}
		l := &life{N: i + 1, Start: start, Healthy: healthy}
		lctx, stopClients := context.WithCancel(ctx)
		sse := watchEvents(lctx, d.url("/events"))
		scraped := make(chan struct{})
		go func() { // a scraper every 15 s, as Prometheus would
			defer close(scraped)
			tk := time.NewTicker(15 * time.Second)
			defer tk.Stop()
			for {
				get(lctx, d.url("/metrics"))
				select {
				case <-lctx.Done():
					return
				case <-tk.C:
				}
			}
		}()
		up := o.MinUp + time.Duration(rng.Int64N(int64(o.MaxUp-o.MinUp)+1))
		select {
		case <-time.After(up):
		case <-d.exited:
			stopClients()
			return res, fmt.Errorf("life %d: vram serve exited by itself: %v", l.N, d.err)
		}
		// What the daemon reports committed, read just before the kill.
		from := time.Unix(start.Unix()+1, 0) // whole seconds after the start: none from the previous life
		q := url.Values{"from": {fmt.Sprint(from.Unix())}, "step": {"1s"}}
		var h struct {
			Points []api.DevicePoint `json:"points"`
		}
		if err := getJSON(ctx, d.url("/api/v1/history/devices/"+uuid+"?"+q.Encode()), &h); err != nil {
			l.Err = err.Error()
		}
		for _, p := range h.Points {
			l.APITicks += int64(p.Samples)
		}
		body, _, err := get(ctx, d.url("/metrics"))
		if err == nil {
			var m map[string]float64
			if m, err = scalars(body); err == nil {
				l.Reported = int64(m["vram_history_ticks_written_total"])
			}
		}
		if err != nil {
			l.Err = err.Error()
		}
		if err := d.kill(); err != nil {
			stopClients()
			return res, err
		}
		l.KillAt = time.Now()
		l.Up = l.KillAt.Sub(start) - healthy
		l.Expected = int64(l.Up / o.HistoryInterval)
		stopClients()
		<-scraped
		<-sse.stopped
		prev = l
	}
	if res.Final, _ = integrity(ctx, o.Spec.DB); res.Final != "ok" {
		res.Problems = append(res.Problems, "integrity after the clean stop: "+res.Final)
	}
	res.Ticks, _ = count(ctx, o.Spec.DB, "SELECT COUNT(DISTINCT t) FROM device_samples")
	if res.StopExit != 0 {
		res.Problems = append(res.Problems, fmt.Sprintf("exit status %d after SIGTERM", res.StopExit))
	}
	return res, nil
}

// gapSlack is how much longer than two history intervals a step between
// ticks may be before it counts as a hole. A loaded 2-core machine (CI
// running every package's tests at once) stalls the daemon for a few
// seconds at times (2.6 s seen): that delays ticks, it loses none, and
// ticks reported committed are counted separately (Missing).
const gapSlack = 5 * time.Second

// checkLife checks a killed life's ticks in the file, read by a second
// connection while the restarted daemon runs.
func checkLife(ctx context.Context, o crashOptions, l *life) {
	var err error
	if l.Integrity, err = integrity(ctx, o.Spec.DB); err != nil {
		l.Err = err.Error()
		return
	}
	ts, err := tickTimes(ctx, o.Spec.DB, l.Start, l.KillAt)
	if err != nil {
		l.Err = err.Error()
		return
	}
	l.InDB = int64(len(ts))
	whole := time.Unix(l.Start.Unix()+1, 0)
	var inAPIRange int64
	for _, t := range ts {
		if t >= whole.UnixMilli() {
			inAPIRange++
		}
	}
	// The API's count is checked against the range it covered.
	l.Missing = max(l.Reported-l.InDB, l.APITicks-inAPIRange, 0)
	l.MaxGap, l.LongGaps = maxGap(ts, 2*o.HistoryInterval+gapSlack)
	switch {
	case l.Integrity != "ok":
		l.Err = "integrity_check: " + l.Integrity
	case l.Missing > 0:
		l.Err = fmt.Sprintf("%d ticks reported committed are not in the file (reported %d, API showed %d, file has %d)", l.Missing, l.Reported, l.APITicks, l.InDB)
	case l.LongGaps > 0:
		l.Err = fmt.Sprintf("%d gaps longer than two history intervals between ticks (longest %v)", l.LongGaps, l.MaxGap)
	}
}
