package rmm

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"math"
	"time"
)

// maxLine bounds the length of a line; longer lines are an error.
const maxLine = 64 << 10

// columns of the log, in the order vram writes them.
const (
	colThread = iota
	colTime
	colAction
	colPointer
	colSize
	colStream
	numCols
)

var colNames = [numCols]string{"Thread", "Time", "Action", "Pointer", "Size", "Stream"}

// ParseError reports a malformed line.
type ParseError struct {
	Line   int    // 1-based line number
	Column string // the column at fault, or "" for the whole line
	Msg    string
}

func (e *ParseError) Error() string {
	if e.Column == "" {
		return fmt.Sprintf("rmm: line %d: %s", e.Line, e.Msg)
	}
	return fmt.Sprintf("rmm: line %d: column %s: %s", e.Line, e.Column, e.Msg)
}

// Reader reads an RMM log record by record.
type Reader struct {
	src    io.Reader
	br     *bufio.Reader // nil until the input was sniffed for gzip
	line   int
	order  [numCols]int // order[col] is the field index of column col
	fields [][]byte
	ioErr  error // sticky: read or decompression error, or io.EOF
}

// NewReader returns a Reader of the log in r, plain or gzip-compressed.
func NewReader(r io.Reader) *Reader {
	return &Reader{src: r}
}

// Line returns the number of the line last read (1 is the header).
func (r *Reader) Line() int { return r.line }

// Next returns the next record, or io.EOF after the last one. A malformed
// line gives a *ParseError and Next may be called again to go on with the
// next line; an error reading the input is returned by every later call.
func (r *Reader) Next() (Record, error) {
	if r.br == nil {
		if err := r.start(); err != nil {
			r.ioErr = err
		}
	}
	for {
		if r.ioErr != nil {
			return Record{}, r.ioErr
		}
		line, err := r.readLine()
		if _, ok := err.(*ParseError); ok {
			return Record{}, err
		}
		if err != nil {
			r.ioErr = err
			if err != io.EOF {
				return Record{}, err
			}
			if line == nil {
				return Record{}, io.EOF
			}
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		return r.parse(line)
	}
}

// start sniffs the input for gzip and reads the header.
func (r *Reader) start() error {
	br := bufio.NewReaderSize(r.src, maxLine)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			r.br = br
			return fmt.Errorf("rmm: gzip: %w", err)
		}
		br = bufio.NewReaderSize(zr, maxLine)
	}
	r.br = br
	for {
		line, err := r.readLine()
		if err != nil && (err != io.EOF || line == nil) {
			if err == io.EOF {
				return &ParseError{Line: max(r.line, 1), Msg: "empty log: no header " + header}
			}
			return err
		}
		line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
		if len(bytes.TrimSpace(line)) == 0 {
			if err == io.EOF {
				return &ParseError{Line: r.line, Msg: "empty log: no header " + header}
			}
			continue
		}
		if perr := r.parseHeader(line); perr != nil {
			return perr
		}
		if err == io.EOF {
			return io.EOF
		}
		return nil
	}
}

func (r *Reader) parseHeader(line []byte) error {
	names := bytes.Split(line, []byte(","))
	if len(names) != numCols {
		return &ParseError{Line: r.line, Msg: fmt.Sprintf("header has %d columns, want the 6 of %q", len(names), header)}
	}
	var seen [numCols]bool
	for i, n := range names {
		n = unquote(bytes.TrimSpace(n))
		col := -1
		for c, want := range colNames {
			if bytes.EqualFold(n, []byte(want)) {
				col = c
			}
		}
		if col < 0 {
			return &ParseError{Line: r.line, Msg: fmt.Sprintf("unknown column %q in header, want %q", n, header)}
		}
		if seen[col] {
			return &ParseError{Line: r.line, Msg: fmt.Sprintf("column %s appears twice in the header", colNames[col])}
		}
		seen[col] = true
		r.order[col] = i
	}
	return nil
}

// readLine returns the next line without its line end. At the end of the
// input it returns the last, unterminated line (or nil) with io.EOF.
func (r *Reader) readLine() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	switch {
	case err == bufio.ErrBufferFull:
		r.line++
		// Skip the rest of the line, so that Next can go on after it.
		for err == bufio.ErrBufferFull {
			_, err = r.br.ReadSlice('\n')
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("rmm: read line %d: %w", r.line, err)
		}
		return nil, &ParseError{Line: r.line, Msg: fmt.Sprintf("line longer than %d bytes", maxLine)}
	case err == io.EOF:
		if len(line) == 0 {
			return nil, io.EOF
		}
	case err != nil:
		return nil, fmt.Errorf("rmm: read after line %d: %w", r.line, err)
	}
	r.line++
	line = bytes.TrimSuffix(line, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	return line, err
}

