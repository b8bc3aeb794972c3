"""A stand-in for PyTorch, for testing vram.torch's wiring on machines without it.

It has only what vram.torch touches, records what is done to it in
torch.calls, and is steered by environment variables:

  FAKE_TORCH_CUDA              torch.version.cuda ("" for a CPU-only build; default "12.8")
  FAKE_TORCH_INITIALIZED=1     torch.cuda.is_initialized() is true from the start
  FAKE_TORCH_MISSING_HOOKS     comma-separated hook setters the allocator lacks
  FAKE_TORCH_RESERVED          what PyTorch's own allocator reports as reserved

Its functions behave as PyTorch's do on a plain pluggable allocator: the
statistics raise "does not yet support". It proves nothing about PyTorch.
"""

import os

__version__ = "0.0+fake"
calls = []


class _Version:
    cuda = os.environ.get("FAKE_TORCH_CUDA", "12.8") or None


version = _Version()


class device:
    def __init__(self, spec, index=None):
        if isinstance(spec, str) and ":" in spec:
            spec, index = spec.split(":")
            index = int(index)
        self.type, self.index = spec, index

    def __repr__(self):
        return "device(type=%r, index=%r)" % (self.type, self.index)


from . import cuda  # noqa: E402,F401
