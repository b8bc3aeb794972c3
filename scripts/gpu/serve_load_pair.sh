#!/usr/bin/env bash
# The load harness of docs/serve.md ("Load and faults") run on the GPU host,
# two or more daemons side by side: 8 simulated GPUs × 200 processes each, a
# sample every 100 ms, history every 10 s, a /metrics scraper every 15 s,
# one /events client (none with NO_EVENTS=1), then 20 GET /api/v1/state; all
# at once on their own ports, so that they share the host's load. No GPU is
# used: the host is simulated, so the figures are the daemon's own work on
# this machine's CPUs (a quieter and faster host than the development VM).
#
# Build here: go build -o .gpu/vram ./cmd/vram; each older daemon to compare
# into .gpu/vram-NAME (git archive REV | tar -x -C DIR, then go build there);
# go build -o .gpu/serve-load ./internal/cmd/serveload.
# Run on the GPU host from the repository root:
#   OUT=... DURATION=3m [DAEMONS="vram-base vram"] [NO_EVENTS=1] bash scripts/gpu/serve_load_pair.sh
# DAEMONS names the binaries under .gpu (default: vram-base and vram). Results
# in $OUT/pair-NAME for each (the tool's result.json, series.csv and tables;
# pair-base and pair-new for the default two) and $OUT/host.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DURATION=${DURATION:-3m}
B=${VRAM_BIN_DIR:-./.gpu}
DAEMONS=${DAEMONS:-vram-base vram}
EV=()
[ "${NO_EVENTS:-0}" = 1 ] && EV=(-no-events)
# The GPU host names its one GPU in NVIDIA_VISIBLE_DEVICES, which the daemon
# honours on a simulated host too: unset, it samples all 8 simulated GPUs.
unset NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES
{ nproc; lscpu | grep -E 'Model name|Thread|Core|Socket|MHz'; cut -d' ' -f1-3 /proc/loadavg; } > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"
names=() pids=() port=9481
for d in $DAEMONS; do
	case $d in
	vram) n=new ;;
	vram-*) n=${d#vram-} ;;
	*) n=$d ;;
	esac
	"$B/serve-load" -bin "$B/$d" -addr 127.0.0.1:$port -out "$OUT/pair-$n" -duration "$DURATION" -history 10s -state-requests 20 "${EV[@]}" load > "$OUT/pair-$n.txt" 2>&1 &
	pids+=($!) names+=("$n") port=$((port + 1))
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
for n in "${names[@]}"; do echo "== $n"; grep -E 'CPU|heap|RSS|samples taken|event stream|/api/v1/state' "$OUT/pair-$n.txt"; done
exit $rc
