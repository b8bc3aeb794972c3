#!/usr/bin/env bash
# The node daemon on a real GPU: `vram serve` samples while PyTorch jobs run
# (one steady, one leaking about 240 MiB a minute, one that exits after
# ~40 s, one orphaned when its parent shell exits), with alert rules for
# leaks, memory above a threshold, orphans and unhealthy GPUs, and a
# dry-run policy (reclaim orphans, a per-process quota). The endpoints are
# captured at four points, then the daemon is stopped with SIGTERM and its
# history file copied.
#
# Run on the GPU machine from the repository root, with the binary built
# here: go build -o .gpu/vram ./cmd/vram. Takes about 3.5 minutes.
# Results in $OUT: log (this script), daemon.log, snapshots.tar.gz (the
# captured endpoints), summary.json, serve.db. Exits non-zero when the
# daemon dies, does not answer, or does not stop cleanly.
set -uo pipefail
OUT=${OUT:-/tmp/vram-out}; mkdir -p "$OUT"
B=${VRAM_BIN_DIR:-./.gpu}
EXTRA=${VRAM_SERVE_EXTRA:-}   # e.g. "--simulate 1" to try the script without a GPU
ADDR=127.0.0.1:9400
URL=http://$ADDR
WORK=$(mktemp -d)
SNAP=$WORK/snapshots; mkdir -p "$SNAP"
exec > >(tee -a "$OUT/log") 2>&1
echo "== $(date -u +%FT%TZ) $(hostname)"
nvidia-smi --query-gpu=index,name,driver_version,memory.total,memory.used --format=csv

cat > "$WORK/policy.yaml" <<'EOF'
version: 1
dry_run: true
grace: 10s
reclaim:
  - name: orphans
    when: [orphaned, dead]
    min_bytes: 256MiB
    action: term
quotas:
  - name: per-job
    per: process
    match: {command: "*vram-serve-*"}
    max_bytes: 2GiB
    action: term
    after: 20s
EOF
cat > "$WORK/config.yaml" <<EOF
version: 1
interval: 1s
history_interval: 5s
policy_file: $WORK/policy.yaml
alerts:
  rules:
    - {name: leak, when: leak}
    - {name: gpu-used, when: used_above, percent: 4, for: 10s}
    - {name: orphan-holding, when: orphan_holding, min_bytes: 256MiB}
    - {name: gpu-unhealthy, when: device_unhealthy, severity: critical}
EOF

# get URL: the body on stdout, non-zero on any failure (curl, else python).
get() {
  if command -v curl > /dev/null; then curl -sf --max-time 10 "$1"
  else python3 -c 'import sys, urllib.request; sys.stdout.buffer.write(urllib.request.urlopen(sys.argv[1], timeout=10).read())' "$1" 2>/dev/null
  fi
}
fail() { echo "FAIL: $*"; kill "${jobs_pids[@]}" 2>/dev/null; kill -KILL "$dpid" 2>/dev/null; exit 1; }
alive() { kill -0 "$dpid" 2>/dev/null || fail "the daemon died (see daemon.log)"; }

$B/vram serve --addr $ADDR --db "$WORK/serve.db" --config "$WORK/config.yaml" --all-gpus $EXTRA > "$OUT/daemon.log" 2>&1 &
dpid=$!
jobs_pids=()
for i in $(seq 1 50); do
  get $URL/healthz > /dev/null && break
  kill -0 $dpid 2>/dev/null || { cat "$OUT/daemon.log"; fail "the daemon exited at start"; }
  sleep 0.2
done
get $URL/healthz > /dev/null || fail "no /healthz after 10 s"
T0=$(date +%s)
echo "daemon up (pid $dpid)"; head -3 "$OUT/daemon.log"

# Jobs. The first argument after -c marks them for the quota's match.
STEADY='
import sys, time, torch
x = torch.empty(1 << 30, dtype=torch.uint8, device="cuda")
m = torch.randn(2048, 2048, device="cuda")
print("ready", sys.argv[1], flush=True)
end = time.time() + float(sys.argv[2])
while time.time() < end:
    for _ in range(10): m = (m @ m).tanh_()
    torch.cuda.synchronize(); time.sleep(0.2)
'
LEAK='
import sys, time, torch
rate = float(sys.argv[2]) * (1 << 20)           # bytes per second
x = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
m = torch.randn(1024, 1024, device="cuda")
keep = []
print("ready", sys.argv[1], flush=True)
t0 = time.time()
while time.time() - t0 < float(sys.argv[3]):
    keep.append(torch.empty(int(rate), dtype=torch.uint8, device="cuda"))   # never freed
    for _ in range(5): m = (m @ m).tanh_()
    torch.cuda.synchronize(); time.sleep(1)
