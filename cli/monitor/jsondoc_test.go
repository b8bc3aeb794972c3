package monitor_test

import (
	"testing"
	"time"

	"github.com/vramhq/vram/internal/jsondoc"
)

// TestJSONDoc checks vram status --json and vram watch --json against the
// schemas in docs/json.md, on the go-nvml mock (with accounting and with
// processes on vram's allocator) and on a simulated host.
func TestJSONDoc(t *testing.T) {
	dir := channelFixture(t)
	for _, tt := range []struct {
		name    string
		channel bool
		title   string
		args    []string
	}{
		{"status", false, "vram status --json", []string{"status", "--json"}},
		{"status accounting", false, "vram status --json", []string{"status", "--gpu", "0,1", "--accounting", "--json"}},
		{"status allocator", true, "vram status --json", []string{"status", "--gpu", "0", "--json"}},
		{"status simulated", false, "vram status --json", []string{"status", "--simulate", "3", "--seed", "5", "--json"}},
		{"watch simulated", false, "vram watch --json", []string{"watch", "--simulate", "2", "--interval", "20ms", "--count", "3", "--processes", "--json"}},
		{"watch allocator", true, "vram watch --json", []string{"watch", "--gpu", "0", "--interval", "20ms", "--process-interval", "10ms", "--count", "2", "--processes", "--json"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			f := testEnv(nil, nil)
			f.Now = time.Now // watch runs on the real clock
			if tt.channel {
				f.ChannelDir = dir
			}
			out, errs, code := run(t, f, tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			if tt.args[0] == "watch" {
				jsondoc.TestLines(t, tt.title, []byte(out))
			} else {
				jsondoc.Test(t, tt.title, []byte(out))
			}
		})
	}
}
