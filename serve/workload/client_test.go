package workload

import (
	"context"
	"encoding/binary"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// fromGenerated is what decodeList should return for r, read through the
// generated types' getters.
func fromGenerated(r *podresourcesv1.ListPodResourcesResponse) []pod {
	var pods []pod
	for _, p := range r.GetPodResources() {
		q := pod{Name: p.GetName(), Namespace: p.GetNamespace()}
		for _, c := range p.GetContainers() {
			d := container{Name: c.GetName()}
			for _, dv := range c.GetDevices() {
				d.Devices = append(d.Devices, devices{Resource: dv.GetResourceName(), IDs: dv.GetDeviceIds()})
			}
			q.Containers = append(q.Containers, d)
		}
		pods = append(pods, q)
	}
	return pods
}

// richResponse has every kind of field the v1 API defines, including those
// decodeList skips (CPU IDs, memory, topology, dynamic resources).
func richResponse(t testing.TB) *podresourcesv1.ListPodResourcesResponse {
	r := fixture(t)
	shareID := "share-1"
	r.PodResources = append(r.PodResources, &podresourcesv1.PodResources{
		Name: "rich", Namespace: "ns", CpuIds: []int64{1, 2, 900},
		Memory: []*podresourcesv1.ContainerMemory{{MemoryType: "memory", Size: 1 << 40}},
		Containers: []*podresourcesv1.ContainerResources{{
			Name:   "c",
			CpuIds: []int64{4, 5},
			Memory: []*podresourcesv1.ContainerMemory{{MemoryType: "hugepages-1Gi", Size: 1 << 30,
				Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 1}}}}},
			Devices: []*podresourcesv1.ContainerDevices{{
				ResourceName: "nvidia.com/gpu", DeviceIds: []string{"GPU-aaaaaaaa-0000-4000-8000-0000000000c0"},
				Topology: &podresourcesv1.TopologyInfo{Nodes: []*podresourcesv1.NUMANode{{ID: 0}, {ID: 1}}},
			}},
			DynamicResources: []*podresourcesv1.DynamicResource{{ClaimName: "gpu-claim", ClaimNamespace: "ns",
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: "gpu.nvidia.com", PoolName: "node-1",
					DeviceName: "gpu-0", ShareId: &shareID, CdiDevices: []*podresourcesv1.CDIDevice{{Name: "k8s.gpu.nvidia.com/gpu=gpu-0"}}}}}},
		}},
	})
	return r
}

func TestDecodeMatchesGenerated(t *testing.T) {
	r := richResponse(t)
	b, err := proto.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeList(b)
	if err != nil {
		t.Fatal(err)
	}
	if want := fromGenerated(r); !reflect.DeepEqual(got, want) {
		t.Errorf("decodeList =\n%+v\nwant\n%+v", got, want)
	}
	if got, err := decodeList(nil); err != nil || got != nil {
		t.Errorf("empty listing: %v, %v", got, err)
	}
}

func TestDecodeErrors(t *testing.T) {
	good, err := proto.Marshal(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		b    []byte
		want string
	}{
		{"truncated", good[:len(good)-3], "field 1: unexpected EOF"},
		{"bad tag", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, "decoding the listing"},
		{"length past the end", []byte{0x0a, 0x10, 0x0a}, "field 1"},
		{"bad nested container", []byte{0x0a, 0x03, 0x1a, 0x01, 0xff}, "pod 0: container 0"},
		{"bad devices", []byte{0x0a, 0x05, 0x1a, 0x03, 0x12, 0x01, 0xff}, "devices"},
	} {
		if _, err := decodeList(tt.b); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want it to mention %q", tt.name, err, tt.want)
		}
	}
}

// FuzzDecodeList checks the decoder against the generated one: whatever the
// generated types accept, decodeList accepts and reads the same way; and no
// input panics.
func FuzzDecodeList(f *testing.F) {
	b, err := proto.Marshal(richResponse(f))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add([]byte{})
	f.Add([]byte{0x0a, 0x05, 0x1a, 0x03, 0x12, 0x01, 0x0a})
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := decodeList(b)
		var r podresourcesv1.ListPodResourcesResponse
		if proto.Unmarshal(b, &r) != nil {
			return // the generated decoder refuses more (invalid UTF-8); no panic is all we ask
		}
		if err != nil {
			t.Fatalf("generated decoder accepts, decodeList fails: %v", err)
		}
		want := fromGenerated(&r)
		if !reflect.DeepEqual(normalize(got), normalize(want)) {
			t.Fatalf("decodeList =\n%+v\ngenerated\n%+v", got, want)
		}
	})
}

// normalize makes nil and empty slices compare equal.
func normalize(ps []pod) []pod {
	for i := range ps {
		if len(ps[i].Containers) == 0 {
			ps[i].Containers = nil
		}
		for j := range ps[i].Containers {
			c := &ps[i].Containers[j]
			if len(c.Devices) == 0 {
				c.Devices = nil
			}
			for k := range c.Devices {
				if len(c.Devices[k].IDs) == 0 {
					c.Devices[k].IDs = nil
				}
			}
		}
	}
	if len(ps) == 0 {
		return nil
	}
	return ps
}

