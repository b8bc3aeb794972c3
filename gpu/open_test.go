package gpu

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	mock := func() (Host, error) { return NewNVML(mockServer(t)) }
	tests := []struct {
		name     string
		o        OpenOptions
		vars     map[string]string
		shown    []int
		note     string // "" means none
		warn     string
		hostname string
		procErr  bool
		err      string
	}{
		{name: "simulated, all", o: OpenOptions{Simulate: 3}, shown: []int{0, 1, 2}, hostname: "simulated"},
		{name: "variables", o: OpenOptions{Simulate: 4}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3,1"}, shown: []int{3, 1},
			note: "showing GPUs 3,1 of 4 (CUDA_VISIBLE_DEVICES=3,1); --all-gpus shows all", hostname: "simulated"},
		{name: "every GPU listed: no note", o: OpenOptions{Simulate: 2}, vars: map[string]string{"NVIDIA_VISIBLE_DEVICES": "1,0"}, shown: []int{1, 0}, hostname: "simulated"},
		{name: "--all-gpus", o: OpenOptions{Simulate: 4, AllGPUs: true}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3"}, shown: []int{0, 1, 2, 3}, hostname: "simulated"},
		{name: "--gpu wins", o: OpenOptions{Simulate: 4, GPUs: []int{2}}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "3"}, shown: []int{2},
			note: "showing GPUs 2 of 4 (--gpu); --all-gpus shows all", hostname: "simulated"},
		{name: "none visible", o: OpenOptions{Simulate: 2}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "none"}, shown: []int{},
			note: "showing GPUs none of 2 (CUDA_VISIBLE_DEVICES=none); --all-gpus shows all", hostname: "simulated"},
		{name: "unmapped entry warns", o: OpenOptions{Simulate: 2}, vars: map[string]string{"CUDA_VISIBLE_DEVICES": "1,MIG-x"}, shown: []int{1},
			note: "showing GPUs 1 of 2", warn: "MIG instance", hostname: "simulated"},
		{name: "driver and /proc", o: OpenOptions{OpenNVML: mock, ProcRoot: "testdata/proc", GPUs: []int{0, 7}}, shown: []int{0, 7},
			note: "showing GPUs 0,7 of 8 (--gpu)", hostname: "node-7"},
		{name: "no /proc", o: OpenOptions{OpenNVML: mock, ProcRoot: "testdata/no-such-dir"}, shown: []int{0, 1, 2, 3, 4, 5, 6, 7}, hostname: "node-7", procErr: true},
		{name: "--gpu out of range", o: OpenOptions{Simulate: 2, GPUs: []int{0, 5}}, err: "no GPU 5: this host has 2 GPUs (0-1)"},
		{name: "bad simulation", o: OpenOptions{Simulate: 65}, err: "simulated GPUs: 65 out of range"},
		{name: "no driver", o: OpenOptions{OpenNVML: func() (Host, error) {
			return nil, fmt.Errorf("NVML library libnvidia-ml.so.1 not found (%w)", ErrNoDriver)
		}}, err: "libnvidia-ml.so.1 not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.o.Getenv = func(k string) (string, bool) { v, ok := tt.vars[k]; return v, ok }
			tt.o.Hostname = func() (string, error) { return "node-7", nil }
			tt.o.Now = func() time.Time { return fixtureBoot.Add(24 * time.Hour) }
			op, err := Open(tt.o)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer op.Host.Close()
			var sampled []int
			for _, id := range op.Sampler.Devices() {
				sampled = append(sampled, id.Index)
			}
			want := append([]int(nil), tt.shown...)
			slices.Sort(want)
			if !reflect.DeepEqual(op.Shown, tt.shown) || fmt.Sprint(sampled) != fmt.Sprint(want) {
				t.Errorf("shown %v, sampled %v; want %v", op.Shown, sampled, tt.shown)
			}
			if note := op.SelectionNote(); (tt.note == "") != (note == "") || !strings.Contains(note, tt.note) {
				t.Errorf("note %q, want %q", note, tt.note)
			}
			if w := strings.Join(op.Warnings, "\n"); (tt.warn == "") != (w == "") || !strings.Contains(w, tt.warn) {
				t.Errorf("warnings %q, want %q", w, tt.warn)
			}
			if op.Hostname != tt.hostname || (op.ProcErr != nil) != tt.procErr || (op.Procs == nil) != tt.procErr {
				t.Errorf("hostname %q, procs %v, proc error %v", op.Hostname, op.Procs, op.ProcErr)
			}
		})
	}
}

func TestOpenErrorKinds(t *testing.T) {
	_, err := Open(OpenOptions{Simulate: 1, GPUs: []int{-1}})
	var ie *IndexError
	if !errors.As(err, &ie) || ie.Index != -1 || ie.Count != 1 {
		t.Errorf("out-of-range GPU: %v, want an *IndexError", err)
	}
	_, err = Open(OpenOptions{OpenNVML: func() (Host, error) { return nil, fmt.Errorf("nvmlInit: %w", ErrNoDriver) }})
	if !IsNoDriver(err) {
		t.Errorf("missing driver: %v, want ErrNoDriver", err)
	}
}

func ExampleOpen() {
	vars := map[string]string{"CUDA_VISIBLE_DEVICES": "2,0"}
	op, err := Open(OpenOptions{
		Simulate: 4, // no driver needed
		Getenv:   func(k string) (string, bool) { v, ok := vars[k]; return v, ok },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer op.Host.Close()
	fmt.Println(op.Shown, op.Hostname)
	fmt.Println(op.SelectionNote())
	// Output:
	// [2 0] simulated
	// showing GPUs 2,0 of 4 (CUDA_VISIBLE_DEVICES=2,0); --all-gpus shows all
}
