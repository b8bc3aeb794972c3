#!/usr/bin/env bash
# Build the native PyTorch replay harness (replay.cpp) against the installed
# torch's libc10_cuda.so and libc10.so, and optionally run it on a trace.
#
#   bench/torchreplay/build.sh                      build $BUILD_DIR/replay
#   bench/torchreplay/build.sh run TRACE [ARGS...]   build if needed, gunzip
#                                                    TRACE (.csv.gz) and run
#
# ARGS go to replay: --mode caching|cudamalloc, --verify, --device N.
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True selects PyTorch's
# expandable segments. Environment: PYTHON (python3), CUDA_HOME
# (/usr/local/cuda), CXX (g++), BUILD_DIR (bench/torchreplay/build).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/build}
py=${PYTHON:-python3}
cuda=${CUDA_HOME:-/usr/local/cuda}
cxx=${CXX:-g++}

compile() {
	local info incs lib abi
	info=$("$py" -c '
import os, torch, torch.utils.cpp_extension as c
print(":".join(c.include_paths()))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
') || { echo "build.sh: cannot import torch with $py" >&2; exit 2; }
	incs=$(sed -n 1p <<<"$info")
	lib=$(sed -n 2p <<<"$info")
	abi=$(sed -n 3p <<<"$info")
	[[ -f "$lib/libc10_cuda.so" ]] || { echo "build.sh: no libc10_cuda.so in $lib (a CPU-only torch?)" >&2; exit 2; }
	[[ -f "$cuda/include/cuda_runtime_api.h" ]] || { echo "build.sh: no CUDA headers in $cuda/include (set CUDA_HOME)" >&2; exit 2; }
	local flags=()
	IFS=: read -ra dirs <<<"$incs"
	for d in "${dirs[@]}"; do flags+=("-I$d"); done
	local cudalib=$cuda/lib64
	[[ -d $cudalib ]] || cudalib=$cuda/lib
	mkdir -p "$build"
	"$cxx" -std=c++17 -O2 -Wall -D_GLIBCXX_USE_CXX11_ABI="$abi" "${flags[@]}" -I"$cuda/include" \
		"$here/replay.cpp" -o "$build/replay" \
		-L"$lib" -lc10_cuda -lc10 -L"$cudalib" -lcudart \
		-Wl,-rpath,"$lib" -Wl,-rpath,"$cudalib"
	echo "built $build/replay" >&2
}

case "${1:-build}" in
build)
	compile
	;;
run)
	[[ $# -ge 2 ]] || { echo "usage: build.sh run TRACE[.csv|.csv.gz] [--mode caching|cudamalloc] [--verify]" >&2; exit 2; }
	trace=$2
	shift 2
	[[ -x "$build/replay" && "$build/replay" -nt "$here/replay.cpp" ]] || compile
	if [[ $trace == *.gz ]]; then
		tmp=$(mktemp --suffix=.csv)
		trap 'rm -f "$tmp"' EXIT
		gunzip -c "$trace" >"$tmp"
		trace=$tmp
	fi
	"$build/replay" "$trace" "$@"
	;;
*)
	echo "usage: build.sh [build | run TRACE [ARGS...]]" >&2
	exit 2
	;;
esac
