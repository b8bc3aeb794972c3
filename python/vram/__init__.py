"""vram: the caching GPU-memory allocator of the vram project, from Python.

A thin ctypes wrapper over libvram.so (no compiled extension). This module
works without PyTorch or CuPy; ``vram.torch.install()`` and
``vram.cupy.install()`` put the allocator under those frameworks.

The library is found through $VRAM_LIBRARY, else libvram.so beside this
package, and loaded on first use: a missing library raises
``vram.LibraryNotFound`` (an ImportError) from the first call, not from
``import vram``.

Statistics use PyTorch's names and meanings (``memory_stats()`` has the keys
of ``torch.cuda.memory_stats()``); sizes are bytes; ``device`` is a device
index. After ``os.fork`` the child cannot use the library: every call raises
``vram.Error`` there, except ``free``, which does nothing.
"""

import collections
import operator
import os
import pickle

from . import _lib
from ._lib import Error, LibraryNotFound, OutOfMemoryError, library_path

__all__ = [
    "Error", "OutOfMemoryError", "LibraryNotFound",
    "library_path", "site_dir", "version", "info", "backend", "configure", "config",
    "malloc", "free", "record_stream", "set_memory_fraction", "set_limit",
    "memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "memory_summary", "snapshot", "dump_snapshot", "empty_cache",
    "Array", "empty", "from_dlpack",
]

_MAX_U64 = (1 << 64) - 1


def _int(value, name, what):
    if isinstance(value, bool):
        raise TypeError("vram.%s: %s must be an integer, got %r" % (what, name, value))
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("vram.%s: %s must be an integer, got %r (%s)"
                        % (what, name, value, type(value).__name__)) from None


def _size(size, what, name="size"):
    n = _int(size, name, what)
    if n < 0:
        raise ValueError("vram.%s: %s must not be negative, got %d" % (what, name, n))
    if n > _MAX_U64:
        raise ValueError("vram.%s: %s %d is larger than 2**64-1" % (what, name, n))
    return n


def _device(device, what, all_ok=False):
    """A device index; None means every device (-1) where all_ok."""
    if device is None and all_ok:
        return -1
    if device is None:
        raise TypeError("vram.%s: device must be a device index, got None" % what)
    d = _int(device, "device", what)
    if d < 0 or d > 0x7FFFFFFF:
        raise ValueError("vram.%s: device must be a device index (0, 1, ...), got %d" % (what, d))
    return d


def _stream(stream, what):
    """A stream handle as an int: an int, or a torch/CuPy stream object."""
    if stream is None:
        return 0
    for attr in ("cuda_stream", "ptr"):  # torch.cuda.Stream, cupy.cuda.Stream
        if not isinstance(stream, int) and hasattr(stream, attr):
            stream = getattr(stream, attr)
            break
    s = _int(stream, "stream", what)
    if s < 0 or s > _MAX_U64:
        raise ValueError("vram.%s: stream must be a stream handle (cudaStream_t), got %d" % (what, s))
    return s


def _ptr(ptr, what):
    p = _int(ptr, "ptr", what)
    if p < 0 or p > _MAX_U64:
        raise ValueError("vram.%s: ptr must be a device address, got %d" % (what, p))
    return p


def site_dir():
    """The folder that ``vram run --allocator vram`` puts first on PYTHONPATH.

    Its sitecustomize installs vram under PyTorch in every Python process of
    the job. Needs no library.
    """
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_site")


def info():
    """{"version", "backend" ("cuda" or "sim"), "pid", "devices", "config"} as a dict."""
    return _lib.call_json("info", "vram_info_json")


def version():
    """The version of the loaded libvram."""
    return info()["version"]


def backend():
    """"cuda", or "sim" with VRAM_DEVICE=sim (the simulated device)."""
    return info()["backend"]


def configure(conf):
    """Replaces the settings (VRAM_ALLOC_CONF syntax, e.g. "max_bytes:40GiB").

    The settings apply to devices that have not allocated yet; this fails
    once any device has allocated, and on a bad string (the message names
    the key).
    """
    if not isinstance(conf, str):
        raise TypeError("vram.configure: conf must be a str like \"max_bytes:40GiB\", got %r" % (conf,))
    _lib.call_status("configure", "vram_configure", conf.encode("utf-8"))


def config():
    """The settings in force, in VRAM_ALLOC_CONF syntax ("" for the defaults)."""
    return _lib.call_string("config", "vram_config")


def malloc(size, device=0, stream=0):
    """Allocates size bytes on device for stream; returns the address (0 for size 0).

    Raises vram.OutOfMemoryError when the allocator cannot serve it, and
    vram.Error on any other failure.
    """
    n = _size(size, "malloc")
    d = _device(device, "malloc")
    s = _stream(stream, "malloc")
    lib = _lib.lib_for("malloc")
    if n == 0:
        return 0
    ptr = lib.vram_try_malloc(n, d, s)
    if not ptr:
        raise _lib.last_error(lib, "malloc")
    return ptr


