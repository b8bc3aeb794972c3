package replay

import (
	"fmt"
	"strings"

	"github.com/vramhq/vram/alloc"
)

// Policy is a named allocator configuration to replay traces under.
type Policy struct {
	Name string
	// Conf holds the settings in the syntax of alloc.ParseConfig (and of
	// PYTORCH_CUDA_ALLOC_CONF); "" is the default configuration.
	Conf string
	Doc  string
}

// policies lists the known policies, in the order "all" replays them.
// Adding one is adding a line.
var policies = []Policy{
	{"default", "", "PyTorch's defaults: 512 B rounding, 2 MiB small and 20 MiB large segments, any block split"},
	{"roundup4", "roundup_power2_divisions:4", "sizes rounded up to one of 4 steps between powers of two"},
	{"maxsplit", "max_split_size_mb:128", "blocks of 128 MiB or more never split"},
	{"gc", "garbage_collection_threshold:0.8", "cached segments released, least recently used first, past 80 % of the cap"},
	{"paged", "page_mapped:true", "large pool in physical chunks mapped into one address range per stream; idle chunks move where needed"},
}

// Policies returns the known policies.
func Policies() []Policy { return append([]Policy(nil), policies...) }

// PolicyNames returns the names of the known policies.
func PolicyNames() []string {
	names := make([]string, len(policies))
	for i, p := range policies {
		names[i] = p.Name
	}
	return names
}

// ParsePolicies reads a comma-separated list of policy names, or "all".
// Each name may appear once; an unknown name is an error that lists
// the known ones.
func ParsePolicies(s string) ([]Policy, error) {
	if strings.TrimSpace(s) == "all" {
		return Policies(), nil
	}
	var out []Policy
	seen := map[string]bool{}
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			return nil, fmt.Errorf("empty policy name in %q", s)
		}
		p, ok := lookupPolicy(name)
		if !ok {
			return nil, fmt.Errorf("unknown policy %q (known: %s, or all)", name, strings.Join(PolicyNames(), ", "))
		}
		if seen[name] {
			return nil, fmt.Errorf("policy %q given twice", name)
		}
		seen[name] = true
		out = append(out, p)
	}
	return out, nil
}

func lookupPolicy(name string) (Policy, bool) {
	for _, p := range policies {
		if p.Name == name {
			return p, true
		}
	}
	return Policy{}, false
}

// Config returns the allocator configuration of the policy.
func (p Policy) Config() (alloc.Config, error) {
	cfg, err := alloc.ParseConfig(p.Conf)
	if err != nil {
		return alloc.Config{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	return cfg, nil
}
