package cmdutil

import (
	"errors"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// Every flag type's parse error reads "invalid value V for --NAME: WANT".
func TestFlagErrorWants(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.Int("int", 0, "")
	fs.Uint("uint", 0, "")
	fs.Float64("float", 0, "")
	fs.Duration("dur", time.Second, "")
	fs.Bool("bool", false, "")
	fs.IntSlice("ints", nil, "")
	fs.UintSlice("uints", nil, "")
	fs.Float64Slice("floats", nil, "")
	fs.DurationSlice("durs", nil, "")
	fs.BoolSlice("bools", nil, "")
	fs.IP("ip", net.IP{}, "")
	fs.Count("v", "")
	tests := []struct {
		arg, want string
	}{
		{"--int=x", `invalid value "x" for --int: want a whole number`},
		{"--int=99999999999999999999", `invalid value "99999999999999999999" for --int: out of range for a whole number`},
		{"--uint=-1", `invalid value "-1" for --uint: want a whole number, 0 or more`},
		{"--uint=99999999999999999999", `invalid value "99999999999999999999" for --uint: out of range for a whole number`},
		{"--float=x", `invalid value "x" for --float: want a number such as 0.5`},
		{"--dur=fast", `invalid value "fast" for --dur: want a duration such as 500ms, 30s or 5m`},
		{"--bool=maybe", `invalid value "maybe" for --bool: want true or false`},
		{"--ints=1,x", `invalid value "1,x" for --ints: want whole numbers separated by commas`},
		{"--uints=1,-2", `invalid value "1,-2" for --uints: want whole numbers, 0 or more, separated by commas`},
		{"--floats=1,x", `invalid value "1,x" for --floats: want numbers separated by commas`},
		{"--durs=1s,x", `invalid value "1s,x" for --durs: want durations separated by commas, such as 30s,5m`},
		{"--bools=true,x", `invalid value "true,x" for --bools: want true or false values separated by commas`},
		{"--ip=300.1.1.1", `invalid value "300.1.1.1" for --ip: want an IP address`},
	}
	for _, tt := range tests {
		err := fs.Parse([]string{tt.arg})
		got := FlagError(nil, err)
		if got == nil || got.Error() != tt.want || !IsUsage(got) {
			t.Errorf("%s: %v, want the usage error %q", tt.arg, got, tt.want)
		}
	}
	// Errors that are not a rejected value pass unchanged, as usage errors.
	other := errors.New("unknown flag: --bogus")
	if got := FlagError(nil, other); got.Error() != other.Error() || !IsUsage(got) {
		t.Errorf("other error became %v", got)
	}
}

// sizeValue is a flag type of a command's own.
type sizeValue struct{ parse func(string) error }

func (v sizeValue) String() string     { return "" }
func (v sizeValue) Set(s string) error { return v.parse(s) }
func (v sizeValue) Type() string       { return "size" }

func TestFlagErrorOwnTypes(t *testing.T) {
	for _, tt := range []struct {
		parse func(string) error
		want  string
	}{
		{func(s string) error { _, err := strconv.ParseUint(s, 10, 64); return err }, `invalid value "x" for --size: want a whole number, 0 or more`},
		{func(s string) error { _, err := strconv.ParseFloat(s, 64); return err }, `invalid value "x" for --size: want a number`},
		{func(s string) error { _, err := strconv.Atoi(s); return err }, `invalid value "x" for --size: want a whole number`},
		{func(string) error { return errors.New("want a size such as 8GiB") }, `invalid value "x" for --size: want a size such as 8GiB`},
	} {
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		fs.Var(sizeValue{tt.parse}, "size", "")
		got := FlagError(nil, fs.Parse([]string{"--size=x"}))
		if got == nil || got.Error() != tt.want {
			t.Errorf("%v, want %q", got, tt.want)
		}
	}
}
