#!/usr/bin/env bash
# Allocators inside real PyTorch work, in one call on the GPU machine (one
# H200): every workload of train_bench.py under every allocator, each run a
# fresh process; then vram fit (the largest batch under a cap) for default,
# expandable and vram_paged on two workloads; then a check that no process
# still holds device memory, and the summary.
#
#   scripts/gpu/train_bench.sh        needs python3 with torch, transformers,
#                                     torchvision, peft; the vram package on
#                                     PYTHONPATH (python/ of the checkout is
#                                     added when PYTHONPATH is unset) and its
#                                     libvram.so (VRAM_LIBRARY, else .gpu/libvram.so
#                                     when there, else the package's own); vram fit
#                                     needs .gpu/vram (go build -o .gpu/vram
#                                     ./cmd/vram here)
#
# The runs of one workload start together, one process per allocator: they
# import torch and transformers side by side (some 15 s), wait until all
# have, then take the GPU one at a time through a lock file (train_bench.py
# --gpu-lock, --group-size), so each run has the GPU and the CPU to itself
# and its own fresh process.
#
# Results in $OUT (default /tmp/vram-train): train.jsonl (one line per run),
# train.log (everything), runs/ (each run's output), fit/ (vram fit's JSON
# and table per workload and allocator, the trials' own lines in
# *.trials.jsonl, meta.jsonl), env.txt, leftover.txt, percall.jsonl
# (PERCALL=1) and summary.md.
#
# Time on an H200 (2026-12-01, torch 2.11, transformers 5.17, 55 steps of
# which 5 warm-up, MAX_SECONDS=40; docs/gpu-runs/2026-12-01/train-2):
#   each workload  an unmeasured warm-up run (WARM_RUN=1) and ~15 s of
#                  imports before its four runs
#   resnet      ~45 ms a step:                              ~52 s for the group
#   gpt2        ~80 ms a step:                              ~63 s
#   llama_lora  ~200 ms a step:                             ~89 s
#   kvgen       ~340-460 ms a generate call:               ~133 s
#   vram fit    6 searches side by side (resnet under 16 GiB, gpt2 under
#               24 GiB): ~96 s; llama_lora's three under 24 GiB: ~144 s
#   percall     (PERCALL=1, off by default) ~10-15 s per allocator:      ~80 s
# About 9 minutes in all, with little slack: DEADLINE_S (525) bounds it. A
# workload's runs do not start after MAIN_BUDGET_S (330 s) and are listed as
# skipped; the fit searches end at the deadline (each prints its table so
# far; the summary marks them cut short). With the time short, split it in
# two calls: FIT=0, then RUNS=0 with FIT_FROM naming the first call's
# train.jsonl (carried along; without it the ranges are guessed from
# figures seen on the H200), or trim with WORKLOADS / ALLOCATORS / STEPS.
#
# Subsets and knobs (environment):
#   WORKLOADS="resnet gpt2 llama_lora kvgen"   ALLOCATORS="default expandable vram vram_paged"
#   RUNS=0|1 (1)         the runs above (0: only fit, over ranges guessed without them)
#   ROUNDS (1)           the runs ROUNDS times over, round after round (all workloads
#                        in a round, then the next), each line tagged "round": N;
#                        the summary then compares step times within each round
#   STEPS / WARMUP       total and warm-up steps of the training workloads (60 / 10)
#   KV_STEPS / KV_WARMUP the same for kvgen (55 / 5)
#   MAX_SECONDS          bound on the timed steps of one run (18; the line says truncated)
#   FIT=0|1 (1)          FIT_WORKLOADS="resnet gpt2"  FIT_ALLOCATORS="default expandable vram_paged"
#   FIT_CAP_GIB (16)     cap of the fit workloads, whole GiB; FIT_CAP_GPT2 (24),
#                        FIT_CAP_LLAMA (24), FIT_CAP_KV (6), FIT_CAP_LSTM (16) for those; FIT_MEM_GIB
#                        (120): the searches running at once hold at most this much
#   FIT_FROM             train.jsonl the fit ranges are estimated from ($OUT/train.jsonl)
#   FIT_VIA=fit|job      vram_paged in fit: through vram fit --allocator vram
#                        --alloc-conf page_mapped:true,max_bytes:CAP (fit; the default
#                        when vram fit has --alloc-conf) or installed by train_bench.py
#                        itself (job)
#   PERCALL=0|1 (0)      also torch_percall.py per allocator, and CuPy default / vram
#   LOCKSTEP="kvgen gpt2" (none)  after the runs, lockstep_bench.py on these workloads:
#                        an unmeasured warm-up run (WARM_RUN=1), a default,default
#                        control, then each of LOCKSTEP_ALLOCATORS
#                        (vram_fine) against the default in both orders, the runs of a
#                        pair taking turns step by step (~50 s a pair on kvgen, ~30 s on
#                        gpt2); $OUT/lockstep.jsonl, and the summary's step-time target
#                        then uses the order-corrected per-step ratio
#   LOCKSTEP_PAIRS (1)   pairs of processes in each order (the step-time target
#                        passes only from 3; lockstep_bench.MIN_PROCESS_PAIRS)
#   LOCKSTEP_ARGS (none) more train_bench.py arguments for the lockstep runs
#                        (for example --gc-between-steps)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/vram-train}
PY=${PY:-python3}
VRAM=${VRAM:-./.gpu/vram}
WORKLOADS=${WORKLOADS:-resnet gpt2 llama_lora kvgen}
ALLOCATORS=${ALLOCATORS:-default expandable vram vram_paged}
STEPS=${STEPS:-60}
WARMUP=${WARMUP:-10}
KV_STEPS=${KV_STEPS:-55}
KV_WARMUP=${KV_WARMUP:-5}
MAX_SECONDS=${MAX_SECONDS:-18}
RUN_TIMEOUT=${RUN_TIMEOUT:-90}
RUNS=${RUNS:-1}
ROUNDS=${ROUNDS:-1}
case $ROUNDS in [1-9]) ;; *) echo "ROUNDS=$ROUNDS: want 1 to 9" >&2; exit 2 ;; esac
FIT=${FIT:-1}
FIT_WORKLOADS=${FIT_WORKLOADS:-resnet gpt2}
FIT_ALLOCATORS=${FIT_ALLOCATORS:-default expandable vram_paged}
FIT_MEM_GIB=${FIT_MEM_GIB:-120}
FIT_TRIAL_TIMEOUT=${FIT_TRIAL_TIMEOUT:-240}
FIT_FROM=${FIT_FROM:-$OUT/train.jsonl}
PERCALL=${PERCALL:-0}
LOCKSTEP=${LOCKSTEP:-}
LOCKSTEP_ALLOCATORS=${LOCKSTEP_ALLOCATORS:-vram_fine}
LOCKSTEP_ARGS=${LOCKSTEP_ARGS:-}
LOCKSTEP_PAIRS=${LOCKSTEP_PAIRS:-1}
case $LOCKSTEP_PAIRS in '' | *[!0-9]* | 0) echo "LOCKSTEP_PAIRS=$LOCKSTEP_PAIRS: want a whole number of at least 1" >&2; exit 2 ;; esac
DEADLINE_S=${DEADLINE_S:-525}
MAIN_BUDGET_S=${MAIN_BUDGET_S:-330}
B=scripts/gpu/train_bench.py
S=scripts/gpu/train_summary.py
F=$OUT/fit
if [ -z "${PYTHONPATH:-}" ] && [ -d python/vram ]; then export PYTHONPATH=$PWD/python; fi
if [ -z "${VRAM_LIBRARY:-}" ] && [ -f .gpu/libvram.so ]; then export VRAM_LIBRARY=$PWD/.gpu/libvram.so; fi
rm -rf "$F" "$OUT/runs"
mkdir -p "$OUT/runs" "$F"
: > "$OUT/train.jsonl"
[ "$PERCALL" = 1 ] && : > "$OUT/percall.jsonl"
rm -rf "$OUT/lockstep" "$OUT/lockstep.jsonl"
exec > >(tee "$OUT/train.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
part() { echo "== $* at $(el) s"; }

part "start $(date -u +%FT%TZ) $(hostname) $(nproc) cores"
{
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader 2>&1
	$PY -c 'import importlib.metadata as m, sys, torch
def v(p):
    try: return m.version(p)
    except Exception: return "-"
print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
      "transformers", v("transformers"), "torchvision", v("torchvision"), "peft", v("peft"), "cupy", v("cupy-cuda13x"), v("cupy"))' 2>&1
	echo "PYTHONPATH=${PYTHONPATH:-} VRAM_LIBRARY=${VRAM_LIBRARY:-}"
} | tee "$OUT/env.txt"

