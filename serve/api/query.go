package api

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Bounds of a time in a query: the store's times are Unix milliseconds
// and RFC 3339 has four-digit years.
var (
	minTime = time.Unix(0, 0).UTC()
	maxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// maxDays bounds "-Nd": a century, far below time.Duration's limit.
const maxDays = 36500

// niceSteps are the steps a history query without step chooses from.
var niceSteps = []time.Duration{
	time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 15 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour,
}

// params parses a request's query string and checks that it names only
// the allowed parameters, each at most once.
func params(r *http.Request, allowed ...string) (url.Values, error) {
	return parseParams(r.URL.RawQuery, allowed...)
}

func parseParams(raw string, allowed ...string) (url.Values, error) {
	v, err := url.ParseQuery(raw)
	if err != nil {
		return nil, errorf(http.StatusBadRequest, "malformed query string: %v", err)
	}
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			if len(allowed) == 0 {
				return nil, errorf(http.StatusBadRequest, "unknown query parameter %q: this endpoint takes none", k)
			}
			return nil, errorf(http.StatusBadRequest, "unknown query parameter %q: this endpoint takes %s", k, strings.Join(allowed, ", "))
		}
		if n := len(v[k]); n > 1 {
			return nil, errorf(http.StatusBadRequest, "query parameter %q is given %d times; give it once", k, n)
		}
	}
	return v, nil
}

// parseTime reads a time parameter: RFC 3339, Unix seconds with an
// optional fraction, "now", or a negative duration from now ("-1h", "-7d").
// The result is in UTC.
func parseTime(name, s string, now time.Time) (time.Time, error) {
	bad := func(why string) error {
		return errorf(http.StatusBadRequest, "query parameter %q: %q %s", name, s, why)
	}
	var t time.Time
	switch {
	case s == "":
		return time.Time{}, bad(`is empty; want an RFC 3339 time, Unix seconds, "now" or a negative duration like -1h`)
	case s == "now":
		t = now
	case s[0] == '-':
		d, err := parseAgo(s)
		if err != nil {
			return time.Time{}, bad(`is not a negative duration (like -15m, -1h30m or -7d)`)
		}
		t = now.Add(d)
	case s[0] == '+':
		return time.Time{}, bad(`is in the future; a relative time is negative, like -1h`)
	case isDecimal(s):
		sec, nsec, ok := unixSeconds(s)
		if !ok {
			return time.Time{}, bad(fmt.Sprintf("is out of range for Unix seconds (0 to %d; milliseconds are not accepted)", maxTime.Unix()))
		}
		t = time.Unix(sec, nsec)
	default:
		var err error
		t, err = time.Parse(time.RFC3339Nano, s)
		if err != nil && strings.Contains(s, " ") {
			// A '+' of a zone offset that was not URL-encoded arrives as a space.
			if t2, err2 := time.Parse(time.RFC3339Nano, strings.ReplaceAll(s, " ", "+")); err2 == nil {
				t, err = t2, nil
			}
		}
		if err != nil {
			return time.Time{}, bad(`is not a time: want RFC 3339 (2026-11-30T12:00:00Z), Unix seconds, "now" or a negative duration like -1h`)
		}
	}
	t = t.UTC()
	if t.Before(minTime) {
		return time.Time{}, bad("is before 1970")
	}
	if t.After(maxTime) {
		return time.Time{}, bad("is after the year 9999")
	}
	return t, nil
}

// parseAgo reads a negative Go duration, or "-Nd" for N days.
func parseAgo(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s[1:], "d"); ok && isDigits(days) {
		n, err := strconv.ParseUint(days, 10, 32)
		if err != nil || n > maxDays {
			return 0, fmt.Errorf("too many days")
		}
		return -time.Duration(n) * 24 * time.Hour, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, err
	}
	if d > 0 {
		return 0, fmt.Errorf("not negative")
	}
	return d, nil
}

// unixSeconds reads "123" or "123.456" (a decimal, checked by the caller)
// as seconds and nanoseconds, refusing values past maxTime.
func unixSeconds(s string) (sec, nsec int64, ok bool) {
	whole, frac, _ := strings.Cut(s, ".")
	if len(whole) > 12 {
		return 0, 0, false
	}
	sec, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || sec > maxTime.Unix() {
		return 0, 0, false
	}
	if len(frac) > 9 {
		frac = frac[:9] // finer than a nanosecond: dropped
	}
	if frac != "" {
		f, err := strconv.ParseInt(frac+strings.Repeat("0", 9-len(frac)), 10, 64)
		if err != nil {
			return 0, 0, false
		}
		nsec = f
	}
	return sec, nsec, true
}

// isDecimal: digits, optionally a point and more digits.
func isDecimal(s string) bool {
	whole, frac, dot := strings.Cut(s, ".")
	return isDigits(whole) && (!dot || isDigits(frac))
}

func isDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseRange reads from and to. Without to, to is now; without from, from
// is def before to. from must be before to, and the range at most MaxRange.
func parseRange(v url.Values, now time.Time, def time.Duration) (from, to time.Time, err error) {
	to = now.UTC()
	if v.Has("to") {
		if to, err = parseTime("to", v.Get("to"), now); err != nil {
			return
		}
	}
	from = to.Add(-def)
	if v.Has("from") {
		if from, err = parseTime("from", v.Get("from"), now); err != nil {
			return
		}
	} else if from.Before(minTime) {
		from = minTime
	}
	if !from.Before(to) {
		return from, to, errorf(http.StatusBadRequest, "from (%s) is not before to (%s)", from.Format(time.RFC3339Nano), to.Format(time.RFC3339Nano))
	}
	if d := to.Sub(from); d > MaxRange {
		return from, to, errorf(http.StatusBadRequest, "the range from %s to %s spans %v; at most %v (31 days) may be asked at once",
			from.Format(time.RFC3339), to.Format(time.RFC3339), d.Round(time.Second), MaxRange)
	}
	return from, to, nil
}

