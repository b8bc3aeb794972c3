"""The package's build backend (python/_backend) and an offline pip install."""

import base64
import csv
import hashlib
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
import zipfile

from _support import PYTHON_DIR, need_library

sys.path.insert(0, os.path.join(PYTHON_DIR, "_backend"))
import vram_build  # noqa: E402

HAVE_LIBRARY = os.path.isfile(os.path.join(PYTHON_DIR, "vram", "libvram.so"))


class WheelTest(unittest.TestCase):
    def build(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        name = vram_build.build_wheel(tmp.name)
        return name, zipfile.ZipFile(os.path.join(tmp.name, name))

    def test_contents_and_record(self):
        name, whl = self.build()
        names = set(whl.namelist())
        for want in ("vram/__init__.py", "vram/_lib.py", "vram/torch.py", "vram/cupy.py",
                     "vram/_site/sitecustomize.py", "vram-0.1.0.dist-info/METADATA",
                     "vram-0.1.0.dist-info/WHEEL", "vram-0.1.0.dist-info/RECORD"):
            self.assertIn(want, names)
        self.assertFalse([n for n in names if "__pycache__" in n or n.endswith(".pyc")])
        self.assertFalse([n for n in names if n.startswith("tests/")])
        self.assertEqual("vram/libvram.so" in names, HAVE_LIBRARY)
        wheel = whl.read("vram-0.1.0.dist-info/WHEEL").decode()
        if HAVE_LIBRARY:
            self.assertIn("Root-Is-Purelib: false", wheel)
            self.assertNotIn("-any.whl", name)
        else:
            self.assertIn("Tag: py3-none-any", wheel)
        meta = whl.read("vram-0.1.0.dist-info/METADATA").decode()
        self.assertIn("Name: vram\n", meta)
        self.assertIn("Requires-Python: >=3.8\n", meta)

        rows = list(csv.reader(io.StringIO(whl.read("vram-0.1.0.dist-info/RECORD").decode())))
        recorded = {r[0] for r in rows}
        self.assertEqual(recorded, names)
        for path, digest, size in rows:
            if path.endswith("RECORD"):
                self.assertEqual((digest, size), ("", ""))
                continue
            data = whl.read(path)
            want = "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            self.assertEqual((digest, int(size)), (want, len(data)), path)

    def test_sdist_leaves_out_the_built_library(self):
        with tempfile.TemporaryDirectory() as tmp:
            name = vram_build.build_sdist(tmp)
            members = tarfile.open(os.path.join(tmp, name)).getnames()
        self.assertIn("vram-0.1.0/_backend/vram_build.py", members)
        self.assertIn("vram-0.1.0/vram/_site/sitecustomize.py", members)
        self.assertFalse([m for m in members if m.endswith((".so", ".h"))])


@unittest.skipUnless(os.environ.get("VRAM_TEST_PIP", "1") != "0", "VRAM_TEST_PIP=0")
class PipInstallTest(unittest.TestCase):
    """`pip install ./python` in a fresh venv, offline (no index, no build dependencies)."""

    def test_install_in_a_venv(self):
        need_library()
        with tempfile.TemporaryDirectory() as tmp:
            venv = os.path.join(tmp, "venv")
            r = subprocess.run([sys.executable, "-m", "venv", venv], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, universal_newlines=True)
            if r.returncode != 0:
                self.skipTest("python -m venv does not work here: " + r.stdout[-300:])
            py = os.path.join(venv, "bin", "python")
            r = subprocess.run([py, "-m", "pip", "install", "--no-index", "--no-build-isolation",
                                PYTHON_DIR], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True, timeout=300)
            self.assertEqual(r.returncode, 0, r.stdout)
            env = dict(os.environ, VRAM_DEVICE="sim")
            if HAVE_LIBRARY:  # the installed copy must find its own
                env.pop("VRAM_LIBRARY", None)
            env.pop("PYTHONPATH", None)
            r = subprocess.run([py, "-c", "import vram; vram.free(vram.malloc(1000)); "
                                "print(vram.__file__); print(vram.library_path())"],
                               cwd=tmp, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               universal_newlines=True)
            self.assertEqual(r.returncode, 0, r.stdout)
            lines = r.stdout.splitlines()
            self.assertTrue(lines[0].startswith(venv), lines)
            if HAVE_LIBRARY:
                self.assertEqual(lines[1], os.path.join(os.path.dirname(lines[0]), "libvram.so"))


if __name__ == "__main__":
    unittest.main()
