#!/usr/bin/env python3
"""One PyTorch workload under one allocator, in a fresh process, for
comparing allocators on real training and generation steps (GPU machine).

  python3 train_bench.py --workload {gpt2,resnet,llama_lora,kvgen} \\
      --allocator {default,expandable,vram,vram_paged,vram_fine,vram_fine_keep,vram_fine_wait,preinstalled} \\
      [--steps N] [--warmup W] [--seed S] [--batch B] [--cap-gib G] [--json FILE]

Allocators:
  default       PyTorch's caching allocator as it comes
  expandable    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (set here,
                before torch is imported)
  vram          vram.torch.install("") before the first CUDA tensor
  vram_paged    vram.torch.install("page_mapped:true")
  vram_fine     vram.torch.install("page_mapped:true,page_regime:fine"): the
                page-mapped mode's fine regime without a cap
  vram_fine_keep  the same with page_release_window:off: idle pages are
                never released on their own, so the timed steps see no
                release-and-recreate (is that what the fine regime costs?)
  vram_fine_wait  vram_fine with page_defer_unmap:false: a move of an idle
                chunk waits for its stream and unmaps at once (the
                allocator before 2026-12-07's deferred unmaps)
  preinstalled  nothing is done here: whatever the caller put in place
                (vram fit --allocator vram ...) is used as it is

Workloads (every model is built from a config with random weights; nothing
is downloaded):
  gpt2        GPT-2 small (12 layers, 768 wide, 12 heads, vocab 50257), AdamW,
              bf16 autocast; batch B (default 8) of random tokens whose
              sequence length varies per step in 64..1024
  resnet      torchvision ResNet-50, SGD with momentum, bf16 autocast;
              random 224x224 images, batch varying per step over the
              multiples of 16 up to B (default 128)
  llama_lora  LLaMA of the 1B class (hidden 2048, 16 layers, 32 heads, 8 KV
              heads, intermediate 5632, vocab 32000) in bf16, SDPA, gradient
              checkpointing, LoRA r=16 on q_proj/v_proj through peft (without
              peft: all frozen but the last two decoder layers, noted in the
              output); batch B (default 4), sequence length 256..1024
  kvgen       GPT-2 medium (24 layers, 1024 wide, 16 heads) in fp16, eval,
              greedy model.generate with the KV cache; batch B (default 8),
              prompt length 64..768, 8..16 new tokens (exactly that many:
              min_new_tokens = max_new_tokens). One step is one generate
              call; the "loss" is a checksum of the generated tokens (the
              sum of their ids), so equal values mean identical output.

Steps: --steps is the total number of steps, the first --warmup of them are
not timed (so --steps 60 --warmup 10 times 50 steps). Step 0 and the last
step use the largest shape (sequence length, batch, prompt and new tokens),
the others a seeded random one, so a short trial (--steps 3 --warmup 1, as
vram fit runs it) already meets the peak. --batch is the batch at the
largest shape: the fixed batch for gpt2, llama_lora and kvgen, the largest
batch of the schedule for resnet. Every run with the same seed sees the
same shapes and data, and determinism is asked of PyTorch
(torch.use_deterministic_algorithms(True, warn_only=True), cuDNN
deterministic, CUBLAS_WORKSPACE_CONFIG=:4096:8), so losses can be compared
across allocators exactly. Where PyTorch has no deterministic kernel for an
op it warns and goes on; those warnings are listed in the result
(nondeterministic): such ops can make losses differ from run to run under
any allocator.

--cap-gib G caps the allocator's reserved memory at G GiB: for default and
expandable through torch.cuda.set_per_process_memory_fraction right after
CUDA starts; for the vram allocators through max_bytes:G GiB in the vram
configuration (vram's set_per_process_memory_fraction hook is not used, so
each allocator is capped by its own mechanism, as a user would). With
preinstalled the cap is the caller's (put max_bytes in its configuration);
--cap-gib then uses set_per_process_memory_fraction.

--turns IN,OUT (with --turn-first on one side): two runs take turns step
by step over two FIFOs, step i of one, then step i of the other, for a
per-step comparison under the same host state; lockstep_bench.py starts
such pairs. turn_wait_s says how long a run waited for its partner.

--gpu-lock FILE: the process imports torch and the workload's libraries
(the slow part of its start, some 15 s with transformers), then waits for
an exclusive lock on FILE before it installs the allocator and starts CUDA,
and holds it until it exits. Runs started together (one per allocator)
thus import side by side but use the GPU one at a time, each still in a
fresh process; lock_wait_s says how long a run waited. With --group-size N
no run takes the lock before N runs have imported (or 90 s have passed), so
no run's steps share the CPU with another's imports.

Output: one JSON line on stdout (appended to --json FILE as well): workload,
allocator, steps, batch, step_ms_median, step_ms_p95 (nearest rank),
loss_final, losses_tail (last 5), losses (all), peak_allocated and
peak_reserved (bytes, torch.cuda.max_memory_*, over the whole run: the
counters are reset once, before the model is built), ratio
(reserved/allocated), allocated_idle (allocated between steps after the
last one: weights, gradients, optimizer state), device_used_before/after
(total - free from torch.cuda.mem_get_info, whole device), import_s,
lock_wait_s, build_s, wall_s, torch, gpu, ok; step_ms (every timed
step) and, where NVML answers, sm_mhz (the SM clock read after each timed
step) and its median sm_mhz_median.
A failure prints the same line with ok false and the error (type and first
line) and exits 1; an out-of-memory error exits 3 and writes its message
(first 300 characters, on one line) to stderr, which is what vram fit reads
as too large a batch.
"""
import argparse
import gc
import json
import math
import os
import random
import signal
import statistics
import sys
import time
import traceback
import warnings

