#!/usr/bin/env python3
"""Writes the snapshot fixtures of package torchsnap.

They mimic what torch.cuda.memory._dump_snapshot() pickles (PyTorch 2.x):
plain dicts, lists, tuples, ints, floats, bools and strings, with the keys of
_snapshot(). PyTorch is not needed: run `python3 make_fixtures.py` here.
"""
import pickle

MiB = 1 << 20
BASE = 0x7F5A40000000          # a large segment
SMALL = 0x7F5A3FE00000         # a small-pool segment
STREAM = 0x55D0C0A0B0C0        # a non-default stream handle

def frame(name, line, filename="train.py"):
    return {"filename": filename, "line": line, "name": name}

FRAMES = [frame("forward", 42), frame("<module>", 7)]

segments = [
    {
        "device": 0, "address": SMALL, "total_size": 2 * MiB, "allocated_size": 1024,
        "active_size": 1024, "requested_size": 1000, "stream": 0, "segment_type": "small",
        "segment_pool_id": (0, 0), "is_expandable": False, "frames": FRAMES,
        "blocks": [
            {"address": SMALL, "size": 1024, "requested_size": 1000,
             "state": "active_allocated", "frames": FRAMES},
            {"address": SMALL + 1024, "size": 2 * MiB - 1024, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    },
    {
        "device": 0, "address": BASE, "total_size": 20 * MiB, "allocated_size": 8 * MiB,
        "active_size": 12 * MiB, "requested_size": 12 * MiB - 100, "stream": STREAM,
        "segment_type": "large", "segment_pool_id": (0, 0), "is_expandable": True, "frames": [],
        "blocks": [
            {"address": BASE, "size": 8 * MiB, "requested_size": 8 * MiB - 100,
             "state": "active_allocated", "frames": FRAMES},
            {"address": BASE + 8 * MiB, "size": 4 * MiB, "requested_size": 4 * MiB,
             "state": "active_pending_free", "frames": []},
            {"address": BASE + 12 * MiB, "size": 8 * MiB, "requested_size": 0,
             "state": "inactive", "frames": []},
        ],
    },
]

T0 = 1_700_000_000_000_000  # time_us is a wall-clock timestamp in microseconds
trace0 = [
    {"action": "segment_alloc", "addr": BASE, "size": 20 * MiB, "stream": STREAM, "time_us": T0, "frames": FRAMES},
    {"action": "alloc", "addr": BASE, "size": 8 * MiB - 100, "stream": STREAM, "time_us": T0 + 5, "frames": FRAMES},
    {"action": "alloc", "addr": BASE + 8 * MiB, "size": 4 * MiB, "stream": STREAM, "time_us": T0 + 9, "frames": []},
    {"action": "segment_alloc", "addr": SMALL, "size": 2 * MiB, "stream": 0, "time_us": T0 + 10, "frames": []},
    {"action": "alloc", "addr": SMALL, "size": 1000, "stream": 0, "time_us": T0 + 11, "frames": FRAMES},
    {"action": "free_requested", "addr": BASE + 8 * MiB, "size": 4 * MiB, "stream": STREAM, "time_us": T0 + 20, "frames": []},
    {"action": "oom", "device_free": 3 * MiB, "size": 64 * MiB, "stream": STREAM, "time_us": T0 + 30, "frames": FRAMES},
    {"action": "free_completed", "addr": 0x7F5A00000000, "size": 512, "stream": 0, "time_us": T0 + 31, "frames": []},
    {"action": "snapshot", "addr": 0, "size": 12 * MiB + 1024, "stream": 0, "time_us": T0 + 40, "frames": []},
]

settings = {
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:512",
    "max_split_size": 512 * MiB,
    "garbage_collection_threshold": 0.0,
    "expandable_segments": True,
    "pinned_num_register_threads": 1,
    "release_lock_on_cudamalloc": False,
    "pinned_use_cuda_host_register": False,
    "roundup_power2_divisions": {"1": 0, "2": 0, "4": 4, "8": 0},
}

snapshot = {"segments": segments, "device_traces": [trace0, []], "allocator_settings": settings}

with open("snapshot.pickle", "wb") as f:
    pickle.dump(snapshot, f)              # the default protocol, as _dump_snapshot does
with open("snapshot_proto2.pickle", "wb") as f:
    pickle.dump(snapshot, f, protocol=2)  # older pickles: no frames, no short unicode opcodes
with open("segments_only.pickle", "wb") as f:
    pickle.dump(segments, f)              # torch.cuda.memory_snapshot(): the segment list alone
with open("bad_block_size.pickle", "wb") as f:
    bad = pickle.loads(pickle.dumps(snapshot))
    bad["segments"][1]["blocks"][2]["size"] = "8 MiB"
    pickle.dump(bad, f)
with open("missing_action.pickle", "wb") as f:
    bad = pickle.loads(pickle.dumps(snapshot))
    del bad["device_traces"][0][4]["action"]
    pickle.dump(bad, f)
