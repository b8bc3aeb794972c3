package gpu

import (
	"fmt"
	"strconv"
	"strings"
)

// Visible is the set of devices a user asked to see through
// CUDA_VISIBLE_DEVICES or NVIDIA_VISIBLE_DEVICES.
type Visible struct {
	// All is true when no variable restricts the devices (or one says all).
	All bool
	// Indices are the NVML indices to show, in the order the variable lists
	// them, when All is false. Empty means none.
	Indices []int
	// Source names the variable that decided, e.g. "CUDA_VISIBLE_DEVICES=0,2".
	Source string
	// Warnings are entries that could not be mapped.
	Warnings []string
}

// Contains reports whether the device with NVML index i is visible.
func (v Visible) Contains(i int) bool {
	if v.All {
		return true
	}
	for _, j := range v.Indices {
		if i == j {
			return true
		}
	}
	return false
}

// ParseVisible resolves the visible-devices variables against the host's
// devices (in NVML index order). getenv returns a variable's value and
// whether it is set. When both variables are set, CUDA_VISIBLE_DEVICES
// selects among the devices NVIDIA_VISIBLE_DEVICES leaves (inside a
// container NVML sees only the latter already, so this matters only on a
// host where both are set by hand).
//
// Each variable is a comma-separated list of NVML indices, full UUIDs, or
// unique UUID prefixes (GPU- optional), or one of all, none, void or the
// empty string. Like CUDA, the list ends at the first entry that names no
// device; that entry and the rest are reported in Warnings. MIG-... entries
// name a MIG instance, which this tool does not map to a GPU: they are
// skipped with a warning.
func ParseVisible(getenv func(string) (string, bool), devices []Identity) Visible {
	v := Visible{All: true}
	for _, name := range []string{"NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"} {
		val, ok := getenv(name)
		if !ok {
			continue
		}
		sel, warns := parseVisibleList(name, val, devices)
		v.Warnings = append(v.Warnings, warns...)
		if sel == nil { // all
			continue
		}
		if !v.All { // intersect with the earlier selection, keep this order
			var both []int
			for _, i := range sel {
				if v.Contains(i) {
					both = append(both, i)
				}
			}
			sel = both
		}
		v.All, v.Indices = false, sel
		if v.Indices == nil {
			v.Indices = []int{}
		}
		if v.Source != "" {
			v.Source += " "
		}
		v.Source += name + "=" + val
	}
	return v
}

// parseVisibleList returns nil for "all devices", or the selected indices
// (possibly empty).
func parseVisibleList(name, val string, devices []Identity) ([]int, []string) {
	val = strings.TrimSpace(val)
	switch strings.ToLower(val) {
	case "all":
		return nil, nil
	case "", "none", "void", "-1":
		return []int{}, nil
	}
	var (
		sel   = []int{}
		warns []string
		seen  = map[int]bool{}
	)
	entries := strings.Split(val, ",")
	for k, e := range entries {
		e = strings.TrimSpace(e)
		idx, err := resolveVisibleEntry(e, devices)
		if err != nil {
			if strings.HasPrefix(strings.ToUpper(e), "MIG-") {
				warns = append(warns, fmt.Sprintf("%s: %q is a MIG instance, which vram cannot map to a GPU; skipped", name, e))
				continue
			}
			rest := ""
			if k+1 < len(entries) {
				rest = fmt.Sprintf(" and the %d entries after it are", len(entries)-k-1)
			} else {
				rest = " is"
			}
			warns = append(warns, fmt.Sprintf("%s: %v; like CUDA, the list stops there (%q%s ignored)", name, err, e, rest))
			break
		}
		if seen[idx] {
			warns = append(warns, fmt.Sprintf("%s: device %d listed twice", name, idx))
			continue
		}
		seen[idx] = true
		sel = append(sel, idx)
	}
	return sel, warns
}

func resolveVisibleEntry(e string, devices []Identity) (int, error) {
	if e == "" {
		return 0, fmt.Errorf("empty entry")
	}
	if n, err := strconv.Atoi(e); err == nil {
		for _, d := range devices {
			if d.Index == n {
				return n, nil
			}
		}
		return 0, fmt.Errorf("no device with index %d (this host has %d)", n, len(devices))
	}
	want := strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(e, "GPU-"), "gpu-"))
	if strings.HasPrefix(strings.ToUpper(e), "MIG-") {
		return 0, fmt.Errorf("%q is a MIG instance", e)
	}
	match := -1
	for _, d := range devices {
		u := strings.ToLower(strings.TrimPrefix(d.UUID, "GPU-"))
		if strings.HasPrefix(u, want) {
			if match >= 0 {
				return 0, fmt.Errorf("UUID prefix %q matches more than one device", e)
			}
			match = d.Index
		}
	}
	if match < 0 {
		return 0, fmt.Errorf("no device with UUID %q", e)
	}
	return match, nil
}