func TestUnframe(t *testing.T) {
	frame := func(flag byte, n uint32, body string) []byte {
		b := []byte{flag, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], n)
		return append(b, body...)
	}
	for _, tt := range []struct {
		name string
		b    []byte
		want string // body, or the error's text
		ok   bool
	}{
		{"one message", frame(0, 3, "abc"), "abc", true},
		{"empty message", frame(0, 0, ""), "", true},
		{"short header", []byte{0, 0, 0}, "shorter than a message header", false},
		{"compressed", frame(1, 3, "abc"), "compressed", false},
		{"length too large", frame(0, maxResponse+1, ""), "limit", false},
		{"truncated", frame(0, 4, "abc"), "announces 4", false},
		{"two messages", append(frame(0, 1, "a"), frame(0, 1, "b")...), "announces 1", false},
	} {
		got, err := unframe(tt.b)
		switch {
		case tt.ok && (err != nil || string(got) != tt.want):
			t.Errorf("%s: %q, %v; want %q", tt.name, got, err, tt.want)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: err = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestStatusError(t *testing.T) {
	for _, tt := range []struct {
		st, msg string
		code    int // -1: nil error
		text    string
	}{
		{"0", "", -1, ""},
		{"", "", codeInternal, "without a grpc-status"},
		{"x", "", codeUnknown, "malformed"},
		{"-3", "", codeUnknown, "malformed"},
		{"14", "kubelet%20is%20restarting%0A", codeUnavailable, "code = Unavailable desc = kubelet is restarting\n"},
		{"12", "100%", codeUnimplemented, "desc = 100%"}, // not valid percent-encoding: kept as sent
		{"99", "", 99, "Code(99)"},
	} {
		err := statusError(tt.st, tt.msg)
		if tt.code < 0 {
			if err != nil {
				t.Errorf("%q: %v", tt.st, err)
			}
			continue
		}
		if rpcCode(err) != tt.code || !strings.Contains(err.Error(), tt.text) {
			t.Errorf("statusError(%q, %q) = %v (code %d), want code %d and %q", tt.st, tt.msg, err, rpcCode(err), tt.code, tt.text)
		}
	}
}

// The server's message comes through percent-decoded, exactly.
func TestServerMessage(t *testing.T) {
	path := socketPath(t)
	k := startKubelet(t, path, fixture(t))
	const msg = "quota: 100% used, naïve retry\nsecond line"
	k.fail(1, status.Error(codes.ResourceExhausted, msg))
	err := New(Options{Socket: path}).Refresh(context.Background())
	if err == nil || !strings.HasSuffix(err.Error(), "code = ResourceExhausted desc = "+msg) {
		t.Fatalf("err = %v", err)
	}
}

// serveHTTP serves h over HTTP/2 with prior knowledge, or over HTTP/1 only,
// on a Unix socket.
func serveHTTP(t *testing.T, path string, h2 bool, h http.HandlerFunc) {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	if h2 {
		p.SetUnencryptedHTTP2(true)
	} else {
		p.SetHTTP1(true)
	}
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
}

// Servers that are not a kubelet's gRPC server get errors that say what
// went wrong, never a listing.
func TestNotAGRPCServer(t *testing.T) {
	good, err := proto.Marshal(fixture(t))
	if err != nil {
		t.Fatal(err)
	}
	framed := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(good)))
	framed = append(framed, good...)
	for _, tt := range []struct {
		name string
		h2   bool
		h    http.HandlerFunc
		want string
	}{
		{"HTTP/1 only", false, func(w http.ResponseWriter, r *http.Request) {}, "pod-resources"},
		{"not found", true, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) }, "does not serve the v1 API"},
		{"overloaded", true, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }, "kubelet unavailable"},
		{"not gRPC", true, func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("hello")) }, "not application/grpc"},
		{"no status", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Write(framed)
		}, "without a grpc-status"},
		{"trailers-only OK", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Header().Set("Grpc-Status", "0")
		}, "without a message"},
		{"compressed", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc")
			w.Write(append([]byte{1}, framed[1:]...))
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		}, "compressed"},
		{"garbage message", true, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/grpc+proto")
			w.Write([]byte{0, 0, 0, 0, 2, 0x0a, 0x05})
			w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
		}, "decoding the listing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			path := socketPath(t)
			serveHTTP(t, path, tt.h2, tt.h)
			r := New(Options{Socket: path})
			err := r.Refresh(context.Background())
			if err == nil || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("err = %v, want it to name the socket and say %q", err, tt.want)
			}
			if st := r.Status(); st.Pods != 0 || st.Failures != 1 {
				t.Fatalf("Status = %+v", st)
			}
		})
	}

	// The same handler speaking gRPC correctly is a listing: the cases
	// above fail for the reason they name.
	path := socketPath(t)
	serveHTTP(t, path, true, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != listPath || r.Header.Get("Content-Type") != "application/grpc" || r.Header.Get("Te") != "trailers" || r.Header.Get("Grpc-Timeout") == "" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/grpc")
		w.Write(framed)
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	})
	r := New(Options{Socket: path})
	if err := r.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st := r.Status(); st.Pods != 13 {
		t.Fatalf("Status = %+v", st)
	}
}
