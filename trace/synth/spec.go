package synth

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vramhq/vram/internal/units"
	"github.com/vramhq/vram/trace/rmm"
)

// SpecSyntax documents the generator specs that ParseSpec reads, as a
// command line writes them after "synth:".
const SpecSyntax = `KIND[:KEY=VALUE,...], KIND one of
  random     seed, allocations, min, max (sizes), maxlive, maxlivebytes (size), p (allocate probability)
  batchwalk  seed, start, end (batch sizes), steps, layers, activation, weights, workspace (sizes)
  kvcache    seed, sequences, concurrent, tokensperblock, block (size), promptmin, promptmax,
             outputmin, outputmax (tokens), scratch, weights (sizes)
sizes take units (512MiB, 1.5GiB); unset keys take the generator's defaults (see trace/synth);
a value the generator cannot use (0 allocations, p=0, ...) is refused with its range, and so is
a key given twice.`

// ParseSpec reads a generator spec (SpecSyntax) and checks it, and returns
// the generator, configured. Unlike the configurations of the Go API, where
// a zero field means "the default", a key given in a spec always means its
// value: a value that the generator cannot use is an error naming the key
// as the spec wrote it, its value and the range it must be in.
func ParseSpec(spec string) (func() []rmm.Record, error) {
	kind, params, _ := strings.Cut(spec, ":")
	var (
		keys   []specKey
		finish func(names) error // fill the defaults and check
		gen    func() []rmm.Record
	)
	switch kind {
	case "random":
		c := new(RandomConfig)
		keys = []specKey{
			{"seed", "Seed", u64Key(&c.Seed)}, {"allocations", "Allocations", intKey(&c.Allocations)},
			{"min", "MinSize", sizeKey(&c.MinSize)}, {"max", "MaxSize", sizeKey(&c.MaxSize)},
			{"maxlive", "MaxLive", intKey(&c.MaxLive)}, {"maxlivebytes", "MaxLiveBytes", sizeKey(&c.MaxLiveBytes)},
			{"p", "AllocProbability", floatKey(&c.AllocProbability)},
		}
		finish = func(n names) error { c.fill(n.given); return c.check(n) }
		gen = func() []rmm.Record { return random(*c) }
	case "batchwalk":
		c := new(BatchWalkConfig)
		keys = []specKey{
			{"seed", "Seed", u64Key(&c.Seed)}, {"start", "StartBatch", intKey(&c.StartBatch)}, {"end", "EndBatch", intKey(&c.EndBatch)},
			{"steps", "StepsPerBatch", intKey(&c.StepsPerBatch)}, {"layers", "Layers", intKey(&c.Layers)},
			{"activation", "ActivationBytesPerSample", sizeKey(&c.ActivationBytesPerSample)},
			{"weights", "WeightBytes", sizeKey(&c.WeightBytes)}, {"workspace", "WorkspaceBytes", sizeKey(&c.WorkspaceBytes)},
		}
		finish = func(n names) error { c.fill(n.given); return c.check(n) }
		gen = func() []rmm.Record { return batchWalk(*c) }
	case "kvcache":
		c := new(KVCacheConfig)
		keys = []specKey{
			{"seed", "Seed", u64Key(&c.Seed)}, {"sequences", "Sequences", intKey(&c.Sequences)},
			{"concurrent", "MaxConcurrent", intKey(&c.MaxConcurrent)}, {"tokensperblock", "TokensPerBlock", intKey(&c.TokensPerBlock)},
			{"block", "BlockBytes", sizeKey(&c.BlockBytes)},
			{"promptmin", "MinPromptTokens", intKey(&c.MinPromptTokens)}, {"promptmax", "MaxPromptTokens", intKey(&c.MaxPromptTokens)},
			{"outputmin", "MinOutputTokens", intKey(&c.MinOutputTokens)}, {"outputmax", "MaxOutputTokens", intKey(&c.MaxOutputTokens)},
			{"scratch", "ScratchBytesPerSequence", sizeKey(&c.ScratchBytesPerSequence)}, {"weights", "WeightBytes", sizeKey(&c.WeightBytes)},
		}
		finish = func(n names) error { c.fill(n.given); return c.check(n) }
		gen = func() []rmm.Record { return kvCache(*c) }
	default:
		return nil, fmt.Errorf("unknown generator %q (known: random, batchwalk, kvcache)", kind)
	}
	n, err := parseKeys(kind, params, keys)
	if err != nil {
		return nil, err
	}
	if err := finish(n); err != nil {
		return nil, err
	}
	return gen, nil
}

