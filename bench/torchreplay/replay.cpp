// replay: drive PyTorch's CUDA caching allocator (or plain cudaMalloc and
// cudaFree) natively with an allocation trace in RMM's CSV log format, time
// every operation on the host and print one JSON object shaped like
// `vram replay --json`, so that both run side by side on the same trace.
//
// Usage: replay TRACE.csv [--mode caching|cudamalloc] [--verify] [--driver-calls] [--device N]
//
// The trace must be plain CSV (build.sh's run step gunzips it first):
//   Thread,Time,Action,Pointer,Size,Stream
// with actions "allocate", "allocate failure" (skipped) and "free". Pointers
// only pair a free with its allocation. Every record runs on the current
// (default) stream; records naming another stream are counted.
//
// caching mode calls c10::cuda::CUDACachingAllocator::init(device count) and
// then raw_alloc / raw_delete per record; PYTORCH_CUDA_ALLOC_CONF (for
// example expandable_segments:True) selects its mode as usual. Peaks and
// device allocation counts come from get()->getDeviceStats(device), read
// when the trace ends (before the teardown). Driver calls: in the default
// mode every segment is one cudaMalloc (num_device_alloc) and one cudaFree
// (num_device_free). With expandable segments PyTorch maps pages (2 MiB in
// the small pool, 20 MiB in the large one) with one cuMemCreate and one
// cuMemMap each and one cuMemSetAccess per growth, and unmaps them with
// one cuMemUnmap and one cuMemRelease each; the statistics give the bytes
// mapped and unmapped per pool (reserved_bytes[pool].allocated / .freed),
// from which "driver_calls_estimate" counts 2 calls per page mapped or
// unmapped plus num_device_alloc (one cuMemSetAccess per growth, if this
// version counts growths there: the raw figures are printed too).
// Address reservations (cuMemAddressReserve) are not in the estimate.
// With --driver-calls, and built with CUPTI (build.sh, when it finds
// cupti.h), "driver_calls" holds the exact counts by kind of the driver
// calls made during the replay loop (cupti_count.h), the figure to set
// beside vram's device_calls_by_kind (same key names), and
// "driver_calls_teardown" those of the teardown after it;
// "driver_calls_error" says why they are null. CUPTI's callbacks cost time
// on every driver call, so take the timings from a run without
// --driver-calls.
// cudamalloc mode calls cudaMalloc / cudaFree per record; its reserved peak
// is the device's used memory (cudaMemGetInfo) at the live peak minus the
// used memory at the start, read outside the timed region.
//
// --verify writes a byte pattern over every allocation (cudaMemset) and
// checks its first and last bytes (cudaMemcpy) before the free, outside the
// timed region; a mismatch is counted and makes the exit status 1.
//
// After the trace, what is still live is freed and the cache emptied
// (caching mode); then the device check says whether all device memory
// went back ("device_check" names the method):
//
//   "free_memory" (without --driver-calls): the device's free memory
//   before the first allocation minus after the teardown is
//   "device_leaked_bytes" when positive (0 when all memory went back;
//   other processes on the GPU move it too, and memory they freed, a
//   negative difference, is not counted as a leak).
//
//   "driver_calls" (with --driver-calls, when CUPTI counts): CUPTI holds
//   device memory of its own, taken when it attaches and later, lazily, in
//   sizes that vary from run to run (with CUPTI on, the free-memory check
//   found 400 MB missing after the first run on the H200 and 12-32 MB
//   after each later one, where runs without it found 0), and nothing
//   separates it from the allocator's in a free-memory figure, however
//   late the "before" reading is taken. So this mode does not compare
//   free memory
//   ("device_leaked_bytes" is null); it matches the allocator's own driver
//   calls instead, counted over the loop and the teardown:
//   "driver_unreleased" holds allocations (cuMemAlloc less cuMemFree),
//   handles (cuMemCreate less cuMemRelease), mappings (cuMemMap less
//   cuMemUnmap) and address ranges (cuMemAddressReserve less
//   cuMemAddressFree) never given back. Any of the first three above 0
//   is memory still held. This counts calls, not bytes, and only memory
//   obtained through those calls (all that PyTorch's allocator uses).
//
// "device_free_delta_bytes" is the signed free-memory difference in both
// modes (in the second it shows CUPTI's own memory). The exit status is 1
// when verification found a bad byte, an allocation ran out of memory, or
// the device check found memory not given back.

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <cuda_runtime_api.h>

