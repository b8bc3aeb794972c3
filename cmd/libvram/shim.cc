// The C entry points of libvram (vram.h). Each checks what must be checked
// before Go may run (a forked child), calls the Go side once, and turns a
// failure into what its caller expects: a C++ exception for PyTorch's
// pluggable allocator, a null pointer and a thread-local message for the
// others.

#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mutex>
#include <stdexcept>

#include "vram.h"
#include "shim.h"
extern "C" {
#include "_cgo_export.h"
#include "../../alloc/dlpack/dlpack.h"
}

namespace {

// forked is set in a child process made by fork: its Go runtime lost every
// thread but the forking one, so no call may enter Go.
volatile int forked = 0;
void on_fork_child() { forked = 1; }

__attribute__((constructor)) void register_fork_handler() {
  pthread_atfork(nullptr, nullptr, on_fork_child);
}

thread_local char *last_error = nullptr;
thread_local int last_oom = 0;

const char kForked[] =
    "vram: this process was forked from one that uses vram's allocator, which "
    "cannot be used in a forked child (nor can CUDA): use the 'spawn' start "
    "method for processes that use the GPU";

void set_error_copy(const char *msg, int oom) {
  free(last_error);
  last_error = strdup(msg);
  last_oom = oom;
}

const char *error_text() { return last_error ? last_error : "vram: allocation failed"; }

// Frees from PyTorch's pluggable free (vram_free) do not enter Go one by
// one. They wait in this queue, and the next call that enters Go hands the
// queue over first: an allocation then costs one C-to-Go call for itself
// and the frees before it, instead of one each. Every entry point flushes
// before it enters Go, so the allocator sees every free before it decides
// anything (an allocation, a statistic, an empty_cache): what it does and
// reports is what it would with the frees made at once. A full queue is
// flushed by the free that finds it full.
constexpr int kPendingMax = 256;

std::mutex pending_mu;
uintptr_t pending_ptr[kPendingMax];
int pending_dev[kPendingMax];
int pending_n = 0;

// take moves the queue into ptrs/devs (kPendingMax entries each) and
// returns how many there were.
int take(uintptr_t *ptrs, int *devs) {
  // Most calls find the queue empty: look before taking the lock. A free
  // queued concurrently may be missed; the next call takes it.
  if (__atomic_load_n(&pending_n, __ATOMIC_RELAXED) == 0) return 0;
  std::lock_guard<std::mutex> g(pending_mu);
  int n = pending_n;
  if (n > 0) {
    memcpy(ptrs, pending_ptr, n * sizeof ptrs[0]);
    memcpy(devs, pending_dev, n * sizeof devs[0]);
    __atomic_store_n(&pending_n, 0, __ATOMIC_RELAXED);
  }
  return n;
}

// flush hands the queue to Go.
void flush() {
  uintptr_t ptrs[kPendingMax];
  int devs[kPendingMax];
  int n = take(ptrs, devs);
  if (n > 0) vramGoFreeBatch(ptrs, devs, n);
}

// defer_free queues ptr; true when the queue was full (the caller flushes
// and queues again).
bool defer_free(uintptr_t ptr, int device) {
  std::lock_guard<std::mutex> g(pending_mu);
  if (pending_n == kPendingMax) return false;
  pending_ptr[pending_n] = ptr;
  pending_dev[pending_n] = device;
  __atomic_store_n(&pending_n, pending_n + 1, __ATOMIC_RELAXED);
  return true;
}

// With VRAM_CALL_PROFILE set (to anything) when the first allocation is
// made, the shim times every vram_malloc and vram_free (the time the
// framework's thread spends in them) and prints the totals to standard error
// at exit: how much of a job's time the allocator takes, measured from the
// framework's side of the call.
struct CallProfile {
  long long n = 0, ns = 0, max_ns = 0;
  void add(long long d) {
    __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&ns, d, __ATOMIC_RELAXED);
    if (d > __atomic_load_n(&max_ns, __ATOMIC_RELAXED)) __atomic_store_n(&max_ns, d, __ATOMIC_RELAXED);
  }
};
CallProfile prof_malloc, prof_free;
int profiling = -1;  // -1: not decided yet

long long now_ns() {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1000000000LL + t.tv_nsec;
}

