package workload

import (
	"strings"
	"testing"
)

func TestParseDeviceID(t *testing.T) {
	const u = "63feeb45-94c6-b9cb-78ea-98e9b7a5be6b"
	tests := []struct {
		id        string
		kind      deviceKind
		base, gpu string
	}{
		{"GPU-" + u, deviceGPU, "GPU-" + u, u},
		{"gpu-" + strings.ToUpper(u), deviceGPU, "gpu-" + strings.ToUpper(u), u},
		{"GPU-" + u + "::3", deviceGPU, "GPU-" + u, u},
		{"GPU-" + u + "::", deviceGPU, "GPU-" + u, u},
		{"MIG-GPU-" + u + "/1/0", deviceMIG, "MIG-GPU-" + u + "/1/0", u},
		{"MIG-GPU-" + u + "/1/0::2", deviceMIG, "MIG-GPU-" + u + "/1/0", u},
		{"MIG-GPU-" + u, deviceMIG, "MIG-GPU-" + u, u},
		{"MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", deviceMIG, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", ""},
		{"MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f::1", deviceMIG, "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", ""},
		// Not GPUs, or not well formed: left to GPUOf.
		{"0", deviceOther, "0", ""},
		{"3::1", deviceOther, "3", ""},
		{"0000:3b:00.0", deviceOther, "0000:3b:00.0", ""},
		{"GPU-", deviceOther, "GPU-", ""},
		{"GPU-xyz", deviceOther, "GPU-xyz", ""},
		{"GPU-1234", deviceOther, "GPU-1234", ""},
		{"GPU--" + u, deviceOther, "GPU--" + u, ""},
		{"GPU-" + u + "-", deviceOther, "GPU-" + u + "-", ""},
		{"GPU-63feeb45--94c6", deviceOther, "GPU-63feeb45--94c6", ""},
		{"MIG-GPU-zz/1/0", deviceOther, "MIG-GPU-zz/1/0", ""},
		{"MIG-", deviceOther, "MIG-", ""},
		{"", deviceOther, "", ""},
	}
	for _, tt := range tests {
		kind, base, gpu := parseDeviceID(tt.id)
		if kind != tt.kind || base != tt.base || gpu != tt.gpu {
			t.Errorf("parseDeviceID(%q) = %v, %q, %q; want %v, %q, %q", tt.id, kind, base, gpu, tt.kind, tt.base, tt.gpu)
		}
	}
}

func FuzzParseDeviceID(f *testing.F) {
	for _, s := range []string{"GPU-63feeb45-94c6-b9cb-78ea-98e9b7a5be6b::1", "MIG-GPU-63feeb45-94c6-b9cb-78ea-98e9b7a5be6b/1/0",
		"MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f", "0", "::", "GPU-::", "MIG-GPU-/", "gPu-ABCDEF01"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		kind, base, key := parseDeviceID(id)
		if !strings.HasPrefix(id, base) || strings.Contains(base, "::") {
			t.Fatalf("base %q is not id %q without its replica suffix", base, id)
		}
		switch kind {
		case deviceGPU:
			if key == "" {
				t.Fatalf("%q: a GPU without a key", id)
			}
		case deviceOther:
			if key != "" {
				t.Fatalf("%q: not a GPU but key %q", id, key)
			}
		}
		if key != "" {
			if !validUUID(key) || key != strings.ToLower(key) {
				t.Fatalf("%q: key %q is not a lower-case UUID", id, key)
			}
			// The key is what Lookup finds from NVML's spelling of the UUID.
			if k, ok := gpuKey("GPU-" + key); !ok || k != key {
				t.Fatalf("%q: key %q does not round-trip through gpuKey", id, key)
			}
		}
		// Whatever the ID, an index over it can be built and read.
		ix := buildIndex([]pod{{Name: "p", Namespace: "n", Containers: []container{{
			Name: "c", Devices: []devices{{Resource: "nvidia.com/gpu", IDs: []string{id, id}}},
		}}}}, nil)
		if key != "" && len(ix.byGPU[key]) != 1 {
			t.Fatalf("%q listed twice for one container: %d holders, want 1", id, len(ix.byGPU[key]))
		}
	})
}
