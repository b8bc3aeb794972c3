"""vram.cupy against a fake CuPy (testdata/fake_cupy): its import without
CuPy, its allocation functions on the simulated device, and install()'s
wiring. Real CuPy runs are for the GPU machine."""

import os
import unittest

from _support import LibraryTest, block_imports, run_python

FAKE_CUPY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "fake_cupy")


def run_fake(testcase, code, env=None):
    r = run_python("import cupy\nassert cupy.__file__.startswith(%r)\nimport vram, vram.cupy\n"
                   % FAKE_CUPY + code, env=env, path_first=[FAKE_CUPY])
    if r.returncode != 0:
        testcase.fail("child exited %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout


class ImportWithoutCupyTest(unittest.TestCase):
    def test_clear_import_error(self):
        r = run_python(block_imports("cupy") + """
try:
    import vram.cupy
except ImportError as e:
    print(e)
""")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("vram.cupy needs CuPy: pip install cupy", r.stdout)


class AllocatorTest(LibraryTest):
    def test_arrays_live_in_vram(self):
        out = run_fake(self, """
alloc = vram.cupy.allocator()
mp = alloc(4 << 20)
print(vram.memory_allocated(0) == 4 << 20, vram.cupy.memory_allocated() == 4 << 20)
seg = [s for s in vram.snapshot()["segments"] if any(b["address"] == mp.ptr for b in s["blocks"])]
print(hex(seg[0]["stream"]))
del mp
print(vram.memory_allocated(0))
print(alloc(0).ptr)
""", env={"FAKE_CUPY_STREAM": "0x55"})
        self.assertEqual(out.splitlines(), ["True True", "0x55", "0", "0"])

    def test_out_of_memory_is_cupys_and_vrams(self):
        out = run_fake(self, """
vram.configure("max_bytes:16MiB")
alloc = vram.cupy.allocator()
keep = alloc(10 << 20)
try:
    alloc(10 << 20)
except cupy.cuda.memory.OutOfMemoryError as e:
    print(isinstance(e, vram.OutOfMemoryError), isinstance(e, MemoryError))
    print(str(e).split(".")[0])
""")
        self.assertEqual(out.splitlines(), ["True True", "CUDA out of memory"])

    def test_stats_use_the_current_device(self):
        out = run_fake(self, """
cupy.cuda._device = 3
mp = vram.cupy.allocator()(1000)
print(vram.cupy.memory_allocated(), vram.cupy.memory_allocated(3), vram.cupy.memory_allocated(0))
print(vram.cupy.memory_allocated(cupy.cuda.Device(3)))
print("fragmented" in vram.cupy.memory_summary())
vram.cupy.reset_peak_memory_stats()
del mp
vram.cupy.empty_cache()
print(cupy.calls[-3:])
print(vram.cupy.memory_reserved())
""")
        self.assertEqual(out.splitlines(), [
            "1024 1024 0", "1024", "True",
            "[('setDevice', 3), ('deviceSynchronize', 3), ('setDevice', 3)]", "0"])

    def test_install(self):
        out = run_fake(self, """
vram.cupy.install()
vram.cupy.install()
sets = [c for c in cupy.calls if c[0] == "set_allocator"]
print(len(sets), sets[0][1] is vram.cupy.allocator(), vram.cupy.installed())
""", env={"VRAM_DEVICE": None})
        self.assertEqual(out.strip(), "1 True True")

    def test_install_refuses_the_simulated_device(self):
        out = run_fake(self, """
try:
    vram.cupy.install()
except vram.Error as e:
    print(e)
print(cupy.calls)
""")
        self.assertIn("VRAM_DEVICE=sim", out)
        self.assertTrue(out.rstrip().endswith("[]"))


if __name__ == "__main__":
    unittest.main()
