#!/usr/bin/env python3
"""Turn the JSON lines of scripts/gpu/replay.sh into the markdown tables of
docs/benchmarks.md and the verdicts on issue 12's targets.

    replay_summary.py [--traces A,B,...] [--repeats N] replay.jsonl > summary.md

Input lines come from `vram replay --json` (they have "policy") and from
bench/torchreplay's replay (they have "mode"); replay.sh puts "race" and
"repeat" in front of each: "counts" (vram's run of both policies, the
harness with --driver-calls: memory figures and exact driver calls),
"timed" (the repeated runs, without CUPTI: times), "verify" (the verify
column only). A line without "race" counts as a timed run that also gives
memory figures and calls. --traces names the traces that should be there,
so that one with no result shows as not measured; --repeats is the number
of timed rounds asked for (the time verdict wants at least 3 either way).

Verdicts (issue 12, computed from the lines, for vram paged against
PyTorch's expandable segments on every trace): driver calls no more than
expandable segments' (exact counts only: CUPTI's, not the harness's
estimate); total replay time no more (medians of at least 3 timed runs
each); p50 <= 100 ns and p99 <= 1 us per operation (medians of the timed
runs); reserved/live <= 1.03; and reserved/live no more than expandable
segments' (the fragmentation lead kept).

Exit status 1 when the input holds no usable line or a line is not JSON;
a target not met is a result, not a failure.
"""

import json
import os
import statistics
import sys

RACE = ["vram paged", "vram default", "torch expandable", "torch default"]
ALL = RACE + ["cudaMalloc"]
# The driver functions both programs count, under the key names they share
# (vram: device_calls_by_kind; the harness: driver_calls, from CUPTI).
KINDS = ["malloc", "free", "reserve", "address_free", "create", "release", "map", "set_access", "unmap"]
MIB = 1 << 20
RESERVED_TARGET = 1.03
P50_TARGET_NS = 100
P99_TARGET_NS = 1000
MIN_RUNS = 3


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


def race_of(rec):
    if rec.get("verify"):
        return "verify"
    return rec.get("race", "legacy")


class Data:
    """The lines, by trace and allocator."""

    def __init__(self):
        self.runs = {}  # (trace, who) -> list of records (every race)

    def add(self, rec):
        self.runs.setdefault((trace_name(rec), allocator(rec)), []).append(rec)

    def traces(self):
        return sorted({t for t, _ in self.runs})

    def of(self, t, who, races):
        return [r for r in self.runs.get((t, who), []) if race_of(r) in races]

    def figures(self, t, who):
        """The record whose memory figures count: a counts run, else a timed one."""
        for races in (("counts",), ("legacy", "timed")):
            recs = self.of(t, who, races)
            if recs:
                return recs[0]
        return None

    def timed(self, t, who):
        return self.of(t, who, ("timed", "legacy"))

    def calls(self, t, who):
        """Exact driver calls by kind, or (None, why)."""
        for r in self.of(t, who, ("counts", "legacy", "timed")):
            if "policy" in r:
                k = r.get("device_calls_by_kind")
                if k is not None:
                    return {x: k.get(x, 0) for x in KINDS}, None
            elif r.get("driver_calls") is not None:
                return {x: r["driver_calls"].get(x, 0) for x in KINDS}, None
        for r in self.of(t, who, ("counts", "legacy", "timed")):
            if "policy" not in r and r.get("driver_calls_error"):
                return None, r["driver_calls_error"]
        return None, None


def median(xs):
    return statistics.median(xs) if xs else None


def fmt_ratio(x, y, digits=2):
    return ("%." + str(digits) + "f") % (x / y) if x is not None and y else "–"


def fmt_f(x, f="%.4f"):
    return f % x if x is not None else "–"


