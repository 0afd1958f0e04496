// The NCCL communicator: compiled in wherever the CUDA toolkit ships NCCL, a clear CommError
// (never a crash) without a GPU, and with a GPU the identity of every collective on one rank
// over device buffers, ordered after the backend's default-stream work. The GPU case skips with
// makeCudaBackend's reason when no GPU answers (multi-rank NCCL needs one GPU per rank: run
// where several exist). Lives in engine_tests (tests/engine globs its sources).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "trainscope/engine/parallel/Communicator.h"
#include "trainscope/kernels/Backend.h"

namespace ts::engine {
namespace {

namespace fs = std::filesystem;

bool cudaCompiled() {
  const auto names = kernels::compiledBackends();
  return std::find(names.begin(), names.end(), "cuda") != names.end();
}

TEST(NcclCommunicator, CompiledWhereTheCudaToolkitHasNccl) {
  const bool toolkitHasNccl = fs::exists("/usr/local/cuda/include/nccl.h") &&
                              (fs::exists("/usr/local/cuda/lib/libnccl.so") ||
                               fs::exists("/usr/local/cuda/lib64/libnccl.so"));
  if (toolkitHasNccl && cudaCompiled()) {
    EXPECT_TRUE(ncclCompiled()) << "/usr/local/cuda has nccl.h and libnccl.so and CUDA is built "
                                   "in, yet the NCCL communicator was not compiled";
  } else {
    RecordProperty("nccl_compiled", ncclCompiled() ? "yes" : "no");
  }
}

TEST(NcclCommunicator, WithoutAGpuThrowsCommErrorNamingTheDevice) {
  std::string why;
  if (auto gpu = kernels::makeCudaBackend(&why))
    GTEST_SKIP() << "a GPU answers: SingleRankCollectivesOnDeviceMemory covers this build";
  auto boot = makeSingleCommunicator();
  for (int device : {0, 3}) {
    try {
      auto comm = makeNcclCommunicator(boot.get(), device);
      ADD_FAILURE() << "an NCCL communicator started without a GPU";
    } catch (const CommError& e) {
      const std::string msg = e.what();
      RecordProperty("message_device_" + std::to_string(device), msg);
      EXPECT_NE(msg.find("device " + std::to_string(device)), std::string::npos) << msg;
    }
  }
  // Still usable afterwards: nothing was left half-initialized in the bootstrap.
  EXPECT_EQ(boot->allReduceMax(2.0), 2.0);
}

TEST(NcclCommunicator, NoBootstrapIsACommError) {
  EXPECT_THROW(makeNcclCommunicator(nullptr, 0), CommError);
}

TEST(NcclCommunicator, SingleRankCollectivesOnDeviceMemory) {
  std::string why;
  auto gpu = kernels::makeCudaBackend(&why);
  if (!gpu) GTEST_SKIP() << "no CUDA backend: " << why;
  if (!ncclCompiled()) GTEST_SKIP() << "this build has no NCCL";
  auto boot = makeSingleCommunicator();
  auto comm = makeNcclCommunicator(boot.get(), 0);
  EXPECT_EQ(comm->name(), "nccl");
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->size(), 1);

  constexpr int64_t n = 1000;
  std::vector<float> host(n);
  for (int64_t i = 0; i < n; ++i) host[size_t(i)] = 0.5f * float(i) - 7.f;
  auto* a = static_cast<float*>(gpu->allocate(n * sizeof(float)));
  auto* b = static_cast<float*>(gpu->allocate(n * sizeof(float)));
  auto back = [&](const float* p) {
    std::vector<float> h(n);
    gpu->copyToHost(h.data(), p, n * sizeof(float));
    return h;
  };
  std::vector<float> scaled = host;
  for (float& v : scaled) v *= 3.f;

  // All-reduce in place, after a kernel still queued on the default stream: it sees the scale.
  gpu->copyToDevice(a, host.data(), n * sizeof(float));
  gpu->scale(a, n, 3.f);
  auto p = comm->allReduceSum(a, n);
  p->wait();
  EXPECT_TRUE(p->test());
  EXPECT_EQ(back(a), scaled);
  comm->allReduceSum(a, 0)->wait();

  // Reduce-scatter: one part, out of place and in place.
  gpu->copyToDevice(b, host.data(), n * sizeof(float));
  comm->reduceScatterSum(a, b, {n})->wait();
  EXPECT_EQ(back(b), scaled);
  comm->reduceScatterSum(b, b, {n})->wait();
  EXPECT_EQ(back(b), scaled);

  // All-gather in place, fp32 and 16-bit elements.
  comm->allGather(a, {n}, sizeof(float))->wait();
  EXPECT_EQ(back(a), scaled);
  comm->allGather(a, {2 * n}, 2)->wait();
  EXPECT_EQ(back(a), scaled);

  // Broadcast and gather of bytes.
  comm->broadcast(a, n * int64_t(sizeof(float)), 0);
  EXPECT_EQ(back(a), scaled);
  gpu->copyToDevice(b, host.data(), n * sizeof(float));
  comm->gatherBytes(a, n * int64_t(sizeof(float)), b, 0);
  EXPECT_EQ(back(b), scaled);

  // Host values through the bootstrap; one rank sends nothing.
  comm->barrier();
  EXPECT_EQ(comm->allReduceSum(2.5), 2.5);
  EXPECT_EQ(comm->allReduceMax(-1.5), -1.5);
  EXPECT_EQ(comm->gatherStrings("rank0", 0), std::vector<std::string>{"rank0"});
  EXPECT_EQ(comm->takeBytesSent(), 0);

  // Wrong shapes are errors, not device faults.
  EXPECT_THROW(comm->reduceScatterSum(a, b, {n, n}), CommError);
  EXPECT_THROW(comm->broadcast(a, 4, 1), CommError);

  comm.reset();
  gpu->release(a);
  gpu->release(b);
}

}  // namespace
}  // namespace ts::engine
