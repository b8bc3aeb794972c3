package api_test

import (
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/vramhq/vram/serve/api"
)

// stateBackend answers State with s; every other method is unused here.
type stateBackend struct {
	api.Backend
	s api.State
}

func (b stateBackend) State() (api.State, bool) { return b.s, true }

// TestStateCarriesAllocator: a process on vram's allocator has its
// figures in the State, flat and in the allocator object; one not on it
// has null figures and no object.
func TestStateCarriesAllocator(t *testing.T) {
	at := time.Date(2026, 11, 30, 12, 0, 0, 500, time.UTC)
	on := api.Process{GPU: "GPU-0", PID: 10, Flags: []string{}, Recent: []uint64{}, StartTime: at}
	on.SetAllocator(&api.Allocator{AllocatedBytes: 192 << 20, ReservedBytes: 256 << 20, FreeCachedBytes: 64 << 20, LargestFreeBlock: 32 << 20,
		Fragmentation: 0.125, NumOOMs: 2, Backend: "sim", Updated: at})
	off := api.Process{GPU: "GPU-0", PID: 11, Flags: []string{}, Recent: []uint64{}}
	h := api.Handler(stateBackend{s: api.State{Schema: api.Schema, Time: at, Processes: []api.Process{on, off}}}, api.Options{})
	for _, target := range []string{"/api/v1/state", "/api/v1/processes"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", target, nil))
		var doc struct {
			Processes []map[string]any `json:"processes"`
		}
		if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil || len(doc.Processes) != 2 {
			t.Fatalf("%s: %d %v %s", target, w.Code, err, w.Body)
		}
		p, q := doc.Processes[0], doc.Processes[1]
		a, _ := p["allocator"].(map[string]any)
		if p["allocated_bytes"] != float64(192<<20) || p["reserved_bytes"] != float64(256<<20) || a == nil ||
			a["fragmentation"] != 0.125 || a["num_ooms"] != float64(2) || a["largest_free_block_bytes"] != float64(32<<20) ||
			a["updated"] != "2026-11-30T12:00:00.0000005Z" {
			t.Errorf("%s: process on the allocator: %v", target, p)
		}
		if v, ok := q["allocated_bytes"]; !ok || v != nil {
			t.Errorf("%s: process not on it: allocated_bytes %v (present %v), want null", target, v, ok)
		}
		if v, ok := q["reserved_bytes"]; !ok || v != nil {
			t.Errorf("%s: process not on it: reserved_bytes %v (present %v), want null", target, v, ok)
		}
		if _, ok := q["allocator"]; ok {
			t.Errorf("%s: process not on it has an allocator object: %v", target, q)
		}
	}
}
