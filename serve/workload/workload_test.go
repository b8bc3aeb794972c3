package workload

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/vramhq/vram/gpu"
)

const (
	cid1 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	pod1 = "6f1c2d3e-4a5b-4c6d-8e7f-9a0b1c2d3e4f"
)

func gpuN(n string) string { return "GPU-aaaaaaaa-0000-4000-8000-0000000000" + n }

// testGPUOf maps the fixture's new-form MIG instances and its index-strategy
// device to GPUs, as the daemon would from NVML.
func testGPUOf(resource, id string) (string, bool) {
	switch id {
	case "MIG-bbbbbbbb-0000-4000-8000-00000000000a", "MIG-bbbbbbbb-0000-4000-8000-00000000000b":
		return gpuN("08"), true
	case "MIG-bbbbbbbb-0000-4000-8000-00000000000c":
		return gpuN("09"), true
	case "10":
		if resource == "nvidia.com/gpu" {
			return gpuN("0a"), true
		}
	}
	return "", false
}

func podProc(uuid string) gpu.Process {
	return gpu.Process{PID: 4242, DeviceUUID: uuid, Container: gpu.Container{Runtime: "containerd", ID: cid1, PodUID: pod1}}
}

func TestLookup(t *testing.T) {
	path := socketPath(t)
	startKubelet(t, path, fixture(t))
	r := New(Options{Socket: path, GPUOf: testGPUOf})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	short := cid1[:12]
	tests := []struct {
		name string
		p    gpu.Process
		want Workload
	}{
		{"exclusive GPU", podProc(gpuN("01")), Workload{"train-0", "ml", "trainer"}},
		{"second of a container's two GPUs", podProc(gpuN("03")), Workload{"train-1", "ml", "trainer"}},
		{"time-sliced GPU shared by two pods: not guessed", podProc(gpuN("04")), Workload{Container: short}},
		{"GPU shared by two containers of one pod: pod known", podProc(gpuN("05")), Workload{"llm", "serving", short}},
		{"two replicas of one GPU in one container", podProc(gpuN("06")), Workload{"sweep-7", "batch", "worker"}},
		{"MIG instance, old form naming its GPU", podProc(gpuN("07")), Workload{"mig-legacy", "inference", "server"}},
		{"MIG instances of one GPU in two pods: not guessed", podProc(gpuN("08")), Workload{Container: short}},
		{"MIG instance, new form, through GPUOf", podProc(gpuN("09")), Workload{"mig-c", "inference", "server"}},
		{"process on a MIG instance itself", podProc("MIG-BBBBBBBB-0000-4000-8000-00000000000b"), Workload{"mig-b", "inference", "server"}},
		{"process on an unknown MIG instance", podProc("MIG-bbbbbbbb-0000-4000-8000-0000000000ff"), Workload{Container: short}},
		{"index-strategy device ID through GPUOf", podProc(gpuN("0a")), Workload{"by-index", "legacy", "app"}},
		{"upper-case UUID in the listing", podProc(gpuN("0b")), Workload{"fpga", "other", "app"}},
		{"upper-case UUID from the process", podProc(strings.ToUpper(gpuN("01"))), Workload{"train-0", "ml", "trainer"}},
		{"pod on a GPU nobody was allocated", podProc(gpuN("ff")), Workload{Container: short}},
		{"pod process without a container ID", gpu.Process{DeviceUUID: gpuN("01"), Container: gpu.Container{Runtime: "cri", PodUID: pod1}}, Workload{"train-0", "ml", "trainer"}},
		{"docker container on an allocated GPU: not a pod", gpu.Process{DeviceUUID: gpuN("01"), Container: gpu.Container{Runtime: "docker", ID: cid1}}, Workload{Container: short}},
		{"no container", gpu.Process{DeviceUUID: gpuN("01")}, Workload{}},
		{"no device UUID", gpu.Process{Container: gpu.Container{ID: cid1, PodUID: pod1}}, Workload{Container: short}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Lookup(tt.p); got != tt.want {
				t.Errorf("Lookup = %+v, want %+v", got, tt.want)
			}
		})
	}

	st := r.Status()
	if st.Err != nil || st.Failures != 0 || st.LastRefresh.IsZero() || !st.Enabled || st.Socket != path {
		t.Errorf("Status = %+v", st)
	}
	// 13 pods, 15 containers; devices: GPUs 01-06 (the replicas of 04, 05 and
	// 06 count once each), the old-form MIG instance, three new-form ones,
	// the index ID and 0b.
	if st.Pods != 13 || st.Containers != 15 || st.Devices != 12 || st.Unmapped != 0 {
		t.Errorf("Status counts = pods %d containers %d devices %d unmapped %d, want 13 15 12 0", st.Pods, st.Containers, st.Devices, st.Unmapped)
	}
}