func (r *Reader) parse(line []byte) (Record, error) {
	r.fields = r.fields[:0]
	for {
		i := bytes.IndexByte(line, ',')
		if i < 0 {
			r.fields = append(r.fields, line)
			break
		}
		r.fields = append(r.fields, line[:i])
		line = line[i+1:]
	}
	if len(r.fields) != numCols {
		return Record{}, &ParseError{Line: r.line, Msg: fmt.Sprintf("%d columns, want 6", len(r.fields))}
	}
	field := func(col int) []byte { return unquote(bytes.TrimSpace(r.fields[r.order[col]])) }
	bad := func(col int, what string) error {
		return &ParseError{Line: r.line, Column: colNames[col], Msg: fmt.Sprintf("%s %q", what, field(col))}
	}

	var rec Record
	var ok bool
	if rec.Thread, ok = parseDec(field(colThread)); !ok {
		return Record{}, bad(colThread, "bad thread id")
	}
	if rec.Time, ok = parseTime(field(colTime)); !ok {
		return Record{}, bad(colTime, "bad time (want H:MM:SS.ffffff)")
	}
	switch a := field(colAction); string(a) {
	case "allocate":
		rec.Action = Allocate
	case "allocate failure":
		rec.Action = AllocateFailure
	case "free", "deallocate":
		rec.Action = Free
	default:
		return Record{}, bad(colAction, "unknown action (want allocate, allocate failure or free)")
	}
	if rec.Pointer, ok = parsePointer(field(colPointer)); !ok {
		return Record{}, bad(colPointer, "bad pointer (want 0x followed by hexadecimal digits)")
	}
	if rec.Size, ok = parseDec(field(colSize)); !ok {
		return Record{}, bad(colSize, "bad size")
	}
	if rec.Stream, ok = parseStream(field(colStream)); !ok {
		return Record{}, bad(colStream, "bad stream")
	}
	return rec, nil
}

func unquote(b []byte) []byte {
	if len(b) >= 2 && b[0] == '"' && b[len(b)-1] == '"' {
		return b[1 : len(b)-1]
	}
	return b
}

// parseDec parses a decimal uint64.
func parseDec(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if v > (math.MaxUint64-d)/10 {
			return 0, false
		}
		v = v*10 + d
	}
	return v, true
}

// parseHex parses up to 16 hexadecimal digits.
func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		var d byte
		switch {
		case c >= '0' && c <= '9':
			d = c - '0'
		case c >= 'a' && c <= 'f':
			d = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(d)
	}
	return v, true
}

func trimHexPrefix(b []byte) ([]byte, bool) {
	if len(b) >= 2 && b[0] == '0' && (b[1] == 'x' || b[1] == 'X') {
		return b[2:], true
	}
	return b, false
}

// parsePointer accepts "(nil)", "0x" and hex digits, or bare hex digits.
func parsePointer(b []byte) (uint64, bool) {
	if string(b) == "(nil)" {
		return 0, true
	}
	h, _ := trimHexPrefix(b)
	return parseHex(h)
}

// parseStream accepts a decimal handle, a "0x" hexadecimal one or "(nil)".
func parseStream(b []byte) (uint64, bool) {
	if string(b) == "(nil)" {
		return 0, true
	}
	if h, ok := trimHexPrefix(b); ok {
		return parseHex(h)
	}
	return parseDec(b)
}

// parseTime parses H:MM:SS[.f] (any number of hour digits) or S[.f], with up
// to nine digits of fraction.
func parseTime(b []byte) (time.Duration, bool) {
	whole, frac, hasFrac := bytes.Cut(b, []byte("."))
	var ns uint64
	if hasFrac {
		if len(frac) == 0 || len(frac) > 9 {
			return 0, false
		}
		f, ok := parseDec(frac)
		if !ok {
			return 0, false
		}
		for i := len(frac); i < 9; i++ {
			f *= 10
		}
		ns = f
	}
	var secs uint64
	hs, rest, hasColon := bytes.Cut(whole, []byte(":"))
	if !hasColon {
		s, ok := parseDec(whole)
		if !ok {
			return 0, false
		}
		secs = s
	} else {
		ms, ss, ok := bytes.Cut(rest, []byte(":"))
		if !ok || len(ms) > 2 || len(ss) > 2 {
			return 0, false
		}
		h, ok1 := parseDec(hs)
		m, ok2 := parseDec(ms)
		s, ok3 := parseDec(ss)
		if !ok1 || !ok2 || !ok3 || m >= 60 || s >= 60 || h > math.MaxInt64/uint64(time.Hour) {
			return 0, false
		}
		secs = h*3600 + m*60 + s
	}
	if secs > (math.MaxInt64-ns)/uint64(time.Second) {
		return 0, false
	}
	return time.Duration(secs*uint64(time.Second) + ns), true
}

// ReadAll reads every record of the log in r.
func ReadAll(r io.Reader) ([]Record, error) {
	rd := NewReader(r)
	var recs []Record
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return recs, err
		}
		recs = append(recs, rec)
	}
}
