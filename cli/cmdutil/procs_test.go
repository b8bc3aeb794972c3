package cmdutil

import (
	"os"
	"runtime"
	"testing"
)

func TestOneP(t *testing.T) {
	before := runtime.GOMAXPROCS(0)
	t.Run("unset", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "") // put back after the test
		os.Unsetenv("GOMAXPROCS")
		restore := OneP()
		if got := runtime.GOMAXPROCS(0); got != 1 {
			t.Errorf("GOMAXPROCS %d under OneP, want 1", got)
		}
		restore()
		if got := runtime.GOMAXPROCS(0); got != before {
			t.Errorf("GOMAXPROCS %d after restore, want %d", got, before)
		}
	})
	t.Run("set", func(t *testing.T) {
		t.Setenv("GOMAXPROCS", "3")
		restore := OneP()
		if got := runtime.GOMAXPROCS(0); got != before {
			t.Errorf("GOMAXPROCS %d under OneP with the variable set, want it left at %d", got, before)
		}
		restore()
	})
}
