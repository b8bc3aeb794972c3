"""vram's allocator under CuPy.

    import vram.cupy
    vram.cupy.install()      # cupy arrays now live in vram's cache
    print(vram.cupy.memory_summary())

install() sets CuPy's allocator (cupy.cuda.set_allocator) to a
cupy.cuda.memory.PythonFunctionAllocator over vram.malloc and vram.free,
on CuPy's current device and stream. It does not use CuPy's
CFunctionAllocator with vram_cupy_malloc: that allocator does not check the
pointer it gets back, so an allocation that failed would become an array at
address 0 instead of an error. Here a failure raises an OutOfMemoryError
that is both CuPy's (cupy.cuda.memory.OutOfMemoryError) and vram's, with
vram's message.

Memory allocated before install() stays with CuPy's own pool.
"""

try:
    import cupy
except ImportError as _e:
    if isinstance(_e, ModuleNotFoundError) and _e.name == "cupy":
        raise ImportError("vram.cupy needs CuPy: pip install cupy-cuda12x (or the build for "
                          "your CUDA)", name="cupy") from None
    raise ImportError("vram.cupy needs CuPy, and importing it failed: %s" % _e, name="cupy") from _e

import threading

import vram
from vram import _stats as _stats_module

__all__ = [
    "install", "installed", "OutOfMemoryError", "device_index",
    "memory_stats", "memory_allocated", "memory_reserved", "max_memory_allocated",
    "max_memory_reserved", "reset_peak_memory_stats", "reset_accumulated_memory_stats",
    "memory_summary", "empty_cache", "snapshot", "dump_snapshot",
]

_CupyOOM = getattr(getattr(cupy.cuda, "memory", None), "OutOfMemoryError", None)

if _CupyOOM is not None:
    class OutOfMemoryError(_CupyOOM, vram.OutOfMemoryError):
        """Out of memory in vram: catchable as CuPy's OutOfMemoryError and as vram's."""

        def __init__(self, message):  # not CuPy's (size, total) constructor
            Exception.__init__(self, message)
else:  # pragma: no cover - every CuPy has it
    OutOfMemoryError = vram.OutOfMemoryError

_lock = threading.Lock()
_installed = False
_allocator = None


def installed():
    """Whether install() has made vram CuPy's allocator."""
    return _installed


def _stream():
    return cupy.cuda.get_current_stream().ptr


def _malloc(size, device_id):
    """PythonFunctionAllocator's malloc: an address, or an exception."""
    try:
        return vram.malloc(size, device_id, _stream())
    except vram.OutOfMemoryError as e:
        raise OutOfMemoryError(str(e)) from None


def _free(ptr, device_id):
    vram.free(ptr, device_id)


def allocator():
    """The allocator function install() gives CuPy, for cupy.cuda.using_allocator."""
    global _allocator
    if _allocator is None:
        _allocator = cupy.cuda.memory.PythonFunctionAllocator(_malloc, _free).malloc
    return _allocator


def install():
    """Makes vram CuPy's allocator for new allocations (a second call does nothing).

    Raises vram.Error on VRAM_DEVICE=sim: simulated memory cannot hold arrays.
    """
    global _installed
    with _lock:
        if _installed:
            return
        if vram.backend() == "sim":
            raise vram.Error("vram.cupy.install: VRAM_DEVICE=sim puts libvram on its simulated "
                             "device, whose memory cannot hold CuPy arrays; unset VRAM_DEVICE")
        cupy.cuda.set_allocator(allocator())
        _installed = True


def device_index(device=None, what="device"):
    """A device index from None (CuPy's current device), an int or a cupy.cuda.Device."""
    if device is None:
        return cupy.cuda.runtime.getDevice()
    if hasattr(device, "id") and not isinstance(device, int):
        return device.id
    return vram._device(device, what)


_stats = _stats_module.Stats(device_index)
memory_stats = _stats.memory_stats
memory_allocated = _stats.memory_allocated
max_memory_allocated = _stats.max_memory_allocated
memory_reserved = _stats.memory_reserved
max_memory_reserved = _stats.max_memory_reserved
reset_peak_memory_stats = _stats.reset_peak_memory_stats
reset_accumulated_memory_stats = _stats.reset_accumulated_memory_stats
memory_summary = _stats.memory_summary


def empty_cache():
    """Waits for the devices vram serves, then releases their cached memory."""
    current = cupy.cuda.runtime.getDevice()
    try:
        for d in vram.info().get("devices") or []:
            cupy.cuda.runtime.setDevice(d)
            cupy.cuda.runtime.deviceSynchronize()
    finally:
        cupy.cuda.runtime.setDevice(current)
    vram.empty_cache(None)


def snapshot():
    return vram.snapshot()


def dump_snapshot(path="dump_snapshot.pickle"):
    vram.dump_snapshot(path)
