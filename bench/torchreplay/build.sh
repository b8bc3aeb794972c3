#!/usr/bin/env bash
# Build the native PyTorch replay harness (replay.cpp) against the installed
# torch's libc10_cuda.so and libc10.so, and optionally run it on a trace.
#
#   bench/torchreplay/build.sh                      build $BUILD_DIR/replay
#   bench/torchreplay/build.sh run TRACE [ARGS...]   build if needed, gunzip
#                                                    TRACE (.csv.gz) and run
#
# ARGS go to replay: --mode caching|cudamalloc, --verify, --driver-calls
# (exact counts with CUPTI, replay.cpp), --device N.
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True selects PyTorch's
# expandable segments. Environment: PYTHON (python3), CUDA_HOME
# (the directory above nvcc's, else /usr/local/cuda), CXX (g++), BUILD_DIR
# (bench/torchreplay/build).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
build=${BUILD_DIR:-$here/build}
py=${PYTHON:-python3}
nvcc=$(command -v nvcc || true)
cuda=${CUDA_HOME:-${nvcc:+$(dirname "$(dirname "$nvcc")")}}
cuda=${cuda:-/usr/local/cuda}
cxx=${CXX:-g++}

compile() {
	local info tver incs lib abi cudart
	# The same discovery as scripts/gpu/alloc.sh, which is known to build
	# against the GPU host's torch: CUDA include paths from torch (the
	# argument's name changed between versions), torch's ABI flag and lib
	# directory, and the CUDA runtime that torch itself loads when its
	# wheel brings one (same soname, so one copy is loaded).
	info=$("$py" - <<'PY'
import glob, os, torch
from torch.utils import cpp_extension as ce
try:
    inc = ce.include_paths(device_type="cuda")
except TypeError:
    inc = ce.include_paths(cuda=True)
print(torch.__version__, "cuda", torch.version.cuda)
print(":".join(inc))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
lib = os.path.join(os.path.dirname(torch.__file__), "lib")
print(lib)
site = os.path.dirname(os.path.dirname(torch.__file__))
rt = sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcudart.so*"), recursive=True))
print(rt[-1] if rt else "")
PY
) || { echo "build.sh: cannot import torch with $py" >&2; exit 2; }
	tver=$(sed -n 1p <<<"$info")
	incs=$(sed -n 2p <<<"$info")
	abi=$(sed -n 3p <<<"$info")
	lib=$(sed -n 4p <<<"$info")
	cudart=$(sed -n 5p <<<"$info")
	echo "build.sh: torch $tver, lib $lib" >&2
	[[ -f "$lib/libc10_cuda.so" ]] || { echo "build.sh: no libc10_cuda.so in $lib (a CPU-only torch?)" >&2; exit 2; }
	[[ -f "$cuda/include/cuda_runtime_api.h" ]] || { echo "build.sh: no CUDA headers in $cuda/include (set CUDA_HOME)" >&2; exit 2; }
	local flags=() rt=()
	IFS=: read -ra dirs <<<"$incs"
	for d in "${dirs[@]}"; do flags+=("-I$d"); done
	if [[ -n $cudart ]]; then
		rt=("$cudart" "-Wl,-rpath,$(dirname "$cudart")")
		echo "build.sh: CUDA runtime from torch's wheel: $cudart" >&2
	else
		local cudalib=$cuda/lib64
		[[ -d $cudalib ]] || cudalib=$cuda/lib
		rt=("-L$cudalib" -lcudart "-Wl,-rpath,$cudalib")
		echo "build.sh: CUDA runtime from $cudalib" >&2
	fi
	mkdir -p "$build"
	# CUPTI, for exact driver-call counts (cupti_count.h), when the toolkit
	# has it; a build that fails with it is made again without.
	local cupti=()
	for d in "$cuda/extras/CUPTI" "$cuda"; do
		if [[ -f $d/include/cupti.h ]]; then
			local cl=$d/lib64
			[[ -d $cl ]] || cl=$d/lib
			cupti=(-DVRAM_CUPTI "-I$d/include" "-L$cl" -lcupti "-Wl,-rpath,$cl")
			break
		fi
	done
	build_with() {
		"$cxx" -std=c++17 -O2 -Wall -D_GLIBCXX_USE_CXX11_ABI="$abi" "${flags[@]}" -I"$cuda/include" \
			"$here/replay.cpp" -o "$build/replay" "$@" \
			-L"$lib" -lc10_cuda -lc10 "${rt[@]}" -Wl,-rpath,"$lib"
	}
	if [[ ${#cupti[@]} -gt 0 ]] && build_with "${cupti[@]}"; then
		echo "built $build/replay with CUPTI driver-call counts" >&2
	else
		[[ ${#cupti[@]} -gt 0 ]] && echo "build.sh: the build with CUPTI failed; building without (no exact driver-call counts)" >&2
		[[ ${#cupti[@]} -eq 0 ]] && echo "build.sh: no cupti.h under $cuda: no exact driver-call counts" >&2
		build_with
		echo "built $build/replay" >&2
	fi
}

case "${1:-build}" in
build)
	compile
	;;
run)
	[[ $# -ge 2 ]] || { echo "usage: build.sh run TRACE[.csv|.csv.gz] [--mode caching|cudamalloc] [--verify] [--driver-calls]" >&2; exit 2; }
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