# has_line WORKLOAD ALLOCATOR: train.jsonl has the run's line (of this
# round, with ROUNDS > 1).
has_line() {
	local pat="^{\"workload\": \"$1\", \"allocator\": \"$2\""
	if [ "$ROUNDS" -gt 1 ]; then
		grep "$pat" "$OUT/train.jsonl" | grep -qE "\"round\": $ROUND[,}]"
	else
		grep -q "$pat" "$OUT/train.jsonl"
	fi
}
ROUND= # the round being run, empty with ROUNDS=1

# warm_run WORKLOAD TAG: a short unmeasured run of the workload under the
# default allocator (WARM_RUN=0: none), logged to runs/WORKLOAD.TAG.log.
warm_run() {
	[ "${WARM_RUN:-1}" = 1 ] || return 0
	timeout 120 $PY $B --workload "$1" --allocator default --steps 3 --warmup 1 > "$OUT/runs/$1.$2.log" 2>&1
	echo "-- $1: $2 run, exit $?"
}

# group WORKLOAD ARGS...: one run per allocator, started together; they
# take the GPU one at a time. A run that left no line gets one saying why.
# A short unmeasured run of the workload comes first (WARM_RUN=0: none), so
# that the first measured run does not pay alone for cold file caches and
# GPU clocks.
group() {
	local w=$1 a n=0 rc; shift
	warm_run "$w" warm
	local -A pids=()
	for a in $ALLOCATORS; do n=$((n + 1)); done
	rm -f "$OUT/gpu.lock" "$OUT/gpu.lock.ready"
	for a in $ALLOCATORS; do
		timeout -k 10 $(( RUN_TIMEOUT * n + 120 )) $PY $B --workload "$w" --allocator "$a" \
			--gpu-lock "$OUT/gpu.lock" --group-size "$n" --run-timeout "$RUN_TIMEOUT" \
			--json "$OUT/train.jsonl" ${ROUND:+--round "$ROUND"} "$@" > "$OUT/runs/$w.$a${ROUND:+.r$ROUND}.log" 2>&1 &
		pids[$a]=$!
	done
	for a in $ALLOCATORS; do
		wait "${pids[$a]}"
		rc=$?
		if ! has_line "$w" "$a"; then
			printf '{"workload": "%s", "allocator": "%s", "ok": false, "error": "exit status %s without a result line (124: timed out)"%s}\n' \
				"$w" "$a" "$rc" "${ROUND:+, \"round\": $ROUND}" >> "$OUT/train.jsonl"
		fi
		echo "-- $w $a: exit $rc: $(grep "^{\"workload\": \"$w\", \"allocator\": \"$a\"" "$OUT/train.jsonl" | tail -n 1 |
			$PY -c 'import json,sys
d=json.loads(sys.stdin.read())
keys=("ok","error","step_ms_median","step_ms_p95","ratio","peak_reserved","loss_final","timed_steps","truncated","import_s","lock_wait_s","build_s","wall_s","notes")
print(json.dumps({k: d[k] for k in keys if k in d}))' 2>&1)"
		grep -v '^{' "$OUT/runs/$w.$a${ROUND:+.r$ROUND}.log" | grep -v -i -e warn -e 'run_backward' | tail -n 4
	done
}

if [ "$RUNS" = 1 ]; then
	for r in $(seq "$ROUNDS"); do
		[ "$ROUNDS" -gt 1 ] && ROUND=$r
		part "runs${ROUND:+, round $ROUND of $ROUNDS}: workloads [$WORKLOADS], allocators [$ALLOCATORS]"
		for w in $WORKLOADS; do
			if [ "$(el)" -ge "$MAIN_BUDGET_S" ]; then
				echo "-- $w: skipped, $(el) s is past the budget of $MAIN_BUDGET_S s for the runs"
				for a in $ALLOCATORS; do
					printf '{"workload": "%s", "allocator": "%s", "ok": false, "error": "skipped: the time budget was spent"%s}\n' "$w" "$a" "${ROUND:+, \"round\": $ROUND}" >> "$OUT/train.jsonl"
				done
				continue
			fi
			tw=$(date +%s)
			if [ "$w" = kvgen ]; then
				group "$w" --steps "$KV_STEPS" --warmup "$KV_WARMUP" --max-seconds "$MAX_SECONDS"
			else
				group "$w" --steps "$STEPS" --warmup "$WARMUP" --max-seconds "$MAX_SECONDS"
			fi
			part "workload $w done in $(( $(date +%s) - tw )) s"
		done
	done
	ROUND=
fi

if [ "$PERCALL" = 1 ]; then
	part "per-call cost from Python"
	for a in $ALLOCATORS; do
		timeout 90 $PY scripts/gpu/torch_percall.py --allocator "$a" --json "$OUT/percall.jsonl" 2>&1 | tail -n 5
	done
	for a in default vram; do
		timeout 90 $PY scripts/gpu/torch_percall.py --framework cupy --allocator "$a" --json "$OUT/percall.jsonl" 2>&1 | tail -n 5
	done
fi

if [ -n "$LOCKSTEP" ]; then
	part "lockstep: workloads [$LOCKSTEP], [$LOCKSTEP_ALLOCATORS] against the default"
	for w in $LOCKSTEP; do
		if [ $(( $(el) + 60 )) -ge "$DEADLINE_S" ]; then
			echo "-- lockstep $w: skipped, $(el) s leaves less than 60 s before the deadline of $DEADLINE_S s"
			continue
		fi
		warm_run "$w" lockstep-warm # cold caches must not land on the first pair
		pairs=(default,default)
		for _ in $(seq "$LOCKSTEP_PAIRS"); do
			for x in $LOCKSTEP_ALLOCATORS; do pairs+=("default,$x" "$x,default"); done
		done
		if [ "$w" = kvgen ]; then st=(--steps "$KV_STEPS" --warmup "$KV_WARMUP"); else st=(--steps "$STEPS" --warmup "$WARMUP"); fi
		timeout -k 10 $(( DEADLINE_S - $(el) )) $PY scripts/gpu/lockstep_bench.py --workload "$w" --pairs "${pairs[@]}" \
			"${st[@]}" --pair-timeout $(( 2 * RUN_TIMEOUT )) --out "$OUT/lockstep" --json "$OUT/lockstep.jsonl" -- $LOCKSTEP_ARGS 2>&1 | sed -n '/^$/,$p' # the table after the JSON lines
		echo "-- lockstep $w: exit ${PIPESTATUS[0]}"
	done
fi

fit_cap() {
	case $1 in
	gpt2) echo "${FIT_CAP_GPT2:-24}" ;;
	llama_lora) echo "${FIT_CAP_LLAMA:-24}" ;;
	kvgen) echo "${FIT_CAP_KV:-6}" ;;
	lstm) echo "${FIT_CAP_LSTM:-16}" ;;
	*) echo "${FIT_CAP_GIB:-16}" ;;
	esac
}

