// CUPTI collector. Without CUDA: the factory says why there is none. With CUDA (label gpu):
// real kernels, copies and a memset are collected, linked to the launching host range and
// placed on the host clock inside it; skipped, with the reason, only where no GPU answers.
#include <gtest/gtest.h>

#include "trainscope/profiler/DeviceCollector.h"
#include "trainscope/profiler/ProfileSchedule.h"

using namespace ts::profiler;

#ifndef TRAINSCOPE_TEST_CUDA_KERNELS

TEST(CuptiFactory, BuiltWithoutCudaSaysSo) {
  std::string why;
  auto c = makeCuptiCollector(&why);
  EXPECT_EQ(c, nullptr);
  EXPECT_EQ(why, "built without CUDA");
}

#else

#include <map>

// CuptiKernels.cu
bool launchTestWork(int n, int iterations, std::string* error);
bool testGpuPresent(std::string* why);

TEST(CuptiFactory, BuiltWithCupti) {
  std::string why = "unset";
  auto c = makeCuptiCollector(&why);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->name(), "cupti");
  EXPECT_TRUE(why.empty());
}

TEST(CuptiGpu, KernelsLinkToHostRangesOnTheHostClock) {
  std::string why;
  auto collector = makeCuptiCollector(&why);
  ASSERT_NE(collector, nullptr) << why;
  // Only a machine without a GPU skips; with one, CUPTI failing to start is a failure.
  if (std::string noGpu; !testGpuPresent(&noGpu)) GTEST_SKIP() << noGpu;
  ASSERT_TRUE(collector->start(&why)) << "CUPTI did not start with a GPU present: " << why;
  // A second collector must refuse, not steal the first one's buffers.
  auto second = makeCuptiCollector(&why);
  std::string why2;
  EXPECT_FALSE(second->start(&why2));
  EXPECT_FALSE(why2.empty());

  Tracer& tracer = Tracer::instance();
  tracer.drain();
  tracer.setStep(3);
  tracer.setEnabled(true);
  std::string err;
  bool ok = false;
  {
    ScopedRange r("test_work", SpanCategory::Elementwise);
    ok = launchTestWork(1 << 20, 4, &err);
  }
  tracer.setEnabled(false);
  ASSERT_TRUE(ok) << err;
  auto host = tracer.drain();
  auto dev = collector->flush();
  collector->stop();
  EXPECT_FALSE(collector->active());

  ASSERT_EQ(host.size(), 1u);
  const Span& range = host[0];
  int kernels = 0, copies = 0, memsets = 0, runtime = 0;
  for (const Span& s : dev) {
    if (!s.device) {
      ++runtime;
      EXPECT_EQ(s.lane, range.lane) << "runtime call " << s.name << " not on its thread's lane";
      continue;
    }
    if (s.category == SpanCategory::Memcpy && s.name.rfind("memcpy", 0) == 0) ++copies;
    if (s.name == "memset") ++memsets;
    if (s.name.find("scale_kernel") != std::string::npos) {
      ++kernels;
      EXPECT_EQ(s.correlation, range.correlation) << "kernel not linked to its range";
      // GPU time converted to the host clock: the kernel ran inside the host range (which
      // synchronized before closing); 50 us slack for clock calibration.
      EXPECT_GE(s.start_ns, range.start_ns - 50000);
      EXPECT_LE(s.start_ns + s.duration_ns, range.start_ns + range.duration_ns + 50000);
      EXPECT_GT(s.duration_ns, 0);
    }
  }
  EXPECT_EQ(kernels, 4);
  EXPECT_GE(copies, 2);  // HtoD and DtoH
  EXPECT_GE(memsets, 1);
  EXPECT_GT(runtime, 0);  // cudaLaunchKernel & co. on the host lane
  EXPECT_EQ(collector->droppedRecords(), 0);
}

TEST(CuptiGpu, ControllerWindowCarriesDeviceSpans) {
  std::string why;
  auto collector = makeCuptiCollector(&why);
  ASSERT_NE(collector, nullptr) << why;
  // Only a machine without a GPU skips; with one, CUPTI failing to start is a failure.
  if (std::string noGpu; !testGpuPresent(&noGpu)) GTEST_SKIP() << noGpu;
  ASSERT_TRUE(collector->start(&why)) << "CUPTI did not start with a GPU present: " << why;
  collector->stop();
  ProfileController c(ProfileSchedule(0, 1, 2, 1));  // W R S
  c.setDeviceCollector(collector.get());
  std::vector<ProfileWindow> windows;
  std::string err;
  for (int64_t step = 0; step < 3; ++step) {
    c.beginStep(step);
    {
      ScopedRange r("step", SpanCategory::Step);
      ASSERT_TRUE(launchTestWork(1 << 16, 2, &err)) << err;
    }
    if (auto w = c.endStep(step)) windows.push_back(std::move(*w));
  }
  for (const auto& w : c.takeWarnings()) ADD_FAILURE() << "CUPTI warned: " << w;
  ASSERT_EQ(windows.size(), 1u);
  std::map<int64_t, int> kernelsPerStep;
  for (const Span& s : windows[0].spans)
    if (s.device && s.name.find("scale_kernel") != std::string::npos) ++kernelsPerStep[s.step];
  // Warmup step 0's kernels are gone; steps 1 and 2 have 2 each.
  EXPECT_EQ(kernelsPerStep, (std::map<int64_t, int>{{1, 2}, {2, 2}}));
}

#endif
