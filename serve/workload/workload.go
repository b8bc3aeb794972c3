package workload

// See doc.go for an overview.

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vramhq/vram/gpu"
)

// DefaultSocket is where the kubelet serves its pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// Defaults of Options.
const (
	DefaultRefresh = 30 * time.Second
	DefaultTimeout = 5 * time.Second
)

// maxResponse bounds one listing. A node at the kubelet's default limit of
// 110 pods lists in a few tens of KiB; 16 MiB leaves room for nodes run
// with far higher limits without letting a broken peer exhaust memory.
const maxResponse = 16 << 20

// staleRefreshes is how many refresh periods of failed listings the last
// good index outlives. After that Lookup stops naming pods: a listing that
// old may attribute a GPU to a pod that has since given it up.
const staleRefreshes = 4

// ErrNoSocket is Status().Err while the socket does not exist: the host
// runs no kubelet, or the socket's directory is not mounted into the
// daemon's container.
var ErrNoSocket = errors.New("pod-resources socket not found")

// Workload names where a process runs: a Kubernetes pod, its namespace
// and the container's name. The daemon's record of a process
// (serve/sample) and its metrics' labels (serve/metrics) use it.
type Workload struct{ Pod, Namespace, Container string }

// Options configure a Resolver.
type Options struct {
	// Socket is the path of the kubelet's pod-resources socket, usually
	// DefaultSocket. Empty disables the API: Lookup then gives container
	// IDs only.
	Socket string
	// Refresh is the period between listings, and the retry period while
	// the socket is absent. Default DefaultRefresh.
	Refresh time.Duration
	// Timeout bounds one listing (connect and List). Default DefaultTimeout.
	Timeout time.Duration
	// Logger receives state changes (socket found or lost, listing failed or
	// recovered). Nil discards them.
	Logger *slog.Logger
	// Dial connects to the socket. Nil dials the Unix socket. Tests use it
	// to inject failures.
	Dial func(ctx context.Context, socket string) (net.Conn, error)
	// GPUOf maps a device ID that does not name its GPU to the GPU's UUID
	// ("GPU-..."): a MIG instance's UUID ("MIG-...") on drivers from R470
	// on, or an index under the device plugin's index strategy. resource is
	// the resource name (nvidia.com/gpu, nvidia.com/mig-1g.10gb, ...). Nil:
	// such IDs are counted in Status().Unmapped and match no process.
	// It is called while an index is built, never by Lookup.
	GPUOf func(resource, id string) (uuid string, ok bool)
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Status is what the daemon's logs and health endpoint report about the
// pod-resources listing.
type Status struct {
	Enabled     bool      // Options.Socket is set
	Socket      string    // Options.Socket
	LastAttempt time.Time // latest listing attempt; zero before the first
	LastRefresh time.Time // latest successful listing; zero before the first
	// Err is the latest attempt's error (ErrNoSocket while the socket is
	// absent), nil after a success.
	Err error
	// Failures counts consecutive failed attempts (socket absent included).
	Failures int
	// Pods, Containers and Devices describe the index Lookup uses: pods and
	// containers listed, distinct GPU or MIG device IDs mapped to a GPU.
	// All zero when the index is empty or was dropped as stale.
	Pods, Containers, Devices int
	// Unmapped counts GPU-like device IDs in the index's listing that could
	// not be mapped to a GPU (MIG UUIDs without Options.GPUOf).
	Unmapped int
}

// Resolver names the pod, namespace and container of GPU processes. Create
// it with New, run Run in a goroutine, and call Lookup from anywhere.
type Resolver struct {
	opts Options
	log  *slog.Logger

	idx atomic.Pointer[index] // swapped whole by refresh; read without a lock by Lookup

	refreshMu sync.Mutex // serialises refreshes; held across the call
	client    *client    // its connection is dropped after a failed call

	mu          sync.Mutex // guards the fields below; never held across I/O, so Status does not wait for a listing
	lastAttempt time.Time
	lastOK      time.Time
	err         error
	failures    int
	loggedErr   string // the failure already logged at warn level, to log each distinct one once
}

var emptyIndex = &index{byGPU: map[string][]holder{}, byMIG: map[string][]holder{}}

// New returns a Resolver. It does not connect: Run (or Refresh) does.
func New(opts Options) *Resolver {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultRefresh
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Dial == nil {
		opts.Dial = dialUnix
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	r := &Resolver{opts: opts, log: opts.Logger}
	if opts.Socket != "" {
		r.client = newClient(opts.Socket, opts.Dial)
	}
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	r.idx.Store(emptyIndex)
	return r
}

// Lookup names where p runs, from its cgroup (p.Container) and the latest
// listing; the matching rule is in the package documentation. It never
// blocks and does not allocate.
func (r *Resolver) Lookup(p gpu.Process) Workload {
	c := p.Container
	short := shortID(c.ID)
	if c.PodUID == "" {
		return Workload{Container: short}
	}
	var hs []holder
	if key, ok := gpuKey(p.DeviceUUID); ok {
		hs = r.idx.Load().byGPU[key]
	} else if key, ok := migKey(p.DeviceUUID); ok {
		hs = r.idx.Load().byMIG[key]
	}
	switch {
	case len(hs) == 0:
		return Workload{Container: short}
	case len(hs) == 1:
		return Workload{Pod: hs[0].Pod, Namespace: hs[0].Namespace, Container: hs[0].Container}
	}
	// Several containers hold the GPU. They are sorted, so they all sit in
	// one pod exactly when the first and the last do.
	first, last := hs[0], hs[len(hs)-1]
	if first.Namespace == last.Namespace && first.Pod == last.Pod {
		return Workload{Pod: first.Pod, Namespace: first.Namespace, Container: short}
	}
	return Workload{Container: short}
}

// shortID is the 12-digit form of a container ID that docker and crictl
// print.
func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// Status reports the state of the listing.
func (r *Resolver) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	ix := r.idx.Load()
	return Status{
		Enabled:     r.opts.Socket != "",
		Socket:      r.opts.Socket,
		LastAttempt: r.lastAttempt,
		LastRefresh: r.lastOK,
		Err:         r.err,
		Failures:    r.failures,
		Pods:        ix.pods,
		Containers:  ix.containers,
		Devices:     ix.devices,
		Unmapped:    ix.unmapped,
	}
}

// Run refreshes the listing until ctx is done: once at start, then every
// Options.Refresh. After a failed listing it retries sooner, after 1 s,
// then 2 s, 4 s, ... up to Options.Refresh. While the socket is absent it
// checks again every Options.Refresh and logs that once. With no socket
// configured Run returns at once.
func (r *Resolver) Run(ctx context.Context) {
	if r.opts.Socket == "" {
		return
	}
	defer r.closeConn()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.Refresh(ctx)
		if ctx.Err() != nil {
			return
		}
		t.Reset(r.nextDelay(err))
	}
}

