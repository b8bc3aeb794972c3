#!/usr/bin/env bash
# The fragmentation race on a GPU (docs/benchmarks.md has the method and the
# results): the four recorded traces through vram's allocator (default and
# paged policies, on the real driver) and through PyTorch's caching
# allocator natively (default, expandable segments) and plain cudaMalloc,
# side by side in one run, with every run's device memory checked after it
# and two traces' allocations verified at both ends before every free.
#
#   scripts/gpu/replay.sh build   on the development machine (Go): builds
#                                 .gpu/vram and copies the traces into
#                                 .gpu/traces (../shared does not travel)
#   scripts/gpu/replay.sh run     on the GPU host (no Go needed); carry
#                                 .gpu/vram and .gpu/traces; logs, JSON lines
#                                 and the summary table go to $OUT
#
# The run takes about a minute and stops starting new steps when
# VRAM_REPLAY_BUDGET_S (140) seconds have passed; every step's exit status
# is logged and the script exits 1 if any step failed. Environment:
# VRAM_REPLAY_DEVICE (cuda; sim proves the flow on a machine without a GPU),
# VRAM_REPLAY_TRACES (.gpu/traces), VRAM_REPLAY_VERIFY ("leak_retained_graph
# lstm_varlen": the traces whose allocations are verified), VRAM (.gpu/vram), PYTHON (the
# python3 with torch, for the harness's build), and build.sh's CUDA_HOME,
# CXX.
set -uo pipefail
cd "$(dirname "$0")/../.."

case "${1:-}" in
build)
	set -e
	export CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
	mkdir -p .gpu/traces
	go build -o .gpu/vram ./cmd/vram
	cp ../shared/traces/*.csv.gz .gpu/traces/
	ls -l .gpu/vram .gpu/traces
	exit 0
	;;
run) ;;
*)
	echo "usage: $0 build|run" >&2
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
BUDGET=${VRAM_REPLAY_BUDGET_S:-140}
JSON=$OUT/replay.jsonl
HBUILD=${BUILD_DIR:-/tmp/vram-torchreplay}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
: >"$JSON"
exec > >(tee -a "$OUT/replay.log") 2>&1

start=$SECONDS
failed=()
step() { echo; echo "== $(date -u +%T) +$((SECONDS - start))s $*"; }
left() { echo $((BUDGET - (SECONDS - start))); }

# run NAME CMD...: runs CMD with what is left of the budget, appends its
# stdout (JSON lines) to $JSON, logs stderr and the exit status. A step
# that cannot start in time is logged as skipped and counts as failed.
run() {
	local name=$1
	shift
	local t
	t=$(left)
	if ((t < 5)); then
		echo "SKIPPED $name: the budget of ${BUDGET}s is spent"
		failed+=("$name (skipped)")
		return
	fi
	local rc=0
	timeout "$t" "$@" >"$TMP/out" 2>"$TMP/err" || rc=$?
	cat "$TMP/err"
	if [[ -s $TMP/out ]]; then
		grep '^{' "$TMP/out" >>"$JSON" || true
		grep -v '^{' "$TMP/out" || true
	fi
	echo "rc=$rc $name ($((SECONDS - start))s)"
	((rc == 0)) || failed+=("$name (rc $rc)")
}

step "start $(date -u +%FT%TZ) on $(hostname), device $DEV, budget ${BUDGET}s"
if [[ $DEV == cuda ]]; then
	nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv || failed+=("nvidia-smi")
	nvidia-smi --query-compute-apps=pid,used_memory --format=csv || true
fi
grep -m1 'model name' /proc/cpuinfo || true
nproc

shopt -s nullglob
traces=("$TRACES"/*.csv.gz)
if ((${#traces[@]} == 0)); then
	echo "no traces in $TRACES: run 'mkdir -p .gpu/traces && cp ../shared/traces/*.csv.gz .gpu/traces/' (or '$0 build') before the call"
	failed+=("traces")
fi
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

for tr in "${traces[@]}"; do
	name=$(basename "$tr" .csv.gz)
	step "$name"
	if ((have_vram)); then
		run "$name vram" "$VRAM" replay --device "$DEV" --policy default,paged --no-min-capacity --json --progress "$tr"
	fi
	if ((have_harness)); then
		csv=$TMP/$name.csv
		gunzip -c "$tr" >"$csv" || { failed+=("$name gunzip"); continue; }
		run "$name torch default" env -u PYTORCH_CUDA_ALLOC_CONF "$HBUILD/replay" "$csv"
		run "$name torch expandable" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$HBUILD/replay" "$csv"
		run "$name cudaMalloc" "$HBUILD/replay" "$csv" --mode cudamalloc
	fi
done

for vname in $VERIFY; do
	step "verification: every allocation of $vname checked before its free"
	vt=$TRACES/$vname.csv.gz
	if [[ ! -f $vt ]]; then
		echo "no $vt"
		failed+=("verify $vname")
		continue
	fi
	if ((have_vram)); then
		run "$vname vram verify" "$VRAM" replay --device "$DEV" --policy default,paged --no-min-capacity --json --verify "$vt"
	fi
	if ((have_harness)); then
		csv=$TMP/$vname.csv
		[[ -f $csv ]] || gunzip -c "$vt" >"$csv"
		run "$vname torch default verify" env -u PYTORCH_CUDA_ALLOC_CONF "$HBUILD/replay" "$csv" --verify
		run "$vname torch expandable verify" env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$HBUILD/replay" "$csv" --verify
		run "$vname cudaMalloc verify" "$HBUILD/replay" "$csv" --mode cudamalloc --verify
	fi
done

step "summary ($OUT/summary.md)"
if python3 scripts/gpu/replay_summary.py "$JSON" >"$OUT/summary.md"; then
	cat "$OUT/summary.md"
else
	echo "replay_summary.py failed"
	failed+=("summary")
fi

step "done in $((SECONDS - start))s; $(wc -l <"$JSON") JSON lines in $JSON"
if ((${#failed[@]} > 0)); then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
echo "all steps passed"