// Without GPUOf, new-form MIG IDs cannot be placed on a GPU: they are
// counted, logged, and match nothing.
func TestLookupMIGWithoutGPUOf(t *testing.T) {
	path := socketPath(t)
	startKubelet(t, path, fixture(t))
	logs := &logRecorder{}
	r := New(Options{Socket: path, Logger: slog.New(logs)})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, g := range []string{"08", "09", "0a"} {
		if got := r.Lookup(podProc(gpuN(g))); got != (Workload{Container: cid1[:12]}) {
			t.Errorf("GPU %s: Lookup = %+v, want the short container ID only", g, got)
		}
	}
	if got := r.Lookup(podProc(gpuN("07"))); got.Pod != "mig-legacy" {
		t.Errorf("old-form MIG ID needs no GPUOf: got %+v", got)
	}
	if st := r.Status(); st.Unmapped != 3 {
		t.Errorf("Unmapped = %d, want 3", st.Unmapped)
	}
	if logs.count(slog.LevelInfo, "MIG") != 1 {
		logs.dump(t)
		t.Error("want one info line about unmapped MIG instances")
	}
}

func TestDisabled(t *testing.T) {
	r := New(Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r.Run(ctx) // returns at once
	if ctx.Err() != nil {
		t.Fatal("Run without a socket did not return at once")
	}
	if err := r.Refresh(ctx); err == nil {
		t.Error("Refresh without a socket: no error")
	}
	if got := r.Lookup(podProc(gpuN("01"))); got != (Workload{Container: cid1[:12]}) {
		t.Errorf("Lookup = %+v", got)
	}
	if st := r.Status(); st.Enabled || st.Pods != 0 {
		t.Errorf("Status = %+v", st)
	}
}

// An absent socket is reported once, retried every refresh period, and
// picked up when the kubelet appears; when it goes away again the names go
// with it, and a restarted kubelet is found again.
func TestSocketAbsent(t *testing.T) {
	path := socketPath(t)
	logs := &logRecorder{}
	r := New(Options{Socket: path, Refresh: 10 * time.Millisecond, Logger: slog.New(logs)})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	waitFor(t, "five attempts on the absent socket", func() bool { return r.Status().Failures >= 5 })
	st := r.Status()
	if !errors.Is(st.Err, ErrNoSocket) || st.Pods != 0 || !st.LastRefresh.IsZero() {
		t.Fatalf("Status = %+v, want ErrNoSocket and no pods", st)
	}
	if n := logs.count(slog.LevelInfo, "not found"); n != 1 {
		logs.dump(t)
		t.Fatalf("absent socket logged %d times at info, want once", n)
	}
	if n := logs.count(slog.LevelWarn, ""); n != 0 {
		logs.dump(t)
		t.Fatalf("absent socket logged %d warnings, want none", n)
	}

	k := startKubelet(t, path, fixture(t))
	waitFor(t, "the kubelet to be listed", func() bool { return r.Status().Pods == 13 })
	if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "train-0" {
		t.Fatalf("after the socket appeared: Lookup = %+v", got)
	}

	k.stop()
	waitFor(t, "the socket's absence to empty the index", func() bool { return r.Status().Pods == 0 })
	if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "" {
		t.Fatalf("after the kubelet went away: Lookup = %+v", got)
	}
	if st := r.Status(); !errors.Is(st.Err, ErrNoSocket) {
		t.Fatalf("Status.Err = %v, want ErrNoSocket", st.Err)
	}

	startKubelet(t, path, fixture(t))
	waitFor(t, "the restarted kubelet to be listed", func() bool { return r.Status().Pods == 13 })
	if n := logs.count(slog.LevelInfo, "not found"); n != 2 {
		logs.dump(t)
		t.Fatalf("socket absence logged %d times, want once per absence (2)", n)
	}
}

// A kubelet that errors is retried with backoff; the last listing serves
// lookups meanwhile, until it is too old; a success clears the error.
func TestErrorThenRecover(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	logs := &logRecorder{}
	now := time.Unix(1_700_000_000, 0)
	var clock sync.Mutex
	r := New(Options{Socket: path, Logger: slog.New(logs), Now: func() time.Time { clock.Lock(); defer clock.Unlock(); return now }})
	advance := func(d time.Duration) { clock.Lock(); now = now.Add(d); clock.Unlock() }
	ctx := context.Background()

	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	k.fail(3, status.Error(codes.Internal, "boom"))
	for i := 1; i <= 3; i++ {
		advance(DefaultRefresh)
		err := r.Refresh(ctx)
		if err == nil || !strings.Contains(err.Error(), "boom") || !strings.Contains(err.Error(), path) {
			t.Fatalf("failure %d: err = %v, want it to carry the kubelet's message and the socket", i, err)
		}
		st := r.Status()
		if st.Failures != i || st.Err == nil {
			t.Fatalf("failure %d: Status = %+v", i, st)
		}
		// Within staleRefreshes periods of the last success the listing
		// still serves.
		if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "train-0" {
			t.Fatalf("failure %d: Lookup = %+v, want the last listing's names", i, got)
		}
	}
	if n := logs.count(slog.LevelWarn, "listing failed"); n != 1 {
		logs.dump(t)
		t.Fatalf("one error repeated 3 times logged %d warnings, want 1", n)
	}

	// Backoff: 1 s, 2 s, 4 s, ... capped at the refresh period.
	for _, c := range []struct {
		failures int
		want     time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {5, 16 * time.Second}, {6, DefaultRefresh}, {40, DefaultRefresh}} {
		r.mu.Lock()
		r.failures = c.failures
		r.mu.Unlock()
		if got := r.nextDelay(errors.New("x")); got != c.want {
			t.Errorf("delay after %d failures = %v, want %v", c.failures, got, c.want)
		}
	}
	if got := r.nextDelay(nil); got != DefaultRefresh {
		t.Errorf("delay after a success = %v", got)
	}
	if got := r.nextDelay(ErrNoSocket); got != DefaultRefresh {
		t.Errorf("delay while the socket is absent = %v, want the refresh period", got)
	}

	// A listing more than staleRefreshes periods old is dropped.
	k.fail(1, status.Error(codes.Internal, "boom"))
	advance(DefaultRefresh + time.Second) // now 4 periods + 1 s after the last success
	if err := r.Refresh(ctx); err == nil {
		t.Fatal("want an error")
	}
	if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "" {
		t.Fatalf("stale listing still used: %+v", got)
	}
	if st := r.Status(); st.Pods != 0 {
		t.Fatalf("stale listing still counted: %+v", st)
	}

	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	st := r.Status()
	if st.Err != nil || st.Failures != 0 || st.Pods != 13 || !st.LastRefresh.Equal(now) {
		t.Fatalf("after recovery: Status = %+v", st)
	}
	if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "train-0" {
		t.Fatalf("after recovery: Lookup = %+v", got)
	}
	if logs.count(slog.LevelInfo, "listed") != 2 {
		logs.dump(t)
		t.Error("want an info line for the first listing and one for the recovery")
	}
}

// Run retries a failing kubelet by itself and picks up new listings.
func TestRunRecovers(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	k.fail(3, status.Error(codes.Unavailable, "kubelet starting"))
	r := New(Options{Socket: path, Refresh: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	waitFor(t, "a listing after 3 failures", func() bool { return r.Status().Pods == 13 })
	if k.calls.Load() < 4 {
		t.Fatalf("%d calls, want at least 4", k.calls.Load())
	}
	k.setResponse(&podresourcesv1.ListPodResourcesResponse{PodResources: []*podresourcesv1.PodResources{{
		Name: "new", Namespace: "ml", Containers: []*podresourcesv1.ContainerResources{{
			Name: "c", Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{gpuN("01")}}},
		}},
	}}})
	waitFor(t, "the new listing", func() bool { return r.Lookup(podProc(gpuN("01"))).Pod == "new" })
}

// A kubelet that does not answer costs one Timeout, and neither Lookup nor
// Status waits for it.
func TestSlowKubelet(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	r := New(Options{Socket: path, Timeout: 100 * time.Millisecond})
	ctx := context.Background()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}

	hold := make(chan bool)
	k.mu.Lock()
	k.hold = hold
	k.mu.Unlock()
	start := time.Now()
	err := r.Refresh(ctx)
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a slow kubelet held Refresh for %v with a 100ms timeout", took)
	}
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no answer in time") {
		t.Fatalf("err = %v, want a deadline error", err)
	}

	// While a listing hangs, lookups and status answer from the last index.
	r = New(Options{Socket: path, Timeout: time.Minute})
	k.mu.Lock()
	k.hold = nil
	k.mu.Unlock()
	if err := r.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	entered := make(chan int32, 1)
	k.mu.Lock()
	k.hold, k.entered = hold, entered
	k.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- r.Refresh(ctx) }()
	<-entered
	within(t, 2*time.Second, "Lookup during a listing", func() {
		if got := r.Lookup(podProc(gpuN("01"))); got.Pod != "train-0" {
			t.Errorf("Lookup = %+v", got)
		}
	})
	within(t, 2*time.Second, "Status during a listing", func() { r.Status() })
	k.mu.Lock()
	k.entered = nil
	k.mu.Unlock()
	close(hold)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestUnimplemented(t *testing.T) {
	path := socketPath(t)
	// A server that registers the service but implements nothing, like a
	// kubelet without the v1 API.
	startServer(t, path, func(s *grpc.Server, _ *fakeKubelet) {
		podresourcesv1.RegisterPodResourcesListerServer(s, podresourcesv1.UnimplementedPodResourcesListerServer{})
	}, nil)
	err := New(Options{Socket: path}).Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "does not serve the v1 API") {
		t.Fatalf("err = %v", err)
	}
}

