"""libvram inside real PyTorch, through ctypes and CUDAPluggableAllocator
only (no vram package): the hooks, out of memory, streams, threads, fork.

  LIBVRAM=.gpu/libvram.so python3 scripts/gpu/libvram_smoke.py

Prints one line per check ("ok ..." or "FAIL ...") and exits 1 on failure.
"""
import ctypes
import json
import os
import sys
import threading
import time

lib_path = os.path.abspath(os.environ.get("LIBVRAM", ".gpu/libvram.so"))
import torch  # noqa: E402

lib = ctypes.CDLL(lib_path)
lib.vram_stats_json.restype = ctypes.c_void_p
lib.vram_summary.restype = ctypes.c_void_p
lib.vram_last_error.restype = ctypes.c_char_p
failed = False


def check(name, cond, detail=""):
    global failed
    print(("ok   " if cond else "FAIL ") + name + (": " + str(detail) if detail else ""), flush=True)
    failed = failed or not cond


def stats(dev=0):
    p = lib.vram_stats_json(dev)
    s = json.loads(ctypes.string_at(p))
    lib.vram_string_free(ctypes.c_void_p(p))
    return s


def addr(name):
    return ctypes.cast(getattr(lib, name), ctypes.c_void_p).value


alloc = torch.cuda.memory.CUDAPluggableAllocator(lib_path, "vram_malloc", "vram_free")
a = alloc.allocator()
for hook, fn in [("set_init_fn", "vram_init"), ("set_reset_fn", "vram_reset"),
                 ("set_memory_fraction_fn", "vram_set_memory_fraction"),
                 ("set_record_stream_fn", "vram_record_stream")]:
    has = hasattr(a, hook)
    check("hook " + hook, has)
    if has:
        getattr(a, hook)(addr(fn))
torch.cuda.memory.change_current_allocator(alloc)

x = torch.randn(1024, 1024, device="cuda")
check("allocation counted", stats()["allocated_bytes.all.current"] >= 4 << 20, stats()["allocated_bytes.all.current"])

# A small training loop: loss must match the default allocator's (run separately).
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(20):
    inp = torch.randn(64 + step * 8, 1024, device="cuda")
    loss = model(inp).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
torch.cuda.synchronize()
check("training loop", torch.isfinite(loss).item(), float(loss))

# empty_cache -> reset hook
del inp
reserved_before = stats()["reserved_bytes.all.current"]
torch.cuda.empty_cache()
check("empty_cache releases", stats()["reserved_bytes.all.current"] <= reserved_before,
      (reserved_before, stats()["reserved_bytes.all.current"]))

# out of memory: exception type and message
try:
    torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    check("out of memory raises", False, "no exception")
except Exception as e:  # noqa: BLE001
    check("out of memory raises", str(e).startswith("CUDA out of memory"), f"{type(e).__name__}: {str(e)[:160]}")
    check("out of memory type", isinstance(e, RuntimeError), type(e).__mro__)
    print("     exception class:", type(e).__module__, type(e).__name__, "is torch.OutOfMemoryError:",
          isinstance(e, torch.OutOfMemoryError))
y = torch.ones(10, device="cuda")
check("usable after OOM", y.sum().item() == 10)

# memory fraction -> cap
torch.cuda.set_per_process_memory_fraction(0.05)
try:
    torch.empty(int(0.06 * torch.cuda.get_device_properties(0).total_memory), dtype=torch.uint8, device="cuda")
    check("fraction caps", False, "allocated past the fraction")
except RuntimeError as e:
    check("fraction caps", "out of memory" in str(e), str(e)[:120])
torch.cuda.set_per_process_memory_fraction(1.0)

# streams and record_stream
s = torch.cuda.Stream()
with torch.cuda.stream(s):
    z = torch.randn(4096, 4096, device="cuda")
    w = z @ z
w.record_stream(torch.cuda.current_stream())
torch.cuda.current_stream().wait_stream(s)
check("other stream result", torch.isfinite(w.sum()).item())
del w, z
torch.cuda.synchronize()

# threads
errs = []


def worker(i):
    try:
        st = torch.cuda.Stream()
        with torch.cuda.stream(st):
            for k in range(200):
                t = torch.empty((k % 17 + 1) * 4096, device="cuda")
                t.fill_(i)
                del t
        st.synchronize()
    except Exception as e:  # noqa: BLE001
        errs.append(e)


ts = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
[t.start() for t in ts]
[t.join() for t in ts]
check("8 threads", not errs, errs[:1])

# fork: DataLoader workers
ds = torch.utils.data.TensorDataset(torch.arange(256.0))
dl = torch.utils.data.DataLoader(ds, batch_size=32, num_workers=2, multiprocessing_context="fork")
total = sum(b[0].cuda().sum().item() for b in dl)
check("DataLoader fork workers", total == sum(range(256)), total)

# per-call cost, cached path: torch.empty + free of 512 B
for n in (512, 1 << 20):
    for _ in range(1000):
        torch.empty(n, dtype=torch.uint8, device="cuda")
    t0 = time.perf_counter_ns()
    for _ in range(100000):
        torch.empty(n, dtype=torch.uint8, device="cuda")
    print(f"     torch.empty({n}) + free under vram: {(time.perf_counter_ns() - t0) / 100000:.0f} ns per pair")

# device 1..: only one GPU here
st = stats()
check("no live bytes but the model", st["allocated_bytes.all.current"] > 0, st["allocated_bytes.all.current"])
p = lib.vram_summary(0)
print(ctypes.string_at(p).decode()[-400:])
lib.vram_string_free(ctypes.c_void_p(p))
sys.exit(1 if failed else 0)
