package alloc

import (
	"fmt"
	"math"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/vramhq/vram/internal/units"
)

// EnvConfig is the environment variable read by ConfigFromEnv.
const EnvConfig = "VRAM_ALLOC_CONF"

// CallSites says which allocations record their Go call stack.
type CallSites int

const (
	// CallSitesOff records nothing (the default).
	CallSitesOff CallSites = iota
	// CallSitesSampled records one allocation in 1/SampleRate.
	CallSitesSampled
	// CallSitesAll records every allocation.
	CallSitesAll
)

func (c CallSites) String() string {
	switch c {
	case CallSitesOff:
		return "off"
	case CallSitesSampled:
		return "sampled"
	case CallSitesAll:
		return "all"
	}
	return fmt.Sprintf("CallSites(%d)", int(c))
}

// numRoundupIntervals is the number of power-of-two size intervals that
// roundup_power2_divisions configures: [0, 2 MiB), [2 MiB, 4 MiB), ...,
// [32 GiB, ∞), as in PyTorch.
const numRoundupIntervals = 16

// Config holds the allocator's settings. The zero value is the default:
// grow on demand up to the device's total memory, no release threshold, no
// call sites, no trace. ParseConfig reads the same settings from a
// VRAM_ALLOC_CONF string.
type Config struct {
	// MaxBytes caps reserved memory (0: no byte cap). Key max_bytes.
	MaxBytes uint64
	// MaxFraction caps reserved memory at this fraction of the device's
	// total memory, in (0, 1] (0: no fraction cap). With both caps set the
	// smaller wins. Key max_fraction.
	MaxFraction float64
	// GarbageCollectionThreshold, in [0, 1]: before growing past this
	// fraction of the cap, release cached whole segments, least recently
	// used first (0: off). Key garbage_collection_threshold.
	GarbageCollectionThreshold float64
	// PreallocBytes is reserved at New in one segment (rounded up to 2 MiB)
	// and kept until Close. Key prealloc_bytes.
	PreallocBytes uint64
	// MaxSplitSize: blocks at least this large are never split and serve
	// only requests at least this large (0: unlimited). At least 20 MiB.
	// Key max_split_size_mb (in MiB).
	MaxSplitSize uint64
	// RoundupPower2Divisions[i] is the number of steps between two powers of
	// two for requests in interval i ([0, 2 MiB), [2 MiB, 4 MiB), ...;
	// the last interval is everything from 32 GiB); 0 or 1 means plain
	// 512-byte rounding. Key roundup_power2_divisions.
	RoundupPower2Divisions [numRoundupIntervals]uint32
	// RecordCallSites selects which allocations keep their call stack.
	// Key record_call_sites (off, sampled, all).
	RecordCallSites CallSites
	// SampleRate is the fraction of allocations recorded when
	// RecordCallSites is CallSitesSampled, in (0, 1]; 0 means 1/100.
	// Key sample_rate.
	SampleRate float64
	// PoisonOnFree fills freed blocks with PoisonByte on the device, so that
	// use after free reads garbage that is easy to recognise.
	// Key poison_on_free (true, false).
	PoisonOnFree bool
	// TraceEvents is the size of the ring buffer of allocation events kept
	// for WriteTraceCSV (0: no trace). Key trace_events.
	TraceEvents int
	// PageMapped serves large-pool requests from physical pages mapped
	// into reserved address ranges, which move to where they are needed
	// (see "Page-mapped mode" in the package documentation). The device
	// must implement VirtualMemory. Key page_mapped (true, false).
	PageMapped bool
	// PageReleaseSlack, in (0, 1]: in page-mapped mode, the idle pages
	// kept beyond what the last two release windows needed, as a fraction
	// of their peak (0: the default, 0.03). Key page_release_slack.
	PageReleaseSlack float64
	// PageReleaseWindow is the number of allocations in a release window
	// of the page-mapped mode (0: the default, 4096; -1: never release
	// idle pages on its own, only on EmptyCache, at the cap and at Close).
	// Key page_release_window (a count, or off).
	PageReleaseWindow int
	// PageFine runs the page-mapped mode in its fine regime from the start
	// (small chunks that move, growth close to need) even without a cap;
	// by default it starts coarse and turns fine under a cap below the
	// device's memory or once the device is found full. Key page_regime
	// (auto, fine).
	PageFine bool
	// PageUnmapAtMove makes a move of an idle chunk that work queued on
	// its stream may still use wait for that stream and unmap the chunk at
	// once, as before 2026-12-07. By default the chunk is mapped at its new
	// address while the old mapping stays, and the old one is unmapped
	// once a marker recorded after its last free completes; only moves to
	// another stream wait. Key page_defer_unmap (true, the default, or
	// false).
	PageUnmapAtMove bool
}

