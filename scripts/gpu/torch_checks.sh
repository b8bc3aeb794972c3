#!/usr/bin/env bash
# libvram and the vram Python package on the GPU host, in one call:
#   1. the package's tests under the real PyTorch and CuPy (python/tests, VRAM_REQUIRE_GPU=1);
#   2. what PyTorch features do under the pluggable allocator (torch_limits.py);
#   3. vram run --allocator vram --limit: the job catches the out-of-memory error at the
#      cap and goes on; without --allocator vram ends it at the limit; a job without
#      torch is left alone;
#   4. the cost per call from Python (torch_percall.py), default against vram.
# Needs .gpu/vram and .gpu/libvram.so built on the development machine:
#   go build -o .gpu/vram ./cmd/vram && go build -buildmode=c-shared -o .gpu/libvram.so ./cmd/libvram
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-torch}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/torch-checks.log") 2>&1
export PYTHONUNBUFFERED=1 VRAM_LIBRARY="$PWD/.gpu/libvram.so" PYTHONPATH="$PWD/python"
PARTS=${PARTS:-tests,limits,run,percall}
rc=0
step() { echo; echo "== $(date -u +%T) $*"; }
step "start $(date -u +%FT%TZ): $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader)"
python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__)"

if [ "$PARTS" != "${PARTS/tests/}" ]; then
	step "python tests on the GPU"
	VRAM_REQUIRE_GPU=1 VRAM_REQUIRE_LIBRARY=1 timeout 400 python3 -m unittest discover -s python/tests -v 2>&1 | tail -n 90 || rc=1
fi
if [ "$PARTS" != "${PARTS/limits/}" ]; then
	step "PyTorch features under the pluggable allocator"
	timeout 500 python3 scripts/gpu/torch_limits.py || rc=1
fi
if [ "$PARTS" != "${PARTS/run/}" ]; then
	step "vram run --allocator vram --limit 8GiB (the job catches the error and goes on)"
	env -u PYTHONPATH -u VRAM_LIBRARY .gpu/vram run --allocator vram --libvram .gpu/libvram.so --limit 8GiB \
		--json-file "$OUT/run-allocator.json" -- python3 scripts/gpu/oom_catch.py
	echo "exit $?"
	python3 -c "import json; r=json.load(open('$OUT/run-allocator.json')); print('peak', r.get('peak'), 'limit', r.get('limit'))" 2>&1 | head -c 600; echo
	step "vram run --limit 8GiB without --allocator (vram ends the job at the limit)"
	env -u PYTHONPATH -u VRAM_LIBRARY .gpu/vram run --limit 8GiB --grace 5s -- python3 scripts/gpu/oom_catch.py
	echo "exit $?"
	step "vram run --allocator vram on a job that never imports torch"
	env -u PYTHONPATH -u VRAM_LIBRARY .gpu/vram run -q --allocator vram --libvram .gpu/libvram.so --limit 8GiB -- python3 -c "print('no torch here')"
	echo "exit $?"
	step "vram run --allocator vram with a library that is not there"
	env -u PYTHONPATH -u VRAM_LIBRARY .gpu/vram run --allocator vram --libvram /nonexistent/libvram.so -- python3 -c "print(1)"
	echo "exit $? (2 expected)"
fi
if [ "$PARTS" != "${PARTS/percall/}" ]; then
	step "cost per call from Python"
	for a in default vram vram_paged; do timeout 200 python3 scripts/gpu/torch_percall.py --allocator $a || rc=1; done
	for a in default vram; do timeout 200 python3 scripts/gpu/torch_percall.py --framework cupy --allocator $a || rc=1; done
fi
step "left on the device"
nvidia-smi --query-compute-apps=pid,used_memory --format=csv
step "done rc=$rc"
exit $rc
