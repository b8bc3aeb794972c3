#!/usr/bin/env bash
# libvram on the GPU host: the PyTorch smoke test (scripts/gpu/libvram_smoke.py)
# and the per-call cost beside PyTorch's allocator (libvram_percall.cc).
# Needs .gpu/libvram.so (go build -buildmode=c-shared -o .gpu/libvram.so ./cmd/libvram).
# PERCALL_ONLY=1: the per-call cost alone (default mode), without the smoke test
# and the page_mapped repeat.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-libvram}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/libvram.log") 2>&1
rc=0
echo "== $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)"
PERCALL_ONLY=${PERCALL_ONLY:-0}
if [ "$PERCALL_ONLY" != 1 ]; then
	echo "== smoke"
	PYTHONUNBUFFERED=1 LIBVRAM=.gpu/libvram.so timeout 300 python3 scripts/gpu/libvram_smoke.py || rc=1
fi
echo "== per-call cost"
python3 - >/tmp/torchflags <<'PY'
import os, torch
from torch.utils import cpp_extension as ce
try:
    inc = ce.include_paths(device_type="cuda")
except TypeError:
    inc = ce.include_paths(cuda=True)
print(" ".join("-I" + p for p in inc))
print(int(torch._C._GLIBCXX_USE_CXX11_ABI))
print(os.path.join(os.path.dirname(torch.__file__), "lib"))
PY
{ read -r tinc; read -r abi; read -r tlib; } </tmp/torchflags
cuinc="$(dirname "$(dirname "$(command -v nvcc)")")/include"
if g++ -O2 -std=c++17 -D_GLIBCXX_USE_CXX11_ABI="$abi" $tinc -I"$cuinc" scripts/gpu/libvram_percall.cc \
	-L"$tlib" -lc10_cuda -lc10 -ldl -Wl,-rpath,"$tlib" -o /tmp/libvram_percall; then
	/tmp/libvram_percall "$PWD/.gpu/libvram.so" 2000000 || rc=1
	if [ "$PERCALL_ONLY" != 1 ]; then
		echo "-- page_mapped"
		VRAM_ALLOC_CONF=page_mapped:true /tmp/libvram_percall "$PWD/.gpu/libvram.so" 2000000 || rc=1
	fi
else
	echo "libvram_percall did not build"; rc=1
fi
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
echo "== rc=$rc"
exit $rc
