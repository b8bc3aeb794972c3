package serve

// Reload: the policy file and the alert rules read again without a
// restart (SIGHUP or POST /api/v1/reload).

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/serve/alert"
	"github.com/vramhq/vram/serve/api"
)

// timeoutDrain is how long the webhooks of the rules a reload replaced
// may take to deliver what they still hold.
const timeoutDrain = 30 * time.Second

// reloadRequest carries what Reload read to the sampling goroutine, which
// alone may swap the rules.
type reloadRequest struct {
	cfg   Config
	pol   *policy.Policy
	rules alert.Config
	done  chan error
}

// Reload reads the configuration file again, then the policy file and the
// alert rules it names, and hands them to the sampling loop. On any error
// the rules in force stay as they are and the error says what is wrong: a
// file that cannot be read or used is the file's own error (naming file,
// line and field), which also matches api.ErrInvalid so that the API
// answers it with 400. Other settings (interval, retention, http,
// kubernetes) need a restart; the log says so when they changed. Reload
// waits for the sampling loop, which must be running (Run).
func (d *Daemon) Reload(ctx context.Context) error {
	cfg := d.opts.Config
	if cfg.File != "" {
		c, err := ReadConfig(cfg.File)
		if err != nil {
			return fileError{err}
		}
		if d.opts.Flags != nil {
			d.opts.Flags(&c)
		}
		cfg = c
	}
	pol, rules, err := loadRules(cfg)
	if err != nil {
		return fileError{err}
	}
	r := reloadRequest{cfg: cfg, pol: pol, rules: rules, done: make(chan error, 1)}
	select {
	case d.reloads <- r:
	case <-ctx.Done():
		return fmt.Errorf("waiting for the sampling loop: %w", ctx.Err())
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the sampling loop: %w", ctx.Err())
	}
}

// fileError is a configuration, policy or alert file a reload cannot use.
// Its message is the file's error as it is; it matches api.ErrInvalid too,
// so the HTTP layer answers 400 with that message instead of a 500.
type fileError struct{ err error }

func (e fileError) Error() string   { return e.err.Error() }
func (e fileError) Unwrap() []error { return []error{e.err, api.ErrInvalid} }

// apply swaps the rules in, on the sampling goroutine.
func (d *Daemon) apply(r reloadRequest) error {
	old := d.cfg
	var restart []string
	if r.cfg.Interval != old.Interval {
		restart = append(restart, "interval")
	}
	if r.cfg.HistoryInterval != old.HistoryInterval {
		restart = append(restart, "history_interval")
	}
	if r.cfg.RawRetention != old.RawRetention || r.cfg.AggregateRetention != old.AggregateRetention {
		restart = append(restart, "retention")
	}
	if r.cfg.TopN != old.TopN {
		restart = append(restart, "top_n")
	}
	if r.cfg.HTTP != old.HTTP {
		restart = append(restart, "http")
	}
	if r.cfg.PodResourcesSocket != old.PodResourcesSocket || r.cfg.PodResourcesAuto != old.PodResourcesAuto {
		restart = append(restart, "kubernetes")
	}
	if len(restart) > 0 {
		d.log.Warn("reload: these settings changed and take effect at the next start only", "settings", restart)
	}
	if d.pol != nil && r.pol == nil {
		d.log.Info("reload: no policy file any more: policies are off")
	}
	d.pol = r.pol
	d.cfg.PolicyFile = r.cfg.PolicyFile
	d.cfg.Alerts = r.cfg.Alerts
	d.engine.SetRules(r.rules.Rules)
	next := d.newNotifier(r.rules)
	if prev := d.notifier.Swap(next); prev != nil {
		d.retiredMu.Lock()
		d.retired = append(d.retired, prev) // its counts stay in the metrics
		d.retiredMu.Unlock()
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), timeoutDrain)
			defer cancel()
			if err := prev.Close(ctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
				d.log.Warn("reload: the previous webhooks' queue was not drained", "err", err)
			}
		}()
	}
	rules := 0
	if r.pol != nil {
		rules = len(r.pol.Reclaim) + len(r.pol.Quotas)
	}
	d.log.Info("reloaded", "policy_file", r.cfg.PolicyFile, "policy_rules", rules, "alert_rules", len(r.rules.Rules), "webhooks", len(r.rules.Webhooks))
	return nil
}
