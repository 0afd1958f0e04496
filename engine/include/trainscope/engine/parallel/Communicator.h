#pragma once
// Collectives between the ranks of a run, behind one interface: MPI for CPU ranks (and to
// bootstrap), NCCL for GPU ranks. Buffers are the backend's memory; an implementation that cannot
// read it directly stages through host copies (the host/device rule, Backend.h).
//
// Every collective is started non-blocking and waited on with a deadline: a rank that died or
// hangs makes the others fail with CommError within `timeoutSeconds`, instead of waiting for ever.
// Bytes sent are counted as a ring algorithm sends them (all-reduce 2(N-1)/N of the buffer,
// reduce-scatter and all-gather (N-1)/N), the volume the ZeRO paper's 2Ψ/3Ψ counts.
#include <atomic>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainscope/kernels/Backend.h"

namespace ts::engine {

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Communicator {
 public:
  // An operation in flight; wait() throws CommError on failure or timeout.
  class Pending {
   public:
    virtual ~Pending() = default;
    virtual void wait() = 0;
    virtual bool test() = 0;  // done (no wait); progresses the library
  };

  virtual ~Communicator() = default;
  virtual std::string name() const = 0;  // "mpi", "nccl", "single"
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Sum of `n` floats over the ranks, in place.
  virtual std::unique_ptr<Pending> allReduceSum(float* data, int64_t n) = 0;
  // `send` holds sum(counts) floats; rank r receives the sum over ranks of its part
  // [sum(counts[<r]), +counts[r]) in `recv` (counts[r] floats). Both stay untouched until the
  // returned operation is waited on.
  virtual std::unique_ptr<Pending> reduceScatterSum(const float* send, float* recv,
                                                    const std::vector<int64_t>& counts) = 0;
  // In place: `data` holds sum(counts) elements of `elemBytes`; each rank's part (at its
  // displacement) goes to every rank.
  virtual std::unique_ptr<Pending> allGather(void* data, const std::vector<int64_t>& counts,
                                             size_t elemBytes) = 0;
  virtual void broadcast(void* data, int64_t bytes, int root) = 0;
  // Every rank sends `bytes`; `root` receives them back to back in rank order into `recv`
  // (size() * bytes; ignored elsewhere).
  virtual void gatherBytes(const void* send, int64_t bytes, void* recv, int root) = 0;
  // As gatherBytes with both ends in host memory (offloaded optimizer state), whatever the
  // backend's memory is.
  virtual void gatherHostBytes(const void* send, int64_t bytes, void* recv, int root) = 0;
  virtual void barrier() = 0;

  // Small host values (norms, counts, decisions); not counted as traffic.
  virtual double allReduceSum(double v) = 0;
  virtual double allReduceMax(double v) = 0;
  // Element-wise max of a few host values over the ranks, in place (fp8 amaxes).
  virtual void allReduceMax(std::vector<double>& v) = 0;
  // Rank `root` receives every rank's string (index = rank); the others get an empty vector.
  virtual std::vector<std::string> gatherStrings(const std::string& mine, int root) = 0;

  // Bytes this rank sent since the last takeBytesSent().
  int64_t takeBytesSent() { return bytesSent_.exchange(0); }
  int64_t bytesSent() const { return bytesSent_.load(); }
  double timeoutSeconds = 30;
  // Set asynchronously (a signal): waiting collectives give up with CommError.
  const std::atomic<bool>* interrupt = nullptr;

 protected:
  void countSent(int64_t bytes) { bytesSent_ += bytes; }
  std::atomic<int64_t> bytesSent_{0};
};

// One rank alone: every collective is the identity.
std::unique_ptr<Communicator> makeSingleCommunicator();

// Whether this process was started by an MPI launcher (mpirun sets OMPI_COMM_WORLD_SIZE, PMI
// launchers PMI_SIZE) and with how many ranks; 1 when not.
int launcherWorldSize();
int launcherWorldRank();  // 0 when not started by a launcher
// MPI_COMM_WORLD over `backend`'s memory: initializes MPI (once per process; finalized at exit).
// Throws CommError when MPI cannot start.
std::unique_ptr<Communicator> makeMpiCommunicator(kernels::Backend* backend);
// Ends every rank of the job (MPI_Abort) when MPI runs; otherwise returns.
void abortRanks(int code);

// Whether this build has the NCCL communicator (CUDA on and libnccl + nccl.h found at configure
// time); when not, makeNcclCommunicator throws CommError saying why.
bool ncclCompiled();
// NCCL between GPU ranks, one rank per process on CUDA device `device` (cudaSetDevice). Buffers
// are CUDA device memory (the CUDA backend's); operations run on the communicator's own stream,
// ordered after the work already queued on the device's default stream. `bootstrap` (MPI, or
// makeSingleCommunicator() for one rank) carries the NCCL unique id at creation, and barrier(),
// the host reductions and gatherStrings afterwards: it must outlive the returned communicator,
// whose timeoutSeconds and interrupt start as the bootstrap's. Collective over the bootstrap's
// ranks; throws CommError (on every rank) when a device or NCCL cannot start.
std::unique_ptr<Communicator> makeNcclCommunicator(Communicator* bootstrap, int device);

}  // namespace ts::engine
