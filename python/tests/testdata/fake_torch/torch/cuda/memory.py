"""torch.cuda.memory of the fake torch: the functions raise as PyTorch's do on
a plain pluggable allocator, except memory_reserved before the swap."""

import ctypes
import os

import torch

__all__ = [
    "memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "memory_reserved",
    "max_memory_allocated", "max_memory_reserved", "memory_cached", "max_memory_cached",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "reset_max_memory_allocated",
    "reset_max_memory_cached", "memory_summary", "memory_snapshot", "empty_cache",
    "CUDAPluggableAllocator", "change_current_allocator",
]


def _unsupported(name):
    def fn(*args, **kwargs):
        torch.calls.append(("native", name))
        raise RuntimeError("CUDAPluggableAllocator does not yet support %s" % name)
    fn.__name__ = name
    return fn


for _name in __all__[:15] + ["_snapshot", "_dump_snapshot", "_record_memory_history"]:
    globals()[_name] = _unsupported(_name)

_native_memory_reserved = memory_reserved  # noqa: F821


def memory_reserved(device=None):  # noqa: F811
    if _swapped is None:
        return int(os.environ.get("FAKE_TORCH_RESERVED", "0"))
    return _native_memory_reserved(device)


_HOOKS = ("set_init_fn", "set_reset_fn", "set_memory_fraction_fn", "set_record_stream_fn")
_swapped = None


class _NativeAllocator:
    def __init__(self, alloc_fn, free_fn):
        self.alloc_fn, self.free_fn = alloc_fn, free_fn
        missing = os.environ.get("FAKE_TORCH_MISSING_HOOKS", "").split(",")
        for hook in _HOOKS:
            if hook not in missing:
                setattr(self, hook, self._setter(hook))

    @staticmethod
    def _setter(hook):
        def set_fn(address):
            if not isinstance(address, int):
                raise TypeError("%s takes an int address, got %r" % (hook, address))
            torch.calls.append((hook, address))
        return set_fn


class CUDAPluggableAllocator:
    def __init__(self, path_to_so_file, alloc_fn_name, free_fn_name):
        lib = ctypes.CDLL(path_to_so_file)
        alloc_fn = ctypes.cast(getattr(lib, alloc_fn_name), ctypes.c_void_p).value
        free_fn = ctypes.cast(getattr(lib, free_fn_name), ctypes.c_void_p).value
        torch.calls.append(("CUDAPluggableAllocator", path_to_so_file, alloc_fn_name, free_fn_name))
        self._allocator = _NativeAllocator(alloc_fn, free_fn)

    def allocator(self):
        return self._allocator


def change_current_allocator(allocator):
    global _swapped
    if torch.cuda.is_initialized():
        raise RuntimeError("Can't swap an already initialized allocator")
    torch.calls.append(("change_current_allocator", allocator))
    _swapped = allocator
