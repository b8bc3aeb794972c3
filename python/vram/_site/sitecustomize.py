# vram-site: this line marks vram's own sitecustomize (see _chain).
"""Puts vram's allocator under PyTorch in every Python process of a job.

`vram run --allocator vram -- CMD` puts this folder first on PYTHONPATH, so
Python runs this file at startup. It does not import torch itself (that
would slow down every Python process of the job): it waits for the
process's own `import torch`, and right after it has finished calls
vram.torch.install($VRAM_ALLOC_CONF), before the program can allocate. A
process that never imports torch is left alone.

If the install fails, the process prints one line starting "vram:" to
standard error and exits with status 1: the job asked for vram's allocator
and must not run on PyTorch's instead. With VRAM_REQUIRE_ALLOCATOR=0 it
prints the line and goes on, on PyTorch's allocator.

Once installed, it appends the process id to the file $VRAM_RUN_MARKER
names, if set: that is how `vram run` learns that the job runs on vram.

Then the next sitecustomize on sys.path, if any, runs as it would have
without this one.
"""

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE_PARENT = os.path.dirname(os.path.dirname(_HERE))  # the folder that holds vram/
_MARK = b"# vram-site:"


def _say(msg):
    sys.stderr.write(msg if msg.startswith("vram:") else "vram: " + msg)
    sys.stderr.write("\n")
    sys.stderr.flush()


def _fail(msg):
    if os.environ.get("VRAM_REQUIRE_ALLOCATOR", "1") == "0":
        _say(msg + " (VRAM_REQUIRE_ALLOCATOR=0: going on with PyTorch's allocator)")
        return
    _say(msg)
    raise SystemExit(1)


def _mark():
    path = os.environ.get("VRAM_RUN_MARKER")
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, b"%d\n" % os.getpid())
        finally:
            os.close(fd)
    except OSError as e:
        _say("VRAM_RUN_MARKER=%s: %s (vram run will not know this process uses vram)" % (path, e))


def _install():
    if importlib.util.find_spec("vram") is None:
        sys.path.append(_PACKAGE_PARENT)
    try:
        import vram
        import vram.torch
    except ImportError as e:
        return _fail("--allocator vram: %s" % e)
    try:
        vram.torch.install(os.environ.get("VRAM_ALLOC_CONF") or None)
    except vram.Error as e:
        return _fail(str(e))
    except Exception as e:  # PyTorch's own failure, e.g. loading the library
        return _fail("vram.torch.install: %s: %s" % (type(e).__name__, e))
    _mark()


class _AfterTorch:
    """A meta-path finder that lets `import torch` proceed and calls
    _install once the torch module has run."""

    vram_site = True

    def find_spec(self, name, path=None, target=None):
        if name != "torch":
            return None
        if self in sys.meta_path:
            sys.meta_path.remove(self)  # once, and not in the search below
        spec = importlib.util.find_spec(name)
        loader = getattr(spec, "loader", None)
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec  # torch is not installed: Python reports it as usual

        def exec_then_install(module):
            exec_module(module)
            _install()

        loader.exec_module = exec_then_install
        return spec


def _hook():
    if "torch" in sys.modules:
        _install()
    elif not any(getattr(f, "vram_site", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterTorch())


def _is_ours(origin):
    try:
        with open(origin, "rb") as f:
            return f.read(len(_MARK)) == _MARK
    except OSError:
        return False


def _chain():
    """Runs the first other sitecustomize on sys.path (not vram's own)."""
    for entry in sys.path:
        spec = importlib.machinery.PathFinder.find_spec("sitecustomize", [entry])
        if spec is None or spec.loader is None or not spec.origin or _is_ours(spec.origin):
            continue
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        globals()["chained"] = module
        return


_hook()
_chain()
