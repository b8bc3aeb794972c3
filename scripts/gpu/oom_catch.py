"""A job that fills the GPU in 256 MiB steps until it runs out of memory,
catches the error, frees half and goes on, then exits 0. Under
`vram run --allocator vram --limit L` it must stop at L, catch the error and
finish; under plain `vram run --limit L`, vram ends it at the limit.
Prints the figures vram's and PyTorch's statistics give."""
import time

import torch

held = []
caught = None
for i in range(4096):
    try:
        held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        held[-1].fill_(1)
    except RuntimeError as e:
        caught = e
        break
    time.sleep(0.01)
n = len(held)
print("allocated %d x 256 MiB = %.2f GiB before: %s" % (n, n / 4, str(caught).split(". ")[0] if caught else "no error"))
print("is torch.OutOfMemoryError:", isinstance(caught, torch.OutOfMemoryError),
      "| message starts:", str(caught)[:60] if caught else None)
del held[: n // 2]
for _ in range(n // 4):
    held.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
torch.cuda.synchronize()
time.sleep(0.5)
free, total = torch.cuda.mem_get_info()
print("after going on: allocated %.2f GiB, reserved %.2f GiB (max %.2f), device used %.2f GiB" % (
    torch.cuda.memory_allocated() / 2**30, torch.cuda.memory_reserved() / 2**30,
    torch.cuda.max_memory_reserved() / 2**30, (total - free) / 2**30))
