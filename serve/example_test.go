package serve_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/vramhq/vram/gpu"
	"github.com/vramhq/vram/serve"
)

func ExampleParseConfig() {
	c, err := serve.ParseConfig("vram.yaml", []byte(`version: 1
interval: 500ms
http: {mutations: true, token_file: /etc/vram/token}
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Interval, c.HistoryInterval, c.RawRetention, c.MutationsEnabled())

	_, err = serve.ParseConfig("vram.yaml", []byte("version: 1\nsample_interval: 1s\n"))
	fmt.Println(err)
	// Output:
	// 500ms 10s 24h0m0s true
	// vram.yaml:2: sample_interval: unknown field (known here: version, interval, history_interval, retention, top_n, policy_file, http, alerts, kubernetes)
}

// A daemon over a simulated host: New, Run until the first sample is
// there, read the State, stop, Close.
func ExampleNew() {
	op, err := gpu.Open(gpu.OpenOptions{Simulate: 2, Seed: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "vram-example")
	defer os.RemoveAll(dir)
	d, err := serve.New(context.Background(), serve.Options{
		Opened: op, DB: filepath.Join(dir, "history.db"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx) }()
	s, ok := d.State()
	for ; !ok; s, ok = d.State() {
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	<-done
	fmt.Println(len(s.Devices), "GPUs, simulated:", s.Simulated, "healthy:", s.Devices[0].Healthy)
	fmt.Println(d.Close())
	// Output:
	// 2 GPUs, simulated: true healthy: true
	// <nil>
}
