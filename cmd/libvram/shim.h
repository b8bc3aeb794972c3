/* shim.h: what the Go side of libvram calls in its C++ shim (shim.cc). */
#ifndef VRAM_SHIM_H
#define VRAM_SHIM_H
#include <stddef.h>
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif
/* Takes ownership of msg (malloc'd) as the calling thread's last error. */
void vram_shim_set_error(char *msg, int oom);
#ifdef __cplusplus
}
#endif
#endif
