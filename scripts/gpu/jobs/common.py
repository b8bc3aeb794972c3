"""Shared helpers of the vram run test jobs: a clock, a step loop that runs
for --seconds, and a line printed every few seconds saying what the job does
and how much PyTorch holds."""
import argparse
import time

import torch


def args(doc, **extra):
    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--seconds", type=float, default=70, help="how long to run")
    for name, (typ, default) in extra.items():
        ap.add_argument("--" + name.replace("_", "-"), type=typ, default=default)
    return ap.parse_args()


def say(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def mib(b):
    return f"{b / 2**20:.0f} MiB"


def status(step):
    return (f"step {step}: allocated {mib(torch.cuda.memory_allocated())}, "
            f"reserved {mib(torch.cuda.memory_reserved())}")


def loop(seconds, step_fn, every=5.0):
    """Call step_fn(step) until seconds have passed; report every `every` s."""
    end = time.time() + seconds
    last = 0.0
    step = 0
    while time.time() < end:
        step_fn(step)
        step += 1
        if time.time() - last >= every:
            torch.cuda.synchronize()
            say(status(step))
            last = time.time()
    torch.cuda.synchronize()
    say("done: " + status(step))
