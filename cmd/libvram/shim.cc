// The C entry points of libvram (vram.h). Each checks what must be checked
// before Go may run (a forked child), calls the Go side once, and turns a
// failure into what its caller expects: a C++ exception for PyTorch's
// pluggable allocator, a null pointer and a thread-local message for the
// others.

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <stdexcept>

#include "vram.h"
#include "shim.h"
extern "C" {
#include "_cgo_export.h"
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
  if (size == 0) return nullptr;
  if (forked) throw std::runtime_error(kForked);
  uintptr_t p = vramGoMalloc(size, device, (uintptr_t)stream);
  if (p == 0) throw std::runtime_error(error_text());
  return (void *)p;
}

void vram_free(void *ptr, size_t size, int device, void *stream) {
  (void)size;
  (void)stream;
  if (ptr == nullptr || forked) return;
  vramGoFree((uintptr_t)ptr, device, 1);
}

void vram_init(int device_count) {
  (void)device_count;  // allocators are created per device on first use
}

void vram_reset(void) {
  if (!forked) vramGoEmptyCache(-1);
}

void vram_set_memory_fraction(double fraction, int device) {
  if (!forked && vramGoSetFraction(device, fraction) != 0) throw std::runtime_error(error_text());
}

void vram_record_stream(void *ptr, void *stream) {
  if (ptr == nullptr || forked) return;
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
  return (void *)vramGoMalloc(size, device, (uintptr_t)stream);
}

int vram_try_free(void *ptr, int device) {
  if (forked) return 0;
  if (ptr == nullptr) return 0;
  return vramGoFree((uintptr_t)ptr, device, 0);
}

int vram_try_record_stream(void *ptr, int device, void *stream) {
  if (forked) {
    set_error_copy(kForked, 0);
    return -1;
  }
  return vramGoRecordStream((uintptr_t)ptr, device, (uintptr_t)stream);
}

#define VRAM_GUARD(fail)          \
  if (forked) {                   \
    set_error_copy(kForked, 0);   \
    return fail;                  \
  }

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
