"""Leak through a retained graph: the loss is summed over steps as a tensor
(total += loss, without .item()), so every step's autograd graph, with its
saved activations, stays alive: about 1.5 MiB per step, 5 MiB/s at the
default pace (below the leak detector's warm-up rate of 8 MiB/s, so that a
70 s run is judged rather than taken for warm-up). Expected verdict: leak."""
import time

import torch
from common import args, loop, say

a = args(__doc__, batch=(int, 64), width=(int, 2048), step_sleep=(float, 0.3))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(a.width, a.width), torch.nn.ReLU(),
                            torch.nn.Linear(a.width, 1)).cuda()
say(f"leak_retained_graph: summing the loss as a tensor; each step keeps "
    f"~{a.batch * a.width * 4 * 2 / 2**20:.0f} MiB of activations alive")
total = torch.zeros((), device="cuda")


def step(i):
    global total
    x = torch.randn(a.batch, a.width, device="cuda")
    loss = model(x).square().mean()
    total = total + loss          # the bug: keeps the graph of every step
    time.sleep(a.step_sleep)


loop(a.seconds, step)
