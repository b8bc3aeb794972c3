"""DLPack for vram: arrays of vram memory that other frameworks take without a copy.

``vram.empty(shape, dtype, device=0)`` returns an ``Array`` of vram memory
(uninitialised, compact row-major) with ``__dlpack__`` and
``__dlpack_device__``, so ``torch.from_dlpack(a)``, ``cupy.from_dlpack(a)``
and ``jax.dlpack.from_dlpack(a)`` see the same device memory.
``vram.from_dlpack(obj)`` does the reverse: a tensor of another framework
(anything with ``__dlpack__``, or a DLPack capsule) becomes an ``Array``
over the same memory; the producer gets it back (its deleter runs) once
the Array and every tensor made from it are gone.

The capsules follow the Python specification of DLPack: ``__dlpack__``
returns a PyCapsule named "dltensor_versioned" holding a
DLManagedTensorVersioned (DLPack 1.x) when the consumer passes
``max_version`` with major version 1 or more, else one named "dltensor"
holding the legacy DLManagedTensor. A consumer renames the capsule to
"used_..." when it takes the tensor; the capsule's destructor calls the
deleter only if that did not happen.

Streams: every copy vram makes is synchronous and ``empty`` queues no
work, so the memory is ready on any stream; ``stream`` is accepted and not
used. Work that the caller queued on the memory itself must be ordered by
the caller.
"""

import ctypes
import operator

from . import _lib

__all__ = ["Array", "empty", "from_dlpack", "DTYPES"]

KDL_CUDA = 2
KDL_CUDA_MANAGED = 13
FLAG_READ_ONLY = 1
FLAG_IS_COPIED = 2

# name: (DLPack type code, bits, lanes)
DTYPES = {
    "int8": (0, 8, 1), "int16": (0, 16, 1), "int32": (0, 32, 1), "int64": (0, 64, 1),
    "uint8": (1, 8, 1), "uint16": (1, 16, 1), "uint32": (1, 32, 1), "uint64": (1, 64, 1),
    "float16": (2, 16, 1), "float32": (2, 32, 1), "float64": (2, 64, 1),
    "bfloat16": (4, 16, 1), "complex64": (5, 64, 1), "complex128": (5, 128, 1), "bool": (6, 8, 1),
}
_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "bool_": "bool",
            "int": "int64", "long": "int64", "cfloat": "complex64", "cdouble": "complex128"}
_NAMES = {v: k for k, v in DTYPES.items()}


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class DLPackVersion(ctypes.Structure):
    _fields_ = [("major", ctypes.c_uint32), ("minor", ctypes.c_uint32)]


class DLManagedTensorVersioned(ctypes.Structure):
    _fields_ = [("version", DLPackVersion), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p),
                ("flags", ctypes.c_uint64), ("dl_tensor", DLTensor)]


# The capsule API of CPython, through ctypes.pythonapi (the GIL is held).
_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_api = ctypes.pythonapi
_capsule_new = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_char_p, _DESTRUCTOR)(
    ("PyCapsule_New", _api))
_capsule_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
# In the destructor the capsule is being freed: pass it as a raw pointer, so
# that no reference to it is taken.
_capsule_is_valid_raw = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(("PyCapsule_IsValid", _api))
_capsule_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_capsule_set_name = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(("PyCapsule_SetName", _api))

# Capsule names: module constants, so the char * they give lives as long as
# the capsules.
VERSIONED = b"dltensor_versioned"
LEGACY = b"dltensor"
USED_VERSIONED = b"used_dltensor_versioned"
USED_LEGACY = b"used_dltensor"


def _destroy_capsule(cap):
    # Called by CPython when a capsule made by __dlpack__ is freed: the
    # deleter runs only if no consumer took (and renamed) the capsule.
    try:
        for name, legacy in ((VERSIONED, 0), (LEGACY, 1)):
            if _capsule_is_valid_raw(cap, name):
                ptr = _capsule_get_pointer_raw(cap, name)
                if ptr and not _lib.forked():
                    _lib.load().vram_dlpack_delete(ptr, legacy)
                return
    except Exception:  # noqa: BLE001 (nothing can be raised from a destructor)
        pass


_destroy_capsule_c = _DESTRUCTOR(_destroy_capsule)


def _dtype(dtype, what):
    if isinstance(dtype, tuple) and len(dtype) == 3:
        return tuple(operator.index(x) for x in dtype)
    name = str(dtype)
    for prefix in ("torch.", "cupy.", "numpy.", "jnp."):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if hasattr(dtype, "name") and isinstance(getattr(dtype, "name"), str):  # numpy/cupy dtypes
        name = dtype.name
    name = _ALIASES.get(name, name)
    if name not in DTYPES:
        raise TypeError("vram.%s: unknown dtype %r; use one of %s or a DLPack (code, bits, lanes) tuple"
                        % (what, dtype, ", ".join(sorted(DTYPES))))
    return DTYPES[name]