# search TAG WORKLOAD ALLOCATOR CAP MIN MAX: one vram fit.
search() {
	local tag=$1 w=$2 a=$3 cap=$4 lo=$5 hi=$6 left
	local steps=(--steps 3 --warmup 1) flags=() ja=$a capargs=(--cap-gib "$cap")
	[ "$w" = kvgen ] && steps=(--steps 1 --warmup 0)
	[ "$w" = lstm ] && steps=(--steps 8 --warmup 1) # shapes change every step: let them fragment
	if [ "$a" = vram_paged ] && [ "$FIT_VIA" = fit ]; then
		flags=(--allocator vram --alloc-conf "page_mapped:true,max_bytes:${cap}GiB")
		ja=preinstalled capargs=()
	fi
	left=$(( DEADLINE_S - $(el) ))
	[ "$left" -lt 20 ] && { echo "-- $tag: not started, no time left"; return; }
	printf '{"workload": "%s", "allocator": "%s", "tag": "%s", "cap_gib": %s, "min": %s, "max": %s, "via": "%s"}\n' \
		"$w" "$a" "$tag" "$cap" "$lo" "$hi" "$([ ${#flags[@]} -gt 0 ] && echo fit || echo job)" >> "$F/meta.jsonl"
	timeout -k 15 "$left" "$VRAM" fit --min "$lo" --max "$hi" --tolerance 1% --trial-timeout "${FIT_TRIAL_TIMEOUT}s" \
		--json-file "$F/$tag.json" "${flags[@]}" -- \
		$PY $B --workload "$w" --allocator "$ja" "${capargs[@]}" "${steps[@]}" --json "$F/$tag.trials.jsonl" --batch '{}' \
		> "$F/$tag.txt" 2> "$F/$tag.log"
	echo "-- $tag: vram fit exit $? at $(el) s: $(grep -E '^(largest batch|no batch size)' "$F/$tag.txt" | tr '\n' ' ')"
}