// PoisonByte is the value written over freed blocks when PoisonOnFree is set.
const PoisonByte = 0xDB

// ConfigFromEnv parses $VRAM_ALLOC_CONF; an unset or empty variable gives the
// default configuration.
func ConfigFromEnv() (Config, error) {
	c, err := ParseConfig(os.Getenv(EnvConfig))
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", EnvConfig, err)
	}
	return c, nil
}

// ParseConfig parses settings in the syntax of PYTORCH_CUDA_ALLOC_CONF:
// comma-separated key:value pairs, for example
//
//	max_bytes:8GiB,garbage_collection_threshold:0.8,record_call_sites:all
//
// Sizes accept a plain byte count or a unit: B, KiB, MiB, GiB, TiB, PiB,
// EiB (powers of 1024) or KB, MB, GB, TB, PB, EB (powers of 1000),
// optionally with a fraction ("1.5GiB"). roundup_power2_divisions takes one
// number for every size, or a list [K:N,...,>:N] where K is a size in MiB
// (a power of two) that starts the interval [K, 2K) MiB, the first entry
// also covers every smaller size and ">" covers the intervals from the last
// K on; this is how PyTorch's parser reads the same list. An unknown key, a repeated key, a bad value or
// a value out of range is an error that names the key.
func ParseConfig(s string) (Config, error) {
	var c Config
	seen := map[string]bool{}
	for _, item := range splitTopLevel(s) {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, ":")
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		if !ok {
			return Config{}, fmt.Errorf("%q: want key:value", item)
		}
		if seen[key] {
			return Config{}, fmt.Errorf("%s: set twice", key)
		}
		seen[key] = true
		if err := c.set(key, val); err != nil {
			return Config{}, err
		}
	}
	if err := c.validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// splitTopLevel splits s on commas that are not inside brackets.
