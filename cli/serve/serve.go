// Package serve holds the vram serve command: the node daemon (package
// serve) behind an HTTP server (package serve/api) with the embedded
// dashboard (serve/dashboard).
//
// The command reads and checks everything before it opens anything: the
// flags, the configuration file, the listen address (a non-loopback
// address needs http.allow_remote), the bearer token file when mutations
// are on, the policy file and the alert rules. Any problem there is one
// line naming the file, line and field, and exit status 2 for flags and
// configuration, 1 for the rest; nothing is sampled. Then it opens the
// GPUs (or a simulated host with --simulate), binds the listen address
// (so that a port in use leaves no history file behind), opens the history
// file (refused while another daemon holds it, naming its PID), starts
// the pod-resources resolver when a kubelet socket is there, logs one
// startup line (address, history file, GPUs, and "simulated" on a
// simulated host) and serves until SIGINT or SIGTERM. SIGHUP reloads the
// policy file and the alert rules; a bad file is logged and the rules in
// force stay.
//
// Stopping: the HTTP server stops accepting, open event streams end, the
// sampling loop writes the history interval in progress, queued history
// and audit writes are committed, alert notifications get up to 5 s to be
// delivered, and the history file is closed.
package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/vramhq/vram/cli/cmdutil"
	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/policy"
	"github.com/vramhq/vram/serve"
	"github.com/vramhq/vram/serve/alert"
	"github.com/vramhq/vram/serve/api"
	"github.com/vramhq/vram/serve/dashboard"
	"github.com/vramhq/vram/serve/store"
	"github.com/vramhq/vram/serve/workload"
)

// DefaultAddr is where vram serve listens without --addr: loopback only.
const DefaultAddr = "127.0.0.1:9400"

// Options are the command's flags; the host flags (--simulate, --seed,
// --gpu, --all-gpus) are every command's (cmdutil).
type Options struct {
	cmdutil.HostFlags
	Addr      string
	DB        string
	Config    string
	ReadOnly  bool
	Interval  time.Duration
	LogFormat string
	LogLevel  string
}

// bad is a flag or configuration problem: vram exits with status 2.
func bad(format string, a ...any) error { return cmdutil.Usagef(format, a...) }

// NewCmd returns the `vram serve` command on the outside world fac.
func NewCmd(fac *cmdutil.Factory) *cobra.Command {
	o := &Options{}
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the node daemon: metrics, JSON API, dashboard, history, alerts and policies",
		Long: `vram serve samples every GPU and every process holding GPU memory (each
second by default), keeps the history in an SQLite file, and serves on --addr:

  /metrics          Prometheus metrics (vram_*)
  /api/v1/...       JSON: state, devices, processes, history, alerts, actions
  /events           live server-sent events
  /                 the dashboard

It raises the alerts and enforces the policies (quotas, reclaim rules) that
--config names; policies are a dry run unless their file says dry_run: false.
The mutating endpoints (signal a process, reload) are off unless the
configuration enables them with a token file (mode 0600). --addr must be a
loopback address unless the configuration sets http.allow_remote.

SIGHUP reloads the policy file and the alert rules; SIGINT or SIGTERM stops
after writing what is pending. docs/serve.md describes every setting.`,
		Example: `  vram serve
  vram serve --config /etc/vram/config.yaml --db /var/lib/vram/vram.db
  vram serve --simulate 4 --addr 127.0.0.1:9401 --db /tmp/sim.db`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if c.Flags().Changed("db") && o.DB == "" {
				return emptyDB()
			}
			return Run(c.Context(), fac, o, c.Flags().Changed("interval"), c.ErrOrStderr())
		},
	}
	f := c.Flags()
	f.StringVar(&o.Addr, "addr", DefaultAddr, "listen on this `host:port` (loopback only unless the config sets http.allow_remote)")
	f.StringVar(&o.DB, "db", "", "history `PATH`, one daemon per file (default $XDG_STATE_HOME/vram/history.db or ~/.local/state/vram/history.db)")
	f.StringVar(&o.Config, "config", "", "configuration `FILE` (YAML; docs/serve.md); without it, the defaults")
	f.BoolVar(&o.ReadOnly, "read-only", false, "refuse every mutating request, whatever the configuration says")
	f.DurationVar(&o.Interval, "interval", 0, "sample period (overrides the configuration's interval; default 1s)")
	f.StringVar(&o.LogFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&o.LogLevel, "log-level", "info", "log level: debug, info, warn or error")
	o.Register(c)
	return c
}