WORKLOADS = ("gpt2", "resnet", "llama_lora", "kvgen", "lstm")
ALLOCATORS = ("default", "expandable", "vram", "vram_paged", "vram_fine", "vram_fine_keep", "vram_fine_wait", "preinstalled")
VRAM_ALLOCATORS = ("vram", "vram_paged", "vram_fine", "vram_fine_keep", "vram_fine_wait")
DEFAULT_BATCH = {"gpt2": 8, "resnet": 128, "llama_lora": 4, "kvgen": 8, "lstm": 128}
# (smallest, largest) sequence length; kvgen: prompt length and new tokens.
SEQ_RANGE = {"gpt2": (64, 1024), "llama_lora": (256, 1024), "lstm": (10, 400)}
# kvgen: short generate calls (some 0.3 s each on an H200, mostly host time)
# so that 50 timed calls fit in a run; long prompts make the KV cache large.
PROMPT_RANGE = (64, 768)
NEW_TOKENS_RANGE = (8, 16)
EXIT_FAILED, EXIT_OOM = 1, 3

torch = None  # imported in main(), after the environment is set for the allocator


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, choices=WORKLOADS)
    ap.add_argument("--allocator", required=True, choices=ALLOCATORS)
    ap.add_argument("--steps", type=int, default=60, help="total steps, warm-up included (default 60)")
    ap.add_argument("--warmup", type=int, default=10, help="first steps not timed (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch", type=int, default=0, help="batch at the largest shape (default per workload)")
    ap.add_argument("--cap-gib", type=float, default=0, help="cap the allocator's memory at this many GiB")
    ap.add_argument("--vram-conf", default="", help="more vram settings (VRAM_ALLOC_CONF syntax) for the vram allocators")
    ap.add_argument("--max-seconds", type=float, default=0,
                    help="end the timed steps after this long (0: no limit); the line says truncated")
    ap.add_argument("--channels-last", action="store_true", help="resnet: channels_last memory format")
    ap.add_argument("--json", default="", help="append the result line to this file too")
    ap.add_argument("--round", type=int, default=0,
                    help="which round of train_bench.sh ROUNDS this run belongs to (0: none, left out of the line)")
    ap.add_argument("--gpu-lock", default="",
                    help="import everything, then wait for this lock file before touching the GPU")
    ap.add_argument("--group-size", type=int, default=1,
                    help="with --gpu-lock: wait until this many runs have imported before taking the lock")
    ap.add_argument("--record-history", default="",
                    help="record the allocator's memory history over the whole run and dump it to this "
                         "pickle (vram's allocators: its event trace, trace_events; vram replay reads it)")
    ap.add_argument("--turns", default="",
                    help="IN,OUT: two FIFOs shared with one partner run; take turns with it step by step "
                         "(lockstep_bench.py sets this up)")
    ap.add_argument("--turn-first", action="store_true", help="with --turns: take the first step without waiting")
    ap.add_argument("--turn-timeout", type=float, default=300,
                    help="with --turns: give up after waiting this many seconds for the partner (default 300)")
    ap.add_argument("--gc-between-steps", action="store_true",
                    help="Python's garbage collector off during the steps, a collection before each step outside "
                         "the clock (everything alive before the first step frozen out of it), so that its "
                         "pauses do not land inside some steps of one run and not of its partner's")
    ap.add_argument("--run-timeout", type=int, default=0,
                    help="give up this many seconds after the GPU part starts (0: never); the line says so")
    a = ap.parse_args(argv)
    if a.batch == 0:
        a.batch = DEFAULT_BATCH[a.workload]
    if a.batch < 1:
        ap.error("--batch %d: must be at least 1" % a.batch)
    if a.steps < 1 or a.warmup < 0 or a.warmup >= a.steps:
        ap.error("--steps %d --warmup %d: want 0 <= warmup < steps" % (a.steps, a.warmup))
    if a.cap_gib < 0:
        ap.error("--cap-gib %g: must not be negative" % a.cap_gib)
    if a.turns:
        if len(a.turns.split(",")) != 2 or not all(a.turns.split(",")):
            ap.error("--turns %r: want IN,OUT (two FIFO paths)" % a.turns)
        if a.max_seconds:
            ap.error("--turns: --max-seconds would end one run's steps before its partner's; leave it 0")
        if a.gpu_lock:
            ap.error("--turns and --gpu-lock exclude each other: partners share the GPU turn by turn")
    elif a.turn_first:
        ap.error("--turn-first needs --turns")
    return a


