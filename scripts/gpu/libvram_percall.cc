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
//
// Then the same pair after a gap, as calls come inside training, where the
// framework launches kernels and waits for the GPU between allocations:
// before each pair the thread either busy-waits (spin, the caches left as
// they are) or walks a buffer (walk, 64 bytes apart, which evicts the
// allocators' data from the caches as the framework's own work does). The
// two allocators' pairs alternate, one of each after each gap, so both
// meet the same conditions; each pair is timed on its own (the clock's
// ~20 ns included in both) and the table gives the medians and p90s.
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

static inline void spin_ns(long long ns) {
  long long end = now_ns() + ns;
  while (now_ns() < end) {
  }
}

static std::vector<unsigned char> walk_buf;
static volatile unsigned walk_sink;

static inline void walk(size_t bytes) {
  unsigned acc = 0;
  for (size_t i = 0; i < bytes; i += 64) {
    walk_buf[i]++;
    acc += walk_buf[i];
  }
  walk_sink = acc;
}

struct Gap {
  long long spin;  // ns busy-waited, or
  size_t walk;     // bytes walked
};

template <class A, class F, class B, class G>
static void gap_row(const Gap &g, size_t n, size_t size, A ta, F tf, B va, G vf) {
  std::vector<long long> t(n), v(n);
  long long gap_total = 0;
  for (size_t i = 0; i < n; i++) {
    for (int who = 0; who < 2; who++) {
      long long g0 = now_ns();
      if (g.walk) walk(g.walk); else spin_ns(g.spin);
      long long t0 = now_ns();
      gap_total += t0 - g0;
      if (who == 0) {
        void *p = ta(size);
        tf(p, size);
      } else {
        void *p = va(size);
        vf(p, size);
      }
      (who == 0 ? t : v)[i] = now_ns() - t0;
    }
  }
  std::sort(t.begin(), t.end());
  std::sort(v.begin(), v.end());
  char name[64];
  if (g.walk)
    std::snprintf(name, sizeof name, "walk %zu KiB", g.walk >> 10);
  else
    std::snprintf(name, sizeof name, "spin %lld us", g.spin / 1000);
  std::printf("%-16s %9zu %10.1f %9lld %9lld %9lld %9lld %7.2f\n", name, size, gap_total / 2e3 / n, t[n / 2],
              t[n * 9 / 10], v[n / 2], v[n * 9 / 10], (double)v[n / 2] / t[n / 2]);
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

  std::printf("\nafter a gap (pairs alternate; ns per pair; gap us: the mean gap before each pair)\n");
  std::printf("%-16s %9s %10s %9s %9s %9s %9s %7s\n", "gap", "size", "gap us", "torch p50", "torch p90",
              "vram p50", "vram p90", "ratio");
  walk_buf.assign(32u << 20, 0);
  const Gap gaps[] = {{0, 0},      {5000, 0},         {20000, 0},      {100000, 0},
                      {500000, 0}, {0, 256u << 10},   {0, 4u << 20},   {0, 32u << 20}};
  for (size_t size : {65536ul, 4ul << 20}) {
    for (const Gap &g : gaps) {
      size_t n = g.spin >= 100000 || g.walk >= (4u << 20) ? 2000 : 20000;
      gap_row(g, n, size, t_alloc, t_free, v_alloc, v_free);
    }
  }
  return 0;
}
