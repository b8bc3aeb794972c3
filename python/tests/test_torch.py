"""vram.torch: its import without PyTorch, and its wiring, against a fake torch.

The fake (testdata/fake_torch) records what install() does to it. These
tests check that vram.torch calls the right PyTorch functions with the
right arguments and replaces the right names; whether PyTorch then
allocates through libvram is for the tests on a GPU machine.

The children run with the CUDA backend selected (VRAM_DEVICE unset), since
install() refuses the simulated device; nothing here allocates, so no GPU
is needed.
"""

import os
import unittest

from _support import LibraryTest, block_imports, run_python

FAKE_TORCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "testdata", "fake_torch")

PRELUDE = """
import ctypes, json, warnings
warnings.simplefilter("always")
import torch
assert torch.__version__ == "0.0+fake", torch.__file__
import vram, vram.torch
from vram import _lib

def addr(name):
    return ctypes.cast(getattr(ctypes.CDLL(_lib.library_path()), name), ctypes.c_void_p).value

def names(calls):
    return [c[0] for c in calls]
"""


def run_fake(code, env=None):
    e = {"VRAM_DEVICE": None}
    e.update(env or {})
    return run_python(PRELUDE + code, env=e, path_first=[FAKE_TORCH])


class ImportWithoutTorchTest(unittest.TestCase):
    def test_clear_import_error(self):
        r = run_python(block_imports("torch") + """
try:
    import vram.torch
except ImportError as e:
    print(e)
    print(e.name)
import vram  # the package itself still works
print(vram.site_dir() != "")
""")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         ["vram.torch needs PyTorch: pip install torch", "torch", "True"])

    def test_broken_torch_says_why(self):
        r = run_python("""
import sys
class Broken:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise ImportError("libcudart.so.12: cannot open shared object file")
sys.meta_path.insert(0, Broken())
try:
    import vram.torch
except ImportError as e:
    print(e)
""")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("vram.torch needs PyTorch, and importing it failed: libcudart.so.12", r.stdout)