def vram_conf(a):
    """The vram configuration string for --allocator vram / vram_paged."""
    parts = []
    if a.allocator in ("vram_paged", "vram_fine", "vram_fine_keep", "vram_fine_wait"):
        parts.append("page_mapped:true")
    if a.allocator in ("vram_fine", "vram_fine_keep", "vram_fine_wait"):
        parts.append("page_regime:fine")
    if a.allocator == "vram_fine_keep":
        parts.append("page_release_window:off")
    if a.allocator == "vram_fine_wait":
        parts.append("page_defer_unmap:false")
    if a.record_history:  # vram's history is its event trace (torch.cuda.memory._dump_snapshot)
        parts.append("trace_events:4000000")
    if a.cap_gib:
        parts.append("max_bytes:%gGiB" % a.cap_gib)
    if a.vram_conf:
        parts.append(a.vram_conf)
    return ",".join(parts)


def set_env(a):
    """Environment the allocator and determinism need, before torch loads."""
    os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"
    if a.allocator == "expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    elif a.allocator != "preinstalled":
        os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)


def schedule(n, lo, hi, rng, choices=None):
    """n sizes: the largest first and last, seeded random ones between."""
    out = []
    for i in range(n):
        if i == 0 or i == n - 1:
            out.append(hi)
        elif choices:
            out.append(rng.choice(choices))
        else:
            out.append(rng.randint(lo, hi))
    return out


def resnet_batches(n, bmax, rng):
    choices = list(range(16, bmax + 1, 16)) or [bmax]
    if choices[-1] != bmax:
        choices.append(bmax)
    return schedule(n, choices[0], bmax, rng, choices)


def percentile(xs, q):
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    s = sorted(xs)
    k = max(1, int(math.ceil(q / 100.0 * len(s))))
    return s[k - 1]


OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")


def is_oom(e):
    """Whether e is an out-of-memory error of PyTorch, of the allocator or of
    a library that asked for memory (cuBLAS, cuDNN)."""
    for mod in (torch, getattr(torch, "cuda", None)):
        t = getattr(mod, "OutOfMemoryError", None) if mod is not None else None
        if isinstance(t, type) and isinstance(e, t):
            return True
    if "OutOfMemory" in type(e).__name__:
        return True
    msg = str(e)
    return isinstance(e, RuntimeError) and (
        "out of memory" in msg.lower() or "STATUS_ALLOC_FAILED" in msg or "CUDA_ERROR_OUT_OF_MEMORY" in msg)


def qualname(e):
    t = type(e)
    mod = t.__module__
    return t.__name__ if mod in ("builtins", "__main__") else mod + "." + t.__name__


def oom_line(e):
    """The one line written to stderr for an OOM: the type and the first 300
    characters of the message, with a marker vram fit knows."""
    msg = " ".join(str(e).split())[:300]
    line = "%s: %s" % (qualname(e), msg)
    if not any(m in line for m in OOM_MARKERS):
        line = "CUDA out of memory (%s): %s" % (qualname(e), msg)
    return line


def first_line(e):
    s = str(e).strip().splitlines()
    return s[0][:500] if s else ""