#include "cupti_count.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Record {
  enum Kind { kAlloc, kFree, kFailure } kind;
  uint64_t ptr;
  uint64_t size;
  uint64_t stream;
};

[[noreturn]] void die(const std::string& msg) {
  std::cerr << "replay: " << msg << "\n";
  std::exit(2);
}

void checkCuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) die(std::string(what) + ": " + cudaGetErrorString(err));
}

// readTrace parses the CSV log; a malformed line names its line number.
std::vector<Record> readTrace(const std::string& path) {
  std::ifstream in(path);
  if (!in) die("cannot open " + path);
  std::vector<Record> out;
  std::string line;
  size_t lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1 && line.rfind("Thread,", 0) == 0) continue;
    if (line.empty()) continue;
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string field;
    while (std::getline(ss, field, ',')) f.push_back(field);
    if (f.size() != 6) die(path + ":" + std::to_string(lineno) + ": want 6 fields, got " + std::to_string(f.size()));
    Record r{};
    if (f[2] == "allocate") {
      r.kind = Record::kAlloc;
    } else if (f[2] == "free") {
      r.kind = Record::kFree;
    } else if (f[2] == "allocate failure") {
      r.kind = Record::kFailure;
    } else {
      die(path + ":" + std::to_string(lineno) + ": unknown action \"" + f[2] + "\"");
    }
    char* end = nullptr;
    r.ptr = std::strtoull(f[3].c_str(), &end, 16);
    if (r.kind != Record::kFailure && (end == f[3].c_str() || *end != '\0'))
      die(path + ":" + std::to_string(lineno) + ": bad pointer \"" + f[3] + "\"");
    r.size = std::strtoull(f[4].c_str(), &end, 10);
    if (end == f[4].c_str() || *end != '\0') die(path + ":" + std::to_string(lineno) + ": bad size \"" + f[4] + "\"");
    r.stream = std::strtoull(f[5].c_str(), &end, 0);
    out.push_back(r);
  }
  return out;
}

// emptyCache calls the allocator's emptyCache() where it can be called
// without arguments (its signature changed between PyTorch versions) and
// reports whether it did.
template <typename A>
auto emptyCacheOf(A* a, int) -> decltype(a->emptyCache(), bool()) {
  a->emptyCache();
  return true;
}
template <typename A>
bool emptyCacheOf(A*, long) {
  return false;
}

int64_t percentile(std::vector<int64_t>& v, double q) {
  if (v.empty()) return 0;
  size_t k = static_cast<size_t>(q * static_cast<double>(v.size() - 1));
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
  return v[k];
}

// timerOverhead is the median cost of an empty steady_clock pair.
int64_t timerOverhead() {
  std::vector<int64_t> s(100000);
  for (auto& x : s) {
    auto t0 = Clock::now();
    auto t1 = Clock::now();
    x = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
  }
  return percentile(s, 0.5);
}

uint8_t patternOf(uint64_t n) { return static_cast<uint8_t>(0x5A ^ (n * 131)); }

std::string jsonString(const char* s) {
  if (s == nullptr) return "null";
  std::string out = "\"";
  for (const char* p = s; *p; ++p) {
    if (*p == '"' || *p == '\\') out += '\\';
    out += *p;
  }
  return out + "\"";
}

}  // namespace

