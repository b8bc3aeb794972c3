"""Measure the truths that vram estimate is checked against (estimate/
testdata/truths.json): for each case of estimate/testdata/cases.json, build
the model from its config.json in estimate/testdata/models/ with random
weights (nothing is downloaded), run three steps, and record
torch.cuda.max_memory_allocated() less what the process held before the case.

All cases run in this one process, one after the other (imports once). Before
the first, one matmul forward and backward allocates the cuBLAS workspaces of
both threads, which then stay: every case is measured from there, so the
workspaces are not in its figure (vram estimate's comparison leaves them out
too). Each case frees everything before the next; a case that fails
(OutOfMemoryError, an unsupported option) is recorded with its error.

The loops are the ones docs/estimate.md states:
  train     loss = model(input_ids=ids, labels=ids).loss (ViT: pixel_values,
            labels), loss.backward(), opt.step(), opt.zero_grad(set_to_none=True);
            AdamW / SGD(momentum=0.9) with PyTorch's defaults (foreach);
            --amp: torch.autocast(dtype) around the forward and the loss;
            grad checkpointing: model.gradient_checkpointing_enable()
  infer     with torch.no_grad(): out = model(ids); del out
  generate  model.generate(ids, max_new_tokens=N, min_new_tokens=N,
            do_sample=False)

Usage: python3 estimate_truth.py [--out truths.json] [--only NAME,...]"""
import argparse
import gc
import json
import os
import platform
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
TD = os.path.join(ROOT, "estimate", "testdata")

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--out", default="truths.json")
ap.add_argument("--only", default="")
ap.add_argument("--steps", type=int, default=3)
a = ap.parse_args()

t0 = time.time()
import torch  # noqa: E402
import transformers  # noqa: E402
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForImageClassification  # noqa: E402

DT = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
cases = json.load(open(os.path.join(TD, "cases.json")))["cases"]
if a.only:
    keep = set(a.only.split(","))
    cases = [c for c in cases if c["name"] in keep]
dev = torch.device("cuda")
torch.manual_seed(0)

# The cuBLAS workspaces of the forward thread and of autograd's thread.
x = torch.randn(64, 64, device=dev, requires_grad=True)
(x @ x).sum().backward()
with torch.autocast("cuda", dtype=torch.bfloat16):
    (x @ x).float().sum().backward()
del x
gc.collect()
torch.cuda.synchronize()


def build(c):
    cfg = AutoConfig.from_pretrained(os.path.join(TD, "models", c["model"]))
    family = cfg.model_type
    cls = {"vit": AutoModelForImageClassification, "bert": AutoModelForMaskedLM, "roberta": AutoModelForMaskedLM}.get(family, AutoModelForCausalLM)
    want = DT[c.get("dtype", "fp32")]
    kw = {"dtype": want} if int(transformers.__version__.split(".")[0]) >= 5 else {"torch_dtype": want}
    with torch.device(dev):
        m = cls.from_config(cfg, attn_implementation="sdpa", **kw)
    got = next(m.parameters()).dtype
    assert got == want, f"built in {got}, want {want}"
    return cfg, m


def batch(c, cfg):
    B = c["batch"]
    if cfg.model_type == "vit":
        px = torch.randn(B, cfg.num_channels, cfg.image_size, cfg.image_size, device=dev)
        return {"pixel_values": px.to(DT[c.get("dtype", "fp32")]), "labels": torch.randint(0, cfg.num_labels, (B,), device=dev)}
    ids = torch.randint(0, cfg.vocab_size, (B, c["seq_len"]), device=dev)
    return {"input_ids": ids}


def run(c, start):
    cfg, model = build(c)
    mode = c["mode"]
    inputs = batch(c, cfg)
    amp = c.get("amp")
    ctx = (lambda: torch.autocast("cuda", dtype=DT[amp])) if amp else (lambda: torch.autocast("cuda", enabled=False))
    if mode == "train":
        model.train()
        if c.get("grad_checkpointing"):
            model.gradient_checkpointing_enable()
        opt = {"adamw": lambda p: torch.optim.AdamW(p, lr=1e-5),
               "adam": lambda p: torch.optim.Adam(p, lr=1e-5),
               "sgd": lambda p: torch.optim.SGD(p, lr=1e-5, momentum=0.9)}.get(c.get("optimizer", "adamw"))
        opt = opt(model.parameters()) if opt else None
        if "input_ids" in inputs:
            inputs["labels"] = inputs["input_ids"]
    else:
        model.eval()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(a.steps):
        if mode == "train":
            with ctx():
                loss = model(**inputs).loss
            loss.backward()
            if opt is not None:
                opt.step()
                opt.zero_grad(set_to_none=True)
            else:
                model.zero_grad(set_to_none=True)
            del loss
        elif mode == "infer":
            with torch.no_grad(), ctx():
                out = model(**inputs)
            del out
        else:
            n = c["new_tokens"]
            with torch.no_grad(), ctx():
                out = model.generate(inputs["input_ids"], max_new_tokens=n, min_new_tokens=n, do_sample=False,
                                     pad_token_id=cfg.eos_token_id if cfg.eos_token_id is not None else 0)
            assert out.shape[1] == c["seq_len"] + n, out.shape
            del out
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    reserved = torch.cuda.max_memory_reserved()
    # The counters were reset after the model was built: the peak includes
    # its weights (allocated then). start is what the process held before
    # the case (the cuBLAS workspaces): left out.
    res = {"measured_bytes": peak - start, "reserved_peak_bytes": reserved - start, "baseline_bytes": start,
           "weights_built_bytes": base - start, "params": sum(p.numel() for p in model.parameters()),
           "attn": getattr(model.config, "_attn_implementation", None)}
    del model, inputs
    if mode == "train":
        del opt
    return res


out = {"schema": "vram.estimate-truths/v1", "torch": torch.__version__, "transformers": transformers.__version__,
       "cuda": torch.version.cuda, "gpu": torch.cuda.get_device_name(0), "python": platform.python_version(),
       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "steps": a.steps,
       "command": " ".join([os.path.basename(sys.executable)] + sys.argv), "cases": []}
for c in cases:
    gc.collect()
    torch.cuda.empty_cache()
    start = torch.cuda.memory_allocated()
    t = time.time()
    row = dict(c)
    try:
        row.update(run(c, start))
    except Exception as e:  # an OOM or an option the installed version lacks
        row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        traceback.print_exc()
    row["seconds"] = round(time.time() - t, 2)
    gc.collect()
    torch.cuda.empty_cache()
    row["left_after_bytes"] = torch.cuda.memory_allocated() - start
    out["cases"].append(row)
    print(json.dumps({k: row.get(k) for k in ("name", "measured_bytes", "reserved_peak_bytes", "seconds", "error")}), flush=True)
out["wall_s"] = round(time.time() - t0, 1)
json.dump(out, open(a.out, "w"), indent=1)
print(f"wrote {a.out}: {len(out['cases'])} cases in {out['wall_s']} s", flush=True)
