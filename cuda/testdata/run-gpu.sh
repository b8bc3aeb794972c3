#!/usr/bin/env bash
# Runs the GPU tests and benchmarks of packages cuda and alloc/cudadev on a
# GPU host, from the repository root, with binaries built beforehand:
#   go test -c -tags gpu -o .gpu/cuda/cuda.test ./cuda            (and -race -o .gpu/cuda/cuda.race.test)
#   go test -c -tags gpu -o .gpu/cuda/cudadev.test ./alloc/cudadev (and -race -o .gpu/cuda/cudadev.race.test)
# Logs go to $OUT (default: ./gpu-out). docs/cuda.md records the results.
set -uo pipefail
OUT=${OUT:-gpu-out}
B=.gpu/cuda
mkdir -p "$OUT"
status=0

date -u +%Y-%m-%dT%H:%MZ | tee "$OUT/card.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv | tee -a "$OUT/card.txt"

# Layouts and symbol names from the toolkit's own cuda.h.
inc=$(dirname "$(command -v nvcc)")/../include
cc=$(command -v gcc || echo nvcc)   # nvcc compiles .c files as C with the host compiler
timeout 60 $cc -I"$inc" cuda/testdata/layout.c -o /tmp/layout && /tmp/layout > "$OUT/layout.txt" || status=1
grep -nE '#define (cuEventElapsedTime|cuDeviceGetUuid|cuCtxSynchronize|cuMemGetInfo|cuStreamDestroy|cuEventDestroy|cuMemcpyHtoD|cuMemsetD8|cuDevicePrimaryCtxRelease|cuMemAlloc|cuMemFree)\b' "$inc/cuda.h" > "$OUT/header.txt"
libcuda=$(ldconfig -p | awk '/libcuda\.so\.1 /{print $NF; exit}')
# (Not nvcc -x c: that flag would make nvcc compile the library as C too.)
timeout 60 $cc -O2 -I"$inc" cuda/testdata/floor.c "$libcuda" -o /tmp/floor </dev/null || status=1

# Tests, race detector on, 1, 4 and 16 threads.
timeout 160 "$B/cuda.race.test" -test.v -test.run GPU -test.cpu 1,4,16 -test.timeout 150s 2>&1 | tee "$OUT/tests.log" || status=1
timeout 160 "$B/cudadev.race.test" -test.v -test.run GPU -test.cpu 1,4,16 -test.timeout 150s 2>&1 | tee -a "$OUT/tests.log" || status=1

# Benchmarks side by side with the native floor (before and after).
{
	echo "== native floor (C, libcuda), before"; timeout 60 /tmp/floor 3000 1000000
	echo "== Go through package cuda"
	timeout 90 "$B/cuda.test" -test.run '^$' -test.bench GPUMemAllocFree -test.benchtime 3000x
	timeout 90 "$B/cuda.test" -test.run '^$' -test.bench GPUCallOverhead -test.benchtime 1s -test.cpu 1,16
	echo "== native floor (C, libcuda), after"; timeout 60 /tmp/floor 3000 1000000
} 2>&1 | tee "$OUT/bench.log" || status=1
exit $status
