#!/usr/bin/env bash
# The monitor's GPU run: 12 PyTorch processes hold memory; capture vram
# status; run the gpu package's GPU tests and benchmarks; measure the CPU
# of vram watch against nvidia-smi; run the spike test. Binaries come from
# .gpu/ (built on the development machine). Results go to $OUT.
set -uo pipefail
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
B=./.gpu
S=scripts/gpu
LOG=$OUT/log
exec > >(tee -a "$LOG") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
nproc; python3 -c 'import torch; print("torch", torch.__version__)'
pids=()
for i in $(seq 1 12); do
  python3 $S/hold.py --gib $((1 + i % 4)) --busy $((i % 2)) --seconds 400 > /tmp/hold$i.log 2>&1 &
  pids+=($!)
done
for t in $(seq 1 120); do n=$(grep -l ready /tmp/hold*.log 2>/dev/null | wc -l); [ "$n" -ge 12 ] && break; sleep 1; done
echo "holders ready: $n after ${t}s"
{ $B/vram status; echo; $B/vram status --accounting --wide; } > $OUT/status.txt 2>&1; echo "status rc=$?"
$B/vram status --json > $OUT/status.json 2>>$LOG; echo "status --json rc=$?"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv >> $OUT/status.txt
VRAM_EXPECT_CMD=hold.py $B/gpu.test -test.v -test.run GPU -test.bench GPU -test.benchtime 2s > $OUT/gputest.log 2>&1; echo "gpu.test rc=$?"
: > $OUT/cpu.jsonl
python3 $S/cpu.py 20 nvsmi nvidia-smi --query-compute-apps=pid,used_memory --format=csv -lms 100 >> $OUT/cpu.jsonl
python3 $S/cpu.py 20 watch100 $B/vram watch --interval 100ms --processes >> $OUT/cpu.jsonl
python3 $S/cpu.py 20 watch10 $B/vram watch --interval 10ms --processes >> $OUT/cpu.jsonl
python3 $S/cpu.py 20 watch10mem $B/vram watch --interval 10ms --memory-only >> $OUT/cpu.jsonl
cat $OUT/cpu.jsonl
head -5 /tmp/watch10.out; tail -3 /tmp/watch10.out
# Spike test: watch at 10 ms while a process makes 8 GiB spikes held 10 ms.
$B/vram watch --interval 10ms --gpu 0 --csv --count 2500 > /tmp/spike_watch.csv 2>>$LOG &
wp=$!
sleep 1
python3 $S/spike.py --gib 8 --hold-ms 10 --times 10 --gap 0.5 > $OUT/spike.json; echo "spike rc=$?"
wait $wp; echo "watch rc=$?"
python3 $S/spike_report.py $OUT/spike.json /tmp/spike_watch.csv > $OUT/spike_report.json; cat $OUT/spike_report.json
gzip -c /tmp/spike_watch.csv > $OUT/spike_watch.csv.gz
kill "${pids[@]}" 2>/dev/null  # no bare wait: it would also wait for the tee above
echo "== done $(date -u +%FT%TZ)"
