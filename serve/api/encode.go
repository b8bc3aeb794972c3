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
	if out, ok := appendState(b, s, nil); ok {
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

// appendStateCached is appendStateJSON for an event stream, with its
// cache (statecache.go); b must not hold the stream's last state.
func appendStateCached(b []byte, s State, c *stateCache) ([]byte, error) {
	c.begin(b)
	out, ok := appendState(b, s, c)
	if ok {
		c.end(out, len(s.Processes))
		return out, nil
	}
	c.reset()
	data, err := json.Marshal(toWire(s))
	if err != nil {
		return b, err
	}
	return append(b, data...), nil
}

// appendState appends toWire(s) as encoding/json writes it, with the
// stream cache c when not nil; ok is false when s holds a value it leaves
// to encoding/json.
func appendState(b []byte, s State, c *stateCache) ([]byte, bool) {
	e := encoder{b: b, ok: true, cache: c}
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
	// cache, when set, is an event stream's: the processes are written
	// from what it kept of the last state where nothing changed.
	cache *stateCache
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
	e.kvInt(`{"gpu_index":`, int64(d.Index))
	e.kvStr(`,"gpu_uuid":`, d.UUID)
	e.kvStr(`,"name":`, d.Name)
	e.kvBool(`,"healthy":`, d.Healthy)
	e.kvOmit(`,"error":`, d.Error)
	e.kvUint(`,"total_bytes":`, d.TotalBytes)
	e.kvUint(`,"used_bytes":`, d.UsedBytes)
	e.kvUint(`,"free_bytes":`, d.FreeBytes)
	e.kvUint(`,"reserved_bytes":`, d.ReservedBytes)
	e.kvBool(`,"reserved_known":`, d.ReservedKnown)
	e.kvUint(`,"unattributed_bytes":`, d.UnattributedBytes)
	e.kvInt(`,"util_percent":`, int64(d.UtilPercent))
	e.raw(`,"recent":`)
	e.uints(d.Recent)
	e.kvFloat(`,"recent_step_seconds":`, d.RecentStep)
	e.raw("}")
}

func (e *encoder) alert(a *Alert) {
	e.raw(`{"time":`)
	e.time(a.Time)
	e.kvStr(`,"rule":`, a.Rule)
	e.kvStr(`,"severity":`, a.Severity)
	e.kvStr(`,"state":`, a.State)
	e.kvOmit(`,"gpu_uuid":`, a.GPU)
	if a.PID != 0 {
		e.kvUint(`,"pid":`, uint64(a.PID))
	}
	if !a.StartTime.IsZero() {
		e.raw(`,"start_time":`)
		e.time(a.StartTime)
	}
	e.kvStr(`,"message":`, a.Message)
	e.raw("}")
}

// processes is a []wireProcess, never null: wireProcesses makes one for
// a nil list too.
func (e *encoder) processes(ps []Process) {
	if ps == nil {
		ps = []Process{}
	}
	if e.cache != nil {
		list(e, ps, e.cachedProcess)
		return
	}
	list(e, ps, e.process)
}

// process is a wireProcess: Process's fields in order, start_time last
// (the wire type's own field comes after the embedded ones). It is
// written in five pieces, which an event stream's cache (stream.go) keeps
// apart: the identity, the memory, the flags and verdict, the sparkline,
// and the rest.
func (e *encoder) process(p *Process) {
	e.procHead(p)
	e.kvUint(`,"used_bytes":`, p.UsedBytes)
	e.procMid(p)
	e.raw(`,"recent":`)
	e.uints(p.Recent)
	e.procTail(p)
}

// procHead is a process from its opening brace to its command.
func (e *encoder) procHead(p *Process) {
	e.kvStr(`{"gpu_uuid":`, p.GPU)
	e.kvInt(`,"gpu_index":`, int64(p.GPUIndex))
	e.kvUint(`,"pid":`, uint64(p.PID))
	e.kvBool(`,"signalable":`, p.Signalable)
	e.kvOmit(`,"not_signalable_reason":`, p.NotSignalableReason)
	e.kvStr(`,"user":`, p.User)
	e.kvStr(`,"command":`, p.Command)
}

// procMid is a process from memory_known to its leak verdict.
func (e *encoder) procMid(p *Process) {
	e.kvBool(`,"memory_known":`, p.MemoryKnown)
	e.raw(`,"flags":`)
	e.strs(p.Flags)
	e.kvOmit(`,"container":`, p.Container)
	e.kvOmit(`,"pod":`, p.Pod)
	e.kvOmit(`,"namespace":`, p.Namespace)
	e.kvOmit(`,"container_name":`, p.ContainerName)
	if l := p.Leak; l != nil {
		e.kvStr(`,"leak":{"verdict":`, l.Verdict)
		e.kvFloat(`,"slope_bytes_per_second":`, l.Slope)
		e.kvFloat(`,"confidence":`, l.Confidence)
		e.kvStr(`,"reason":`, l.Reason)
		e.raw("}")
	}
}

// procTail is a process from recent_step_seconds to its closing brace.
func (e *encoder) procTail(p *Process) {
	e.kvFloat(`,"recent_step_seconds":`, p.RecentStep)
	e.allocatorFields(&p.AllocatorFields)
	e.raw(`,"start_time":`)
	e.timeOrNull(p.StartTime)
	e.raw("}")
}

// Writers of one key and its value. The key is written as it stands in
// the object, with the comma before it and the colon after (`,"pid":`),
// so that an object is a run of calls, one per field.
func (e *encoder) kvStr(key, v string)           { e.raw(key); e.str(v) }
func (e *encoder) kvInt(key string, v int64)     { e.raw(key); e.int(v) }
func (e *encoder) kvUint(key string, v uint64)   { e.raw(key); e.uint(v) }
func (e *encoder) kvBool(key string, v bool)     { e.raw(key); e.bool(v) }
func (e *encoder) kvFloat(key string, v float64) { e.raw(key); e.float(v) }

// kvOmit is kvStr for a field with omitempty: nothing when v is "".
func (e *encoder) kvOmit(key, v string) {
	if v != "" {
		e.kvStr(key, v)
	}
}

// intKV is an integer field, for objects whose integers are written from
// a table (kvInts).
type intKV struct {
	key string
	v   int64
}

func (e *encoder) kvInts(fields []intKV) {
	for _, f := range fields {
		e.kvInt(f.key, f.v)
	}
}

// str is encoding/json's string, HTML-safe as json.Marshal writes it.
func (e *encoder) str(s string) { e.b = jsonstr.Append(e.b, s) }
