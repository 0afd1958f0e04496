// QLoRA (finetune.base_quant nf4). First against bitsandbytes (tools/make_nf4_golden.py,
// tests/data/nf4/, its CPU quantize_4bit with compress_statistics=True): the packed codes, both
// levels of scales and the dequantized values, bit for bit. Then the model: an NF4 base is
// exactly a LoRA model whose frozen base holds the dequantized weights and multiplies them in
// bf16 GEMMs (logits and adapter gradients bitwise, both architectures, on the cpu and the
// guarded backend), it stores no other copy of those weights, and a QLoRA run fine-tunes a
// trained base, resuming from its adapter checkpoints bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <tuple>

#include "../../support/TestBackends.h"
#include "../../support/TrainerHarness.h"
#include "trainscope/core/plan/Estimator.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/kernels/DynamicMap.h"
#include "trainscope/kernels/Nf4.h"
#include "trainscope/kernels/Numeric.h"

using namespace ts::engine;
using ts::core::MemoryCategory;
using ts::core::MemoryTier;
using ts::testsupport::hostCopy;
namespace fs = std::filesystem;

namespace {
uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}
}  // namespace

TEST(Nf4Golden, BytesScalesAndValuesEqualBitsandbytes) {
  auto f = SafetensorsFile::load(std::string(TRAINSCOPE_TEST_DATA) + "/nf4/nf4.safetensors");
  const auto code = f.f32("nf4.code");
  for (int k = 0; k < 16; ++k) EXPECT_EQ(bits(ts::kernels::nf4Value(k)), bits(code[size_t(k)]));
  const auto map = ts::kernels::dynamicMap(true), dqCode = f.f32("dq.code");
  for (size_t k = 0; k < 256; ++k) EXPECT_EQ(bits(map[k]), bits(dqCode[k])) << k;
  for (const std::string backendName : ts::testsupport::engineTestBackends()) {
    auto be = ts::testsupport::makeTestBackend(backendName);
    for (const std::string x : {"a", "b", "c", "d"}) {
      const auto in = f.f32(x + ".input");
      const int64_t n = int64_t(in.size());
      const ts::kernels::Nf4Layout q{n};
      std::vector<uint8_t> packed(size_t(q.packedBytes())), codes(size_t(q.blocks()));
      std::vector<float> scales(size_t(q.scaleCount()));
      ts::kernels::quantizeNf4(in.data(), n, packed.data(), codes.data(), scales.data());
      const auto wantPacked = f.bytes(x + ".packed");
      ASSERT_EQ(wantPacked.size(), packed.size()) << x;
      EXPECT_EQ(std::memcmp(packed.data(), wantPacked.data(), packed.size()), 0) << x;
      const auto wantCodes = f.bytes(x + ".dq.absmax_codes");
      ASSERT_EQ(wantCodes.size(), codes.size()) << x;
      EXPECT_EQ(std::memcmp(codes.data(), wantCodes.data(), codes.size()), 0) << x;
      EXPECT_EQ(bits(scales[0]), bits(f.f32(x + ".dq.offset")[0])) << x << " offset";
      const auto s2 = f.f32(x + ".dq.state2_absmax");
      ASSERT_EQ(s2.size() + 1, scales.size()) << x;
      for (size_t i = 0; i < s2.size(); ++i) EXPECT_EQ(bits(scales[1 + i]), bits(s2[i])) << x;
      // Dequantized through the backend's op, from its own memory, outputs poisoned first.
      auto up = [&](const void* src, size_t bytes) {
        void* d = be->allocate(bytes);
        be->copyToDevice(d, src, bytes);
        return d;
      };
      void* dp = up(packed.data(), packed.size());
      void* dc = up(codes.data(), codes.size());
      void* ds = up(scales.data(), scales.size() * sizeof(float));
      void* dm = up(map.data(), map.size() * sizeof(float));
      std::vector<float> nan(size_t(n), std::numeric_limits<float>::quiet_NaN());
      std::vector<uint16_t> nan16(size_t(n), 0x7FC1);
      float* out = static_cast<float*>(up(nan.data(), nan.size() * sizeof(float)));
      uint16_t* out16 = static_cast<uint16_t*>(up(nan16.data(), nan16.size() * 2));
      auto args = [&] {
        return std::tuple{static_cast<const uint8_t*>(dp), static_cast<const uint8_t*>(dc),
                          static_cast<const float*>(ds), static_cast<const float*>(dm)};
      };
      auto [pp, cc, ss, mm] = args();
      be->dequantizeNf4(out, pp, cc, ss, mm, n);
      be->dequantizeNf4Bf16(out16, pp, cc, ss, mm, n);
      const auto got = hostCopy(*be, out, n);
      const auto got16 = hostCopy(*be, out16, n);
      const auto want = f.f32(x + ".dq.dequant");
      int wrong = 0, wrong16 = 0;
      for (int64_t i = 0; i < n; ++i) {
        wrong += bits(got[size_t(i)]) != bits(want[size_t(i)]);
        wrong16 += got16[size_t(i)] != ts::kernels::floatToBf16(want[size_t(i)]);
      }
      EXPECT_EQ(wrong, 0) << x << " on " << backendName << ": values not bitwise bitsandbytes'";
      EXPECT_EQ(wrong16, 0) << x << " on " << backendName;
      for (void* p : {dp, dc, ds, dm, static_cast<void*>(out), static_cast<void*>(out16)})
        be->release(p);
    }
  }
}

