#!/usr/bin/env bash
# vram run and vram fit on real PyTorch jobs (GPU machine). Needs .gpu/vram
# (go build -o .gpu/vram ./cmd/vram on the development machine). Results go
# to $OUT: summary.txt and summary.json (each job's verdicts against the
# expected ones), jobs.tar.gz (every JSON report, HTML report, CSV and log),
# and the HTML report of the retained-graph leak for a look.
#
# Timeline (about 4 minutes): the five leak-detection jobs and a job under
# --limit run side by side for $JOB_SECONDS (70 s); then the two OOM jobs;
# then vram fit on jobs/fit_model.py.
#
# PY and VRAM may point elsewhere (the local check of this script uses a
# stand-in for python3). JOBS_PHASE=leaks runs only the side-by-side jobs,
# JOBS_PHASE=oomfit only the OOM jobs, fit and the summary (they fill the
# GPU, so nothing else may run beside them); the default runs both.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-jobs}
PY=${PY:-python3}
VRAM=${VRAM:-./.gpu/vram}
SECS=${JOB_SECONDS:-70}
PHASE=${JOBS_PHASE:-all}
J=scripts/gpu/jobs
W=$OUT/jobs
mkdir -p "$W"
LOG=$OUT/log
exec > >(tee -a "$LOG") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || echo "no nvidia-smi"
$PY -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' 2>/dev/null || true
t0=$(date +%s)

# vjob NAME [vram run flags...] -- SCRIPT ARGS...: one vram run, reports in $W.
vjob() {
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  $VRAM run --json-file "$W/$name.json" --report "$W/$name.html" --csv "$W/$name.csv" "${flags[@]}" -- \
    $PY "$J/$1" "${@:2}" > "$W/$name.log" 2>&1
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s"
}

if [ "$PHASE" != oomfit ]; then
echo "== leak detection and limit ($SECS s, side by side)"
pids=()
vjob leak_retained_graph -- leak_retained_graph.py --seconds "$SECS" & pids+=($!)
vjob leak_tensor_list    -- leak_tensor_list.py --seconds "$SECS" & pids+=($!)
vjob noleak_varbatch     -- noleak_varbatch.py --seconds "$SECS" & pids+=($!)
vjob noleak_warmup       -- noleak_warmup.py --seconds "$SECS" & pids+=($!)
vjob noleak_model_switch -- noleak_model_switch.py --seconds "$SECS" & pids+=($!)
vjob limit_tensor_list --limit 2GiB --grace 5s -- leak_tensor_list.py --seconds "$SECS" --batch 512 --step-sleep 0.05 & pids+=($!)
wait "${pids[@]}"  # not a bare wait: that would also wait for the tee above
fi
[ "$PHASE" = leaks ] && { echo "== leaks phase done in $(( $(date +%s) - t0 )) s"; exit 0; }

echo "== out of memory"
vjob oom_demand -- oom.py --mode demand
vjob oom_fragmentation -- oom.py --mode fragmentation

echo "== fit"
$VRAM fit --json-file "$W/fit.json" --trial-timeout 60s -- $PY "$J/fit_model.py" --batch {} > "$W/fit.txt" 2> "$W/fit.log"
echo "fit: exit $? after $(( $(date +%s) - t0 )) s"
cat "$W/fit.txt"

echo "== summary"
$PY scripts/gpu/jobs_summary.py "$W" > "$OUT/summary.txt"
cat "$OUT/summary.txt"
cp "$W/summary.json" "$OUT/summary.json" 2>/dev/null
cp "$W/leak_retained_graph.html" "$OUT/" 2>/dev/null
tar -C "$OUT" -czf "$OUT/jobs.tar.gz" jobs && rm -rf "$W"
echo "== done in $(( $(date +%s) - t0 )) s"
