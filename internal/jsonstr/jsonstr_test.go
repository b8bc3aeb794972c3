package jsonstr_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/vramhq/vram/internal/jsonstr"
)

// FuzzJSONString: Append writes what json.Marshal writes, for any string.
func FuzzJSONString(f *testing.F) {
	for _, s := range []string{"", "plain", "a<b>&c", "\"\\", "\b\f\n\r\t\x00\x1f\x7f", "\u2028\u2029", "\xff\xfe", "caf\xc3\xa9", "\xe2\x28\xa1", "\xed\xa0\x80"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		if got := jsonstr.Append(nil, s); !bytes.Equal(got, want) {
			t.Errorf("%q: got %s, encoding/json %s", s, got, want)
		}
	})
}
