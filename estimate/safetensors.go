package estimate

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
)

// Tensors is what safetensors headers say about a model's weights.
type Tensors struct {
	Count  int              // tensors
	Params uint64           // elements over all tensors
	Bytes  uint64           // their bytes as stored
	DTypes map[string]int64 // elements per stored dtype (F32, BF16, …)
	Files  []string
}

// Dtype is the stored dtype holding most elements.
func (t Tensors) Dtype() string {
	best, n := "", int64(-1)
	for _, k := range sortedKeys(t.DTypes) {
		if t.DTypes[k] > n {
			best, n = k, t.DTypes[k]
		}
	}
	return best
}

// maxHeader bounds a safetensors header (the format's own limit is 100 MB).
const maxHeader = 100 << 20

// dtypeBits are the element sizes of the safetensors dtypes.
var dtypeBits = map[string]uint64{
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

type tensorInfo struct {
	DType       string   `json:"dtype"`
	Shape       []uint64 `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

// ParseSafetensorsHeader reads the header of a safetensors file: an 8-byte
// little-endian length N, then N bytes of JSON mapping each tensor's name
// to its dtype, shape and data offsets (and an optional "__metadata__" of
// strings). size is the file's size, used to check the offsets (0: not
// checked). Every inconsistency is an error that says what is wrong.
func ParseSafetensorsHeader(r io.Reader, size int64) (Tensors, error) {
	var lenb [8]byte
	if _, err := io.ReadFull(r, lenb[:]); err != nil {
		return Tensors{}, fmt.Errorf("not a safetensors file: shorter than its 8-byte header length (%v)", err)
	}
	n := binary.LittleEndian.Uint64(lenb[:])
	if n < 2 || n > maxHeader {
		return Tensors{}, fmt.Errorf("not a safetensors file: header length %d (want 2 to %d bytes)", n, maxHeader)
	}
	if size > 0 && n > uint64(size)-8 {
		return Tensors{}, fmt.Errorf("header length %d runs past the end of the %d-byte file", n, size)
	}
	hb := make([]byte, n)
	if _, err := io.ReadFull(r, hb); err != nil {
		return Tensors{}, fmt.Errorf("header of %d bytes is cut short: %v", n, err)
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(hb, &raw); err != nil {
		return Tensors{}, fmt.Errorf("header is not a JSON object: %v", err)
	}
	t := Tensors{DTypes: map[string]int64{}}
	type span struct{ a, b uint64 }
	var spans []span
	for _, name := range sortedKeys(raw) {
		if name == "__metadata__" {
			var m map[string]string
			if err := json.Unmarshal(raw[name], &m); err != nil {
				return Tensors{}, fmt.Errorf(`header's "__metadata__": want an object of strings`)
			}
			continue
		}
		var ti tensorInfo
		if err := json.Unmarshal(raw[name], &ti); err != nil {
			return Tensors{}, fmt.Errorf("tensor %q: %v", name, err)
		}
		bits, ok := dtypeBits[ti.DType]
		if !ok {
			return Tensors{}, fmt.Errorf("tensor %q: unknown dtype %q", name, ti.DType)
		}
		elems := uint64(1)
		for _, d := range ti.Shape {
			if d != 0 && elems > math.MaxUint64/d/64 {
				return Tensors{}, fmt.Errorf("tensor %q: shape %v is too large", name, ti.Shape)
			}
			elems *= d
		}
		if len(ti.DataOffsets) != 2 || ti.DataOffsets[1] < ti.DataOffsets[0] {
			return Tensors{}, fmt.Errorf("tensor %q: data_offsets %v: want [begin, end] with begin ≤ end", name, ti.DataOffsets)
		}
		want := (elems*bits + 7) / 8
		if got := ti.DataOffsets[1] - ti.DataOffsets[0]; got != want {
			return Tensors{}, fmt.Errorf("tensor %q: %d bytes of data for %d elements of %s (want %d)", name, got, elems, ti.DType, want)
		}
		if size > 0 && ti.DataOffsets[1] > uint64(size)-8-n {
			return Tensors{}, fmt.Errorf("tensor %q: its data ends at %d, past the file's %d bytes of data", name, ti.DataOffsets[1], uint64(size)-8-n)
		}
		if t.Params+elems < t.Params {
			return Tensors{}, errors.New("the tensors' sizes overflow")
		}
		t.Count++
		t.Params += elems
		t.Bytes += want
		t.DTypes[ti.DType] += int64(min(elems, math.MaxInt64))
		if want > 0 {
			spans = append(spans, span{ti.DataOffsets[0], ti.DataOffsets[1]})
		}
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].a < spans[j].a })
	for i := 1; i < len(spans); i++ {
		if spans[i].a < spans[i-1].b {
			return Tensors{}, fmt.Errorf("two tensors' data overlap (bytes %d–%d and %d–%d)", spans[i-1].a, spans[i-1].b, spans[i].a, spans[i].b)
		}
	}
	return t, nil
}

// LoadSafetensors reads the headers of every *.safetensors file in dir (a
// sharded checkpoint has several). It returns a zero Tensors, without
// error, when there is none.
func LoadSafetensors(dir string) (Tensors, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.safetensors"))
	if err != nil || len(files) == 0 {
		return Tensors{}, nil
	}
	sort.Strings(files)
	all := Tensors{DTypes: map[string]int64{}}
	for _, f := range files {
		t, err := readSafetensors(f)
		if err != nil {
			return Tensors{}, fmt.Errorf("%s: %w", f, err)
		}
		all.Count += t.Count
		all.Params += t.Params
		all.Bytes += t.Bytes
		for k, v := range t.DTypes {
			all.DTypes[k] += v
		}
		all.Files = append(all.Files, f)
	}
	return all, nil
}

func readSafetensors(path string) (Tensors, error) {
	f, err := os.Open(path)
	if err != nil {
		return Tensors{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return Tensors{}, err
	}
	return ParseSafetensorsHeader(f, st.Size())
}