def _shape(shape, what):
    if isinstance(shape, bool):
        raise TypeError("vram.%s: shape must be an int or a sequence of ints, got %r" % (what, shape))
    try:
        return (operator.index(shape),)
    except TypeError:
        pass
    try:
        dims = tuple(shape)
    except TypeError:
        raise TypeError("vram.%s: shape must be an int or a sequence of ints, got %r" % (what, shape)) from None
    out = []
    for d in dims:
        if isinstance(d, bool):
            raise TypeError("vram.%s: shape must hold ints, got %r" % (what, shape))
        try:
            d = operator.index(d)
        except TypeError:
            raise TypeError("vram.%s: shape must hold ints, got %r" % (what, shape)) from None
        if d < 0:
            raise ValueError("vram.%s: dimension %d is negative in shape %r" % (what, d, shape))
        out.append(d)
    return tuple(out)


class Array:
    """Device memory held by vram, described as a DLPack tensor.

    Made by ``vram.empty`` or ``vram.from_dlpack``; not constructed
    directly. The memory stays valid while the Array, or any tensor another
    framework made of it, is alive.
    """

    def __init__(self, _tensor, _device, _source=None):
        self._ptr = _tensor  # the base DLManagedTensorVersioned * (made by vram)
        self._device = _device
        self._source = _source  # what from_dlpack imported (kept for repr only)
        m = DLManagedTensorVersioned.from_address(_tensor)
        t = m.dl_tensor
        self._shape = tuple(t.shape[i] for i in range(t.ndim))
        self._strides = tuple(t.strides[i] for i in range(t.ndim))
        dt = (t.dtype.code, t.dtype.bits, t.dtype.lanes)
        self._dtype = _NAMES.get(dt, dt)
        self._itemsize = t.dtype.bits // 8 * t.dtype.lanes
        self._data = (t.data or 0) + t.byte_offset
        self._flags = m.flags

    def _live(self, what):
        if self._ptr is None:
            raise ValueError("vram.Array.%s: the array was closed" % what)
        return _lib.lib_for(what)

    # The array's description.
    shape = property(lambda self: self._shape, doc="Dimensions, as a tuple.")
    strides = property(lambda self: self._strides, doc="Strides in elements, as a tuple.")
    dtype = property(lambda self: self._dtype, doc="Element type name (or a DLPack (code, bits, lanes) tuple).")
    device = property(lambda self: self._device, doc="CUDA device index.")
    itemsize = property(lambda self: self._itemsize, doc="Bytes per element.")
    readonly = property(lambda self: bool(self._flags & FLAG_READ_ONLY), doc="Whether writes are refused.")
    is_copied = property(lambda self: bool(self._flags & FLAG_IS_COPIED),
                         doc="Whether the producer of an imported tensor said it made a copy.")

    @property
    def data_ptr(self):
        """The device address of the first element."""
        return self._data

    @property
    def nbytes(self):
        """Bytes the array spans (compact arrays: the product of the shape times the item size)."""
        if any(d == 0 for d in self._shape):
            return 0
        last = sum((d - 1) * s for d, s in zip(self._shape, self._strides))
        return (last + 1) * self._itemsize

    def __repr__(self):
        state = "" if self._ptr is not None else ", closed"
        return "vram.Array(shape=%r, dtype=%r, device=%d, data_ptr=%#x%s)" % (
            self._shape, self._dtype, self._device, self._data, state)

    def __dlpack_device__(self):
        return (KDL_CUDA, self._device)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of this memory (see the module's doc)."""
        lib = self._live("__dlpack__")
        if copy:
            raise BufferError("vram.Array.__dlpack__: copy=True is not supported (vram exports its memory, never a copy)")
        if dl_device is not None and tuple(dl_device) != (KDL_CUDA, self._device):
            raise BufferError("vram.Array.__dlpack__: the array is on %r, not on the requested %r"
                              % ((KDL_CUDA, self._device), tuple(dl_device)))
        if stream is not None and not isinstance(stream, int):
            raise TypeError("vram.Array.__dlpack__: stream must be an int or None, got %r" % (stream,))
        versioned = max_version is not None and tuple(max_version)[0] >= 1
        ptr = lib.vram_dlpack_share(self._ptr, 0 if versioned else 1)
        if not ptr:
            raise _lib.last_error(lib, "__dlpack__")
        try:
            return _capsule_new(ptr, VERSIONED if versioned else LEGACY, _destroy_capsule_c)
        except BaseException:
            lib.vram_dlpack_delete(ptr, 0 if versioned else 1)
            raise

    def copy_from_host(self, data):
        """Copies bytes-like data (at most nbytes) to the start of the array."""
        lib = self._live("copy_from_host")
        if self.readonly:
            raise ValueError("vram.Array.copy_from_host: the array is read-only")
        view = memoryview(data).cast("B")
        if view.nbytes > self.nbytes:
            raise ValueError("vram.Array.copy_from_host: %d bytes into an array of %d" % (view.nbytes, self.nbytes))
        buf = (ctypes.c_char * view.nbytes).from_buffer_copy(view)
        if lib.vram_dlpack_copy(self._ptr, buf, view.nbytes, 0) != 0:
            raise _lib.last_error(lib, "copy_from_host")

    def to_bytes(self, n=None):
        """The first n bytes of the array (default: nbytes), copied to the host."""
        lib = self._live("to_bytes")
        n = self.nbytes if n is None else operator.index(n)
        if not 0 <= n <= self.nbytes:
            raise ValueError("vram.Array.to_bytes: %d bytes out of an array of %d" % (n, self.nbytes))
        buf = ctypes.create_string_buffer(n)
        if lib.vram_dlpack_copy(self._ptr, buf, n, 1) != 0:
            raise _lib.last_error(lib, "to_bytes")
        return buf.raw

    def close(self):
        """Drops this array's hold on the memory now (tensors made from it keep theirs)."""
        ptr, self._ptr = self._ptr, None
        if ptr is not None and not _lib.forked():
            _lib.load().vram_dlpack_delete(ptr, 0)

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (interpreter shutdown)
            pass


def empty(shape, dtype="float32", device=0):
    """A new Array of vram memory (uninitialised) of shape and dtype on CUDA device `device`.

    dtype is a name ("float32", "bfloat16", ...; torch, NumPy and CuPy
    dtypes work too) or a DLPack (code, bits, lanes) tuple.
    """
    dims = _shape(shape, "empty")
    code, bits, lanes = _dtype(dtype, "empty")
    from . import _device
    d = _device(device, "empty")
    lib = _lib.lib_for("empty")
    arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
    ptr = lib.vram_dlpack_empty(arr, len(dims), code, bits, lanes, d)
    if not ptr:
        raise _lib.last_error(lib, "empty")
    return Array(ptr, d)


def from_dlpack(obj, device=None):
    """An Array over the memory of obj (a tensor with __dlpack__, or a DLPack capsule), without a copy.

    The tensor must be CUDA device memory; device defaults to its own
    device. The producer's deleter runs once this Array and every tensor
    made from it are gone. A tensor vram refuses (another device type, a
    size that overflows, a null data pointer, an unknown version) raises
    vram.Error and stays the producer's.
    """
    from . import _device
    capsule = obj
    if hasattr(obj, "__dlpack__"):
        if hasattr(obj, "__dlpack_device__"):
            dev_type, dev_id = obj.__dlpack_device__()
            if int(dev_type) not in (KDL_CUDA, KDL_CUDA_MANAGED):
                raise _lib.Error("vram.from_dlpack: the tensor is on DLPack device type %d, not CUDA (%d): "
                                 "vram takes only CUDA device memory" % (int(dev_type), KDL_CUDA))
            if device is None:
                device = int(dev_id)
        try:
            capsule = obj.__dlpack__(max_version=(1, 1))
        except TypeError:  # a producer of the legacy protocol only
            capsule = obj.__dlpack__()
    if _capsule_is_valid(capsule, VERSIONED):
        name, used, legacy = VERSIONED, USED_VERSIONED, 0
    elif _capsule_is_valid(capsule, LEGACY):
        name, used, legacy = LEGACY, USED_LEGACY, 1
    else:
        raise TypeError("vram.from_dlpack: expected a tensor with __dlpack__ or an unused DLPack capsule "
                        "(named \"dltensor_versioned\" or \"dltensor\"), got %r" % (obj,))
    ptr = _capsule_get_pointer(capsule, name)
    if device is None:  # a bare capsule: the tensor's own device
        struct = DLManagedTensor if legacy else DLManagedTensorVersioned
        device = struct.from_address(ptr).dl_tensor.device.device_id
    d = _device(device, "from_dlpack")
    lib = _lib.lib_for("from_dlpack")
    base = lib.vram_dlpack_import(ptr, legacy, d)
    if not base:
        raise _lib.last_error(lib, "from_dlpack")
    _capsule_set_name(capsule, used)  # consumed: its destructor must not call the deleter
    return Array(base, d, _source=obj)
