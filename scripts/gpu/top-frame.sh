#!/usr/bin/env bash
# vram top on a real GPU: start PyTorch processes that hold (and one that
# grows) device memory, capture frames of `vram top --frame`, then drive the
# interactive screen under script(1): filter to one holder, open its detail
# screen, send SIGTERM through the confirmation dialog, and check that the
# holder is gone. The binary comes from .gpu/ (built on the development
# machine with `go build -o .gpu/vram ./cmd/vram`). Results go to $OUT:
#   top-frame.txt        a frame after 40 samples at 500 ms (plain text)
#   top-frame-narrow.txt the same host at 80x24
#   top-interactive.txt  the interactive session, escape sequences removed
#   top.log              the log, with the signal check's verdict
set -uo pipefail
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
B=./.gpu
S=scripts/gpu
LOG=$OUT/top.log
exec > >(tee -a "$LOG") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv

pids=()
for i in 1 2 3; do
  python3 $S/hold.py --gib $((2 * i)) --busy $((i % 2)) --seconds 300 > /tmp/tophold$i.log 2>&1 &
  pids+=($!)
done
# One process that grows by 256 MiB every 2 s: the growth column should
# show about +7680 MiB/min for it.
python3 -c '
import os, time, torch
keep = []
print("ready", os.getpid(), flush=True)
for _ in range(120):
    keep.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
    time.sleep(2)
' > /tmp/topgrow.log 2>&1 &
pids+=($!)
for t in $(seq 1 120); do
  n=$(grep -l ready /tmp/tophold*.log /tmp/topgrow.log 2>/dev/null | wc -l)
  [ "$n" -ge 4 ] && break; sleep 1
done
echo "holders ready: $n after ${t}s: ${pids[*]}"

$B/vram top --frame 40 --interval 500ms --window 20s --width 140 --height 45 > $OUT/top-frame.txt 2>>$LOG
echo "frame rc=$?"
$B/vram top --frame 4 --interval 250ms --width 80 --height 24 > $OUT/top-frame-narrow.txt 2>>$LOG
echo "narrow frame rc=$?"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> $LOG

# Interactive: the victim is the first holder (2 GiB, busy).
victim=${pids[0]}
if command -v script >/dev/null; then
  {
    sleep 3; printf '/%s\r' "$victim"   # filter to the victim's PID
    sleep 1; printf '\r'                # detail screen
    sleep 2; printf 't'                 # SIGTERM: the dialog opens
    sleep 1; printf 'y'                 # confirm
    sleep 2; printf '\033'; sleep 0.5   # back to the table
    printf '\033'; sleep 1; printf 'q'  # clear the filter, quit
  } | TERM=xterm-256color timeout 30 script -qfc "stty cols 140 rows 45; $B/vram top --interval 500ms" /tmp/top.typescript > /dev/null
  echo "interactive rc=$?"
  python3 -c '
import re, sys
s = open("/tmp/top.typescript", "rb").read().decode("utf-8", "replace")
s = re.sub(r"\x1b\][^\x07\x1b]*(\x07|\x1b\\)", "", s)
s = re.sub(r"\x1b\[[0-9;:]*m", "", s)  # colours
s = re.sub(r"\x1b\[[0-9;?<>=]*[ -/]*[@-~]", "\n", s)  # cursor movement
s = re.sub(r"\x1b[()][0-9A-Za-z]|\x1b[=>78]", "", s)
print("\n".join(l for l in s.splitlines() if l.strip()))
' > $OUT/top-interactive.txt
  sleep 1
  # The victim is our child: once signalled it stays a zombie until waited.
  st=$(ps -o stat= -p "$victim" 2>/dev/null)
  if [ -n "$st" ] && [ "${st:0:1}" != Z ]; then
    echo "SIGNAL CHECK: FAIL: PID $victim still runs"
  else
    echo "SIGNAL CHECK: ok: PID $victim is gone"
  fi
  grep -o "sent SIGTERM to PID [0-9]*[^│]*" $OUT/top-interactive.txt | head -1
else
  echo "script(1) is missing: interactive check skipped"
fi

kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null
echo "== done $(date -u +%FT%TZ)"