func splitTopLevel(s string) []string {
	var out []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			depth++
		case ']':
			depth--
		case ',':
			if depth == 0 {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}

var configKeys = []string{
	"garbage_collection_threshold", "max_bytes", "max_fraction", "max_split_size_mb",
	"page_defer_unmap", "page_mapped", "page_regime", "page_release_slack", "page_release_window",
	"poison_on_free", "prealloc_bytes", "record_call_sites", "roundup_power2_divisions",
	"sample_rate", "trace_events",
}

func (c *Config) set(key, val string) error {
	var err error
	switch key {
	case "max_bytes":
		c.MaxBytes, err = ParseSize(val)
	case "prealloc_bytes":
		c.PreallocBytes, err = ParseSize(val)
	case "max_fraction":
		c.MaxFraction, err = parseFraction(val)
	case "garbage_collection_threshold":
		c.GarbageCollectionThreshold, err = parseFraction(val)
	case "sample_rate":
		c.SampleRate, err = parseFraction(val)
	case "max_split_size_mb":
		var mb uint64
		mb, err = strconv.ParseUint(val, 10, 64)
		if err == nil && mb > math.MaxUint64>>20 {
			err = fmt.Errorf("too large")
		}
		c.MaxSplitSize = mb << 20
	case "roundup_power2_divisions":
		c.RoundupPower2Divisions, err = parseDivisions(val)
	case "record_call_sites":
		switch strings.ToLower(val) {
		case "off", "false", "none":
			c.RecordCallSites = CallSitesOff
		case "sampled":
			c.RecordCallSites = CallSitesSampled
		case "all", "true":
			c.RecordCallSites = CallSitesAll
		default:
			err = fmt.Errorf("want off, sampled or all")
		}
	case "poison_on_free":
		c.PoisonOnFree, err = strconv.ParseBool(val)
		if err != nil {
			err = fmt.Errorf("want true or false")
		}
	case "page_defer_unmap":
		var v bool
		v, err = strconv.ParseBool(val)
		if err != nil {
			err = fmt.Errorf("want true or false")
		}
		c.PageUnmapAtMove = !v
	case "page_mapped":
		c.PageMapped, err = strconv.ParseBool(val)
		if err != nil {
			err = fmt.Errorf("want true or false")
		}
	case "page_regime":
		switch strings.ToLower(val) {
		case "auto":
			c.PageFine = false
		case "fine":
			c.PageFine = true
		default:
			err = fmt.Errorf("want auto or fine")
		}
	case "page_release_slack":
		c.PageReleaseSlack, err = parseFraction(val)
	case "page_release_window":
		if strings.EqualFold(val, "off") {
			c.PageReleaseWindow = -1
			break
		}
		var n int64
		n, err = strconv.ParseInt(val, 10, 32)
		if err == nil && n <= 0 {
			err = fmt.Errorf("want a positive number of allocations, or off")
		}
		c.PageReleaseWindow = int(n)
	case "trace_events":
		var n int64
		n, err = strconv.ParseInt(val, 10, 32)
		if err == nil && n < 0 {
			err = fmt.Errorf("must not be negative")
		}
		c.TraceEvents = int(n)
	default:
		return fmt.Errorf("unknown key %q (known keys: %s)", key, strings.Join(configKeys, ", "))
	}
	if err != nil {
		return fmt.Errorf("%s: bad value %q: %w", key, val, unwrapNum(err))
	}
	return nil
}

// unwrapNum shortens strconv's errors ("strconv.ParseUint: parsing "x":
// invalid syntax") to their reason.
func unwrapNum(err error) error {
	if ne, ok := err.(*strconv.NumError); ok {
		return ne.Err
	}
	return err
}

// validate checks ranges; ParseConfig and New call it.
func (c *Config) validate() error {
	if c.MaxFraction < 0 || c.MaxFraction > 1 || math.IsNaN(c.MaxFraction) {
		return fmt.Errorf("max_fraction: %v is out of range (0, 1]", c.MaxFraction)
	}
	if c.GarbageCollectionThreshold < 0 || c.GarbageCollectionThreshold > 1 || math.IsNaN(c.GarbageCollectionThreshold) {
		return fmt.Errorf("garbage_collection_threshold: %v is out of range [0, 1]", c.GarbageCollectionThreshold)
	}
	if c.SampleRate < 0 || c.SampleRate > 1 || math.IsNaN(c.SampleRate) {
		return fmt.Errorf("sample_rate: %v is out of range (0, 1]", c.SampleRate)
	}
	if c.MaxSplitSize != 0 && c.MaxSplitSize < largeBuffer {
		return fmt.Errorf("max_split_size_mb: %d is below the minimum of %d", c.MaxSplitSize>>20, largeBuffer>>20)
	}
	if c.TraceEvents < 0 {
		return fmt.Errorf("trace_events: %d must not be negative", c.TraceEvents)
	}
	if c.RecordCallSites < CallSitesOff || c.RecordCallSites > CallSitesAll {
		return fmt.Errorf("record_call_sites: unknown mode %d", int(c.RecordCallSites))
	}
	for i, d := range c.RoundupPower2Divisions {
		if d > 1 && d&(d-1) != 0 {
			return fmt.Errorf("roundup_power2_divisions: %d divisions (interval %d) is not a power of two", d, i)
		}
	}
	if c.PageReleaseSlack < 0 || c.PageReleaseSlack > 1 || math.IsNaN(c.PageReleaseSlack) {
		return fmt.Errorf("page_release_slack: %v is out of range (0, 1]", c.PageReleaseSlack)
	}
	if c.PageReleaseWindow < -1 {
		return fmt.Errorf("page_release_window: %d is not a count of allocations (-1 is off)", c.PageReleaseWindow)
	}
	if c.PageMapped && c.MaxSplitSize != 0 {
		return fmt.Errorf("max_split_size_mb cannot be combined with page_mapped: free pages are remapped instead of kept whole")
	}
	if c.PageFine && !c.PageMapped {
		return fmt.Errorf("page_regime:fine needs page_mapped:true")
	}
	if c.PageUnmapAtMove && !c.PageMapped {
		return fmt.Errorf("page_defer_unmap:false needs page_mapped:true")
	}
	if c.PageMapped && c.PreallocBytes != 0 {
		return fmt.Errorf("prealloc_bytes cannot be combined with page_mapped")
	}
	if c.MaxBytes != 0 && c.PreallocBytes > c.MaxBytes {
		return fmt.Errorf("prealloc_bytes: %d is more than max_bytes %d", c.PreallocBytes, c.MaxBytes)
	}
	return nil
}

func parseFraction(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, err
	}
	if f < 0 || f > 1 || math.IsNaN(f) {
		return 0, fmt.Errorf("out of range [0, 1]")
	}
	return f, nil
}

// ParseSize reads a byte count such as "4096", "512MiB", "1.5GiB" or "8GB"
// (package units spells out the rules).
func ParseSize(s string) (uint64, error) { return units.ParseBytes(s) }

