#!/usr/bin/env bash
# CPU of vram watch against nvidia-smi on a GPU host, with 12 PyTorch
# processes holding memory (1-4 GiB each, half of them busy), in about
# 3.5 minutes (at most 4).
#
# Commands, one after the other, each for WARM + SECS seconds (2 + 30):
#   nvsmi-apps     nvidia-smi --query-compute-apps=pid,used_memory --format=csv -lms 100
#   nvsmi-gpu10    nvidia-smi --query-gpu=memory.used --format=csv -lms 10
#                  (if nvidia-smi refuses 10 ms, or slows it down, the row
#                  says so: "exited early", or fewer lines than 100 a second)
#   watch100mem    vram watch --interval 100ms --memory-only
#   watch100       vram watch --interval 100ms --processes
#   watch10mem     vram watch --interval 10ms --memory-only
#   watch10        vram watch --interval 10ms --processes
# Both vram intervals read device memory every 5 ms (the default sample
# interval): what differs is the lines printed. SAMPLE10=1 adds
#   watch10mem-s10 vram watch --interval 10ms --memory-only --sample-interval 10ms
# (one sample per line; about 35 s more).
#
# What it measures, per command: the process's user+system CPU time, read
# from /proc/PID/stat (all threads), over wall time, as a percentage of one
# core:
#   steady_percent  between WARM s after the start and WARM+SECS s (the loop
#                   alone: no library loading, driver initialisation or
#                   first full sample);
#   total_percent   from the start to WARM+SECS s.
# CPU time is counted in clock ticks (1/100 s): over 30 s a row is exact to
# about ±0.03 points. Also, over the steady window: context switches a
# second summed over the process's threads (/proc/PID/task/*/status), the
# number of threads that switched more than once a second, and the lines
# printed (a stalled loop prints fewer lines and uses less CPU). The
# command is then stopped with SIGINT.
#
# Output: one JSON line per command in $OUT/monitor_cpu.jsonl, a Markdown
# table in $OUT/monitor_cpu.md (also printed), progress and the last lines
# of each command's output in $OUT/monitor_cpu.log.
#
# Safe in the background of another GPU job, but measure alone when the
# figures matter: everything it writes is in a private temporary directory
# and in $OUT/monitor_cpu.*; it waits for and signals only its own
# children, kills its holders on exit, and changes no device setting.
#
#   go build -o .gpu/vram ./cmd/vram                  # development machine
#   OUT=/tmp/out bash scripts/gpu/monitor_cpu.sh      # GPU host, repo root
#
# Knobs (environment): VRAM (binary, default .gpu/vram), WARM (2), SECS
# (30), HOLDERS (12; 0 for none), NVSMI=0 skips nvidia-smi, SAMPLE10=1,
# VRAM_EXTRA (extra watch flags, e.g. "--simulate 1" for a dry run without
# a GPU: HOLDERS=0 NVSMI=0 VRAM_EXTRA="--simulate 1" SECS=3).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
VRAM=${VRAM:-./.gpu/vram}; WARM=${WARM:-2}; SECS=${SECS:-30}; HOLDERS=${HOLDERS:-12}
NVSMI=${NVSMI:-1}; SAMPLE10=${SAMPLE10:-0}; VRAM_EXTRA=${VRAM_EXTRA:-}
TMP=$(mktemp -d /tmp/vram-monitor-cpu.XXXXXX)
JSONL=$OUT/monitor_cpu.jsonl; LOG=$OUT/monitor_cpu.log; TABLE=$OUT/monitor_cpu.md
: > "$JSONL"
log() { echo "$(date -u +%T) $*" | tee -a "$LOG"; }
holders=()
cleanup() {
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null; done
  rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
TCK=$(getconf CLK_TCK)

# cputicks PID: user+system clock ticks of the process (fields 14 and 15 of
# /proc/PID/stat, counted after the parenthesised command name).
cputicks() { local s; s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1; s=${s##*) }; set -- $s; echo $(( ${12} + ${13} )); }
# threadswitches PID: one line per thread, "TID SWITCHES" (voluntary +
# involuntary context switches so far).
threadswitches() {
  local t
  for t in /proc/"$1"/task/*; do
    awk -v tid="${t##*/}" '/^(non)?voluntary_ctxt_switches/ { n += $2 } END { if (NR) print tid, n }' "$t/status" 2>/dev/null
  done
}
now() { date +%s.%N; }

# measure NAME CMD...: run CMD, sample its CPU at WARM and WARM+SECS s.
measure() {
  local name=$1; shift
  local out=$TMP/$name.out t0 c0 tw cw t1 c1 rc
  t0=$(now)
  "$@" > "$out" 2> "$TMP/$name.err" &
  local pid=$!
  c0=0
  sleep "$WARM"; tw=$(now); cw=$(cputicks $pid) || cw=
  threadswitches $pid > "$TMP/$name.sw0"
  local lw; lw=$(wc -l < "$out")
  sleep "$SECS"; t1=$(now); c1=$(cputicks $pid) || c1=
  threadswitches $pid > "$TMP/$name.sw1"
  local l1; l1=$(wc -l < "$out")
  kill -INT $pid 2>/dev/null; wait $pid; rc=$?
  if [ -z "$cw" ] || [ -z "$c1" ]; then
    log "$name: exited early (rc $rc): $(tail -2 "$TMP/$name.err" | tr '\n' ' ')"
    echo "{\"name\":\"$name\",\"cmd\":\"$*\",\"error\":\"exited early\",\"rc\":$rc}" >> "$JSONL"
    return
  fi
  # Context switches over the steady window, per thread present at both ends.
  local sw
  sw=$(awk -v secs="$SECS" 'NR == FNR { a[$1] = $2; next } ($1 in a) { d = $2 - a[$1]; tot += d; if (d > secs) busy++ }
    END { printf "%.1f %d", tot / secs, busy + 0 }' "$TMP/$name.sw0" "$TMP/$name.sw1")
  awk -v name="$name" -v cmd="$*" -v t0="$t0" -v tw="$tw" -v t1="$t1" -v c0="$c0" -v cw="$cw" -v c1="$c1" -v tck="$TCK" -v lw="$lw" -v l1="$l1" -v rc="$rc" -v gmp="${GOMAXPROCS:-}" -v sw="$sw" 'BEGIN {
    split(sw, s, " "); steady = (t1 - tw); total = (t1 - t0)
    printf "{\"name\":\"%s\",\"cmd\":\"%s\",\"gomaxprocs_env\":\"%s\",\"rc\":%d,\"steady_s\":%.3f,\"steady_cpu_s\":%.2f,\"steady_percent\":%.3f,\"total_s\":%.3f,\"total_cpu_s\":%.2f,\"total_percent\":%.3f,\"lines_steady\":%d,\"lines_per_s\":%.1f,\"ctxsw_per_s\":%s,\"busy_threads\":%s,\"lines_total\":%d,\"clk_tck\":%d}\n",
      name, cmd, gmp, rc, steady, (c1 - cw) / tck, 100 * (c1 - cw) / tck / steady, total, c1 / tck, 100 * c1 / tck / total, l1 - lw, (l1 - lw) / steady, s[1], s[2], l1, tck
  }' | tee -a "$JSONL"
  tail -n 2 "$out" >> "$LOG"
}

log "== $(hostname) $(nproc) cores; vram $VRAM; warm ${WARM}s, measured ${SECS}s"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader >> "$LOG"
life=$(( 40 + 8 * (WARM + SECS + 1) ))
for i in $(seq 1 "$HOLDERS"); do
  python3 scripts/gpu/hold.py --gib $((1 + i % 4)) --busy $((i % 2)) --seconds "$life" > "$TMP/hold$i.log" 2>&1 &
  holders+=($!)
done
ready=0
for t in $(seq 1 20); do
  [ "$HOLDERS" -eq 0 ] && break
  ready=$(grep -l '^ready' "$TMP"/hold*.log 2>/dev/null | wc -l)
  [ "$ready" -ge "$HOLDERS" ] && break
  sleep 1
done
log "holders ready: $ready of $HOLDERS after ${t:-0}s"

if [ "$NVSMI" != 0 ]; then
  measure nvsmi-apps nvidia-smi --query-compute-apps=pid,used_memory --format=csv -lms 100
  measure nvsmi-gpu10 nvidia-smi --query-gpu=memory.used --format=csv -lms 10
fi
{
  # shellcheck disable=SC2086 # VRAM_EXTRA is a list of flags
  measure watch100mem "$VRAM" watch --interval 100ms --memory-only $VRAM_EXTRA
  measure watch100 "$VRAM" watch --interval 100ms --processes $VRAM_EXTRA
  measure watch10mem "$VRAM" watch --interval 10ms --memory-only $VRAM_EXTRA
  measure watch10 "$VRAM" watch --interval 10ms --processes $VRAM_EXTRA
  [ "$SAMPLE10" != 0 ] && measure watch10mem-s10 "$VRAM" watch --interval 10ms --memory-only --sample-interval 10ms $VRAM_EXTRA
}

# The table: steady figures, one row per command.
{
  echo "| command | steady % of one core | from the start % | lines/s | context switches/s | threads switching >1/s |"
  echo "|---|---|---|---|---|---|"
  python3 - "$JSONL" <<'PY'
import json, sys
for l in open(sys.argv[1]):
    r = json.loads(l)
    cmd = "`" + r["cmd"] + "`"
    if "error" in r:
        print("| %s | %s (rc %d) | | | | |" % (cmd, r["error"], r["rc"]))
    else:
        print("| %s | **%.2f** | %.2f | %.1f | %.0f | %d |" % (cmd, r["steady_percent"], r["total_percent"], r["lines_per_s"], r["ctxsw_per_s"], r["busy_threads"]))
PY
} > "$TABLE"
cat "$TABLE" | tee -a "$LOG"
log "== done"
