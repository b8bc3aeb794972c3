#!/usr/bin/env bash
# The truths vram estimate is checked against (GPU machine; no Go needed):
# runs scripts/gpu/estimate_truth.py over estimate/testdata/cases.json (about
# 20 cases, one process, under 4 minutes on one H200) and writes
# $OUT/truths.json and $OUT/truth.log. Copy truths.json to
# estimate/testdata/truths.json on the development machine, then:
#   go test ./estimate -run 'TestAgainstTruths|TestDocTable' -update -v
# checks the estimator against it (±10 %) and fills the measured column of
# docs/estimate.md.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-estimate-truth}
PY=${PY:-python3}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/truth.log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || echo "no nvidia-smi"
t0=$(date +%s)
HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 timeout 300 $PY scripts/gpu/estimate_truth.py --out "$OUT/truths.json" "$@"
echo "== exit $? after $(( $(date +%s) - t0 )) s"
