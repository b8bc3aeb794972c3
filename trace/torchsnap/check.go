package torchsnap

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// checkPickle walks the opcodes of a pickle, up to STOP, and checks that
// every argument lies within the input: in particular that no length prefix
// claims more bytes than remain. It knows the argument layout of every
// opcode of protocols 0 to 5 and rejects unknown opcodes.
func checkPickle(data []byte) error {
	for i := 0; i < len(data); {
		op := data[i]
		at := i
		i++
		need := func(n uint64) error {
			if n > uint64(len(data)-i) {
				return fmt.Errorf("opcode %#x at offset %d needs %d bytes, %d remain", op, at, n, len(data)-i)
			}
			return nil
		}
		var n uint64 // bytes of argument after the opcode
		switch op {
		case '.': // STOP
			return nil
		case '(', '0', '1', '2', 'N', 'R', 'a', 'b', 'd', '}', 'e', 'l', ']', 'o', 's', 't', ')', 'u', 'Q',
			0x81, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8f, 0x90, 0x91, 0x92, 0x93, 0x94, 0x97, 0x98:
			n = 0
		case 'K', 'h', 'q', 0x80, 0x82:
			n = 1
		case 'M', 0x83:
			n = 2
		case 'J', 'j', 'r', 0x84:
			n = 4
		case 'G':
			n = 8
		case 0x95: // FRAME: an 8-byte size, then the framed opcodes inline
			if err := need(8); err != nil {
				return err
			}
			if err := need(8 + binary.LittleEndian.Uint64(data[i:])); err != nil {
				return err
			}
			n = 8
		case 'U', 'C', 0x8c, 0x8a: // 1-byte length prefix
			if err := need(1); err != nil {
				return err
			}
			n = 1 + uint64(data[i])
		case 'T', 'B', 'X', 0x8b: // 4-byte length prefix
			if err := need(4); err != nil {
				return err
			}
			n = 4 + uint64(binary.LittleEndian.Uint32(data[i:]))
		case 0x8d, 0x8e, 0x96: // 8-byte length prefix
			if err := need(8); err != nil {
				return err
			}
			l := binary.LittleEndian.Uint64(data[i:])
			if l > uint64(len(data)) {
				return fmt.Errorf("opcode %#x at offset %d claims %d bytes, more than the input", op, at, l)
			}
			n = 8 + l
		case 'I', 'L', 'F', 'S', 'V', 'P', 'g', 'p': // one line
			j := bytes.IndexByte(data[i:], '\n')
			if j < 0 {
				return fmt.Errorf("opcode %q at offset %d: unterminated line", op, at)
			}
			n = uint64(j + 1)
		case 'c', 'i': // two lines
			j := bytes.IndexByte(data[i:], '\n')
			k := -1
			if j >= 0 {
				k = bytes.IndexByte(data[i+j+1:], '\n')
			}
			if k < 0 {
				return fmt.Errorf("opcode %q at offset %d: unterminated line", op, at)
			}
			n = uint64(j + 1 + k + 1)
		default:
			return fmt.Errorf("unknown opcode %#x at offset %d", op, at)
		}
		if err := need(n); err != nil {
			return err
		}
		i += int(n)
	}
	return fmt.Errorf("no STOP opcode: the pickle is truncated")
}