// 4.127 bits/param asymptotically; the engine's bytes per tensor are the estimator's formula.
TEST(Nf4Golden, StorageIsTheFormula) {
  for (int64_t n : {int64_t(64), int64_t(65), int64_t(6144), int64_t(1) << 24}) {
    const ts::kernels::Nf4Layout q{n};
    EXPECT_EQ(double(q.bytes()), ts::core::blockwiseQuantBytes(double(n), 4, 64, true)) << n;
  }
  const ts::kernels::Nf4Layout big{int64_t(64) * 256 * 4096};
  EXPECT_NEAR(8.0 * double(big.bytes()) / double(big.n), 4.127, 5e-4);
}

namespace {
GptConfig tinyQ(const std::string& arch) {
  GptConfig c;
  c.architecture = arch;
  c.layers = 2;
  c.heads = 4;
  c.kvHeads = arch == "llama" ? 2 : 0;
  c.d_model = 32;
  c.dFf = arch == "llama" ? 40 : 0;
  c.seq_len = 8;
  c.vocab = 11;
  c.working = DType::BF16;
  c.lora.r = 4;
  c.lora.alpha = 8;
  c.lora.targets = arch == "llama" ? std::vector<std::string>{"q_proj", "v_proj", "down_proj"}
                                   : std::vector<std::string>{"c_attn", "mlp.c_proj"};
  return c;
}
const std::vector<int32_t> kTok = {1, 4, 6, 0, 2, 3, 3, 5, 1, 6, 7, 8, 9, 10, 2, 1};
const std::vector<int32_t> kTgt = {4, 6, 0, 2, 3, 3, 5, 1, 6, 7, 8, 9, 10, 2, 1, 0};
constexpr int kB = 2, kT = 8;

class QloraOn : public ::testing::TestWithParam<std::string> {};
}  // namespace