func TestNotASocket(t *testing.T) {
	path := socketPath(t)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := New(Options{Socket: path}).Refresh(context.Background())
	if err == nil || !strings.Contains(err.Error(), "not a socket") || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
}

func TestDialError(t *testing.T) {
	path := socketPath(t)
	startKubelet(t, path, fixture(t))
	boom := errors.New("dial refused by test")
	dials := 0
	r := New(Options{Socket: path, Dial: func(ctx context.Context, socket string) (net.Conn, error) {
		dials++
		switch dials {
		case 1:
			return nil, boom
		case 2:
			return nil, &net.OpError{Op: "dial", Net: "unix", Err: os.NewSyscallError("connect", syscall.EACCES)}
		}
		return dialUnix(ctx, socket)
	}})
	if err := r.Refresh(context.Background()); !errors.Is(err, boom) || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v", err)
	}
	if err := r.Refresh(context.Background()); !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "permission denied (connecting needs write permission") {
		t.Fatalf("err = %v, want it to explain the permission", err)
	}
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatalf("third attempt dials again: %v", err)
	}
}

// Lookups from many goroutines while Run swaps listings (run with -race).
func TestConcurrentLookup(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	r := New(Options{Socket: path, Refresh: time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	waitFor(t, "a first listing", func() bool { return r.Status().Pods > 0 })
	alt := fixture(t)
	alt.PodResources[0].Name = "train-0-b"
	stop := make(chan struct{})
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if got := r.Lookup(podProc(gpuN("01"))).Pod; got != "train-0" && got != "train-0-b" {
					t.Errorf("Lookup = %q; status %+v", got, r.Status())
					return
				}
				r.Status()
			}
		})
	}
	for i := range 20 {
		if i%2 == 0 {
			k.setResponse(alt)
		} else {
			k.setResponse(fixture(t))
		}
		time.Sleep(5 * time.Millisecond)
	}
	close(stop)
	cancel()
	wg.Wait()
}

