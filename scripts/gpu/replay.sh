#!/usr/bin/env bash
# The fragmentation race on a GPU (docs/benchmarks.md has the method and the
# results): the recorded traces through vram's allocator (default and
# paged policies, on the real driver) and through PyTorch's caching
# allocator natively (default, expandable segments), side by side in one
# run: exact driver calls by kind for both (vram's counting wrapper,
# PyTorch's counted with CUPTI), timed repeats for medians, every run's
# device memory checked after it, two traces' allocations verified at both
# ends before every free, and plain cudaMalloc once per trace.
#
#   scripts/gpu/replay.sh build   on the development machine (Go): builds
#                                 .gpu/vram, copies the four RMM logs into
#                                 .gpu/traces and converts the
#                                 recorded snapshots (replay/testdata/
#                                 recorded/*.pickle.gz) into RMM logs there
#                                 (internal/cmd/tracecsv), checking that
#                                 vram replays each log as its snapshot
#   scripts/gpu/replay.sh traces  the trace part of build alone
#   scripts/gpu/replay.sh run     on the GPU host (no Go needed); carry
#                                 .gpu/vram and .gpu/traces; logs, JSON lines
#                                 and the summary go to $OUT
#
# The run, in this order (each JSON line gets "race" and "repeat" keys
# saying which step wrote it):
#   1. counts: per trace, vram --policy default,paged (its counts are
#      exact at no cost) and the harness in both modes with --driver-calls
#      (CUPTI; these runs give the call counts, not the timings);
#   2. timed: REPEATS rounds; in each, per trace: vram paged, vram default,
#      torch default, torch expandable, without --driver-calls;
#   3. verify: VRAM_REPLAY_VERIFY's traces with --verify, every allocator;
#   4. cudaMalloc: the harness's --mode cudamalloc once per trace (skip it
#      with VRAM_REPLAY_CUDAMALLOC=0).
# It stops starting new steps when VRAM_REPLAY_BUDGET_S (270) seconds have
# passed; a step not started is logged as skipped and counts as failed.
# Every step's exit status is logged and the script exits 1 if any step
# failed. Environment: REPEATS (3), VRAM_REPLAY_DEVICE (cuda; sim proves
# the flow on a machine without a GPU), VRAM_REPLAY_TRACES (.gpu/traces),
# VRAM_REPLAY_VERIFY ("leak_retained_graph lstm_varlen"), VRAM_REPLAY_PIN
# (unset; CPUS: every step under taskset -c CPUS), VRAM (.gpu/vram),
# PYTHON (the python3 with torch, for the harness's build), build.sh's
# CUDA_HOME and CXX; for build, VRAM_SHARED_TRACES (the RMM logs: the
# first of ../shared/traces and the shared/traces beside the main
# checkout that exists).
set -uo pipefail
cd "$(dirname "$0")/../.."