def free(ptr, device=0):
    """Returns ptr (from malloc on device) to the cache.

    Freeing 0 does nothing, and so does any free in a process forked from
    the one that loaded libvram. A pointer that is not live (double free,
    unknown pointer) raises vram.Error and changes nothing.
    """
    p = _ptr(ptr, "free")
    d = _device(device, "free")
    if p == 0 or _lib.forked():
        return
    _lib.call_status("free", "vram_try_free", p, d)


def record_stream(ptr, stream, device=0):
    """Marks ptr as used on stream: once freed, it is reused only after the
    work queued on stream so far has completed (like Tensor.record_stream)."""
    p = _ptr(ptr, "record_stream")
    s = _stream(stream, "record_stream")
    d = _device(device, "record_stream")
    _lib.call_status("record_stream", "vram_try_record_stream", p, d, s)


def set_memory_fraction(fraction, device=0):
    """Caps what device may reserve at fraction ((0, 1]) of its total memory,
    like torch.cuda.set_per_process_memory_fraction."""
    if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
        raise TypeError("vram.set_memory_fraction: fraction must be a number in (0, 1], got %r" % (fraction,))
    f = float(fraction)
    if not 0.0 < f <= 1.0:
        raise ValueError("vram.set_memory_fraction: fraction must be in (0, 1], got %r" % (fraction,))
    d = _device(device, "set_memory_fraction")
    _lib.call_status("set_memory_fraction", "vram_set_fraction", d, f)


def set_limit(nbytes, device=0):
    """Caps what device may reserve at nbytes (0: no byte cap beyond the settings)."""
    n = _size(nbytes, "set_limit", "nbytes")
    d = _device(device, "set_limit")
    _lib.call_status("set_limit", "vram_set_limit", d, n)


def _flatten(prefix, obj, out):
    if isinstance(obj, dict):
        for k, v in obj.items():
            _flatten(prefix + "." + k if prefix else k, v, out)
    else:
        out.append((prefix, obj))


def memory_stats(device=0):
    """The statistics of device, with torch.cuda.memory_stats()'s keys, sorted by key.

    A device that never allocated reports zeros.
    """
    d = _device(device, "memory_stats")
    items = []
    _flatten("", _lib.call_json("memory_stats", "vram_stats_json", d), items)
    items.sort()
    return collections.OrderedDict(items)


def memory_allocated(device=0):
    """Bytes in allocated blocks (after rounding) on device."""
    return memory_stats(device).get("allocated_bytes.all.current", 0)


def max_memory_allocated(device=0):
    """The peak of memory_allocated since the start or reset_peak_memory_stats."""
    return memory_stats(device).get("allocated_bytes.all.peak", 0)


def memory_reserved(device=0):
    """Bytes the allocator holds on device (allocated plus cached)."""
    return memory_stats(device).get("reserved_bytes.all.current", 0)


def max_memory_reserved(device=0):
    """The peak of memory_reserved since the start or reset_peak_memory_stats."""
    return memory_stats(device).get("reserved_bytes.all.peak", 0)


def reset_peak_memory_stats(device=None):
    """Resets the peaks of device (None: every device) to the current values."""
    d = _device(device, "reset_peak_memory_stats", all_ok=True)
    _lib.call_status("reset_peak_memory_stats", "vram_reset_peak_stats", d)


def reset_accumulated_memory_stats(device=None):
    """Resets the accumulated counts ("allocated", "freed", num_ooms, ...) of
    device (None: every device)."""
    d = _device(device, "reset_accumulated_memory_stats", all_ok=True)
    _lib.call_status("reset_accumulated_memory_stats", "vram_reset_accumulated_stats", d)


_POOL_ROWS = ("from large pool", "from small pool")


def memory_summary(device=0, abbreviated=False):
    """torch.cuda.memory_summary()'s table for device, plus vram's
    fragmentation line; abbreviated leaves out the per-pool rows."""
    d = _device(device, "memory_summary")
    text = _lib.call_string("memory_summary", "vram_summary", d)
    if abbreviated:
        text = "".join(line for line in text.splitlines(True)
                       if not any(row in line for row in _POOL_ROWS))
    return text


def snapshot():
    """The memory snapshot of every device, shaped like torch.cuda.memory._snapshot():
    {"segments": [...], "device_traces": [[...], ...], "allocator_settings": {...}}.

    device_traces holds the last trace_events allocations and frees of each
    device (set trace_events in the settings to record them).
    """
    return _lib.call_json("snapshot", "vram_snapshot_json")


def dump_snapshot(path="dump_snapshot.pickle"):
    """Writes snapshot() to path as a pickle, like torch.cuda.memory._dump_snapshot:
    PyTorch's memory_viz draws it and `vram replay` reads it."""
    s = snapshot()
    with open(os.fspath(path), "wb") as f:
        pickle.dump(s, f)


def empty_cache(device=None):
    """Releases the cached (unallocated) memory of device (None: every device)."""
    d = _device(device, "empty_cache", all_ok=True)
    _lib.call_status("empty_cache", "vram_empty_cache", d)


# DLPack (vram/dlpack.py); imported last: it uses _device above.
from .dlpack import Array, empty, from_dlpack  # noqa: E402
