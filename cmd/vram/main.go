// Command vram manages and explains GPU memory: a monitor (status, watch,
// top), job diagnosis (run, fit), trace replay, and a node daemon (serve).
// The commands live in package cli; this file only starts them.
package main

import (
	"os"

	"github.com/vramhq/vram/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
