"""A process on libvram's simulated device (VRAM_DEVICE=sim), for the tests
of the statistics channel: it allocates 4 x 64 MiB through the C interface
(plain ctypes, no framework), frees one, says "ready" and then holds its
memory until standard input closes ("hold") or for a second ("sleep")."""
import ctypes
import os
import sys
import time

lib = ctypes.CDLL(os.environ["VRAM_LIBRARY"])
lib.vram_try_malloc.restype = ctypes.c_void_p
lib.vram_try_malloc.argtypes = [ctypes.c_size_t, ctypes.c_int, ctypes.c_void_p]
lib.vram_try_free.argtypes = [ctypes.c_void_p, ctypes.c_int]
lib.vram_last_error.restype = ctypes.c_char_p

ptrs = []
for _ in range(4):
    p = lib.vram_try_malloc(64 << 20, 0, None)
    if not p:
        sys.exit("allocation failed: " + lib.vram_last_error().decode())
    ptrs.append(p)
lib.vram_try_free(ptrs.pop(), 0)  # 192 MiB allocated, 256 MiB reserved
print("ready", flush=True)
if sys.argv[1:] == ["hold"]:
    sys.stdin.read()
else:
    time.sleep(1.0)
