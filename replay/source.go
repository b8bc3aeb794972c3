package replay

import (
	"io"

	"github.com/vramhq/vram/trace/rmm"
)

// Source yields the records of a trace in order and io.EOF after the last.
// *rmm.Reader is a Source.
type Source interface {
	Next() (rmm.Record, error)
}

// Records returns a Source over records held in memory.
func Records(recs []rmm.Record) Source { return &sliceSource{recs: recs} }

type sliceSource struct {
	recs []rmm.Record
	i    int
}

func (s *sliceSource) Next() (rmm.Record, error) {
	if s.i >= len(s.recs) {
		return rmm.Record{}, io.EOF
	}
	r := s.recs[s.i]
	s.i++
	return r, nil
}

// compactRecord is a record without its thread and time: what a replay
// uses. 24 bytes with padding.
type compactRecord struct {
	ptr    uint64
	size   uint64
	stream uint32 // index into Compact.streams
	action rmm.Action
}

// Compact is a trace kept in memory for passes that replay it many times
// (MinCapacity): 24 bytes per record, the thread and time columns dropped
// and stream handles stored once. A trace of ten million records takes
// 240 MB. The zero value is an empty trace; Add appends to it.
type Compact struct {
	recs    []compactRecord
	streams []uint64
	index   map[uint64]uint32
}

// Add appends r.
func (c *Compact) Add(r rmm.Record) {
	if c.index == nil {
		c.index = make(map[uint64]uint32)
	}
	si, ok := c.index[r.Stream]
	if !ok {
		si = uint32(len(c.streams))
		c.streams = append(c.streams, r.Stream)
		c.index[r.Stream] = si
	}
	c.recs = append(c.recs, compactRecord{ptr: r.Pointer, size: r.Size, stream: si, action: r.Action})
}

// Len returns the number of records.
func (c *Compact) Len() int { return len(c.recs) }

// Source returns a new Source over the records, from the first. Records
// come back with Thread and Time zero.
func (c *Compact) Source() Source { return &compactSource{c: c} }

type compactSource struct {
	c *Compact
	i int
}

func (s *compactSource) Next() (rmm.Record, error) {
	if s.i >= len(s.c.recs) {
		return rmm.Record{}, io.EOF
	}
	r := &s.c.recs[s.i]
	s.i++
	return rmm.Record{Action: r.action, Pointer: r.ptr, Size: r.size, Stream: s.c.streams[r.stream]}, nil
}

// Tee returns a Source that reads src and appends every record it yields
// to c, so that the first pass over a file also builds its Compact copy.
func Tee(src Source, c *Compact) Source { return &teeSource{src: src, c: c} }

type teeSource struct {
	src Source
	c   *Compact
}

func (t *teeSource) Next() (rmm.Record, error) {
	r, err := t.src.Next()
	if err == nil {
		t.c.Add(r)
	}
	return r, err
}
