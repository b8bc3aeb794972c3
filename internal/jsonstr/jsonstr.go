// Package jsonstr writes JSON strings byte for byte as encoding/json's
// Marshal does (HTML-safe), without reflection or allocation: for the
// hand-written encoders of output written many times a second (vram watch's
// JSON lines, the daemon's State).
package jsonstr

import "unicode/utf8"

// Append appends s quoted s as encoding/json does by default: ", \ and
// control characters escaped (\b \f \n \r \t by name, the others as
// \u00XX), <, > and & as \u003c \u003e \u0026, invalid UTF-8 as \ufffd,
// U+2028 and U+2029 as \u2028 and \u2029.
func Append(b []byte, s string) []byte {
	b = append(b, '"')
	b = AppendBody(b, s)
	return append(b, '"')
}

// AppendBody appends s escaped as Append does, without the quotes.
func AppendBody(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	done := 0 // s[:done] is in b
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[done:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			done = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, s[done:i]...)
			b = append(b, `\ufffd`...)
		case r == '\u2028' || r == '\u2029':
			b = append(b, s[done:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
		default:
			i += size
			continue
		}
		i += size
		done = i
	}
	return append(b, s[done:]...)
}
