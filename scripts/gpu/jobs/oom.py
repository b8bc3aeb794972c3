"""A real out-of-memory error.

--mode demand: allocate 1 GiB tensors until PyTorch raises OutOfMemoryError
  (the job needs more than the GPU has). Expected cause: demand.
--mode fragmentation: fill most of the GPU with 6 MiB tensors (three per
  20 MiB segment of the caching allocator), free two of every three so that
  every segment keeps one live block and cannot be released, then ask for
  one large tensor: the cache holds far more free bytes than the request,
  none of them contiguous. Expected cause: fragmentation.
"""
import argparse

import torch
from common import say

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--mode", choices=["demand", "fragmentation"], default="demand")
ap.add_argument("--fill", type=float, default=0.85, help="fraction of the GPU to fill (fragmentation)")
a = ap.parse_args()
free, total = torch.cuda.mem_get_info()
say(f"oom --mode {a.mode}: GPU has {total / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free")
if a.mode == "demand":
    held = []
    while True:
        held.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
        if len(held) % 16 == 0:
            say(f"holding {len(held)} GiB")
else:
    n = int(free * a.fill) // (6 << 20)
    blocks = [torch.empty(6 << 20, dtype=torch.uint8, device="cuda") for _ in range(n)]
    blocks = blocks[::3]   # keep the first block of every 20 MiB segment
    torch.cuda.synchronize()
    say(f"kept {len(blocks)} of {n} blocks: allocated {torch.cuda.memory_allocated() / 2**30:.1f} GiB, "
        f"reserved {torch.cuda.memory_reserved() / 2**30:.1f} GiB")
    free, _ = torch.cuda.mem_get_info()
    want = free + (torch.cuda.memory_reserved() - torch.cuda.memory_allocated()) // 2
    say(f"asking for {want / 2**30:.1f} GiB in one piece")
    x = torch.empty(want, dtype=torch.uint8, device="cuda")
    say("unexpected: the allocation succeeded")