class Bench:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.notes = []
        self.extra = {}

    # ---- models -----------------------------------------------------------

    def build(self, make, dtype=None):
        """make() under the CUDA device context (weights initialised on the
        GPU, directly in dtype); on failure, on the CPU and then moved."""
        old = torch.get_default_dtype()
        try:
            if dtype is not None:
                torch.set_default_dtype(dtype)
            try:
                with torch.device("cuda"):
                    m = make()
                return m
            except Exception as e:  # older stacks: build on the CPU
                self.notes.append("built on the CPU (%s: %s)" % (qualname(e), first_line(e)))
        finally:
            torch.set_default_dtype(old)
        m = make()
        if dtype is not None:
            m = m.to(dtype)
        return m.cuda()

    def hf_model(self, cls, config_cls, **kw):
        """A transformers model with SDPA attention where the version allows."""
        try:
            cfg = config_cls(attn_implementation="sdpa", **kw)
        except TypeError:
            cfg = config_cls(**kw)
        try:
            cfg._attn_implementation = "sdpa"
        except Exception:
            pass
        return cfg, (lambda: cls(cfg))

    def setup(self):
        a, w = self.a, self.a.workload
        self.gen = torch.Generator(device="cuda")
        self.gen.manual_seed(a.seed)
        if w == "gpt2":
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg, make = self.hf_model(GPT2LMHeadModel, GPT2Config, n_layer=12, n_embd=768, n_head=12,
                                      vocab_size=50257, n_positions=1024)
            self.model = self.build(make)
            self.model.train()
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
            self.vocab = cfg.vocab_size
            self.shapes = schedule(a.steps, *SEQ_RANGE[w], self.rng)
        elif w == "llama_lora":
            from transformers import LlamaConfig, LlamaForCausalLM
            cfg, make = self.hf_model(LlamaForCausalLM, LlamaConfig, hidden_size=2048, num_hidden_layers=16,
                                      num_attention_heads=32, num_key_value_heads=8, intermediate_size=5632,
                                      vocab_size=32000, max_position_embeddings=2048, use_cache=False)
            self.model = self.build(make, torch.bfloat16)
            self.model.config.use_cache = False
            self.checkpointing()
            self.lora()
            self.model.train()
            params = [p for p in self.model.parameters() if p.requires_grad]
            self.opt = torch.optim.AdamW(params, lr=1e-4)
            self.vocab = cfg.vocab_size
            self.shapes = schedule(a.steps, *SEQ_RANGE[w], self.rng)
        elif w == "resnet":
            import torchvision
            self.model = self.build(lambda: torchvision.models.resnet50(weights=None))
            if a.channels_last:
                self.model = self.model.to(memory_format=torch.channels_last)
            self.model.train()
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            self.shapes = resnet_batches(a.steps, a.batch, self.rng)
        elif w == "lstm":
            # The recorded lstm_varlen trace's job: a 3-layer LSTM (512 to
            # 1024), sequence lengths drawn per step, Adam; its shapes change
            # every step, the pattern that fragments a caching allocator.
            nn = torch.nn

            class LSTMNet(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.lstm = nn.LSTM(512, 1024, num_layers=3, batch_first=True)
                    self.head = nn.Linear(1024, 512)

                def forward(self, x):
                    return self.head(self.lstm(x)[0])

            self.model = self.build(LSTMNet)
            self.model.train()
            self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-4)
            self.shapes = schedule(a.steps, *SEQ_RANGE[w], self.rng)
        elif w == "kvgen":
            from transformers import GPT2Config, GPT2LMHeadModel
            cfg, make = self.hf_model(GPT2LMHeadModel, GPT2Config, n_layer=24, n_embd=1024, n_head=16,
                                      vocab_size=50257, n_positions=1024)
            self.model = self.build(make, torch.float16)
            self.model.eval()
            self.vocab = cfg.vocab_size
            self.eos = cfg.eos_token_id if cfg.eos_token_id is not None else 50256
            prompts = schedule(a.steps, *PROMPT_RANGE, self.rng)
            news = schedule(a.steps, *NEW_TOKENS_RANGE, self.rng)
            self.shapes = list(zip(prompts, news))
        self.extra["params"] = sum(p.numel() for p in self.model.parameters())
        self.extra["trainable_params"] = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
        attn = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        if attn is not None:
            self.extra["attn"] = attn

    def checkpointing(self):
        m = self.model
        try:
            m.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        except TypeError:
            m.gradient_checkpointing_enable()
            if hasattr(m, "enable_input_require_grads"):
                m.enable_input_require_grads()
            self.notes.append("gradient checkpointing with the version's default (reentrant)")

    def lora(self):
        try:
            from peft import LoraConfig, get_peft_model
        except Exception as e:
            keep = ("model.layers.14.", "model.layers.15.", "model.norm.")
            for name, p in self.model.named_parameters():
                p.requires_grad_(name.startswith(keep))
            self.extra["lora"] = "fallback"
            self.notes.append("peft not importable (%s): all frozen but decoder layers 14-15 and the final norm"
                              % first_line(e))
            return
        cfg = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, bias="none",
                         target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
        self.model = get_peft_model(self.model, cfg)
        self.model.cuda()  # adapters made on the CPU follow the base weights
        self.extra["lora"] = "peft"

    # ---- steps ------------------------------------------------------------

    def make_input(self, i):
        """The step's data, on the GPU, before the timer starts."""
        a, w = self.a, self.a.workload
        if w in ("gpt2", "llama_lora"):
            return torch.randint(0, self.vocab, (a.batch, self.shapes[i]), device="cuda", generator=self.gen)
        if w == "lstm":
            x = torch.randn(a.batch, self.shapes[i], 512, device="cuda", generator=self.gen)
            return x, torch.randn(a.batch, self.shapes[i], 512, device="cuda", generator=self.gen)
        if w == "resnet":
            b = self.shapes[i]
            x = torch.randn(b, 3, 224, 224, device="cuda", generator=self.gen)
            if a.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, 1000, (b,), device="cuda", generator=self.gen)
            return x, y
        p, _ = self.shapes[i]
        return torch.randint(0, self.vocab, (a.batch, p), device="cuda", generator=self.gen)

    def step(self, i, data):
        """One step; returns its loss (kvgen: the checksum) as a tensor or int."""
        w = self.a.workload
        if w == "kvgen":
            _, new = self.shapes[i]
            with torch.inference_mode():
                out = self.model.generate(input_ids=data, attention_mask=torch.ones_like(data), do_sample=False,
                                          use_cache=True, max_new_tokens=new, min_new_tokens=new,
                                          pad_token_id=self.eos)
                return out[:, data.shape[1]:].sum()
        self.opt.zero_grad(set_to_none=True)
        if w == "lstm":  # fp32: cuDNN's LSTM
            x, y = data
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            loss.backward()
            self.opt.step()
            return loss.detach()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            if w == "resnet":
                x, y = data
                loss = torch.nn.functional.cross_entropy(self.model(x), y)
            else:
                loss = self.model(input_ids=data, labels=data).loss
        loss.backward()
        self.opt.step()
        return loss.detach()


