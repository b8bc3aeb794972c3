package api

// A State written by hand: the bytes encoding/json writes for toWire(s),
// at a fraction of the cost. At 1,600 processes a State is 2.6 MB of JSON
// (mostly the sparklines' numbers) and the live stream writes one a
// second, so its encoding was a large part of the daemon's work; reflection
// spent most of it. TestAppendStateMatchesEncodingJSON holds the two
// together, FuzzAppendState too.

import (
	"encoding/json"
	"math"
	"strconv"
	"time"

	"github.com/vramhq/vram/internal/jsonstr"
)

// marshalState is json.Marshal(toWire(s)): the fast encoder where every
// value is one it writes exactly as encoding/json does, encoding/json
// itself otherwise (a time outside years 0-9999 or with an offset of a
// day or more, a float that is not finite), so that errors stay its errors.
func marshalState(s State) ([]byte, error) {
	return appendStateJSON(make([]byte, 0, stateSizeHint(s)), s)
}

// appendStateJSON is marshalState appending to b, so that a caller can
// reuse its buffer; on an error b is returned as it was.
func appendStateJSON(b []byte, s State) ([]byte, error) {
	if out, ok := appendState(b, s); ok {
		return out, nil
	}
	data, err := json.Marshal(toWire(s))
	if err != nil {
		return b, err
	}
	return append(b, data...), nil
}

// marshalProcesses is the processes route's document, as marshalState.
func marshalProcesses(t time.Time, ps []Process) ([]byte, error) {
	e := encoder{b: make([]byte, 0, 64+len(ps)*processSizeHint(ps)), ok: true}
	e.raw(`{"schema":`)
	e.str(Schema)
	e.raw(`,"time":`)
	e.time(t)
	e.raw(`,"processes":`)
	e.processes(ps)
	e.raw("}")
	if e.ok {
		return e.b, nil
	}
	return json.Marshal(struct {
		Schema    string        `json:"schema"`
		Time      time.Time     `json:"time"`
		Processes []wireProcess `json:"processes"`
	}{Schema, t, wireProcesses(ps)})
}

func stateSizeHint(s State) int {
	n := 1024
	for _, d := range s.Devices {
		n += 400 + 12*len(d.Recent)
	}
	return n + len(s.Processes)*processSizeHint(s.Processes)
}

func processSizeHint(ps []Process) int {
	if len(ps) == 0 {
		return 0
	}
	return 500 + 12*len(ps[0].Recent)
}

// appendState appends toWire(s) as encoding/json writes it; ok is false
// when s holds a value it leaves to encoding/json.
func appendState(b []byte, s State) ([]byte, bool) {
	e := encoder{b: b, ok: true}
	e.raw(`{"schema":`)
	e.str(s.Schema)
	e.raw(`,"time":`)
	e.time(s.Time)
	e.raw(`,"hostname":`)
	e.str(s.Hostname)
	e.raw(`,"simulated":`)
	e.bool(s.Simulated)
	e.raw(`,"mutations":`)
	e.bool(s.Mutations)
	e.raw(`,"devices":`)
	list(&e, s.Devices, e.device)
	e.raw(`,"alerts":`)
	list(&e, s.Alerts, e.alert)
	if len(s.Warnings) > 0 {
		e.raw(`,"warnings":`)
		e.strs(s.Warnings)
	}
	// The wire form's processes come after State's other fields.
	e.raw(`,"processes":`)
	e.processes(s.Processes)
	e.raw("}")
	return e.b, e.ok
}

// encoder appends JSON; ok turns false at a value it does not write as
// encoding/json would, and the caller then uses encoding/json.
type encoder struct {
	b  []byte
	ok bool
}

func (e *encoder) raw(s string) { e.b = append(e.b, s...) }

func (e *encoder) bool(v bool) { e.b = strconv.AppendBool(e.b, v) }

func (e *encoder) uint(v uint64) { e.b = strconv.AppendUint(e.b, v, 10) }

func (e *encoder) int(v int64) { e.b = strconv.AppendInt(e.b, v, 10) }

// float is encoding/json's float64: like %g, with ES6's exponent cutoffs
// and no padded exponent.
func (e *encoder) float(f float64) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		e.ok = false
		return
	}
	format := byte('f')
	if abs := math.Abs(f); abs != 0 && (abs < 1e-6 || abs >= 1e21) {
		format = 'e'
	}
	e.b = strconv.AppendFloat(e.b, f, format, -1, 64)
	if format == 'e' {
		n := len(e.b)
		if n >= 4 && e.b[n-4] == 'e' && e.b[n-3] == '-' && e.b[n-2] == '0' {
			e.b[n-2] = e.b[n-1]
			e.b = e.b[:n-1]
		}
	}
}

// time is time.Time's MarshalJSON: RFC 3339 with nanoseconds, for the
// times it accepts.
func (e *encoder) time(t time.Time) {
	if y := t.Year(); y < 0 || y > 9999 {
		e.ok = false
		return
	}
	if _, off := t.Zone(); off <= -24*3600 || off >= 24*3600 {
		e.ok = false
		return
	}
	e.b = append(e.b, '"')
	e.b = t.AppendFormat(e.b, time.RFC3339Nano)
	e.b = append(e.b, '"')
}

// timeOrNull is a *time.Time field: null for the zero time.
func (e *encoder) timeOrNull(t time.Time) {
	if t.IsZero() {
		e.raw("null")
		return
	}
	e.time(t)
}