void print_profile() {
  fprintf(stderr, "vram: call profile: vram_malloc %lld calls, %.3f ms in all, %.0f ns mean, %.0f us max; "
          "vram_free %lld calls, %.3f ms in all, %.0f ns mean, %.0f us max\n",
          prof_malloc.n, prof_malloc.ns / 1e6, prof_malloc.n ? (double)prof_malloc.ns / prof_malloc.n : 0.0,
          prof_malloc.max_ns / 1e3, prof_free.n, prof_free.ns / 1e6,
          prof_free.n ? (double)prof_free.ns / prof_free.n : 0.0, prof_free.max_ns / 1e3);
}

bool profile_on() {
  int p = __atomic_load_n(&profiling, __ATOMIC_RELAXED);
  if (p < 0) {
    p = getenv("VRAM_CALL_PROFILE") != nullptr;
    int unset = -1;
    if (__atomic_compare_exchange_n(&profiling, &unset, p, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED) && p)
      atexit(print_profile);
  }
  return p > 0;
}

void *malloc_impl(size_t size, int device, void *stream) {
  if (size == 0) return nullptr;
  if (forked) throw std::runtime_error(kForked);
  uintptr_t ptrs[kPendingMax];
  int devs[kPendingMax];
  int n = take(ptrs, devs);
  uintptr_t p = vramGoMallocAfterFrees(size, device, (uintptr_t)stream, ptrs, devs, n);
  if (p == 0) throw std::runtime_error(error_text());
  return (void *)p;
}

void free_impl(void *ptr, int device) {
  if (ptr == nullptr || forked) return;
  while (!defer_free((uintptr_t)ptr, device)) flush();
}

// The statistics channel's files (one per device), removed at exit: a Go
// library sees no exit, the C library runs this destructor at exit() and
// at dlclose. Only the process that made the files removes them: a forked
// child that exits runs destructors too.
pthread_mutex_t channel_mu = PTHREAD_MUTEX_INITIALIZER;
char *channel_paths[64];
pid_t channel_owner = 0;

__attribute__((destructor)) void remove_channel_files() {
  pthread_mutex_lock(&channel_mu);
  if (channel_owner == getpid()) {
    for (char *&p : channel_paths) {
      if (p != nullptr) {
        unlink(p);
        free(p);
        p = nullptr;
      }
    }
  }
  pthread_mutex_unlock(&channel_mu);
}

}  // namespace

