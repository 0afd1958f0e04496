#include "trainscope/engine/platform/Capabilities.h"

#include "trainscope/engine/platform/GemmCalibration.h"

#include <cpuid.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <thread>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::engine {

namespace {
uint64_t xgetbv0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}
}  // namespace

CpuFeatures detectCpuFeatures() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool ymm = (xcr0 & 0x6) == 0x6;            // OS saves SSE + AVX state
  const bool zmm = ymm && (xcr0 & 0xE0) == 0xE0;   // + opmask, ZMM
  const bool tiles = (xcr0 & 0x60000) == 0x60000;  // AMX TILECFG + TILEDATA
  f.fma = ymm && (c & (1u << 12));
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = ymm && (b & (1u << 5));
    f.avx512f = zmm && (b & (1u << 16));
    f.avx512bw = zmm && (b & (1u << 30));
    f.amx_bf16 = tiles && (d & (1u << 22));
    f.amx_tile = tiles && (d & (1u << 24));
    f.amx_int8 = tiles && (d & (1u << 25));
  }
  if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = zmm && (a & (1u << 5));
  return f;
}

std::vector<std::string> CpuFeatures::names() const {
  std::vector<std::string> n;
  if (avx2) n.push_back("avx2");
  if (fma) n.push_back("fma");
  if (avx512f) n.push_back("avx512f");
  if (avx512bw) n.push_back("avx512bw");
  if (avx512_bf16) n.push_back("avx512_bf16");
  if (amx_tile) n.push_back("amx_tile");
  if (amx_bf16) n.push_back("amx_bf16");
  if (amx_int8) n.push_back("amx_int8");
  return n;
}

std::string cpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown CPU";
}

