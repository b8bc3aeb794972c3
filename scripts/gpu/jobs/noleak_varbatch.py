"""No leak, variable batches: a training loop whose batch size is drawn at
random every step (variable-length data). Memory swings with the batch and
the cache grows until it has seen the largest batch, then stays. Expected
verdict: no leak."""
import random
import time

import torch
from common import args, loop, say

a = args(__doc__, width=(int, 4096), min_batch=(int, 64), max_batch=(int, 2048), step_sleep=(float, 0.02))
random.seed(1)
model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                            torch.nn.Linear(a.width, a.width)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
say(f"noleak_varbatch: batches drawn from {a.min_batch}..{a.max_batch}")


def step(i):
    b = random.randint(a.min_batch, a.max_batch)
    x = torch.randn(b, a.width, device="cuda")
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    time.sleep(a.step_sleep)


loop(a.seconds, step)
