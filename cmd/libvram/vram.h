/*
 * vram.h: the C interface of libvram, vram's caching device-memory allocator
 * as a shared library (build: see the README, "Use it from PyTorch").
 *
 * One allocator per device index, created on first use on the device's
 * primary context (the one the CUDA runtime, PyTorch and CuPy use), with the
 * settings of VRAM_ALLOC_CONF or of vram_configure. VRAM_DEVICE=sim puts
 * every device on vram's simulated device instead of the GPU (for tests; no
 * driver needed; VRAM_SIM_CAPACITY sets its size, e.g. 8GiB, default 80GiB).
 *
 * Errors: functions that can fail return NULL, 0 or -1 and leave a message
 * for the calling thread in vram_last_error(). Strings returned as char *
 * are the caller's: release them with vram_string_free.
 *
 * Fork: a child process forked from a process that loaded libvram cannot
 * use it (the Go runtime's threads do not survive fork). In a child,
 * vram_free is a no-op, allocation fails with an error that says so, and the
 * other calls fail the same way; the parent is unaffected.
 */
#ifndef VRAM_H
#define VRAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- PyTorch's pluggable allocator (torch.cuda.memory.CUDAPluggableAllocator) ---- */

/* Allocates size bytes on device for stream (a cudaStream_t). Size 0 gives
 * NULL. On failure it throws a C++ std::runtime_error whose what() starts
 * with "CUDA out of memory." (PyTorch turns it into a Python RuntimeError);
 * call it only from C++ code that expects that. */
void *vram_malloc(size_t size, int device, void *stream);
/* Returns ptr to the cache. size, device and stream are what vram_malloc
 * was given; a block used on other streams (vram_record_stream) is reused
 * only after their work recorded so far has completed. Never throws. */
void vram_free(void *ptr, size_t size, int device, void *stream);
/* Hooks: set_init_fn, set_reset_fn (torch.cuda.empty_cache), set_memory_fraction_fn
 * (torch.cuda.set_per_process_memory_fraction), set_record_stream_fn.
 * vram_set_memory_fraction and vram_record_stream throw std::runtime_error on
 * a bad fraction or an unknown pointer, as vram_malloc does. */
void vram_init(int device_count);
void vram_reset(void);
void vram_set_memory_fraction(double fraction, int device);
void vram_record_stream(void *ptr, void *stream);

/* ---- CuPy (cupy.cuda.memory.CFunctionAllocator) ---- */

/* Returns 0 on failure (error in vram_last_error); never throws. */
intptr_t vram_cupy_malloc(intptr_t param, size_t size, int device);
void vram_cupy_free(intptr_t param, intptr_t ptr, int device);

/* ---- The plain C interface (Python's ctypes, tests) ---- */

/* Like vram_malloc, but returns NULL on failure (message in vram_last_error,
 * and vram_last_error_is_oom() is 1 when it was out of memory); never throws. */
void *vram_try_malloc(size_t size, int device, void *stream);
/* Frees ptr; returns 0, or -1 (double free, unknown pointer: vram_last_error). */
int vram_try_free(void *ptr, int device);
/* Like vram_record_stream; returns 0 or -1. */
int vram_try_record_stream(void *ptr, int device, void *stream);

/* Settings, in VRAM_ALLOC_CONF syntax ("page_mapped:true,max_bytes:40GiB").
 * vram_configure replaces the settings for allocators not yet created; it
 * fails (-1) on a bad string, and once any device has allocated (unless the
 * string gives the settings already in force). */
int vram_configure(const char *conf);
/* The settings in force (VRAM_ALLOC_CONF syntax). */
char *vram_config(void);
/* Caps the memory device may reserve at fraction of its total memory
 * ((0, 1]), like torch.cuda.set_per_process_memory_fraction; or at bytes
 * (0: no byte cap beyond the settings). Returns 0 or -1. */
int vram_set_fraction(int device, double fraction);
int vram_set_limit(int device, uint64_t bytes);

/* Statistics of one device as a JSON object with torch.cuda.memory_stats()'s
 * keys ("allocated_bytes.all.current", ...). A device that never allocated
 * reports zeros. NULL on error. */
char *vram_stats_json(int device);
/* torch.cuda.memory_summary()'s table plus vram's fragmentation line. */
char *vram_summary(int device);
/* The memory snapshot of every device as JSON shaped like
 * torch.cuda.memory._snapshot(): {"segments": [...], "device_traces": [[...], ...],
 * "allocator_settings": {...}}; pickled, PyTorch's memory_viz draws it and
 * `vram replay` reads it. device_traces holds the last trace_events
 * allocations and frees per device when trace_events is set in the settings
 * (otherwise the traces are empty: recording costs time on every call). */
char *vram_snapshot_json(void);
/* Releases cached memory of device (-1: every device). Returns 0 or -1. */
int vram_empty_cache(int device);
/* Resets the peak (or the accumulated) statistics of device (-1: every device). */
int vram_reset_peak_stats(int device);
int vram_reset_accumulated_stats(int device);
/* {"version": "...", "backend": "cuda"|"sim", "pid": N, "devices": [indexes with an allocator], "config": "..."} */
char *vram_info_json(void);

/* ---- DLPack (DLPack 1.x; the Python package's vram.empty and vram.from_dlpack) ----
 *
 * Tensors are DLManagedTensorVersioned * (legacy: DLManagedTensor *), whose
 * layouts are DLPack's (alloc/dlpack/dlpack.h). A tensor made by vram
 * holds its memory until its deleter runs; the memory goes back (to vram,
 * or to the producer of an imported tensor) when every tensor that shares
 * it has been deleted. NULL or -1 on failure (vram_last_error). */

/* A new compact row-major tensor of vram memory on device (uninitialised),
 * of ndim dimensions shape[0..ndim) and DLPack element type (code, bits,
 * lanes), reported as kDLCUDA device `device`. */
void *vram_dlpack_empty(const int64_t *shape, int ndim, int code, int bits, int lanes, int device);
/* Another tensor of the memory of tensor (made by vram and not deleted),
 * for a consumer: a DLManagedTensorVersioned *, or a DLManagedTensor * when
 * legacy is 1. */
void *vram_dlpack_share(void *tensor, int legacy);
/* Takes over a tensor of another producer (a DLManagedTensorVersioned *, or
 * a DLManagedTensor * when legacy is 1) on CUDA device `device`, without a
 * copy, and returns a vram tensor of its memory (versioned). The producer's
 * deleter is called once, after the returned tensor and every tensor shared
 * from it have been deleted. A refused tensor (wrong device, overflowing
 * size, null data, bad version, ...) is left to the caller. */
void *vram_dlpack_import(void *tensor, int legacy, int device);
/* Copies n bytes between host memory and the start of a vram tensor
 * (to_host 1: out of the tensor). Returns 0 or -1. */
int vram_dlpack_copy(void *tensor, void *host, size_t n, int to_host);
/* Calls the deleter of tensor (any producer's; legacy 1: a DLManagedTensor *). */
void vram_dlpack_delete(void *tensor, int legacy);

/* The last error of the calling thread ("" if none); valid until the thread's next call. */
const char *vram_last_error(void);
int vram_last_error_is_oom(void);
void vram_string_free(char *s);

#ifdef __cplusplus
}
#endif
#endif /* VRAM_H */
