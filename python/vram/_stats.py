"""The statistics functions of torch.cuda's names over vram's allocator, for
a framework binding (vram.torch, vram.cupy): one definition, bound to the
binding's own way of naming a device (its device_index(device, what))."""

import vram


class Stats:
    """torch.cuda's statistics functions for one framework binding.

    device_index(device, what) turns the binding's device argument (None
    for its current device) into vram's device index; what names the
    function for its error messages."""

    def __init__(self, device_index):
        self._index = device_index

    def memory_stats(self, device=None):
        """torch.cuda.memory_stats() from vram: an OrderedDict sorted by key."""
        return vram.memory_stats(self._index(device, "memory_stats"))

    def memory_allocated(self, device=None):
        """Bytes in allocated blocks (allocated_bytes.all.current)."""
        return self.memory_stats(device).get("allocated_bytes.all.current", 0)

    def max_memory_allocated(self, device=None):
        """The peak of memory_allocated since the last reset."""
        return self.memory_stats(device).get("allocated_bytes.all.peak", 0)

    def memory_reserved(self, device=None):
        """Bytes the allocator holds from the device (reserved_bytes.all.current)."""
        return self.memory_stats(device).get("reserved_bytes.all.current", 0)

    def max_memory_reserved(self, device=None):
        """The peak of memory_reserved since the last reset."""
        return self.memory_stats(device).get("reserved_bytes.all.peak", 0)

    def reset_peak_memory_stats(self, device=None):
        """Sets every peak to its current value."""
        vram.reset_peak_memory_stats(self._index(device, "reset_peak_memory_stats"))

    def reset_accumulated_memory_stats(self, device=None):
        """Zeroes the allocation and free counters."""
        vram.reset_accumulated_memory_stats(self._index(device, "reset_accumulated_memory_stats"))

    def memory_summary(self, device=None, abbreviated=False):
        """torch.cuda.memory_summary()'s table from vram, plus its fragmentation line."""
        return vram.memory_summary(self._index(device, "memory_summary"), abbreviated=abbreviated)