TEST_P(QloraOn, IsLoraOnTheDequantizedBaseInBf16GemmsBitwise) {
  for (const std::string arch : {"gpt2", "llama"}) {
    auto be = ts::testsupport::makeTestBackend(GetParam());
    MemoryTracker tq, tl;
    GptConfig cq = tinyQ(arch);
    cq.nf4Base = true;
    GptConfig cl = tinyQ(arch);
    cl.bf16Gemm = true;
    Gpt q(cq, be.get(), &tq), l(cl, be.get(), &tl);
    q.initWeights(5);
    l.initWeights(5);
    // The NF4 model keeps no fp32 or bf16 value of its quantized weights.
    int64_t quantized = 0;
    double formula = 0;
    for (const auto& p : q.params())
      if (p.quantized()) {
        EXPECT_EQ(p.offset, -1);
        EXPECT_FALSE(p.trainable());
        EXPECT_EQ(p.spec.role, ts::core::TensorRole::LinearWeight);
        quantized += p.numel;
        formula += ts::core::blockwiseQuantBytes(double(p.numel), 4, 64, true);
        // The LoRA model's base: what the NF4 weights dequantize to.
        const auto w = q.arena().dequantizedToHost(p);
        be->copyToDevice(l.param(*l.find(p.name)), w.data(), w.size() * sizeof(float));
      }
    l.arena().roundWeights();
    ASSERT_GT(quantized, 0);
    EXPECT_EQ(q.arena().size(), q.numParams() - quantized) << arch;
    EXPECT_EQ(double(q.arena().nf4Bytes()), formula) << arch;
    // Parameters: the bf16 values of the rest plus the NF4 bytes, exactly.
    EXPECT_EQ(tq.current(MemoryTier::Device, MemoryCategory::Parameters),
              2 * q.arena().size() + q.arena().nf4Bytes())
        << arch;
    // Not the original weights: quantization moved them (and the loaded copy is what is used).
    {
      MemoryTracker t0;
      GptConfig c0 = tinyQ(arch);
      Gpt orig(c0, be.get(), &t0);
      orig.initWeights(5);
      const ParamInfo* pp =
          q.find(arch == "llama" ? "model.layers.0.mlp.down_proj.weight" : "h.0.mlp.c_proj.weight");
      ASSERT_NE(pp, nullptr);
      const ParamInfo& p = *pp;
      EXPECT_NE(q.arena().dequantizedToHost(p), orig.arena().hostValues(*orig.find(p.name)));
    }
    q.allocate(kB);
    l.allocate(kB);
    int64_t count = 0;
    const double lq = q.forward(kTok.data(), kTgt.data(), kB, kT, 1.f / 16, &count);
    const double ll = l.forward(kTok.data(), kTgt.data(), kB, kT, 1.f / 16, &count);
    EXPECT_EQ(lq, ll) << arch;
    q.zeroGrad();
    l.zeroGrad();
    q.backward();
    l.backward();
    for (const auto& p : q.params()) {
      if (!p.trainable()) continue;
      const ParamInfo& pl = *l.find(p.name);
      EXPECT_EQ(hostCopy(*be, q.grad(p), p.numel), hostCopy(*be, l.grad(pl), pl.numel))
          << arch << " " << p.name;
    }
    // Nonzero adapter gradients: B's (A's are zero while B = 0).
    bool any = false;
    for (const auto& p : q.params())
      if (p.spec.role == ts::core::TensorRole::LoraB)
        for (float g : hostCopy(*be, q.grad(p), p.numel)) any |= g != 0.f;
    EXPECT_TRUE(any) << arch;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, QloraOn,
                         ::testing::ValuesIn(ts::testsupport::engineTestBackends()),
                         ts::testsupport::backendParamName);

// A trained base fine-tuned with adapters on its NF4 copy: the loss falls, checkpoints hold
// only the adapters, and a resumed run repeats the steps bit for bit (the base is re-quantized
// from the same checkpoint, deterministically). The run reports the NF4 storage.
TEST(QloraTrainer, FineTunesAnNf4BaseAndResumesBitwise) {
  using ts::core::EventType;
  using ts::testsupport::Recorded;
  for (const char* arch : {"gpt2", "llama"}) {
    auto c = ts::testsupport::tinyAdditionConfig();
    c.model.arch = arch;
    if (c.model.arch == "llama") c.model.kv_heads = 1;
    const fs::path baseDir = ts::testsupport::tempDir("qlora_base", arch);
    Recorded baseRec;
    ASSERT_EQ(ts::testsupport::runTrainer(c, baseRec, baseDir.string()).status, "completed");
    const std::string base = (baseDir / "checkpoints" / "step_00000012").string();
    auto f = c;
    f.finetune.base_checkpoint = base;
    f.finetune.base_quant = "nf4";
    f.finetune.lora.r = 4;
    f.finetune.lora.alpha = 8;
    f.finetune.lora.targets = {"q", "v", "o", "fc", "proj"};
    f.optimizer.lr = 3e-3;
    f.train.checkpoint_every = 6;
    const fs::path dirA = ts::testsupport::tempDir("qlora_a", arch);
    Recorded full;
    auto res = ts::testsupport::runTrainer(f, full, dirA.string());
    ASSERT_EQ(res.status, "completed") << res.reason;
    const auto steps = full.of(EventType::Step);
    ASSERT_EQ(steps.size(), 12u);
    EXPECT_LT(steps.back()["loss"].get<double>(), steps.front()["loss"].get<double>()) << arch;
    bool logged = false;
    for (const auto& e : full.of(EventType::Log))
      logged |= e["message"].get<std::string>().find("stored as NF4") != std::string::npos;
    EXPECT_TRUE(logged) << arch;
    const fs::path ck6 = dirA / "checkpoints" / "step_00000006";
    auto mf = SafetensorsFile::load((ck6 / "model.safetensors").string());
    for (const auto& [name, e] : mf.entries())
      EXPECT_NE(name.find(".lora_"), std::string::npos) << name << ": only adapters are written";
    const fs::path dirB = ts::testsupport::tempDir("qlora_b", arch);
    Recorded resumed;
    ts::testsupport::RunOptions ro;
    ro.resume = ck6.string();
    ASSERT_EQ(ts::testsupport::runTrainer(f, resumed, dirB.string(), ro).status, "completed");
    const auto rs = resumed.of(EventType::Step);
    ASSERT_EQ(rs.size(), 6u);
    for (size_t i = 0; i < 6; ++i)
      EXPECT_EQ(steps[6 + i]["loss"].get<double>(), rs[i]["loss"].get<double>()) << arch << i;
    fs::remove_all(dirA);
    fs::remove_all(dirB);
    fs::remove_all(baseDir);
  }
}

// An NF4 base multiplies in bf16 GEMMs: fp8 is refused before a run starts, naming the key.
TEST(QloraTrainer, Fp8WithAnNf4BaseIsRefusedNamingTheKey) {
  auto c = ts::testsupport::tinyAdditionConfig();
  c.finetune.base_quant = "nf4";
  c.finetune.lora.r = 2;
  c.precision.policy = "fp8";
  const auto issues = unsupportedFeatures(c);
  ASSERT_EQ(issues.size(), 1u);
  EXPECT_EQ(issues[0].path, "finetune.base_quant");
  EXPECT_NE(issues[0].message.find("use precision.policy bf16 or fp32"), std::string::npos)
      << issues[0].message;
  c.precision.policy = "bf16";
  EXPECT_TRUE(unsupportedFeatures(c).empty());
}
