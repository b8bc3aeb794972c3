"""vram's allocator under PyTorch.

    import vram.torch
    vram.torch.install()          # before the first CUDA allocation
    ...
    print(torch.cuda.memory_summary())   # answered by vram

install() makes libvram PyTorch's CUDA allocator through
torch.cuda.memory.CUDAPluggableAllocator and points torch.cuda's statistics,
summary, snapshot and empty_cache functions at vram, since PyTorch cannot
ask a pluggable allocator for them. What a pluggable allocator cannot do
(CUDA graphs, CUDA IPC, torch.cuda.MemPool, cuDNN's cacheInfo) is in
docs/python.md, "Limits".
"""

try:
    import torch
except ImportError as _e:
    if isinstance(_e, ModuleNotFoundError) and _e.name == "torch":
        raise ImportError("vram.torch needs PyTorch: pip install torch", name="torch") from None
    raise ImportError("vram.torch needs PyTorch, and importing it failed: %s" % _e, name="torch") from _e

import os
import threading
import warnings

import vram
from vram import _stats as _stats_module
from vram import _lib

__all__ = [
    "install", "installed", "LimitationWarning", "device_index", "is_out_of_memory",
    "raise_out_of_memory_as_torch",
    "patched_names",
    "memory_stats", "memory_stats_as_nested_dict", "memory_allocated", "memory_reserved",
    "max_memory_allocated", "max_memory_reserved", "reset_peak_memory_stats",
    "reset_accumulated_memory_stats", "memory_summary", "empty_cache", "snapshot",
    "dump_snapshot",
]

TOO_LATE = (
    "vram.torch.install must run before the first CUDA allocation, but PyTorch's CUDA is "
    "already initialized%s: call it at the top of the script, before anything touches "
    "CUDA (or run the job with `vram run --allocator vram -- ...`)")

_HOOKS = (
    # (setter on the allocator object, libvram function)
    ("set_init_fn", "vram_init"),
    ("set_reset_fn", "vram_reset"),
    ("set_memory_fraction_fn", "vram_set_memory_fraction"),
    ("set_record_stream_fn", "vram_record_stream"),
)

_HOOK_EFFECT = {
    "set_init_fn": "nothing (libvram makes its allocators on first use)",
    "set_reset_fn": "only vram's own empty_cache releases cached memory",
    "set_memory_fraction_fn": "torch.cuda.set_per_process_memory_fraction has no effect "
                              "(use vram.set_memory_fraction)",
    "set_record_stream_fn": "Tensor.record_stream is not seen by vram: memory used on a "
                            "second stream can be reused too early",
}

LIMITS = (
    "vram.torch: PyTorch runs on vram's allocator as a pluggable allocator, which cannot "
    "do everything its own can: CUDA graph capture (torch.cuda.graph, CUDAGraph, "
    "make_graphed_callables, torch.compile(mode=\"reduce-overhead\")) raises vram.Error; "
    "sharing CUDA tensors between processes (CUDA IPC, torch.multiprocessing) and "
    "torch.cuda.MemPool are not supported; cuDNN's query of the largest free block "
    "(torch.backends.cudnn.benchmark) raises in PyTorch. See docs/python.md, \"Limits\".")

NO_GRAPHS = (
    "vram: CUDA graph capture is not supported on vram's allocator: PyTorch gives a "
    "pluggable allocator no private pool for a graph, so memory the graph writes on "
    "replay would be handed to other tensors; run without CUDA graphs (and without "
    "torch.compile(mode=\"reduce-overhead\")), or run this job on PyTorch's allocator")


class LimitationWarning(UserWarning):
    """What PyTorch cannot do on a pluggable allocator (warned once, at install)."""


_lock = threading.RLock()
_installed = False
_allocator = None
_originals = {}  # (owner, name) -> the attribute before install
_history_warned = False


def installed():
    """Whether install() has made vram PyTorch's CUDA allocator."""
    return _installed


def _check_torch():
    if getattr(getattr(torch, "version", None), "cuda", None) is None:
        raise vram.Error("vram.torch.install: this PyTorch (%s) has no CUDA support "
                         "(torch.version.cuda is None); install a CUDA build of PyTorch"
                         % getattr(torch, "__version__", "?"))
    memory = getattr(torch.cuda, "memory", None)
    for name in ("CUDAPluggableAllocator", "change_current_allocator"):
        if not hasattr(memory, name):
            raise vram.Error("vram.torch.install: this PyTorch (%s) lacks torch.cuda.memory.%s "
                             "(PyTorch 2.0 or later is needed)"
                             % (getattr(torch, "__version__", "?"), name))


def _held_by_pytorch():
    try:
        n = torch.cuda.memory_reserved()
    except Exception:
        return ""
    return " and its allocator holds %s" % _format_bytes(n) if n else ""


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.1f %s" % (n, unit))
        n /= 1024.0


