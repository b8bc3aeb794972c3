package workload

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fakeKubelet serves the v1 PodResourcesLister on a Unix socket, the way
// the kubelet does, answering List from a fixture. Its behaviour can be
// changed while it serves: fail the next calls, or hold each call until
// released.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	srv   *grpc.Server
	calls atomic.Int32

	mu       sync.Mutex
	resp     *podresourcesv1.ListPodResourcesResponse
	failNext int        // calls left to fail
	failErr  error      // what they fail with
	hold     chan bool  // when set, each call waits for it to close (or the caller to give up)
	entered  chan int32 // when set, receives each call's number as it starts
}

func (k *fakeKubelet) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	n := k.calls.Add(1)
	k.mu.Lock()
	resp, hold, entered := k.resp, k.hold, k.entered
	var err error
	if k.failNext > 0 {
		k.failNext--
		err = k.failErr
	}
	k.mu.Unlock()
	if entered != nil {
		entered <- n
	}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if err != nil {
		return nil, err
	}
	return resp, nil
}

func (k *fakeKubelet) fail(n int, err error) {
	k.mu.Lock()
	k.failNext, k.failErr = n, err
	k.mu.Unlock()
}

func (k *fakeKubelet) setResponse(r *podresourcesv1.ListPodResourcesResponse) {
	k.mu.Lock()
	k.resp = r
	k.mu.Unlock()
}

// socketPath returns a socket path in a fresh directory. Unix socket paths
// are limited to 108 bytes, so it does not use t.TempDir (whose name holds
// the test's name).
func socketPath(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "wl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, "kubelet.sock")
}

// startKubelet serves resp on path until the test ends or stop is called.
func startKubelet(t testing.TB, path string, resp *podresourcesv1.ListPodResourcesResponse) *fakeKubelet {
	t.Helper()
	return startServer(t, path, func(s *grpc.Server, k *fakeKubelet) { podresourcesv1.RegisterPodResourcesListerServer(s, k) }, resp)
}

func startServer(t testing.TB, path string, register func(*grpc.Server, *fakeKubelet), resp *podresourcesv1.ListPodResourcesResponse) *fakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{srv: grpc.NewServer(), resp: resp}
	register(k.srv, k)
	go k.srv.Serve(l)
	t.Cleanup(k.stop)
	return k
}

// stop ends the server like a kubelet that exits: the socket file goes
// away with the listener.
func (k *fakeKubelet) stop() { k.srv.Stop() }

// fixture reads testdata/pods.json, a ListPodResourcesResponse in protobuf
// JSON form.
func fixture(t testing.TB) *podresourcesv1.ListPodResourcesResponse {
	t.Helper()
	b, err := os.ReadFile("testdata/pods.json")
	if err != nil {
		t.Fatal(err)
	}
	var r podresourcesv1.ListPodResourcesResponse
	if err := protojson.Unmarshal(b, &r); err != nil {
		t.Fatalf("testdata/pods.json: %v", err)
	}
	return &r
}

// logRecorder is a slog.Handler that keeps every record.
type logRecorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.recs = append(h.recs, r.Clone())
	h.mu.Unlock()
	return nil
}
func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// count returns how many records at level have a message containing sub.
func (h *logRecorder) count(level slog.Level, sub string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, r := range h.recs {
		if r.Level == level && strings.Contains(r.Message, sub) {
			n++
		}
	}
	return n
}

func (h *logRecorder) dump(t *testing.T) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range h.recs {
		t.Logf("log: %s %s", r.Level, r.Message)
	}
}

// waitFor polls cond until it holds or 10 s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// within fails the test if f does not return in d: used to show that
// Lookup and Status never wait for a listing.
func within(t *testing.T, d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { f(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s blocked for more than %v", what, d)
	}
}
