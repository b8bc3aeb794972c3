package proc

import (
	"fmt"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestPrintable(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain", "python train.py --batch-size 64", "python train.py --batch-size 64"},
		{"utf-8 kept", "python3 entraîner.py --nom=模型 🚀", "python3 entraîner.py --nom=模型 🚀"},
		{"unicode spaces kept", "a\u00a0b\u3000c", "a\u00a0b\u3000c"},
		{"backslash kept", `grep -E 'a\nb' C:\x`, `grep -E 'a\nb' C:\x`},
		{"multi-line program", "python3 -c import os\nkeep = []\n\tprint(1)\r\n", `python3 -c import os\nkeep = []\n\tprint(1)\r\n`},
		{"clear screen and home", "x\x1b[2J\x1b[Hy", `x\x1b[2J\x1b[Hy`},
		{"colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"window title (OSC, BEL)", "\x1b]0;owned\x07", `\x1b]0;owned\x07`},
		{"OSC 8 hyperlink (ST)", "\x1b]8;;http://x\x1b\\a\x1b]8;;\x1b\\", `\x1b]8;;http://x\x1b\a\x1b]8;;\x1b\`},
		{"NUL, backspace, DEL", "a\x00b\x08c\x7f", `a\x00b\x08c\x7f`},
		{"raw 8-bit CSI byte", "a\x9b2Jb", `a\x9b2Jb`},
		{"C1 CSI as UTF-8", "a\u009b2Jb", `a\u009b2Jb`},
		{"C1 NEL", "a\u0085b", `a\u0085b`},
		{"truncated UTF-8", "a\xe6\x97", `a\xe6\x97`},
		{"line separator", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"bidi override", "evil\u202egnp.exe", `evil\u202egnp.exe`},
		{"zero-width space", "ro\u200bot", `ro\u200bot`},
		{"only controls", "\n\n", `\n\n`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Printable(tt.in); got != tt.want {
				t.Errorf("Printable(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestPrintableNoAllocWhenClean(t *testing.T) {
	s := "python3 -m vllm.entrypoints.openai.api_server --model meta-llama/Llama-3.1-8B (模型)"
	if n := testing.AllocsPerRun(100, func() { _ = Printable(s) }); n != 0 {
		t.Errorf("Printable allocated %.0f times on a clean string", n)
	}
}

// terminalSafe reports the first character of s that a terminal could act
// on: a C0 or C1 control, DEL, a byte that is not UTF-8, or any other
// character that is not graphic.
func terminalSafe(s string) (bad rune, at int, ok bool) {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return r, i, false
		}
		if !unicode.IsGraphic(r) {
			return r, i, false
		}
	}
	return 0, 0, true
}

func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"", "plain", "a\nb", "\x1b[2J", "\x9b", "\u009b", "\u202e", "模型", "\xff\xfe"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := Printable(s)
		if r, at, ok := terminalSafe(got); !ok {
			t.Fatalf("Printable(%q) = %q: %U at byte %d", s, got, r, at)
		}
		if _, _, ok := terminalSafe(s); ok && got != s {
			t.Fatalf("Printable(%q) changed a safe string to %q", s, got)
		}
		if Printable(got) != got {
			t.Fatalf("Printable is not idempotent on %q", got)
		}
	})
}

func ExamplePrintable() {
	argv := "python3 -c import torch\nprint(torch.cuda.is_available())"
	fmt.Println(Printable(argv))
	fmt.Println(Printable("\x1b[2Jowned"))
	// Output:
	// python3 -c import torch\nprint(torch.cuda.is_available())
	// \x1b[2Jowned
}
