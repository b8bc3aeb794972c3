"""Leak through a growing list: every step appends its output (detached,
but still on the GPU) to a Python list for "later analysis": 1 MiB per step,
about 4 MiB/s at the default pace. Expected verdict: leak. jobs.sh also runs
it faster (--batch 512 --step-sleep 0.05, about 150 MiB/s) under --limit."""
import time

import torch
from common import args, loop, say

a = args(__doc__, batch=(int, 64), width=(int, 4096), step_sleep=(float, 0.25))
model = torch.nn.Linear(a.width, a.width).cuda()
kept = []
say(f"leak_tensor_list: appending each step's output to a list, "
    f"{a.batch * a.width * 4 / 2**20:.0f} MiB per step")


def step(i):
    with torch.no_grad():
        y = model(torch.randn(a.batch, a.width, device="cuda"))
    kept.append(y)                # the bug: nothing ever leaves the list
    time.sleep(a.step_sleep)


loop(a.seconds, step)
