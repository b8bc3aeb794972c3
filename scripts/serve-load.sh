#!/usr/bin/env bash
# vram serve under load and faults: the figures of docs/serve.md, "Load and
# faults". Builds vram and the measuring tool (internal/cmd/serveload), then runs
#   load    8 simulated GPUs × 200 processes each, a sample every 100 ms,
#           history every 10 s, 1 s and 100 ms, DURATION each (default 5m),
#           with a /metrics scraper every 15 s and one /events stream;
#   crash   kill -9 ten times at random moments, restart on the same file,
#           check integrity and every tick reported committed (history every
#           1 s, then every 100 ms so that kills land in writes more often);
#   faults  SIGTERM under load, unusable history files, bad configurations;
#   fuzz    the fuzz targets of the daemon's inputs, as counted iterations.
# Usage: scripts/serve-load.sh [OUT_DIR]
#   environment: DURATION=5m HISTORY=10s,1s,100ms KILL_HISTORY=1s,100ms SEED=...
#   PARTS="load crash faults" (any of them, or none) FUZZ=1 (0: no fuzzing)
#   NOEVENTS=1 adds a load run at the first HISTORY without the /events client.
# No GPU needed: the host is simulated (VRAM_SIMULATE_PROCS, gpu.NewSimProcs).
set -euo pipefail
cd "$(dirname "$0")/.."
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
out=${1:-/tmp/serve-load-$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$out"
out=$(cd "$out" && pwd)
DURATION=${DURATION:-5m}
HISTORY=${HISTORY:-10s,1s,100ms}
KILL_HISTORY=${KILL_HISTORY:-1s,100ms}
PARTS=${PARTS-load crash faults}
SEED=${SEED:-$(date +%s)}

{
  echo "# vram serve: load and faults"
  echo
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "- machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/^Mem:/{print $2}') GiB memory, $(uname -sr)"
  echo "- load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "- go: $(go version | cut -d' ' -f3-)"
} > "$out/README.md"
cat "$out/README.md"

go build -o "$out/vram" ./cmd/vram
go build -o "$out/serve-load" ./internal/cmd/serveload

if [ -n "$PARTS" ]; then
  "$out/serve-load" -bin "$out/vram" -out "$out" -duration "$DURATION" -history "$HISTORY" -kill-history "$KILL_HISTORY" -seed "$SEED" $PARTS
fi
if [ "${NOEVENTS:-0}" = 1 ]; then
  "$out/serve-load" -bin "$out/vram" -out "$out" -duration "$DURATION" -history "${HISTORY%%,*}" -no-events load
fi

if [ "${FUZZ:-1}" = 1 ]; then
  # Counted iterations rather than -fuzztime 30s: time-based fuzzing on a
  # busy machine trips a Go 1.26 bug. The counts give about 30 s each on
  # the 2-CPU development VM when it is otherwise quiet.
  fuzz="$out/fuzz.md"
  { echo; echo "| fuzz target | package | iterations | seconds (build included) | result |"; echo "| --- | --- | --- | --- | --- |"; } > "$fuzz"
  while read -r target pkg n; do
    t0=$(date +%s)
    if go test -run '^$' -fuzz "^${target}\$" -fuzztime "${n}x" "$pkg" > "$out/fuzz-$target-${pkg//\//_}.log" 2>&1; then r=pass; else r="**FAIL** (fuzz-$target-${pkg//\//_}.log)"; fi
    echo "| $target | $pkg | $n | $(( $(date +%s) - t0 )) | $r |" | tee -a "$fuzz"
  done <<'EOF'
FuzzParseConfig ./serve 700000
FuzzParseHistory ./serve/api 1500000
FuzzParseGPUAndPID ./serve/api 2000000
FuzzDecodeSignal ./serve/api 300000
FuzzAppendState ./serve/api 300000
FuzzHandler ./serve/api 400000
FuzzDecode ./serve/alert 350000
FuzzParse ./policy 650000
FuzzParseGCTrace ./internal/cmd/serveload 100000
FuzzParseProc ./internal/cmd/serveload 200000
EOF
  cat "$fuzz" >> "$out/summary.md"
fi
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$out/README.md"
echo "results: $out/summary.md"
