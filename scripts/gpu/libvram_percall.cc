// The cost of one allocation call through libvram's pluggable pair
// (vram_malloc / vram_free: one C-to-Go call each) beside PyTorch's own
// caching allocator called natively (c10::cuda::CUDACachingAllocator
// raw_alloc / raw_delete), on the cached path, in one process, one run:
//
//   libvram_percall LIBVRAM_SO [PAIRS]
//
// For each size: PAIRS allocate+free pairs (the block is reused every time),
// then a ring of 64 live allocations of mixed sizes. Each figure is the
// median over batches of 10,000 of the time per pair, in ns.
#include <c10/cuda/CUDACachingAllocator.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace c10alloc = c10::cuda::CUDACachingAllocator;

using MallocFn = void *(*)(size_t, int, void *);
using FreeFn = void (*)(void *, size_t, int, void *);

static inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

template <class A, class F>
static double median_pair_ns(size_t pairs, A alloc, F release, size_t size) {
  const size_t batch = 10000;
  std::vector<double> per;
  for (size_t done = 0; done < pairs; done += batch) {
    long long t0 = now_ns();
    for (size_t i = 0; i < batch; i++) {
      void *p = alloc(size);
      release(p, size);
    }
    per.push_back((double)(now_ns() - t0) / batch);
  }
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

template <class A, class F>
static double median_ring_ns(size_t pairs, A alloc, F release) {
  const size_t W = 64, batch = 10000;
  std::vector<void *> ring(W, nullptr);
  std::vector<size_t> rsize(W, 0);
  static const size_t sizes[] = {512, 4096, 65536, 1 << 20, 3 << 20, 512, 8192, 12 << 20};
  std::vector<double> per;
  size_t k = 0;
  for (size_t done = 0; done < pairs; done += batch) {
    long long t0 = now_ns();
    for (size_t i = 0; i < batch; i++, k++) {
      size_t slot = k % W;
      if (ring[slot]) release(ring[slot], rsize[slot]);
      rsize[slot] = sizes[(k * 7) % 8];
      ring[slot] = alloc(rsize[slot]);
    }
    per.push_back((double)(now_ns() - t0) / batch);
  }
  for (size_t s = 0; s < W; s++)
    if (ring[s]) release(ring[s], rsize[s]);
  std::sort(per.begin(), per.end());
  return per[per.size() / 2];
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s LIBVRAM_SO [PAIRS]\n", argv[0]);
    return 2;
  }
  size_t pairs = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 2000000;
  void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto vm = (MallocFn)dlsym(h, "vram_malloc");
  auto vf = (FreeFn)dlsym(h, "vram_free");
  c10alloc::init(1);
  auto t_alloc = [](size_t n) { return c10alloc::raw_alloc(n); };
  auto t_free = [](void *p, size_t) { c10alloc::raw_delete(p); };
  auto v_alloc = [vm](size_t n) { return vm(n, 0, nullptr); };
  auto v_free = [vf](void *p, size_t n) { vf(p, n, 0, nullptr); };
  std::printf("%-24s %14s %14s %8s\n", "pattern", "torch ns/pair", "vram ns/pair", "ratio");
  for (size_t size : {512ul, 65536ul, 2ul << 20, 64ul << 20}) {
    // warm up both
    median_pair_ns(100000, t_alloc, t_free, size);
    median_pair_ns(100000, v_alloc, v_free, size);
    double t = median_pair_ns(pairs, t_alloc, t_free, size);
    double v = median_pair_ns(pairs, v_alloc, v_free, size);
    char name[64];
    std::snprintf(name, sizeof name, "pair %zu B", size);
    std::printf("%-24s %14.1f %14.1f %8.2f\n", name, t, v, v / t);
  }
  median_ring_ns(200000, t_alloc, t_free);
  median_ring_ns(200000, v_alloc, v_free);
  double t = median_ring_ns(pairs, t_alloc, t_free);
  double v = median_ring_ns(pairs, v_alloc, v_free);
  std::printf("%-24s %14.1f %14.1f %8.2f\n", "ring of 64, mixed sizes", t, v, v / t);
  return 0;
}
