"""A stand-in for CuPy with only what vram.cupy touches (see fake_torch).

Its PythonFunctionAllocator behaves as CuPy's does: malloc(size) calls
malloc_func(size, device_id) for size > 0 and the memory calls
free_func(ptr, device_id) when it is collected. It records calls in
cupy.calls; FAKE_CUPY_STREAM sets the current stream's handle.
"""

calls = []

from . import cuda  # noqa: E402,F401
