/* dlpack.h: the C layouts of the DLPack exchange format (version 1.x) as
 * package dlpack uses them, and its trampolines (trampoline.c). The struct
 * layouts follow the DLPack specification (dlpack.h of dmlc/dlpack); the
 * package's tests compare them with the Go declarations field by field. */
#ifndef VRAM_DLPACK_H
#define VRAM_DLPACK_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
  int32_t device_type;
  int32_t device_id;
} vram_DLDevice;

typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} vram_DLDataType;

typedef struct {
  void *data;
  vram_DLDevice device;
  int32_t ndim;
  vram_DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} vram_DLTensor;

typedef struct vram_DLManagedTensor {
  vram_DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct vram_DLManagedTensor *self);
} vram_DLManagedTensor;

typedef struct {
  uint32_t major;
  uint32_t minor;
} vram_DLPackVersion;

typedef struct vram_DLManagedTensorVersioned {
  vram_DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct vram_DLManagedTensorVersioned *self);
  uint64_t flags;
  vram_DLTensor dl_tensor;
} vram_DLManagedTensorVersioned;

/* The deleters of the tensors package dlpack exports. */
void vram_dlpack_delete_versioned(vram_DLManagedTensorVersioned *self);
void vram_dlpack_delete_legacy(vram_DLManagedTensor *self);
/* Calls a producer's deleter fn on self (either kind). */
void vram_dlpack_call_deleter(void *fn, void *self);
/* Offsets and sizes as the C compiler lays them out, for the layout test:
 * fills out[0..n) and returns how many it wrote. */
int vram_dlpack_layout(size_t *out, int n);
#endif