// uints writes vs as list does. These are the sparklines, most of a
// State's bytes, and a series often repeats its value (memory that does
// not move): a repeated value copies the digits just written instead of
// formatting them again.
func (e *encoder) uints(vs []uint64) {
	if vs == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	at := 0 // where the previous value's digits start
	for i, v := range vs {
		if i > 0 {
			e.b = append(e.b, ',')
			if v == vs[i-1] {
				n := len(e.b)
				e.b = append(e.b, e.b[at:n-1]...)
				at = n
				continue
			}
		}
		at = len(e.b)
		e.b = strconv.AppendUint(e.b, v, 10)
	}
	e.b = append(e.b, ']')
}

func (e *encoder) strs(vs []string) { list(e, vs, func(v *string) { e.str(*v) }) }

// list writes vs as a JSON array, each element with elem; a nil slice is
// null, as encoding/json writes it.
func list[T any](e *encoder, vs []T, elem func(*T)) {
	if vs == nil {
		e.raw("null")
		return
	}
	e.b = append(e.b, '[')
	for i := range vs {
		if i > 0 {
			e.b = append(e.b, ',')
		}
		elem(&vs[i])
	}
	e.b = append(e.b, ']')
}

func (e *encoder) device(d *Device) {
	e.raw(`{"gpu_index":`)
	e.int(int64(d.Index))
	e.raw(`,"gpu_uuid":`)
	e.str(d.UUID)
	e.raw(`,"name":`)
	e.str(d.Name)
	e.raw(`,"healthy":`)
	e.bool(d.Healthy)
	if d.Error != "" {
		e.raw(`,"error":`)
		e.str(d.Error)
	}
	e.raw(`,"total_bytes":`)
	e.uint(d.TotalBytes)
	e.raw(`,"used_bytes":`)
	e.uint(d.UsedBytes)
	e.raw(`,"free_bytes":`)
	e.uint(d.FreeBytes)
	e.raw(`,"reserved_bytes":`)
	e.uint(d.ReservedBytes)
	e.raw(`,"reserved_known":`)
	e.bool(d.ReservedKnown)
	e.raw(`,"unattributed_bytes":`)
	e.uint(d.UnattributedBytes)
	e.raw(`,"util_percent":`)
	e.int(int64(d.UtilPercent))
	e.raw(`,"recent":`)
	e.uints(d.Recent)
	e.raw(`,"recent_step_seconds":`)
	e.float(d.RecentStep)
	e.raw("}")
}

func (e *encoder) alert(a *Alert) {
	e.raw(`{"time":`)
	e.time(a.Time)
	e.raw(`,"rule":`)
	e.str(a.Rule)
	e.raw(`,"severity":`)
	e.str(a.Severity)
	e.raw(`,"state":`)
	e.str(a.State)
	if a.GPU != "" {
		e.raw(`,"gpu_uuid":`)
		e.str(a.GPU)
	}
	if a.PID != 0 {
		e.raw(`,"pid":`)
		e.uint(uint64(a.PID))
	}
	if !a.StartTime.IsZero() {
		e.raw(`,"start_time":`)
		e.time(a.StartTime)
	}
	e.raw(`,"message":`)
	e.str(a.Message)
	e.raw("}")
}

// processes is a []wireProcess, never null: wireProcesses makes one for
// a nil list too.
func (e *encoder) processes(ps []Process) {
	if ps == nil {
		ps = []Process{}
	}
	list(e, ps, e.process)
}

// process is a wireProcess: Process's fields in order, start_time last
// (the wire type's own field comes after the embedded ones).
func (e *encoder) process(p *Process) {
	e.raw(`{"gpu_uuid":`)
	e.str(p.GPU)
	e.raw(`,"gpu_index":`)
	e.int(int64(p.GPUIndex))
	e.raw(`,"pid":`)
	e.uint(uint64(p.PID))
	e.raw(`,"signalable":`)
	e.bool(p.Signalable)
	if p.NotSignalableReason != "" {
		e.raw(`,"not_signalable_reason":`)
		e.str(p.NotSignalableReason)
	}
	e.raw(`,"user":`)
	e.str(p.User)
	e.raw(`,"command":`)
	e.str(p.Command)
	e.raw(`,"used_bytes":`)
	e.uint(p.UsedBytes)
	e.raw(`,"memory_known":`)
	e.bool(p.MemoryKnown)
	e.raw(`,"flags":`)
	e.strs(p.Flags)
	if p.Container != "" {
		e.raw(`,"container":`)
		e.str(p.Container)
	}
	if p.Pod != "" {
		e.raw(`,"pod":`)
		e.str(p.Pod)
	}
	if p.Namespace != "" {
		e.raw(`,"namespace":`)
		e.str(p.Namespace)
	}
	if p.ContainerName != "" {
		e.raw(`,"container_name":`)
		e.str(p.ContainerName)
	}
	if l := p.Leak; l != nil {
		e.raw(`,"leak":{"verdict":`)
		e.str(l.Verdict)
		e.raw(`,"slope_bytes_per_second":`)
		e.float(l.Slope)
		e.raw(`,"confidence":`)
		e.float(l.Confidence)
		e.raw(`,"reason":`)
		e.str(l.Reason)
		e.raw("}")
	}
	e.raw(`,"recent":`)
	e.uints(p.Recent)
	e.raw(`,"recent_step_seconds":`)
	e.float(p.RecentStep)
	e.allocatorFields(&p.AllocatorFields)
	e.raw(`,"start_time":`)
	e.timeOrNull(p.StartTime)
	e.raw("}")
}

// str is encoding/json's string, HTML-safe as json.Marshal writes it.
func (e *encoder) str(s string) { e.b = jsonstr.Append(e.b, s) }
