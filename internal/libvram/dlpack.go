package libvram

import "github.com/vramhq/vram/alloc"

// Allocator returns the allocator of device, creating it on first use, for
// the callers that need Buffers (the DLPack entry points of libvram).
func (h *Host) Allocator(device int) (*alloc.Allocator, error) {
	h.keep.touch()
	return h.allocator(device)
}
