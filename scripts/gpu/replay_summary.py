#!/usr/bin/env python3
"""Turn the JSON lines of scripts/gpu/replay.sh into the markdown tables of
docs/benchmarks.md.

    replay_summary.py replay.jsonl > summary.md

Input lines come from `vram replay --json` (they have "policy") and from
bench/torchreplay's replay (they have "mode"). Lines written with
verification on (vram "verify": true, harness "verify": true) fill the
verify column only; the other figures come from the runs without it.
Exit status 1 when the input holds no usable line.
"""

import json
import os
import sys

ORDER = ["vram default", "vram paged", "torch default", "torch expandable", "cudaMalloc"]
MIB = 1 << 20


def allocator(rec):
    if "policy" in rec:
        return "vram " + rec["policy"]
    if rec.get("mode") == "cudamalloc":
        return "cudaMalloc"
    conf = rec.get("alloc_conf") or ""
    return "torch expandable" if "expandable_segments:True" in conf else "torch default"


def trace_name(rec):
    name = os.path.basename(str(rec.get("trace", "?")))
    for ext in (".gz", ".csv"):
        if name.endswith(ext):
            name = name[: -len(ext)]
    return name


def calls(rec, who):
    """Driver calls as text; expandable segments' figure is an estimate."""
    if "policy" in rec:
        return str(rec.get("device_calls", "?"))
    n = rec.get("driver_calls_estimate")
    if n is None:
        n = rec.get("num_device_alloc", 0) + rec.get("num_device_free", 0)
    return ("≈%d" % n) if who == "torch expandable" else str(n)


def verify_text(rec):
    if rec is None:
        return "–"
    if "policy" in rec:
        bad, n = rec.get("verify_mismatches", 0), rec.get("verified_allocations", 0)
        return "ok (%d checked)" % n if bad == 0 else "**%d of %d lost**" % (bad, n)
    bad = rec.get("verify_errors", 0)
    return "ok (%d checked)" % rec.get("frees", 0) if bad == 0 else "**%d bad bytes**" % bad


def leak_text(*recs):
    vals = [r.get("device_leaked_bytes") for r in recs if r is not None and r.get("device_leaked_bytes") is not None]
    if not vals:
        return "–"
    worst = max(vals, key=abs)
    return "0" if worst == 0 else "**%d B**" % worst


def mib(b):
    return "%.0f" % (b / MIB) if b is not None and b >= 0 else "–"


def main(argv):
    if len(argv) != 2:
        print("usage: replay_summary.py REPLAY.jsonl", file=sys.stderr)
        return 2
    runs, verifies = {}, {}
    bad = 0
    with open(argv[1]) as f:
        for i, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                print("%s:%d: not JSON (%s)" % (argv[1], i, e), file=sys.stderr)
                bad += 1
                continue
            key = (trace_name(rec), allocator(rec))
            (verifies if rec.get("verify") else runs)[key] = rec
    if not runs and not verifies:
        print("replay_summary.py: no results in %s" % argv[1], file=sys.stderr)
        return 1
    traces = sorted({k[0] for k in list(runs) + list(verifies)})
    out = []
    out.append("| trace | allocator | ops | peak live MiB | peak reserved MiB | reserved/live | driver calls | p50 ns | p99 ns | total s | device leak | verify |")
    out.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for t in traces:
        for who in ORDER:
            r, v = runs.get((t, who)), verifies.get((t, who))
            if r is None and v is None:
                continue
            if r is None:
                out.append("| %s | %s | – | – | – | – | – | – | – | – | %s | %s |" % (t, who, leak_text(v), verify_text(v)))
                continue
            oom = r.get("oom_record", -1) if "mode" in r else -1
            ratio = r.get("reserved_over_live")
            row = [t, who, str(r.get("ops", "?")), mib(r.get("peak_live_bytes")), mib(r.get("peak_reserved_bytes")),
                   "%.3f" % ratio if ratio is not None else "–", calls(r, who),
                   str(r.get("ns_per_op_p50", "–")), str(r.get("ns_per_op_p99", "–")),
                   "%.3f" % r["total_seconds"] if r.get("total_seconds") is not None else "–",
                   leak_text(r, v), verify_text(v)]
            if oom is not None and oom >= 0:
                row[1] += " (out of memory at record %d)" % oom
            out.append("| " + " | ".join(row) + " |")
    out.append("")
    out.append("vram paged against PyTorch's expandable segments (ratios; below 1 is better for vram):")
    out.append("")
    out.append("| trace | reserved/live | driver calls | total s | p50 | p99 |")
    out.append("|---|---|---|---|---|---|")
    for t in traces:
        a, b = runs.get((t, "vram paged")), runs.get((t, "torch expandable"))
        if a is None or b is None:
            continue

        def ratio(x, y):
            return "%.2f" % (x / y) if x is not None and y else "–"

        bc = b.get("driver_calls_estimate")
        out.append("| %s | %s | %s (estimate) | %s | %s | %s |" % (
            t, ratio(a.get("reserved_over_live"), b.get("reserved_over_live")),
            ratio(a.get("device_calls"), bc), ratio(a.get("total_seconds"), b.get("total_seconds")),
            ratio(a.get("ns_per_op_p50"), b.get("ns_per_op_p50")), ratio(a.get("ns_per_op_p99"), b.get("ns_per_op_p99"))))
    print("\n".join(out))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
