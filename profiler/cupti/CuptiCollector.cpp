// CUPTI Activity API collector: kernels, copies, memsets, runtime API calls and
// synchronizations as Spans on the tracer's host clock. Compiled only when CUPTI is found.
#include <cuda_runtime_api.h>
#include <cupti.h>
#include <cxxabi.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "trainscope/profiler/DeviceCollector.h"

namespace ts::profiler {

namespace {

// Record layouts of the CUPTI we compile against (CUDA 13 removed the old versioned names from
// cupti_activity.h; CUPTI fills records in the newest layout the header declares).
#if CUPTI_API_VERSION >= 130000
using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using SyncRecord = CUpti_ActivitySynchronization2;
#else  // CUDA 12.x
using KernelRecord = CUpti_ActivityKernel9;
using MemcpyRecord = CUpti_ActivityMemcpy5;
using MemsetRecord = CUpti_ActivityMemset4;
using SyncRecord = CUpti_ActivitySynchronization;
#endif

constexpr size_t kBufferBytes = 8u << 20;
constexpr size_t kPreallocatedBuffers = 4;
constexpr size_t kMaxBuffers = 64;  // 512 MiB; beyond that CUPTI drops (and we count)
constexpr size_t kAlign = 8;

const CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_SYNCHRONIZATION,
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
};

std::string errorText(CUptiResult r) {
  const char* s = nullptr;
  if (cuptiGetResultString(r, &s) == CUPTI_SUCCESS && s) return s;
  return "CUPTI error " + std::to_string(static_cast<int>(r));
}

enum class RecordKind { Kernel, Memcpy, Memset, Runtime, Sync };

struct DeviceRecord {
  RecordKind kind;
  std::string name;
  uint64_t start = 0, end = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;
  uint64_t bytes = 0;
  uint32_t threadId = 0;  // runtime records
};

// Shared with CUPTI's callbacks, which carry no user pointer; leaked so late buffer completions
// during process exit find it alive.
struct CuptiState {
  std::mutex mutex;
  std::vector<uint8_t*> freeBuffers;
  size_t allocated = 0;
  int64_t notProvided = 0;  // buffer requests we refused (pool exhausted)
  int64_t dropped = 0;      // reported by cuptiActivityGetNumDroppedRecords
  std::vector<DeviceRecord> records;
  std::unordered_map<uint32_t, uint64_t> external;  // CUPTI correlation -> our range id
  bool callbacksRegistered = false;
};
CuptiState& cupti() {
  static CuptiState* s = new CuptiState();
  return *s;
}

uint8_t* allocBuffer() {
  return static_cast<uint8_t*>(std::aligned_alloc(kAlign, kBufferBytes));
}

const char* memcpyKindName(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
      return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
      return "memcpy PtoP";
    default:
      return "memcpy";
  }
}

const char* syncTypeName(int type) {
  switch (type) {
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE:
      return "sync event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT:
      return "sync stream wait event";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE:
      return "sync stream";
    case CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE:
      return "sync context";
    default:
      return "sync";
  }
}

void CUPTIAPI bufferRequested(uint8_t** buffer, size_t* size, size_t* maxNumRecords) {
  CuptiState& s = cupti();
  std::lock_guard lock(s.mutex);
  *maxNumRecords = 0;
  uint8_t* b = nullptr;
  if (!s.freeBuffers.empty()) {
    b = s.freeBuffers.back();
    s.freeBuffers.pop_back();
  } else if (s.allocated < kMaxBuffers) {
    b = allocBuffer();
    if (b) ++s.allocated;
  }
  if (!b) ++s.notProvided;  // CUPTI drops records until a buffer comes back
  *buffer = b;
  *size = b ? kBufferBytes : 0;
}

