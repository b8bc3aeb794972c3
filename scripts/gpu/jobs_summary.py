"""Summarise the reports of scripts/gpu/jobs.sh: one line per job with its
verdicts and whether they match what the job is built to show, and the fit
result. Writes DIR/summary.json; prints the table. Uses only the standard
library."""
import json
import os
import sys

d = sys.argv[1]
GiB = 2**30
# name: (leak verdict, oom cause, exit status) expected; None: not checked.
expect = {
    "leak_retained_graph": ("leak", "", 0),
    "leak_tensor_list": ("leak", "", 0),
    "noleak_varbatch": ("no-leak", "", 0),
    "noleak_warmup": ("no-leak", "", 0),
    "noleak_model_switch": ("no-leak", "", 0),
    "limit_tensor_list": (None, "limit", 143),
    "oom_demand": (None, "demand", 1),
    "oom_fragmentation": (None, "fragmentation", 1),
}
rows, ok_all = [], True
for name, (leak, cause, code) in expect.items():
    p = os.path.join(d, name + ".json")
    if not os.path.exists(p):
        rows.append({"job": name, "ok": False, "error": "no report"})
        ok_all = False
        continue
    r = json.load(open(p))
    got = {
        "job": name,
        "exit": r["exit_code"],
        "peak_gib": round(r["peak_bytes"] / GiB, 2),
        "steady_gib": None if r["steady_bytes"] is None else round(r["steady_bytes"] / GiB, 2),
        "samples": len(r["samples"]),
        "duration_s": round(r["duration_s"], 1),
        "leak": r["leak"]["verdict"],
        "slope_mib_min": round(r["leak"]["slope_bytes_per_s"] * 60 / 2**20, 1),
        "confidence": round(r["leak"]["confidence"], 4),
        "oom": r["oom"]["detected"],
        "cause": r["oom"]["cause"],
        "limit_hit": bool(r.get("limit") and r["limit"]["hit"]),
    }
    ok = got["exit"] == code and got["cause"] == cause and (leak is None or got["leak"] == leak)
    got["ok"] = ok
    got["expected"] = {"leak": leak, "cause": cause, "exit": code}
    ok_all &= ok
    rows.append(got)

fit = None
fp = os.path.join(d, "fit.json")
if os.path.exists(fp):
    f = json.load(open(fp))
    fit = {k: f[k] for k in ("found", "max_batch", "recommended_batch", "smallest_failing_batch", "stop", "seconds")}
    fit["trials"] = sum(1 for t in f["trials"] if t["outcome"] != "skipped")
    fit["line"] = f["line"]
    fit["budget"] = 16 + 3  # log2(65536) + 3
    fit["ok"] = f["found"] and fit["trials"] <= fit["budget"]
    ok_all &= fit["ok"]

json.dump({"jobs": rows, "fit": fit, "ok": ok_all}, open(os.path.join(d, "summary.json"), "w"), indent=2)
print(f"{'job':22} {'ok':3} {'exit':>4} {'peak GiB':>8} {'steady':>7} {'leak':>12} {'MiB/min':>8} {'conf':>6} {'oom cause':>14}")
for r in rows:
    if "error" in r:
        print(f"{r['job']:22} no  {r['error']}")
        continue
    print(f"{r['job']:22} {'yes' if r['ok'] else 'NO':3} {r['exit']:>4} {r['peak_gib']:>8} {str(r['steady_gib']):>7} "
          f"{r['leak']:>12} {r['slope_mib_min']:>8} {r['confidence']:>6} {r['cause'] or '-':>14}")
if fit:
    print(f"fit: max batch {fit['max_batch']}, recommended {fit['recommended_batch']}, "
          f"{fit['trials']} trials (budget {fit['budget']}), {fit['seconds']:.0f} s: {fit['stop']}; ok {fit['ok']}")
print("all as expected" if ok_all else "SOME JOBS DID NOT SHOW WHAT THEY ARE BUILT TO SHOW")
