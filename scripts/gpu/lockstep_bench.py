#!/usr/bin/env python3
"""Step time of two allocators, step by step in lockstep (GPU machine).

Between fresh processes of one allocator, kvgen's median step scattered by
53 % on an H100 (PyTorch's default, six runs in twenty minutes:
docs/torch.md, "2026-12-07, 23:03-23:25 UTC"), so ratios of separate runs
cannot decide a 1 % difference. Here the two runs of a pair, each
train_bench.py in its own process under its own allocator, start together
and take turns step by step (train_bench.py --turns): step i of the first,
then step i of the second, then step i+1 of the first, ... Each step's
ratio second/first then compares two steps taken a second apart under the
same host and GPU state, and the figure is the median over the steps.
Setup (imports, model build) overlaps; the steps never do.

Two controls are part of the method, not extras:
  - a pair of one allocator (default,default) shows the method's own bias
    and scatter: its median ratio should be 1 within its interquartile range;
  - a pair in both orders (default,vram_fine and vram_fine,default) cancels
    a bias of going first: the order-corrected ratio is
    sqrt(r(default,X) / r(X,default)).

Usage, on the GPU host (vram's allocators from the repository's python/ and
the .gpu/libvram.so built and carried):

  PYTHONPATH=python VRAM_LIBRARY=$PWD/.gpu/libvram.so \\
    python3 scripts/gpu/lockstep_bench.py --workload kvgen \\
      --pairs default,default default,vram_fine vram_fine,default \\
      [--steps 45] [--warmup 5] [--out DIR] [--json FILE] [-- more train_bench.py args]

Output: one JSON line per pair (workload, first, second, ok, paired steps,
each run's median step and SM clock, the median and quartiles of the
per-step ratios second/first with a 95 % bootstrap interval of that median,
the ratio of the medians; the runs' own lines
are in DIR), then a Markdown table with the order-corrected ratios.
Exit status 1 if a pair failed.
"""

import argparse
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_BENCH = os.path.join(HERE, "train_bench.py")
sys.path.insert(0, HERE)
from train_bench import percentile  # noqa: E402  (nearest rank; train_bench imports torch only when it runs)


def parse_args(argv=None):
    if argv is None:
        argv = sys.argv[1:]
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--pairs", nargs="+", required=True, help="FIRST,SECOND allocator pairs, run one after another")
    ap.add_argument("--steps", type=int, default=45, help="steps per run, warm-up included (default 45)")
    ap.add_argument("--warmup", type=int, default=5, help="first steps not timed (default 5)")
    ap.add_argument("--pair-timeout", type=int, default=300, help="give up on a pair after this many seconds (default 300)")
    ap.add_argument("--out", default="", help="directory for the runs' lines and logs (default: a new temporary one)")
    ap.add_argument("--json", default="", help="also append each pair's line to this file")
    a = ap.parse_args(argv)
    pairs = []
    for p in a.pairs:
        parts = p.split(",")
        if len(parts) != 2 or not all(parts):
            ap.error("--pairs %r: want FIRST,SECOND (two allocator names)" % p)
        pairs.append(tuple(parts))
    a.pairs = pairs
    if a.steps < 2 or a.warmup < 0 or a.warmup >= a.steps:
        ap.error("--steps %d --warmup %d: want 0 <= warmup < steps, steps >= 2" % (a.steps, a.warmup))
    for flag in ("--turns", "--turn-first", "--gpu-lock", "--max-seconds", "--json", "--allocator", "--workload"):
        if any(x == flag or x.startswith(flag + "=") for x in extra):
            ap.error("%s after --: set by lockstep_bench.py itself" % flag)
    a.extra = extra
    return a