// emptyDB is the error for an empty --db (`--db ""`): it is a mistake (an
// unset variable, a lost quote), not a request for the default file.
func emptyDB() error {
	def, err := store.DefaultPath(os.Getenv)
	if err != nil {
		return bad("--db: empty path: name the history file")
	}
	return bad("--db: empty path: name the history file, or leave --db out for the default (%s)", def)
}

// prepared is everything checked before the daemon starts.
type prepared struct {
	cfg   serve.Config
	flags func(*serve.Config) // what the flags override in a configuration
	token []byte
	log   *slog.Logger
}

// prepare checks the flags and reads the configuration and the token.
func prepare(o *Options, intervalSet bool, errOut io.Writer) (*prepared, error) {
	p := &prepared{}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.LogLevel)); err != nil {
		return nil, bad("--log-level %q: want debug, info, warn or error", o.LogLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.LogFormat {
	case "text":
		p.log = slog.New(slog.NewTextHandler(errOut, hopts))
	case "json":
		p.log = slog.New(slog.NewJSONHandler(errOut, hopts))
	default:
		return nil, bad("--log-format %q: want text or json", o.LogFormat)
	}
	if err := o.HostFlags.Check(); err != nil {
		return nil, err
	}
	if intervalSet && (o.Interval < serve.MinInterval || o.Interval > serve.MaxInterval) {
		return nil, bad("--interval %v: must be between %v and %v", o.Interval, serve.MinInterval, serve.MaxInterval)
	}
	p.cfg = serve.DefaultConfig()
	if o.Config != "" {
		c, err := serve.ReadConfig(o.Config)
		var ce serve.ConfigErrors
		switch {
		case errors.As(err, &ce):
			return nil, cmdutil.Usage(err)
		case err != nil:
			return nil, bad("--config: %v", err)
		}
		p.cfg = c
	}
	p.flags = func(c *serve.Config) {
		if intervalSet {
			c.Interval = o.Interval
		}
		c.SettleHistory()
		if o.ReadOnly {
			c.HTTP.ReadOnly = true
		}
	}
	h := p.cfg.HistoryInterval
	p.flags(&p.cfg)
	if p.cfg.HistoryInterval != h {
		p.log.Info("history is written at every sample: the sample interval is longer than history_interval", "interval", p.cfg.Interval, "history_interval", h)
	}
	if err := api.CheckListen(o.Addr, p.cfg.HTTP.AllowRemote); err != nil {
		return nil, bad("--addr %s: %v", o.Addr, err)
	}
	if p.cfg.MutationsEnabled() {
		tok, err := api.ReadTokenFile(p.cfg.HTTP.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("http.token_file: %w", err)
		}
		p.token = tok
	}
	return p, nil
}

// Run runs vram serve on the outside world f until ctx ends or SIGINT or
// SIGTERM arrives.
func Run(ctx context.Context, f *cmdutil.Factory, o *Options, intervalSet bool, errOut io.Writer) error {
	if ctx == nil {
		ctx = context.Background()
	}
	p, err := prepare(o, intervalSet, errOut)
	if err != nil {
		return err
	}
	// One P, as vram watch: the daemon's work is one goroutine a sample
	// (docs/serve.md, "One P").
	defer cmdutil.OneP()()
	o.IdleWindow = serve.DefaultIdleWindow
	// The daemon runs for long, as the user or root: it removes the
	// channel files that killed processes left (docs/channel.md).
	o.RemoveStaleChannel = true
	host, err := o.HostFlags.Open(f)
	if err != nil {
		return err
	}
	op := host.Opened
	// Bind before anything is created: a port in use leaves no history
	// file behind.
	ln, err := net.Listen("tcp", o.Addr)
	if err != nil {
		host.Close()
		return fmt.Errorf("listen on %s: %w", o.Addr, err)
	}
	defer ln.Close() // once served, closed by the server's Shutdown already
	log := p.log
	if op.ProcErr != nil {
		log.Warn("/proc cannot be read: processes have no user or command, and nothing will be signalled", "err", op.ProcErr)
	}
	for _, w := range op.Warnings {
		log.Warn(w)
	}
	if note := op.SelectionNote(); note != "" {
		log.Info(note)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var wl *workload.Resolver
	if sock := podResourcesSocket(p.cfg); sock != "" {
		wl = workload.New(workload.Options{Socket: sock, Logger: log.With("component", "workload")})
		go wl.Run(runCtx)
	}
	dopts := serve.Options{Config: p.cfg, Flags: p.flags, Opened: op, DB: o.DB, Logger: log, IdleWindow: serve.DefaultIdleWindow}
	if wl != nil {
		dopts.Workload = wl.Lookup
	}
	d, err := serve.New(ctx, dopts)
	if err != nil {
		host.Close()
		var pe policy.Errors
		var ae alert.Errors
		if errors.As(err, &pe) || errors.As(err, &ae) {
			return cmdutil.Usage(err)
		}
		return err
	}
	streams := make(chan struct{})
	aopts := api.Options{
		Metrics: d.MetricsHandler(), UI: dashboard.Handler(),
		Mutations: p.cfg.HTTP.Mutations, Token: p.token, ReadOnly: p.cfg.HTTP.ReadOnly,
		Logger: log.With("component", "http"), Done: streams,
	}
	if host, _, err := net.SplitHostPort(o.Addr); err == nil && !p.cfg.HTTP.AllowRemote {
		aopts.AllowedHosts = []string{"localhost", host}
	}
	srv := api.NewServer(o.Addr, api.Handler(d, aopts), log.With("component", "http"))

	sigs := make(chan os.Signal, 4)
	f.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer f.Stop(sigs)

	loop := make(chan error, 1)
	go func() { loop <- d.Run(runCtx) }()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()

	mode := "read-only"
	if p.cfg.MutationsEnabled() {
		mode = "mutations enabled"
	}
	attrs := []any{"addr", ln.Addr().String(), "db", d.DB(), "gpus", gpuList(d.Devices()), "interval", p.cfg.Interval, "history_interval", p.cfg.HistoryInterval, "api", mode}
	if p.cfg.File != "" {
		attrs = append(attrs, "config", p.cfg.File)
	}
	if p.cfg.PolicyFile != "" {
		attrs = append(attrs, "policy_file", p.cfg.PolicyFile)
	}
	if host.Simulated {
		attrs = append(attrs, "simulated", fmt.Sprintf("SIMULATED host: %d GPUs, seed %d; nothing real is sampled or signalled", len(d.Devices()), o.Seed))
	}
	log.Info("vram serve started", attrs...)

	var runErr error
wait:
	for {
		select {
		case s := <-sigs:
			if s == syscall.SIGHUP {
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				if err := d.Reload(rctx); err != nil {
					log.Error("reload failed; the rules in force stay", "err", err)
				}
				cancel()
				continue
			}
			log.Info("stopping", "signal", s.String())
			break wait
		case <-ctx.Done():
			break wait
		case err := <-served:
			runErr = fmt.Errorf("HTTP server: %w", err)
			break wait
		case err := <-loop:
			loop <- err
			if err != nil {
				runErr = fmt.Errorf("sampling loop: %w", err)
			}
			break wait
		}
	}

	close(streams)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		log.Warn("HTTP server did not stop cleanly", "err", err)
	}
	stop()
	if err := <-loop; err != nil && runErr == nil {
		runErr = fmt.Errorf("sampling loop: %w", err)
	}
	if err := d.Close(); err != nil {
		log.Error("stopping", "err", err)
		if runErr == nil {
			runErr = err
		}
	}
	if runErr == nil {
		log.Info("stopped")
	}
	return runErr
}

// podResourcesSocket is the kubelet socket the configuration names, or the
// default one when the configuration leaves it open and it exists.
func podResourcesSocket(c serve.Config) string {
	if !c.PodResourcesAuto {
		return c.PodResourcesSocket
	}
	if fi, err := os.Stat(c.PodResourcesSocket); err == nil && fi.Mode()&os.ModeSocket != 0 {
		return c.PodResourcesSocket
	}
	return ""
}

func gpuList(ids []gpu.Identity) string {
	if len(ids) == 0 {
		return "none"
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(id.Index) + " " + id.Name
	}
	return strings.Join(parts, ", ")
}
