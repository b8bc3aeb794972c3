#!/usr/bin/env python3
"""Summarise scripts/gpu/train_bench.sh: a Markdown table per workload of
the allocators' memory, step time, losses and the largest batch vram fit
found under the cap, then the target checks. Standard library only.

  train_summary.py DIR              DIR/train.jsonl, DIR/fit/*.json, DIR/percall.jsonl,
                                    DIR/lockstep.jsonl
  train_summary.py --fit-range JSONL WORKLOAD ALLOCATOR CAP_GIB
                                    prints "MIN MAX": the --min/--max for vram fit,
                                    estimated from the run of that allocator in JSONL
  train_summary.py --fit-retry FIT_JSON
                                    prints "MIN MAX" for a second search when the
                                    first one hit an end of its range, else nothing
  train_summary.py --self-test      checks this script on made-up results

Targets (for vram, vram_paged, vram_fine, vram_fine_keep and vram_fine_wait, each against the same run's others):
reserved/allocated <= 1.03 on every workload; median step within 1 % of
default's; the largest batch under the cap >= 5 % above expandable's on at
least two workloads; losses identical to default's (exact float compare over
the steps both ran). Where DIR/lockstep.jsonl (train_bench.sh LOCKSTEP) has
the allocator against the default in both orders, the step-time check uses
that order-corrected per-step ratio instead of the rounds': FAIL when its
95 % interval lies above 1.01; PASS when it lies at or below 1.01 and each
order has at least lockstep_bench.MIN_PROCESS_PAIRS pairs of processes (so
that the interval counts the processes' own scatter, not only the steps');
otherwise UNDECIDED."""
import glob
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import lockstep_bench  # noqa: E402  (its ratio and table code; standard library only)

GiB = 2**30
ORDER = ("default", "expandable", "vram", "vram_paged", "vram_fine", "vram_fine_keep", "vram_fine_wait", "preinstalled")
VRAM = ("vram", "vram_paged", "vram_fine", "vram_fine_keep", "vram_fine_wait")
RATIO_MAX = 1.03
STEP_TOL = 0.01
BATCH_GAIN = 0.05
BATCH_WORKLOADS = 2
# (memory between steps, reserved per batch element at the largest shape) in
# bytes, seen under PyTorch's default allocator on an H200 (torch 2.11,
# transformers 5.17): the guess for vram fit's range when no run tells.
FIT_FALLBACK = {"resnet": (0.38e9, 56e6), "gpt2": (2.07e9, 1.65e9), "llama_lora": (1.8e9, 0.6e9),
                "kvgen": (0.74e9, 75e6), "lstm": (0.1e9, 30e6)}


