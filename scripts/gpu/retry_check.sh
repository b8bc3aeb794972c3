#!/usr/bin/env bash
# vram run --retry-oom on a GPU with examples/retry_oom/train.py: batch 512
# fits at first (64 px images) and runs out of memory at step 12, when the
# images grow to 128 px. Two runs:
#   cap:   a cap inside the job (--cap-gib, set_per_process_memory_fraction):
#          PyTorch's message states "N allowed", vram takes it as the capacity;
#   limit: vram run --limit, no cap in the job: vram ends the job at the limit.
# Each must end with exit 0 after at least one retry, the first attempt an
# OOM (or the limit), the job must say it resumed from a step above 0 (the
# checkpoint of the failed attempt), and the final checkpoint's step must be
# --steps.
#
# Needs .gpu/vram (go build -o .gpu/vram ./cmd/vram on the development
# machine) and PyTorch with CUDA. About a minute on one H200.
# Results in $OUT: retry_check.txt (verdicts), <name>.json (vram run
# --json-file), <name>.out / <name>.err (the job's output, vram's report),
# summary.json.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-retry-check}
PY=${PY:-python3}
VRAM=${VRAM:-./.gpu/vram}
CAP=${CAP:-4}        # GiB, the cap inside the job
LIMIT=${LIMIT:-5GiB} # vram's --limit (the CUDA context counts)
STEPS=${STEPS:-30}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/retry_check.txt") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv 2>/dev/null || echo "no nvidia-smi"

# attempt NAME [vram run flags...] -- [train.py flags...]
attempt() {
  local name=$1; shift
  local flags=()
  while [ "$1" != "--" ]; do flags+=("$1"); shift; done
  shift
  rm -f "$OUT/$name.ckpt"
  timeout 300 $VRAM run --interval 20ms --grace 5s --retry-oom 4 --batch 512 --json-file "$OUT/$name.json" "${flags[@]}" -- \
    $PY examples/retry_oom/train.py --batch '{}' --size 64 --grow-at 12 --steps "$STEPS" --checkpoint "$OUT/$name.ckpt" "$@" \
    > "$OUT/$name.out" 2> "$OUT/$name.err"
  echo $? > "$OUT/$name.rc"
  echo "$name: exit $(cat "$OUT/$name.rc")"
}

attempt cap -- --cap-gib "$CAP"
attempt limit --limit "$LIMIT" --

OUT="$OUT" STEPS="$STEPS" $PY - <<'PY'
import json, os, re, sys
import torch
out, steps = os.environ["OUT"], int(os.environ["STEPS"])
summary, ok_all = {}, True
for name, first in (("cap", "oom"), ("limit", "limit")):
    rc = int(open(f"{out}/{name}.rc").read().strip() or -1)
    try:
        rep = json.load(open(f"{out}/{name}.json"))
    except Exception as e:
        rep = {"attempts": [], "error": str(e)}
    att = rep.get("attempts", [])
    text = open(f"{out}/{name}.out").read()
    resumed = [int(m) for m in re.findall(r"resumed from step (\d+)", text)]
    try:
        final = torch.load(f"{out}/{name}.ckpt", map_location="cpu")["step"]
    except Exception as e:
        final = f"unreadable: {e}"
    checks = {
        "exit 0": rc == 0,
        "at least one retry": len(att) >= 2,
        f"first attempt {first}": bool(att) and att[0]["outcome"] in ("oom", "limit"),
        "last attempt ok": bool(att) and att[-1]["outcome"] == "ok",
        "batches shrink": all(b["batch"] < a["batch"] for a, b in zip(att, att[1:])),
        "resumed from a step above 0": bool(resumed) and max(resumed) > 0,
        f"final checkpoint at step {steps}": final == steps,
    }
    ok = all(checks.values())
    ok_all &= ok
    print(f"== {name}: {'PASS' if ok else 'FAIL'}")
    for k, v in checks.items():
        print(f"  {'ok  ' if v else 'FAIL'} {k}")
    for i, a in enumerate(att, 1):
        print(f"  attempt {i}: batch {a['batch']} ({a['why']}) {a['outcome']}, peak {a['peak_bytes']/2**30:.2f} GiB, "
              f"capacity {a['capacity_bytes']/2**30:.2f} GiB, need {a['need_bytes']/2**30:.2f} GiB, {a['seconds']:.1f} s")
    print(f"  resumed from steps {resumed}, final checkpoint step {final}")
    summary[name] = {"pass": ok, "checks": checks, "attempts": att, "resumed": resumed, "final_step": final, "exit": rc}
json.dump(summary, open(f"{out}/summary.json", "w"), indent=2)
print("RETRY CHECK", "PASS" if ok_all else "FAIL")
sys.exit(0 if ok_all else 1)
PY
