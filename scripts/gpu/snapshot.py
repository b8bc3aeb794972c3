#!/usr/bin/env python3
"""Records real PyTorch memory snapshots for package torchsnap's tests.

Run on a GPU host with PyTorch: python3 snapshot.py OUTDIR. For each allocator
setting (default, expandable_segments) it trains a small model for a few steps
with memory history recording on, dumps the snapshot with
torch.cuda.memory._dump_snapshot, and writes next to it PyTorch's own figures
for that snapshot (counts of trace actions, segments, sizes), computed here
from the pickle _dump_snapshot wrote, so the Go reader can be checked against
what PyTorch itself wrote.
"""
import json
import os
import pickle
import sys

mode = sys.argv[2] if len(sys.argv) > 2 else "default"
if mode == "expandable":
    os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"

import torch  # noqa: E402

out = sys.argv[1]
name = f"torch_{mode}"
torch.manual_seed(0)
dev = torch.device("cuda")
torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python", max_entries=4000)

model = torch.nn.Sequential(
    torch.nn.Linear(512, 2048), torch.nn.ReLU(), torch.nn.Linear(2048, 512)
).to(dev)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    batch = 64 * (step + 1)  # a growing batch: the cache grows, segments are added
    x = torch.randn(batch, 512, device=dev)
    loss = model(x).square().mean()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
big = torch.empty(300 << 20, dtype=torch.uint8, device=dev)  # a large block of its own
del big
torch.cuda.synchronize()

path = os.path.join(out, name + ".pickle")
torch.cuda.memory._dump_snapshot(path)  # what users run; the Go reader gets this file
torch.cuda.memory._record_memory_history(enabled=None)
with open(path, "rb") as f:
    snap = pickle.load(f)

traces = snap["device_traces"][torch.cuda.current_device()]
actions = {}
live = peak = 0
alive = {}
for e in traces:
    actions[e["action"]] = actions.get(e["action"], 0) + 1
    if e["action"] == "alloc":
        alive[e["addr"]] = e["size"]
        live += e["size"]
        peak = max(peak, live)
    elif e["action"] == "free_completed" and e["addr"] in alive:
        live -= alive.pop(e["addr"])
segs = [s for s in snap["segments"] if s["device"] == torch.cuda.current_device()]
figures = {
    "torch": torch.__version__,
    "mode": mode,
    "trace_entries": len(traces),
    "actions": actions,
    "segments": len(segs),
    "blocks": sum(len(s["blocks"]) for s in segs),
    "total_size": sum(s["total_size"] for s in segs),
    "allocated_size": sum(s["allocated_size"] for s in segs),
    "active_blocks": sum(1 for s in segs for b in s["blocks"] if b["state"] == "active_allocated"),
    "expandable_segments": sum(1 for s in segs if s.get("is_expandable")),
    "trace_peak_live": peak,
    "trace_live_at_end": live,
    "memory_allocated": torch.cuda.memory_allocated(),
    "memory_reserved": torch.cuda.memory_reserved(),
    "bytes": os.path.getsize(path),
}
with open(os.path.join(out, name + ".json"), "w") as f:
    json.dump(figures, f, indent=1, sort_keys=True)
print(json.dumps(figures, sort_keys=True))