int main(int argc, char** argv) {
  std::string path, mode = "caching";
  bool verify = false, countCalls = false;
  int device = 0;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--mode" && i + 1 < argc) {
      mode = argv[++i];
    } else if (a == "--verify") {
      verify = true;
    } else if (a == "--driver-calls") {
      countCalls = true;
    } else if (a == "--device" && i + 1 < argc) {
      device = std::atoi(argv[++i]);
    } else if (!a.empty() && a[0] != '-' && path.empty()) {
      path = a;
    } else {
      die("usage: replay TRACE.csv [--mode caching|cudamalloc] [--verify] [--driver-calls] [--device N]");
    }
  }
  if (path.empty()) die("usage: replay TRACE.csv [--mode caching|cudamalloc] [--verify] [--driver-calls] [--device N]");
  if (mode != "caching" && mode != "cudamalloc") die("unknown --mode \"" + mode + "\" (caching or cudamalloc)");
  const bool caching = mode == "caching";

  std::vector<Record> trace = readTrace(path);
  checkCuda(cudaSetDevice(device), "cudaSetDevice");
  checkCuda(cudaFree(nullptr), "creating the context");
  int count = 0;
  checkCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  if (caching) c10::cuda::CUDACachingAllocator::init(count);
  size_t free0 = 0, total = 0;
  checkCuda(cudaMemGetInfo(&free0, &total), "cudaMemGetInfo");

  const int64_t overhead = timerOverhead();
  std::vector<int64_t> ns;
  ns.reserve(trace.size());
  struct Live {
    void* p;
    uint64_t size;
    uint8_t pattern;
  };
  std::unordered_map<uint64_t, Live> live;  // by trace pointer
  uint64_t liveBytes = 0, peakLive = 0, peakUsedDelta = 0;
  int64_t allocs = 0, frees = 0, failures = 0, unknownFrees = 0, reused = 0, otherStreams = 0, verifyErrors = 0;
  int64_t oomRecord = -1, n = 0;
  std::string oomWhat;
  const std::string cuptiError = countCalls ? cuptiCount::start() : "not asked for (--driver-calls)";
  auto start = Clock::now();

  for (const Record& r : trace) {
    ++n;
    if (r.stream != 0) ++otherStreams;
    if (r.kind == Record::kFailure) {
      ++failures;
      continue;
    }
    if (r.kind == Record::kAlloc) {
      if (live.count(r.ptr)) ++reused;  // the earlier allocation stays live (leaked)
      void* p = nullptr;
      auto t0 = Clock::now();
      try {
        if (caching) {
          p = c10::cuda::CUDACachingAllocator::raw_alloc(r.size);
        } else if (cudaMalloc(&p, r.size) != cudaSuccess) {
          p = nullptr;
        }
      } catch (const c10::Error& e) {
        oomWhat = e.what_without_backtrace();
        p = nullptr;
      }
      auto t1 = Clock::now();
      if (p == nullptr && r.size > 0) {
        if (oomWhat.empty()) oomWhat = cudaGetErrorString(cudaGetLastError());
        oomRecord = n;
        break;
      }
      ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      ++allocs;
      const uint8_t pat = patternOf(static_cast<uint64_t>(allocs));
      live[r.ptr] = Live{p, r.size, pat};
      liveBytes += r.size;
      if (liveBytes > peakLive) {
        peakLive = liveBytes;
        if (!caching) {
          size_t f = 0, t = 0;
          checkCuda(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
          peakUsedDelta = std::max<uint64_t>(peakUsedDelta, free0 > f ? free0 - f : 0);
        }
      }
      if (verify && r.size > 0) checkCuda(cudaMemset(p, pat, r.size), "cudaMemset");
      continue;
    }
    auto it = live.find(r.ptr);
    if (it == live.end()) {
      ++unknownFrees;
      continue;
    }
    void* p = it->second.p;
    const uint64_t size = it->second.size;
    if (verify && size > 0) {
      const uint8_t want = it->second.pattern;
      uint8_t got[8];
      size_t k = std::min<uint64_t>(size, sizeof got);
      checkCuda(cudaMemcpy(got, p, k, cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (size_t j = 0; j < k; ++j) verifyErrors += got[j] != want;
      checkCuda(cudaMemcpy(got, static_cast<char*>(p) + size - k, k, cudaMemcpyDeviceToHost), "cudaMemcpy");
      for (size_t j = 0; j < k; ++j) verifyErrors += got[j] != want;
    }
    auto t0 = Clock::now();
    if (caching) {
      c10::cuda::CUDACachingAllocator::raw_delete(p);
    } else {
      checkCuda(cudaFree(p), "cudaFree");
    }
    auto t1 = Clock::now();
    ns.push_back(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
    ++frees;
    liveBytes -= size;
    live.erase(it);
  }
  checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  cuptiCount::teardown();

  for (auto& x : ns) x = std::max<int64_t>(0, x - overhead);
  std::vector<int64_t> sorted = ns;
  int64_t p50 = percentile(sorted, 0.50), p99 = percentile(sorted, 0.99);
  int64_t maxNs = sorted.empty() ? 0 : *std::max_element(sorted.begin(), sorted.end());

  int64_t peakReserved = static_cast<int64_t>(peakUsedDelta), peakAllocated = -1, peakRequested = -1;
  int64_t numDeviceAlloc = allocs, numDeviceFree = frees;
  // Bytes mapped (allocated) and unmapped (freed) per pool: 1 small, 2 large.
  int64_t mapped[3] = {0, 0, 0}, unmapped[3] = {0, 0, 0};
  int64_t callsEstimate = allocs + frees;  // cudamalloc: one call per op
  const bool expandable = caching && std::getenv("PYTORCH_CUDA_ALLOC_CONF") != nullptr &&
                          std::strstr(std::getenv("PYTORCH_CUDA_ALLOC_CONF"), "expandable_segments:True") != nullptr;
  if (caching) {
    auto st = c10::cuda::CUDACachingAllocator::get()->getDeviceStats(static_cast<c10::DeviceIndex>(device));
    peakReserved = st.reserved_bytes[0].peak;  // index 0: all pools
    peakAllocated = st.allocated_bytes[0].peak;
    peakRequested = st.requested_bytes[0].peak;
    numDeviceAlloc = st.num_device_alloc;
    numDeviceFree = st.num_device_free;
    for (int i = 0; i < 3; ++i) {
      mapped[i] = st.reserved_bytes[i].allocated;
      unmapped[i] = st.reserved_bytes[i].freed;
    }
    if (expandable) {
      const int64_t small = 2 << 20, large = 20 << 20;
      int64_t pages = (mapped[1] + unmapped[1]) / small + (mapped[2] + unmapped[2]) / large;
      callsEstimate = 2 * pages + numDeviceAlloc;
    } else {
      callsEstimate = numDeviceAlloc + numDeviceFree;
    }
  }
  int64_t leaked = static_cast<int64_t>(live.size());
  for (auto& kv : live) {
    if (caching) {
      c10::cuda::CUDACachingAllocator::raw_delete(kv.second.p);
    } else {
      cudaFree(kv.second.p);
    }
  }
  live.clear();
  bool emptied = false;
  if (caching) emptied = emptyCacheOf(c10::cuda::CUDACachingAllocator::get(), 0);
  checkCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  cuptiCount::stop();
  size_t free1 = 0;
  checkCuda(cudaMemGetInfo(&free1, &total), "cudaMemGetInfo");
  const int64_t freeDelta = static_cast<int64_t>(free0) - static_cast<int64_t>(free1);
  // The device check (see the top of this file).
  const bool byCalls = cuptiCount::active();
  const cuptiCount::Unreleased un = cuptiCount::unreleased();
  const bool deviceLeak = byCalls ? un.leak() : freeDelta > 0;
  std::string leakedJson = byCalls ? "null" : std::to_string(std::max<int64_t>(freeDelta, 0));
  std::string unreleasedJson = "null";
  if (byCalls) {
    unreleasedJson = "{\"allocations\":" + std::to_string(un.allocations) + ",\"handles\":" + std::to_string(un.handles) +
                     ",\"mappings\":" + std::to_string(un.mappings) +
                     ",\"address_ranges\":" + std::to_string(un.addressRanges) + "}";
  }

  std::printf(
      "{\"trace\":%s,\"mode\":%s,\"alloc_conf\":%s,\"records\":%zu,\"ops\":%lld,\"allocs\":%lld,"
      "\"frees\":%lld,\"skipped_failures\":%lld,\"unknown_frees\":%lld,\"reused_pointers\":%lld,"
      "\"other_stream_records\":%lld,\"leaked_allocs\":%lld,\"peak_live_bytes\":%llu,"
      "\"peak_reserved_bytes\":%lld,\"peak_allocated_bytes\":%lld,\"reserved_over_live\":%.4f,"
      "\"num_device_alloc\":%lld,\"num_device_free\":%lld,\"ns_per_op_p50\":%lld,\"ns_per_op_p99\":%lld,"
      "\"ns_per_op_max\":%lld,\"timer_overhead_ns\":%lld,\"total_seconds\":%.6f,\"verify\":%s,"
      "\"verify_errors\":%lld,\"oom_record\":%lld,\"oom\":%s,\"peak_requested_bytes\":%lld,"
      "\"mapped_bytes_small\":%lld,\"mapped_bytes_large\":%lld,\"unmapped_bytes_small\":%lld,"
      "\"unmapped_bytes_large\":%lld,\"expandable\":%s,\"driver_calls_estimate\":%lld,"
      "\"empty_cache\":%s,\"device_check\":%s,\"device_leaked_bytes\":%s,\"device_free_delta_bytes\":%lld,"
      "\"driver_unreleased\":%s,\"driver_calls\":%s,\"driver_calls_teardown\":%s,\"driver_calls_error\":%s}\n",
      jsonString(path.c_str()).c_str(), jsonString(mode.c_str()).c_str(),
      jsonString(std::getenv("PYTORCH_CUDA_ALLOC_CONF")).c_str(), trace.size(), static_cast<long long>(allocs + frees),
      static_cast<long long>(allocs), static_cast<long long>(frees), static_cast<long long>(failures),
      static_cast<long long>(unknownFrees), static_cast<long long>(reused), static_cast<long long>(otherStreams),
      static_cast<long long>(leaked), static_cast<unsigned long long>(peakLive), static_cast<long long>(peakReserved),
      static_cast<long long>(peakAllocated), peakLive ? static_cast<double>(peakReserved) / static_cast<double>(peakLive) : 0.0,
      static_cast<long long>(numDeviceAlloc), static_cast<long long>(numDeviceFree), static_cast<long long>(p50),
      static_cast<long long>(p99), static_cast<long long>(maxNs), static_cast<long long>(overhead), seconds,
      verify ? "true" : "false", static_cast<long long>(verifyErrors), static_cast<long long>(oomRecord),
      jsonString(oomWhat.empty() ? nullptr : oomWhat.c_str()).c_str(), static_cast<long long>(peakRequested),
      static_cast<long long>(mapped[1]), static_cast<long long>(mapped[2]), static_cast<long long>(unmapped[1]),
      static_cast<long long>(unmapped[2]), expandable ? "true" : "false", static_cast<long long>(callsEstimate),
      emptied ? "true" : "false", jsonString(byCalls ? "driver_calls" : "free_memory").c_str(), leakedJson.c_str(),
      static_cast<long long>(freeDelta), unreleasedJson.c_str(), cuptiCount::json(0).c_str(), cuptiCount::json(1).c_str(),
      jsonString(cuptiError.empty() ? nullptr : cuptiError.c_str()).c_str());
  if (deviceLeak) {
    if (byCalls) {
      std::fprintf(stderr, "replay: device memory not given back: %lld allocations, %lld handles, %lld mappings\n",
                   static_cast<long long>(un.allocations), static_cast<long long>(un.handles),
                   static_cast<long long>(un.mappings));
    } else {
      std::fprintf(stderr, "replay: the device had %lld bytes less free memory after the run than before it\n",
                   static_cast<long long>(freeDelta));
    }
  }
  return verifyErrors > 0 || oomRecord >= 0 || deviceLeak ? 1 : 0;
}