def bootstrap_median_ci(xs, n=2000, seed=0):
    """A 95 % interval for the median of xs: the 2.5th and 97.5th
    percentiles of the medians of n resamples (with replacement, a fixed
    seed, so the same steps give the same interval)."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(xs, k=len(xs))) for _ in range(n))
    return meds[int(0.025 * n)], meds[min(n - 1, int(0.975 * n))]


def paired(first_ms, second_ms):
    """The per-step comparison of two runs' timed steps, step i with step i
    (as many as both have): median and quartiles of second/first, a 95 %
    bootstrap interval of that median, the standard deviation of the ratios'
    logarithms (the method's noise: ~0.1 is a step-to-step scatter of ~10 %),
    and the ratio of the two medians."""
    n = min(len(first_ms), len(second_ms))
    if n == 0:
        return {"steps": 0}
    r = [s / f for f, s in zip(first_ms[:n], second_ms[:n])]
    mf, ms = statistics.median(first_ms[:n]), statistics.median(second_ms[:n])
    lo, hi = bootstrap_median_ci(r)
    return {"steps": n, "ratios": [round(x, 5) for x in r], "ratio_median": round(statistics.median(r), 4),
            "ratio_ci95": [round(lo, 4), round(hi, 4)],
            "ratio_p25": round(percentile(r, 25), 4), "ratio_p75": round(percentile(r, 75), 4),
            "ratio_log_sd": round(statistics.pstdev([math.log(x) for x in r]), 4),
            "ratio_of_medians": round(ms / mf, 4), "first_ms": round(mf, 3), "second_ms": round(ms, 3)}


MIN_PROCESS_PAIRS = 3  # pairs of processes in each order before an interval counts them


def order_corrected(results, n=2000, seed=0):
    """{(workload, allocator): (ratio, lo, hi, pairs)} for every X run in
    both orders against the default: ratio = sqrt(r(default, X) /
    r(X, default)) of the median per-step ratios, a 95 % bootstrap interval
    of it, and the number of pairs of processes in the order with fewer.

    Several lines of one pair (say, from several calls, each its own two
    processes) pool their per-step ratios. Steps of one process are not
    independent: a process can run all its steps some percent slower than
    another of the same allocator (on an H100 VM, a default,default pair
    ran its second process 12 % slower throughout), so the interval is a
    two-stage bootstrap: the lines of each order resampled, then the steps
    within each. With fewer than MIN_PROCESS_PAIRS lines in an order the
    first stage cannot see that scatter, and the interval covers the steps'
    alone. lo and hi are None, and the last line's median counts, where a
    line lacks its per-step ratios."""
    groups = {}
    for p in results:
        if p.get("ok") and "ratio_median" in p:
            groups.setdefault((p["workload"], p["first"], p["second"]), []).append(p)
    out = {}
    for (w, f, s), a in groups.items():
        b = groups.get((w, s, "default"))
        if f != "default" or s == "default" or b is None:
            continue
        pairs = min(len(a), len(b))
        if not all(p.get("ratios") for p in a + b):
            out[(w, s)] = (round(math.sqrt(a[-1]["ratio_median"] / b[-1]["ratio_median"]), 4), None, None, pairs)
            continue
        rng = random.Random(seed)

        def resample(lines):
            return statistics.median([x for p in rng.choices(lines, k=len(lines))
                                      for x in rng.choices(p["ratios"], k=len(p["ratios"]))])

        est = sorted(math.sqrt(resample(a) / resample(b)) for _ in range(n))
        ra = [x for p in a for x in p["ratios"]]
        rb = [x for p in b for x in p["ratios"]]
        out[(w, s)] = (round(math.sqrt(statistics.median(ra) / statistics.median(rb)), 4),
                       round(est[int(0.025 * n)], 4), round(est[min(n - 1, int(0.975 * n))], 4), pairs)
    return out


def read_line(path):
    try:
        with open(path) as f:
            lines = [ln for ln in f if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def run_pair(a, k, first, second, out):
    """Start both runs of pair k, wait for them, and return the pair's line."""
    d = tempfile.mkdtemp(prefix="turns.", dir=out)
    f12, f21 = os.path.join(d, "1to2"), os.path.join(d, "2to1")
    os.mkfifo(f12)
    os.mkfifo(f21)
    procs, files = [], []
    for idx, (alloc, turns, lead) in enumerate(((first, f21 + "," + f12, True), (second, f12 + "," + f21, False))):
        tag = "%s.pair%d.%d.%s" % (a.workload, k, idx + 1, alloc)
        js = os.path.join(out, tag + ".jsonl")
        log = open(os.path.join(out, tag + ".log"), "w")
        cmd = [sys.executable, TRAIN_BENCH, "--workload", a.workload, "--allocator", alloc,
               "--steps", str(a.steps), "--warmup", str(a.warmup), "--turns", turns, "--json", js] + a.extra
        if lead:
            cmd.append("--turn-first")
        procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT))
        files.append((js, log))
    t0 = time.monotonic()
    res = {"workload": a.workload, "first": first, "second": second, "ok": False}
    codes = []
    for p in procs:
        left = max(1, a.pair_timeout - (time.monotonic() - t0))
        try:
            codes.append(p.wait(timeout=left))
        except subprocess.TimeoutExpired:
            for q in procs:  # this script's own children, started above
                q.kill()
                q.wait()
            codes.append("timeout")
    for _, log in files:
        log.close()
    shutil.rmtree(d, ignore_errors=True)  # the two FIFOs
    res["exit"] = codes
    runs = [read_line(js) for js, _ in files]
    for name, r in zip(("first_run", "second_run"), runs):
        if r:
            res[name] = {k2: r.get(k2) for k2 in ("ok", "error", "step_ms_median", "sm_mhz_median", "ratio",
                                                  "turn_wait_s", "loss_final", "timed_steps")}
    if all(r and r.get("ok") and r.get("step_ms") for r in runs):
        res.update(paired(runs[0]["step_ms"], runs[1]["step_ms"]))
        res["ok"] = res["steps"] > 0
    else:
        res["error"] = "; ".join("%s: %s" % (al, (r or {}).get("error", "no result line")) for al, r in
                                 zip((first, second), runs) if not (r and r.get("ok")))
    res["wall_s"] = round(time.monotonic() - t0, 1)
    return res


