#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "trainscope/kernels/Backend.h"

using namespace ts::kernels;

TEST(Backend, CpuBackendIdentifiesItself) {
  auto b = makeCpuBackend();
  ASSERT_TRUE(b);
  EXPECT_EQ(b->kind(), DeviceKind::Cpu);
  EXPECT_EQ(b->name(), "cpu");
  const DeviceInfo info = b->device();
  EXPECT_EQ(info.kind, DeviceKind::Cpu);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.memory_bytes, int64_t(1) << 28);
  EXPECT_TRUE(b->supports(Op::Matmul));
  EXPECT_TRUE(b->supports(Op::FlashAttention));
  EXPECT_TRUE(b->supports(Op::AdamW));
}

// Every OpList.h entry is a CPU op (the CPU backend implements them all), every kind has a
// name, and only MatmulBF16 takes non-fp32 operands (Convert takes fp32 and the formats it
// converts to).
TEST(Backend, CpuSupportsEveryListedOp) {
  auto b = makeCpuBackend();
  int entries = 0;
#define TS_OP(kind, ret, name, params, args)                                         \
  EXPECT_TRUE(b->supports(Op::kind)) << #name;                                       \
  EXPECT_STREQ(opName(Op::kind), #kind);                                             \
  EXPECT_EQ(b->supports(Op::kind, DType::F32), Op::kind != Op::MatmulBF16) << #name; \
  ++entries;
#include "trainscope/kernels/OpList.h"
  EXPECT_GE(entries, 20);
  EXPECT_TRUE(b->supports(Op::MatmulBF16, DType::BF16));
  EXPECT_FALSE(b->supports(Op::Matmul, DType::BF16));
  EXPECT_FALSE(b->supports(Op::LayerNorm, DType::F16));
  // The conversions go between fp32 and the 16- and 8-bit float formats.
  for (DType d : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2})
    EXPECT_TRUE(b->supports(Op::Convert, d)) << dtypeName(d);
  EXPECT_FALSE(b->supports(Op::Convert, DType::I8));
  EXPECT_FALSE(b->supports(Op::Convert, DType::NF4));
  EXPECT_STREQ(opName(Op::Convert), "Convert");
}

TEST(Backend, FactoryByName) {
  std::string why;
  auto cpu = makeBackend("cpu", &why);
  ASSERT_TRUE(cpu);
  EXPECT_EQ(cpu->name(), "cpu");

  why.clear();
  EXPECT_EQ(makeBackend("tpu", &why), nullptr);
  EXPECT_NE(why.find("tpu"), std::string::npos);
  EXPECT_NE(why.find("auto, cpu, cuda"), std::string::npos);

  auto any = makeBackend("auto", &why);
  ASSERT_TRUE(any);
}

TEST(Backend, CudaUnavailableGivesReason) {
  const auto names = compiledBackends();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names.front(), "cpu");
  const bool built = std::find(names.begin(), names.end(), "cuda") != names.end();
  std::string why;
  auto cuda = makeCudaBackend(&why);
  if (!built) {
    EXPECT_EQ(cuda, nullptr);
  }
  if (!cuda) {
    EXPECT_FALSE(why.empty());
    auto fallback = makeBackend("auto", &why);
    ASSERT_TRUE(fallback);
    EXPECT_EQ(fallback->name(), "cpu");
  } else {
    EXPECT_EQ(cuda->kind(), DeviceKind::Cuda);
  }
}

TEST(Backend, AllocationIsAlignedAndWritable) {
  auto b = makeCpuBackend();
  for (size_t bytes : {1u, 7u, 64u, 1000u, 1u << 20}) {
    void* p = b->allocate(bytes);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u);
    std::fill_n(static_cast<char*>(p), bytes, 1);
    b->release(p);
  }
  EXPECT_EQ(b->allocate(0), nullptr);
  b->release(nullptr);
}

TEST(Backend, ThreadsFollowSetThreads) {
  auto b = makeCpuBackend();
  b->setThreads(1);
  EXPECT_EQ(b->threads(), 1);
  b->setThreads(2);
  EXPECT_EQ(b->threads(), 2);
  b->setThreads(0);
  EXPECT_GE(b->threads(), 1);
}

TEST(DType, NamesAndBits) {
  EXPECT_STREQ(dtypeName(DType::F32), "f32");
  EXPECT_STREQ(dtypeName(DType::BF16), "bf16");
  EXPECT_STREQ(dtypeName(DType::NF4), "nf4");
  EXPECT_EQ(dtypeBits(DType::F32), 32);
  EXPECT_EQ(dtypeBits(DType::BF16), 16);
  EXPECT_EQ(dtypeBits(DType::F16), 16);
  EXPECT_EQ(dtypeBits(DType::F8E4M3), 8);
  EXPECT_EQ(dtypeBits(DType::F8E5M2), 8);
  EXPECT_EQ(dtypeBits(DType::I8), 8);
  EXPECT_EQ(dtypeBits(DType::NF4), 4);
  EXPECT_EQ(dtypeBits(DType::I32), 32);
  EXPECT_EQ(dtypeBits(DType::U16), 16);
}
