"""vram under the real PyTorch and CuPy, on a GPU.

Skipped where torch (or cupy) with CUDA is missing, unless VRAM_REQUIRE_GPU
is set, which turns the skip into a failure. Each test runs in a fresh
process with VRAM_DEVICE unset (the GPU), since install() must come before
the process's first CUDA allocation.
"""

import importlib.util
import os
import tempfile
import unittest

from _support import LibraryTest, run_python, vram

_probe = {}


def _have(module):
    """Whether module imports with CUDA usable, asked once in a child."""
    if module not in _probe:
        if importlib.util.find_spec(module) is None:
            _probe[module] = "%s is not installed" % module
        else:
            code = {
                "torch": "import torch; assert torch.cuda.is_available(), 'no CUDA device'",
                "cupy": "import cupy; assert cupy.cuda.runtime.getDeviceCount() > 0",
            }[module]
            r = run_python(code, env={"VRAM_DEVICE": None}, timeout=300)
            _probe[module] = "" if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]
    return _probe[module]


def need(module):
    why = _have(module)
    if why:
        if os.environ.get("VRAM_REQUIRE_GPU"):
            raise AssertionError("VRAM_REQUIRE_GPU is set, but: " + why)
        raise unittest.SkipTest(why)


class GPUTest(LibraryTest):
    def gpu(self, code, env=None, path_first=(), timeout=300):
        e = {"VRAM_DEVICE": None, "PYTHONWARNINGS": "ignore"}
        e.update(env or {})
        r = run_python(code, env=e, path_first=path_first, timeout=timeout)
        if r.returncode != 0:
            self.fail("child exited %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
        return r.stdout


class TorchTest(GPUTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        need("torch")

    def test_tensors_live_in_vram(self):
        out = self.gpu("""
            import torch, vram, vram.torch
            vram.torch.install()
            x = torch.empty(4 << 20, dtype=torch.uint8, device="cuda")
            print(vram.memory_allocated(0) == 4 << 20, torch.cuda.memory_allocated() == 4 << 20)
            print(torch.cuda.memory_reserved() == 20 << 20)   # a 20 MiB large-pool segment
            seg = [s for s in torch.cuda.memory._snapshot()["segments"]
                   if any(b["address"] == x.data_ptr() for b in s["blocks"])]
            print(len(seg))
            x.fill_(7)
            print(int(x.sum().item()) == 7 * (4 << 20))
            del x
            torch.cuda.empty_cache()
            print(torch.cuda.memory_allocated(), torch.cuda.memory_reserved())
            print("fragmented" in torch.cuda.memory_summary())
        """)
        self.assertEqual(out.split(), ["True", "True", "True", "1", "True", "0", "0", "True"])

    def test_out_of_memory_is_catchable(self):
        out = self.gpu("""
            import torch, vram, vram.torch
            vram.torch.install("max_bytes:256MiB")
            keep = torch.empty(200 << 20, dtype=torch.uint8, device="cuda")
            try:
                torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
            except RuntimeError as e:
                print(str(e).startswith("CUDA out of memory."), vram.torch.is_out_of_memory(e))
            try:
                with vram.torch.raise_out_of_memory_as_torch():
                    torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
            except torch.OutOfMemoryError:
                print("torch.OutOfMemoryError")
            del keep
            y = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
            print(torch.cuda.memory_stats()["num_ooms"])
        """)
        self.assertEqual(out.splitlines(), ["True True", "torch.OutOfMemoryError", "2"])

    def test_memory_fraction_hook(self):
        out = self.gpu("""
            import torch, vram.torch
            vram.torch.install()
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction((64 << 20) / total)
            try:
                torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
            except RuntimeError as e:
                print("capped", "allowed" in str(e))
        """)
        self.assertEqual(out.strip(), "capped True")

    def test_streams_and_threads(self):
        out = self.gpu("""
            import threading, torch, vram.torch
            vram.torch.install()
            s = torch.cuda.Stream()
            x = torch.ones(1 << 20, device="cuda")
            with torch.cuda.stream(s):
                y = x * 2
            x.record_stream(s)
            del x
            torch.cuda.synchronize()
            print(int(y.sum().item()) == 2 << 20)
            errors = []
            def work():
                try:
                    for _ in range(200):
                        t = torch.empty(1 << 16, device="cuda")
                        del t
                except Exception as e:
                    errors.append(e)
            ts = [threading.Thread(target=work) for _ in range(8)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            print(errors, torch.cuda.memory_stats()["allocation.all.current"])
        """)
        self.assertEqual(out.splitlines(), ["True", "[] 1"])

    def test_graph_capture_raises(self):
        out = self.gpu("""
            import torch, vram, vram.torch
            vram.torch.install()
            g = torch.cuda.CUDAGraph()
            x = torch.ones(16, device="cuda")
            try:
                with torch.cuda.graph(g):
                    y = x * 2
            except vram.Error as e:
                print("refused")
            print(torch.cuda.current_stream() == torch.cuda.default_stream())
        """)
        self.assertEqual(out.splitlines(), ["refused", "True"])

    def test_snapshot_with_trace(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "snap.pickle")
            out = self.gpu("""
                import pickle, sys, torch, vram.torch
                vram.torch.install("trace_events:1000")
                torch.cuda.memory._record_memory_history()
                x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
                torch.cuda.memory._dump_snapshot(sys.argv[1])
                with open(sys.argv[1], "rb") as f:
                    s = pickle.load(f)
                print([e["action"] for e in s["device_traces"][0]][-1], s["device_traces"][0][-1]["size"])
            """.replace("sys.argv[1]", repr(path)))
        self.assertEqual(out.split(), ["alloc", str(3 << 20)])

    def test_fork_workers_after_install(self):
        out = self.gpu("""
            import torch, vram.torch
            from torch.utils.data import DataLoader, TensorDataset
            vram.torch.install()
            x = torch.ones(1000, device="cuda")
            data = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=2,
                              multiprocessing_context="fork")
            total = sum(float(b[0].sum()) for b in data)
            print(total == sum(range(64)), float((x * 2).sum()))
        """)
        self.assertEqual(out.strip(), "True 2000.0")

    def test_vram_run_site(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "installed")
            out = self.gpu("""
                import torch
                x = torch.zeros(1000, device="cuda")
                print(torch.cuda.memory_stats.__module__, torch.cuda.memory_allocated() > 0)
            """, env={"VRAM_RUN_MARKER": marker, "VRAM_ALLOC_CONF": "max_bytes:1GiB"},
                path_first=[vram.site_dir()])
            with open(marker) as f:
                pids = f.read().split()
        self.assertEqual(out.strip(), "vram.torch True")
        self.assertEqual(len(pids), 1)


class CupyTest(GPUTest):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        need("cupy")

    def test_arrays_live_in_vram(self):
        out = self.gpu("""
            import cupy, vram, vram.cupy
            vram.configure("max_bytes:64MiB")
            vram.cupy.install()
            a = cupy.zeros(1 << 20, dtype=cupy.uint8)
            print(vram.memory_allocated(0) == 1 << 20, int(a.sum()))
            del a
            print(vram.memory_allocated(0))
            try:
                cupy.empty(100 << 20, dtype=cupy.uint8)
            except cupy.cuda.memory.OutOfMemoryError as e:
                print(str(e).startswith("CUDA out of memory."))
        """)
        self.assertEqual(out.split(), ["True", "0", "0", "True"])


if __name__ == "__main__":
    unittest.main()
