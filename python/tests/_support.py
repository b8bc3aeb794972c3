"""What the tests share: the package under test, the library check, subprocesses.

The tests run on libvram's simulated device (VRAM_DEVICE=sim, set here for
this process and its children), one device index per test where exact
statistics matter, so that tests do not see each other's allocations.

A missing libvram.so skips the tests that need it, unless
VRAM_REQUIRE_LIBRARY is set (CI), which turns the skip into a failure.
"""

import os
import subprocess
import sys
import textwrap
import unittest

PYTHON_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if sys.path[0] != PYTHON_DIR:
    sys.path.insert(0, PYTHON_DIR)

os.environ["VRAM_DEVICE"] = "sim"

import vram  # noqa: E402  (the package beside these tests)
from vram import _lib  # noqa: E402

assert os.path.dirname(os.path.dirname(os.path.abspath(vram.__file__))) == PYTHON_DIR, vram.__file__

MiB = 1 << 20


def need_library():
    """Skips the calling test (or class) when libvram.so is missing, or fails
    it when VRAM_REQUIRE_LIBRARY is set."""
    try:
        return _lib.library_path()
    except vram.LibraryNotFound as e:
        if os.environ.get("VRAM_REQUIRE_LIBRARY"):
            raise AssertionError("VRAM_REQUIRE_LIBRARY is set, but: %s" % e) from None
        raise unittest.SkipTest("libvram.so is not built (set VRAM_REQUIRE_LIBRARY=1 to fail "
                                "instead): %s" % e) from None


class LibraryTest(unittest.TestCase):
    """A test case whose tests need libvram.so."""

    @classmethod
    def setUpClass(cls):
        need_library()


def child_env(extra=None, path_first=()):
    """The environment of a child Python: this package first on PYTHONPATH,
    the simulated device, and extra (a None value removes the variable)."""
    env = dict(os.environ)
    env["VRAM_DEVICE"] = "sim"
    parts = list(path_first) + [PYTHON_DIR]
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    for k, v in (extra or {}).items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = v
    return env


def run_python(code, env=None, path_first=(), args=(), timeout=60, isolated_site=False):
    """Runs code (dedented) in a fresh interpreter; returns the CompletedProcess
    with text stdout and stderr."""
    cmd = [sys.executable]
    if isolated_site:
        cmd.append("-s")  # no user site-packages
    cmd += ["-c", textwrap.dedent(code)] + list(args)
    return subprocess.run(cmd, env=child_env(env, path_first), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def check_python(testcase, code, env=None, path_first=(), timeout=60):
    """run_python, failing testcase unless the child exits 0; returns its stdout."""
    r = run_python(code, env=env, path_first=path_first, timeout=timeout)
    if r.returncode != 0:
        testcase.fail("child exited %d\n--- stdout\n%s--- stderr\n%s" % (r.returncode, r.stdout, r.stderr))
    return r.stdout


# A finder that makes `import torch` (and cupy) fail as if not installed,
# for children on machines where they are.
BLOCK_IMPORTS = """
import sys
class _Block:
    names = %r
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.names:
            raise ModuleNotFoundError("No module named %%r" %% name, name=name)
        return None
sys.meta_path.insert(0, _Block())
"""


def block_imports(*names):
    return BLOCK_IMPORTS % (names,)