def preload(workload):
    """Import the workload's libraries (no CUDA is touched)."""
    if workload in ("gpt2", "kvgen"):
        from transformers import GPT2Config, GPT2LMHeadModel  # noqa: F401
    elif workload == "llama_lora":
        from transformers import LlamaConfig, LlamaForCausalLM  # noqa: F401
        try:
            import peft  # noqa: F401
        except Exception:
            pass  # Bench.lora says so
    elif workload == "resnet":
        import torchvision  # noqa: F401


class SMClock:
    """The GPU's current SM clock through NVML (libnvidia-ml, via ctypes),
    sampled between steps: process-to-process differences in step time can
    then be set beside the clock the GPU ran at. NVML index 0 is assumed to
    be the CUDA device (one card per run here). Without NVML, read()
    returns None."""

    def __init__(self):
        import ctypes
        self.h = None
        try:
            self.nvml = ctypes.CDLL("libnvidia-ml.so.1")
            if self.nvml.nvmlInit_v2() != 0:
                return
            h = ctypes.c_void_p()
            if self.nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0:
                self.h = h
        except OSError:
            pass
        self.mhz = ctypes.c_uint()

    def read(self):
        import ctypes
        if self.h is None:
            return None
        if self.nvml.nvmlDeviceGetClockInfo(self.h, 1, ctypes.byref(self.mhz)) != 0:  # 1: NVML_CLOCK_SM
            return None
        return self.mhz.value


