// The NCCL communicator: collectives between GPU ranks (one process per device) on CUDA device
// memory, bootstrapped over another communicator (MPI between processes, the single one alone).
//
// Streams: the CUDA backend launches its kernels and cuBLAS calls on the legacy default stream
// (plain `<<<grid, block>>>`, no per-thread default stream, no cublasSetStream). Collectives run
// on a stream of their own (non-blocking, so it never serializes with the default stream behind
// our back) and start after an event recorded on the legacy default stream: they see every
// gradient or parameter the backend had queued when the collective was called. The way back is
// the host: a caller touches a buffer only after wait() (or test() true), which has seen the
// collective's completion event, so later default-stream work reads the collective's result.
//
// Deadlines: the NCCL communicator is non-blocking (ncclConfig_t::blocking = 0), so neither
// ncclCommInitRank nor an enqueue can hang in the library: both return ncclInProgress and are
// polled like the operations themselves. Waits poll with a short back-off and check NCCL's
// asynchronous error, the interrupt flag and timeoutSeconds; on failure the communicator is
// aborted (ncclCommAbort, so no kernel keeps waiting for a dead rank) and CommError is thrown.
// An aborted communicator refuses every later device collective with CommError.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using Clock = std::chrono::steady_clock;
using profiler::ScopedRange;
using profiler::SpanCategory;