def memory_table(d, traces):
    out = ["## Memory: peak reserved / peak live (no cap)", "",
           "| trace | ops | peak live MiB | " + " | ".join(ALL) + " | same records |",
           "|---|---|---|" + "---|" * len(ALL) + "---|"]
    for t in traces:
        figs = {w: d.figures(t, w) for w in ALL}
        ref = next((f for f in figs.values() if f is not None), None)
        if ref is None:
            out.append("| %s | – | – |%s – |" % (t, " – |" * len(ALL)))
            continue
        cells = []
        for w in ALL:
            f = figs[w]
            if f is None:
                cells.append("–")
                continue
            c = fmt_f(f.get("reserved_over_live"))
            oom = f.get("oom_record")
            if f.get("out_of_memory") or (isinstance(oom, int) and oom >= 0 and "mode" in f):
                c += " (out of memory at record %s)" % oom
            cells.append(c)
        # Every run of every allocator must have replayed the same records.
        seen = [r for w in ALL for r in d.runs.get((t, w), [])]
        shapes = sorted({(r.get("ops"), r.get("peak_live_bytes")) for r in seen}, key=str)
        same = "yes (%d runs)" % len(seen) if len(shapes) == 1 else \
            "**no**: " + ", ".join("%s ops, %s B live" % s for s in shapes)
        out.append("| %s | %s | %.0f | %s | %s |" % (t, ref.get("ops"), ref.get("peak_live_bytes", 0) / MIB,
                                                     " | ".join(cells), same))
    return out + [""]


def calls_tables(d, traces):
    out = ["## Driver calls during the trace, by kind (exact: vram's counting wrapper; PyTorch's counted with CUPTI)", "",
           "| trace | allocator | " + " | ".join(KINDS) + " | total |",
           "|---|---|" + "---|" * len(KINDS) + "---|"]
    totals = {}
    for t in traces:
        for w in RACE:
            k, why = d.calls(t, w)
            if k is None:
                if why or d.runs.get((t, w)):
                    out.append("| %s | %s | not counted%s |%s –|" % (t, w, " (%s)" % why if why else "",
                                                                     " |" * (len(KINDS) - 1)))
                continue
            totals[(t, w)] = sum(k.values())
            out.append("| %s | %s | %s | %d |" % (t, w, " | ".join(str(k[x]) for x in KINDS), totals[(t, w)]))
    out += ["", "| trace | vram paged | torch expandable | paged / expandable | vram default | torch default |",
            "|---|---|---|---|---|---|"]
    for t in traces:
        g = {w: totals.get((t, w)) for w in RACE}
        n = {w: "%d" % x if x is not None else "–" for w, x in g.items()}
        out.append("| %s | %s | %s | %s | %s | %s |" % (
            t, n["vram paged"], n["torch expandable"], fmt_ratio(g["vram paged"], g["torch expandable"]),
            n["vram default"], n["torch default"]))
    return out + [""], totals


def spread(xs, scale, f):
    if not xs:
        return "–"
    return (f + " (" + f + "–" + f + "), %d") % (median(xs) * scale, min(xs) * scale, max(xs) * scale, len(xs))


def time_tables(d, traces):
    out = ["## Total replay time, ms: median (min–max), runs (the timed rounds, without CUPTI)", "",
           "| trace | " + " | ".join(ALL) + " | paged / expandable |",
           "|---|" + "---|" * len(ALL) + "---|"]
    med = {}
    for t in traces:
        cells = []
        for w in ALL:
            xs = [r["total_seconds"] for r in d.timed(t, w) if r.get("total_seconds") is not None]
            med[(t, w)] = (median(xs), len(xs))
            cells.append(spread(xs, 1e3, "%.2f"))
        out.append("| %s | %s | %s |" % (t, " | ".join(cells),
                                         fmt_ratio(med[(t, "vram paged")][0], med[(t, "torch expandable")][0])))
    out += ["", "## Host time per operation, ns: medians over the timed runs of p50 / p99", "",
            "| trace | " + " | ".join(ALL) + " |", "|---|" + "---|" * len(ALL)]
    lat = {}
    for t in traces:
        cells = []
        for w in ALL:
            rs = [r for r in d.timed(t, w) if r.get("ns_per_op_p50") is not None]
            p50 = median([r["ns_per_op_p50"] for r in rs])
            p99 = median([r["ns_per_op_p99"] for r in rs if r.get("ns_per_op_p99") is not None])
            lat[(t, w)] = (p50, p99, len(rs))
            cells.append("%.0f / %.0f" % (p50, p99) if p50 is not None and p99 is not None else "–")
        out.append("| %s | %s |" % (t, " | ".join(cells)))
    return out + [""], med, lat


