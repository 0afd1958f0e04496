// The C API only (OpenMPI would otherwise pull in its deprecated C++ bindings).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/profiler/Tracer.h"

namespace ts::engine {

namespace {

using Clock = std::chrono::steady_clock;
using profiler::ScopedRange;
using profiler::SpanCategory;

class SingleCommunicator final : public Communicator {
 public:
  struct Done final : Pending {
    void wait() override {}
    bool test() override { return true; }
  };
  std::string name() const override { return "single"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::unique_ptr<Pending> allReduceSum(float*, int64_t) override {
    return std::make_unique<Done>();
  }
  std::unique_ptr<Pending> reduceScatterSum(const float* send, float* recv,
                                            const std::vector<int64_t>& counts) override {
    if (send != recv) std::memmove(recv, send, size_t(counts.at(0)) * sizeof(float));
    return std::make_unique<Done>();
  }
  std::unique_ptr<Pending> allGather(void*, const std::vector<int64_t>&, size_t) override {
    return std::make_unique<Done>();
  }
  void broadcast(void*, int64_t, int) override {}
  void gatherBytes(const void* send, int64_t bytes, void* recv, int) override {
    if (send != recv && bytes > 0) std::memmove(recv, send, size_t(bytes));
  }
  void gatherHostBytes(const void* send, int64_t bytes, void* recv, int root) override {
    gatherBytes(send, bytes, recv, root);
  }
  void barrier() override {}
  double allReduceSum(double v) override { return v; }
  double allReduceMax(double v) override { return v; }
  void allReduceMax(std::vector<double>&) override {}
  std::vector<std::string> gatherStrings(const std::string& mine, int) override { return {mine}; }
};

std::string mpiError(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, size_t(len));
}
void check(int code, const char* what) {
  if (code != MPI_SUCCESS) throw CommError(std::string(what) + " failed: " + mpiError(code));
}

std::once_flag g_init;
void initMpi() {
  std::call_once(g_init, [] {
    int done = 0;
    MPI_Initialized(&done);
    if (done) return;
    int provided = 0;
    // Only the training thread calls MPI (the stdin reader and OpenMP workers never do).
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes (CommError), not as an abort inside the library.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    std::atexit([] {
      int fin = 0;
      MPI_Finalized(&fin);
      if (!fin) MPI_Finalize();
    });
  });
}

// MPI counts are int: a long buffer goes in pieces of at most 2^30 elements.
constexpr int64_t kMaxCount = int64_t(1) << 30;

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(kernels::Backend* backend) : backend_(backend) {
    initMpi();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    staged_ = backend_ && !backend_->hostAccessible();
  }
  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  // Requests waited on with a deadline; the staging copy back (if any) runs after completion.
  class Requests final : public Pending {
   public:
    Requests(MpiCommunicator* c, std::string what) : c_(c), what_(std::move(what)) {}
    std::vector<MPI_Request> reqs;
    std::function<void()> after;
    std::vector<char> stage, stageOut;  // host copies when the backend's memory is not the host's
    std::vector<int> counts, displs;    // all-gather, reduce-scatter: must outlive the request
    bool test() override {
      if (done_) return true;
      int flag = 0;
      check(MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE), what_.c_str());
      if (flag) finish();
      return done_;
    }
    void wait() override {
      if (done_) return;
      c_->waitAll(reqs, what_);
      finish();
    }

   private:
    void finish() {
      done_ = true;
      if (after) after();
    }
    MpiCommunicator* c_;
    std::string what_;
    bool done_ = false;
  };

  std::unique_ptr<Pending> allReduceSum(float* data, int64_t n) override {
    auto p = std::make_unique<Requests>(this, "all-reduce");
    if (n <= 0 || size_ == 1) return p;
    float* buf = data;
    if (staged_) {
      p->stage.resize(size_t(n) * sizeof(float));
      backend_->copyToHost(p->stage.data(), data, size_t(n) * sizeof(float));
      buf = reinterpret_cast<float*>(p->stage.data());
      p->after = [this, data, buf, n] {
        backend_->copyToDevice(data, buf, size_t(n) * sizeof(float));
      };
    }
    for (int64_t off = 0; off < n; off += kMaxCount) {
      const int cnt = int(std::min(kMaxCount, n - off));
      p->reqs.emplace_back();
      check(MPI_Iallreduce(MPI_IN_PLACE, buf + off, cnt, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                           &p->reqs.back()),
            "MPI_Iallreduce");
    }
    countSent(2 * (size_ - 1) * n * int64_t(sizeof(float)) / size_);
    return p;
  }