class InstallTest(LibraryTest):
    def check(self, code, env=None):
        r = run_fake(code, env)
        if r.returncode != 0:
            self.fail("child exited %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
        return r

    def test_install_wires_the_allocator_and_its_hooks(self):
        r = self.check("""
with warnings.catch_warnings(record=True) as w:
    vram.torch.install()
calls = torch.calls
path = _lib.library_path()
assert calls[0] == ("CUDAPluggableAllocator", path, "vram_malloc", "vram_free"), calls[0]
hooks = dict(c for c in calls if c[0].startswith("set_"))
want = {"set_init_fn": addr("vram_init"), "set_reset_fn": addr("vram_reset"),
        "set_memory_fraction_fn": addr("vram_set_memory_fraction"),
        "set_record_stream_fn": addr("vram_record_stream")}
assert hooks == want, (hooks, want)
swap = [c for c in calls if c[0] == "change_current_allocator"]
assert len(swap) == 1
native = swap[0][1].allocator()
assert (native.alloc_fn, native.free_fn) == (addr("vram_malloc"), addr("vram_free"))
assert names(calls).index("change_current_allocator") > names(calls).index("set_record_stream_fn")
assert vram.torch.installed()
limits = [x for x in w if issubclass(x.category, vram.torch.LimitationWarning)]
assert len(limits) == 1, [str(x.message) for x in w]
print(limits[0].message)
""")
        self.assertIn("CUDA graph capture", r.stdout)
        self.assertIn("CUDA IPC", r.stdout)
        self.assertIn("MemPool", r.stdout)
        self.assertIn("cudnn.benchmark", r.stdout)

    def test_install_patches_torch_cuda(self):
        r = self.check("""
vram.torch.install()
replaced = {
    "memory_stats": vram.torch.memory_stats,
    "memory_allocated": vram.torch.memory_allocated,
    "memory_reserved": vram.torch.memory_reserved,
    "max_memory_allocated": vram.torch.max_memory_allocated,
    "max_memory_reserved": vram.torch.max_memory_reserved,
    "reset_peak_memory_stats": vram.torch.reset_peak_memory_stats,
    "reset_accumulated_memory_stats": vram.torch.reset_accumulated_memory_stats,
    "memory_summary": vram.torch.memory_summary,
    "memory_stats_as_nested_dict": vram.torch.memory_stats_as_nested_dict,
    "empty_cache": vram.torch.empty_cache,
}
for name, fn in replaced.items():
    assert getattr(torch.cuda, name) is fn, name
    assert getattr(torch.cuda.memory, name) is fn, name
assert torch.cuda.memory._snapshot is vram.torch.snapshot
assert torch.cuda.memory._dump_snapshot is vram.torch.dump_snapshot
for name in ("memory_cached", "max_memory_cached", "reset_max_memory_allocated",
             "reset_max_memory_cached", "memory_snapshot"):
    assert getattr(torch.cuda, name).__module__ == "vram.torch", name
    assert getattr(torch.cuda.memory, name).__module__ == "vram.torch", name
# They answer, from vram, where PyTorch's would raise.
s = torch.cuda.memory_stats()
assert s == vram.memory_stats(0) and list(s) == sorted(s)
assert torch.cuda.memory_allocated("cuda:0") == 0
assert torch.cuda.max_memory_reserved(torch.device("cuda", 0)) == 0
assert torch.cuda.memory_cached() == 0 and torch.cuda.max_memory_cached() == 0
nested = torch.cuda.memory_stats_as_nested_dict()
assert nested["allocated_bytes"]["all"]["current"] == 0
assert nested["num_ooms"] == s["num_ooms"]
assert "fragmented" in torch.cuda.memory_summary()
assert "from large pool" not in torch.cuda.memory_summary(abbreviated=True)
snap = torch.cuda.memory._snapshot()
assert set(snap) == {"segments", "device_traces", "allocator_settings"}
assert torch.cuda.memory_snapshot() == snap["segments"]
torch.cuda.reset_peak_memory_stats()
torch.cuda.reset_accumulated_memory_stats(0)
torch.cuda.reset_max_memory_allocated()
import os, pickle, tempfile
with tempfile.TemporaryDirectory() as d:
    p = os.path.join(d, "s.pickle")
    torch.cuda.memory._dump_snapshot(p)
    with open(p, "rb") as f:
        assert pickle.load(f)["allocator_settings"]["allocator"] == "vram"
assert "native" not in names(torch.calls), torch.calls
print("current_device" in names(torch.calls))
print(sorted(vram.torch.patched_names())[:2])
""")
        # CUDA was never initialized: device None means 0 without initializing it.
        self.assertEqual(r.stdout.splitlines()[0], "False")

    def test_device_arguments(self):
        self.check("""
vram.torch.install()
di = vram.torch.device_index
assert di(None) == 0 and "current_device" not in names(torch.calls)
assert di(3) == 3 and di("cuda:2") == 2 and di("cuda") == 0 and di("1") == 1
assert di(torch.device("cuda", 5)) == 5 and di(torch.device("cuda:4")) == 4
torch.cuda.set_device(7)
assert di(None) == 7 and di("cuda") == 7 and di(torch.device("cuda")) == 7
for bad in ("cpu", "cuda:x", torch.device("cpu"), -1):
    try:
        di(bad)
    except (ValueError, TypeError) as e:
        assert "device" in str(e), e
    else:
        raise AssertionError("accepted %r" % (bad,))
""")

    def test_empty_cache_synchronizes_then_releases(self):
        self.check("""
vram.torch.install()
torch.cuda.empty_cache()   # CUDA not initialized: nothing to wait for
assert "synchronize" not in names(torch.calls)
torch.cuda._lazy_init()
orig = vram.info
vram.info = lambda: dict(orig(), devices=[0, 2])
seen = []
orig_empty = vram.empty_cache
vram.empty_cache = lambda device=None: seen.append(("vram.empty_cache", device, names(torch.calls).count("synchronize")))
torch.cuda.empty_cache()
assert [c for c in torch.calls if c[0] == "synchronize"] == [("synchronize", 0), ("synchronize", 2)], torch.calls
assert seen == [("vram.empty_cache", None, 2)], seen
""")

    def test_graph_capture_raises(self):
        r = self.check("""
vram.torch.install()
g = torch.cuda.CUDAGraph()
for attempt in (lambda: g.capture_begin(), lambda: torch.cuda.graph(g)):
    try:
        attempt()
    except vram.Error as e:
        print(e)
    else:
        raise AssertionError("capture did not raise")
assert "capture_begin" not in names(torch.calls)
assert "graph.__enter__" not in names(torch.calls)
""")
        lines = r.stdout.splitlines()
        self.assertEqual(len(lines), 2)
        for line in lines:
            self.assertIn("CUDA graph capture is not supported on vram's allocator", line)

    def test_install_twice(self):
        r = self.check("""
vram.torch.install("max_bytes:1GiB")
n = len(torch.calls)
vram.torch.install("max_bytes:1GiB")
vram.torch.install()
print(vram.config())
vram.torch.install("max_bytes:2GiB")   # nothing allocated yet: the settings still change
print(vram.config())
assert len(torch.calls) == n, torch.calls[n:]
try:
    vram.torch.install("max_bytes:lots")
except vram.Error as e:
    print(e)
""")
        lines = r.stdout.splitlines()
        self.assertEqual(lines[:2], ["max_bytes:1073741824", "max_bytes:2147483648"])
        self.assertIn("max_bytes", lines[2])

    def test_bad_settings_stop_install(self):
        r = self.check("""
try:
    vram.torch.install("max_bytes:lots")
except vram.Error as e:
    print(e)
assert "change_current_allocator" not in names(torch.calls)
assert not vram.torch.installed()
""")
        self.assertIn("max_bytes", r.stdout)

    def test_too_late(self):
        r = self.check("""
try:
    vram.torch.install()
except vram.Error as e:
    print(e)
assert "change_current_allocator" not in names(torch.calls)
assert torch.cuda.memory_stats.__module__ != "vram.torch"
""", env={"FAKE_TORCH_INITIALIZED": "1", "FAKE_TORCH_RESERVED": str(3 << 30)})
        self.assertIn("must run before the first CUDA allocation", r.stdout)
        self.assertIn("its allocator holds 3.0 GiB", r.stdout)
        self.assertIn("vram run --allocator vram", r.stdout)

    def test_swap_refused_by_pytorch(self):
        r = self.check("""
def refuse(a):
    raise RuntimeError("Can't swap an already initialized allocator")
torch.cuda.memory.change_current_allocator = refuse
try:
    vram.torch.install()
except vram.Error as e:
    print(e)
assert not vram.torch.installed()
""")
        self.assertIn("must run before the first CUDA allocation", r.stdout)
        self.assertIn("PyTorch: Can't swap an already initialized allocator", r.stdout)

    def test_refusals(self):
        cases = [
            ({"VRAM_DEVICE": "sim"}, "VRAM_DEVICE=sim"),
            ({"FAKE_TORCH_CUDA": ""}, "has no CUDA support"),
        ]
        for env, text in cases:
            with self.subTest(env=env):
                r = self.check("""
try:
    vram.torch.install()
except vram.Error as e:
    print(e)
assert not vram.torch.installed()
""", env=env)
                self.assertIn(text, r.stdout)

    def test_missing_hook_warns(self):
        r = self.check("""
with warnings.catch_warnings(record=True) as w:
    vram.torch.install()
msgs = [str(x.message) for x in w]
print([m for m in msgs if "has no" in m][0])
assert "set_record_stream_fn" not in [c[0] for c in torch.calls]
assert "change_current_allocator" in names(torch.calls)
""", env={"FAKE_TORCH_MISSING_HOOKS": "set_record_stream_fn"})
        self.assertIn("has no set_record_stream_fn", r.stdout)
        self.assertIn("Tensor.record_stream is not seen by vram", r.stdout)

    def test_pytorch_alloc_conf_warns(self):
        r = self.check("""
with warnings.catch_warnings(record=True) as w:
    vram.torch.install()
print([str(x.message) for x in w if "PYTORCH_CUDA_ALLOC_CONF" in str(x.message)][0])
""", env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        self.assertIn("applies to PyTorch's own allocator, not vram's", r.stdout)

    def test_out_of_memory(self):
        r = self.check("""
oom = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 ... vram: ...")
other = RuntimeError("CUDA error: an illegal memory access was encountered")
print(vram.torch.is_out_of_memory(oom), vram.torch.is_out_of_memory(other),
      vram.torch.is_out_of_memory(torch.cuda.OutOfMemoryError("x")), vram.torch.is_out_of_memory(ValueError()))
try:
    with vram.torch.raise_out_of_memory_as_torch():
        raise oom
except torch.cuda.OutOfMemoryError as e:
    print(type(e).__name__, str(e) == str(oom), e.__cause__ is oom)
for exc in (other, ValueError("v")):
    try:
        with vram.torch.raise_out_of_memory_as_torch():
            raise exc
    except Exception as e:
        print(e is exc)
with vram.torch.raise_out_of_memory_as_torch():
    pass
""")
        self.assertEqual(r.stdout.splitlines(), ["True False True False", "OutOfMemoryError True True", "True", "True"])

    def test_record_memory_history_warns_when_tracing_is_off(self):
        r = self.check("""
vram.torch.install()
with warnings.catch_warnings(record=True) as w:
    torch.cuda.memory._record_memory_history()
    torch.cuda.memory._record_memory_history(max_entries=10)
print(len(w), w[0].message if w else "")
""")
        self.assertTrue(r.stdout.startswith("1 "), r.stdout)
        self.assertIn("trace_events", r.stdout)
        r = self.check("""
vram.torch.install("trace_events:1000")
with warnings.catch_warnings(record=True) as w:
    torch.cuda.memory._record_memory_history()
print(len(w))
""")
        self.assertEqual(r.stdout.strip(), "0")


if __name__ == "__main__":
    unittest.main()