// parseStep reads a step: a Go duration ("10s") or seconds ("10", "0.5"),
// from MinStep to MaxRange, truncated to whole milliseconds.
func parseStep(s string) (time.Duration, error) {
	bad := func(why string) error {
		return errorf(http.StatusBadRequest, "query parameter \"step\": %q %s", s, why)
	}
	var d time.Duration
	switch {
	case s == "":
		return 0, bad(`is empty; want a duration like 10s or a number of seconds`)
	case isDecimal(s):
		f, err := strconv.ParseFloat(s, 64)
		if err != nil || f > MaxRange.Seconds() {
			return 0, bad(fmt.Sprintf("is too long; at most %v", MaxRange))
		}
		d = time.Duration(f * float64(time.Second))
	default:
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, bad(`is not a duration: want a Go duration (10s, 1m30s) or a number of seconds`)
		}
	}
	d = d.Truncate(time.Millisecond)
	switch {
	case d < MinStep:
		return 0, bad(fmt.Sprintf("is too short; at least %v", MinStep))
	case d > MaxRange:
		return 0, bad(fmt.Sprintf("is too long; at most %v", MaxRange))
	}
	return d, nil
}

// parseHistory reads a history query: the range (default the last hour)
// and the step (default: the smallest of niceSteps giving at most
// DefaultPoints buckets). From is aligned down to a multiple of the step
// since the Unix epoch. A step giving more than MaxPoints buckets is an
// error that names the smallest step that fits.
func parseHistory(v url.Values, now time.Time) (HistoryQuery, error) {
	from, to, err := parseRange(v, now, defaultHistoryRange)
	if err != nil {
		return HistoryQuery{}, err
	}
	if !v.Has("step") {
		for _, s := range niceSteps {
			if f := align(from, s); buckets(f, to, s) <= DefaultPoints {
				return HistoryQuery{From: f, To: to, Step: s}, nil
			}
		}
		s := niceSteps[len(niceSteps)-1] // unreachable while MaxRange/1d <= DefaultPoints
		return HistoryQuery{From: align(from, s), To: to, Step: s}, nil
	}
	step, err := parseStep(v.Get("step"))
	if err != nil {
		return HistoryQuery{}, err
	}
	f := align(from, step)
	if n := buckets(f, to, step); n > MaxPoints {
		least := leastStep(to.Sub(from))
		return HistoryQuery{}, errorf(http.StatusBadRequest, "step %v over %v gives %d points; at most %d: use a step of at least %v",
			step, to.Sub(from).Round(time.Second), n, MaxPoints, least)
	}
	return HistoryQuery{From: f, To: to, Step: step}, nil
}

// leastStep is the finest step a range of d allows: d/(MaxPoints-1) in
// whole milliseconds, rounded up. Aligning from down adds less than a step
// to the range, hence the one point kept in hand.
func leastStep(d time.Duration) time.Duration {
	dms := int64((d + time.Millisecond - 1) / time.Millisecond)
	ms := (dms + MaxPoints - 2) / (MaxPoints - 1)
	return max(time.Duration(ms)*time.Millisecond, MinStep)
}

// align moves t down to a multiple of step (whole milliseconds) counted
// from the Unix epoch; t is not before 1970.
func align(t time.Time, step time.Duration) time.Time {
	ms, s := t.UnixMilli(), step.Milliseconds()
	return time.UnixMilli(ms - ms%s).UTC()
}

// buckets is how many buckets of step [from, to) holds.
func buckets(from, to time.Time, step time.Duration) int64 {
	d := to.Sub(from)
	return int64((d + step - 1) / step)
}

// gpuRef names a GPU by index or by UUID.
type gpuRef struct {
	byIndex bool
	index   int
	uuid    string
}

// maxUUID bounds a GPU UUID's length (NVML's are 40 bytes, MIG ones 40 to
// 60).
const maxUUID = 128

// parseGPU reads a GPU: digits are an index, anything else must look like
// a UUID (letters, digits, '-', '_', '.', ':').
func parseGPU(name, s string) (gpuRef, error) {
	switch {
	case s == "":
		return gpuRef{}, errorf(http.StatusBadRequest, "%s is empty; want a GPU UUID or index", name)
	case isDigits(s):
		n, err := strconv.Atoi(s)
		if err != nil || n > 4095 {
			return gpuRef{}, errorf(http.StatusBadRequest, "%s: %q is not a GPU index (0 to 4095)", name, s)
		}
		return gpuRef{byIndex: true, index: n}, nil
	case len(s) > maxUUID:
		return gpuRef{}, errorf(http.StatusBadRequest, "%s: %.20q... is %d bytes, too long for a GPU UUID (at most %d)", name, s, len(s), maxUUID)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == ':') {
			return gpuRef{}, errorf(http.StatusBadRequest, "%s: %q is not a GPU UUID or index (byte %d, %q, is not a letter, digit, '-', '_', '.' or ':')", name, s, i, c)
		}
	}
	return gpuRef{uuid: s}, nil
}

// parsePID reads a process ID: a decimal number from 1 to 2^32-1.
func parsePID(name, s string) (uint32, error) {
	if !isDigits(s) {
		return 0, errorf(http.StatusBadRequest, "%s: %q is not a process ID (a decimal number)", name, s)
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, errorf(http.StatusBadRequest, "%s: %q is out of range for a process ID", name, s)
	}
	if n == 0 {
		return 0, errorf(http.StatusBadRequest, "%s: 0 is not a process ID", name)
	}
	return uint32(n), nil
}
