package proc

import (
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Strings read from /proc are whatever a process or an administrator made
// them: a command line is argv as the program received it (python3 -c with a
// multi-line program has newlines in it, and any process can rewrite its
// own argv), a comm is set with prctl, a cgroup directory can be named by
// any user it is delegated to, a user name comes from the user database.
// Written to a terminal as they are, a newline breaks a table row over
// several lines and an escape sequence moves the cursor, clears the screen,
// changes colours or sets the window title: a process could make vram top
// show something it is not.
//
// Package gpu's Process keeps these strings exactly as read (JSON output
// quotes them exactly, and a command line is matched as it is). The monitor's text
// renderings (vram status's table and CSV, vram top's table, screens and
// dialogs) pass them through Printable, the one place that decides what is
// safe to show; any other text output of /proc strings should too.

// Printable returns s as one line that is safe to write to a terminal: each
// character that is not graphic (letters, marks, numbers, punctuation,
// symbols, and spaces) is replaced with a visible escape, so that nothing in
// s can break a line or reach the terminal as a control sequence:
//
//   - tab, newline and carriage return become \t, \n and \r;
//   - the other C0 controls, DEL and bytes that are not valid UTF-8 become
//     \xNN (ESC is \x1b), so a raw 0x9b, which some terminals take for
//     CSI, is shown and not obeyed;
//   - other characters that are not graphic, among them the C1 controls
//     U+0080 to U+009F, the line and paragraph separators and the format
//     characters (bidirectional overrides, zero-width characters), become
//     \uNNNN.
//
// A backslash already in s is kept as it is, so the display form is not
// reversible; outputs that must be exact (JSON) use the string itself.
// When s needs no escape, Printable returns it without allocating.
func Printable(s string) string {
	i := 0
	for i < len(s) {
		n := graphicLen(s[i:])
		if n == 0 {
			break
		}
		i += n
	}
	if i == len(s) {
		return s
	}
	b := make([]byte, 0, len(s)+16)
	b = append(b, s[:i]...)
	for i < len(s) {
		if n := graphicLen(s[i:]); n > 0 {
			b = append(b, s[i:i+n]...)
			i += n
			continue
		}
		c := s[i]
		switch {
		case c == '\t':
			b = append(b, `\t`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c < utf8.RuneSelf:
			b = appendHex(b, `\x`, uint64(c), 2)
		default:
			r, n := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && n == 1 {
				b = appendHex(b, `\x`, uint64(c), 2)
				break
			}
			b = appendHex(b, `\u`, uint64(r), 4)
			i += n
			continue
		}
		i++
	}
	return string(b)
}

// graphicLen returns the length in bytes of the character at the start of s
// when it may be written to a terminal as it is, or 0 when it needs an
// escape (or s is empty).
func graphicLen(s string) int {
	if s == "" {
		return 0
	}
	if c := s[0]; c < utf8.RuneSelf {
		if c >= 0x20 && c < 0x7f {
			return 1
		}
		return 0
	}
	r, n := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && n == 1 {
		return 0
	}
	if unicode.IsGraphic(r) {
		return n
	}
	return 0
}

// appendHex appends prefix and v in lower-case hexadecimal, zero-padded to
// at least digits digits.
func appendHex(b []byte, prefix string, v uint64, digits int) []byte {
	b = append(b, prefix...)
	var tmp [16]byte
	h := strconv.AppendUint(tmp[:0], v, 16)
	for k := len(h); k < digits; k++ {
		b = append(b, '0')
	}
	return append(b, h...)
}
