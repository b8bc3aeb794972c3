package workload

// See doc.go for an overview.

import (
	"cmp"
	"slices"
	"strings"
)

// holder is one container that the kubelet lists as holding a device.
type holder struct{ Namespace, Pod, Container string }

func (a holder) compare(b holder) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Pod, b.Pod), cmp.Compare(a.Container, b.Container))
}

// index is one pod-resources listing turned into "which containers hold
// this GPU". It is built once per refresh and never modified afterwards:
// Lookup reads it without a lock.
type index struct {
	// byGPU maps a GPU's key (gpuKey) to the distinct containers that hold
	// it or one of its MIG instances, sorted.
	byGPU map[string][]holder
	// byMIG maps a MIG instance's key (migKey) to its holders: for a
	// process whose device is the instance itself, which package gpu does
	// not report today (it lists MIG processes under the physical GPU).
	byMIG map[string][]holder

	pods, containers int // in the listing
	devices          int // distinct GPU and MIG device IDs mapped to a GPU
	unmapped         int // device IDs that looked like GPUs but could not be mapped (MIG without GPUOf)
}

// gpuKey is the part of a GPU UUID that the index is keyed by: the text
// after "GPU-", lower case. NVML prints UUIDs in lower case, so for its
// UUIDs this allocates nothing.
func gpuKey(uuid string) (string, bool) {
	if len(uuid) <= 4 || !strings.EqualFold(uuid[:4], "GPU-") {
		return "", false
	}
	return strings.ToLower(uuid[4:]), true
}

// migKey is gpuKey for MIG instance UUIDs ("MIG-<uuid>").
func migKey(uuid string) (string, bool) {
	if len(uuid) <= 4 || !strings.EqualFold(uuid[:4], "MIG-") {
		return "", false
	}
	return strings.ToLower(uuid[4:]), true
}

// deviceKind classifies a device ID handed out by a device plugin.
type deviceKind int

const (
	deviceOther deviceKind = iota // not recognisably a GPU ("0", a PCI address, another vendor's ID)
	deviceGPU                     // a whole GPU: GPU-<uuid>
	deviceMIG                     // a MIG instance: MIG-<uuid>; its GPU is not in the ID
)

// parseDeviceID reads a device ID as the NVIDIA device plugin writes it:
//
//	GPU-<uuid>                    a whole GPU
//	GPU-<uuid>::<n>               replica n of a shared GPU (time-slicing, MPS)
//	MIG-<uuid>                    a MIG instance (drivers from R470 on)
//	MIG-GPU-<uuid>/<gi>/<ci>      a MIG instance, older form naming its GPU
//
// base is the ID without a replica suffix. For deviceGPU and for the older
// MIG form, gpu is the GPU's key (gpuKey); for the newer MIG form it is
// empty.
func parseDeviceID(id string) (kind deviceKind, base, gpu string) {
	base = id
	if i := strings.Index(id, "::"); i >= 0 {
		base = id[:i]
	}
	switch {
	case len(base) > 8 && strings.EqualFold(base[:8], "MIG-GPU-"):
		rest := base[4:]
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[:i]
		}
		if k, ok := gpuKey(rest); ok && validUUID(k) {
			return deviceMIG, base, k
		}
	case len(base) > 4 && strings.EqualFold(base[:4], "MIG-"):
		if validUUID(strings.ToLower(base[4:])) {
			return deviceMIG, base, ""
		}
	default:
		if k, ok := gpuKey(base); ok && validUUID(k) {
			return deviceGPU, base, k
		}
	}
	return deviceOther, base, ""
}

// validUUID reports whether s (lower case) is hexadecimal digits in groups
// separated by single dashes: the shape of NVML's UUIDs, without insisting
// on the 8-4-4-4-12 grouping.
func validUUID(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	hex := 0
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9', 'a' <= c && c <= 'f':
			hex++
		case c == '-' && s[i-1] != '-':
		default:
			return false
		}
	}
	return hex >= 8
}

// buildIndex turns a listing into an index. gpuOf, when not nil, maps the
// device IDs that do not name their GPU (newer MIG IDs, or IDs under the
// device plugin's index strategy) to a GPU UUID.
func buildIndex(pods []pod, gpuOf func(resource, id string) (string, bool)) *index {
	ix := &index{byGPU: make(map[string][]holder), byMIG: make(map[string][]holder)}
	seenDev := make(map[string]bool)
	ix.pods = len(pods)
	for _, p := range pods {
		ix.containers += len(p.Containers)
		for _, c := range p.Containers {
			h := holder{Namespace: p.Namespace, Pod: p.Name, Container: c.Name}
			for _, d := range c.Devices {
				for _, id := range d.IDs {
					kind, base, key := parseDeviceID(id)
					if kind == deviceMIG && key == "" {
						mk, _ := migKey(base)
						ix.byMIG[mk] = append(ix.byMIG[mk], h)
					}
					if key == "" && gpuOf != nil {
						if u, ok := gpuOf(d.Resource, base); ok {
							key, _ = gpuKey(u)
						}
					}
					if key == "" {
						if kind != deviceOther {
							ix.unmapped++
						}
						continue
					}
					if !seenDev[base] {
						seenDev[base] = true
						ix.devices++
					}
					ix.byGPU[key] = append(ix.byGPU[key], h)
				}
			}
		}
	}
	for _, m := range []map[string][]holder{ix.byGPU, ix.byMIG} {
		for k, hs := range m {
			slices.SortFunc(hs, holder.compare)
			m[k] = slices.Compact(hs)
		}
	}
	return ix
}
