#!/usr/bin/env bash
# Short CPU re-measurement of vram watch against nvidia-smi with 12 PyTorch
# processes holding memory (15 s each). Results go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
B=./.gpu; S=scripts/gpu
pids=()
for i in $(seq 1 12); do
  python3 $S/hold.py --gib $((1 + i % 4)) --busy $((i % 2)) --seconds 70 > /tmp/hold$i.log 2>&1 &
  pids+=($!)
done
for t in $(seq 1 60); do n=$(grep -l ready /tmp/hold*.log 2>/dev/null | wc -l); [ "$n" -ge 12 ] && break; sleep 1; done
echo "holders ready: $n after ${t}s"
python3 $S/cpu.py 14 nvsmi nvidia-smi --query-compute-apps=pid,used_memory --format=csv -lms 100 | tee -a $OUT/cpu.jsonl
python3 $S/cpu.py 14 watch100 $B/vram watch --interval 100ms --processes | tee -a $OUT/cpu.jsonl
python3 $S/cpu.py 14 watch10 $B/vram watch --interval 10ms --processes | tee -a $OUT/cpu.jsonl
tail -2 /tmp/watch10.out
kill "${pids[@]}" 2>/dev/null
