#!/usr/bin/env bash
# The allocator statistics channel on a GPU host (docs/channel.md): a real
# PyTorch job on vram's allocator (scripts/gpu/channel_job.py), its figures
# read from outside by `vram status --json` (the job waits at each phase)
# and by `vram run --allocator vram` (its samples), printed beside what the
# job reads inside (torch.cuda.memory_allocated()/memory_reserved(), which
# are vram's once installed, and vram.torch.memory_stats()).
#
#   scripts/gpu/channel_check.sh build   here: .gpu/vram and .gpu/libvram.so
#   scripts/gpu/channel_check.sh run     there (carry .gpu); log in $OUT/channel.log
#
# What to look for: every "status" row has outside == inside for allocated
# and reserved (the job holds still while status reads, after 0.3 s: three
# of the library's 100 ms periods); every "run" row has the samples taken
# during the phase equal to the inside figures (the library publishes every
# 100 ms, vram run samples every 50 ms); the run's leak verdict is on
# "allocated"; no vram-stats.* file is left in /dev/shm at the end. The
# script exits non-zero when a figure differs.
set -uo pipefail
cd "$(dirname "$0")/../.."

if [ "${1:-}" = build ]; then
	set -e
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	mkdir -p .gpu
	go build -o .gpu/vram ./cmd/vram
	go build -buildmode=c-shared -o .gpu/libvram.so ./cmd/libvram
	exit 0
fi

OUT=${OUT:-/tmp/vram-channel}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/channel.log") 2>&1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}" VRAM_LIBRARY="$PWD/.gpu/libvram.so" PYTHONUNBUFFERED=1
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1)"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
rc=0
work=$(mktemp -d)

echo "== vram status --json against a job that holds still at each phase"
mkdir -p "$work/status"
python3 scripts/gpu/channel_job.py --dir "$work/status" --sync >"$work/status/job.log" &
job=$!
for ph in grow half odd one; do
	for _ in $(seq 600); do [ -f "$work/status/$ph.json" ] && break; sleep 0.05; done
	sleep 0.3
	.gpu/vram status --json >"$work/status/$ph.status.json" || rc=1
	touch "$work/status/$ph.done"
done
wait $job || rc=1
python3 - "$work/status" <<'PY' || rc=1
import json, sys, os
d = sys.argv[1]
bad = 0
print("%-6s %16s %16s %16s %16s %16s" % ("phase", "inside alloc", "status alloc", "inside reserved", "status reserved", "NVML used"))
for ph in ("grow", "half", "odd", "one"):
    inside = json.load(open(os.path.join(d, ph + ".json")))
    st = json.load(open(os.path.join(d, ph + ".status.json")))
    rows = [p for p in st["processes"] if p["pid"] == inside["pid"]]
    if not rows:
        print(ph, "the job is not in vram status"); bad += 1; continue
    p = rows[0]
    print("%-6s %16d %16s %16d %16s %16s" % (ph, inside["allocated"], p["allocated_bytes"], inside["reserved"], p["reserved_bytes"], p["memory_bytes"]))
    if p["allocated_bytes"] != inside["allocated"] or p["reserved_bytes"] != inside["reserved"]:
        bad += 1
others = [p for p in st["processes"] if p["pid"] != inside["pid"]]
print("other processes (allocated_bytes must be null):", [(p["pid"], p["allocated_bytes"]) for p in others])
sys.exit(1 if bad else 0)
PY

echo "== vram run --allocator vram"
mkdir -p "$work/run"
.gpu/vram run --allocator vram --libvram .gpu/libvram.so --json-file "$work/run/run.json" --csv "$work/run/run.csv" \
	--report "$OUT/channel_run.html" -- python3 scripts/gpu/channel_job.py --dir "$work/run" --hold 1.5 || rc=1
python3 - "$work/run" <<'PY' || rc=1
import json, sys, os
d = sys.argv[1]
rep = json.load(open(os.path.join(d, "run.json")))
print("allocator:", json.dumps(rep.get("allocator")))
print("leak:", rep["leak"]["verdict"], "on", rep["leak"].get("series"), "-", rep["leak"]["reason"])
bad = 0
phases = [json.load(open(os.path.join(d, ph + ".json"))) for ph in ("grow", "half", "odd", "one")]
print("%-6s %8s %16s %16s %16s %16s %8s" % ("phase", "t_s", "inside alloc", "run alloc", "inside reserved", "run reserved", "samples"))
for i, ph in enumerate(phases):
    # the job's clock starts after torch's import, vram run's at exec: compare
    # the samples of the middle of the phase, whose values must be constant
    t0, t1 = ph["t_s"], ph["t_s"] + 1.5
    smp = [s for s in rep["samples"] if s.get("allocated_bytes") is not None]
    match = [s for s in smp if s["allocated_bytes"] == ph["allocated"] and s["reserved_bytes"] == ph["reserved"]]
    print("%-6s %8.2f %16d %16s %16d %16s %8d" % (ph["phase"], t0, ph["allocated"], match[0]["allocated_bytes"] if match else "-",
                                                   ph["reserved"], match[0]["reserved_bytes"] if match else "-", len(match)))
    if len(match) < 5:  # 1.5 s at 50 ms, less the library's 100 ms lag
        bad += 1
sys.exit(1 if bad else 0)
PY
left=$(ls /dev/shm/vram-stats.* 2>/dev/null | wc -l)
echo "channel files left in /dev/shm: $left"
[ "$left" = 0 ] || rc=1
rm -rf "$work"
echo "== rc=$rc"
exit $rc