  std::unique_ptr<Pending> reduceScatterSum(const float* send, float* recv,
                                            const std::vector<int64_t>& counts) override {
    auto p = std::make_unique<Requests>(this, "reduce-scatter");
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    const int64_t mine = counts.at(size_t(rank_));
    if (size_ == 1) {
      if (send != recv) backend_->copyOnDevice(recv, send, mine * int64_t(sizeof(float)));
      return p;
    }
    if (total >= kMaxCount) throw CommError("reduce-scatter of more than 2^30 floats");
    const float* s = send;
    float* r = recv;
    if (staged_) {
      p->stage.resize(size_t(total) * sizeof(float));
      p->stageOut.resize(size_t(mine) * sizeof(float));
      backend_->copyToHost(p->stage.data(), send, size_t(total) * sizeof(float));
      s = reinterpret_cast<const float*>(p->stage.data());
      r = reinterpret_cast<float*>(p->stageOut.data());
      p->after = [this, recv, r, mine] {
        backend_->copyToDevice(recv, r, size_t(mine) * sizeof(float));
      };
    }
    p->counts.assign(counts.begin(), counts.end());
    p->reqs.emplace_back();
    check(MPI_Ireduce_scatter(s, r, p->counts.data(), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                              &p->reqs.back()),
          "MPI_Ireduce_scatter");
    countSent((size_ - 1) * total * int64_t(sizeof(float)) / size_);
    return p;
  }

