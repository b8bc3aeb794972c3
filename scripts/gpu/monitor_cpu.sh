#!/usr/bin/env bash
# CPU of vram watch against nvidia-smi on a GPU host, with 12 PyTorch
# processes holding memory (1-4 GiB each, half of them busy), in under 90 s.
#
# What it measures, per command: the process's user+system CPU time, read
# from /proc/PID/stat (all threads), over wall time, as a percentage of one
# core, twice:
#   steady_percent  between WARM s after the start and WARM+SECS s (the loop
#                   alone: no library loading, driver initialisation or
#                   first full sample);
#   total_percent   from the start to WARM+SECS s (what a short run costs,
#                   comparable with getrusage over the whole run).
# Then the command is stopped with SIGINT. Lines printed are counted so
# that a stalled loop (fewer lines, less CPU) shows.
#
# Safe in the background of another GPU job: everything it writes is in a
# private temporary directory and in $OUT/monitor_cpu.{jsonl,log}; it
# waits for and signals only its own children, kills its holders on exit,
# and changes no device setting. The other job's processes appear in vram's
# and nvidia-smi's process lists (slightly more work for both).
#
#   OUT=/tmp/out bash scripts/gpu/monitor_cpu.sh
#
# Knobs (environment): VRAM (binary, default .gpu/vram), WARM (2), SECS
# (10), HOLDERS (12; 0 for none), NVSMI=0 skips nvidia-smi, VRAM_EXTRA
# (extra watch flags, e.g. "--simulate 1" for a dry run without a GPU).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
VRAM=${VRAM:-./.gpu/vram}; WARM=${WARM:-2}; SECS=${SECS:-10}; HOLDERS=${HOLDERS:-12}
NVSMI=${NVSMI:-1}; VRAM_EXTRA=${VRAM_EXTRA:-}
TMP=$(mktemp -d /tmp/vram-monitor-cpu.XXXXXX)
JSONL=$OUT/monitor_cpu.jsonl; LOG=$OUT/monitor_cpu.log
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
  local lw; lw=$(wc -l < "$out")
  sleep "$SECS"; t1=$(now); c1=$(cputicks $pid) || c1=
  local l1; l1=$(wc -l < "$out")
  kill -INT $pid 2>/dev/null; wait $pid; rc=$?
  if [ -z "$cw" ] || [ -z "$c1" ]; then
    log "$name: exited early (rc $rc): $(tail -2 "$TMP/$name.err" | tr '\n' ' ')"
    echo "{\"name\":\"$name\",\"error\":\"exited early\",\"rc\":$rc}" >> "$JSONL"
    return
  fi
  awk -v name="$name" -v cmd="$*" -v t0="$t0" -v tw="$tw" -v t1="$t1" -v c0="$c0" -v cw="$cw" -v c1="$c1" -v tck="$TCK" -v lw="$lw" -v l1="$l1" -v rc="$rc" -v gmp="${GOMAXPROCS:-}" 'BEGIN {
    steady = (t1 - tw); total = (t1 - t0)
    printf "{\"name\":\"%s\",\"cmd\":\"%s\",\"gomaxprocs_env\":\"%s\",\"rc\":%d,\"steady_s\":%.3f,\"steady_cpu_s\":%.2f,\"steady_percent\":%.3f,\"total_s\":%.3f,\"total_cpu_s\":%.2f,\"total_percent\":%.3f,\"lines_steady\":%d,\"lines_total\":%d,\"clk_tck\":%d}\n",
      name, cmd, gmp, rc, steady, (c1 - cw) / tck, 100 * (c1 - cw) / tck / steady, total, c1 / tck, 100 * c1 / tck / total, l1 - lw, l1, tck
  }' | tee -a "$JSONL"
  tail -n 2 "$out" >> "$LOG"
}

log "== $(hostname) $(nproc) cores; vram $VRAM; warm ${WARM}s, measured ${SECS}s"
command -v nvidia-smi > /dev/null && nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv,noheader >> "$LOG"
for i in $(seq 1 "$HOLDERS"); do
  python3 scripts/gpu/hold.py --gib $((1 + i % 4)) --busy $((i % 2)) --seconds 120 > "$TMP/hold$i.log" 2>&1 &
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

[ "$NVSMI" != 0 ] && measure nvsmi nvidia-smi --query-compute-apps=pid,used_memory --format=csv -lms 100
# shellcheck disable=SC2086 # VRAM_EXTRA is a list of flags
measure watch100 "$VRAM" watch --interval 100ms --processes $VRAM_EXTRA
measure watch10 "$VRAM" watch --interval 10ms --processes $VRAM_EXTRA
GOMAXPROCS=2 measure watch10-P2 "$VRAM" watch --interval 10ms --processes $VRAM_EXTRA
measure watch10mem "$VRAM" watch --interval 10ms --memory-only $VRAM_EXTRA
log "== done"
