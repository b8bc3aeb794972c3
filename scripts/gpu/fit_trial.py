"""One vram fit trial on a real model (scripts/gpu/fit_check.sh): --steps
training steps at --batch N, then exit 0; PyTorch's OutOfMemoryError exits 1
with PyTorch's own message on stderr (the figures vram fit reads).

  --model resnet50   torchvision ResNet-50, 224x224 fp32, SGD with momentum
  --model gpt2       transformers GPT-2 (124M) built from its config with
                     random weights (nothing downloaded), SDPA attention,
                     --seq-len tokens, fp32, AdamW

--cap-gib G caps PyTorch's memory inside the job with
torch.cuda.set_per_process_memory_fraction(G GiB / total), right after CUDA
starts, as a user would: vram fit is not told, and learns it."""
import argparse
import sys
import time

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--model", choices=["resnet50", "gpt2"], required=True)
ap.add_argument("--batch", type=int, required=True)
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--seq-len", type=int, default=512)
ap.add_argument("--cap-gib", type=float, default=0)
a = ap.parse_args()

t0 = time.time()
import torch  # noqa: E402

if a.model == "resnet50":
    import torchvision
else:
    from transformers import GPT2Config, GPT2LMHeadModel
import_s = time.time() - t0

torch.cuda.init()
if a.cap_gib > 0:
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, a.cap_gib * 2**30 / total))
torch.manual_seed(0)
dev = "cuda"

if a.model == "resnet50":
    model = torchvision.models.resnet50(weights=None).to(dev).train()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step():
        x = torch.randn(a.batch, 3, 224, 224, device=dev)
        y = torch.randint(0, 1000, (a.batch,), device=dev)
        return torch.nn.functional.cross_entropy(model(x), y)
else:
    cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    cfg._attn_implementation = "sdpa"
    model = GPT2LMHeadModel(cfg).to(dev).train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step():
        ids = torch.randint(0, cfg.vocab_size, (a.batch, a.seq_len), device=dev)
        return model(input_ids=ids, labels=ids).loss

for _ in range(a.steps):
    loss = step()
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    del loss
torch.cuda.synchronize()
print(f"{a.model} batch {a.batch}: {a.steps} steps in {time.time() - t0:.1f} s (imports {import_s:.1f} s), "
      f"peak allocated {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB, "
      f"peak reserved {torch.cuda.max_memory_reserved() / 2**30:.2f} GiB", file=sys.stderr, flush=True)
