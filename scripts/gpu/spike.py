"""A memory spike for vram watch: allocate --gib GiB, hold it --hold-ms,
free it (synchronize, del, empty_cache), --times times. Prints one JSON
object: the wall-clock times of each spike and its true height as the driver
sees it (the drop in cudaMemGetInfo's free memory while it is held)."""
import argparse, json, os, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--gib", type=float, default=8)
ap.add_argument("--hold-ms", type=float, default=10)
ap.add_argument("--times", type=int, default=10)
ap.add_argument("--gap", type=float, default=0.5)
a = ap.parse_args()
torch.cuda.init()
torch.empty(1, device="cuda")
torch.cuda.synchronize()
time.sleep(1.0)
spikes = []
n = int(a.gib * (1 << 30))
for i in range(a.times):
    free0, _ = torch.cuda.mem_get_info()
    t0 = time.time()
    x = torch.empty(n, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    t1 = time.time()
    free1, _ = torch.cuda.mem_get_info()
    time.sleep(a.hold_ms / 1000)
    t2 = time.time()
    del x
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    t3 = time.time()
    spikes.append({"alloc_start": t0, "held_from": t1, "free_start": t2, "freed": t3, "height_bytes": free0 - free1})
    time.sleep(a.gap)
print(json.dumps({"pid": os.getpid(), "gib": a.gib, "hold_ms": a.hold_ms, "spikes": spikes}))
