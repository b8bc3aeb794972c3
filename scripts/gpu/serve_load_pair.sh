#!/usr/bin/env bash
# The load harness of docs/serve.md ("Load and faults") run on the GPU host,
# two daemons side by side: 8 simulated GPUs × 200 processes each, a sample
# every 100 ms, history every 10 s, a /metrics scraper every 15 s, one
# /events client, then 20 GET /api/v1/state; both at once on their own
# ports, so that they share the host's load. No GPU is used: the host is
# simulated, so the figures are the daemon's own work on this machine's
# CPUs (a quieter and faster host than the development VM).
#
# Build here: go build -o .gpu/vram ./cmd/vram; the older daemon to compare
# into .gpu/vram-base (git archive REV | tar -x -C DIR, then go build there);
# go build -o .gpu/serve-load ./internal/cmd/serveload.
# Run on the GPU host from the repository root: OUT=... DURATION=3m bash
# scripts/gpu/serve_load_pair.sh. Results in $OUT/pair-base and
# $OUT/pair-new (each the tool's result.json, series.csv and tables) and
# $OUT/host.txt.
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
DURATION=${DURATION:-3m}
B=${VRAM_BIN_DIR:-./.gpu}
# The GPU host names its one GPU in NVIDIA_VISIBLE_DEVICES, which the daemon
# honours on a simulated host too: unset, it samples all 8 simulated GPUs.
unset NVIDIA_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES
{ nproc; lscpu | grep -E 'Model name|Thread|Core|Socket|MHz'; cut -d' ' -f1-3 /proc/loadavg; } > "$OUT/host.txt" 2>&1
cat "$OUT/host.txt"
"$B/serve-load" -bin "$B/vram-base" -addr 127.0.0.1:9481 -out "$OUT/pair-base" -duration "$DURATION" -history 10s -state-requests 20 load > "$OUT/pair-base.txt" 2>&1 &
p1=$!
"$B/serve-load" -bin "$B/vram" -addr 127.0.0.1:9482 -out "$OUT/pair-new" -duration "$DURATION" -history 10s -state-requests 20 load > "$OUT/pair-new.txt" 2>&1 &
p2=$!
wait $p1; r1=$?
wait $p2; r2=$?
for f in pair-base pair-new; do echo "== $f"; grep -E 'CPU|heap|RSS|samples taken|event stream|/api/v1/state' "$OUT/$f.txt"; done
[ $r1 -eq 0 ] && [ $r2 -eq 0 ]
