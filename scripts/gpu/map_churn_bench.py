#!/usr/bin/env python3
"""Do mapping changes slow down the kernels that run while they happen?

vram's fine regime ran kvgen 4-34 % slower per step than PyTorch's default
on an H100 while its driver calls took 0.15 % of the steps' host time
(docs/torch.md, "2026-12-07"). Its timed steps made some 1,100 cuMemMap
and 230 cuMemUnmap calls a run, against 77 and 22 under the coarse regime,
which ran at the default's speed. PyTorch's own notes on expandable
segments say changing mappings "appears to involve at least some
synchronous actions with the GPU". This measures that cost on the GPU
alone, apart from any allocator:

  - PyTorch's default allocator holds --gib of fp16 tensors; a pass is one
    torch._foreach_mul_ over all of them (one launch, bandwidth-bound);
  - the GPU is given a lead of --lead passes, then, between the launches of
    the timed passes, the host makes --ops mapping changes per pass on
    memory no kernel touches (2 MiB physical allocations made up front):
      remap  cuMemMap + cuMemSetAccess, then cuMemUnmap (a pair is one op)
      map    cuMemMap + cuMemSetAccess of a fresh range (unmapped after
             the timing)
      unmap  cuMemUnmap of a range mapped before the timing
  - the passes are timed with CUDA events, so the figure is the GPU's time
    per pass, not the host's; the host's time per op is reported beside it.
    If the host's mapping changes alone took longer per pass than the GPU's
    pass, the GPU may have run dry and the line says so ("host_bound":
    true). (The whole host loop is no measure of that: once the launch
    queue is full, every launch waits for the GPU.)

Usage, on the GPU host (torch needed, vram not):

  python3 scripts/gpu/map_churn_bench.py [--gib 4] [--passes 200]
      [--repeats 3] [--ops 0,1,4,16] [--json FILE]

One JSON line per (kind, ops) with the median ms per pass, the ratio to
the first --ops value (0) in the same process, and the host's microseconds per op.
"""

import argparse
import ctypes
import json
import statistics
import sys
import time

MiB = 1 << 20


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=4.0, help="GiB of tensors a pass reads and writes (default 4)")
    ap.add_argument("--passes", type=int, default=200, help="timed passes per repeat (default 200)")
    ap.add_argument("--lead", type=int, default=10, help="passes queued before the first change (default 10)")
    ap.add_argument("--repeats", type=int, default=3, help="repeats per (kind, ops) (default 3)")
    ap.add_argument("--ops", default="0,1,4,16", help="mapping changes per pass, comma-separated (default 0,1,4,16)")
    ap.add_argument("--kinds", default="remap,map,unmap", help="kinds of change (default remap,map,unmap)")
    ap.add_argument("--json", help="also append the JSON lines to this file")
    a = ap.parse_args(argv)
    try:
        a.ops = [int(x) for x in a.ops.split(",")]
    except ValueError:
        ap.error(f"--ops {a.ops!r}: want counts separated by commas")
    a.kinds = a.kinds.split(",")
    for k in a.kinds:
        if k not in ("remap", "map", "unmap"):
            ap.error(f"--kinds: {k!r} is not remap, map or unmap")
    if a.gib <= 0 or a.passes < 1 or a.repeats < 1 or a.lead < 0 or min(a.ops) < 0:
        ap.error("--gib, --passes and --repeats must be positive, --lead and --ops not negative")
    return a


class Prop(ctypes.Structure):  # CUmemAllocationProp, 32 bytes
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int),
                ("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int),
                ("win32", ctypes.c_void_p), ("flags", ctypes.c_uint8 * 8)]


