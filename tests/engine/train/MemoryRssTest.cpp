// The memory tracker's "measured" bytes are its own bookkeeping; this test holds them against
// what the operating system sees. A training run of a model big enough to dwarf the process's
// fixed costs (d_model 512, 4 layers: ~13M parameters, ~200 MB of fp32 model states) runs
// in-process, checkpoint included, and the growth of the resident set's high-water mark must
// match the tracker's peak: anything big the engine allocates without telling the tracker (a
// host copy of the weights, a kernel's scratch) shows up as RSS the tracker does not explain.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "../../support/TrainerHarness.h"
#include "trainscope/engine/params/MemoryTracker.h"

#if defined(__SANITIZE_ADDRESS__)
#define TS_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TS_UNDER_ASAN 1
#endif
#endif

namespace ts {
namespace {

// Restarts VmHWM from the current RSS (Linux ≥ 4.0); false where the kernel refuses.
bool resetPeakRss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

TEST(MemoryRss, TrackedPeakExplainsTheProcessRssGrowth) {
#ifdef TS_UNDER_ASAN
  GTEST_SKIP() << "AddressSanitizer's shadow memory and quarantine make RSS meaningless";
#endif
  core::RunConfig c = testsupport::tinyAdditionConfig();
  c.model.layers = 4;
  c.model.heads = 8;
  c.model.d_model = 512;
  c.model.seq_len = 128;
  c.data.digits = 3;
  c.train.steps = 2;
  c.train.micro_batch = 8;
  c.train.grad_accum = 1;
  c.train.eval_every = 0;
  c.device.threads = 1;
  const auto dir = testsupport::tempDir("rss", "peak");

  const int64_t rss0 = engine::processRssBytes();
  if (rss0 <= 0 || !resetPeakRss()) GTEST_SKIP() << "no /proc/self/status or clear_refs here";
  ASSERT_LE(engine::processPeakRssBytes() - rss0, 4 << 20) << "VmHWM did not restart";

  testsupport::Recorded rec;
  testsupport::RunOptions o;
  o.exactMatchSamples = 2;
  o.evalBatches = 1;
  const auto r = testsupport::runTrainer(c, rec, dir.string(), o);
  ASSERT_EQ(r.status, "completed") << r.reason;
  ASSERT_FALSE(r.lastCheckpoint.empty()) << "the run must end with its final checkpoint";

  const double growth = double(engine::processPeakRssBytes() - rss0);
  const double tracked = double(r.peakBytes);
  const double mib = 1024.0 * 1024.0;
  ASSERT_GT(tracked, 150 * mib) << "the model must dwarf the process's fixed costs";
  std::printf("RSS growth %.1f MiB, tracked peak %.1f MiB (ratio %.3f)\n", growth / mib,
              tracked / mib, growth / tracked);
  // The bound: what the tracker counts is really touched (≥ 0.9×), and everything else the run
  // holds at once (oneDNN's JIT code and scratchpad, thread stacks, the allocator's slack, the
  // checkpoint writer's one chunk buffer) stays under 10% + 64 MiB.
  EXPECT_GE(growth, 0.9 * tracked) << "the tracker counts memory the process never touched";
  EXPECT_LE(growth, 1.1 * tracked + 64 * mib)
      << "the process grew by memory the tracker does not know about";
  testsupport::tempDir("rss", "peak");  // leaves an empty folder, not 200 MB of checkpoint
}

}  // namespace
}  // namespace ts