print("leaked", sum(k.numel() for k in keep) >> 20, "MiB", flush=True)
'
HOLD='
import sys, time, torch
x = torch.empty(int(float(sys.argv[2]) * (1 << 30)), dtype=torch.uint8, device="cuda")
print("ready", sys.argv[1], flush=True)
time.sleep(float(sys.argv[3]))
'
python3 -c "$STEADY" vram-serve-steady 200 > "$WORK/steady.log" 2>&1 & jobs_pids+=($!)
python3 -c "$LEAK" vram-serve-leak 4 175 > "$WORK/leak.log" 2>&1 & jobs_pids+=($!)
python3 -c "$HOLD" vram-serve-exits 3 40 > "$WORK/exits.log" 2>&1 & jobs_pids+=($!)
# Orphaned: its parent shell exits 20 s after starting it.
bash -c 'python3 -c "$1" vram-serve-orphan 1 120 > "$2" 2>&1 & echo $! > "$3"; sleep 20' _ "$HOLD" "$WORK/orphan.log" "$WORK/orphan.pid" &
sleep 1; jobs_pids+=($(cat "$WORK/orphan.pid"))
echo "jobs: ${jobs_pids[*]}"

capture() { # capture NAME: every endpoint into $SNAP/NAME-*
  local n=$1
  alive
  get $URL/metrics > "$SNAP/$n-metrics.prom" || fail "/metrics at $n"
  get $URL/api/v1/state > "$SNAP/$n-state.json" || fail "/api/v1/state at $n"
  get "$URL/api/v1/alerts?from=-10m" > "$SNAP/$n-alerts.json" || fail "/api/v1/alerts at $n"
  get "$URL/api/v1/actions?from=-10m" > "$SNAP/$n-actions.json" || fail "/api/v1/actions at $n"
  local uuid
  uuid=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["devices"][0]["gpu_uuid"])' < "$SNAP/$n-state.json")
  get "$URL/api/v1/history/devices/$uuid?from=-5m" > "$SNAP/$n-history.json" || fail "history at $n"
  echo "== $n at +$(( $(date +%s) - T0 ))s: $(grep -c '^vram_' "$SNAP/$n-metrics.prom") series; alerts firing:" \
    "$(python3 -c 'import json,sys; s=json.load(sys.stdin); print(sorted({(a["rule"]) for a in s["alerts"]}), len(s["processes"]), "processes")' < "$SNAP/$n-state.json")"
}
for at in 30 90 150 190; do
  while [ $(( $(date +%s) - T0 )) -lt $at ]; do alive; sleep 1; done
  capture "t$at"
done

# Stop: SIGTERM, then the daemon must exit 0 within 20 s.
kill -TERM $dpid
for i in $(seq 1 100); do kill -0 $dpid 2>/dev/null || break; sleep 0.2; done
kill -0 $dpid 2>/dev/null && fail "the daemon did not stop within 20 s of SIGTERM"
wait $dpid; rc=$?
echo "daemon exit status $rc"; tail -5 "$OUT/daemon.log"
kill "${jobs_pids[@]}" 2>/dev/null
cp "$WORK/serve.db" "$OUT/serve.db"; [ -f "$WORK/serve.db-wal" ] && cp "$WORK/serve.db-wal" "$OUT/serve.db-wal"
cat "$WORK"/*.log > "$SNAP/jobs.log"
python3 - "$SNAP" "$OUT/summary.json" <<'EOF'
import json, os, sys
snap, out = sys.argv[1], sys.argv[2]
last = json.load(open(os.path.join(snap, "t190-state.json")))
alerts = json.load(open(os.path.join(snap, "t190-alerts.json")))["alerts"]
actions = json.load(open(os.path.join(snap, "t190-actions.json")))["actions"]
jobs = {}
for n in ("t30", "t90", "t150", "t190"):
    s = json.load(open(os.path.join(snap, n + "-state.json")))
    for p in s["processes"]:
        if "vram-serve-" in p["command"]:
            name = p["command"].split("vram-serve-")[1].split()[0]
            jobs.setdefault(name, {})[n] = {"pid": p["pid"], "used_mib": p["used_bytes"] >> 20, "flags": p["flags"], "leak": p.get("leak")}
summary = {
    "devices": [{k: d.get(k) for k in ("gpu_index", "name", "healthy", "error", "used_bytes", "total_bytes")} for d in last["devices"]],
    "jobs": jobs,
    "alerts": [{k: a.get(k) for k in ("time", "rule", "state", "pid", "message")} for a in alerts],
    "actions": [{k: a.get(k) for k in ("time", "rule", "pid", "action", "result")} for a in actions],
    "history_points_t190": len(json.load(open(os.path.join(snap, "t190-history.json")))["points"]),
}
json.dump(summary, open(out, "w"), indent=1)
leak = jobs.get("leak", {}).get("t190", {}).get("leak") or {}
print("leak job verdict at t190:", leak.get("verdict"), leak.get("slope_bytes_per_second"), leak.get("reason"))
print("alerts:", [(a["rule"], a["state"]) for a in alerts])
print("actions:", [(a["rule"].split('"')[-2] if '"' in a["rule"] else a["rule"], a["action"], a["result"][:20]) for a in actions])
EOF
tar -czf "$OUT/snapshots.tar.gz" -C "$WORK" snapshots
[ "$rc" -eq 0 ] || fail "the daemon exited with status $rc after SIGTERM"
echo "== done $(date -u +%FT%TZ)"
