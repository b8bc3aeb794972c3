package cmdutil

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vramhq/vram/gpu"
)

// SignalContext goes through the factory's Notify and Stop: a signal a
// test delivers ends the context, and stop unsubscribes.
func TestSignalContext(t *testing.T) {
	f := New()
	var subscribed chan<- os.Signal
	var asked []os.Signal
	stopped := false
	f.Notify = func(c chan<- os.Signal, sig ...os.Signal) { subscribed, asked = c, sig }
	f.Stop = func(c chan<- os.Signal) { stopped = c == subscribed }

	ctx, stop := f.SignalContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	if len(asked) != 2 || asked[1] != syscall.SIGTERM {
		t.Fatalf("subscribed to %v", asked)
	}
	if ctx.Err() != nil {
		t.Fatal("ended before any signal")
	}
	subscribed <- syscall.SIGTERM
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a signal did not end the context")
	}
	stop()
	if !stopped {
		t.Error("stop did not unsubscribe")
	}
}

// The memory source of vram run and fit opens the factory's driver.
func TestMemorySourceUsesOpenNVML(t *testing.T) {
	f := New()
	f.OpenNVML = func() (gpu.Host, error) {
		return nil, errors.New("NVML library libnvidia-ml.so.1 not found")
	}
	if _, _, err := f.MemorySource(); err == nil || !strings.Contains(err.Error(), "libnvidia-ml.so.1 not found") {
		t.Errorf("memory source error %v", err)
	}
}

func TestIsTerminal(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if IsTerminal(devNull) || IsTerminal(strings.NewReader("")) {
		t.Error("/dev/null or a reader counted as a terminal")
	}
}
