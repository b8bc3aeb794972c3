package cli

import (
	"runtime/debug"
	"strings"
)

// buildInfo reads the build information recorded in the binary; tests
// replace it.
var buildInfo = debug.ReadBuildInfo

// versionString is what vram --version prints after "vram version ":
// override when set (-ldflags -X), else the main module's version and the
// VCS revision, whether the tree had uncommitted changes, and the commit
// time, as the Go toolchain recorded them:
//
//	v1.2.0
//	v0.0.0-20261130100000-9a9b62f1c2d3+dirty, committed 2026-11-30T10:00:00Z
//	(devel) revision 9a9b62f1c2d3+modified, committed 2026-11-30T10:00:00Z
//
// "(devel)" is the toolchain's word for a build from a checkout rather
// than a released module version. Without any information it is "unknown".
func versionString(override string, read func() (*debug.BuildInfo, bool)) string {
	if override != "" {
		return override
	}
	info, ok := read()
	if !ok || info == nil {
		return "unknown (no build information in the binary)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	b.WriteString(v)
	if rev == "" && v == "(devel)" {
		b.WriteString(", no VCS revision recorded (built outside a git checkout, or with -buildvcs=false)")
	}
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		// Since Go 1.24 a build from a checkout has a pseudo-version
		// naming the revision (and +dirty); do not say it twice.
		if !strings.Contains(v, rev) {
			b.WriteString(" revision " + rev)
			if modified {
				b.WriteString("+modified")
			}
		}
		if at != "" {
			b.WriteString(", committed " + at)
		}
	}
	return b.String()
}
