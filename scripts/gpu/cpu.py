"""Run a command for --seconds (or until it exits), then report its CPU use:
user and system seconds (getrusage of the child) over wall seconds, as JSON.
The command is stopped with SIGINT when the time is up."""
import json, resource, signal, subprocess, sys, time

secs = float(sys.argv[1])
name = sys.argv[2]
cmd = sys.argv[3:]
out = open(f"/tmp/{name}.out", "w")
before = resource.getrusage(resource.RUSAGE_CHILDREN)
t0 = time.time()
p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
try:
    rc = p.wait(timeout=secs)
except subprocess.TimeoutExpired:
    p.send_signal(signal.SIGINT)
    rc = p.wait()
wall = time.time() - t0
after = resource.getrusage(resource.RUSAGE_CHILDREN)
user, sys_ = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
lines = sum(1 for _ in open(f"/tmp/{name}.out"))
print(json.dumps({"name": name, "cmd": " ".join(cmd), "rc": rc, "wall_s": round(wall, 3), "user_s": round(user, 3),
                  "sys_s": round(sys_, 3), "cpu_percent_of_one_core": round(100 * (user + sys_) / wall, 3), "output_lines": lines}))