def _has_key(conf, key):
    return any(item.split(":", 1)[0].strip() == key for item in (conf or "").split(","))


def install(conf=None):
    """Makes vram PyTorch's CUDA allocator; call it before the first CUDA allocation.

    conf: settings in VRAM_ALLOC_CONF syntax ("max_bytes:40GiB,page_mapped:true"),
    applied with vram.configure; None keeps $VRAM_ALLOC_CONF. Snapshots hold
    allocation history only with trace_events set (e.g. "trace_events:100000").

    Calling it again does nothing but apply conf, if given, with
    vram.configure: the same settings are accepted, others only until the
    first allocation. Raises vram.Error when CUDA is already initialized,
    when this PyTorch has no CUDA, and on VRAM_DEVICE=sim (simulated memory
    cannot hold tensors).
    """
    global _installed, _allocator
    with _lock:
        if _installed:
            if conf is not None:
                vram.configure(conf)
            return
        _check_torch()
        if torch.cuda.is_initialized():
            raise vram.Error(TOO_LATE % _held_by_pytorch())
        if vram.backend() == "sim":
            raise vram.Error("vram.torch.install: VRAM_DEVICE=sim puts libvram on its simulated "
                             "device, whose memory cannot hold PyTorch tensors; unset VRAM_DEVICE")
        for var in ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF"):
            if os.environ.get(var):
                warnings.warn("vram.torch: %s=%s applies to PyTorch's own allocator, not vram's; "
                              "put vram's settings in VRAM_ALLOC_CONF" % (var, os.environ[var]),
                              LimitationWarning, stacklevel=2)
        if conf is not None:
            vram.configure(conf)
        alloc = torch.cuda.memory.CUDAPluggableAllocator(_lib.loaded_path(), "vram_malloc", "vram_free")
        native = alloc.allocator()
        missing = []
        for setter, fn in _HOOKS:
            set_fn = getattr(native, setter, None)
            if set_fn is None:
                missing.append(setter)
                continue
            set_fn(_lib.function_address(fn))
        try:
            torch.cuda.memory.change_current_allocator(alloc)
        except RuntimeError as e:
            raise vram.Error((TOO_LATE % "") + " (PyTorch: %s)" % e) from None
        _allocator = alloc
        _installed = True
        _patch()
        if missing:
            warnings.warn("vram.torch: this PyTorch (%s) has no %s on its pluggable allocator: %s"
                          % (getattr(torch, "__version__", "?"), ", ".join(missing),
                             "; ".join(_HOOK_EFFECT[m] for m in missing)),
                          LimitationWarning, stacklevel=2)
        warnings.warn(LIMITS, LimitationWarning, stacklevel=2)


# ---- out of memory ----

OOM_PREFIX = "CUDA out of memory."


def is_out_of_memory(exc):
    """Whether exc is an out-of-memory error: PyTorch's own
    (torch.OutOfMemoryError), or the RuntimeError that a failed allocation
    through vram raises (its message starts "CUDA out of memory.")."""
    torch_oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if torch_oom is not None and isinstance(exc, torch_oom):
        return True
    return isinstance(exc, RuntimeError) and str(exc).startswith(OOM_PREFIX)


class raise_out_of_memory_as_torch:
    """Re-raises vram's out-of-memory RuntimeError as torch.OutOfMemoryError,
    for code that catches that class:

        with vram.torch.raise_out_of_memory_as_torch():
            loss = model(batch).sum()
    """

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        torch_oom = getattr(torch.cuda, "OutOfMemoryError", None)
        if exc is None or torch_oom is None or isinstance(exc, torch_oom) or not is_out_of_memory(exc):
            return False
        raise torch_oom(str(exc)) from exc


# ---- devices ----

def _current():
    # torch.cuda.current_device() would initialize CUDA; before that, the
    # current device is device 0 and vram has allocated nothing for PyTorch.
    return torch.cuda.current_device() if torch.cuda.is_initialized() else 0


def device_index(device=None, what="device"):
    """A device index from None (the current device), an int, "cuda", "cuda:1" or a torch.device."""
    if device is None:
        return _current()
    if isinstance(device, str):
        kind, _, index = device.partition(":")
        if kind.strip() == "cuda" and (not index or index.strip().isdigit()):
            return int(index) if index else _current()
        if device.strip().isdigit():
            return int(device)
        raise ValueError("vram.torch.%s: device must be a CUDA device (\"cuda\", \"cuda:1\", 1), got %r"
                         % (what, device))
    if hasattr(device, "type") and hasattr(device, "index"):  # torch.device
        if device.type != "cuda":
            raise ValueError("vram.torch.%s: device must be a CUDA device, got %r" % (what, device))
        return _current() if device.index is None else device.index
    return vram._device(device, what)


# ---- statistics, as torch.cuda has them ----