// nextDelay is the wait after a refresh that returned err.
func (r *Resolver) nextDelay(err error) time.Duration {
	if err == nil || errors.Is(err, ErrNoSocket) {
		return r.opts.Refresh
	}
	r.mu.Lock()
	n := r.failures
	r.mu.Unlock()
	d := min(time.Second, r.opts.Refresh)
	for i := 1; i < n && d < r.opts.Refresh; i++ {
		d *= 2
	}
	return min(d, r.opts.Refresh)
}

// Refresh lists the pods now and swaps in a new index. Run calls it; the
// daemon may call it too (at start, to have names before the first sample).
// Concurrent calls run one after the other.
func (r *Resolver) Refresh(ctx context.Context) error {
	if r.opts.Socket == "" {
		return errors.New("pod-resources: no socket configured")
	}
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	now := r.opts.Now()
	r.mu.Lock()
	r.lastAttempt = now
	r.mu.Unlock()
	pods, err := r.listLocked(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil && ctx.Err() != nil {
		// The caller gave up (the daemon is stopping): not the kubelet's
		// failure, and no reason to drop the listing.
		return fmt.Errorf("pod-resources: %w", ctx.Err())
	}
	if err != nil {
		r.failLocked(now, err)
		return err
	}
	ix := buildIndex(pods, r.opts.GPUOf)
	r.idx.Store(ix)
	if r.failures > 0 || r.lastOK.IsZero() {
		r.log.Info("pod-resources listed", "socket", r.opts.Socket, "pods", ix.pods, "gpu_devices", ix.devices, "unmapped_devices", ix.unmapped)
	} else {
		r.log.Debug("pod-resources listed", "pods", ix.pods, "gpu_devices", ix.devices)
	}
	if ix.unmapped > 0 && r.lastOK.IsZero() {
		r.log.Info("pod-resources: some GPU device IDs name no GPU (MIG instances); their processes get no pod name", "unmapped_devices", ix.unmapped)
	}
	r.lastOK, r.err, r.failures, r.loggedErr = now, nil, 0, ""
	return nil
}

// listLocked makes one listing. r.refreshMu is held.
func (r *Resolver) listLocked(ctx context.Context) ([]pod, error) {
	fi, err := os.Stat(r.opts.Socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r.client.close() // a kubelet that comes back makes a new socket
		return nil, ErrNoSocket
	case err != nil:
		return nil, fmt.Errorf("pod-resources socket: %w", err)
	case fi.Mode().Type() != fs.ModeSocket:
		return nil, fmt.Errorf("pod-resources socket %s: not a socket (%s)", r.opts.Socket, fi.Mode().Type())
	}
	ctx, cancel := context.WithTimeout(ctx, r.opts.Timeout)
	defer cancel()
	pods, err := r.client.list(ctx)
	if err != nil {
		// A fresh connection for the next attempt.
		r.client.close()
		return nil, describe(r.opts.Socket, err)
	}
	return pods, nil
}

// describe wraps a List error with what it means for an operator.
func describe(socket string, err error) error {
	code := rpcCode(err)
	switch {
	case code == codeUnimplemented:
		return fmt.Errorf("pod-resources %s: the kubelet does not serve the v1 API (Kubernetes 1.20 or later serves it): %w", socket, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("pod-resources %s: no answer in time: %w", socket, err)
	case errors.Is(err, fs.ErrPermission) || code == codePermissionDenied:
		return fmt.Errorf("pod-resources %s: permission denied (connecting needs write permission on the socket, which belongs to root): %w", socket, err)
	case code == codeUnavailable || errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("pod-resources %s: kubelet unavailable: %w", socket, err)
	}
	return fmt.Errorf("pod-resources %s: list: %w", socket, err)
}

// failLocked records a failed attempt and logs it: the socket's absence
// once at info, each distinct error once at warn, repeats at debug. An
// index older than staleRefreshes periods is dropped; while the socket is
// absent it is dropped at once. r.refreshMu and r.mu are held.
func (r *Resolver) failLocked(now time.Time, err error) {
	r.err = err
	r.failures++
	switch msg := err.Error(); {
	case msg == r.loggedErr:
		r.log.Debug("pod-resources listing failed again", "err", err, "failures", r.failures)
	case errors.Is(err, ErrNoSocket):
		r.log.Info("pod-resources socket not found: processes get container IDs but no pod names; checking again every refresh period",
			"socket", r.opts.Socket, "refresh", r.opts.Refresh)
		r.loggedErr = msg
	default:
		r.log.Warn("pod-resources listing failed", "err", err, "failures", r.failures)
		r.loggedErr = msg
	}
	ix := r.idx.Load()
	if ix == emptyIndex {
		return
	}
	if errors.Is(err, ErrNoSocket) || now.Sub(r.lastOK) > staleRefreshes*r.opts.Refresh {
		r.idx.Store(emptyIndex)
		r.log.Warn("pod-resources: dropped the last listing; processes get container IDs but no pod names until a listing succeeds",
			"last_success", r.lastOK)
	}
}

func (r *Resolver) closeConn() {
	r.refreshMu.Lock()
	defer r.refreshMu.Unlock()
	r.client.close()
}
