"""What PyTorch features do under vram's pluggable allocator: each case runs in
a fresh process with vram.torch.install() first, and prints one line: the
case, then "ok" with what it returned, or the exception it raised.

  PYTHONPATH=python VRAM_LIBRARY=.gpu/libvram.so python3 scripts/gpu/torch_limits.py
"""
import os
import subprocess
import sys
import textwrap

PRE = """
import warnings; warnings.simplefilter("ignore")
import torch, vram, vram.torch
vram.torch.install()
"""

CASES = {
    "cudnn default conv (benchmark off)": """
        torch.backends.cudnn.benchmark = False
        m = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
        x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
        m(x).sum().backward(); torch.cuda.synchronize(); print("ok")
    """,
    "cudnn.benchmark = True": """
        torch.backends.cudnn.benchmark = True
        m = torch.nn.Conv2d(64, 64, 3, padding=1).cuda()
        x = torch.randn(32, 64, 56, 56, device="cuda", requires_grad=True)
        m(x).sum().backward(); torch.cuda.synchronize(); print("ok")
    """,
    "CUDA graph capture (torch.cuda.graph)": """
        g = torch.cuda.CUDAGraph()
        x = torch.ones(1024, device="cuda")
        s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            y = x * 2
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            y = x * 2
        print("ok", float(y.sum()))
    """,
    "torch.compile(mode='reduce-overhead')": """
        f = torch.compile(lambda a: (a * 2).sin().sum(), mode="reduce-overhead")
        x = torch.ones(1024, device="cuda")
        print("ok", [float(f(x)) for _ in range(3)][-1])
    """,
    "torch.compile (default mode)": """
        f = torch.compile(lambda a: (a * 2).sin().sum())
        x = torch.ones(1024, device="cuda")
        print("ok", float(f(x)))
    """,
    "CUDA IPC (torch.multiprocessing, spawn)": """
        import torch.multiprocessing as mp
        def child(q):
            t = q.get(); print("child got", float(t.sum()))
        if __name__ == "__main__":
            ctx = mp.get_context("spawn"); q = ctx.Queue()
            p = ctx.Process(target=child, args=(q,)); p.start()
            q.put(torch.ones(10, device="cuda")); p.join(60); print("ok exit", p.exitcode)
    """,
    "torch.cuda.MemPool": """
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            t = torch.ones(1 << 20, device="cuda")
        print("ok", float(t.sum()))
    """,
    "torch.cuda.memory._record_memory_history": """
        torch.cuda.memory._record_memory_history()
        t = torch.ones(10, device="cuda"); print("ok")
    """,
    "torch.cuda.memory_stats / memory_summary after install": """
        t = torch.ones(1 << 20, device="cuda")
        s = torch.cuda.memory_stats(); print("ok", s["allocated_bytes.all.current"], len(torch.cuda.memory_summary()) > 0)
    """,
    "torch.cuda.mem_get_info": """
        print("ok", torch.cuda.mem_get_info())
    """,
}


def main():
    only = sys.argv[1:]
    for name, body in CASES.items():
        if only and not any(o in name for o in only):
            continue
        code = PRE + textwrap.dedent(body)
        if "__main__" in body:
            path = "/tmp/vram_limit_case.py"
            with open(path, "w") as f:
                f.write(code)
            argv = [sys.executable, path]
        else:
            argv = [sys.executable, "-c", code]
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=240)
            out = (r.stdout.strip().splitlines() or [""])[-1]
            err = [l for l in r.stderr.strip().splitlines() if l.strip()]
            last = err[-1] if err else ""
            verdict = out if r.returncode == 0 and out.startswith("ok") else "exit %d: %s" % (r.returncode, last[:300])
        except subprocess.TimeoutExpired:
            verdict = "timed out after 240 s"
        print("%-55s %s" % (name, verdict), flush=True)


if __name__ == "__main__":
    main()
