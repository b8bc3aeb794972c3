"""No leak, with a warm-up: the first --warmup seconds grow the memory (the
batch ramps up, as with a curriculum or a warm-up schedule, and a cache of
fixed size is filled), then the job trains at a fixed batch. Expected
verdict: no leak (the rise is warm-up)."""
import time

import torch
from common import args, loop, say

a = args(__doc__, width=(int, 4096), batch=(int, 4096), warmup=(float, 15), cache_mib=(int, 2048),
         step_sleep=(float, 0.02))
model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                            torch.nn.Linear(a.width, a.width)).cuda()
opt = torch.optim.Adam(model.parameters(), lr=1e-4)
cache = []
start = time.time()
say(f"noleak_warmup: {a.warmup:.0f} s of ramp (batch and a {a.cache_mib} MiB cache), then steady")


def step(i):
    frac = min(1.0, (time.time() - start) / a.warmup)
    b = max(16, int(a.batch * frac))
    if len(cache) * 64 < a.cache_mib * frac:
        cache.append(torch.empty(64 << 20, dtype=torch.uint8, device="cuda"))
    x = torch.randn(b, a.width, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    time.sleep(a.step_sleep)


loop(a.seconds, step)
