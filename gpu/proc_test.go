package gpu

import (
	"fmt"
	"strings"
	"testing"
)

// The fixture process 8000 runs python3 -c with a multi-line program and an
// argument full of escape sequences, in a cgroup whose name has one.
func TestProcFSHostileStrings(t *testing.T) {
	d, err := fixtureProcs(t).Details(8000)
	if err != nil {
		t.Fatal(err)
	}
	wantArgs := []string{"python3", "-c", "import os, time, torch\nkeep = []\nprint(\"ready\", os.getpid())\n\ttime.sleep(60)\r\n", "--tag=\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9bK\x7f"}
	if fmt.Sprintf("%q", d.Cmdline) != fmt.Sprintf("%q", wantArgs) {
		t.Errorf("cmdline = %q, want it exactly as in /proc: %q", d.Cmdline, wantArgs)
	}
	p := Process{Cmdline: d.Cmdline, Cgroup: d.Cgroup, User: d.User}
	if got := p.Command(); got != strings.Join(wantArgs, " ") {
		t.Errorf("Command() = %q, want the exact joined command line", got)
	}
	wantDisplay := `python3 -c import os, time, torch\nkeep = []\nprint("ready", os.getpid())\n\ttime.sleep(60)\r\n --tag=\x1b[2J\x1b[H\x1b]0;owned\x07\x1b[31mred\x9bK\x7f`
	if got := p.DisplayCommand(); got != wantDisplay {
		t.Errorf("DisplayCommand() = %q, want %q", got, wantDisplay)
	}
	if got, want := Printable(d.Cgroup), `/user.slice/user-1000.slice/evil\x1b[5mblink.scope`; got != want {
		t.Errorf("Printable(cgroup) = %q, want %q", got, want)
	}
	// A process without a command line shows its comm, escaped the same way.
	if got := (Process{Comm: "a\x1b[2Jb"}).DisplayCommand(); got != `[a\x1b[2Jb]` {
		t.Errorf("DisplayCommand of comm = %q", got)
	}
}