class Turns:
    """Step-by-step turn-taking between two runs (lockstep_bench.py): each
    step waits for a byte from the partner on IN and hands one over on OUT
    when it is done, so the partners' steps alternate: step i of one, then
    step i of the other, seconds apart, under the same host and GPU state.
    A run that fails hands over STOP, and its partner then fails too
    instead of going on alone. Both FIFOs are opened read-write, so that
    neither open blocks and a byte written before the partner opens its end
    is kept."""

    GO, STOP = b"g", b"s"

    def __init__(self, spec, first, timeout_s):
        inp, out = spec.split(",")
        self.inp = os.open(inp, os.O_RDWR)
        self.out = os.open(out, os.O_RDWR)
        self.owe = first  # the first run takes its first step without waiting
        self.timeout_s = timeout_s
        self.waited_s = 0.0

    def wait(self):
        """Block until it is this run's turn."""
        import select
        if self.owe:
            self.owe = False
            return
        t = time.perf_counter()
        r, _, _ = select.select([self.inp], [], [], self.timeout_s)
        if not r:
            raise RuntimeError("--turns: the partner run gave no turn in %g s" % self.timeout_s)
        b = os.read(self.inp, 1)
        self.waited_s += time.perf_counter() - t
        if b != self.GO:
            raise RuntimeError("--turns: the partner run stopped")

    def done(self):
        """Hand the turn to the partner."""
        os.write(self.out, self.GO)

    def stop(self):
        try:
            os.write(self.out, self.STOP)
        except OSError:
            pass


_lock_file = None  # held until the process exits
_turns = None  # the Turns of --turns, opened before the GPU is touched


def gpu_lock(path, group=1, barrier_s=90):
    """Wait until group runs are ready (a byte each in path.ready), then
    for an exclusive lock on path; returns the seconds waited."""
    global _lock_file
    import fcntl
    t = time.perf_counter()
    if group > 1:
        ready = path + ".ready"
        with open(ready, "ab") as f:
            f.write(b"x")
        while os.path.getsize(ready) < group and time.perf_counter() - t < barrier_s:
            time.sleep(0.05)
    _lock_file = open(path, "a")
    fcntl.flock(_lock_file.fileno(), fcntl.LOCK_EX)
    return round(time.perf_counter() - t, 2)


_nondeterministic = []  # what PyTorch warned has no deterministic implementation


def watch_warnings():
    """Keep the warnings of deterministic mode (warn_only) for the result:
    ops whose results may differ from run to run, whatever the allocator."""
    show = warnings.showwarning

    def showwarning(message, category, filename, lineno, file=None, line=None):
        m = " ".join(str(message).split())
        if "deterministic" in m and len(_nondeterministic) < 20:
            short = m[:200]
            if short not in _nondeterministic:
                _nondeterministic.append(short)
        show(message, category, filename, lineno, file, line)

    warnings.showwarning = showwarning


def install(a):
    """Put the allocator in place; nothing may have touched CUDA yet."""
    if a.allocator in VRAM_ALLOCATORS:
        import vram
        import vram.torch
        conf = vram_conf(a)
        vram.torch.install(conf)
        return vram.config()
    if a.allocator == "expandable":
        return os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")
    if a.allocator == "preinstalled":
        return os.environ.get("VRAM_ALLOC_CONF", "")
    return ""


