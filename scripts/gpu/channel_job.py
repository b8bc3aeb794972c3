"""A PyTorch job on vram's allocator for scripts/gpu/channel_check.sh: four
phases of tensors (grow, free half, grow again with odd sizes, free all but
one), each held while the check reads the job's figures from outside. At
each phase it writes what it sees inside (torch.cuda.memory_allocated() and
memory_reserved(), which vram.torch.install makes vram's, and
vram.torch.memory_stats()) to PHASE.json in --dir, as one JSON line also on
stdout.

  --sync: wait for PHASE.done in --dir before going on (vram status reads
          the figures meanwhile); without it each phase lasts --hold seconds
          (vram run samples them).
Installs vram itself unless vram run --allocator vram already has.
"""
import argparse
import json
import os
import time

import torch

import vram.torch as vt

ap = argparse.ArgumentParser()
ap.add_argument("--dir", required=True)
ap.add_argument("--sync", action="store_true")
ap.add_argument("--hold", type=float, default=1.5)
args = ap.parse_args()
if not vt.installed():
    vt.install()
t0 = time.time()
MiB = 1 << 20
keep = []


def phase(name):
    torch.cuda.synchronize()
    st = vt.memory_stats()
    rec = {"phase": name, "t_s": time.time() - t0, "pid": os.getpid(),
           "allocated": torch.cuda.memory_allocated(), "reserved": torch.cuda.memory_reserved(),
           "stats_allocated": st["allocated_bytes.all.current"], "stats_reserved": st["reserved_bytes.all.current"],
           "inactive_split": st["inactive_split_bytes.all.current"]}
    with open(os.path.join(args.dir, name + ".json"), "w") as f:
        json.dump(rec, f)
    print(json.dumps(rec), flush=True)
    if args.sync:
        done = os.path.join(args.dir, name + ".done")
        while not os.path.exists(done):
            time.sleep(0.02)
    else:
        time.sleep(args.hold)


for i in range(8):
    keep.append(torch.empty(512 * MiB, dtype=torch.uint8, device="cuda"))
phase("grow")
del keep[::2]
phase("half")
for i in range(200):
    keep.append(torch.empty((1 + i % 37) * 3 * MiB + 4096 * i, dtype=torch.uint8, device="cuda"))
phase("odd")
keep = keep[:1]
phase("one")