void CUPTIAPI bufferCompleted(CUcontext ctx, uint32_t streamId, uint8_t* buffer, size_t size,
                              size_t validSize) {
  std::vector<DeviceRecord> recs;
  std::vector<std::pair<uint32_t, uint64_t>> ext;
  CUpti_Activity* rec = nullptr;
  while (validSize > 0 && cuptiActivityGetNextRecord(buffer, validSize, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<const KernelRecord*>(rec);
        recs.push_back({RecordKind::Kernel, k->name ? k->name : "kernel", k->start, k->end,
                        k->streamId, k->correlationId, 0, 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<const MemcpyRecord*>(rec);
        recs.push_back({RecordKind::Memcpy, memcpyKindName(m->copyKind), m->start, m->end,
                        m->streamId, m->correlationId, m->bytes, 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<const MemsetRecord*>(rec);
        recs.push_back({RecordKind::Memset, "memset", m->start, m->end, m->streamId,
                        m->correlationId, m->bytes, 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_RUNTIME: {
        auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
        const char* name = nullptr;
        if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_RUNTIME_API, a->cbid, &name) != CUPTI_SUCCESS ||
            !name)
          name = "cuda runtime";
        recs.push_back(
            {RecordKind::Runtime, name, a->start, a->end, 0, a->correlationId, 0, a->threadId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_SYNCHRONIZATION: {
        auto* y = reinterpret_cast<const SyncRecord*>(rec);
        recs.push_back({RecordKind::Sync, syncTypeName(static_cast<int>(y->type)), y->start, y->end,
                        y->streamId, y->correlationId, 0, 0});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        auto* e = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(rec);
        ext.emplace_back(e->correlationId, e->externalId);
        break;
      }
      default:
        break;
    }
  }
  size_t dropped = 0;
  cuptiActivityGetNumDroppedRecords(ctx, streamId, &dropped);
  CuptiState& s = cupti();
  std::lock_guard lock(s.mutex);
  s.dropped += static_cast<int64_t>(dropped);
  for (auto& r : recs) s.records.push_back(std::move(r));
  for (auto& [c, e] : ext) s.external[c] = e;
  if (buffer) s.freeBuffers.push_back(buffer);
}

std::string demangle(const std::string& name) {
  int status = 0;
  char* d = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  if (status != 0 || !d) return name;
  std::string out(d);
  std::free(d);
  return out;
}

class CuptiCollector final : public DeviceCollector, public RangeListener {
 public:
  ~CuptiCollector() override { stop(); }
  std::string name() const override { return "cupti"; }

  bool start(std::string* why) override {
    if (active_) return true;
    auto fail = [&](const std::string& reason) {
      if (why) *why = reason;
      return false;
    };
    int devices = 0;
    cudaError_t ce = cudaGetDeviceCount(&devices);
    if (ce != cudaSuccess) return fail(std::string("no CUDA device: ") + cudaGetErrorString(ce));
    if (devices == 0) return fail("no CUDA device");
    CuptiCollector* expected = nullptr;
    if (!s_active.compare_exchange_strong(expected, this))
      return fail("another CUPTI collector is already running in this process");
    CuptiState& s = cupti();
    {
      std::lock_guard lock(s.mutex);
      while (s.allocated < kPreallocatedBuffers) {
        uint8_t* b = allocBuffer();
        if (!b) break;
        s.freeBuffers.push_back(b);
        ++s.allocated;
      }
    }
    if (!s.callbacksRegistered) {
      CUptiResult r = cuptiActivityRegisterCallbacks(bufferRequested, bufferCompleted);
      if (r != CUPTI_SUCCESS) {
        s_active.store(nullptr);
        return fail("cuptiActivityRegisterCallbacks: " + errorText(r));
      }
      s.callbacksRegistered = true;
    }
    for (CUpti_ActivityKind k : kKinds) {
      CUptiResult r = cuptiActivityEnable(k);
      if (r != CUPTI_SUCCESS) {
        for (CUpti_ActivityKind d : kKinds) cuptiActivityDisable(d);
        s_active.store(nullptr);
        return fail("cuptiActivityEnable(" + std::to_string(static_cast<int>(k)) +
                    "): " + errorText(r));
      }
    }
    calibrate();
    active_ = true;
    Tracer::instance().setRangeListener(this);
    return true;
  }

  void stop() override {
    if (!active_) return;
    Tracer::instance().setRangeListener(nullptr);
    cudaDeviceSynchronize();
    cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : kKinds) cuptiActivityDisable(k);
    active_ = false;
    s_active.store(nullptr);
  }

  bool active() const override { return active_; }

  std::vector<Span> flush() override {
    if (active_) {
      cudaDeviceSynchronize();  // kernels still running are not in any buffer yet
      cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
      calibrate();  // the two clocks drift slowly; re-anchor every window
    }
    std::vector<DeviceRecord> recs;
    std::unordered_map<uint32_t, uint64_t> ext;
    {
      CuptiState& s = cupti();
      std::lock_guard lock(s.mutex);
      recs.swap(s.records);
      ext.swap(s.external);
    }
    Tracer& tracer = Tracer::instance();
    std::unordered_map<uint32_t, int> laneOfThread;
    std::vector<Span> out;
    out.reserve(recs.size());
    for (const DeviceRecord& r : recs) {
      Span sp;
      sp.start_ns = static_cast<int64_t>(r.start) + offsetNs_;
      sp.duration_ns = r.end > r.start ? static_cast<int64_t>(r.end - r.start) : 0;
      auto e = ext.find(r.correlation);
      // Our range id when the launch happened inside a ScopedRange; else CUPTI's own id with
      // the top bit set so it can't collide with range ids.
      sp.correlation = e != ext.end() ? e->second : (uint64_t{1} << 63) | r.correlation;
      sp.lane = static_cast<int>(r.stream);
      sp.device = true;
      switch (r.kind) {
        case RecordKind::Kernel: {
          auto& n = demangled_[r.name];
          if (n.empty()) n = demangle(r.name);
          sp.name = n;
          sp.category = categoryForName(sp.name, true);
          break;
        }
        case RecordKind::Memcpy:
        case RecordKind::Memset:
          sp.name = r.name;
          sp.category = SpanCategory::Memcpy;
          sp.bytes = static_cast<int64_t>(r.bytes);
          break;
        case RecordKind::Sync:
          sp.name = r.name;
          sp.category = SpanCategory::Other;
          break;
        case RecordKind::Runtime: {
          // Host-side API call: on the lane of the thread that made it.
          sp.name = r.name;
          sp.category = SpanCategory::Other;
          sp.device = false;
          auto it = laneOfThread.find(r.threadId);
          if (it == laneOfThread.end())
            it = laneOfThread.emplace(r.threadId, tracer.laneOfOsThread(r.threadId)).first;
          sp.lane = it->second >= 0 ? it->second : kUnknownThreadLane;
          sp.depth = 1;
          break;
        }
      }
      out.push_back(std::move(sp));
    }
    std::sort(out.begin(), out.end(),
              [](const Span& a, const Span& b) { return a.start_ns < b.start_ns; });
    return out;
  }

  int64_t droppedRecords() const override {
    CuptiState& s = cupti();
    std::lock_guard lock(s.mutex);
    return s.dropped + s.notProvided;
  }

  void onRangeBegin(uint64_t correlation) override {
    cuptiActivityPushExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, correlation);
  }
  void onRangeEnd(uint64_t) override {
    uint64_t last = 0;
    cuptiActivityPopExternalCorrelationId(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
  }

 private:
  static constexpr int kUnknownThreadLane = 9999;

  // offset = host steady clock (tracer epoch) - CUPTI timestamp, taken between two host reads.
  void calibrate() {
    Tracer& t = Tracer::instance();
    uint64_t gpu = 0;
    int64_t h0 = t.nowNs();
    if (cuptiGetTimestamp(&gpu) != CUPTI_SUCCESS) return;
    int64_t h1 = t.nowNs();
    offsetNs_ = (h0 + h1) / 2 - static_cast<int64_t>(gpu);
  }

  static inline std::atomic<CuptiCollector*> s_active{nullptr};
  bool active_ = false;
  int64_t offsetNs_ = 0;
  std::unordered_map<std::string, std::string> demangled_;
};

}  // namespace

std::unique_ptr<DeviceCollector> makeCuptiCollector(std::string* why) {
  if (why) why->clear();
  return std::make_unique<CuptiCollector>();
}

}  // namespace ts::profiler
