"""Loading libvram.so and calling into it (ctypes).

The library is loaded on first use, not at import, so that ``import vram``
works (and ``vram.LibraryNotFound`` can be caught) when it is missing. The
prototypes below follow cmd/libvram/vram.h; keep them in step with it.
"""

import ctypes
import json
import os
import threading

ENV_LIBRARY = "VRAM_LIBRARY"
LIBRARY_NAME = "libvram.so"
BUILD_COMMAND = "go build -buildmode=c-shared -o python/vram/libvram.so ./cmd/libvram"


class Error(RuntimeError):
    """An error reported by libvram or by this package."""


class OutOfMemoryError(Error, MemoryError):
    """The allocator could not serve a request.

    The message is libvram's; like PyTorch's it starts with
    "CUDA out of memory." and then says what the allocator holds, how much of
    it is fragmented and what to do.
    """


class LibraryNotFound(Error, ImportError):
    """libvram.so was not found where this package looks for it."""


def bundled_path():
    """The path of the libvram.so that ships beside this package."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), LIBRARY_NAME)


def library_path():
    """The path of the library this package loads.

    $VRAM_LIBRARY when set, else libvram.so beside the package. Raises
    LibraryNotFound when that file does not exist.
    """
    env = os.environ.get(ENV_LIBRARY, "")
    bundled = bundled_path()
    if env:
        path = os.path.abspath(env)
        if os.path.isfile(path):
            return path
        raise LibraryNotFound(
            "vram: %s=%s: no such file (unset it to use %s, or point it at a "
            "libvram.so built with: %s)" % (ENV_LIBRARY, env, bundled, BUILD_COMMAND))
    if os.path.isfile(bundled):
        return bundled
    raise LibraryNotFound(
        "vram: libvram.so not found: %s is not set and %s does not exist; build "
        "it from the vram source tree with: %s (or set %s to its path)"
        % (ENV_LIBRARY, bundled, BUILD_COMMAND, ENV_LIBRARY))


c_int, c_double, c_size_t = ctypes.c_int, ctypes.c_double, ctypes.c_size_t
c_void_p, c_char_p, c_uint64 = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_uint64
c_intptr = ctypes.c_ssize_t  # intptr_t: pointer-sized and signed on every Linux ABI

# name: (restype, argtypes), every function of vram.h. Functions that return
# a caller-owned char * are declared c_void_p so the pointer survives to be
# released with vram_string_free.
PROTOTYPES = {
    # PyTorch's pluggable allocator. vram_malloc throws a C++ exception on
    # failure: never call it from Python (it would abort the process).
    "vram_malloc": (c_void_p, [c_size_t, c_int, c_void_p]),
    "vram_free": (None, [c_void_p, c_size_t, c_int, c_void_p]),
    "vram_init": (None, [c_int]),
    "vram_reset": (None, []),
    "vram_set_memory_fraction": (None, [c_double, c_int]),
    "vram_record_stream": (None, [c_void_p, c_void_p]),
    # CuPy.
    "vram_cupy_malloc": (c_intptr, [c_intptr, c_size_t, c_int]),
    "vram_cupy_free": (None, [c_intptr, c_intptr, c_int]),
    # The plain C interface.
    "vram_try_malloc": (c_void_p, [c_size_t, c_int, c_void_p]),
    "vram_try_free": (c_int, [c_void_p, c_int]),
    "vram_try_record_stream": (c_int, [c_void_p, c_int, c_void_p]),
    "vram_configure": (c_int, [c_char_p]),
    "vram_config": (c_void_p, []),
    "vram_set_fraction": (c_int, [c_int, c_double]),
    "vram_set_limit": (c_int, [c_int, c_uint64]),
    "vram_stats_json": (c_void_p, [c_int]),
    "vram_summary": (c_void_p, [c_int]),
    "vram_snapshot_json": (c_void_p, []),
    "vram_empty_cache": (c_int, [c_int]),
    "vram_reset_peak_stats": (c_int, [c_int]),
    "vram_reset_accumulated_stats": (c_int, [c_int]),
    "vram_info_json": (c_void_p, []),
    # DLPack.
    "vram_dlpack_empty": (c_void_p, [c_void_p, c_int, c_int, c_int, c_int, c_int]),
    "vram_dlpack_share": (c_void_p, [c_void_p, c_int]),
    "vram_dlpack_import": (c_void_p, [c_void_p, c_int, c_int]),
    "vram_dlpack_copy": (c_int, [c_void_p, c_void_p, c_size_t, c_int]),
    "vram_dlpack_delete": (None, [c_void_p, c_int]),
    "vram_last_error": (c_char_p, []),
    "vram_last_error_is_oom": (c_int, []),
    "vram_string_free": (None, [c_void_p]),
}

_lock = threading.Lock()
_lib = None
_path = None
_load_pid = None


def load():
    """The loaded library (ctypes.CDLL), loading it on first use."""
    global _lib, _path, _load_pid
    lib = _lib
    if lib is not None:
        return lib
    with _lock:
        if _lib is None:
            path = library_path()
            try:
                lib = ctypes.CDLL(path)
            except OSError as e:
                raise LibraryNotFound("vram: cannot load %s: %s (rebuild it with: %s)"
                                      % (path, e, BUILD_COMMAND)) from None
            missing = [n for n in PROTOTYPES if not hasattr(lib, n)]
            if missing:
                raise LibraryNotFound(
                    "vram: %s lacks %s: it is not a libvram built from this version "
                    "(rebuild it with: %s)" % (path, ", ".join(missing), BUILD_COMMAND))
            for name, (restype, argtypes) in PROTOTYPES.items():
                fn = getattr(lib, name)
                fn.restype = restype
                fn.argtypes = argtypes
            _path, _load_pid = path, os.getpid()
            _lib = lib
        return _lib


def loaded_path():
    """The path the library was loaded from (loading it if needed)."""
    load()
    return _path


def load_pid():
    """The process id that loaded the library, or None if not loaded yet."""
    return _load_pid


def forked():
    """Whether this process is a fork child of the one that loaded libvram."""
    return _load_pid is not None and os.getpid() != _load_pid


def lib_for(what):
    """The library, for a call named what; raises Error in a fork child."""
    lib = load()
    if os.getpid() != _load_pid:
        raise Error(
            "vram: %s: this process (pid %d) was forked from pid %d, which had loaded "
            "libvram; the library cannot be used after fork (its Go runtime does not "
            "survive it): start workers with multiprocessing's 'spawn' or "
            "'forkserver' method instead" % (what, os.getpid(), _load_pid))
    return lib


def function_address(name):
    """The address of an exported function of libvram, as an int."""
    return ctypes.cast(getattr(load(), name), c_void_p).value


def last_error(lib, what):
    """The calling thread's last libvram error, as an Error to raise."""
    msg = lib.vram_last_error()
    msg = msg.decode("utf-8", "replace") if msg else ""
    if not msg:
        msg = "vram: %s failed (libvram gave no message)" % what
    if lib.vram_last_error_is_oom():
        return OutOfMemoryError(msg)
    return Error(msg)


def take_string(lib, ptr, what):
    """The text of a caller-owned char * from libvram, released after reading."""
    if not ptr:
        raise last_error(lib, what)
    try:
        return ctypes.string_at(ptr).decode("utf-8", "replace")
    finally:
        lib.vram_string_free(ptr)


def call_string(what, fn_name, *args):
    lib = lib_for(what)
    return take_string(lib, getattr(lib, fn_name)(*args), what)


def call_json(what, fn_name, *args):
    text = call_string(what, fn_name, *args)
    try:
        return json.loads(text)
    except ValueError as e:
        raise Error("vram: %s: libvram returned malformed JSON (%s): %.200r" % (what, e, text)) from None


def call_status(what, fn_name, *args):
    """Calls a function that returns 0 or -1; raises the error on -1."""
    lib = lib_for(what)
    if getattr(lib, fn_name)(*args) != 0:
        raise last_error(lib, what)