class Access(ctypes.Structure):  # CUmemAccessDesc, 12 bytes
    _fields_ = [("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int), ("flags", ctypes.c_int)]


class VMM:
    """The driver's virtual memory calls on the current context (PyTorch's
    primary context): n physical allocations of one granule each, and a
    reserved range with a slot for each."""

    def __init__(self, device, n):
        self.cu = ctypes.CDLL("libcuda.so.1")
        self.dev = device
        self.prop = Prop(type=1, handle_types=0, loc_type=1, loc_id=device)  # pinned, on the device
        self.access = Access(loc_type=1, loc_id=device, flags=3)  # read and write
        g = ctypes.c_size_t()
        self.check("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(self.prop), 0)
        self.gran = max(g.value, 2 * MiB)
        self.handles = []
        for _ in range(n):
            h = ctypes.c_uint64()
            self.check("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(self.gran), ctypes.byref(self.prop), ctypes.c_uint64(0))
            self.handles.append(h.value)
        base = ctypes.c_uint64()
        self.size = n * self.gran
        self.check("cuMemAddressReserve", ctypes.byref(base), ctypes.c_size_t(self.size), ctypes.c_size_t(0), ctypes.c_uint64(0), ctypes.c_uint64(0))
        self.base = base.value
        self.mapped = set()

    def check(self, name, *args):
        r = getattr(self.cu, name)(*args)
        if r != 0:
            raise RuntimeError(f"{name} failed: CUresult {r}")

    def map(self, i):
        ptr = ctypes.c_uint64(self.base + i * self.gran)
        self.check("cuMemMap", ptr, ctypes.c_size_t(self.gran), ctypes.c_size_t(0), ctypes.c_uint64(self.handles[i]), ctypes.c_uint64(0))
        self.check("cuMemSetAccess", ptr, ctypes.c_size_t(self.gran), ctypes.byref(self.access), ctypes.c_size_t(1))
        self.mapped.add(i)

    def unmap(self, i):
        self.check("cuMemUnmap", ctypes.c_uint64(self.base + i * self.gran), ctypes.c_size_t(self.gran))
        self.mapped.discard(i)

    def unmap_all(self):
        for i in sorted(self.mapped):
            self.unmap(i)

    def close(self):
        self.unmap_all()
        self.check("cuMemAddressFree", ctypes.c_uint64(self.base), ctypes.c_size_t(self.size))
        for h in self.handles:
            self.check("cuMemRelease", ctypes.c_uint64(h))


def run_once(torch, blocks, vmm, kind, ops, a):
    """One timed repeat: GPU ms per pass, host µs per op, and whether the
    host's mapping changes alone took longer per pass than the GPU's pass."""
    need = ops * a.passes
    if kind == "unmap":
        for i in range(need):
            vmm.map(i)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(a.lead):
        torch._foreach_mul_(blocks, 1.0)
    k = 0
    host_ns = 0
    for _ in range(a.passes):
        torch._foreach_mul_(blocks, 1.0)
        t0 = time.perf_counter_ns()
        for _ in range(ops):
            if kind == "remap":
                vmm.map(0)
                vmm.unmap(0)
            elif kind == "map":
                vmm.map(k)
            else:
                vmm.unmap(k)
            k += 1
        host_ns += time.perf_counter_ns() - t0
    end.record()
    end.synchronize()
    gpu_ms = start.elapsed_time(end)
    vmm.unmap_all()
    per_pass = gpu_ms / (a.passes + a.lead)
    return per_pass, (host_ns / 1e3 / need if need else 0.0), host_ns / 1e6 / a.passes > per_pass


def main(argv=None):
    a = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        print("map_churn_bench: no CUDA device", file=sys.stderr)
        return 2
    elems = 64 * MiB // 2
    blocks = [torch.ones(elems, dtype=torch.float16, device="cuda") for _ in range(max(1, int(a.gib * 16)))]
    vmm = VMM(torch.cuda.current_device(), max(1, max(a.ops) * a.passes))
    head = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "gib": a.gib,
            "passes": a.passes, "lead": a.lead, "granule": vmm.gran}
    for _ in range(5):
        torch._foreach_mul_(blocks, 1.0)  # the kernel's first launches
    torch.cuda.synchronize()
    lines = []
    try:
        for kind in a.kinds:
            base = None
            for ops in a.ops:
                runs = [run_once(torch, blocks, vmm, kind, ops, a) for _ in range(a.repeats)]
                ms = statistics.median(r[0] for r in runs)
                if base is None:
                    base = ms  # the first --ops value (0 by default)
                res = dict(head, kind=kind, ops_per_pass=ops, ms_per_pass=round(ms, 4),
                           ms_runs=[round(r[0], 4) for r in runs], ratio_to_first=round(ms / base, 4),
                           host_us_per_op=round(statistics.median(r[1] for r in runs), 2),
                           host_bound=any(r[2] for r in runs))
                lines.append(json.dumps(res))
                print(lines[-1], flush=True)
    finally:
        vmm.close()
    if a.json:
        with open(a.json, "a") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
