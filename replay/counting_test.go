package replay

import "github.com/vramhq/vram/alloc/cudadev"

// The CUDA backend must be counted by countingDevice, not fall back to the
// allocator's statistics.
var _ fullDevice = (*cudadev.Device)(nil)
