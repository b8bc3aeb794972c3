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
/* Records path (malloc'd; taken) as a statistics channel file to remove at
 * exit, and forgets one (removed by Go). */
void vram_shim_channel_add(char *path);
void vram_shim_channel_forget(const char *path);
#ifdef __cplusplus
}
#endif
#endif
