"""vram.empty, __dlpack__ and vram.from_dlpack on the simulated device.

No other framework is installed here, so the consumer is vram itself and
ctypes: the capsules' names and the DLPack structs' fields are read
directly, and memory goes vram -> capsule -> vram.from_dlpack and back.
"""

import ctypes
import gc
import unittest

from _support import LibraryTest, vram
from vram import dlpack

DEV = 7  # this module's device: exact statistics


def live_allocations():
    return vram.memory_stats(DEV)["allocation.all.current"]


def capsule_name(cap):
    get_name = ctypes.PYFUNCTYPE(ctypes.c_char_p, ctypes.py_object)(("PyCapsule_GetName", ctypes.pythonapi))
    return get_name(cap)


def capsule_pointer(cap, name):
    return dlpack._capsule_get_pointer(cap, name)


class Producer:
    """A stand-in for another framework: hands out one capsule."""

    def __init__(self, capsule, device=(2, DEV)):
        self.capsule, self.device, self.calls = capsule, device, []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, **kw):
        self.calls.append(kw)
        return self.capsule


class DLPackTest(LibraryTest):
    def setUp(self):
        gc.collect()
        self.base = live_allocations()

    def tearDown(self):
        gc.collect()
        self.assertEqual(live_allocations(), self.base, "memory not returned")

    def test_empty_describes_itself(self):
        a = vram.empty((3, 4), "float32", device=DEV)
        self.assertEqual(a.shape, (3, 4))
        self.assertEqual(a.strides, (4, 1))
        self.assertEqual(a.dtype, "float32")
        self.assertEqual(a.nbytes, 48)
        self.assertNotEqual(a.data_ptr, 0)
        self.assertEqual(a.__dlpack_device__(), (2, DEV))
        self.assertEqual(live_allocations(), self.base + 1)
        a.close()
        self.assertEqual(live_allocations(), self.base)
        with self.assertRaises(ValueError):
            a.__dlpack__()

    def test_versioned_capsule_fields(self):
        a = vram.empty([2, 5], "bfloat16", device=DEV)
        cap = a.__dlpack__(max_version=(1, 1), stream=None)
        self.assertEqual(capsule_name(cap), b"dltensor_versioned")
        m = dlpack.DLManagedTensorVersioned.from_address(capsule_pointer(cap, b"dltensor_versioned"))
        self.assertEqual((m.version.major, m.version.minor), (1, 1))
        self.assertEqual(m.flags, 0)
        t = m.dl_tensor
        self.assertEqual((t.device.device_type, t.device.device_id), (2, DEV))
        self.assertEqual((t.dtype.code, t.dtype.bits, t.dtype.lanes), (4, 16, 1))
        self.assertEqual(t.ndim, 2)
        self.assertEqual([t.shape[i] for i in range(2)], [2, 5])
        self.assertEqual([t.strides[i] for i in range(2)], [5, 1])
        self.assertEqual(t.data, a.data_ptr)
        # The capsule holds the memory after the array is gone.
        del a
        gc.collect()
        self.assertEqual(live_allocations(), self.base + 1)
        del cap, m, t  # unconsumed: its destructor calls the deleter
        gc.collect()
        self.assertEqual(live_allocations(), self.base)

    def test_legacy_capsule_without_max_version(self):
        a = vram.empty(16, "uint8", device=DEV)
        for kw in ({}, {"max_version": (0, 8)}):
            cap = a.__dlpack__(**kw)
            self.assertEqual(capsule_name(cap), b"dltensor")
            m = dlpack.DLManagedTensor.from_address(capsule_pointer(cap, b"dltensor"))
            self.assertEqual(m.dl_tensor.data, a.data_ptr)
            self.assertEqual(m.dl_tensor.shape[0], 16)
            del cap, m

    def test_round_trip_shares_memory(self):
        a = vram.empty((4, 4), "int32", device=DEV)
        payload = bytes(range(64))
        a.copy_from_host(payload)
        for max_version in ((1, 0), None):
            b = vram.from_dlpack(a) if max_version else vram.from_dlpack(a.__dlpack__())
            self.assertEqual(b.data_ptr, a.data_ptr, "a copy was made")
            self.assertEqual((b.shape, b.strides, b.dtype, b.device), ((4, 4), (4, 1), "int32", DEV))
            self.assertEqual(b.to_bytes(), payload)
            b.copy_from_host(b"\xff" * 4)
            self.assertEqual(a.to_bytes(4), b"\xff" * 4)
            b.copy_from_host(payload[:4])
            del b
        # No more allocations than the one array.
        self.assertEqual(live_allocations(), self.base + 1)

    def test_consumed_capsule_is_renamed_and_deleter_runs_once(self):
        a = vram.empty(8, "float64", device=DEV)
        cap = a.__dlpack__(max_version=(1, 0))
        prod = Producer(cap)
        b = vram.from_dlpack(prod)
        self.assertEqual(prod.calls, [{"max_version": (1, 1)}])
        self.assertEqual(capsule_name(cap), b"used_dltensor_versioned")
        with self.assertRaises(TypeError):
            vram.from_dlpack(cap)  # used already
        a.close()
        del cap, prod
        gc.collect()
        # b still holds the memory: the imported tensor's deleter has not run.
        self.assertEqual(live_allocations(), self.base + 1)
        self.assertEqual(len(b.to_bytes()), 64)
        b.close()
        gc.collect()
        self.assertEqual(live_allocations(), self.base)

    def test_reexport_of_an_import(self):
        a = vram.empty(8, "float32", device=DEV)
        b = vram.from_dlpack(a)
        c = vram.from_dlpack(b)
        self.assertEqual(c.data_ptr, a.data_ptr)
        del a, b
        gc.collect()
        self.assertEqual(live_allocations(), self.base + 1)
        del c

    def test_refused_tensors(self):
        a = vram.empty((2, 2), "float32", device=DEV)
        cases = [
            ("device type", lambda t, m: setattr(t.device, "device_type", 1), "kDLCPU"),
            ("null data", lambda t, m: setattr(t, "data", None), "null data pointer"),
            ("overflow", lambda t, m: t.shape.__setitem__(0, 1 << 61), "size overflow"),
            ("version", lambda t, m: setattr(m.version, "major", 2), "version 2.1"),
            ("device index", lambda t, m: setattr(t.device, "device_id", DEV + 1), "device %d" % (DEV + 1)),
        ]
        for name, corrupt, want in cases:
            with self.subTest(name):
                cap = a.__dlpack__(max_version=(1, 1))
                m = dlpack.DLManagedTensorVersioned.from_address(capsule_pointer(cap, b"dltensor_versioned"))
                saved = bytes(ctypes.string_at(ctypes.addressof(m), ctypes.sizeof(m)))
                shape0 = m.dl_tensor.shape[0]
                corrupt(m.dl_tensor, m)
                with self.assertRaises(vram.Error) as cm:
                    vram.from_dlpack(cap, device=DEV)
                self.assertIn(want, str(cm.exception))
                # Not consumed: still the producer's, and its destructor deletes it.
                self.assertEqual(capsule_name(cap), b"dltensor_versioned")
                ctypes.memmove(ctypes.addressof(m), saved, len(saved))
                m.dl_tensor.shape[0] = shape0
                del cap, m
        gc.collect()
        self.assertEqual(live_allocations(), self.base + 1)

    def test_cpu_producer_refused_before_export(self):
        prod = Producer(None, device=(1, 0))
        with self.assertRaises(vram.Error) as cm:
            vram.from_dlpack(prod)
        self.assertIn("not CUDA", str(cm.exception))
        self.assertEqual(prod.calls, [])

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            vram.empty((2, 2), "float7", device=DEV)
        with self.assertRaises(ValueError):
            vram.empty((2, -1), device=DEV)
        with self.assertRaises(TypeError):
            vram.empty("x", device=DEV)
        with self.assertRaises(vram.Error):
            vram.empty((1 << 40, 1 << 40), device=DEV)
        a = vram.empty(4, device=DEV)
        with self.assertRaises(BufferError):
            a.__dlpack__(copy=True)
        with self.assertRaises(BufferError):
            a.__dlpack__(dl_device=(1, 0))
        with self.assertRaises(TypeError):
            vram.from_dlpack(object())
        with self.assertRaises(ValueError):
            a.copy_from_host(b"x" * 17)

    def test_dtype_names(self):
        class FakeTorchDtype:
            def __str__(self):
                return "torch.float16"
        for dt, want in (("half", "float16"), (FakeTorchDtype(), "float16"), ((2, 32, 4), (2, 32, 4)), ("bool", "bool")):
            a = vram.empty(2, dt, device=DEV)
            self.assertEqual(a.dtype, want)
            a.close()


if __name__ == "__main__":
    unittest.main()