extern "C" {

void vram_shim_set_error(char *msg, int oom) {
  free(last_error);
  last_error = msg;
  last_oom = oom;
}

void vram_shim_channel_add(char *path) {
  pthread_mutex_lock(&channel_mu);
  channel_owner = getpid();
  for (char *&p : channel_paths) {
    if (p == nullptr) {
      p = path;
      path = nullptr;
      break;
    }
  }
  pthread_mutex_unlock(&channel_mu);
  free(path);  // no room: more files than devices, which cannot happen
}

void vram_shim_channel_forget(const char *path) {
  pthread_mutex_lock(&channel_mu);
  for (char *&p : channel_paths) {
    if (p != nullptr && strcmp(p, path) == 0) {
      free(p);
      p = nullptr;
    }
  }
  pthread_mutex_unlock(&channel_mu);
}

const char *vram_last_error(void) { return last_error ? last_error : ""; }
int vram_last_error_is_oom(void) { return last_oom; }
void vram_string_free(char *s) { free(s); }

void *vram_malloc(size_t size, int device, void *stream) {
  if (!profile_on()) return malloc_impl(size, device, stream);
  long long t0 = now_ns();
  try {
    void *p = malloc_impl(size, device, stream);
    prof_malloc.add(now_ns() - t0);
    return p;
  } catch (...) {
    prof_malloc.add(now_ns() - t0);
    throw;
  }
}

void vram_free(void *ptr, size_t size, int device, void *stream) {
  (void)size;
  (void)stream;
  if (!profile_on()) return free_impl(ptr, device);
  long long t0 = now_ns();
  free_impl(ptr, device);
  prof_free.add(now_ns() - t0);
}

void vram_init(int device_count) {
  (void)device_count;  // allocators are created per device on first use
}

void vram_reset(void) {
  if (forked) return;
  flush();
  vramGoEmptyCache(-1);
}

void vram_set_memory_fraction(double fraction, int device) {
  if (forked) return;
  flush();
  if (vramGoSetFraction(device, fraction) != 0) throw std::runtime_error(error_text());
}

void vram_record_stream(void *ptr, void *stream) {
  if (ptr == nullptr || forked) return;
  flush();
  if (vramGoRecordStream((uintptr_t)ptr, -1, (uintptr_t)stream) != 0) throw std::runtime_error(error_text());
}

intptr_t vram_cupy_malloc(intptr_t param, size_t size, int device) {
  (void)param;
  return (intptr_t)vram_try_malloc(size, device, nullptr);
}

void vram_cupy_free(intptr_t param, intptr_t ptr, int device) {
  (void)param;
  if (ptr == 0 || forked) return;
  vramGoFree((uintptr_t)ptr, device, 1);
}

void *vram_try_malloc(size_t size, int device, void *stream) {
  if (size == 0) return nullptr;
  if (forked) {
    set_error_copy(kForked, 0);
    return nullptr;
  }
  flush();
  return (void *)vramGoMalloc(size, device, (uintptr_t)stream);
}

int vram_try_free(void *ptr, int device) {
  if (forked) return 0;
  if (ptr == nullptr) return 0;
  flush();
  return vramGoFree((uintptr_t)ptr, device, 0);
}

int vram_try_record_stream(void *ptr, int device, void *stream) {
  if (forked) {
    set_error_copy(kForked, 0);
    return -1;
  }
  flush();
  return vramGoRecordStream((uintptr_t)ptr, device, (uintptr_t)stream);
}

// VRAM_GUARD refuses in a forked child and hands the queued frees to Go.
#define VRAM_GUARD(fail)          \
  if (forked) {                   \
    set_error_copy(kForked, 0);   \
    return fail;                  \
  }                               \
  flush();

int vram_configure(const char *conf) {
  VRAM_GUARD(-1);
  return vramGoConfigure((char *)(conf ? conf : ""));
}
char *vram_config(void) { VRAM_GUARD(nullptr); return vramGoConfig(); }
int vram_set_fraction(int device, double fraction) { VRAM_GUARD(-1); return vramGoSetFraction(device, fraction); }
int vram_set_limit(int device, uint64_t bytes) { VRAM_GUARD(-1); return vramGoSetLimit(device, bytes); }
char *vram_stats_json(int device) { VRAM_GUARD(nullptr); return vramGoStatsJSON(device); }
char *vram_summary(int device) { VRAM_GUARD(nullptr); return vramGoSummary(device); }
char *vram_snapshot_json(void) { VRAM_GUARD(nullptr); return vramGoSnapshotJSON(); }
int vram_empty_cache(int device) { VRAM_GUARD(-1); return vramGoEmptyCache(device); }
int vram_reset_peak_stats(int device) { VRAM_GUARD(-1); return vramGoResetPeak(device); }
int vram_reset_accumulated_stats(int device) { VRAM_GUARD(-1); return vramGoResetAccumulated(device); }
char *vram_info_json(void) { VRAM_GUARD(nullptr); return vramGoInfoJSON(); }

}  // extern "C"

// ---- DLPack (cmd/libvram/dlpack.go) ----

extern "C" {

void *vram_dlpack_empty(const int64_t *shape, int ndim, int code, int bits, int lanes, int device) {
  VRAM_GUARD(nullptr);
  return vramGoDLPackEmpty((int64_t *)shape, ndim, code, bits, lanes, device);
}

void *vram_dlpack_share(void *tensor, int legacy) {
  VRAM_GUARD(nullptr);
  return vramGoDLPackShare(tensor, legacy);
}

void *vram_dlpack_import(void *tensor, int legacy, int device) {
  VRAM_GUARD(nullptr);
  return vramGoDLPackImport(tensor, legacy, device);
}

int vram_dlpack_copy(void *tensor, void *host, size_t n, int to_host) {
  VRAM_GUARD(-1);
  return vramGoDLPackCopy(tensor, host, n, to_host);
}

void vram_dlpack_delete(void *tensor, int legacy) {
  if (tensor == nullptr) return;
  if (legacy) {
    auto *m = (vram_DLManagedTensor *)tensor;
    if (m->deleter != nullptr) m->deleter(m);
  } else {
    auto *m = (vram_DLManagedTensorVersioned *)tensor;
    if (m->deleter != nullptr) m->deleter(m);
  }
}

}  // extern "C"
