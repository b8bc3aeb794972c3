#!/usr/bin/env bash
# The allocator's GPU checks (docs/alloc.md has the results). Two halves:
#
#   scripts/gpu/alloc.sh build   on the development machine (Go): builds
#                                .gpu/alloc.test and .gpu/alloc-race.test
#   scripts/gpu/alloc.sh run     on the GPU host (no Go needed): runs the
#                                GPU tests, the race run, the latency table,
#                                PyTorch's allocator on the same loop, the
#                                benchmarks and a CPU profile; logs go to $OUT
#
# ALLOC_GPU_QUICK=1 (for both halves) keeps only the speed measurement: the
# build skips the race binary, and the run does the per-operation latency
# table, PyTorch's allocator on the same loop (default settings) and the
# cached-path benchmark, in well under a minute.
#
# The run needs the whole device: the out-of-memory tests fill it.
set -uo pipefail
cd "$(dirname "$0")/../.."

case "${1:-}" in
build)
	set -e
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	mkdir -p .gpu
	go test -c -tags gpu -o .gpu/alloc.test ./alloc
	if [ "${ALLOC_GPU_QUICK:-}" = 1 ]; then
		ls -l .gpu/alloc.test
		exit 0
	fi
	go test -c -race -tags gpu -o .gpu/alloc-race.test ./alloc
	ls -l .gpu/alloc.test .gpu/alloc-race.test
	;;
run)
	OUT=${OUT:-/tmp/vram-alloc}
	mkdir -p "$OUT"
	T=./.gpu/alloc.test
	exec > >(tee -a "$OUT/alloc.log") 2>&1
	step() { echo; echo "== $(date -u +%T) $*"; }
	step "start $(date -u +%FT%TZ) on $(hostname)"
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv
	grep -m1 'model name' /proc/cpuinfo; nproc
	rc=0
	quick=${ALLOC_GPU_QUICK:-}

	if [ "$quick" != 1 ]; then
	step "GPU tests: data, out of memory, fragmentation, soak"
	$T -test.v -test.timeout 300s -test.run 'GPU(DataRoundTrip|OutOfMemory|Fragmentation|Soak)' || rc=1
	step "GPU concurrency, GOMAXPROCS 1 and 8"
	$T -test.v -test.timeout 120s -test.run 'GPUConcurrent' -test.cpu 1,8 || rc=1
	step "GPU concurrency under the race detector (short)"
	./.gpu/alloc-race.test -test.v -test.short -test.timeout 300s -test.run 'GPUConcurrent' -test.cpu 1,8 || rc=1
	fi
	step "per-operation latency: allocator and driver"
	$T -test.v -test.run 'GPULatency' -latency.sizes_out "$OUT/sizes.txt" || rc=1

	step "per-operation latency: PyTorch's caching allocator, natively, same loop"
	if python3 - > /tmp/torchflags <<'EOF'
import os, torch
from torch.utils import cpp_extension as ce
try:
    inc = ce.include_paths(device_type="cuda")
except TypeError:
    inc = ce.include_paths(cuda=True)
print(torch.__version__, "cuda", torch.version.cuda)
print(" ".join("-I" + p for p in inc))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
EOF
	then
		{ read -r tver; read -r tinc; read -r abi; read -r tlib; } < /tmp/torchflags
		echo "torch $tver"
		cuinc="$(dirname "$(dirname "$(command -v nvcc)")")/include"
		if ${CXX:-g++} -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" $tinc -I"$cuinc" \
			scripts/gpu/alloc_torch.cc -L"$tlib" -lc10_cuda -lc10 -Wl,-rpath,"$tlib" -o /tmp/alloc_torch; then
			/tmp/alloc_torch "$OUT/sizes.txt" 1000000 || rc=1
			if [ "$quick" != 1 ]; then
				PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True /tmp/alloc_torch "$OUT/sizes.txt" 1000000 || rc=1
			fi
		else
			echo "alloc_torch did not build"; rc=1
		fi
	else
		echo "no PyTorch"; rc=1
	fi

	if [ "$quick" = 1 ]; then
		step "benchmark: cached path on the real device"
		$T -test.run '^$' -test.bench 'GPUCachedAllocFree$' -test.benchtime 1s -test.count 5 -test.benchmem || rc=1
		step "done (quick), rc=$rc"
		exit $rc
	fi
	step "benchmarks: cached path (simulated and real device) and direct driver calls"
	$T -test.run '^$' -test.bench 'CachedAllocFree|GPUDriverAllocFree' -test.benchtime 1s -test.count 3 -test.benchmem || rc=1
	step "CPU profile of the cached path"
	$T -test.run '^$' -test.bench 'GPUCachedAllocFree$' -test.benchtime 3s -test.cpuprofile "$OUT/cpu.prof" || rc=1
	step "done, rc=$rc"
	exit $rc
	;;
*)
	echo "usage: $0 build|run" >&2
	exit 2
	;;
esac
