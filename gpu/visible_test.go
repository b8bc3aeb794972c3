package gpu

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseVisible(t *testing.T) {
	devs := []Identity{
		{Index: 0, UUID: "GPU-aaaa1111-0000-0000-0000-000000000000"},
		{Index: 1, UUID: "GPU-aaaa2222-0000-0000-0000-000000000000"},
		{Index: 2, UUID: "GPU-bbbb3333-0000-0000-0000-000000000000"},
		{Index: 3, UUID: "GPU-cccc4444-0000-0000-0000-000000000000"},
	}
	tests := []struct {
		name    string
		env     map[string]string
		all     bool
		indices []int
		warn    string // substring of the joined warnings
	}{
		{"unset", nil, true, nil, ""},
		{"indices", map[string]string{"CUDA_VISIBLE_DEVICES": "2,0"}, false, []int{2, 0}, ""},
		{"spaces", map[string]string{"CUDA_VISIBLE_DEVICES": " 1 , 3 "}, false, []int{1, 3}, ""},
		{"empty hides all", map[string]string{"CUDA_VISIBLE_DEVICES": ""}, false, []int{}, ""},
		{"none", map[string]string{"NVIDIA_VISIBLE_DEVICES": "none"}, false, []int{}, ""},
		{"void", map[string]string{"NVIDIA_VISIBLE_DEVICES": "void"}, false, []int{}, ""},
		{"all", map[string]string{"NVIDIA_VISIBLE_DEVICES": "all"}, true, nil, ""},
		{"full uuid", map[string]string{"CUDA_VISIBLE_DEVICES": "GPU-bbbb3333-0000-0000-0000-000000000000"}, false, []int{2}, ""},
		{"uuid prefix without GPU-", map[string]string{"CUDA_VISIBLE_DEVICES": "cccc"}, false, []int{3}, ""},
		{"ambiguous prefix stops the list", map[string]string{"CUDA_VISIBLE_DEVICES": "1,GPU-aaaa"}, false, []int{1}, "matches more than one device"},
		{"bad index stops the list", map[string]string{"CUDA_VISIBLE_DEVICES": "0,7,1"}, false, []int{0}, `no device with index 7 (this host has 4); like CUDA, the list stops there ("7" and the 1 entries after it are ignored)`},
		{"-1 hides all", map[string]string{"CUDA_VISIBLE_DEVICES": "-1"}, false, []int{}, ""},
		{"mig skipped", map[string]string{"CUDA_VISIBLE_DEVICES": "MIG-1234abcd-0000,2"}, false, []int{2}, "is a MIG instance"},
		{"duplicate", map[string]string{"CUDA_VISIBLE_DEVICES": "1,1"}, false, []int{1}, "device 1 listed twice"},
		{"both: intersect", map[string]string{"NVIDIA_VISIBLE_DEVICES": "0,1,2", "CUDA_VISIBLE_DEVICES": "2,3,0"}, false, []int{2, 0}, ""},
		{"garbage", map[string]string{"CUDA_VISIBLE_DEVICES": "zzz"}, false, []int{}, `no device with UUID "zzz"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := ParseVisible(func(k string) (string, bool) { s, ok := tt.env[k]; return s, ok }, devs)
			if v.All != tt.all || (!tt.all && !reflect.DeepEqual(v.Indices, tt.indices)) {
				t.Errorf("got all=%v %v, want all=%v %v", v.All, v.Indices, tt.all, tt.indices)
			}
			w := strings.Join(v.Warnings, "\n")
			if (tt.warn == "") != (w == "") || !strings.Contains(w, tt.warn) {
				t.Errorf("warnings = %q, want %q", w, tt.warn)
			}
			if !tt.all && v.Source == "" {
				t.Error("no source named")
			}
		})
	}
}

func FuzzParseVisible(f *testing.F) {
	for _, s := range []string{"0,1", "GPU-aa", "MIG-x,0", "", "all", ",,", "0,-1,1", "GPU-"} {
		f.Add(s)
	}
	devs := []Identity{{Index: 0, UUID: "GPU-aa"}, {Index: 1, UUID: "GPU-ab"}}
	f.Fuzz(func(t *testing.T, s string) {
		v := ParseVisible(func(k string) (string, bool) { return s, k == "CUDA_VISIBLE_DEVICES" }, devs)
		for _, i := range v.Indices {
			if i < 0 || i > 1 {
				t.Fatalf("%q selected index %d", s, i)
			}
		}
	})
}

func FuzzParseContainer(f *testing.F) {
	for _, s := range []string{"/docker/abc", "/kubepods/pod1/x", "0::/", "/system.slice/docker-.scope"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c := ParseContainer(s)
		if c.ID != "" && len(c.ID) != 64 {
			t.Fatalf("%q: id %q", s, c.ID)
		}
	})
}