def check_text(recs):
    """The device check over recs: worst figure, or the calls not given back."""
    if not recs:
        return "–", False
    bad, kinds = [], set()
    for r in recs:
        kinds.add(r.get("device_check") or ("free_memory" if "mode" in r else "device"))
        un = r.get("driver_unreleased")
        if un is not None:
            held = {k: un.get(k, 0) for k in ("allocations", "handles", "mappings")}
            if any(v > 0 for v in held.values()):
                bad.append(", ".join("%d %s" % (v, k) for k, v in held.items() if v > 0) + " not given back")
        elif r.get("device_leaked_bytes"):
            bad.append("%d B" % r["device_leaked_bytes"])
    text = "**" + "; ".join(bad) + "**" if bad else "0"
    return "%s (%s)" % (text, ", ".join(sorted(kinds))), bool(bad)


def verify_text(recs):
    if not recs:
        return "–", False
    texts, bad = [], False
    for r in recs:
        if "policy" in r:
            miss, n = r.get("verify_mismatches", 0), r.get("verified_allocations", 0)
            texts.append("ok (%d checked)" % n if miss == 0 else "**%d of %d lost**" % (miss, n))
        else:
            e = r.get("verify_errors", 0)
            texts.append("ok (%d checked)" % r.get("frees", 0) if e == 0 else "**%d bad bytes**" % e)
        bad = bad or "**" in texts[-1]
    return "; ".join(texts), bad


def checks_table(d, traces):
    out = ["## Device checks and verification", "",
           "| trace | allocator | runs | memory not given back (check) | verify |", "|---|---|---|---|---|"]
    problems = 0
    for t in traces:
        for w in ALL:
            recs = d.runs.get((t, w), [])
            if not recs:
                continue
            c, cbad = check_text(recs)
            v, vbad = verify_text(d.of(t, w, ("verify",)))
            problems += cbad + vbad
            out.append("| %s | %s | %d | %s | %s |" % (t, w, len(recs), c, v))
    return out + [""], problems


def verdict(name, traces, value, ok, show):
    """One verdict line: value(t) is None when not measured on t."""
    vals = {t: value(t) for t in traces}
    missing = [t for t in traces if vals[t] is None]
    failing = [t for t in traces if vals[t] is not None and not ok(vals[t])]
    per = ", ".join("%s %s" % (t, show(vals[t])) for t in traces if vals[t] is not None)
    if failing:
        word = "NOT MET"
        detail = "fails on " + ", ".join(failing)
    elif missing or not traces:
        word = "NOT MEASURED"
        detail = "all measured traces pass" if traces and len(missing) < len(traces) else "no figures"
    else:
        word = "MET"
        detail = "every trace"
    if missing:
        detail += "; not measured on " + ", ".join(missing)
    return "- **%s** %s: %s%s" % (word, name, detail, " (%s)" % per if per else "")