func TestLookupAllocatesNothing(t *testing.T) {
	path := socketPath(t)
	startKubelet(t, path, fixture(t))
	r := New(Options{Socket: path})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	ps := []gpu.Process{podProc(gpuN("01")), podProc(gpuN("04")), podProc(gpuN("05")), podProc("MIG-bbbbbbbb-0000-4000-8000-00000000000b"), {DeviceUUID: gpuN("01")}}
	if n := testing.AllocsPerRun(100, func() {
		for _, p := range ps {
			r.Lookup(p)
		}
	}); n != 0 {
		t.Errorf("Lookup allocates %v times per run", n)
	}
}

func BenchmarkLookup(b *testing.B) {
	path := socketPath(b)
	startKubelet(b, path, fixture(b))
	r := New(Options{Socket: path})
	if err := r.Refresh(context.Background()); err != nil {
		b.Fatal(err)
	}
	p := podProc(gpuN("01"))
	b.ReportAllocs()
	for b.Loop() {
		r.Lookup(p)
	}
}

// A listing abandoned by its caller (the daemon stopping) is not a kubelet
// failure: the index and the failure count stay as they were.
func TestCancelKeepsListing(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	r := New(Options{Socket: path, Refresh: time.Millisecond})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond) // the listing is now older than staleRefreshes periods
	entered := make(chan int32, 1)
	k.mu.Lock()
	k.hold, k.entered = make(chan bool), entered
	k.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-entered; cancel() }()
	if err := r.Refresh(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if st := r.Status(); st.Failures != 0 || st.Err != nil || st.Pods != 13 {
		t.Fatalf("Status = %+v, want the listing kept and no failure", st)
	}
}
