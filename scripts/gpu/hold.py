"""Hold GPU memory for the monitor's tests: allocate --gib GiB with PyTorch,
print "ready PID", optionally run a small matmul every --busy-every seconds,
and exit after --seconds."""
import argparse, os, sys, time
import torch

ap = argparse.ArgumentParser()
ap.add_argument("--gib", type=float, default=1)
ap.add_argument("--seconds", type=float, default=120)
ap.add_argument("--busy", type=int, default=0)
a = ap.parse_args()
x = torch.empty(int(a.gib * (1 << 30)), dtype=torch.uint8, device="cuda")
m = torch.randn(2048, 2048, device="cuda")
torch.cuda.synchronize()
print("ready", os.getpid(), flush=True)
end = time.time() + a.seconds
while time.time() < end:
    if a.busy:
        for _ in range(20):
            m = (m @ m).tanh_()
        torch.cuda.synchronize()
    time.sleep(0.5)
