#!/usr/bin/env python3
"""Does memory from vram's fine regime slow the GPU's kernels down?

kvgen ran 4-34 % slower per step under vram fine than under PyTorch's
default on an H100 (docs/torch.md, "2026-12-07") while vram's driver calls
and waits took 0.15 % of the steps. This isolates the GPU's side: one
process per allocator lays out tensors the way a KV-cache job does (12 MiB
blocks, with 48 MiB activations freed between them so that later blocks
land in their holes), then times with CUDA events, on the GPU alone,
passes of torch._foreach_mul_ over every block (one launch a pass, so the
GPU and not the host is the bottleneck): GB/s read plus written. The
other candidate, the GPU's cost of mapping changes while kernels run, is
not measured here (an empty_cache between passes would make vram wait for
the stream, which measures the wait instead).

Usage, on the GPU host, one fresh process per allocator (vram's from the
repository's python/ and the .gpu/libvram.so built and carried):

  python3 layout_bench.py --allocator {default,expandable,vram_paged,vram_fine}
      [--blocks 96] [--passes 200] [--repeats 5] [--json FILE]

  for r in 1 2; do for a in default expandable vram_paged vram_fine; do
    PYTHONPATH=python VRAM_LIBRARY=$PWD/.gpu/libvram.so \
      python3 scripts/gpu/layout_bench.py --allocator $a --json $OUT/layout.jsonl
  done; done

It prints one JSON line: the allocator, its configuration, the layout
(blocks, bytes, peak reserved/allocated, vram's chunk and call counts),
and the median and each repeat's GB/s. First run on an H100, 2026-12-07
(docs/torch.md, "2026-12-07, 23:03-23:25 UTC": all four within 0.7 %).
"""

import argparse
import json
import os
import statistics
import sys

ALLOCATORS = ("default", "expandable", "vram_paged", "vram_fine")
MiB = 1 << 20


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--allocator", choices=ALLOCATORS, required=True)
    ap.add_argument("--blocks", type=int, default=96, help="12 MiB blocks laid out (default 96)")
    ap.add_argument("--passes", type=int, default=200, help="foreach passes per timed repeat (default 200)")
    ap.add_argument("--repeats", type=int, default=5, help="timed repeats per test (default 5)")
    ap.add_argument("--json", help="also append the JSON line to this file")
    a = ap.parse_args(argv)
    if a.blocks < 1 or a.passes < 1 or a.repeats < 1:
        ap.error("--blocks, --passes and --repeats must be at least 1")
    return a


def install(allocator):
    """Put the allocator in place before torch touches CUDA; returns its
    configuration string."""
    if allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
        return os.environ["PYTORCH_CUDA_ALLOC_CONF"]
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    if allocator == "default":
        return ""
    import vram.torch
    conf = "page_mapped:true" + (",page_regime:fine" if allocator == "vram_fine" else "")
    vram.torch.install(conf)
    return conf


def layout(torch, n):
    """n blocks of 12 MiB (fp16), interleaved with 48 MiB activations that
    are freed before the next blocks are made, as a KV cache grows between
    the MLP's activations."""
    blocks, acts = [], []
    elems = 12 * MiB // 2
    for i in range(n):
        blocks.append(torch.ones(elems, dtype=torch.float16, device="cuda"))
        acts.append(torch.empty(48 * MiB // 2, dtype=torch.float16, device="cuda"))
        if i % 4 == 3:
            acts.clear()  # the holes the next blocks fall into
    acts.clear()
    torch.cuda.synchronize()
    return blocks


def timed(torch, blocks, passes):
    """GB/s read plus written by passes of one multi-tensor kernel."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(passes):
        torch._foreach_mul_(blocks, 1.0)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    moved = 2 * sum(b.numel() * b.element_size() for b in blocks) * passes  # read and written
    return moved / (ms / 1e3) / 1e9


def main(argv=None):
    a = parse_args(argv)
    conf = install(a.allocator)
    import torch
    if not torch.cuda.is_available():
        print("layout_bench: no CUDA device", file=sys.stderr)
        return 2
    res = {"allocator": a.allocator, "conf": conf, "gpu": torch.cuda.get_device_name(0),
           "torch": torch.__version__, "blocks": a.blocks, "passes": a.passes, "repeats": a.repeats}
    blocks = layout(torch, a.blocks)
    res["block_bytes"] = sum(b.numel() * b.element_size() for b in blocks)
    res["peak_reserved"] = torch.cuda.max_memory_reserved()
    res["peak_allocated"] = torch.cuda.max_memory_allocated()
    timed(torch, blocks, 5)  # warm-up: the kernel's first launch
    runs = [timed(torch, blocks, a.passes) for _ in range(a.repeats)]
    res["gbps"] = round(statistics.median(runs), 1)
    res["gbps_runs"] = [round(x, 1) for x in runs]
    if a.allocator.startswith("vram"):
        import vram
        st = vram.memory_stats(0)
        res["vram"] = {k: st.get(k) for k in ("num_device_alloc", "num_mem_map", "num_mem_unmap",
                                              "num_stream_syncs", "device_call_ns", "stream_sync_ns")}
    del blocks
    torch.cuda.synchronize()
    line = json.dumps(res)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