def run(a, res):
    conf = install(a)
    res["alloc_conf"] = conf
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    # cuDNN's attention compiles a kernel for every new sequence length at
    # run time and keeps it in CUDA's on-disk cache, so whichever run of a
    # group comes first pays for the compilation of every shape (25-45 %
    # of a kvgen step, measured): the order of the runs, not the allocator,
    # then decides the step times. Flash and memory-efficient attention
    # need no compilation.
    if hasattr(torch.backends.cuda, "enable_cudnn_sdp"):
        torch.backends.cuda.enable_cudnn_sdp(False)
        res["sdp_cudnn"] = False
    torch.use_deterministic_algorithms(True, warn_only=True)
    watch_warnings()
    random.seed(a.seed)
    torch.manual_seed(a.seed)
    try:
        import numpy
        numpy.random.seed(a.seed)
    except ImportError:
        pass
    torch.cuda.init()
    total = torch.cuda.get_device_properties(0).total_memory
    res["gpu"] = torch.cuda.get_device_name(0)
    res["device_total"] = total
    if a.cap_gib and a.allocator not in VRAM_ALLOCATORS:
        frac = a.cap_gib * 2**30 / total
        if frac > 1:
            raise ValueError("--cap-gib %g: the GPU has only %.1f GiB" % (a.cap_gib, total / 2**30))
        torch.cuda.set_per_process_memory_fraction(frac, 0)
        res["cap_via"] = "set_per_process_memory_fraction(%.6f)" % frac
    elif a.cap_gib:
        res["cap_via"] = "vram max_bytes"
    vt = sys.modules.get("vram.torch")
    if vt is not None:  # installed here, or by vram run/fit --allocator vram at import torch
        try:
            res["vram_installed"] = bool(vt.installed())
            res["vram"] = sys.modules["vram"].version()
        except Exception as e:
            res["vram_installed"] = "unknown (%s)" % qualname(e)
    if a.allocator == "preinstalled":
        res["preinstalled"] = {"VRAM_ALLOC_CONF": os.environ.get("VRAM_ALLOC_CONF")}
    free, total = torch.cuda.mem_get_info()
    res["device_used_before"] = total - free
    torch.cuda.reset_peak_memory_stats()
    if a.record_history:
        torch.cuda.memory._record_memory_history(enabled="all", context=None, max_entries=4000000)

    b = Bench(a)
    t_build = time.perf_counter()
    b.setup()
    torch.cuda.synchronize()
    res["build_s"] = round(time.perf_counter() - t_build, 3)
    res.update(b.extra)

    times, losses, started, truncated = [], [], None, False
    at_warm = None
    clock, clocks = SMClock(), []
    turns = _turns
    if a.gc_between_steps:
        gc.collect()
        gc.freeze()
        gc.disable()
    for i in range(a.steps):
        if turns:
            turns.wait()
        if a.gc_between_steps:
            gc.collect()
        data = b.make_input(i)
        torch.cuda.synchronize()
        if i == a.warmup:
            at_warm = driver_counters(a)
        t0 = time.perf_counter()
        loss = b.step(i, data)
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        losses.append(float(loss))
        del data, loss
        mhz = clock.read() if i >= a.warmup else None  # before the partner's turn, so as not to overlap it
        if turns:
            turns.done()
        if i >= a.warmup:
            times.append(dt * 1e3)
            if mhz is not None:
                clocks.append(mhz)
            if started is None:
                started = time.perf_counter() - dt
            if a.max_seconds and time.perf_counter() - started > a.max_seconds and i < a.steps - 1:
                truncated = True
                break
    if a.gc_between_steps:
        gc.enable()
        gc.unfreeze()
        res["gc_between_steps"] = True
    torch.cuda.synchronize()
    stats = torch.cuda.memory_stats()
    res["allocated_idle"] = stats.get("allocated_bytes.all.current")
    res["alloc_retries"] = stats.get("num_alloc_retries")
    res["num_ooms"] = stats.get("num_ooms")
    res["alloc_counts"] = alloc_counts(a, stats)
    if at_warm is not None:
        res["timed_alloc"] = timed_alloc(at_warm, driver_counters(a), sum(times))
    if a.record_history:
        torch.cuda.memory._dump_snapshot(a.record_history)
        torch.cuda.memory._record_memory_history(enabled=None)
        res["history"] = a.record_history
    res["peak_allocated"] = torch.cuda.max_memory_allocated()
    res["peak_reserved"] = torch.cuda.max_memory_reserved()
    if res["peak_allocated"]:
        res["ratio"] = round(res["peak_reserved"] / res["peak_allocated"], 4)
    res["steps"] = len(losses)
    res["timed_steps"] = len(times)
    res["truncated"] = truncated
    res["step_ms_median"] = round(statistics.median(times), 3)
    res["step_ms_p95"] = round(percentile(times, 95), 3)
    res["step_ms_mean"] = round(statistics.fmean(times), 3)
    res["step_ms"] = [round(t, 3) for t in times]
    if turns:
        res["turn_wait_s"] = round(turns.waited_s, 2)
    if clocks:
        res["sm_mhz_median"] = statistics.median(clocks)
        res["sm_mhz"] = clocks
    res["loss_final"] = losses[-1]
    res["losses_tail"] = losses[-5:]
    res["losses"] = losses
    if a.workload == "kvgen":
        res["loss_is"] = "checksum: sum of the generated token ids"
    res["shape_max"] = max(b.shapes) if a.workload == "resnet" else b.shapes[0]
    if b.notes:
        res["notes"] = b.notes
    if _nondeterministic:
        res["nondeterministic"] = list(_nondeterministic)
    del b
    free, total = torch.cuda.mem_get_info()
    res["device_used_after"] = total - free
    res["ok"] = True


def alloc_counts(a, stats):
    """How often the allocator went to the driver or waited, over the run.

    Allocations and frees come from PyTorch's counters (allocation.all.allocated
    and .freed, which vram fills the same way); the driver figures from each
    allocator's own statistics: vram counts every mapping call and every stream
    wait, PyTorch counts cudaMalloc/cudaFree (num_device_alloc/free) and, with
    expandable segments, nothing finer."""
    keys = ("allocation.all.allocated", "allocation.all.freed", "num_device_alloc", "num_device_free",
            "num_sync_all_streams", "num_alloc_retries")
    out = {k: stats.get(k) for k in keys if k in stats}
    if a.allocator in VRAM_ALLOCATORS + ("preinstalled",):
        try:
            import vram
            vs = vram.memory_stats(0)
            for k in ("num_device_alloc", "num_device_free", "num_mem_map", "num_mem_unmap",
                      "num_stream_syncs", "stream_sync_ns", "device_call_ns", "num_page_releases",
                      "num_alloc_retries"):
                if k in vs:
                    out["vram." + k] = vs[k]
        except Exception as e:  # the figures are extra; the run stands without them
            out["vram_error"] = "%s: %s" % (qualname(e), first_line(e))
    return out


