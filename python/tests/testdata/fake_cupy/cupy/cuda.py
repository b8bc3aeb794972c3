"""cupy.cuda of the fake CuPy."""

import os
import sys
import types

import cupy

_device = 0
_allocator = None


class _Stream:
    ptr = int(os.environ.get("FAKE_CUPY_STREAM", "0"), 0)


def get_current_stream():
    return _Stream()


def set_allocator(allocator=None):
    global _allocator
    cupy.calls.append(("set_allocator", allocator))
    _allocator = allocator


def alloc(size):
    return _allocator(size)


class Device:
    def __init__(self, device=None):
        self.id = _device if device is None else device


runtime = types.ModuleType("cupy.cuda.runtime")


def _get_device():
    return _device


def _set_device(d):
    global _device
    cupy.calls.append(("setDevice", d))
    _device = d


runtime.getDevice = _get_device
runtime.setDevice = _set_device
runtime.deviceSynchronize = lambda: cupy.calls.append(("deviceSynchronize", _device))

memory = types.ModuleType("cupy.cuda.memory")


class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__("Out of memory allocating %d bytes (allocated so far: %d bytes)." % (size, total))


class _Memory:
    def __init__(self, size, malloc_func, free_func, device_id):
        self.size, self.device_id, self._free = size, device_id, free_func
        self.ptr = malloc_func(size, device_id) if size > 0 else 0

    def __del__(self):
        if self.ptr:
            self._free(self.ptr, self.device_id)


class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset


class PythonFunctionAllocator:
    def __init__(self, malloc_func, free_func):
        self._malloc_func, self._free_func = malloc_func, free_func

    def malloc(self, size):
        return MemoryPointer(_Memory(size, self._malloc_func, self._free_func, _device), 0)


memory.OutOfMemoryError = OutOfMemoryError
memory.MemoryPointer = MemoryPointer
memory.PythonFunctionAllocator = PythonFunctionAllocator
sys.modules["cupy.cuda.runtime"] = runtime
sys.modules["cupy.cuda.memory"] = memory