# shared_traces prints the directory of the RMM logs.
shared_traces() {
	if [[ -n ${VRAM_SHARED_TRACES:-} ]]; then
		echo "$VRAM_SHARED_TRACES"
		return
	fi
	local common
	common=$(git rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
	for d in ../shared/traces ${common:+"$(dirname "$common")/../shared/traces"}; do
		if compgen -G "$d/*.csv.gz" >/dev/null; then
			echo "$d"
			return
		fi
	done
	echo "replay.sh: no RMM logs in ../shared/traces${common:+ or $(dirname "$common")/../shared/traces}; set VRAM_SHARED_TRACES" >&2
	return 1
}

# traces fills .gpu/traces: the RMM logs as they are, the snapshots
# converted, and for each snapshot a check that vram replays the log as it
# replays the snapshot (same operations, peaks and driver calls by kind, on
# the simulated device).
traces() {
	set -e
	local src tool snap name csv
	src=$(shared_traces)
	mkdir -p .gpu/traces
	install -m 644 "$src"/*.csv.gz .gpu/traces/
	tool=$(mktemp -d)
	go build -o "$tool/tracecsv" ./internal/cmd/tracecsv
	go build -o "$tool/vram" ./cmd/vram
	for snap in replay/testdata/recorded/*.pickle.gz; do
		name=$(basename "$snap" .pickle.gz)
		csv=.gpu/traces/$name.csv.gz
		"$tool/tracecsv" "$snap" "$csv"
		"$tool/vram" replay --policy default,paged --no-min-capacity --json "$snap" >"$tool/a.jsonl"
		"$tool/vram" replay --policy default,paged --no-min-capacity --json "$csv" >"$tool/b.jsonl"
		python3 - "$name" "$tool/a.jsonl" "$tool/b.jsonl" <<'PY'
import json, sys
name, a, b = sys.argv[1], [json.loads(l) for l in open(sys.argv[2])], [json.loads(l) for l in open(sys.argv[3])]
keys = ("policy", "ops", "peak_live_bytes", "peak_reserved_bytes", "device_calls_by_kind", "leaked_bytes")
bad = [k for x, y in zip(a, b) for k in keys if x[k] != y[k]]
if len(a) != 2 or len(b) != 2 or bad:
    sys.exit("replay.sh: %s: the converted log does not replay as the snapshot (%s)" % (name, ", ".join(bad) or "line count"))
print("%s: the log replays as the snapshot: %s" % (name, "; ".join(
    "%s %d ops, peak live %d, peak reserved %d, %d driver calls" % (x["policy"], x["ops"], x["peak_live_bytes"],
                                                                    x["peak_reserved_bytes"], x["device_calls"]) for x in b)))
PY
	done
	rm -rf "$tool"
	ls -l .gpu/traces
}

case "${1:-}" in
build)
	set -e
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	mkdir -p .gpu
	go build -o .gpu/vram ./cmd/vram
	traces
	ls -l .gpu/vram
	exit 0
	;;
traces)
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	traces
	exit 0
	;;
run) ;;
*)
	echo "usage: $0 build|traces|run" >&2
	exit 2
	;;
esac

OUT=${OUT:-/tmp/vram-replay}
mkdir -p "$OUT"
DEV=${VRAM_REPLAY_DEVICE:-cuda}
TRACES=${VRAM_REPLAY_TRACES:-.gpu/traces}
VERIFY=${VRAM_REPLAY_VERIFY:-leak_retained_graph lstm_varlen}
VRAM=${VRAM:-./.gpu/vram}
PY=${PYTHON:-python3}
BUDGET=${VRAM_REPLAY_BUDGET_S:-270}
REPEATS=${REPEATS:-3}
CUDAMALLOC=${VRAM_REPLAY_CUDAMALLOC:-1}
JSON=$OUT/replay.jsonl
HBUILD=${BUILD_DIR:-/tmp/vram-torchreplay}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: >"$JSON"
exec > >(tee -a "$OUT/replay.log") 2>&1

# VRAM_REPLAY_PIN=CPUS runs every step under taskset -c CPUS (both
# allocators alike), so that a run's timings do not depend on the core the
# scheduler happens to put it on.
PIN=()
if [[ -n ${VRAM_REPLAY_PIN:-} ]]; then
	if ! command -v taskset >/dev/null; then
		echo "VRAM_REPLAY_PIN=$VRAM_REPLAY_PIN: taskset is not installed"
		exit 2
	fi
	PIN=(taskset -c "$VRAM_REPLAY_PIN")
fi

if ! [[ $REPEATS =~ ^[1-9][0-9]*$ ]]; then
	echo "REPEATS=$REPEATS: want a whole number of at least 1"
	exit 2
fi

start=$SECONDS
failed=()
step() { echo; echo "== $(date -u +%T) +$((SECONDS - start))s $*"; }
left() { echo $((BUDGET - (SECONDS - start))); }

# run NAME RACE REPEAT CMD...: runs CMD with what is left of the budget,
# appends its stdout's JSON lines to $JSON with "race":RACE and
# "repeat":REPEAT put first, logs stderr and the exit status. A step that
# cannot start in time is logged as skipped and counts as failed.
run() {
	local name=$1 race=$2 rep=$3
	shift 3
	local t
	t=$(left)
	if ((t < 5)); then
		echo "SKIPPED $name: the budget of ${BUDGET}s is spent"
		failed+=("$name (skipped)")
		return
	fi
	local rc=0 t0=$SECONDS
	timeout "$t" "${PIN[@]}" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
	cat "$TMP/err"
	if [[ -s $TMP/out ]]; then
		grep '^{' "$TMP/out" | sed "s/^{/{\"race\":\"$race\",\"repeat\":$rep,/" >>"$JSON" || true
		grep -v '^{' "$TMP/out" || true
	fi
	echo "rc=$rc $name ($((SECONDS - t0))s, at +$((SECONDS - start))s)"
	((rc == 0)) || failed+=("$name (rc $rc)")
}

step "start $(date -u +%FT%TZ) on $(hostname), device $DEV, budget ${BUDGET}s, $REPEATS timed rounds${PIN:+, pinned: ${PIN[*]}}"
if [[ $DEV == cuda ]]; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || failed+=("nvidia-smi")
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv || true
fi
grep -m1 'model name' /proc/cpuinfo || true
nproc

shopt -s nullglob
traces=("$TRACES"/*.csv.gz)
names=()
for tr in "${traces[@]}"; do names+=("$(basename "$tr" .csv.gz)"); done
if ((${#traces[@]} == 0)); then
	echo "no traces in $TRACES: run '$0 build' (or '$0 traces') before the call and carry .gpu/traces"
	failed+=("traces")
fi
echo "traces: ${names[*]}"
have_vram=1
if [[ ! -x $VRAM ]]; then
	echo "no $VRAM: build it with '$0 build' (go build -o .gpu/vram ./cmd/vram) and carry .gpu/vram"
	failed+=("vram binary")
	have_vram=0
fi

step "build the PyTorch harness (bench/torchreplay/build.sh)"
have_harness=0
if BUILD_DIR=$HBUILD PYTHON=$PY timeout "$(left)" bench/torchreplay/build.sh build >"$OUT/build.log" 2>&1; then
	have_harness=1
	cat "$OUT/build.log"
else
	echo "the harness did not build (rc $?); compiler output follows and is in $OUT/build.log"
	cat "$OUT/build.log"
	failed+=("harness build")
fi
if ((have_harness)); then
	for tr in "${traces[@]}"; do
		name=$(basename "$tr" .csv.gz)
		gunzip -c "$tr" >"$TMP/$name.csv" || failed+=("$name gunzip")
	done
fi

# The four allocators of the race, one function each: NAME RACE REPEAT TRACE [ARGS].
vram_run() { # POLICIES NAME RACE REPEAT TRACE ARGS...
	local pols=$1 name=$2 race=$3 rep=$4 tr=$5
	shift 5
	((have_vram)) || return 0
	run "$name" "$race" "$rep" "$VRAM" replay --device "$DEV" --policy "$pols" --no-min-capacity --json "$@" "$tr"
}
torch_run() { # CONF NAME RACE REPEAT TRACE ARGS...
	local conf=$1 name=$2 race=$3 rep=$4 tr=$5
	shift 5
	((have_harness)) || return 0
	local csv=$TMP/$(basename "$tr" .csv.gz).csv
	[[ -f $csv ]] || return 0
	if [[ -n $conf ]]; then
		run "$name" "$race" "$rep" env PYTORCH_CUDA_ALLOC_CONF="$conf" "$HBUILD/replay" "$csv" "$@"
	else
		run "$name" "$race" "$rep" env -u PYTORCH_CUDA_ALLOC_CONF "$HBUILD/replay" "$csv" "$@"
	fi
}
EXP=expandable_segments:True

step "1. driver calls by kind: vram default and paged, PyTorch with CUPTI (--driver-calls)"
for tr in "${traces[@]}"; do
	name=$(basename "$tr" .csv.gz)
	vram_run default,paged "$name vram counts" counts 0 "$tr" --progress
	torch_run "" "$name torch default counts" counts 0 "$tr" --driver-calls
	torch_run "$EXP" "$name torch expandable counts" counts 0 "$tr" --driver-calls
done

for ((r = 1; r <= REPEATS; r++)); do
	step "2. timed round $r of $REPEATS"
	for tr in "${traces[@]}"; do
		name=$(basename "$tr" .csv.gz)
		vram_run paged "$name vram paged timed $r" timed "$r" "$tr"
		vram_run default "$name vram default timed $r" timed "$r" "$tr"
		torch_run "" "$name torch default timed $r" timed "$r" "$tr"
		torch_run "$EXP" "$name torch expandable timed $r" timed "$r" "$tr"
	done
done

for vname in $VERIFY; do
	step "3. verification: every allocation of $vname checked before its free"
	vt=$TRACES/$vname.csv.gz
	if [[ ! -f $vt ]]; then
		echo "no $vt"
		failed+=("verify $vname")
		continue
	fi
	vram_run default,paged "$vname vram verify" verify 0 "$vt" --verify
	torch_run "" "$vname torch default verify" verify 0 "$vt" --verify
	torch_run "$EXP" "$vname torch expandable verify" verify 0 "$vt" --verify
	torch_run "" "$vname cudaMalloc verify" verify 0 "$vt" --mode cudamalloc --verify
done

if [[ $CUDAMALLOC == 1 ]]; then
	step "4. plain cudaMalloc and cudaFree, once per trace"
	for tr in "${traces[@]}"; do
		name=$(basename "$tr" .csv.gz)
		torch_run "" "$name cudaMalloc" timed 1 "$tr" --mode cudamalloc
	done
fi

step "summary ($OUT/summary.md)"
list=$(IFS=,; echo "${names[*]}")
if python3 scripts/gpu/replay_summary.py --traces "$list" --repeats "$REPEATS" "$JSON" >"$OUT/summary.md"; then
	cat "$OUT/summary.md"
else
	echo "replay_summary.py failed"
	cat "$OUT/summary.md"
	failed+=("summary")
fi

step "done in $((SECONDS - start))s; $(wc -l <"$JSON") JSON lines in $JSON"
if ((${#failed[@]} > 0)); then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "all steps passed"
