"""vram/_site/sitecustomize.py, which `vram run --allocator vram` puts first on PYTHONPATH."""

import os
import tempfile
import unittest

from _support import LibraryTest, run_python, vram
from test_torch import FAKE_TORCH

SITE = vram.site_dir()

# Keeps torch hidden behind vram's hook where it is installed, so that the
# hook still sees the import first.
HIDE_TORCH = """
import sys
class _Hide:
    def find_spec(self, name, path=None, target=None):
        if name == "torch":
            raise ModuleNotFoundError("No module named 'torch'", name="torch")
ours = [i for i, f in enumerate(sys.meta_path) if getattr(f, "vram_site", False)]
sys.meta_path.insert(ours[0] + 1 if ours else 0, _Hide())
"""


class SiteTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.user = tmp.name
        with open(os.path.join(self.user, "sitecustomize.py"), "w") as f:
            f.write("import sys\nprint('user sitecustomize ran')\nsys.user_site_marker = 42\n")

    def test_without_torch_does_nothing_and_chains(self):
        r = run_python(HIDE_TORCH + """
import sys
print(len([f for f in sys.meta_path if getattr(f, "vram_site", False)]))
print(getattr(sys, "user_site_marker", None))
try:
    import torch
except ModuleNotFoundError as e:
    print("no", e.name)
print("vram" in sys.modules, "vram.torch" in sys.modules)
print(sys.modules["sitecustomize"].chained.__file__)
""", path_first=[SITE, self.user])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), [
            "user sitecustomize ran", "1", "42", "no torch", "False False",
            os.path.join(self.user, "sitecustomize.py")])
        self.assertEqual(r.stderr, "")

    def test_no_other_sitecustomize(self):
        r = run_python("import sys; print(hasattr(sys.modules['sitecustomize'], 'chained'))",
                       path_first=[SITE])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines()[-1], "False")

    def test_twice_on_the_path_runs_once(self):
        # An installed copy and a source tree both on PYTHONPATH: the second
        # vram sitecustomize is skipped, the user's still runs.
        with tempfile.TemporaryDirectory() as other:
            with open(os.path.join(SITE, "sitecustomize.py")) as src:
                text = src.read()
            with open(os.path.join(other, "sitecustomize.py"), "w") as dst:
                dst.write(text)
            r = run_python("""
import sys
print(len([f for f in sys.meta_path if getattr(f, "vram_site", False)]))
""", path_first=[SITE, other, self.user])
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(), ["user sitecustomize ran", "1"])


class SiteInstallTest(LibraryTest):
    """With the fake torch (see test_torch.py): what the hook does on `import torch`."""

    def run_job(self, code, env=None, package_on_path=True):
        e = {"VRAM_DEVICE": None}
        if not package_on_path:
            e["PYTHONPATH"] = os.pathsep.join([SITE, FAKE_TORCH])
        e.update(env or {})
        return run_python(code, env=e, path_first=[SITE, FAKE_TORCH])

    def test_installs_right_after_import_torch(self):
        r = self.run_job("""
import sys
print("vram" in sys.modules)
import torch
print([c[0] for c in torch.calls][-1])
print(torch.cuda.memory_stats.__module__.split(".")[0])
import vram
print(vram.config())
""", env={"VRAM_ALLOC_CONF": "max_bytes:2GiB", "PYTHONWARNINGS": "ignore"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.splitlines(),
                         ["False", "change_current_allocator", "vram", "max_bytes:2147483648"])

    def test_finds_the_package_beside_itself(self):
        r = self.run_job("import torch, vram.torch; print(vram.torch.installed())",
                         env={"PYTHONWARNINGS": "ignore"}, package_on_path=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "True")

    def test_a_job_without_torch_is_left_alone(self):
        r = self.run_job("import sys; print(sorted(m for m in ('torch', 'vram') if m in sys.modules))")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "[]")

    def test_marks_the_processes_that_installed(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "installed")
            env = {"VRAM_RUN_MARKER": marker, "PYTHONWARNINGS": "ignore"}
            pids = []
            for code in ("import os, torch; print(os.getpid())", "import os; print(os.getpid())",
                         "import os, torch; print(os.getpid())"):
                r = self.run_job(code, env=env)
                self.assertEqual(r.returncode, 0, r.stderr)
                pids.append(r.stdout.strip())
            with open(marker) as f:
                self.assertEqual(f.read().split(), [pids[0], pids[2]])

    def test_unwritable_marker_is_reported_not_fatal(self):
        r = self.run_job("import torch; print('ran')",
                         env={"VRAM_RUN_MARKER": "/nonexistent/dir/installed", "PYTHONWARNINGS": "ignore"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "ran")
        self.assertIn("vram: VRAM_RUN_MARKER=/nonexistent/dir/installed", r.stderr)

    def test_failure_may_go_on_when_not_required(self):
        with tempfile.TemporaryDirectory() as tmp:
            marker = os.path.join(tmp, "installed")
            r = self.run_job("import torch\nprint(torch.cuda.memory_stats.__module__)",
                             env={"FAKE_TORCH_INITIALIZED": "1", "VRAM_REQUIRE_ALLOCATOR": "0",
                                  "VRAM_RUN_MARKER": marker})
            self.assertFalse(os.path.exists(marker))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "torch.cuda.memory")
        self.assertIn("going on with PyTorch's allocator", r.stderr)

    def test_failure_stops_the_job(self):
        cases = [
            ({"FAKE_TORCH_INITIALIZED": "1"}, "must run before the first CUDA allocation"),
            ({"VRAM_ALLOC_CONF": "max_bytes:lots"}, "max_bytes"),
            ({"VRAM_DEVICE": "sim"}, "VRAM_DEVICE=sim"),
            ({"VRAM_LIBRARY": "/nonexistent/libvram.so"}, "VRAM_LIBRARY=/nonexistent/libvram.so: no such file"),
            ({"FAKE_TORCH_CUDA": ""}, "has no CUDA support"),
            ({"VRAM_REQUIRE_ALLOCATOR": "1", "FAKE_TORCH_INITIALIZED": "1"}, "before the first CUDA"),
        ]
        for env, text in cases:
            with self.subTest(env=env):
                r = self.run_job("import torch\nprint('the job ran')", env=env)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertNotIn("the job ran", r.stdout)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertTrue(lines[0].startswith("vram: "), lines[0])
                self.assertIn(text, lines[0])


if __name__ == "__main__":
    unittest.main()
