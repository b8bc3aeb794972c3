#!/usr/bin/env bash
# Every GPU check of the project in one call on a GPU host (one H200 here),
# arranged so that what shares the device runs side by side and what fills
# it runs alone:
#
#   phase A, side by side (about 4 minutes):
#     foreground  cuda + cudadev tests (race detector, 1 and 16 threads)
#                 beside the allocator's speed run (ALLOC_GPU_QUICK), then
#                 the replay race (scripts/gpu/replay.sh)
#     background  vram run on leaking / non-leaking PyTorch jobs
#                 (jobs.sh, JOBS_PHASE=leaks); vram top frames and its
#                 signal path (top-frame.sh); vram watch CPU against
#                 nvidia-smi (monitor_cpu.sh)
#   phase B, alone: real OOMs and vram fit (jobs.sh, JOBS_PHASE=oomfit),
#                 which fill the GPU.
#
#   scripts/gpu/all.sh build   here (Go): builds every binary into .gpu/
#   scripts/gpu/all.sh run     there: carry .gpu; results in $OUT/*.tar.gz
#                              and $OUT/all.log
#
# Timing figures taken in phase A share the host with the background jobs;
# docs that quote them say so.
set -uo pipefail
cd "$(dirname "$0")/../.."

case "${1:-}" in
build)
	set -e
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	rm -rf .gpu && mkdir -p .gpu/cuda .gpu/traces
	go build -ldflags "-s -w" -o .gpu/vram ./cmd/vram
	go test -c -race -tags gpu -ldflags "-s -w" -o .gpu/cuda/cuda.race.test ./cuda
	go test -c -race -tags gpu -ldflags "-s -w" -o .gpu/cuda/cudadev.race.test ./alloc/cudadev
	go test -c -tags gpu -ldflags "-s -w" -o .gpu/cuda/cuda.test ./cuda
	go test -c -tags gpu -ldflags "-s -w" -o .gpu/alloc.test ./alloc
	bash scripts/gpu/replay.sh traces
	du -sh .gpu .gpu/* .gpu/cuda/*
	exit 0
	;;
run) ;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac

OUT=${OUT:-/tmp/vram-all}
W=/tmp/vram-all-work
rm -rf "$W" && mkdir -p "$W"/{cuda,alloc,replay,jobs,top,monitor} "$OUT"
exec > >(tee -a "$OUT/all.log") 2>&1
t0=$(date +%s)
el() { echo "$(( $(date +%s) - t0 ))s"; }
echo "== $(date -u +%FT%TZ) $(hostname) $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv

# Background: jobs (leaks), top, watch CPU. Each writes only under its own folder.
( OUT=$W/jobs JOBS_PHASE=leaks timeout 150 bash scripts/gpu/jobs.sh > "$W/jobs/phaseA.out" 2>&1; echo "jobs leaks rc=$? at $(el)" ) &
bgj=$!
( sleep 5; OUT=$W/top timeout 90 bash scripts/gpu/top-frame.sh > "$W/top/out" 2>&1; echo "top-frame rc=$? at $(el)"
  OUT=$W/monitor timeout 280 bash scripts/gpu/monitor_cpu.sh > "$W/monitor/out" 2>&1; echo "monitor_cpu rc=$? at $(el)" ) &
bgm=$!

echo "== cuda tests beside the allocator's speed run at $(el)"
( ALLOC_GPU_QUICK=1 OUT=$W/alloc timeout 120 bash scripts/gpu/alloc.sh run > "$W/alloc/out" 2>&1; echo "alloc quick rc=$? at $(el)" ) &
bga=$!
timeout 60 .gpu/cuda/cuda.race.test -test.v -test.run GPU -test.cpu 1,16 -test.timeout 55s > "$W/cuda/tests.log" 2>&1; echo "cuda tests rc=$? at $(el)"
timeout 60 .gpu/cuda/cudadev.race.test -test.v -test.run GPU -test.cpu 1,16 -test.timeout 55s >> "$W/cuda/tests.log" 2>&1; echo "cudadev tests rc=$? at $(el)"
timeout 30 .gpu/cuda/cuda.test -test.run '^$' -test.bench 'GPUMemAllocFree|GPUCallOverhead' -test.benchtime 2000x > "$W/cuda/bench.log" 2>&1; echo "cuda bench rc=$? at $(el)"
grep -E "^(--- |ok|FAIL|PASS)" "$W/cuda/tests.log" | sort | uniq -c | sort -rn | head -40
wait $bga
tail -40 "$W/alloc/alloc.log" 2>/dev/null

echo "== replay race at $(el)"
# One timed round and no cudaMalloc runs: the race's medians come from
# scripts/gpu/replay.sh run alone (docs/benchmarks.md).
OUT=$W/replay REPEATS=1 VRAM_REPLAY_CUDAMALLOC=0 VRAM_REPLAY_BUDGET_S=115 timeout 140 bash scripts/gpu/replay.sh run > "$W/replay/out" 2>&1; echo "replay rc=$?"
cat "$W/replay/summary.md" 2>/dev/null || tail -30 "$W/replay/out"

echo "== waiting for the background at $(el)"
wait $bgj $bgm
tail -5 "$W/top/top.log" 2>/dev/null
cat "$W/monitor/monitor_cpu.jsonl" 2>/dev/null

echo "== phase B: OOM jobs and fit, alone, at $(el)"
OUT=$W/jobs JOBS_PHASE=oomfit timeout 150 bash scripts/gpu/jobs.sh > "$W/jobs/phaseB.out" 2>&1; echo "jobs oomfit rc=$?"
cat "$W/jobs/summary.txt" 2>/dev/null

echo "== packing at $(el)"
for d in cuda alloc replay jobs top monitor; do tar -C "$W" -czf "$OUT/$d.tar.gz" "$d"; done
ls -la "$OUT"
echo "== done in $(el)"
