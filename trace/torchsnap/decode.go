package torchsnap

import (
	"fmt"
	"math"
	"math/big"

	"github.com/nlpodyssey/gopickle/types"
)

// obj is an unpickled dict with string keys, and the path that names it in
// error messages.
type obj struct {
	path string
	m    map[string]any
}

func asObj(path string, v any) (obj, error) {
	var entries types.Dict
	switch d := v.(type) {
	case *types.Dict:
		entries = *d
	case *types.OrderedDict:
		o := obj{path: path, m: make(map[string]any, d.Len())}
		for k, e := range d.Map {
			if ks, ok := k.(string); ok {
				o.m[ks] = e.Value
			}
		}
		return o, nil
	default:
		return obj{}, fmt.Errorf("%s: want a dict, got %s", path, typeName(v))
	}
	o := obj{path: path, m: make(map[string]any, len(entries))}
	for _, e := range entries {
		if k, ok := e.Key.(string); ok {
			o.m[k] = e.Value
		}
	}
	return o, nil
}

func asList(path string, v any) ([]any, error) {
	switch l := v.(type) {
	case *types.List:
		return *l, nil
	case *types.Tuple:
		return *l, nil
	}
	return nil, fmt.Errorf("%s: want a list, got %s", path, typeName(v))
}

func (o obj) sub(key string) string { return o.path + "." + key }

func (o obj) has(key string) bool { _, ok := o.m[key]; return ok }

func (o obj) get(key string, required bool) (any, bool, error) {
	v, ok := o.m[key]
	if !ok && required {
		return nil, false, fmt.Errorf("%s: missing key %q", o.path, key)
	}
	return v, ok, nil
}

// uint returns an integer key as a uint64; absent optional keys give 0.
func (o obj) uint(key string, required bool) (uint64, error) {
	v, ok, err := o.get(key, required)
	if err != nil || !ok {
		return 0, err
	}
	return toUint(o.sub(key), v)
}

func (o obj) int(key string, required bool) (int64, error) {
	v, ok, err := o.get(key, required)
	if err != nil || !ok {
		return 0, err
	}
	return toInt(o.sub(key), v)
}

func (o obj) str(key string, required bool) (string, error) {
	v, ok, err := o.get(key, required)
	if err != nil || !ok {
		return "", err
	}
	s, isStr := v.(string)
	if !isStr {
		return "", fmt.Errorf("%s: want a string, got %s", o.sub(key), typeName(v))
	}
	return s, nil
}

func (o obj) bool(key string) (bool, error) {
	v, ok := o.m[key]
	if !ok {
		return false, nil
	}
	switch b := v.(type) {
	case bool:
		return b, nil
	case int: // protocol 0 and 1 pickle booleans as ints
		return b != 0, nil
	}
	return false, fmt.Errorf("%s: want a bool, got %s", o.sub(key), typeName(v))
}

func (o obj) float(key string) (float64, error) {
	v, ok := o.m[key]
	if !ok {
		return 0, nil
	}
	switch f := v.(type) {
	case float64:
		return f, nil
	case int:
		return float64(f), nil
	}
	return 0, fmt.Errorf("%s: want a number, got %s", o.sub(key), typeName(v))
}

func toInt(path string, v any) (int64, error) {
	switch n := v.(type) {
	case int:
		return int64(n), nil
	case bool:
		if n {
			return 1, nil
		}
		return 0, nil
	case *big.Int:
		if n.IsInt64() {
			return n.Int64(), nil
		}
		return 0, fmt.Errorf("%s: integer %s does not fit in 64 bits", path, n)
	}
	return 0, fmt.Errorf("%s: want an integer, got %s", path, typeName(v))
}

func toUint(path string, v any) (uint64, error) {
	if b, ok := v.(*big.Int); ok {
		if b.IsUint64() {
			return b.Uint64(), nil
		}
		return 0, fmt.Errorf("%s: integer %s is not a 64-bit unsigned value", path, b)
	}
	n, err := toInt(path, v)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, fmt.Errorf("%s: negative value %d", path, n)
	}
	return uint64(n), nil
}