_stats = _stats_module.Stats(device_index)
memory_stats = _stats.memory_stats
memory_allocated = _stats.memory_allocated
max_memory_allocated = _stats.max_memory_allocated
memory_reserved = _stats.memory_reserved
max_memory_reserved = _stats.max_memory_reserved
reset_peak_memory_stats = _stats.reset_peak_memory_stats
reset_accumulated_memory_stats = _stats.reset_accumulated_memory_stats
memory_summary = _stats.memory_summary


def memory_stats_as_nested_dict(device=None):
    """torch.cuda.memory_stats_as_nested_dict() from vram."""
    out = {}
    for key, value in memory_stats(device).items():
        node = out
        parts = key.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
    return out


def empty_cache():
    """Waits for the work queued on the devices vram serves, then releases
    their cached memory (torch.cuda.empty_cache)."""
    if torch.cuda.is_initialized():
        for d in vram.info().get("devices") or []:
            torch.cuda.synchronize(d)
    vram.empty_cache(None)


def snapshot(device=None, augment_with_fx_traces=False):
    """torch.cuda.memory._snapshot() from vram (every device; the arguments are
    accepted for compatibility and ignored)."""
    return vram.snapshot()


def dump_snapshot(path="dump_snapshot.pickle", augment_with_fx_traces=False):
    """torch.cuda.memory._dump_snapshot() from vram: pickles snapshot() to path."""
    vram.dump_snapshot(path)


def _memory_snapshot(mempool_id=None, include_traces=True):
    return vram.snapshot()["segments"]


def _memory_cached(device=None):
    return memory_reserved(device)


def _max_memory_cached(device=None):
    return max_memory_reserved(device)


def _reset_max(device=None):
    reset_peak_memory_stats(device)


def _record_memory_history(enabled="all", *args, **kwargs):
    """vram keeps its own trace (trace_events in the settings); this only
    warns when that trace is off."""
    global _history_warned
    if enabled and not _has_key(vram.config(), "trace_events") and not _history_warned:
        _history_warned = True
        warnings.warn("vram.torch: memory history comes from vram's trace, which is off: set "
                      "trace_events (e.g. VRAM_ALLOC_CONF=trace_events:100000) before the "
                      "first CUDA allocation", LimitationWarning, stacklevel=2)


def _no_graph(*args, **kwargs):
    raise vram.Error(NO_GRAPHS)


# name in torch.cuda.memory and torch.cuda -> what answers it after install.
_REPLACEMENTS = {
    "memory_stats": memory_stats,
    "memory_stats_as_nested_dict": memory_stats_as_nested_dict,
    "memory_allocated": memory_allocated,
    "memory_reserved": memory_reserved,
    "max_memory_allocated": max_memory_allocated,
    "max_memory_reserved": max_memory_reserved,
    "memory_cached": _memory_cached,
    "max_memory_cached": _max_memory_cached,
    "reset_peak_memory_stats": reset_peak_memory_stats,
    "reset_accumulated_memory_stats": reset_accumulated_memory_stats,
    "reset_max_memory_allocated": _reset_max,
    "reset_max_memory_cached": _reset_max,
    "memory_summary": memory_summary,
    "memory_snapshot": _memory_snapshot,
    "empty_cache": empty_cache,
    "_snapshot": snapshot,
    "_dump_snapshot": dump_snapshot,
    "_record_memory_history": _record_memory_history,
}


def _set(owner, name, value):
    original = getattr(owner, name)
    setattr(owner, name, value)
    _originals.setdefault((owner, name), original)


def _patch():
    """Points torch.cuda's memory functions at vram, and makes CUDA graph
    capture raise instead of running on memory vram would hand out again."""
    for owner in (torch.cuda.memory, torch.cuda):
        for name, fn in _REPLACEMENTS.items():
            if hasattr(owner, name):
                _set(owner, name, fn)
    graphs = getattr(torch.cuda, "graphs", None)
    cuda_graph = getattr(graphs, "CUDAGraph", None) or getattr(torch.cuda, "CUDAGraph", None)
    graph_cm = getattr(graphs, "graph", None) or getattr(torch.cuda, "graph", None)
    unguarded = []
    for owner, name in ((cuda_graph, "capture_begin"), (graph_cm, "__init__")):
        if not isinstance(owner, type) or not hasattr(owner, name):
            continue
        try:
            _set(owner, name, _no_graph)
        except (TypeError, AttributeError):  # a built-in class
            unguarded.append("%s.%s" % (owner.__name__, name))
    if unguarded:
        warnings.warn("vram.torch: cannot guard %s in this PyTorch: CUDA graph capture would "
                      "run on memory vram hands out again; do not capture CUDA graphs"
                      % ", ".join(unguarded), LimitationWarning, stacklevel=3)


def patched_names():
    """The "module.name" attributes install() replaced (for tests and docs)."""
    out = []
    for owner, name in _originals:
        out.append("%s.%s" % (getattr(owner, "__name__", repr(owner)), name))
    return sorted(out)

