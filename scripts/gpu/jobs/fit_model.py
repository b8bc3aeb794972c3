"""A small training job for vram fit: --steps training steps at --batch N of
an MLP on random data whose activations are wide and cheap (elementwise
blocks over --width features, a linear head), so that memory, not compute,
limits the batch: about 4.5 MiB of saved activations per sample at the
default width. Prints the peak PyTorch saw and exits 0; at a batch too large
PyTorch raises OutOfMemoryError (exit 1)."""
import argparse
import time

import torch

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--width", type=int, default=65536)
ap.add_argument("--blocks", type=int, default=8)
a = ap.parse_args()


class Block(torch.nn.Module):
    def __init__(self, w):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(w))
        self.shift = torch.nn.Parameter(torch.zeros(w))

    def forward(self, x):
        return torch.nn.functional.gelu(x * self.scale + self.shift)


model = torch.nn.Sequential(*[Block(a.width) for _ in range(a.blocks)], torch.nn.Linear(a.width, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
t0 = time.time()
for s in range(a.steps):
    x = torch.randn(a.batch, a.width, device="cuda")
    y = torch.randint(0, 10, (a.batch,), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del x, y, loss
torch.cuda.synchronize()
print(f"batch {a.batch}: {a.steps} steps in {time.time() - t0:.2f} s, "
      f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
      f"peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", flush=True)
