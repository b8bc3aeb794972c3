package cmdutil

import (
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/proc"
)

// Factory is what the commands take from the outside world. Every NewCmd
// takes one; New returns the real one, and tests build theirs with fakes.
// Nothing in it is a package variable: two command trees built from two
// factories share nothing.
type Factory struct {
	// OpenHost opens a GPU host (gpu.Open); HostFlags.Open passes it the
	// flags and the fields below.
	OpenHost func(gpu.OpenOptions) (*gpu.Opened, error)
	// The outside world gpu.Open reads; nil or empty is the real one.
	OpenNVML   func() (gpu.Host, error)         // the driver
	ProcRoot   string                           // "/proc"
	LookupUser func(uid uint32) (string, error) // the host's user database
	Getenv     func(string) (string, bool)      // os.LookupEnv
	Hostname   func() (string, error)           // os.Hostname
	Now        func() time.Time                 // time.Now

	// Signaller signals real processes after their identity is checked
	// again (proc.Pidfd).
	Signaller proc.Signaller
}

// New returns the factory of the real world.
func New() *Factory {
	return &Factory{
		OpenHost:  gpu.Open,
		ProcRoot:  "/proc",
		Now:       time.Now,
		Signaller: proc.Pidfd,
	}
}