# fit_job WORKLOAD ALLOCATOR: a search over the range the runs suggest, and
# a second one when the answer lies at an end of that range.
fit_job() {
	local w=$1 a=$2 cap lo hi r
	cap=$(fit_cap "$w")
	read -r lo hi < <($PY $S --fit-range "$FIT_FROM" "$w" "$a" "$cap")
	search "fit-$w-$a" "$w" "$a" "$cap" "$lo" "$hi"
	r=$($PY $S --fit-retry "$F/fit-$w-$a.json")
	if [ -n "$r" ]; then
		read -r lo hi <<< "$r"
		search "fit-$w-$a.retry" "$w" "$a" "$cap" "$lo" "$hi"
	fi
}

if [ "$FIT" = 1 ]; then
	part "vram fit: workloads [$FIT_WORKLOADS], allocators [$FIT_ALLOCATORS]"
	if [ ! -x "$VRAM" ]; then
		echo "-- no $VRAM: build it with go build -o .gpu/vram ./cmd/vram; fit skipped"
	else
		if [ -z "${FIT_VIA:-}" ]; then
			if "$VRAM" fit --help 2>&1 | grep -q -- '--alloc-conf'; then FIT_VIA=fit; else FIT_VIA=job; fi
		fi
		echo "-- vram_paged in fit: via $FIT_VIA"
		declare -A held=()
		for w in $FIT_WORKLOADS; do
			for a in $FIT_ALLOCATORS; do
				cap=$(fit_cap "$w")
				while :; do # wait until the running searches leave room under FIT_MEM_GIB
					used=0
					for p in "${!held[@]}"; do
						if kill -0 "$p" 2>/dev/null; then used=$(( used + held[$p] )); else unset "held[$p]"; fi
					done
					[ $(( used + cap )) -le "$FIT_MEM_GIB" ] || [ "$used" -eq 0 ] && break
					sleep 2
				done
				echo "-- fit $w $a (cap $cap GiB) starts at $(el) s"
				fit_job "$w" "$a" &
				held[$!]=$cap
			done
		done
		for p in "${!held[@]}"; do wait "$p"; done
		for f in "$F"/fit-*.txt; do [ -e "$f" ] && { echo "--- $(basename "$f" .txt)"; cat "$f"; }; done
	fi
	part "fit done"
fi

part "device memory left"
sleep 2
{
	echo "compute apps (pid, name, used memory):"
	nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>&1
	echo "memory.used: $(nvidia-smi --query-gpu=memory.used --format=csv,noheader 2>&1)"
} | tee "$OUT/leftover.txt"
if [ -z "$(nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null)" ]; then
	echo "no process holds device memory"
else
	echo "WARNING: processes still hold device memory"
fi

part "summary"
$PY $S "$OUT" > "$OUT/summary.md"
cat "$OUT/summary.md"
part "done"
