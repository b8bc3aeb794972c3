"""Compare vram watch's CSV (device rows) with the spikes spike.py made:
for each spike, the highest max_bytes printed in the lines whose interval
overlaps the spike, minus the baseline before it, over the true height."""
import csv, json, sys
from datetime import datetime

spikes = json.load(open(sys.argv[1]))
rows = [r for r in csv.DictReader(open(sys.argv[2])) if r["pid"] == "" and r["gpu"] == "0"]
def ts(s):
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()
pts = [(ts(r["time"]), int(r["used_bytes"]), int(r["max_bytes"]), int(r["min_bytes"]), int(r["samples"])) for r in rows]
out = {"watch_lines": len(pts), "spikes": []}
if len(pts) > 1:
    out["mean_line_interval_ms"] = round(1000 * (pts[-1][0] - pts[0][0]) / (len(pts) - 1), 3)
    out["mean_samples_per_line"] = round(sum(p[4] for p in pts) / len(pts), 2)
for s in spikes["spikes"]:
    before = [p for p in pts if s["alloc_start"] - 0.3 < p[0] < s["alloc_start"] - 0.01]
    base = sorted(p[1] for p in before)[len(before) // 2] if before else None
    during = [p for p in pts if s["alloc_start"] - 0.005 <= p[0] <= s["freed"] + 0.03]
    peak_max = max((p[2] for p in during), default=None)
    peak_used = max((p[1] for p in during), default=None)
    rec = {"true_height": s["height_bytes"], "held_ms": round(1000 * (s["free_start"] - s["held_from"]), 2),
           "alloc_ms": round(1000 * (s["held_from"] - s["alloc_start"]), 2), "free_ms": round(1000 * (s["freed"] - s["free_start"]), 2),
           "lines_during": len(during)}
    if base is not None and peak_max is not None:
        rec["seen_by_max"] = round((peak_max - base) / s["height_bytes"], 4)
        rec["seen_by_last_value"] = round((peak_used - base) / s["height_bytes"], 4)
    out["spikes"].append(rec)
seen = [r.get("seen_by_max", 0) for r in out["spikes"]]
out["min_seen_by_max"] = min(seen) if seen else None
out["spikes_at_95pct"] = sum(1 for v in seen if v >= 0.95)
print(json.dumps(out, indent=1))
