#!/usr/bin/env bash
# vram serve's CPU and memory on a real GPU: 12 PyTorch holders, the daemon
# (default configuration) for 60 s at --interval 1s, then 60 s at 100ms, a
# /metrics scrape every 15 s; CPU from /proc/PID/stat. Run on the GPU host
# from the repository root with .gpu/vram built here (go build -o
# .gpu/vram ./cmd/vram); results in $OUT. About 3 minutes.
#
# VRAM_SERVE_BINS="A B ..." measures several binaries side by side (for
# example an older build beside the current one): at each interval they
# all run at once, each on its own port and history file, over the same
# holders, so that they share the host's load. Default: ./.gpu/vram alone.
set -u
cd "$(dirname "$0")/../.." || exit 1
get() { python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "$1"; }
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
read -r -a bins <<< "${VRAM_SERVE_BINS:-./.gpu/vram}"
for b in "${bins[@]}"; do [ -x "$b" ] || { echo "not an executable: $b"; exit 1; }; done
hs=()
for i in $(seq 1 12); do python3 scripts/gpu/hold.py --gib $((1 + i % 4)) --busy $((i % 2)) --seconds 200 > /dev/null 2>&1 & hs+=($!); done
sleep 12
nvidia-smi --query-compute-apps=pid,used_memory --format=csv | wc -l
tck=$(getconf CLK_TCK)
for iv in 1s 100ms; do
  ps=(); c0=(); t0=()
  for i in "${!bins[@]}"; do
    port=$((9401 + i))
    "${bins[$i]}" serve --addr 127.0.0.1:$port --db /tmp/serve-cpu-$iv-$i.db --all-gpus --interval $iv > $OUT/serve-$iv-$i.log 2>&1 &
    ps+=($!)
  done
  sleep 10
  for i in "${!bins[@]}"; do c0+=("$(awk '{print $14+$15}' /proc/${ps[$i]}/stat)"); t0+=("$(date +%s.%N)"); done
  for k in $(seq 1 4); do
    sleep 15
    for i in "${!bins[@]}"; do get http://127.0.0.1:$((9401 + i))/metrics > /dev/null || echo "metrics failed (${bins[$i]})"; done
  done
  for i in "${!bins[@]}"; do
    p=${ps[$i]}
    c1=$(awk '{print $14+$15}' /proc/$p/stat); t1=$(date +%s.%N)
    rss=$(awk '/VmRSS/{print $2}' /proc/$p/status)
    get http://127.0.0.1:$((9401 + i))/api/v1/state | python3 -c 'import json,sys; s=json.load(sys.stdin); print("processes", len(s["processes"]))'
    echo "${bins[$i]} interval $iv: cpu $(python3 -c "print(round(100*($c1-${c0[$i]})/$tck/($t1-${t0[$i]}),2))") % of one core over $(python3 -c "print(round($t1-${t0[$i]},1))") s, rss ${rss} kB"
  done
  for p in "${ps[@]}"; do kill -TERM $p; wait $p; echo "exit $?"; done
done
kill ${hs[@]} 2>/dev/null
