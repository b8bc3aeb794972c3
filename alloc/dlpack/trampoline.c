// The C side of package dlpack: the deleters a consumer calls, which hand
// the tensor to Go, and the call of a producer's deleter.

#include <pthread.h>

#include "dlpack.h"
#include "_cgo_export.h"

// In a child made by fork the Go runtime has lost its threads: a deleter
// called there must not enter Go. It does nothing (the parent owns the
// memory).
static volatile int forked = 0;
static void on_fork_child(void) { forked = 1; }
__attribute__((constructor)) static void register_fork_handler(void) {
  pthread_atfork(NULL, NULL, on_fork_child);
}

void vram_dlpack_delete_versioned(vram_DLManagedTensorVersioned *self) {
  if (self != NULL && !forked) vramDLPackDeleted(self, (uintptr_t)self->manager_ctx);
}

void vram_dlpack_delete_legacy(vram_DLManagedTensor *self) {
  if (self != NULL && !forked) vramDLPackDeleted(self, (uintptr_t)self->manager_ctx);
}

void vram_dlpack_call_deleter(void *fn, void *self) {
  ((void (*)(void *))fn)(self);
}

int vram_dlpack_layout(size_t *out, int n) {
  size_t v[] = {
      sizeof(vram_DLDevice),
      sizeof(vram_DLDataType),
      sizeof(vram_DLTensor),
      offsetof(vram_DLTensor, data),
      offsetof(vram_DLTensor, device),
      offsetof(vram_DLTensor, ndim),
      offsetof(vram_DLTensor, dtype),
      offsetof(vram_DLTensor, shape),
      offsetof(vram_DLTensor, strides),
      offsetof(vram_DLTensor, byte_offset),
      sizeof(vram_DLManagedTensor),
      offsetof(vram_DLManagedTensor, dl_tensor),
      offsetof(vram_DLManagedTensor, manager_ctx),
      offsetof(vram_DLManagedTensor, deleter),
      sizeof(vram_DLManagedTensorVersioned),
      offsetof(vram_DLManagedTensorVersioned, version),
      offsetof(vram_DLManagedTensorVersioned, manager_ctx),
      offsetof(vram_DLManagedTensorVersioned, deleter),
      offsetof(vram_DLManagedTensorVersioned, flags),
      offsetof(vram_DLManagedTensorVersioned, dl_tensor),
  };
  int k = (int)(sizeof v / sizeof v[0]);
  if (n < k) k = n;
  for (int i = 0; i < k; i++) out[i] = v[i];
  return k;
}
