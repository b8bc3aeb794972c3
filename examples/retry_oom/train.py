"""A training script that survives `vram run --retry-oom`: it saves a checkpoint
(model, optimizer, step) as it goes and loads it at start, so that when vram
restarts it with a smaller batch after an out-of-memory error, it carries on
from the last saved step instead of starting over.

    vram run --retry-oom 3 --batch 512 -- python examples/retry_oom/train.py --batch {}
    BATCH_SIZE=... python examples/retry_oom/train.py          # the batch from the environment
    vram run --retry-oom 3 --batch 512 --batch-env BATCH_SIZE -- python examples/retry_oom/train.py

The model is a small convolutional network on random images. --grow-at STEP
doubles the image side from that step on (four times the activation memory),
so that a batch that fitted at first runs out of memory part way through:
the retry then resumes from the checkpoint before that step.
--memory-fraction (or --cap-gib) caps PyTorch's memory inside the job
(torch.cuda.set_per_process_memory_fraction); PyTorch's OOM message then says
"N GiB allowed", which vram reads as the capacity.

Only what the training state needs is saved: the batch size is not part of it
(vram changes it between attempts). The checkpoint is written to a temporary
file and renamed, so an attempt killed while saving leaves the previous one.
"""

import argparse
import os
import sys

import torch
import torch.nn as nn


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=None, help="batch size (default: $BATCH_SIZE)")
    p.add_argument("--steps", type=int, default=40, help="total training steps")
    p.add_argument("--size", type=int, default=64, help="image side in pixels")
    p.add_argument("--grow-at", type=int, default=0, help="from this step on, images are twice as large (0: never)")
    p.add_argument("--checkpoint", default="checkpoint.pt", help="checkpoint file, loaded at start when it exists")
    p.add_argument("--save-every", type=int, default=5, help="save the checkpoint every this many steps")
    p.add_argument("--memory-fraction", type=float, default=0.0, help="cap PyTorch's memory to this fraction of the GPU (0: none)")
    p.add_argument("--cap-gib", type=float, default=0.0, help="the same cap in GiB (0: none)")
    args = p.parse_args()
    if args.batch is None:
        env = os.environ.get("BATCH_SIZE", "")
        if not env:
            p.error("give --batch N or set BATCH_SIZE")
        try:
            args.batch = int(env)
        except ValueError:
            p.error(f"BATCH_SIZE={env!r} is not a number")
    if args.batch < 1:
        p.error(f"batch {args.batch}: must be at least 1")
    return args


def model():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )


def save(path, net, opt, step):
    tmp = path + ".tmp"
    torch.save({"model": net.state_dict(), "optimizer": opt.state_dict(), "step": step}, tmp)
    os.replace(tmp, path)


def main():
    args = parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    fraction = args.memory_fraction
    if args.cap_gib > 0 and device == "cuda":
        fraction = min(1.0, args.cap_gib * 2**30 / torch.cuda.get_device_properties(0).total_memory)
    if fraction > 0 and device == "cuda":
        torch.cuda.set_per_process_memory_fraction(fraction)
    torch.manual_seed(0)
    net = model().to(device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-3)
    start = 0
    if os.path.exists(args.checkpoint):
        ckpt = torch.load(args.checkpoint, map_location=device)
        net.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        start = ckpt["step"]
        print(f"resumed from step {start} (attempt {os.environ.get('VRAM_RUN_ATTEMPT', '?')}, batch {args.batch})", flush=True)
    else:
        print(f"starting at step 0 (batch {args.batch})", flush=True)
    loss_fn = nn.CrossEntropyLoss()
    for step in range(start, args.steps):
        side = args.size * (2 if args.grow_at and step >= args.grow_at else 1)
        g = torch.Generator(device="cpu").manual_seed(step)  # the same data per step, whatever the attempt
        x = torch.randn(args.batch, 3, side, side, generator=g).to(device)
        y = torch.randint(0, 10, (args.batch,), generator=g).to(device)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(net(x), y)
        loss.backward()
        opt.step()
        done = step + 1
        if done % args.save_every == 0 or done == args.steps:
            save(args.checkpoint, net, opt, done)
            print(f"step {done}: loss {loss.item():.4f}, checkpoint saved", flush=True)
    print(f"finished at step {args.steps} with batch {args.batch}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