def verdicts(d, traces, totals, med, lat):
    def calls(t):
        a, b = totals.get((t, "vram paged")), totals.get((t, "torch expandable"))
        return None if a is None or b is None else (a, b)

    def time(t):
        (a, na), (b, nb) = med[(t, "vram paged")], med[(t, "torch expandable")]
        return None if a is None or b is None or na < MIN_RUNS or nb < MIN_RUNS else (a, b)

    def latency(t):
        p50, p99, n = lat[(t, "vram paged")]
        return None if p50 is None or p99 is None else (p50, p99)

    def ratio(w):
        def f(t):
            r = d.figures(t, w)
            return None if r is None or r.get("reserved_over_live") is None else r["reserved_over_live"]
        return f

    def lead(t):
        a, b = ratio("vram paged")(t), ratio("torch expandable")(t)
        return None if a is None or b is None else (a, b)

    return ["## Against issue 12 (vram paged against PyTorch's expandable segments)", "",
            verdict("driver calls ≤ expandable segments' on every trace (exact counts)", traces, calls,
                    lambda v: v[0] <= v[1], lambda v: "%d vs %d" % v),
            verdict("total replay time ≤ expandable segments' on every trace (medians of ≥ %d runs)" % MIN_RUNS,
                    traces, time, lambda v: v[0] <= v[1], lambda v: "%.2f" % (v[0] / v[1])),
            verdict("p50 ≤ %d ns and p99 ≤ 1 µs per operation on every trace (medians)" % P50_TARGET_NS,
                    traces, latency, lambda v: v[0] <= P50_TARGET_NS and v[1] <= P99_TARGET_NS,
                    lambda v: "%.0f/%.0f ns" % v),
            verdict("reserved/live ≤ %.2f on every trace" % RESERVED_TARGET, traces, ratio("vram paged"),
                    lambda v: v <= RESERVED_TARGET, lambda v: "%.4f" % v),
            verdict("fragmentation lead kept: reserved/live ≤ expandable segments' on every trace", traces, lead,
                    lambda v: v[0] <= v[1], lambda v: "%.4f vs %.4f" % v),
            ""]


def summary(lines, traces=None, repeats=None):
    """Returns (markdown, number of bad lines, number of usable lines)."""
    d = Data()
    bad, notes = 0, []
    for i, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not an object")
        except ValueError as e:
            notes.append("line %d is not a JSON object (%s)" % (i, e))
            bad += 1
            continue
        d.add(rec)
    n = sum(len(v) for v in d.runs.values())
    ts = list(traces) if traces else d.traces()
    extra = [t for t in d.traces() if t not in ts]
    ts += extra
    out = ["# The replay race", ""]
    races = {}
    for recs in d.runs.values():
        for r in recs:
            races[race_of(r)] = races.get(race_of(r), 0) + 1
    out.append("%d runs (%s) on %d traces%s." % (n, ", ".join("%s %d" % kv for kv in sorted(races.items())), len(ts),
                                                 ", %d timed rounds asked for" % repeats if repeats else ""))
    for note in notes:
        out.append("")
        out.append("Input: " + note + ".")
    out.append("")
    out += memory_table(d, ts)
    t, totals = calls_tables(d, ts)
    out += t
    t, med, lat = time_tables(d, ts)
    out += t
    t, problems = checks_table(d, ts)
    out += t
    out += verdicts(d, ts, totals, med, lat)
    out.append("Device checks and verification: %s." % (
        "every run gave all device memory back and every verified allocation kept its contents"
        if problems == 0 else "**%d allocator rows found memory not given back or lost contents** (table above)" % problems))
    return "\n".join(out), bad, n


def main(argv):
    args, traces, repeats = argv[1:], None, None
    try:
        while args and args[0].startswith("--"):
            if args[0] == "--traces" and len(args) > 1:
                traces = [t for t in args[1].split(",") if t]
                args = args[2:]
            elif args[0] == "--repeats" and len(args) > 1:
                repeats = int(args[1])
                args = args[2:]
            else:
                raise ValueError(args[0])
    except ValueError:
        args = []
    if len(args) != 1:
        print("usage: replay_summary.py [--traces A,B,...] [--repeats N] REPLAY.jsonl", file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            text, bad, n = summary(f, traces, repeats)
    except OSError as e:
        print("replay_summary.py: %s" % e, file=sys.stderr)
        return 1
    print(text)
    if n == 0:
        print("replay_summary.py: no results in %s" % args[0], file=sys.stderr)
        return 1
    if bad:
        print("replay_summary.py: %d lines of %s are not JSON objects" % (bad, args[0]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
