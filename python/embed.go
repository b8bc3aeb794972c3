// Package python holds the source of the vram Python package, for
// `vram run --allocator vram`, which writes it to a temporary folder that
// the job's PYTHONPATH then names.
package python

import "embed"

// Package holds vram/*.py and vram/_site/*.py: the Python package without
// the built libvram.so, which vram run finds on its own (--libvram,
// $VRAM_LIBRARY, beside the vram binary).
//
//go:embed vram/*.py vram/_site/*.py
var Package embed.FS