def table(results):
    lines = ["| workload | first | second | paired steps | median step, ms: first · second | per-step second/first: "
             "median (p25–p75) | 95 % interval of that median | ratio of medians | SM MHz: first · second |",
             "|---|---|---|---|---|---|---|---|---|"]
    for p in results:
        if not p.get("ok"):
            lines.append("| %s | %s | %s | failed: %s | | | | | |" % (p["workload"], p["first"], p["second"], p.get("error")))
            continue
        fr, sr = p.get("first_run", {}), p.get("second_run", {})
        ci = p.get("ratio_ci95")
        lines.append("| %s | %s | %s | %d | %.1f · %.1f | %.4f (%.4f–%.4f) | %s | %.4f | %s · %s |" % (
            p["workload"], p["first"], p["second"], p["steps"], p["first_ms"], p["second_ms"], p["ratio_median"],
            p["ratio_p25"], p["ratio_p75"], "%.4f–%.4f" % tuple(ci) if ci else "-", p["ratio_of_medians"],
            fr.get("sm_mhz_median", "-"),
            sr.get("sm_mhz_median", "-")))
    oc = order_corrected(results)
    if oc:
        lines += ["", "Order-corrected, sqrt(r(default,X) / r(X,default)), with its 95 % interval"
                  " (the steps of a pair's lines pooled): " +
                  ", ".join("%s %s %.4f (%s; %d pair%s of processes an order)" % (
                      w, x, v, "%.4f–%.4f" % (lo, hi) if lo is not None else "no interval", k, "" if k == 1 else "s")
                      for (w, x), (v, lo, hi, k) in sorted(oc.items()))]
    return "\n".join(lines)


def main(argv=None):
    a = parse_args(argv)
    out = a.out or tempfile.mkdtemp(prefix="lockstep.")
    os.makedirs(out, exist_ok=True)
    results = []
    for k, (first, second) in enumerate(a.pairs, start=1):
        res = run_pair(a, k, first, second, out)
        results.append(res)
        line = json.dumps(res)
        print(line, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(line + "\n")
    print()
    print(table(results))
    return 0 if all(p.get("ok") for p in results) else 1


if __name__ == "__main__":
    sys.exit(main())