TIMED_KEYS = ("num_device_alloc", "num_device_free", "num_mem_map", "num_mem_unmap", "num_stream_syncs",
              "stream_sync_ns", "device_call_ns")


def driver_counters(a):
    """The allocator's driver counters now: vram's own (its statistics count
    every mapping call and the time in them), or PyTorch's cudaMalloc/cudaFree
    counts. Read between steps, outside the timed region."""
    if a.allocator in VRAM_ALLOCATORS + ("preinstalled",):
        try:
            import vram
            vs = vram.memory_stats(0)
            return {k: vs[k] for k in TIMED_KEYS if k in vs}
        except Exception as e:
            return {"error": "%s: %s" % (qualname(e), first_line(e))}
    st = torch.cuda.memory_stats()
    return {k: st[k] for k in ("num_device_alloc", "num_device_free") if k in st}


def timed_alloc(before, after, timed_ms):
    """The driver work of the timed steps (after minus before), and the share
    of the timed steps' wall time that vram spent in driver calls and stream
    waits: an upper bound of what its slow path added to them on the host."""
    if "error" in before or "error" in after:
        return {"error": before.get("error") or after.get("error")}
    out = {k: after[k] - before[k] for k in after if k in before}
    ns = out.get("device_call_ns", 0) + out.get("stream_sync_ns", 0)
    if "device_call_ns" in out and timed_ms > 0:
        out["share_of_step_time"] = round(ns / (timed_ms * 1e6), 6)
    return out


class RunTimeout(Exception):
    pass


def on_alarm(signum, frame):
    raise RunTimeout("over --run-timeout")


def emit(a, res):
    line = json.dumps(res, sort_keys=False)
    print(line, flush=True)
    if a.json:
        with open(a.json, "a") as f:
            f.write(line + "\n")


def main(argv=None):
    global torch, _turns
    a = parse_args(argv)
    set_env(a)
    t_start = time.perf_counter()
    res = {"workload": a.workload, "allocator": a.allocator, "steps": 0, "steps_requested": a.steps,
           "warmup": a.warmup, "batch": a.batch, "seed": a.seed, "cap_gib": a.cap_gib or None,
           "torch": None, "gpu": None, "ok": False}
    if a.round:
        res["round"] = a.round
    code = 0
    try:
        if a.turns:  # first, so that a failure anywhere below stops the partner too
            _turns = Turns(a.turns, a.turn_first, a.turn_timeout)
        import torch as torch_mod
        torch = torch_mod
        res["torch"] = torch.__version__
        res["cuda"] = torch.version.cuda
        try:
            from importlib import metadata
            res["transformers"] = metadata.version("transformers")
        except Exception:
            pass
        preload(a.workload)
        res["import_s"] = round(time.perf_counter() - t_start, 2)
        if a.gpu_lock:
            res["lock_wait_s"] = gpu_lock(a.gpu_lock, a.group_size)
        if a.run_timeout:
            signal.signal(signal.SIGALRM, on_alarm)
            signal.alarm(a.run_timeout)
        run(a, res)
        signal.alarm(0)
    except BaseException as e:  # noqa: B902 - the line must come out whatever happened
        signal.alarm(0)
        if _turns:
            _turns.stop()  # the partner must not go on alone
        if isinstance(e, KeyboardInterrupt):
            res["error"] = "interrupted"
            code = 130
        elif torch is not None and is_oom(e):
            res["oom"] = True
            res["error"] = "%s: %s" % (qualname(e), first_line(e))
            code = EXIT_OOM
        elif isinstance(e, SystemExit):
            raise
        else:
            traceback.print_exc()
            res["error"] = "%s: %s" % (qualname(e), first_line(e))
            code = EXIT_FAILED
        res["ok"] = False
        if code == EXIT_OOM:
            print(oom_line(e), file=sys.stderr, flush=True)
    res["wall_s"] = round(time.perf_counter() - t_start, 2)
    emit(a, res)
    return code


if __name__ == "__main__":
    sys.exit(main())