nlohmann::json capabilitiesJson() {
  using nlohmann::json;
  json j;
  j["engine_version"] = TRAINSCOPE_VERSION;
  j["protocol_version"] = core::kProtocolVersion;
  const auto f = detectCpuFeatures();
  json backends = json::array();
  json devices = json::array();
  const auto compiled = kernels::compiledBackends();
  auto isCompiled = [&](const std::string& n) {
    for (const auto& c : compiled)
      if (c == n) return true;
    return false;
  };
  {
    auto cpu = kernels::makeCpuBackend();
    backends.push_back({{"name", "cpu"}, {"compiled", true}, {"usable", true}});
    auto dev = cpu->device();
    devices.push_back({{"kind", "cpu"},
                       {"name", dev.name.empty() ? cpuModelName() : dev.name},
                       {"memory_bytes", dev.memory_bytes},
                       {"features", f.names()}});
  }
  {
    std::string why;
    std::unique_ptr<kernels::Backend> cuda;
    if (isCompiled("cuda"))
      cuda = kernels::makeCudaBackend(&why);
    else
      why = "this build has no CUDA backend (built without nvcc)";
    json b = {{"name", "cuda"}, {"compiled", isCompiled("cuda")}, {"usable", cuda != nullptr}};
    if (!cuda) b["why"] = why;
    backends.push_back(b);
    if (cuda) {
      auto dev = cuda->device();
      devices.push_back({{"kind", "cuda"},
                         {"name", dev.name},
                         {"memory_bytes", dev.memory_bytes},
                         {"features", dev.features}});
    }
  }
  j["backends"] = backends;
  j["devices"] = devices;
  j["cpu"] = {{"model", cpuModelName()},
              {"threads", std::thread::hardware_concurrency()},
              {"avx2", f.avx2},
              {"fma", f.fma},
              {"avx512f", f.avx512f},
              {"avx512_bf16", f.avx512_bf16},
              {"amx", f.amx_tile && f.amx_bf16},
              {"amx_bf16", f.amx_bf16},
              {"features", f.names()}};
  const std::string later = "not implemented by this engine yet";
  auto cap = [](bool ok, const std::string& why = "") {
    json c = {{"supported", ok}};
    if (!ok) c["why"] = why;
    return c;
  };
  // bf16 GEMMs (precision.gemm): native where oneDNN has a bf16 kernel for this CPU; "auto"
  // uses them where that kernel measured faster than sgemm here (GemmCalibration).
  std::string gemmImpl;
  const bool nativeGemm = kernels::cpu::matmulBf16Native(&gemmImpl);
  json bf16 = cap(true);
  bf16["native_gemm"] = nativeGemm;
  bf16[nativeGemm ? "gemm_impl" : "gemm_why"] = gemmImpl;
  bf16["auto_gemm"] = autoPicksBf16Gemm(kernels::makeCpuBackend().get()) ? "bf16" : "fp32";
  bf16["gemm_calibration"] = toJson(gemmCalibration());
  // fp16 and fp8 on the CPU: stored and rounded in their format, multiplied in fp32.
  json fp16 = cap(true);
  fp16["gemm"] = kernels::cpu::hasF16cConversion()
                     ? "fp32 math on fp16-rounded values (F16C conversion, vectorised)"
                     : "fp32 math on fp16-rounded values (scalar conversion: this CPU has no F16C)";
  json fp8 = cap(true);
  fp8["gemm"] =
      "emulated: operands quantized to E4M3/E5M2 values with their scales, multiplied in fp32 "
      "(saves no time on a CPU)";
  // `backends`: where the engine runs it (absent: every backend); the same rule as
  // unsupportedFeatures in Trainer.cpp, so the GUI refuses what a launch would.
  auto onlyOn = [](json c, std::vector<std::string> backends, std::string why) {
    c["backends"] = std::move(backends);
    c["backends_why"] = std::move(why);
    return c;
  };
  // On cuda: bf16 GEMMs through cuBLAS (tensor cores, fp32 accumulation) where the GPU has
  // bf16 (sm_80+; precision.gemm auto picks them there); fp16 and fp8 as on the CPU (rounded
  // operands, fp32 GEMMs). The fp32 windows of the 16-bit policies give pages back through the
  // driver's virtual memory management.
  bf16["cuda_gemm"] = "cuBLAS bf16 tensor-core GEMMs with fp32 accumulation (sm_80 and newer)";
  fp16["cuda_gemm"] = "fp32 GEMMs on fp16-rounded values";
  fp8["cuda_gemm"] = "emulated: fp8-quantized operands with their scales, fp32 GEMMs";
  j["precisions"] = {{"fp32", cap(true)},
                     // 16-bit stored weights/grads; GEMMs per precision.gemm
                     {"bf16", bf16},
                     {"fp16", fp16},
                     // GEMM operands quantized to real fp8 values (E4M3/E5M2, delayed or block
                     // scaling), multiplied in fp32: emulated, not faster
                     {"fp8", fp8},
                     {"pure_bf16", bf16}};
  j["techniques"] = {
      {"gradient_accumulation", cap(true)},
      // flash on cuda under the bf16-working policies: our bf16 tensor-core kernel (head dims
      // 64 and 128, sm_80+); otherwise (and on the CPU) the fp32 flash kernels.
      {"flash_attention",
       [&] {
         json f = cap(true);
         f["cuda_bf16"] =
             "bf16 tensor-core kernel (mma.sync, fp32 accumulation) for head dims 64 and 128 on "
             "sm_80 and newer under bf16, fp8 and pure_bf16; fp32 kernels otherwise";
         f["cpu"] = "fp32 tiles on oneDNN GEMMs under every policy";
         return f;
       }()},
      {"lr_schedule", cap(true)},
      {"curriculum", cap(true)},
      {"profiling", cap(true)},
      {"checkpoint_resume", cap(true)},
      {"mixed_precision", cap(true)},
      {"activation_checkpointing", cap(true)},
      // int8 packs with backend ops (every backend); sparse packs on host pointers.
      {"activation_compression", cap(true)},
      {"activation_compression_sparse",
       onlyOn(cap(true), {"cpu"}, "sparse packing runs on the host; int8 runs on every backend")},
      // parallel.ranks > 1 under mpirun (MPI; NCCL where GPUs are), ZeRO stages 0-3. Stages 2
      // and 3 give unowned pages back (on cuda through virtual memory management).
      {"zero",
       [&] {
         json z = cap(true);
         z["communicator"] = "mpi";
         z["stages"] = {0, 1, 2, 3};
         z["cuda_stages"] = {0, 1, 2, 3};
         z["limits"] =
             "a QLoRA base's NF4 "
             "weights stay whole on every rank";
         return z;
       }()},
      // parallel.offload_optimizer cpu | nvme (ZeRO >= 1): AdamW state on the host or in files;
      // parallel.offload_params cpu | nvme (ZeRO-3): the parameter shard there between uses.
      {"offload",
       [&] {
         json o = cap(true);
         o["optimizer"] = {"cpu", "nvme"};
         o["params"] = {"cpu", "nvme"};
         return o;
       }()},
      {"lora", cap(true)},  // finetune.lora on any policy; bases from trainscope checkpoints
      // finetune.base_quant nf4: frozen linears as NF4 (double quantization), bf16 GEMMs
      {"qlora", cap(true)},
      {"optimizer_8bit", cap(true)},  // optimizer.state_bits 8 with adamw
      // distill.*: a frozen forward-only teacher (fp32, bf16 or NF4), KL at temperature T
      {"distillation", cap(true)},
  };
  j["architectures"] = core::modelFamilyNames();  // model.arch (core/model/ModelFamily.h)
  j["optimizers"] = {"adamw", "sgd"};
  j["attention"] = {"naive", "flash"};
  return j;
}

void ensurePassiveOmpWaitPolicy() {
  if (std::getenv("OMP_WAIT_POLICY")) return;
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> args;
  size_t start = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i] == '\0') {
      args.push_back(all.substr(start, i - start));
      start = i + 1;
    }
  }
  if (args.empty()) return;
  setenv("OMP_WAIT_POLICY", "passive", 0);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  // exec failed: continue with whatever policy libgomp picked.
}

}  // namespace ts::engine
