"""DLPack between vram and PyTorch, CuPy and JAX on the GPU, without a copy.

  VRAM_LIBRARY=.gpu/libvram.so PYTHONPATH=python python3 scripts/gpu/dlpack_check.py

For each framework that is installed (the others are reported SKIP):
  vram -> framework: vram.empty(...) filled from the host, taken by
      torch.from_dlpack / cupy.from_dlpack / jax.dlpack.from_dlpack; the
      framework's tensor must have the same device pointer and the same
      values, and a write through the framework must be visible to vram;
  framework -> vram: a tensor of the framework taken by vram.from_dlpack
      (and, for torch, a legacy capsule from torch.utils.dlpack.to_dlpack),
      with the same pointer and values, still valid after the framework's
      own reference is dropped;
  and every vram allocation given back at the end.
Prints one "ok ..." or "FAIL ..." line per check; exits 1 if any failed.
"""
import array
import gc
import sys

import vram

failed = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failed.append(what)


def floats(n, seed):
    return array.array("f", [float((i * 7 + seed) % 1000) for i in range(n)])


ROWS, COLS = 512, 256
N = ROWS * COLS


def vram_array(seed):
    a = vram.empty((ROWS, COLS), "float32", device=0)
    a.copy_from_host(floats(N, seed).tobytes())
    return a


def as_floats(b):
    x = array.array("f")
    x.frombytes(b)
    return x


def torch_checks():
    import torch
    a = vram_array(1)
    t = torch.from_dlpack(a)
    check(t.data_ptr() == a.data_ptr, "torch.from_dlpack(vram.empty): same pointer %#x" % a.data_ptr)
    check(t.device == torch.device("cuda", 0) and tuple(t.shape) == (ROWS, COLS) and t.dtype == torch.float32,
          "torch tensor: device %s shape %s dtype %s" % (t.device, tuple(t.shape), t.dtype))
    check(t.flatten()[:1000].tolist() == floats(N, 1)[:1000].tolist(), "torch reads the values vram wrote")
    t.fill_(2.5)
    torch.cuda.synchronize()
    check(as_floats(a.to_bytes(16)).tolist() == [2.5] * 4, "vram reads what torch wrote")
    before = vram.memory_allocated(0)
    a.close()
    check(vram.memory_allocated(0) == before, "memory held while the torch tensor lives")
    del t
    gc.collect()
    check(vram.memory_allocated(0) < before, "memory back to vram when the torch tensor is gone")

    x = torch.arange(N, device="cuda", dtype=torch.float32)
    v = vram.from_dlpack(x)
    check(v.data_ptr == x.data_ptr(), "vram.from_dlpack(torch tensor): same pointer %#x" % x.data_ptr())
    want = x[:1000].tolist()
    del x
    gc.collect()
    torch.cuda.synchronize()
    check(as_floats(v.to_bytes(4000)).tolist() == want, "vram reads the torch tensor after torch dropped it")
    v.close()
    y = torch.ones(64, 3, device="cuda", dtype=torch.float16)[:, 1]  # strided
    cap = torch.utils.dlpack.to_dlpack(y)  # legacy capsule
    w = vram.from_dlpack(cap)
    check(w.data_ptr == y.data_ptr() and w.strides == (3,) and w.dtype == "float16",
          "legacy torch capsule of a strided view: pointer, strides %s, dtype %s" % (w.strides, w.dtype))
    w.close()


def cupy_checks():
    import cupy
    a = vram_array(2)
    c = cupy.from_dlpack(a)
    check(c.data.ptr == a.data_ptr, "cupy.from_dlpack(vram.empty): same pointer %#x" % a.data_ptr)
    check(c.ravel()[:1000].get().tolist() == floats(N, 2)[:1000].tolist(), "cupy reads the values vram wrote")
    x = cupy.arange(N, dtype=cupy.float32)
    v = vram.from_dlpack(x)
    check(v.data_ptr == x.data.ptr, "vram.from_dlpack(cupy array): same pointer")
    check(as_floats(v.to_bytes(4000)).tolist() == x[:1000].get().tolist(), "vram reads the cupy array")
    del c, x
    v.close()
    a.close()


def jax_checks():
    import jax
    import jax.dlpack
    a = vram_array(3)
    try:
        j = jax.dlpack.from_dlpack(a)
    except TypeError:  # older JAX takes a capsule only
        j = jax.dlpack.from_dlpack(a.__dlpack__())
    ptr = j.unsafe_buffer_pointer() if hasattr(j, "unsafe_buffer_pointer") else j.addressable_data(0).unsafe_buffer_pointer()
    check(ptr == a.data_ptr, "jax.dlpack.from_dlpack(vram.empty): same pointer (%#x, vram %#x)" % (ptr, a.data_ptr))
    check([float(x) for x in j.ravel()[:100]] == floats(N, 3)[:100].tolist(), "jax reads the values vram wrote")
    del j
    a.close()


for name, fn in (("torch", torch_checks), ("cupy", cupy_checks), ("jax", jax_checks)):
    try:
        __import__(name)
    except ImportError as e:
        print("SKIP %s: %s" % (name, e), flush=True)
        continue
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (report and go on)
        check(False, "%s: %s: %s" % (name, type(e).__name__, e))
gc.collect()
check(vram.memory_allocated(0) == 0, "every vram allocation given back (allocated %d)" % vram.memory_allocated(0))
print("failed: %d" % len(failed) if failed else "all ok")
sys.exit(1 if failed else 0)
