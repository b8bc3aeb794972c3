#!/usr/bin/env bash
# vram fit on real models (GPU machine): ResNet-50 and GPT-2 (built from its
# config, random weights, nothing downloaded), each under a cap set inside
# the job (torch.cuda.set_per_process_memory_fraction, which vram fit is not
# told about) and under vram fit --limit. Checks that each search found an
# answer in at most 8 trials (docs/run.md, "Trials needed").
#
# Needs .gpu/vram (scripts/gpu/all.sh build, or go build -o .gpu/vram
# ./cmd/vram, on the development machine). The four searches run side by
# side (each trial is a fresh Python process; most of a trial is imports), so
# the whole check takes about as long as the slowest search: about 3 minutes
# on one H200. FIT_CHECK_SERIAL=1 runs them one after the other instead.
#
# Results in $OUT: fit_check.txt (the verdicts and each search's table),
# <name>.json (vram fit --json-file), <name>.err (progress and the trials'
# output tails), summary.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-fit-check}
PY=${PY:-python3}
VRAM=${VRAM:-./.gpu/vram}
CAP_RESNET=${CAP_RESNET:-8}  # GiB
CAP_GPT2=${CAP_GPT2:-12}     # GiB
mkdir -p "$OUT"
exec > >(tee -a "$OUT/fit_check.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || echo "no nvidia-smi"
t0=$(date +%s)
T=scripts/gpu/fit_trial.py

# search NAME [vram fit flags...] -- TRIAL ARGS...
search() {
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  timeout 230 $VRAM fit --interval 20ms --grace 3s --json-file "$OUT/$name.json" "${flags[@]}" -- \
    $PY $T "$@" --batch '{}' > "$OUT/$name.table" 2> "$OUT/$name.err"
  echo "$name: exit $? after $(( $(date +%s) - t0 )) s"
}

runs=(
  "resnet50_cap -- --model resnet50 --cap-gib $CAP_RESNET"
  "resnet50_limit --limit ${CAP_RESNET}GiB -- --model resnet50"
  "gpt2_cap -- --model gpt2 --cap-gib $CAP_GPT2"
  "gpt2_limit --limit ${CAP_GPT2}GiB -- --model gpt2"
)
pids=()
for r in "${runs[@]}"; do
  # shellcheck disable=SC2086
  if [ "${FIT_CHECK_SERIAL:-0}" = 1 ]; then search $r; else search $r & pids+=($!); fi
done
[ ${#pids[@]} -gt 0 ] && wait "${pids[@]}"

for r in "${runs[@]}"; do
  name=${r%% *}
  echo "== $name"
  cat "$OUT/$name.table" 2>/dev/null
  grep -E '^fit: the job can use' "$OUT/$name.err" 2>/dev/null
done

$PY - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
rows, ok = [], True
for name in ["resnet50_cap", "resnet50_limit", "gpt2_cap", "gpt2_limit"]:
    try:
        r = json.load(open(os.path.join(out, name + ".json")))
    except Exception as e:
        rows.append({"name": name, "ok": False, "error": f"no JSON result: {e}"})
        ok = False
        continue
    trials = len(r["trials"])
    good = r["found"] and trials <= 8
    ok &= good
    rows.append({"name": name, "ok": good, "trials": trials, "max_batch": r["max_batch"],
                 "smallest_failing_batch": r["smallest_failing_batch"], "stop": r["stop"],
                 "capacity_bytes": r["capacity_bytes"], "capacity_from": r.get("capacity_from", ""),
                 "seconds": round(r["seconds"], 1),
                 "sequence": " ".join(f'{t["batch"]}:{t["why"]}/{t["outcome"]}' for t in r["trials"])})
print("== verdicts (found, at most 8 trials)")
for x in rows:
    print(("PASS " if x["ok"] else "FAIL ") + json.dumps(x))
json.dump({"ok": ok, "runs": rows}, open(os.path.join(out, "summary.json"), "w"), indent=1)
print("ALL PASS" if ok else "SOME FAILED")
EOF
echo "== done in $(( $(date +%s) - t0 )) s"
