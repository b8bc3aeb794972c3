package cmdutil

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/spf13/pflag"
)

// flagError rewrites the flag library's "invalid argument" error, which
// carries the parser's own text (strconv.ParseInt: parsing "abc": invalid
// syntax), into the user's terms: the value, the flag and what it wants.
//
//	invalid value "abc" for --simulate: want a whole number
//
// Other errors (unknown flags, a missing value, the commands' own checks)
// pass unchanged.
func flagError(err error) error {
	var iv *pflag.InvalidValueError
	if !errors.As(err, &iv) || iv.GetFlag() == nil {
		return err
	}
	f := iv.GetFlag()
	return fmt.Errorf("invalid value %q for --%s: %s", iv.GetValue(), f.Name, wantFor(f.Value.Type(), errors.Unwrap(iv)))
}

// wantFor says what a flag of type typ (pflag's Value.Type) accepts;
// cause is the parser's error, used for a range error and for types this
// package does not know.
func wantFor(typ string, cause error) string {
	var ne *strconv.NumError
	outOfRange := errors.As(cause, &ne) && errors.Is(ne.Err, strconv.ErrRange)
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "count":
		if outOfRange {
			return "out of range for a whole number"
		}
		return "want a whole number"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		if outOfRange {
			return "out of range for a whole number"
		}
		return "want a whole number, 0 or more"
	case "float32", "float64":
		return "want a number such as 0.5"
	case "duration":
		return "want a duration such as 500ms, 30s or 5m"
	case "bool":
		return "want true or false"
	case "intSlice", "int32Slice", "int64Slice":
		return "want whole numbers separated by commas"
	case "uintSlice":
		return "want whole numbers, 0 or more, separated by commas"
	case "float32Slice", "float64Slice":
		return "want numbers separated by commas"
	case "durationSlice":
		return "want durations separated by commas, such as 30s,5m"
	case "boolSlice":
		return "want true or false values separated by commas"
	case "ip":
		return "want an IP address"
	}
	// A flag type of a command's own: its message, unless it is only the
	// number parser's.
	if ne != nil {
		switch ne.Func {
		case "ParseUint":
			return "want a whole number, 0 or more"
		case "ParseFloat":
			return "want a number"
		}
		return "want a whole number"
	}
	if cause == nil {
		return "not valid"
	}
	return cause.Error()
}
