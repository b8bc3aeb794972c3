"""torch.cuda of the fake torch (see torch/__init__.py)."""

import os

import torch

from . import graphs, memory  # noqa: F401
from .graphs import CUDAGraph, graph  # noqa: F401
from .memory import *  # noqa: F401,F403



class OutOfMemoryError(RuntimeError):
    pass


_initialized = os.environ.get("FAKE_TORCH_INITIALIZED") == "1"
_current = 0


def is_initialized():
    return _initialized


def _lazy_init():
    global _initialized
    _initialized = True


def current_device():
    torch.calls.append(("current_device",))
    _lazy_init()
    return _current


def set_device(d):
    global _current
    _lazy_init()
    _current = d


def synchronize(device=None):
    torch.calls.append(("synchronize", device))
