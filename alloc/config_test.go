package alloc_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/vramhq/vram/alloc"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		in      string
		want    func(c *alloc.Config)
		wantErr string // substring; empty means success
	}{
		{in: "", want: func(c *alloc.Config) {}},
		{in: " , ", want: func(c *alloc.Config) {}},
		{in: "max_bytes:8GiB", want: func(c *alloc.Config) { c.MaxBytes = 8 << 30 }},
		{in: "max_bytes:512MiB, max_fraction:0.5", want: func(c *alloc.Config) { c.MaxBytes = 512 << 20; c.MaxFraction = 0.5 }},
		{in: "max_bytes:1.5GiB", want: func(c *alloc.Config) { c.MaxBytes = 3 << 29 }},
		{in: "max_bytes:8GB", want: func(c *alloc.Config) { c.MaxBytes = 8e9 }},
		{in: "max_bytes:4096", want: func(c *alloc.Config) { c.MaxBytes = 4096 }},
		{in: "prealloc_bytes:2GiB", want: func(c *alloc.Config) { c.PreallocBytes = 2 << 30 }},
		{in: "garbage_collection_threshold:0.8", want: func(c *alloc.Config) { c.GarbageCollectionThreshold = 0.8 }},
		{in: "max_split_size_mb:20", want: func(c *alloc.Config) { c.MaxSplitSize = 20 << 20 }},
		{in: "roundup_power2_divisions:4", want: func(c *alloc.Config) {
			for i := range c.RoundupPower2Divisions {
				c.RoundupPower2Divisions[i] = 4
			}
		}},
		{in: "roundup_power2_divisions:[256:1,512:2,1024:4,>:8]", want: func(c *alloc.Config) {
			// PyTorch's parser: 256 covers [0,512) MiB, 512 covers [512,1024),
			// ">" covers 1024 MiB and up (overwriting 1024's own entry).
			for i := range c.RoundupPower2Divisions {
				switch {
				case i < 9:
					c.RoundupPower2Divisions[i] = 1
				case i == 9:
					c.RoundupPower2Divisions[i] = 2
				default:
					c.RoundupPower2Divisions[i] = 8
				}
			}
		}},
		{in: "record_call_sites:sampled,sample_rate:0.25", want: func(c *alloc.Config) {
			c.RecordCallSites = alloc.CallSitesSampled
			c.SampleRate = 0.25
		}},
		{in: "record_call_sites:all", want: func(c *alloc.Config) { c.RecordCallSites = alloc.CallSitesAll }},
		{in: "record_call_sites:off", want: func(c *alloc.Config) {}},
		{in: "poison_on_free:true,trace_events:1000", want: func(c *alloc.Config) { c.PoisonOnFree = true; c.TraceEvents = 1000 }},

		{in: "max_byte:1", wantErr: `unknown key "max_byte"`},
		{in: "max_bytes", wantErr: "want key:value"},
		{in: "max_bytes:1,max_bytes:2", wantErr: "max_bytes: set twice"},
		{in: "max_bytes:lots", wantErr: "max_bytes: bad value"},
		{in: "max_bytes:8XiB", wantErr: "unknown unit"},
		{in: "max_bytes:99999999999TiB", wantErr: "too large"},
		{in: "max_bytes:-1", wantErr: "max_bytes"},
		{in: "max_fraction:1.5", wantErr: "max_fraction: bad value \"1.5\": out of range"},
		{in: "max_fraction:x", wantErr: "max_fraction: bad value"},
		{in: "garbage_collection_threshold:-0.1", wantErr: "garbage_collection_threshold"},
		{in: "max_split_size_mb:10", wantErr: "max_split_size_mb: 10 is below the minimum of 20"},
		{in: "roundup_power2_divisions:3", wantErr: "not a power of two"},
		{in: "roundup_power2_divisions:[100:2]", wantErr: "not a power of two in MiB"},
		{in: "roundup_power2_divisions:[256:2", wantErr: "missing ]"},
		{in: "roundup_power2_divisions:[65536:2]", wantErr: "beyond the last interval"},
		{in: "record_call_sites:some", wantErr: "record_call_sites: bad value \"some\": want off, sampled or all"},
		{in: "sample_rate:2", wantErr: "sample_rate"},
		{in: "poison_on_free:maybe", wantErr: "poison_on_free: bad value"},
		{in: "trace_events:-5", wantErr: "trace_events"},
		{in: "max_bytes:1MiB,prealloc_bytes:2MiB", wantErr: "prealloc_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := alloc.ParseConfig(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseConfig(%q) error = %v, want one containing %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseConfig(%q): %v", tt.in, err)
			}
			var want alloc.Config
			tt.want(&want)
			if got != want {
				t.Fatalf("ParseConfig(%q) = %+v, want %+v", tt.in, got, want)
			}
			// String renders a configuration that parses back to itself.
			again, err := alloc.ParseConfig(got.String())
			if err != nil || again != got {
				t.Fatalf("round trip of %q via %q: %+v, %v", tt.in, got.String(), again, err)
			}
		})
	}
}

func TestConfigFromEnv(t *testing.T) {
	t.Setenv(alloc.EnvConfig, "max_bytes:1GiB")
	c, err := alloc.ConfigFromEnv()
	if err != nil || c.MaxBytes != 1<<30 {
		t.Fatalf("ConfigFromEnv = %+v, %v", c, err)
	}
	t.Setenv(alloc.EnvConfig, "bogus:1")
	if _, err := alloc.ConfigFromEnv(); err == nil || !strings.Contains(err.Error(), "VRAM_ALLOC_CONF: unknown key") {
		t.Fatalf("ConfigFromEnv error = %v", err)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	_, err := alloc.New(newDev(t, 1<<30), alloc.Config{MaxFraction: 2})
	if err == nil || !strings.Contains(err.Error(), "max_fraction") {
		t.Fatalf("New with max_fraction 2: %v", err)
	}
	if _, err := alloc.New(nil, alloc.Config{}); err == nil {
		t.Fatal("New(nil) succeeded")
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want uint64
		err  bool
	}{
		{"0", 0, false}, {"512", 512, false}, {"512B", 512, false}, {"4KiB", 4096, false},
		{"4k", 4096, false}, {"3MiB", 3 << 20, false}, {"1 GiB", 1 << 30, false}, {"2TiB", 2 << 40, false},
		{"1KB", 1000, false}, {"0.5MiB", 1 << 19, false},
		{"", 0, true}, {"MiB", 0, true}, {"1.2.3GiB", 0, true}, {"1PiB", 1 << 50, false}, {"1ZiB", 0, true}, {"18446744073709551616", 0, true},
	}
	for _, tt := range tests {
		got, err := alloc.ParseSize(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{"max_bytes:8GiB", "roundup_power2_divisions:[256:1,512:2,>:8]", "record_call_sites:all,sample_rate:0.5", "a:b:c", "[[,]]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		c, err := alloc.ParseConfig(s)
		if err != nil {
			if errors.Unwrap(err) == nil && err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		again, err := alloc.ParseConfig(c.String())
		if err != nil || again != c {
			t.Fatalf("round trip of %q via %q: %+v vs %+v, %v", s, c.String(), again, c, err)
		}
	})
}