// parseDivisions reads "N" or "[K:N,K:N,>:N]" (see ParseConfig).
func parseDivisions(s string) ([numRoundupIntervals]uint32, error) {
	var out [numRoundupIntervals]uint32
	if !strings.HasPrefix(s, "[") {
		n, err := parsePow2(s)
		if err != nil {
			return out, err
		}
		for i := range out {
			out[i] = n
		}
		return out, nil
	}
	if !strings.HasSuffix(s, "]") {
		return out, fmt.Errorf("missing ]")
	}
	type entry struct {
		idx int
		n   uint32
	}
	var entries []entry
	var last = -1
	var rest *uint32
	for _, kv := range strings.Split(s[1:len(s)-1], ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), ":")
		if !ok {
			return out, fmt.Errorf("entry %q: want MiB:divisions", kv)
		}
		n, err := parsePow2(strings.TrimSpace(v))
		if err != nil {
			return out, fmt.Errorf("entry %q: %w", kv, err)
		}
		k = strings.TrimSpace(k)
		if k == ">" {
			rest = &n
			continue
		}
		mb, err := strconv.ParseUint(k, 10, 64)
		if err != nil || mb == 0 || mb&(mb-1) != 0 {
			return out, fmt.Errorf("entry %q: interval start %q is not a power of two in MiB", kv, k)
		}
		idx := bits.Len64(mb) - 1
		if idx >= numRoundupIntervals {
			return out, fmt.Errorf("entry %q: interval start %d MiB is beyond the last interval (%d MiB)", kv, mb, 1<<(numRoundupIntervals-1))
		}
		entries = append(entries, entry{idx, n})
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].idx < entries[j].idx })
	for i, e := range entries {
		lo := e.idx
		if i == 0 {
			lo = 0
		}
		for j := lo; j < numRoundupIntervals; j++ {
			out[j] = e.n
		}
		last = e.idx
	}
	if rest != nil {
		from := last
		if from < 0 {
			from = 0
		}
		for j := from; j < numRoundupIntervals; j++ {
			out[j] = *rest
		}
	}
	return out, nil
}

func parsePow2(s string) (uint32, error) {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, unwrapNum(err)
	}
	if n > 1 && n&(n-1) != 0 {
		return 0, fmt.Errorf("%d divisions is not a power of two", n)
	}
	return uint32(n), nil
}

// String renders c in the syntax ParseConfig reads (only the settings that
// differ from the default).
func (c Config) String() string {
	var parts []string
	if c.MaxBytes != 0 {
		parts = append(parts, "max_bytes:"+strconv.FormatUint(c.MaxBytes, 10))
	}
	if c.MaxFraction != 0 {
		parts = append(parts, "max_fraction:"+strconv.FormatFloat(c.MaxFraction, 'g', -1, 64))
	}
	if c.GarbageCollectionThreshold != 0 {
		parts = append(parts, "garbage_collection_threshold:"+strconv.FormatFloat(c.GarbageCollectionThreshold, 'g', -1, 64))
	}
	if c.PreallocBytes != 0 {
		parts = append(parts, "prealloc_bytes:"+strconv.FormatUint(c.PreallocBytes, 10))
	}
	if c.MaxSplitSize != 0 {
		parts = append(parts, "max_split_size_mb:"+strconv.FormatUint(c.MaxSplitSize>>20, 10))
	}
	if c.RoundupPower2Divisions != ([numRoundupIntervals]uint32{}) {
		var divs []string
		for i, d := range c.RoundupPower2Divisions {
			divs = append(divs, fmt.Sprintf("%d:%d", 1<<i, d))
		}
		parts = append(parts, "roundup_power2_divisions:["+strings.Join(divs, ",")+"]")
	}
	if c.RecordCallSites != CallSitesOff {
		parts = append(parts, "record_call_sites:"+c.RecordCallSites.String())
	}
	if c.SampleRate != 0 {
		parts = append(parts, "sample_rate:"+strconv.FormatFloat(c.SampleRate, 'g', -1, 64))
	}
	if c.PoisonOnFree {
		parts = append(parts, "poison_on_free:true")
	}
	if c.TraceEvents != 0 {
		parts = append(parts, "trace_events:"+strconv.Itoa(c.TraceEvents))
	}
	if c.PageMapped {
		parts = append(parts, "page_mapped:true")
	}
	if c.PageFine {
		parts = append(parts, "page_regime:fine")
	}
	if c.PageUnmapAtMove {
		parts = append(parts, "page_defer_unmap:false")
	}
	if c.PageReleaseSlack != 0 {
		parts = append(parts, "page_release_slack:"+strconv.FormatFloat(c.PageReleaseSlack, 'g', -1, 64))
	}
	switch {
	case c.PageReleaseWindow < 0:
		parts = append(parts, "page_release_window:off")
	case c.PageReleaseWindow > 0:
		parts = append(parts, "page_release_window:"+strconv.Itoa(c.PageReleaseWindow))
	}
	return strings.Join(parts, ",")
}