std::string cudaMessage(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator* bootstrap, int device) : boot_(bootstrap), device_(device) {
    timeoutSeconds = boot_->timeoutSeconds;
    interrupt = boot_->interrupt;
    rank_ = boot_->rank();
    size_ = boot_->size();
  }

  ~NcclCommunicator() override {
    if (comm_) {
      if (ready_ && finalize())
        ncclCommDestroy(comm_);
      else
        ncclCommAbort(comm_);
    }
    if (queued_) cudaEventDestroy(queued_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Collective over the bootstrap's ranks (see makeNcclCommunicator).
  void start() {
    const std::string where = "NCCL communicator on CUDA device " + std::to_string(device_) +
                              " (rank " + std::to_string(rank_) + " of " + std::to_string(size_) +
                              ")";
    std::string failure;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof(id));
    cudaError_t e = cudaSuccess;
    if (device_ < 0) {
      failure = "no such device";
    } else if ((e = cudaSetDevice(device_)) != cudaSuccess) {
      failure = "cudaSetDevice(" + std::to_string(device_) + "): " + cudaMessage(e);
    } else if ((e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)) != cudaSuccess) {
      failure = "cudaStreamCreate: " + cudaMessage(e);
    } else if ((e = cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming)) != cudaSuccess) {
      failure = "cudaEventCreate: " + cudaMessage(e);
    } else if (rank_ == 0) {
      const ncclResult_t r = ncclGetUniqueId(&id);
      if (r != ncclSuccess) failure = std::string("ncclGetUniqueId: ") + ncclGetErrorString(r);
    }
    if (e != cudaSuccess) cudaGetLastError();  // not sticky: clear it for the caller
    // Every rank learns whether every rank could start, so they all fail now with a reason
    // instead of waiting for a rank that already gave up.
    const bool anyFailed = boot_->allReduceMax(failure.empty() ? 0.0 : 1.0) > 0;
    if (anyFailed)
      throw CommError(
          where + ": " +
          (failure.empty() ? "another rank could not start its CUDA device or NCCL" : failure));
    exchangeId(id);

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    check(ncclCommInitRankConfig(&comm_, size_, id, rank_, &config),
          "ncclCommInitRank (" + where + ")");
    settle("ncclCommInitRank (" + where + ")");
    ready_ = true;
  }

  std::string name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // An operation on the stream, complete when its event is.
  class Op final : public Pending {
   public:
    Op(NcclCommunicator* c, std::string what) : c_(c), what_(std::move(what)) {}
    ~Op() override {
      if (event_) cudaEventDestroy(event_);
    }
    bool test() override {
      if (done_) return true;
      const cudaError_t e = cudaEventQuery(event_);
      if (e == cudaErrorNotReady) {
        c_->checkAsync(what_);
        return false;
      }
      if (e != cudaSuccess) {
        cudaGetLastError();
        c_->fail(what_ + " failed on the device: " + cudaMessage(e));
      }
      done_ = true;
      return true;
    }
    void wait() override {
      if (!done_) c_->poll(what_, [this] { return test(); });
    }

   private:
    friend class NcclCommunicator;
    NcclCommunicator* c_;
    std::string what_;
    cudaEvent_t event_ = nullptr;
    bool done_ = false;
  };

  std::unique_ptr<Pending> allReduceSum(float* data, int64_t n) override {
    if (n <= 0) return done("all-reduce");
    enqueue("all-reduce", [&] {
      return ncclAllReduce(data, data, size_t(n), ncclFloat, ncclSum, comm_, stream_);
    });
    countSent(2 * (size_ - 1) * n * int64_t(sizeof(float)) / size_);
    return completion("all-reduce");
  }

  // NCCL's ReduceScatter wants equal parts: unequal ones are one grouped ncclReduce per rank
  // onto that rank's part. Both are in place when recv is the rank's own part of send; any other
  // overlap of recv with send goes through a scratch buffer.
  std::unique_ptr<Pending> reduceScatterSum(const float* send, float* recv,
                                            const std::vector<int64_t>& counts) override {
    const std::vector<int64_t> displ = displacements(counts, "reduce-scatter");
    const int64_t total = displ.back();
    const int64_t mine = counts[size_t(rank_)];
    if (total == 0) return done("reduce-scatter");
    const float* ownPart = send + displ[size_t(rank_)];
    const bool overlaps = mine > 0 && recv != ownPart && recv < send + total && send < recv + mine;
    DeviceScratch scratch;
    float* out = recv;
    if (overlaps) out = static_cast<float*>(scratch.allocate(size_t(mine) * sizeof(float)));
    const bool equal =
        std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    if (equal) {
      enqueue("reduce-scatter", [&] {
        return ncclReduceScatter(send, out, size_t(mine), ncclFloat, ncclSum, comm_, stream_);
      });
    } else {
      enqueueGroup("reduce-scatter", [&](int r) {
        if (counts[size_t(r)] == 0) return ncclSuccess;
        return ncclReduce(send + displ[size_t(r)], r == rank_ ? out : nullptr,
                          size_t(counts[size_t(r)]), ncclFloat, ncclSum, r, comm_, stream_);
      });
    }
    if (overlaps)
      cudaCheck(cudaMemcpyAsync(recv, out, size_t(mine) * sizeof(float), cudaMemcpyDeviceToDevice,
                                stream_),
                "reduce-scatter: copy of the result");
    countSent((size_ - 1) * total * int64_t(sizeof(float)) / size_);
    // A scratch output (recv inside send) is freed, after the device finished, on return.
    auto p = completion("reduce-scatter");
    if (overlaps) p->wait();
    return p;
  }

  // In place; equal parts are one ncclAllGather, unequal ones one grouped ncclBroadcast per rank
  // of its part (as bytes: 16-bit and fp32 parts go the same way).
  std::unique_ptr<Pending> allGather(void* data, const std::vector<int64_t>& counts,
                                     size_t elemBytes) override {
    const std::vector<int64_t> displ = displacements(counts, "all-gather");
    const int64_t total = displ.back();
    if (total == 0) return done("all-gather");
    char* buf = static_cast<char*>(data);
    const size_t eb = elemBytes;
    const bool equal =
        std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
    if (equal) {
      const size_t part = size_t(counts[0]) * eb;
      enqueue("all-gather", [&] {
        return ncclAllGather(buf + size_t(rank_) * part, buf, part, ncclUint8, comm_, stream_);
      });
    } else {
      enqueueGroup("all-gather", [&](int r) {
        const size_t bytes = size_t(counts[size_t(r)]) * eb;
        if (bytes == 0) return ncclSuccess;
        char* part = buf + size_t(displ[size_t(r)]) * eb;
        return ncclBroadcast(part, part, bytes, ncclUint8, r, comm_, stream_);
      });
    }
    countSent((size_ - 1) * total * int64_t(eb) / size_);
    return completion("all-gather");
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    checkRoot(root, "broadcast");
    if (size_ == 1 || bytes <= 0) return;
    enqueue("broadcast", [&] {
      return ncclBroadcast(data, data, size_t(bytes), ncclUint8, root, comm_, stream_);
    });
    completion("broadcast")->wait();
    if (rank_ == root) countSent(bytes);
  }

  // Point to point to the root (NCCL has no gather): the root copies its own part on the stream
  // and receives the others' in one group.
  void gatherBytes(const void* send, int64_t bytes, void* recv, int root) override {
    checkRoot(root, "gather");
    if (bytes <= 0) return;
    char* out = static_cast<char*>(recv);
    if (rank_ == root) {
      usable("gather");
      orderAfterDefaultStream("gather");
      char* own = out + size_t(root) * size_t(bytes);
      if (own != send)
        cudaCheck(cudaMemcpyAsync(own, send, size_t(bytes), cudaMemcpyDeviceToDevice, stream_),
                  "gather: copy of the root's own part");
    }
    if (size_ > 1) {
      enqueueGroup("gather", [&](int r) {
        if (rank_ != root)
          return r == root ? ncclSend(send, size_t(bytes), ncclUint8, root, comm_, stream_)
                           : ncclSuccess;
        if (r == root) return ncclSuccess;
        return ncclRecv(out + size_t(r) * size_t(bytes), size_t(bytes), ncclUint8, r, comm_,
                        stream_);
      });
    }
    completion("gather")->wait();
    if (rank_ != root) countSent(bytes);
  }

  // Host-side agreement: the bootstrap's (the same ranks, in the same order).
  void barrier() override { boot_->barrier(); }
  double allReduceSum(double v) override { return boot_->allReduceSum(v); }
  double allReduceMax(double v) override { return boot_->allReduceMax(v); }
  void allReduceMax(std::vector<double>& v) override { boot_->allReduceMax(v); }
  void gatherHostBytes(const void* send, int64_t bytes, void* recv, int root) override {
    boot_->gatherHostBytes(send, bytes, recv, root);  // host memory: over MPI
  }
  std::vector<std::string> gatherStrings(const std::string& mine, int root) override {
    return boot_->gatherStrings(mine, root);
  }

 private:
  // Frees a temporary device buffer after its operation (cudaFree waits for the device).
  struct DeviceScratch {
    void* p = nullptr;
    void* allocate(size_t bytes) {
      const cudaError_t e = cudaMalloc(&p, bytes);
      if (e != cudaSuccess) {
        cudaGetLastError();
        p = nullptr;
        throw CommError("scratch buffer of " + std::to_string(bytes) +
                        " bytes for a collective: " + cudaMessage(e));
      }
      return p;
    }
    ~DeviceScratch() {
      if (p) cudaFree(p);
    }
  };

  // The id goes from rank 0 to every rank over the bootstrap's host reductions, 6 bytes per
  // double (integers below 2^53 are exact; the other ranks offer -1, so the max is rank 0's):
  // 22 tiny all-reduces, once per process. Not the bootstrap's broadcast: that one takes its
  // backend's memory, and an MPI bootstrap made over the CUDA backend stages through
  // cudaMemcpy, which a host buffer does not survive. allReduceMax is specified on host values
  // for every communicator, so any bootstrap (MPI over any backend, the single one) carries the
  // id as it is, and MpiCommunicator needs no host-bytes entry point.
  void exchangeId(ncclUniqueId& id) {
    static_assert(sizeof(id.internal) == NCCL_UNIQUE_ID_BYTES);
    auto* bytes = reinterpret_cast<unsigned char*>(id.internal);
    constexpr int kChunk = 6;
    for (int off = 0; off < NCCL_UNIQUE_ID_BYTES; off += kChunk) {
      const int n = std::min(kChunk, NCCL_UNIQUE_ID_BYTES - off);
      double offer = -1;
      if (rank_ == 0) {
        uint64_t u = 0;
        for (int i = n - 1; i >= 0; --i) u = (u << 8) | bytes[off + i];
        offer = double(u);
      }
      const double got = boot_->allReduceMax(offer);
      if (!(got >= 0 && got < 0x1p48))
        throw CommError("NCCL unique id from rank 0 arrived damaged (chunk " +
                        std::to_string(off / kChunk) + ")");
      const auto u = static_cast<uint64_t>(got);
      for (int i = 0; i < n; ++i) bytes[off + i] = static_cast<unsigned char>(u >> (8 * i));
    }
  }

  std::vector<int64_t> displacements(const std::vector<int64_t>& counts, const char* what) const {
    if (int64_t(counts.size()) != size_)
      throw CommError(std::string(what) + ": " + std::to_string(counts.size()) + " counts for " +
                      std::to_string(size_) + " ranks");
    std::vector<int64_t> displ(counts.size() + 1, 0);
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r] < 0) throw CommError(std::string(what) + ": negative count");
      displ[r + 1] = displ[r] + counts[r];
    }
    return displ;
  }
  void checkRoot(int root, const char* what) const {
    if (root < 0 || root >= size_)
      throw CommError(std::string(what) + ": root " + std::to_string(root) + " of " +
                      std::to_string(size_) + " ranks");
  }

  void usable(const std::string& what) const {
    if (!comm_ || !ready_)
      throw CommError(what + ": the NCCL communicator was aborted after an earlier failure");
  }
  void cudaCheck(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return;
    cudaGetLastError();
    fail(what + ": " + cudaMessage(e));
  }
  // ncclInProgress is the normal answer of a non-blocking communicator (settle() waits it out).
  void check(ncclResult_t r, const std::string& what) {
    if (r == ncclSuccess || r == ncclInProgress) return;
    fail(what + " failed: " + ncclMessage(r));
  }
  std::string ncclMessage(ncclResult_t r) const {
    std::string s = ncclGetErrorString(r);
    if (comm_)
      if (const char* last = ncclGetLastError(comm_); last && *last) s += std::string(": ") + last;
    return s;
  }
  void checkAsync(const std::string& what) {
    if (!comm_) fail(what + ": the NCCL communicator was aborted");
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) fail(what + ": ncclCommGetAsyncError failed: " + ncclMessage(r));
    if (state != ncclSuccess && state != ncclInProgress)
      fail(what + " failed: " + ncclMessage(state));
  }
  // Aborts (the communicator's kernels stop waiting for the other ranks) and throws.
  [[noreturn]] void fail(const std::string& message) {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    ready_ = false;
    throw CommError(message);
  }

  // Polls `done` with a short back-off (ranks may share cores: spinning would starve the rank
  // being waited for) until true; fails on NCCL's asynchronous error, an interrupt or the deadline.
  template <class Done>
  void poll(const std::string& what, Done done) {
    ScopedRange range("comm_wait", SpanCategory::Communication);
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(2);
    for (;;) {
      if (done()) return;
      checkAsync(what);
      if (interrupt && interrupt->load())
        fail(what + " interrupted by a signal while waiting for the other ranks");
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (s > timeoutSeconds)
        fail(what + ": no answer from the other ranks for " + std::to_string(int(timeoutSeconds)) +
             " s (a rank died or hangs); rank " + std::to_string(rank_) + " gives up");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }
  // Waits until the non-blocking communicator has finished the last call (init or enqueue).
  void settle(const std::string& what) {
    poll(what, [&] {
      ncclResult_t state = ncclSuccess;
      const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
      if (r != ncclSuccess) fail(what + ": ncclCommGetAsyncError failed: " + ncclMessage(r));
      if (state == ncclInProgress) return false;
      if (state != ncclSuccess) fail(what + " failed: " + ncclMessage(state));
      return true;
    });
  }

  // The stream starts after what the backend queued on the legacy default stream so far.
  void orderAfterDefaultStream(const std::string& what) {
    cudaCheck(cudaSetDevice(device_), what + ": cudaSetDevice");
    cudaCheck(cudaEventRecord(queued_, cudaStreamLegacy), what + ": cudaEventRecord");
    cudaCheck(cudaStreamWaitEvent(stream_, queued_, 0), what + ": cudaStreamWaitEvent");
  }
  template <class Call>
  void enqueue(const std::string& what, Call call) {
    usable(what);
    orderAfterDefaultStream(what);
    check(call(), what);
    settle(what);
  }
  // One NCCL group: call(r) for every rank r.
  template <class Call>
  void enqueueGroup(const std::string& what, Call call) {
    usable(what);
    orderAfterDefaultStream(what);
    check(ncclGroupStart(), what + ": ncclGroupStart");
    ncclResult_t first = ncclSuccess;
    for (int r = 0; r < size_ && (first == ncclSuccess || first == ncclInProgress); ++r)
      first = call(r);
    const ncclResult_t end = ncclGroupEnd();
    check(first, what);
    check(end, what + ": ncclGroupEnd");
    settle(what);
  }
  // A Pending for everything queued on the stream so far.
  std::unique_ptr<Pending> completion(const std::string& what) {
    auto op = std::make_unique<Op>(this, what);
    cudaCheck(cudaEventCreateWithFlags(&op->event_, cudaEventDisableTiming),
              what + ": cudaEventCreate");
    cudaCheck(cudaEventRecord(op->event_, stream_), what + ": cudaEventRecord");
    return op;
  }
  std::unique_ptr<Pending> done(const std::string& what) {
    auto op = std::make_unique<Op>(this, what);
    op->done_ = true;
    return op;
  }

  // ncclCommFinalize, waited out for at most timeoutSeconds; false when it failed (abort then).
  bool finalize() noexcept {
    cudaStreamSynchronize(stream_);
    const ncclResult_t r = ncclCommFinalize(comm_);
    if (r != ncclSuccess && r != ncclInProgress) return false;
    const auto start = Clock::now();
    for (;;) {
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return false;
      if (state == ncclSuccess) return true;
      if (state != ncclInProgress) return false;
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeoutSeconds)
        return false;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }

  Communicator* boot_;
  int device_;
  int rank_ = 0, size_ = 1;
  ncclComm_t comm_ = nullptr;
  bool ready_ = false;  // initialized and not aborted
  cudaStream_t stream_ = nullptr;
  cudaEvent_t queued_ = nullptr;  // recorded on the default stream before each operation
};

}  // namespace

bool ncclCompiled() {
  return true;
}

std::unique_ptr<Communicator> makeNcclCommunicator(Communicator* bootstrap, int device) {
  if (!bootstrap) throw CommError("NCCL communicator: no bootstrap communicator");
  auto comm = std::make_unique<NcclCommunicator>(bootstrap, device);
  comm->start();
  return comm;
}

}  // namespace ts::engine
