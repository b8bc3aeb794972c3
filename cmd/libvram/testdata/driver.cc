// driver.cc calls libvram as PyTorch's pluggable allocator does, from C++
// threads, and checks what comes back. It prints one line per check and
// exits non-zero on the first failure. Run with VRAM_DEVICE=sim and
// VRAM_ALLOC_CONF=max_bytes:64MiB.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "vram.h"

#define CHECK(cond, ...)                   \
  do {                                     \
    if (!(cond)) {                         \
      std::printf("FAIL: " __VA_ARGS__);   \
      std::printf("\n");                   \
      std::exit(1);                        \
    }                                      \
  } while (0)

static long long stat(const char *key, int device) {
  char *js = vram_stats_json(device);
  CHECK(js != nullptr, "stats: %s", vram_last_error());
  std::string s(js);
  vram_string_free(js);
  std::string k = std::string("\"") + key + "\":";
  size_t at = s.find(k);
  CHECK(at != std::string::npos, "stats lack %s", key);
  return std::atoll(s.c_str() + at + k.size());
}

int main() {
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  setenv("VRAM_DEVICE", "sim", 1);
  setenv("VRAM_ALLOC_CONF", "max_bytes:64MiB", 1);
  vram_init(1);
  void *p = vram_malloc(1 << 20, 0, nullptr);
  CHECK(p != nullptr, "1 MiB: null");
  CHECK(vram_malloc(0, 0, nullptr) == nullptr, "size 0: not null");
  std::printf("ok malloc\n");

  bool thrown = false;
  try {
    vram_malloc(100 << 20, 0, nullptr);
  } catch (const std::runtime_error &e) {
    thrown = std::strncmp(e.what(), "CUDA out of memory.", 19) == 0;
    CHECK(thrown, "out of memory: %s", e.what());
  }
  CHECK(thrown, "100 MiB under a 64 MiB cap: no exception");
  CHECK(stat("num_ooms", 0) == 1, "num_ooms %lld", stat("num_ooms", 0));
  std::printf("ok out of memory throws\n");

  vram_set_memory_fraction(0.5, 0);  // of 80 GiB: max_bytes stays lower
  thrown = false;
  try {
    vram_malloc(100 << 20, 0, nullptr);
  } catch (const std::runtime_error &) {
    thrown = true;
  }
  CHECK(thrown, "a memory fraction raised max_bytes");
  std::printf("ok fraction keeps the settings' cap\n");

  vram_record_stream(p, (void *)0x10);
  vram_free(p, 1 << 20, 0, nullptr);
  vram_reset();
  CHECK(stat("reserved_bytes.all.current", 0) == 0, "reserved after reset: %lld", stat("reserved_bytes.all.current", 0));
  std::printf("ok free, record_stream, reset\n");

  std::vector<std::thread> ts;
  for (int t = 0; t < 8; t++) {
    ts.emplace_back([t] {
      std::vector<void *> live;
      for (int i = 0; i < 5000; i++) {
        live.push_back(vram_malloc(512 * (1 + (i * 7 + t) % 64), 0, (void *)(uintptr_t)(t + 1)));
        if (live.size() > 16) {
          vram_free(live.front(), 0, 0, nullptr);
          live.erase(live.begin());
        }
      }
      for (void *q : live) vram_free(q, 0, 0, nullptr);
    });
  }
  for (auto &t : ts) t.join();
  CHECK(stat("allocated_bytes.all.current", 0) == 0, "allocated after threads: %lld", stat("allocated_bytes.all.current", 0));
  CHECK(stat("allocation.all.allocated", 0) == 40001, "allocations: %lld", stat("allocation.all.allocated", 0));
  std::printf("ok 8 threads\n");

  // vram_free queues; the next call that enters Go makes the frees first.
  void *a = vram_malloc(8192, 0, nullptr);
  vram_free(a, 8192, 0, nullptr);
  void *b = vram_malloc(8192, 0, nullptr);
  CHECK(a == b, "the block freed just before was not reused: %p then %p", a, b);
  vram_free(b, 8192, 0, nullptr);
  std::vector<void *> many;
  for (int i = 0; i < 1000; i++) many.push_back(vram_malloc(512 * (1 + i % 9), 0, nullptr));
  for (void *q : many) vram_free(q, 0, 0, nullptr);  // more than the queue holds
  CHECK(stat("allocated_bytes.all.current", 0) == 0, "allocated after queued frees: %lld", stat("allocated_bytes.all.current", 0));
  CHECK(stat("allocation.all.freed", 0) == stat("allocation.all.allocated", 0), "freed %lld of %lld",
        stat("allocation.all.freed", 0), stat("allocation.all.allocated", 0));
  std::printf("ok queued frees\n");

  void *kept = vram_malloc(4096, 0, nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    int rc = 0;
    try {
      vram_malloc(4096, 0, nullptr);
      rc = 2;
    } catch (const std::runtime_error &e) {
      rc = std::strstr(e.what(), "forked") ? 0 : 3;
    }
    vram_free(kept, 4096, 0, nullptr);  // ignored in the child
    if (vram_stats_json(0) != nullptr) rc = 4;
    _exit(rc);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: status %d", st);
  CHECK(stat("allocated_bytes.all.current", 0) == 4096, "parent after fork: %lld", stat("allocated_bytes.all.current", 0));
  vram_free(kept, 4096, 0, nullptr);
  std::printf("ok fork\n");

  // The statistics channel (VRAM_CHANNEL_DIR, set by the test): the file
  // is there, 0600, and a forked child that exits normally (running the
  // library's destructors) leaves it alone.
  if (const char *dir = std::getenv("VRAM_CHANNEL_DIR")) {
    std::string path = std::string(dir) + "/vram-stats." + std::to_string(getpid()) + ".0";
    struct stat sb;
    CHECK(::stat(path.c_str(), &sb) == 0, "no channel file %s", path.c_str());
    CHECK((sb.st_mode & 0777) == 0600 && sb.st_size == 512, "channel file mode %o size %lld", sb.st_mode & 0777, (long long)sb.st_size);
    pid_t child = fork();
    if (child == 0) std::exit(0);
    waitpid(child, &st, 0);
    CHECK(::stat(path.c_str(), &sb) == 0, "a forked child's exit removed the parent's channel file");
    std::printf("ok channel\n");
  }

  CHECK(vram_try_free((void *)0x1234, 0) == -1, "free of an unknown pointer succeeded");
  CHECK(std::strstr(vram_last_error(), "0x1234") != nullptr, "error: %s", vram_last_error());
  CHECK(vram_configure("max_bytes:1GiB") == -1, "configure after the first allocation succeeded");
  std::printf("ok errors\n");
  return 0;
}