// specKey is one KEY of a spec: its name, the configuration field it sets
// and how it reads its value.
type specKey struct {
	name, field string
	set         func(string) error
}

// parseKeys sets the keys of params ("KEY=VALUE,...") and returns how
// errors name the fields of the configuration: by the spec's keys.
func parseKeys(kind, params string, keys []specKey) (names, error) {
	byName := make(map[string]specKey, len(keys))
	keyOf := make(map[string]string, len(keys)) // field -> key
	for _, k := range keys {
		byName[k.name] = k
		keyOf[k.field] = k.name
	}
	given := fields{}
	raw := map[string]string{} // key -> value as written (shown)
	if params != "" {
		for _, kv := range strings.Split(params, ",") {
			name, v, ok := strings.Cut(kv, "=")
			if !ok {
				return names{}, fmt.Errorf("%q: want KEY=VALUE", kv)
			}
			k, known := byName[name]
			if !known {
				return names{}, fmt.Errorf("unknown key %q for %s (known: %s)", name, kind, keyList(keys))
			}
			if first, twice := raw[name]; twice {
				return names{}, fmt.Errorf("%s is given twice (%s=%s and %s=%s)", name, name, first, name, shown(v))
			}
			if err := k.set(v); err != nil {
				return names{}, fmt.Errorf("%s=%s: %w", name, shown(v), err)
			}
			raw[name] = shown(v)
			given[k.field] = true
		}
	}
	return names{given: given, label: func(field, value string) string {
		k, ok := keyOf[field]
		switch {
		case !ok:
			return field + " " + value
		case given[field]:
			return k + "=" + raw[k]
		}
		return k + " (default " + value + ")"
	}}, nil
}

// shown is a value as an error shows it: as written, or quoted when it
// holds spaces, quotes or characters that do not print.
func shown(v string) string {
	if v != "" && strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == '"' || r > '~' }) < 0 {
		return v
	}
	return strconv.Quote(v)
}

func keyList(keys []specKey) string {
	var s []string
	for _, k := range keys {
		s = append(s, k.name)
	}
	return strings.Join(s, ", ")
}

func u64Key(p *uint64) func(string) error {
	return func(s string) (err error) {
		*p, err = strconv.ParseUint(s, 10, 64)
		return numError(err, "a whole number, 0 or more")
	}
}

func intKey(p *int) func(string) error {
	return func(s string) (err error) {
		*p, err = strconv.Atoi(s)
		return numError(err, "a whole number")
	}
}

func floatKey(p *float64) func(string) error {
	return func(s string) (err error) {
		*p, err = strconv.ParseFloat(s, 64)
		return numError(err, "a number")
	}
}

func sizeKey(p *uint64) func(string) error {
	return func(s string) (err error) { *p, err = units.ParseBytes(s); return err }
}

// numError says what strconv's errors mean for a key's value: not a
// number of the kind wanted, or one out of range.
func numError(err error, want string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, strconv.ErrRange):
		return errors.New("out of range")
	}
	return errors.New("want " + want)
}

// fields is a set of a configuration's fields, by their Go names: the
// fields a spec gave.
type fields map[string]bool

// setDefault sets *p to v when it is zero, unless the field was given.
func setDefault[T comparable](p *T, v T, given bool) {
	var zero T
	if *p == zero && !given {
		*p = v
	}
}

// names is how a configuration's errors name its fields with their values:
// "MinSize 10.00 GiB" for the Go API (goNames), "min=10GiB" for a spec,
// where given says which fields the spec set.
type names struct {
	given fields
	label func(field, value string) string
}

var goNames = names{label: func(field, value string) string { return field + " " + value }}

func (n names) int(field string, v int) string { return n.label(field, strconv.Itoa(v)) }
func (n names) size(field string, v uint64) string {
	return n.label(field, units.FormatBytes(v))
}
func (n names) float(field string, v float64) string {
	return n.label(field, strconv.FormatFloat(v, 'g', -1, 64))
}
