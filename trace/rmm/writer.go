package rmm

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"sync"
	"time"
)

// Writer writes an RMM log. It is safe for concurrent use; records are
// written in the order Write is called. Call Flush when done.
type Writer struct {
	mu     sync.Mutex
	w      *bufio.Writer
	header bool   // the header has been written
	buf    []byte // line being formatted
}

// NewWriter returns a Writer that writes the log to w.
func NewWriter(w io.Writer) *Writer {
	return &Writer{w: bufio.NewWriterSize(w, 64<<10)}
}

// Write writes one record, after the header if it is the first.
func (w *Writer) Write(r Record) error {
	if r.Time < 0 {
		return fmt.Errorf("rmm: write: negative time %v", r.Time)
	}
	if r.Action > Free {
		return fmt.Errorf("rmm: write: unknown action %d", uint8(r.Action))
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.writeHeaderLocked(); err != nil {
		return err
	}
	b := w.buf[:0]
	b = strconv.AppendUint(b, r.Thread, 10)
	b = append(b, ',')
	b = appendTime(b, r.Time)
	b = append(b, ',')
	b = append(b, r.Action.String()...)
	b = append(b, ',')
	if r.Pointer == 0 && r.Action == AllocateFailure {
		b = append(b, "(nil)"...)
	} else {
		b = append(b, "0x"...)
		b = strconv.AppendUint(b, r.Pointer, 16)
	}
	b = append(b, ',')
	b = strconv.AppendUint(b, r.Size, 10)
	b = append(b, ',')
	b = strconv.AppendUint(b, r.Stream, 10)
	b = append(b, '\n')
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		return fmt.Errorf("rmm: write: %w", err)
	}
	return nil
}

func (w *Writer) writeHeaderLocked() error {
	if w.header {
		return nil
	}
	if _, err := w.w.WriteString(header + "\n"); err != nil {
		return fmt.Errorf("rmm: write header: %w", err)
	}
	w.header = true
	return nil
}

// Flush writes buffered data to the underlying writer. A log with no record
// still gets its header.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err := w.writeHeaderLocked(); err != nil {
		return err
	}
	if err := w.w.Flush(); err != nil {
		return fmt.Errorf("rmm: flush: %w", err)
	}
	return nil
}

// appendTime formats d as H:MM:SS.ffffff, with at least two digits of
// hours and as many as needed past 99. Sub-microsecond times get nine
// digits of fraction so that nothing is lost.
func appendTime(b []byte, d time.Duration) []byte {
	ns := uint64(d)
	h := ns / uint64(time.Hour)
	m := ns / uint64(time.Minute) % 60
	s := ns / uint64(time.Second) % 60
	frac := ns % uint64(time.Second)
	b = appendPadded(b, h, 2)
	b = append(b, ':')
	b = appendPadded(b, m, 2)
	b = append(b, ':')
	b = appendPadded(b, s, 2)
	b = append(b, '.')
	if frac%1000 == 0 {
		return appendPadded(b, frac/1000, 6)
	}
	return appendPadded(b, frac, 9)
}

func appendPadded(b []byte, v uint64, width int) []byte {
	var tmp [20]byte
	d := strconv.AppendUint(tmp[:0], v, 10)
	for i := len(d); i < width; i++ {
		b = append(b, '0')
	}
	return append(b, d...)
}
