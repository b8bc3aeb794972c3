// The loop of alloc's TestGPULatency (alloc/bench_gpu_test.go) driven
// through PyTorch's CUDA caching allocator natively, so both allocators are
// measured on the same sizes, the same access pattern, the same machine and
// the same clock (CLOCK_MONOTONIC through steady_clock, as Go's monotonic
// clock), in one run. scripts/gpu/alloc.sh builds and runs it:
//
//   alloc_torch SIZES_FILE [PAIRS]
//
// SIZES_FILE holds benchSizes, one per line (alloc.test -latency.sizes_out).
// A ring of 64 live allocations; each step frees the oldest and allocates
// the next size. Set PYTORCH_CUDA_ALLOC_CONF to measure other settings
// (expandable_segments:True).
#include <c10/cuda/CUDACachingAllocator.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

namespace alloc = c10::cuda::CUDACachingAllocator;

static inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

static void row(const char* name, std::vector<long long> v) {
  std::sort(v.begin(), v.end());
  auto at = [&](double q) { return v[(size_t)(q * (double)(v.size() - 1))]; };
  double sum = 0;
  for (long long x : v) sum += (double)x;
  std::printf("%-28s %9zu %8lld %8lld %8lld %9lld %10lld %9.1f\n", name, v.size(), at(0.50), at(0.90),
              at(0.99), at(0.999), v.back(), sum / (double)v.size());
}

static long long segments_allocated() {
  return alloc::get()->getDeviceStats(0).segment[0].allocated;  // index 0: both pools
}

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s SIZES_FILE [PAIRS]\n", argv[0]);
    return 2;
  }
  std::vector<size_t> sizes;
  std::ifstream in(argv[1]);
  for (size_t n; in >> n;) sizes.push_back(n);
  if (sizes.empty()) {
    std::fprintf(stderr, "%s: no sizes\n", argv[1]);
    return 2;
  }
  const size_t pairs = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 1000000;
  const char* conf = std::getenv("PYTORCH_CUDA_ALLOC_CONF");
  alloc::init(1);

  const size_t W = 64;
  std::vector<void*> ring(W, nullptr);
  auto step = [&](size_t i) {
    size_t slot = i % W;
    if (ring[slot]) alloc::raw_delete(ring[slot]);
    ring[slot] = alloc::raw_alloc(sizes[i % sizes.size()]);
  };
  // Warm until a whole pass over the sizes allocates no segment.
  int passes = 0;
  for (; passes < 20; passes++) {
    long long before = segments_allocated();
    for (size_t i = 0; i < sizes.size(); i++) step(i);
    if (passes > 0 && segments_allocated() == before) break;
  }

  std::vector<long long> empty(pairs), frees(pairs), mallocs(pairs);
  for (size_t i = 0; i < pairs; i++) {
    long long t0 = now_ns();
    empty[i] = now_ns() - t0;
  }
  long long seg0 = segments_allocated();
  long long start = now_ns();
  for (size_t i = 0; i < pairs; i++) {
    size_t slot = i % W;
    long long t0 = now_ns();
    alloc::raw_delete(ring[slot]);
    long long t1 = now_ns();
    ring[slot] = alloc::raw_alloc(sizes[i % sizes.size()]);
    long long t2 = now_ns();
    frees[i] = t1 - t0;
    mallocs[i] = t2 - t1;
  }
  long long loop = now_ns() - start;
  long long grown = segments_allocated() - seg0;
  long long plain = now_ns();
  for (size_t i = 0; i < pairs; i++) step(i);
  plain = now_ns() - plain;

  std::printf("PyTorch CUDACachingAllocator raw_alloc/raw_delete, PYTORCH_CUDA_ALLOC_CONF=%s; warm after %d passes; "
              "%lld segments allocated during the timed loop\n",
              conf ? conf : "", passes + 1, grown);
  std::printf("operation                            n   p50 ns   p90 ns   p99 ns  p99.9 ns     max ns   mean ns\n");
  row("empty (timer cost)", empty);
  row("torch raw_alloc", mallocs);
  row("torch raw_delete", frees);
  std::vector<long long> both(mallocs);
  both.insert(both.end(), frees.begin(), frees.end());
  row("torch, both", both);
  std::printf("torch loop: %.1f ns per operation with per-op clocks, %.1f ns without (%zu pairs)\n",
              (double)loop / (2.0 * (double)pairs), (double)plain / (2.0 * (double)pairs), pairs);
  for (void* p : ring) alloc::raw_delete(p);
  return 0;
}
