#!/usr/bin/env python3
"""Where a workload's host time goes, per PyTorch operator, under one
allocator (GPU machine): builds a train_bench.py workload, runs its warm-up
steps, then profiles --steps more with torch.profiler (CPU activity only) and
prints the operators with the most self CPU time, with their call counts.
Run it once per allocator and compare the tables.

  python3 op_profile.py --workload kvgen --allocator vram [--steps 2] [--warmup 3]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train_bench  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, choices=train_bench.WORKLOADS)
    ap.add_argument("--allocator", required=True, choices=train_bench.ALLOCATORS)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rows", type=int, default=18)
    a = ap.parse_args()
    ba = train_bench.parse_args(["--workload", a.workload, "--allocator", a.allocator,
                                 "--steps", str(a.warmup + a.steps), "--warmup", str(a.warmup)])
    train_bench.set_env(ba)
    import torch
    train_bench.torch = torch
    train_bench.install(ba)
    torch.manual_seed(0)
    b = train_bench.Bench(ba)
    b.setup()
    for i in range(a.warmup):
        b.step(i, b.make_input(i))
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(a.warmup, a.warmup + a.steps):
            b.step(i, b.make_input(i))
        torch.cuda.synchronize()
    print("== %s under %s: %d profiled steps" % (a.workload, a.allocator, a.steps))
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=a.rows))


if __name__ == "__main__":
    main()