def read_jsonl(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def latest(rows):
    """The last row per (workload, allocator): a rerun replaces a run."""
    d = {}
    for r in rows:
        d[(r.get("workload"), r.get("allocator"))] = r
    return d


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return (xs[n // 2] + xs[(n - 1) // 2]) / 2 if n else None


def by_round(rows):
    """{(workload, allocator): {round: row}} for the ok rows that carry a
    round (train_bench.sh ROUNDS > 1); the last row of a round wins."""
    d = {}
    for r in rows:
        if r.get("round") is None or not r.get("ok") or r.get("step_ms_median") is None:
            continue
        d.setdefault((r.get("workload"), r.get("allocator")), {})[r["round"]] = r
    return d


def step_ratio(rows, runs, w, a):
    """The allocator's median step over default's: with rounds, the median
    of the ratios of the runs of the same round (each pair ran minutes
    apart at most, so the host's state is shared); otherwise the ratio of
    the latest runs. None when there is no pair."""
    rounds = by_round(rows)
    mine, base = rounds.get((w, a), {}), rounds.get((w, "default"), {})
    pairs = [mine[k]["step_ms_median"] / base[k]["step_ms_median"] for k in mine if k in base]
    if pairs:
        return median(pairs)
    r, b = runs.get((w, a)), runs.get((w, "default"))
    if r and b and r.get("ok") and b.get("ok") and b.get("step_ms_median") and r.get("step_ms_median") is not None:
        return r["step_ms_median"] / b["step_ms_median"]
    return None


def round_spread(rows, w, a):
    """(slowest - fastest) / median of the allocator's median steps over
    its rounds; None with fewer than two rounds."""
    per = [r["step_ms_median"] for r in by_round(rows).get((w, a), {}).values()]
    return (max(per) - min(per)) / median(per) if len(per) > 1 else None


def rounds_table(rows, workloads):
    """Lines of the step-time table over rounds, empty without rounds."""
    rounds = by_round(rows)
    if not rounds:
        return []
    lines = ["## Step time over rounds (each round: every allocator once, a fresh process each)", "",
             "| workload | allocator | median step per round, ms | median of the rounds, ms | spread of the rounds "
             "| / default, median of the rounds' ratios |",
             "|---|---|---|---|---|---|"]
    runs = latest(rows)
    for w in workloads:
        for a in ORDER:
            rs = rounds.get((w, a))
            if not rs:
                continue
            per = [rs[k]["step_ms_median"] for k in sorted(rs)]
            rel = step_ratio(rows, runs, w, a)
            spread = round_spread(rows, w, a)
            lines.append("| %s | %s | %s | %.2f | %s | %s |" % (
                w, a, ", ".join("%.1f" % x for x in per), median(per),
                "%.1f %%" % (100 * spread) if spread is not None else "-",
                "%.3f" % rel if rel is not None and a != "default" else "-"))
    lines += ["", "(spread: (slowest - fastest) / median of the allocator's own rounds; a ratio to the default "
              "is decided only where it stands well outside the spreads)", ""]
    return lines


def steps_table(rows, workloads):
    """Lines of the table of each run's steps (train_bench.py's step_ms and
    sm_mhz): how much the steps of one process scatter, and the SM clock
    they ran at, so that a run that is slow throughout can be told from
    one with a few slow steps, and a slow GPU clock from a slow host.
    Empty when no run has step_ms."""
    got = [r for r in rows if r.get("ok") and r.get("step_ms")]
    if not got:
        return []
    lines = ["## Steps within each run (every timed step; SM clock read after each, through NVML)", "",
             "| workload | allocator | round | steps | median ms | p10–p90 ms | SM clock MHz, median (min–max) |",
             "|---|---|---|---|---|---|---|"]
    for w in workloads:
        for r in got:
            if r.get("workload") != w:
                continue
            t = sorted(r["step_ms"])
            lo, hi = t[len(t) // 10], t[min(len(t) - 1, (len(t) * 9) // 10)]
            m = r.get("sm_mhz") or []
            clock = "%d (%d–%d)" % (median(m), min(m), max(m)) if m else "-"
            lines.append("| %s | %s | %s | %d | %.1f | %.1f–%.1f | %s |" % (
                w, r.get("allocator"), r.get("round", "-"), len(t), median(t), lo, hi, clock))
    lines.append("")
    return lines


def timed_table(rows, workloads):
    """Lines of the table of the allocators' driver work during the timed
    steps (train_bench.py's timed_alloc), empty when no run has it. The
    share is vram's time in driver calls and stream waits over the timed
    steps' wall time, its range over the runs (rounds) of the pair."""
    got = {}
    for r in rows:
        t = r.get("timed_alloc")
        if r.get("ok") and isinstance(t, dict) and "error" not in t:
            got.setdefault((r.get("workload"), r.get("allocator")), []).append(t)
    if not got:
        return []
    lines = ["## Driver work in the timed steps (per run; the latest run's counts, the share's range over the runs)", "",
             "| workload | allocator | runs | allocs+creates | frees+releases | maps | unmaps | stream waits "
             "| in driver calls, ms | waiting, ms | share of step time |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for w in workloads:
        allocs = [a for a in ORDER if (w, a) in got] + sorted(a for (ww, a) in got if ww == w and a not in ORDER)
        for a in allocs:
            ts = got[(w, a)]
            t = ts[-1]
            shares = [x["share_of_step_time"] for x in ts if "share_of_step_time" in x]
            share = "-"
            if shares:
                lo, hi = min(shares), max(shares)
                share = "%.2f %%" % (100 * lo) if lo == hi else "%.2f–%.2f %%" % (100 * lo, 100 * hi)

            def ms(k):
                return "%.1f" % (t[k] / 1e6) if k in t else "-"

            lines.append("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                w, a, len(ts), t.get("num_device_alloc", "-"), t.get("num_device_free", "-"),
                t.get("num_mem_map", "-"), t.get("num_mem_unmap", "-"), t.get("num_stream_syncs", "-"),
                ms("device_call_ns"), ms("stream_sync_ns"), share))
    lines.append("")
    return lines


# ---- vram fit ---------------------------------------------------------------

def fit_range(rows, workload, allocator, cap_gib):
    """(min, max) for vram fit: the memory per batch element from the run of
    allocator (else default, else any), min at 0.6 of the estimated maximum
    and max twice min, so that the doubling step from min ends the climb."""
    runs = latest(rows)
    cands = [runs.get((workload, allocator)), runs.get((workload, "default"))]
    cands += [r for (w, _), r in sorted(runs.items(), key=lambda kv: str(kv[0])) if w == workload]
    figures = []
    for r in cands:
        if not r or not r.get("ok"):
            continue
        peak, idle, b = r.get("peak_reserved"), r.get("allocated_idle"), r.get("batch")
        if peak and idle is not None and b and peak > idle:
            figures.append((idle, (peak - idle) / b))
    if workload in FIT_FALLBACK:
        figures.append(FIT_FALLBACK[workload])
    for idle, per in figures:
        est = (cap_gib * GiB - idle) / per
        if est >= 2:
            lo = max(1, int(math.floor(0.6 * est)))
            return lo, max(lo + 1, 2 * lo)
    return 1, 1024


def fit_retry(res):
    """(min, max) for a second search when the first hit an end of its
    range: the smallest batch did not fit, or the largest did; else None."""
    if not res or res.get("failure"):
        return None
    trials = [t for t in res.get("trials") or [] if t.get("outcome") != "skipped"]
    if not trials:
        return None
    if not res.get("found"):
        first = trials[0]
        if first.get("outcome") == "oom" and first["batch"] > 1:
            return max(1, first["batch"] // 4), first["batch"] - 1
        return None
    if str(res.get("stop", "")).startswith("the largest batch allowed"):
        m = res["max_batch"]
        return m, 2 * m
    return None


def load_fits(d):
    """{(workload, allocator): fit summary} from DIR/fit: fit-W-A.json (and
    the retry fit-W-A.retry.json, which wins when present)."""
    out = {}
    for p in sorted(glob.glob(os.path.join(d, "fit", "fit-*.json"))):
        name = os.path.basename(p)[len("fit-"):-len(".json")]
        retry = name.endswith(".retry")
        if retry:
            name = name[:-len(".retry")]
        parts = name.split("-", 1)
        if len(parts) != 2:
            continue
        key = (parts[0], parts[1])
        if key in out and out[key].get("retry") and not retry:
            continue
        try:
            with open(p) as f:
                res = json.load(f)
        except (OSError, ValueError) as e:
            out[key] = {"text": "unreadable (%s)" % e.__class__.__name__, "max": None}
            continue
        out[key] = summarise_fit(res)
        out[key]["retry"] = retry
    return out


def summarise_fit(res):
    ran = [t for t in res.get("trials") or [] if t.get("outcome") != "skipped"]
    n = len(ran)
    if res.get("failure"):
        f = res["failure"]
        return {"text": "failed at batch %s, exit status %s (%d trials)" % (f.get("batch"), f.get("exit_code"), n),
                "max": None, "trials": n, "stop": res.get("stop")}
    if not res.get("found"):
        return {"text": "none fits (%d trials)" % n, "max": None, "trials": n, "stop": res.get("stop")}
    m = res.get("max_batch")
    if res.get("stop") == "cancelled":  # ended at the deadline: a lower bound only
        return {"text": "≥%d (cut short after %d trials)" % (m, n), "max": None, "trials": n, "stop": "cancelled"}
    at_top = str(res.get("stop", "")).startswith("the largest batch allowed")
    return {"text": "%s%d (%d trials)" % ("≥" if at_top else "", m, n), "max": m, "at_top": at_top,
            "trials": n, "stop": res.get("stop")}


# ---- tables -----------------------------------------------------------------

def gib(x):
    return "-" if x is None else "%.2f" % (x / GiB)


def fnum(x, fmt="%.1f"):
    return "-" if x is None else fmt % x


def same_float(a, b):
    if a is None or b is None:
        return False
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


def compare_losses(r, base):
    """(identical, |diff| of the final losses or None, text)."""
    la, lb = r.get("losses") or [], base.get("losses") or []
    n = min(len(la), len(lb))
    if n == 0:
        return False, None, "-"
    for i in range(n):
        if not same_float(la[i], lb[i]):
            d = abs(la[n - 1] - lb[n - 1]) if len(la) == len(lb) else None
            return False, d, "no (step %d)" % i
    d = abs(la[n - 1] - lb[n - 1])
    note = "" if len(la) == len(lb) else " (first %d steps)" % n
    return True, d, "yes" + note


def workload_table(w, runs, fits):
    lines = ["### %s" % w, ""]
    lines.append("| allocator | peak reserved GiB | peak allocated GiB | reserved/allocated | step median ms "
                 "| step p95 ms | step vs default | final loss | loss = default | abs diff "
                 "| largest batch under cap |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    base = runs.get((w, "default"))
    allocs = [a for a in ORDER if (w, a) in runs or (w, a) in fits]
    allocs += sorted({a for (ww, a) in list(runs) + list(fits) if ww == w and a not in ORDER})
    for a in allocs:
        r = runs.get((w, a))
        fit = fits.get((w, a), {}).get("text", "-")
        if r is None:
            lines.append("| %s | - | - | - | - | - | - | - | - | - | %s |" % (a, fit))
            continue
        if not r.get("ok"):
            lines.append("| %s | failed: %s | | | | | | | | | %s |" % (a, str(r.get("error", "?"))[:120].replace("|", "/"),
                                                                        fit))
            continue
        rel = "-"
        if base and base.get("ok") and base.get("step_ms_median") and r.get("step_ms_median") is not None:
            rel = "%.3f" % (r["step_ms_median"] / base["step_ms_median"])
        ident, diff = "-", "-"
        if base and base.get("ok") and a != "default":
            _, d, ident = compare_losses(r, base)
            diff = "-" if d is None else "%.3g" % d
        trunc = " (truncated)" if r.get("truncated") else ""
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            a, gib(r.get("peak_reserved")), gib(r.get("peak_allocated")), fnum(r.get("ratio"), "%.3f"),
            fnum(r.get("step_ms_median"), "%.2f") + trunc, fnum(r.get("step_ms_p95"), "%.2f"), rel,
            fnum(r.get("loss_final"), "%.6g"), ident, diff, fit))
    notes = sorted({n for a in allocs for n in (runs.get((w, a)) or {}).get("notes", [])})
    nondet = sorted({n for a in allocs for n in (runs.get((w, a)) or {}).get("nondeterministic", [])})
    if notes or nondet:
        lines.append("")
        lines += ["note: " + n for n in notes]
        lines += ["nondeterministic (losses may differ run to run under any allocator): " + n for n in nondet]
    lines.append("")
    return lines


def lockstep_ratios(ls_rows):
    """lockstep_bench.order_corrected's {(workload, allocator): (ratio, lo,
    hi, pairs of processes an order)} and {workload: the median per-step
    ratio of its default,default controls, their steps pooled (the last
    control's median where a line lacks its steps)}."""
    lines = {}
    for r in ls_rows:
        if r.get("ok") and r.get("first") == r.get("second") == "default" and "ratio_median" in r:
            lines.setdefault(r["workload"], []).append(r)
    control = {w: median([x for r in c for x in r["ratios"]]) if all(r.get("ratios") for r in c)
               else c[-1]["ratio_median"] for w, c in lines.items()}
    return lockstep_bench.order_corrected(ls_rows), control


def lockstep_section(ls_rows):
    if not ls_rows:
        return []
    return ["## Step time in lockstep (lockstep_bench.py: the runs of a pair take turns step by step)", "",
            lockstep_bench.table(ls_rows), ""]


def targets(workloads, runs, fits, rows=(), ls_rows=()):
    """Lines of the target checks, and whether every check passed."""
    out, all_ok = ["## Targets", ""], True
    lock, control = lockstep_ratios(ls_rows)
    for a in VRAM:
        if not any((w, a) in runs or (w, a) in fits or (w, a) in lock for w in workloads):
            continue
        checks = []
        # reserved/allocated
        vals = [(w, runs[(w, a)].get("ratio")) for w in workloads if (w, a) in runs and runs[(w, a)].get("ok")]
        ok = bool(vals) and all(v is not None and v <= RATIO_MAX for _, v in vals)
        checks.append((ok, "reserved/allocated ≤ %.2f: %s" % (RATIO_MAX, ", ".join(
            "%s %s" % (w, fnum(v, "%.3f")) for w, v in vals) or "no runs")))
        # step time: the lockstep figure where there is one; a lockstep
        # interval that straddles the tolerance leaves the check undecided
        vals, states = [], []
        for w in workloads:
            if (w, a) in lock:
                v, lo, hi, k = lock[(w, a)]
                if lo is None:  # lines without their steps' ratios: a point alone decides nothing
                    states.append(None)
                elif lo > 1 + STEP_TOL:
                    states.append(False)
                else:  # a pass needs the processes' own scatter inside the interval
                    states.append(True if hi <= 1 + STEP_TOL and k >= lockstep_bench.MIN_PROCESS_PAIRS else None)
            else:
                v = step_ratio(rows, runs, w, a)
                if v is None:
                    continue
                states.append(v <= 1 + STEP_TOL)
            vals.append((w, v))
        ok = False if not vals or False in states else None if None in states else True

        def with_spread(w, v):
            if (w, a) in lock:
                _, lo, hi, k = lock[(w, a)]
                c = control.get(w)
                return "%s %.3f (lockstep, order-corrected, 95 %% interval %s, %d pair%s of processes an order%s%s)" % (
                    w, v, "%.3f–%.3f" % (lo, hi) if lo is not None else "not known", k, "" if k == 1 else "s",
                    "" if k >= lockstep_bench.MIN_PROCESS_PAIRS or lo is None else
                    ", too few to count the processes' own scatter",
                    "; default against itself %.3f" % c if c is not None else "")
            sp = round_spread(rows, w, "default")
            return "%s %.3f" % (w, v) + (" (the default's own rounds spread %.1f %%)" % (100 * sp) if sp else "")

        checks.append((ok, "median step within %.0f %% of default: %s" % (100 * STEP_TOL, ", ".join(
            with_spread(w, v) for w, v in vals) or "no pairs")))
        # largest batch
        gains = []
        for w in workloads:
            f, e = fits.get((w, a)), fits.get((w, "expandable"))
            if f and e and f.get("max") and e.get("max"):
                gains.append((w, f["max"] / e["max"] - 1))
        won = [w for w, g in gains if g >= BATCH_GAIN]
        ok = len(won) >= BATCH_WORKLOADS
        checks.append((ok, "largest batch ≥ %.0f %% above expandable on ≥ %d workloads: %s" % (
            100 * BATCH_GAIN, BATCH_WORKLOADS, ", ".join("%s %+.1f %%" % (w, 100 * g) for w, g in gains)
            or "no fits")))
        # losses
        vals = []
        for w in workloads:
            r, b = runs.get((w, a)), runs.get((w, "default"))
            if r and b and r.get("ok") and b.get("ok"):
                ident, _, _ = compare_losses(r, b)
                vals.append((w, ident))
        ok = bool(vals) and all(v for _, v in vals)
        checks.append((ok, "losses identical to default: %s" % (", ".join(
            "%s %s" % (w, "yes" if v else "no") for w, v in vals) or "no pairs")))
        out.append("%s:" % a)
        for ok, text in checks:
            out.append("- %s %s" % ({True: "PASS", False: "FAIL", None: "UNDECIDED"}[ok], text))
            all_ok &= ok is True
        out.append("")
    return out, all_ok


def percall_table(rows):
    if not rows:
        return []
    sizes = []
    for r in rows:
        for s in (r.get("sizes") or {}):
            if s not in sizes:
                sizes.append(s)
    lines = ["## ns per alloc+free from Python (median of the repeats)", "",
             "| framework | allocator | loop ns | " + " | ".join("%s B" % s for s in sizes) + " |",
             "|---|---|---|" + "---|" * len(sizes)]
    for r in rows:
        if not r.get("ok"):
            lines.append("| %s | %s | %s |" % (r.get("framework"), r.get("allocator"),
                                              "skipped" if r.get("skipped") else "failed") +
                         " %s |" % str(r.get("error", ""))[:100].replace("|", "/") + " |" * max(0, len(sizes) - 1))
            continue
        cells = [fnum((r["sizes"].get(s) or {}).get("ns_median")) for s in sizes]
        lines.append("| %s | %s | %s | %s |" % (r.get("framework"), r.get("allocator"), fnum(r.get("loop_ns")),
                                               " | ".join(cells)))
    lines.append("")
    return lines


def summary(d):
    rows = read_jsonl(os.path.join(d, "train.jsonl"))
    runs = latest(rows)
    fits = load_fits(d)
    workloads = []
    for w, _ in list(runs) + list(fits):
        if w not in workloads:
            workloads.append(w)
    lines = ["# Allocators inside PyTorch: training and generation", ""]
    r0 = next((r for r in rows if r.get("gpu")), None)
    if r0:
        lines += ["%s, torch %s, CUDA %s, transformers %s" % (r0.get("gpu"), r0.get("torch"), r0.get("cuda"),
                                                            r0.get("transformers")), ""]
    caps = sorted({(w, m.get("cap_gib")) for m in read_jsonl(os.path.join(d, "fit", "meta.jsonl"))
                   for w in [m.get("workload")]}, key=str)
    if caps:
        lines += ["vram fit caps: " + ", ".join("%s %s GiB" % c for c in caps), ""]
    for w in workloads:
        lines += workload_table(w, runs, fits)
    lines += rounds_table(rows, workloads)
    lines += steps_table(rows, workloads)
    lines += timed_table(rows, workloads)
    ls_rows = read_jsonl(os.path.join(d, "lockstep.jsonl"))
    for r in ls_rows:
        if r.get("workload") not in workloads:
            workloads.append(r.get("workload"))
    lines += lockstep_section(ls_rows)
    t, ok = targets(workloads, runs, fits, rows, ls_rows)
    lines += t
    lines += percall_table(read_jsonl(os.path.join(d, "percall.jsonl")))
    return "\n".join(lines), ok


# ---- self-test ----------------------------------------------------------------

def self_test():
    import tempfile
    import unittest

    def run(w, a, ratio, ms, losses, batch=8, idle=GiB, peak_res=None, ok=True):
        alloc = 10 * GiB
        return {"workload": w, "allocator": a, "ok": ok, "batch": batch, "steps": len(losses),
                "peak_allocated": alloc, "peak_reserved": peak_res or int(alloc * ratio), "ratio": ratio,
                "allocated_idle": idle, "step_ms_median": ms, "step_ms_p95": ms * 1.1,
                "loss_final": losses[-1], "losses_tail": losses[-5:], "losses": losses,
                "gpu": "Test GPU", "torch": "2.11", "cuda": "13.0", "transformers": "5.0"}

    def fit(found, m, stop, trials):
        return {"found": found, "max_batch": m, "stop": stop,
                "trials": [{"batch": b, "outcome": o} for b, o in trials]}

    class T(unittest.TestCase):
        def setUp(self):
            self.tmp = tempfile.TemporaryDirectory()
            self.d = self.tmp.name
            os.mkdir(os.path.join(self.d, "fit"))

        def tearDown(self):
            self.tmp.cleanup()

        def write(self, rows, fits=None):
            with open(os.path.join(self.d, "train.jsonl"), "w") as f:
                for r in rows:
                    f.write(json.dumps(r) + "\n")
                f.write("not json\n")
            for name, res in (fits or {}).items():
                with open(os.path.join(self.d, "fit", name), "w") as f:
                    json.dump(res, f)

        def test_pass(self):
            L = [5.5, 5.25, 5.0]
            self.write([run("gpt2", "default", 1.6, 100.0, L), run("gpt2", "expandable", 1.07, 101.0, L),
                        run("gpt2", "vram_paged", 1.02, 100.5, L), run("kvgen", "default", 2.4, 50.0, L),
                        run("kvgen", "vram_paged", 1.01, 50.2, L)],
                       {"fit-gpt2-expandable.json": fit(True, 40, "40 fits and 41 does not", [(20, "fits")]),
                        "fit-gpt2-vram_paged.json": fit(True, 43, "43 fits and 44 does not", [(20, "fits")]),
                        "fit-kvgen-expandable.json": fit(True, 200, "x", [(100, "fits")]),
                        "fit-kvgen-vram_paged.json": fit(True, 230, "x", [(100, "fits"), (200, "skipped")])})
            text, ok = summary(self.d)
            self.assertTrue(ok, text)
            self.assertIn("| vram_paged | 10.20 | 10.00 | 1.020 | 100.50 | 110.55 | 1.005 | 5 | yes | 0 | 43 (1 trials) |",
                          text)
            self.assertIn("PASS largest batch ≥ 5 % above expandable on ≥ 2 workloads: gpt2 +7.5 %, kvgen +15.0 %",
                          text)

        def test_fail_each(self):
            self.write([run("gpt2", "default", 1.6, 100.0, [5.5, 5.0]),
                        run("gpt2", "vram", 1.05, 102.0, [5.5, 5.000001]),
                        run("resnet", "default", 1.4, 80.0, [7.0]), run("resnet", "vram", 1.0, 80.0, [7.0]),
                        run("llama_lora", "vram", 1.0, 1.0, [1.0], ok=False)],
                       {"fit-gpt2-expandable.json": fit(True, 40, "x", [(40, "fits")]),
                        "fit-gpt2-vram.json": fit(True, 44, "x", [(44, "fits")]),
                        "fit-resnet-expandable.json": fit(True, 300, "x", [(300, "fits")]),
                        "fit-resnet-vram.json": fit(True, 303, "x", [(303, "fits")])})
            text, ok = summary(self.d)
            self.assertFalse(ok)
            self.assertIn("FAIL reserved/allocated ≤ 1.03: gpt2 1.050, resnet 1.000", text)
            self.assertIn("FAIL median step within 1 % of default: gpt2 1.020, resnet 1.000", text)
            self.assertIn("FAIL largest batch ≥ 5 % above expandable on ≥ 2 workloads: gpt2 +10.0 %, resnet +1.0 %",
                          text)
            self.assertIn("FAIL losses identical to default: gpt2 no, resnet yes", text)
            self.assertIn("| no (step 1) | 1e-06 |", text)
            self.assertIn("| vram | failed: ", text)

        def test_rounds(self):
            L = [5.0]
            rows = []
            # Round 2 ran on a slow host: every allocator slower alike. The
            # paired ratios are 1.000, 1.005, 1.010: median 1.005.
            for k, (d, v) in enumerate([(100.0, 100.0), (150.0, 150.75), (101.0, 102.01)], start=1):
                for a, ms in (("default", d), ("vram_paged", v)):
                    r = run("kvgen", a, 1.02, ms, L)
                    r["round"] = k
                    rows.append(r)
            self.write(rows)
            text, ok = summary(self.d)
            self.assertIn("| kvgen | vram_paged | 100.0, 150.8, 102.0 | 102.01 | 49.8 % | 1.005 |", text)
            self.assertIn("| kvgen | default | 100.0, 150.0, 101.0 | 101.00 | 49.5 % | - |", text)
            self.assertNotIn("Steps within each run", text)  # no step_ms in these rows
            self.assertIn("PASS median step within 1 % of default: kvgen 1.005 (the default's own rounds spread 49.5 %)", text)

        def test_steps_within_runs(self):
            L = [5.0]
            r = run("kvgen", "default", 1.08, 30.0, L)
            r["round"] = 1
            r["step_ms"] = [float(x) for x in range(10, 60, 5)]  # 10, 15, ..., 55
            r["sm_mhz"] = [1980, 1755, 1980, 1980]
            v = run("kvgen", "vram_fine", 1.02, 31.0, L)
            v["round"] = 1
            v["step_ms"] = [31.0]  # no NVML: no sm_mhz
            self.write([r, v])
            text, _ = summary(self.d)
            self.assertIn("| kvgen | default | 1 | 10 | 32.5 | 15.0–55.0 | 1980 (1755–1980) |", text)
            self.assertIn("| kvgen | vram_fine | 1 | 1 | 31.0 | 31.0–31.0 | - |", text)

        def test_lockstep(self):
            L = [5.0]
            self.write([run("kvgen", "default", 1.08, 380.0, L), run("kvgen", "vram_fine", 1.02, 420.0, L)])
            base = dict(workload="kvgen", ok=True, steps=30, first_ms=380.0, second_ms=384.0, ratio_p25=0.99,
                        ratio_p75=1.03, ratio_of_medians=1.01, first_run={}, second_run={})
            with open(os.path.join(self.d, "lockstep.jsonl"), "w") as f:
                for first, second, r in (("default", "default", 1.002), ("default", "vram_fine", 1.012),
                                         ("vram_fine", "default", 0.996)):
                    f.write(json.dumps(dict(base, first=first, second=second, ratio_median=r)) + "\n")
            text, _ = summary(self.d)
            self.assertIn("## Step time in lockstep", text)
            self.assertIn("| kvgen | default | vram_fine | 30 | 380.0 · 384.0 | 1.0120 (0.9900–1.0300) |", text)
            # sqrt(1.012 / 0.996) = 1.0080: within 1 %, though the separate runs' ratio is 1.105
            # lines without per-step ratios (no interval): undecided, whatever the point says
            self.assertIn("UNDECIDED median step within 1 % of default: kvgen 1.008 (lockstep, order-corrected, "
                          "95 % interval not known, 1 pair of processes an order; default against itself 1.002)", text)
            os.remove(os.path.join(self.d, "train.jsonl"))  # lockstep alone (train_bench.sh RUNS=0)
            text, _ = summary(self.d)
            self.assertIn("UNDECIDED median step within 1 % of default: kvgen 1.008 (lockstep", text)
            self.assertIn("FAIL reserved/allocated ≤ 1.03: no runs", text)

            # with per-step ratios the interval decides: tight around 1.05 fails even from one pair of
            # processes an order; tight around 0.99 passes only from three; a wide one is undecided
            for spread, centre, pairs, want in ((0.002, 1.05, 1, "FAIL"), (0.002, 0.99, 1, "UNDECIDED"),
                                                (0.002, 0.99, 3, "PASS"), (0.1, 1.0, 3, "UNDECIDED")):
                with open(os.path.join(self.d, "lockstep.jsonl"), "w") as f:
                    for k in range(pairs):
                        for first, second, c in (("default", "default", 1.0), ("default", "vram_fine", centre),
                                                 ("vram_fine", "default", 1 / centre)):
                            rs = [c * (1 + spread * ((i * 7 + k) % 11 - 5)) for i in range(40)]
                            f.write(json.dumps(dict(base, first=first, second=second, ratios=rs,
                                                    ratio_median=median(rs))) + "\n")
                text, _ = summary(self.d)
                self.assertIn("- %s median step within 1 %% of default: kvgen %.3f (lockstep, order-corrected, "
                              "95 %% interval " % (want, centre), text)
                self.assertIn("%d pair%s of processes an order" % (pairs, "" if pairs == 1 else "s"), text)

            # two controls: their steps pool (40 at 1.1 and 20 at 0.9: 1.1), not the last line's 0.9
            with open(os.path.join(self.d, "lockstep.jsonl"), "w") as f:
                for first, second, rs in (("default", "default", [1.1] * 40), ("default", "default", [0.9] * 20),
                                          ("default", "vram_fine", [1.0] * 40), ("vram_fine", "default", [1.0] * 40)):
                    f.write(json.dumps(dict(base, first=first, second=second, ratios=rs,
                                            ratio_median=median(rs))) + "\n")
            text, _ = summary(self.d)
            self.assertIn("default against itself 1.100", text)

        def test_timed_alloc(self):
            L = [5.0]
            rows = []
            for k, share in ((1, 0.0012), (2, 0.0034)):
                r = run("gpt2", "vram_fine", 1.01, 100.0, L)
                r["round"] = k
                r["timed_alloc"] = {"num_device_alloc": 12, "num_device_free": 3, "num_mem_map": 20,
                                    "num_mem_unmap": 8, "num_stream_syncs": 1, "stream_sync_ns": 2500000,
                                    "device_call_ns": 4000000, "share_of_step_time": share}
                rows.append(r)
            d = run("gpt2", "default", 1.2, 100.0, L)
            d["timed_alloc"] = {"num_device_alloc": 0, "num_device_free": 0}
            rows.append(d)
            self.write(rows)
            text, _ = summary(self.d)
            self.assertIn("| gpt2 | default | 1 | 0 | 0 | - | - | - | - | - | - |", text)
            self.assertIn("| gpt2 | vram_fine | 2 | 12 | 3 | 20 | 8 | 1 | 4.0 | 2.5 | 0.12–0.34 % |", text)

        def test_nondeterministic_ops_listed(self):
            r = run("gpt2", "default", 1.6, 100.0, [5.0])
            r["nondeterministic"] = ["scatter_add_cuda_kernel does not have a deterministic implementation"]
            self.write([r, run("gpt2", "vram", 1.0, 100.0, [5.0])])
            self.assertIn("nondeterministic (losses may differ run to run under any allocator): scatter_add_cuda_kernel",
                          summary(self.d)[0])

        def test_nan_losses_and_truncation(self):
            nan = float("nan")
            self.assertTrue(compare_losses({"losses": [1.0, nan]}, {"losses": [1.0, nan]})[0])
            self.assertFalse(compare_losses({"losses": [1.0, nan]}, {"losses": [1.0, 2.0]})[0])
            ident, d, text = compare_losses({"losses": [1.0, 2.0]}, {"losses": [1.0, 2.0, 3.0]})
            self.assertEqual((ident, d, text), (True, 0.0, "yes (first 2 steps)"))

        def test_fit_range(self):
            rows = [run("kvgen", "default", 2.0, 1.0, [1.0], batch=8, idle=GiB, peak_res=GiB + 8 * 100 * 2**20),
                    run("kvgen", "vram_paged", 1.0, 1.0, [1.0], batch=8, idle=GiB, peak_res=GiB + 8 * 50 * 2**20)]
            # 15 GiB free of the 16 GiB cap: 153.6 at 100 MiB a batch element, 307.2 at 50 MiB.
            self.assertEqual(fit_range(rows, "kvgen", "default", 16), (92, 184))
            self.assertEqual(fit_range(rows, "kvgen", "vram_paged", 16), (184, 368))
            self.assertEqual(fit_range(rows, "kvgen", "expandable", 16), (92, 184))  # default's run
            # No run: the figures seen on the H200, 0.38 GB + 56 MB a batch element.
            self.assertEqual(fit_range(rows, "resnet", "default", 16), (179, 358))  # 0.6 x 299.99
            bad = [dict(rows[0], ok=False)]
            self.assertEqual(fit_range(bad, "kvgen", "default", 16), (131, 262))  # 0.6 x (16 GiB - 0.74 GB) / 75 MB
            self.assertEqual(fit_range([], "other", "default", 16), (1, 1024))

        def test_fit_retry(self):
            self.assertEqual(fit_retry(fit(False, 0, "even the smallest", [(92, "oom")])), (23, 91))
            self.assertEqual(fit_retry(fit(True, 184, "the largest batch allowed, 184, fits",
                                           [(92, "fits"), (184, "fits")])), (184, 368))
            self.assertIsNone(fit_retry(fit(True, 150, "150 fits and 151 does not", [(92, "fits")])))
            self.assertIsNone(fit_retry(fit(False, 0, "batch 92 failed", [(92, "failed")])))
            failed = dict(fit(False, 46, "batch 92 failed", [(92, "oom"), (46, "fits"), (69, "failed")]),
                          failure={"batch": 69, "exit_code": 1, "tail": ["Traceback"]})
            self.assertIsNone(fit_retry(failed))
            self.assertEqual(summarise_fit(failed)["text"], "failed at batch 69, exit status 1 (3 trials)")
            self.assertIsNone(summarise_fit(failed)["max"])

        def test_cancelled_fit_is_no_answer(self):
            self.write([run("gpt2", "expandable", 1.1, 1.0, [1.0]), run("gpt2", "vram_paged", 1.0, 1.0, [1.0])],
                       {"fit-gpt2-expandable.json": fit(True, 10, "10 fits and 11 does not", [(6, "fits")]),
                        "fit-gpt2-vram_paged.json": fit(True, 12, "cancelled", [(6, "fits"), (12, "fits")])})
            text, _ = summary(self.d)
            self.assertIn("| ≥12 (cut short after 2 trials) |", text)
            self.assertIn("largest batch ≥ 5 % above expandable on ≥ 2 workloads: no fits", text)

        def test_retry_file_wins(self):
            self.write([run("kvgen", "expandable", 1.1, 1.0, [1.0])],
                       {"fit-kvgen-expandable.json": fit(False, 0, "even the smallest", [(92, "oom")]),
                        "fit-kvgen-expandable.retry.json": fit(True, 80, "80 fits and 81 does not",
                                                               [(23, "fits"), (80, "fits")])})
            fits = load_fits(self.d)
            self.assertEqual(fits[("kvgen", "expandable")]["max"], 80)
            self.assertIn("| 80 (2 trials) |", summary(self.d)[0])

        def test_percall(self):
            rows = [{"framework": "torch", "allocator": "default", "ok": True, "loop_ns": 20.0,
                     "sizes": {"512": {"ns_median": 1500.0}, "65536": {"ns_median": 1600.0}}},
                    {"framework": "cupy", "allocator": "vram", "ok": False, "skipped": True, "error": "no cupy"}]
            text = "\n".join(percall_table(rows))
            self.assertIn("| torch | default | 20.0 | 1500.0 | 1600.0 |", text)
            self.assertIn("| cupy | vram | skipped | no cupy |", text)

    suite = unittest.defaultTestLoader.loadTestsFromTestCase(T)
    res = unittest.TextTestRunner(verbosity=2).run(suite)
    return 0 if res.wasSuccessful() else 1


def main(argv):
    if argv[:1] == ["--self-test"]:
        return self_test()
    if argv[:1] == ["--fit-range"] and len(argv) == 5:
        lo, hi = fit_range(read_jsonl(argv[1]), argv[2], argv[3], float(argv[4]))
        print(lo, hi)
        return 0
    if argv[:1] == ["--fit-retry"] and len(argv) == 2:
        try:
            with open(argv[1]) as f:
                res = json.load(f)
        except (OSError, ValueError):
            return 0
        r = fit_retry(res)
        if r:
            print(r[0], r[1])
        return 0
    if len(argv) != 1 or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    text, _ = summary(argv[0])
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
