"""No leak, model switching: a server that swaps between a small and a large
model every --period seconds (del + empty_cache before loading the next),
running inference in between. Memory steps up and down with the model.
Expected verdict: no leak."""
import time

import torch
from common import args, loop, say

a = args(__doc__, period=(float, 12), small=(int, 2048), large=(int, 8192), batch=(int, 256),
         step_sleep=(float, 0.02))
state = {"model": None, "width": 0, "since": 0.0, "n": 0}


def load(width):
    state["model"] = None
    torch.cuda.empty_cache()
    layers = []
    for _ in range(4):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    state["model"] = torch.nn.Sequential(*layers).cuda().eval()
    state["width"], state["since"] = width, time.time()
    say(f"loaded the {'large' if width == a.large else 'small'} model (width {width})")


load(a.small)


def step(i):
    if time.time() - state["since"] > a.period:
        load(a.large if state["width"] == a.small else a.small)
    with torch.no_grad():
        state["model"](torch.randn(a.batch, state["width"], device="cuda"))
    time.sleep(a.step_sleep)


loop(a.seconds, step)
