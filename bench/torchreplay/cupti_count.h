// cupti_count.h: exact driver-call counts for the replay harness, by kind,
// through CUPTI's callback API (the driver API domain: every call into
// libcuda, those PyTorch makes through cudaGetDriverEntryPoint included).
// Compiled in only with -DVRAM_CUPTI (build.sh adds it when it finds
// cupti.h); without it every count is -1 and "driver_calls" is null.
//
// Counted: calls that returned CUDA_SUCCESS of cuMemCreate, cuMemMap,
// cuMemUnmap, cuMemRelease, cuMemSetAccess, cuMemAddressReserve,
// cuMemAddressFree, cuMemAlloc and cuMemFree (every version of each), plus
// the runtime's cudaMalloc and cudaFree from the runtime domain, so that it
// shows whether the runtime's own calls reach the driver domain too. The
// counts are kept in two phases: the replay loop (start() to teardown()),
// which is the figure set beside vram's, and the teardown after it
// (teardown() to stop(): what the trace left live freed, the cache
// emptied), so that over both phases every piece of device memory the
// allocator obtained can be matched with the call that gave it back
// (unreleased()). CUPTI's own device memory is not obtained through these
// API entry points and does not show in the counts.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace cuptiCount {

enum Kind { kCreate, kMap, kUnmap, kRelease, kSetAccess, kReserve, kAddressFree, kMalloc, kFree, kRtMalloc, kRtFree, kKinds };
constexpr const char* kNames[kKinds] = {"create", "map", "unmap", "release", "set_access", "reserve",
                                        "address_free", "malloc", "free", "runtime_cudaMalloc", "runtime_cudaFree"};

#ifdef VRAM_CUPTI
}  // namespace cuptiCount
#include <cupti.h>
namespace cuptiCount {

enum Phase { kTrace, kTeardown, kPhases };
inline int64_t counts[kPhases][kKinds];
inline int phase = -1;  // -1: not counting; read and set atomically (callbacks may come from any thread)
inline bool ready = false;

inline int kindOfDriver(CUpti_CallbackId id) {
  switch (id) {
    case CUPTI_DRIVER_TRACE_CBID_cuMemCreate: return kCreate;
    case CUPTI_DRIVER_TRACE_CBID_cuMemMap: return kMap;
    case CUPTI_DRIVER_TRACE_CBID_cuMemUnmap: return kUnmap;
    case CUPTI_DRIVER_TRACE_CBID_cuMemRelease: return kRelease;
    case CUPTI_DRIVER_TRACE_CBID_cuMemSetAccess: return kSetAccess;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressReserve: return kReserve;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAddressFree: return kAddressFree;
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc:
    case CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2: return kMalloc;
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree:
    case CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2: return kFree;
    default: return -1;
  }
}

inline int kindOfRuntime(CUpti_CallbackId id) {
  switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020: return kRtMalloc;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020: return kRtFree;
    default: return -1;
  }
}

inline void CUPTIAPI callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* data) {
  const int ph = __atomic_load_n(&phase, __ATOMIC_RELAXED);
  if (ph < 0) return;
  const auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite != CUPTI_API_EXIT) return;
  int k = -1;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    k = kindOfDriver(id);
    if (k >= 0 && info->functionReturnValue != nullptr && *static_cast<const CUresult*>(info->functionReturnValue) != CUDA_SUCCESS) return;
  } else if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    k = kindOfRuntime(id);
    if (k >= 0 && info->functionReturnValue != nullptr &&
        *static_cast<const cudaError_t*>(info->functionReturnValue) != cudaSuccess)
      return;
  }
  if (k >= 0) __atomic_add_fetch(&counts[ph][k], 1, __ATOMIC_RELAXED);
}

// start subscribes (once) and counts the calls that follow in the trace
// phase; it returns an error text, empty when counting works.
inline std::string start() {
  if (!ready) {
    CUpti_SubscriberHandle sub;
    if (cuptiSubscribe(&sub, reinterpret_cast<CUpti_CallbackFunc>(callback), nullptr) != CUPTI_SUCCESS)
      return "cuptiSubscribe failed (another CUPTI client, or no permission)";
    if (cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) != CUPTI_SUCCESS ||
        cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API) != CUPTI_SUCCESS)
      return "cuptiEnableDomain failed";
    ready = true;
  }
  __atomic_store_n(&phase, kTrace, __ATOMIC_RELAXED);
  return "";
}

// teardown counts the calls that follow in the teardown phase.
inline void teardown() {
  if (ready) __atomic_store_n(&phase, kTeardown, __ATOMIC_RELAXED);
}

inline void stop() { __atomic_store_n(&phase, -1, __ATOMIC_RELAXED); }

// active says whether calls were counted.
inline bool active() { return ready; }

// json returns {"create":N,...,"total":N} (the driver domain's total) for
// phase ph, or null when counting was not on.
inline std::string json(int ph = kTrace) {
  if (!ready) return "null";
  std::string out = "{";
  int64_t total = 0;
  for (int k = 0; k < kKinds; ++k) {
    out += std::string(k ? "," : "") + "\"" + kNames[k] + "\":" + std::to_string(counts[ph][k]);
    if (k < kRtMalloc) total += counts[ph][k];
  }
  return out + ",\"total\":" + std::to_string(total) + "}";
}

// Unreleased is what the allocator obtained from the driver over both
// phases and did not give back: allocations (cuMemAlloc less cuMemFree),
// physical handles (cuMemCreate less cuMemRelease), mappings (cuMemMap
// less cuMemUnmap) and address ranges (cuMemAddressReserve less
// cuMemAddressFree). Device memory stays held while any of the first three
// is above 0; an address range holds no memory. A negative figure means
// something obtained before counting started was given back.
struct Unreleased {
  int64_t allocations, handles, mappings, addressRanges;
  bool leak() const { return allocations > 0 || handles > 0 || mappings > 0; }
};

inline Unreleased unreleased() {
  auto both = [](int k) { return counts[kTrace][k] + counts[kTeardown][k]; };
  return Unreleased{both(kMalloc) - both(kFree), both(kCreate) - both(kRelease), both(kMap) - both(kUnmap),
                    both(kReserve) - both(kAddressFree)};
}

#else

struct Unreleased {
  int64_t allocations, handles, mappings, addressRanges;
  bool leak() const { return false; }
};

inline std::string start() { return "built without CUPTI"; }
inline void teardown() {}
inline void stop() {}
inline bool active() { return false; }
inline std::string json(int = 0) { return "null"; }
inline Unreleased unreleased() { return Unreleased{0, 0, 0, 0}; }

#endif

}  // namespace cuptiCount