  std::unique_ptr<Pending> allGather(void* data, const std::vector<int64_t>& counts,
                                     size_t elemBytes) override {
    auto p = std::make_unique<Requests>(this, "all-gather");
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t(0));
    if (size_ == 1 || total == 0) return p;
    if (total * int64_t(elemBytes) >= kMaxCount * 2)
      throw CommError("all-gather of more than 2 GiB at once");
    char* buf = static_cast<char*>(data);
    const size_t bytes = size_t(total) * elemBytes;
    if (staged_) {
      p->stage.resize(bytes);
      backend_->copyToHost(p->stage.data(), data, bytes);
      buf = p->stage.data();
      p->after = [this, data, buf, bytes] { backend_->copyToDevice(data, buf, bytes); };
    }
    // Counted in bytes (MPI_BYTE), so 16-bit and fp32 parts go the same way.
    std::vector<int> cnt(static_cast<size_t>(size_)), displ(static_cast<size_t>(size_));
    int64_t d = 0;
    for (int r = 0; r < size_; ++r) {
      cnt[size_t(r)] = int(counts[size_t(r)] * int64_t(elemBytes));
      displ[size_t(r)] = int(d);
      d += cnt[size_t(r)];
    }
    p->counts = std::move(cnt);
    p->displs = std::move(displ);
    p->reqs.emplace_back();
    check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_BYTE, buf, p->counts.data(), p->displs.data(),
                          MPI_BYTE, MPI_COMM_WORLD, &p->reqs.back()),
          "MPI_Iallgatherv");
    countSent((size_ - 1) * int64_t(bytes) / size_);
    return p;
  }

  void broadcast(void* data, int64_t bytes, int root) override {
    if (size_ == 1 || bytes <= 0) return;
    std::vector<char> host;
    char* buf = static_cast<char*>(data);
    if (staged_) {
      host.resize(size_t(bytes));
      if (rank_ == root) backend_->copyToHost(host.data(), data, size_t(bytes));
      buf = host.data();
    }
    for (int64_t off = 0; off < bytes; off += kMaxCount) {
      std::vector<MPI_Request> req(1);
      check(MPI_Ibcast(buf + off, int(std::min(kMaxCount, bytes - off)), MPI_BYTE, root,
                       MPI_COMM_WORLD, &req[0]),
            "MPI_Ibcast");
      waitAll(req, "broadcast");
    }
    if (staged_ && rank_ != root) backend_->copyToDevice(data, host.data(), size_t(bytes));
    if (rank_ == root) countSent(bytes);
  }

  void gatherBytes(const void* send, int64_t bytes, void* recv, int root) override {
    gather(send, bytes, recv, root, staged_);
  }
  void gatherHostBytes(const void* send, int64_t bytes, void* recv, int root) override {
    gather(send, bytes, recv, root, false);
  }
  // `staged`: the ends are backend memory that MPI cannot read (host copies in between).
  void gather(const void* send, int64_t bytes, void* recv, int root, bool staged) {
    if (size_ == 1) {
      if (bytes <= 0) return;
      if (staged)
        backend_->copyOnDevice(recv, send, bytes);
      else if (send != recv)
        std::memmove(recv, send, size_t(bytes));
      return;
    }
    if (bytes >= kMaxCount * 2) throw CommError("gather of more than 2 GiB per rank");
    // Through host buffers on both ends when the backend's memory is not the host's.
    std::vector<char> hs, hr;
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    if (staged) {
      hs.resize(size_t(bytes));
      backend_->copyToHost(hs.data(), send, size_t(bytes));
      s = hs.data();
      if (rank_ == root) hr.resize(size_t(bytes) * size_t(size_));
      r = hr.data();
    }
    std::vector<MPI_Request> req(1);
    check(MPI_Igather(s, int(bytes), MPI_BYTE, r, int(bytes), MPI_BYTE, root, MPI_COMM_WORLD,
                      &req[0]),
          "MPI_Igather");
    waitAll(req, "gather");
    if (staged && rank_ == root) backend_->copyToDevice(recv, hr.data(), hr.size());
    if (rank_ != root) countSent(bytes);
  }

  void barrier() override {
    std::vector<MPI_Request> req(1);
    check(MPI_Ibarrier(MPI_COMM_WORLD, &req[0]), "MPI_Ibarrier");
    waitAll(req, "barrier");
  }

  double allReduceSum(double v) override { return reduceHost(v, MPI_SUM); }
  double allReduceMax(double v) override { return reduceHost(v, MPI_MAX); }
  void allReduceMax(std::vector<double>& v) override {
    if (size_ == 1 || v.empty()) return;
    std::vector<double> out(v.size());
    std::vector<MPI_Request> req(1);
    check(MPI_Iallreduce(v.data(), out.data(), int(v.size()), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD,
                         &req[0]),
          "MPI_Iallreduce");
    waitAll(req, "all-reduce");
    v = std::move(out);
  }

  std::vector<std::string> gatherStrings(const std::string& mine, int root) override {
    int len = int(mine.size());
    std::vector<int> lens(static_cast<size_t>(size_));
    std::vector<MPI_Request> req(1);
    check(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, root, MPI_COMM_WORLD, &req[0]),
          "MPI_Igather");
    waitAll(req, "gather");
    std::vector<int> displ(static_cast<size_t>(size_));
    int total = 0;
    if (rank_ == root)
      for (int r = 0; r < size_; ++r) displ[size_t(r)] = total, total += lens[size_t(r)];
    std::vector<char> all(size_t(std::max(total, 1)));
    check(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displ.data(), MPI_CHAR,
                       root, MPI_COMM_WORLD, &req[0]),
          "MPI_Igatherv");
    waitAll(req, "gather");
    std::vector<std::string> out;
    if (rank_ == root)
      for (int r = 0; r < size_; ++r)
        out.emplace_back(all.data() + displ[size_t(r)], size_t(lens[size_t(r)]));
    return out;
  }

  // Polls with a short back-off (ranks may share cores: spinning would starve the rank being
  // waited for). Throws CommError after timeoutSeconds or when interrupted.
  void waitAll(std::vector<MPI_Request>& reqs, const std::string& what) {
    ScopedRange r("comm_wait", SpanCategory::Communication);
    const auto start = Clock::now();
    auto pause = std::chrono::microseconds(2);
    for (;;) {
      int flag = 0;
      check(MPI_Testall(int(reqs.size()), reqs.data(), &flag, MPI_STATUSES_IGNORE), what.c_str());
      if (flag) return;
      if (interrupt && interrupt->load())
        throw CommError(what + " interrupted by a signal while waiting for the other ranks");
      const double s = std::chrono::duration<double>(Clock::now() - start).count();
      if (s > timeoutSeconds)
        throw CommError(what + ": no answer from the other ranks for " +
                        std::to_string(int(timeoutSeconds)) + " s (a rank died or hangs); rank " +
                        std::to_string(rank_) + " gives up");
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(500));
    }
  }

 private:
  double reduceHost(double v, MPI_Op op) {
    if (size_ == 1) return v;
    double out = 0;
    std::vector<MPI_Request> req(1);
    check(MPI_Iallreduce(&v, &out, 1, MPI_DOUBLE, op, MPI_COMM_WORLD, &req[0]), "MPI_Iallreduce");
    waitAll(req, "all-reduce");
    return out;
  }

  kernels::Backend* backend_;
  int rank_ = 0, size_ = 1;
  bool staged_ = false;
};

}  // namespace

std::unique_ptr<Communicator> makeSingleCommunicator() {
  return std::make_unique<SingleCommunicator>();
}

int launcherWorldSize() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"})
    if (const char* s = std::getenv(v)) {
      const int n = std::atoi(s);
      if (n > 0) return n;
    }
  return 1;
}

int launcherWorldRank() {
  for (const char* v : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"})
    if (const char* s = std::getenv(v)) return std::max(0, std::atoi(s));
  return 0;
}

std::unique_ptr<Communicator> makeMpiCommunicator(kernels::Backend* backend) {
  return std::make_unique<MpiCommunicator>(backend);
}

}  // namespace ts::engine

namespace ts::engine {
void abortRanks(int code) {
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Abort(MPI_COMM_WORLD, code);
}
}  // namespace ts::engine
