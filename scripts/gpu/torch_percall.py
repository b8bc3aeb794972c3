#!/usr/bin/env python3
"""Cost of one allocation and free from Python, under one allocator (GPU
machine): --iters times (default 200000) torch.empty(n, dtype=uint8,
device="cuda") whose result is dropped at once, for n = 512 B, 64 KiB and
2 MiB; after one warm-up pass, --repeats passes (default 5) are timed and
the median ns per alloc+free pair is reported, with the cost of the bare
loop for reference. Everything after the first pass is served from the
cache, so this is the cached path plus PyTorch's tensor overhead.

  python3 torch_percall.py --allocator {default,expandable,vram,vram_paged}
  python3 torch_percall.py --framework cupy --allocator {default,vram,vram_paged}

--framework cupy does the same with cupy.empty, under CuPy's memory pool
(default) or vram.cupy.install(); when CuPy does not import, the line says
so (ok false, skipped true) and the exit status is 0. Prints one JSON line
(appended to --json FILE too); exits 1 on an error."""
import argparse
import json
import os
import statistics
import sys
import time
import traceback

SIZES = (512, 64 << 10, 2 << 20)


def loop_ns(iters):
    t0 = time.perf_counter_ns()
    for _ in range(iters):
        pass
    return (time.perf_counter_ns() - t0) / iters


def measure(alloc, size, iters, repeats, sync):
    """Median ns per call of alloc(size) over repeats timed passes."""
    for _ in range(iters):  # warm-up: fills the cache
        alloc(size)
    sync()
    per = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(iters):
            alloc(size)
        sync()
        per.append((time.perf_counter_ns() - t0) / iters)
    return statistics.median(per), per


def torch_alloc(a, res):
    if a.allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    else:
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    import torch
    res["torch"] = torch.__version__
    if a.allocator in ("vram", "vram_paged"):
        import vram
        import vram.torch
        conf = "page_mapped:true" if a.allocator == "vram_paged" else ""
        vram.torch.install(conf)
        res["alloc_conf"] = vram.config()
    dev = torch.device("cuda", 0)
    u8 = torch.uint8
    torch.cuda.init()
    res["gpu"] = torch.cuda.get_device_name(0)

    def alloc(n):
        torch.empty(n, dtype=u8, device=dev)

    return alloc, torch.cuda.synchronize


def cupy_alloc(a, res):
    try:
        import cupy
    except Exception as e:
        res["skipped"] = True
        res["error"] = "cupy does not import: %s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")
        return None, None
    res["cupy"] = cupy.__version__
    if a.allocator in ("vram", "vram_paged"):
        import vram
        import vram.cupy
        conf = "page_mapped:true" if a.allocator == "vram_paged" else ""
        vram.configure(conf)  # vram.cupy.install takes the settings in force
        vram.cupy.install()
        res["alloc_conf"] = vram.config()
    elif a.allocator != "default":
        raise ValueError("--allocator %s: CuPy runs under default, vram or vram_paged" % a.allocator)
    u8 = cupy.uint8
    dev = cupy.cuda.Device(0)
    name = cupy.cuda.runtime.getDeviceProperties(0).get("name", "")
    res["gpu"] = name.decode(errors="replace") if isinstance(name, bytes) else str(name)

    def alloc(n):
        cupy.empty(n, dtype=u8)

    return alloc, dev.synchronize


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--allocator", required=True, choices=("default", "expandable", "vram", "vram_paged"))
    ap.add_argument("--framework", default="torch", choices=("torch", "cupy"))
    ap.add_argument("--iters", type=int, default=200000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    res = {"bench": "percall", "framework": a.framework, "allocator": a.allocator, "iters": a.iters,
           "repeats": a.repeats, "ok": False}
    code = 0
    try:
        alloc, sync = (torch_alloc if a.framework == "torch" else cupy_alloc)(a, res)
        if alloc is not None:
            res["loop_ns"] = round(loop_ns(a.iters), 1)
            res["sizes"] = {}
            for n in SIZES:
                med, per = measure(alloc, n, a.iters, a.repeats, sync)
                res["sizes"][str(n)] = {"ns_median": round(med, 1), "ns_repeats": [round(x, 1) for x in per]}
            res["ok"] = True
    except Exception as e:
        traceback.print_exc()
        res["error"] = "%s: %s" % (type(e).__name__, (str(e).splitlines() or [""])[0][:300])
        code = 1
    line = json.dumps(res)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")
    return code


if __name__ == "__main__":
    sys.exit(main())