// maxSplitSize reads allocator_settings.max_split_size. "No limit" (the
// default) is pickled as -1 by PyTorch 2.11 (the snapshots in testdata/real)
// and as SIZE_MAX by versions that pass the raw size_t; both become
// NoMaxSplitSize. Any other negative value is an error.
func maxSplitSize(o obj) (uint64, error) {
	v, ok, err := o.get("max_split_size", false)
	if err != nil || !ok {
		return 0, err
	}
	if n, isInt := v.(int); isInt && n == -1 {
		return NoMaxSplitSize, nil
	}
	return toUint(o.sub("max_split_size"), v)
}

func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "None"
	case string:
		return "string"
	case int, *big.Int:
		return "integer"
	case float64:
		return "float"
	case bool:
		return "bool"
	case *types.List:
		return "list"
	case *types.Tuple:
		return "tuple"
	case *types.Dict, *types.OrderedDict:
		return "dict"
	case []byte:
		return "bytes"
	}
	return fmt.Sprintf("%T", v)
}

// fromValue maps an unpickled value onto a Snapshot.
func fromValue(v any) (*Snapshot, error) {
	s := &Snapshot{}
	if l, err := asList("snapshot", v); err == nil { // the bare segment list
		s.Segments, err = segments("segments", l)
		return s, err
	}
	top, err := asObj("snapshot", v)
	if err != nil {
		return nil, err
	}
	top.path = ""
	segv, _, err := top.get("segments", true)
	if err != nil {
		return nil, fmt.Errorf("snapshot: missing key %q", "segments")
	}
	segl, err := asList("segments", segv)
	if err != nil {
		return nil, err
	}
	if s.Segments, err = segments("segments", segl); err != nil {
		return nil, err
	}
	if tv, ok := top.m["device_traces"]; ok {
		devs, err := asList("device_traces", tv)
		if err != nil {
			return nil, err
		}
		for d, dv := range devs {
			path := fmt.Sprintf("device_traces[%d]", d)
			el, err := asList(path, dv)
			if err != nil {
				return nil, err
			}
			entries := make([]TraceEntry, 0, len(el))
			for i, ev := range el {
				e, err := traceEntry(fmt.Sprintf("%s[%d]", path, i), ev)
				if err != nil {
					return nil, err
				}
				entries = append(entries, e)
			}
			s.DeviceTraces = append(s.DeviceTraces, entries)
		}
	}
	if av, ok := top.m["allocator_settings"]; ok {
		if s.AllocatorSettings, err = settings(av); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func segments(path string, l []any) ([]Segment, error) {
	out := make([]Segment, 0, len(l))
	for i, v := range l {
		o, err := asObj(fmt.Sprintf("%s[%d]", path, i), v)
		if err != nil {
			return nil, err
		}
		var sg Segment
		var dev int64
		if dev, err = o.int("device", false); err != nil {
			return nil, err
		}
		sg.Device = int(dev)
		for _, f := range []struct {
			key      string
			dst      *uint64
			required bool
		}{
			{"address", &sg.Address, true},
			{"total_size", &sg.TotalSize, true},
			{"allocated_size", &sg.AllocatedSize, false},
			{"active_size", &sg.ActiveSize, false},
			{"requested_size", &sg.RequestedSize, false},
			{"stream", &sg.Stream, false},
		} {
			if *f.dst, err = o.uint(f.key, f.required); err != nil {
				return nil, err
			}
		}
		if sg.SegmentType, err = o.str("segment_type", false); err != nil {
			return nil, err
		}
		if sg.IsExpandable, err = o.bool("is_expandable"); err != nil {
			return nil, err
		}
		if sg.Frames, err = frames(o); err != nil {
			return nil, err
		}
		bv, _, err := o.get("blocks", true)
		if err != nil {
			return nil, err
		}
		bl, err := asList(o.sub("blocks"), bv)
		if err != nil {
			return nil, err
		}
		next := sg.Address // blocks without an address follow each other
		for j, b := range bl {
			bo, err := asObj(fmt.Sprintf("%s[%d]", o.sub("blocks"), j), b)
			if err != nil {
				return nil, err
			}
			var blk Block
			if blk.Size, err = bo.uint("size", true); err != nil {
				return nil, err
			}
			blk.Address = next
			if bo.has("address") {
				if blk.Address, err = bo.uint("address", true); err != nil {
					return nil, err
				}
			}
			blk.RequestedSize = blk.Size
			if bo.has("requested_size") {
				if blk.RequestedSize, err = bo.uint("requested_size", true); err != nil {
					return nil, err
				}
			}
			if blk.State, err = bo.str("state", true); err != nil {
				return nil, err
			}
			if blk.Frames, err = frames(bo); err != nil {
				return nil, err
			}
			next = blk.Address + blk.Size
			sg.Blocks = append(sg.Blocks, blk)
		}
		out = append(out, sg)
	}
	return out, nil
}

func traceEntry(path string, v any) (TraceEntry, error) {
	o, err := asObj(path, v)
	if err != nil {
		return TraceEntry{}, err
	}
	var e TraceEntry
	if e.Action, err = o.str("action", true); err != nil {
		return e, err
	}
	if e.Action == ActionOOM {
		// The driver's free bytes: "device_free" in current versions, "addr" in older ones.
		key := "device_free"
		if !o.has(key) {
			key = "addr"
		}
		if e.DeviceFree, err = o.uint(key, false); err != nil {
			return e, err
		}
	} else if e.Addr, err = o.uint("addr", true); err != nil {
		return e, err
	}
	if e.Size, err = o.uint("size", true); err != nil {
		return e, err
	}
	if e.Stream, err = o.uint("stream", false); err != nil {
		return e, err
	}
	if e.TimeUS, err = o.int("time_us", false); err != nil {
		return e, err
	}
	if e.Frames, err = frames(o); err != nil {
		return e, err
	}
	return e, nil
}

func frames(o obj) ([]Frame, error) {
	v, ok := o.m["frames"]
	if !ok || v == nil {
		return nil, nil
	}
	l, err := asList(o.sub("frames"), v)
	if err != nil {
		return nil, err
	}
	out := make([]Frame, 0, len(l))
	for i, fv := range l {
		fo, err := asObj(fmt.Sprintf("%s[%d]", o.sub("frames"), i), fv)
		if err != nil {
			return nil, err
		}
		var f Frame
		if f.Filename, err = fo.str("filename", false); err != nil {
			return nil, err
		}
		if f.Name, err = fo.str("name", false); err != nil {
			return nil, err
		}
		line, err := fo.int("line", false)
		if err != nil {
			return nil, err
		}
		if line < math.MinInt32 || line > math.MaxInt32 {
			return nil, fmt.Errorf("%s: line %d out of range", fo.sub("line"), line)
		}
		f.Line = int(line)
		out = append(out, f)
	}
	return out, nil
}

func settings(v any) (AllocatorSettings, error) {
	o, err := asObj("allocator_settings", v)
	if err != nil {
		return AllocatorSettings{}, err
	}
	var a AllocatorSettings
	if a.Conf, err = o.str("PYTORCH_CUDA_ALLOC_CONF", false); err != nil {
		return a, err
	}
	if a.MaxSplitSize, err = maxSplitSize(o); err != nil {
		return a, err
	}
	if a.GarbageCollectionThreshold, err = o.float("garbage_collection_threshold"); err != nil {
		return a, err
	}
	if a.ExpandableSegments, err = o.bool("expandable_segments"); err != nil {
		return a, err
	}
	a.Raw = make(map[string]any, len(o.m))
	for k, v := range o.m {
		a.Raw[k] = plain(v, 0)
	}
	return a, nil
}

// plain turns gopickle's containers into Go maps and slices, for Raw.
func plain(v any, depth int) any {
	if depth > 32 {
		return nil
	}
	switch x := v.(type) {
	case *types.Dict:
		m := make(map[string]any, len(*x))
		for _, e := range *x {
			m[fmt.Sprint(e.Key)] = plain(e.Value, depth+1)
		}
		return m
	case *types.List:
		out := make([]any, len(*x))
		for i, e := range *x {
			out[i] = plain(e, depth+1)
		}
		return out
	case *types.Tuple:
		out := make([]any, len(*x))
		for i, e := range *x {
			out[i] = plain(e, depth+1)
		}
		return out
	case *big.Int:
		if x.IsUint64() {
			return x.Uint64()
		}
		return x.String()
	case int:
		return int64(x)
	}
	return v
}
