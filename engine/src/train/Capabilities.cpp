#include "trainscope/engine/train/Capabilities.h"

#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "trainscope/core/model/ModelFamily.h"
#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/engine/model/Gpt.h"
#include "trainscope/engine/platform/GemmCalibration.h"
#include "trainscope/kernels/Backend.h"
#include "trainscope/kernels/CpuOps.h"

namespace ts::engine {

using nlohmann::json;

namespace {
// {"supported": ok}, with "why" when not.
json capability(bool ok, const std::string& why = "") {
  json c = {{"supported", ok}};
  if (!ok) c["why"] = why;
  return c;
}

// `backends`: where the engine runs it (absent: every backend); the same rule as
// unsupportedFeatures in Trainer.cpp, so the GUI refuses what a launch would.
json onlyOn(json c, std::vector<std::string> backends, std::string why) {
  c["backends"] = std::move(backends);
  c["backends_why"] = std::move(why);
  return c;
}

// "backends" (compiled / usable, and why not) and "devices" (the ones usable).
void addBackendsAndDevices(json& j, const CpuFeatures& f) {
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
  j["backends"] = backends;
  j["devices"] = devices;
}

json cpuJson(const CpuFeatures& f) {
  return {{"model", cpuModelName()},
          {"threads", std::thread::hardware_concurrency()},
          {"avx2", f.avx2},
          {"fma", f.fma},
          {"avx512f", f.avx512f},
          {"avx512_bf16", f.avx512_bf16},
          {"amx", f.amx_tile && f.amx_bf16},
          {"amx_bf16", f.amx_bf16},
          {"features", f.names()}};
}

json precisionsJson() {
  // bf16 GEMMs (precision.gemm): native where oneDNN has a bf16 kernel for this CPU; "auto"
  // uses them where that kernel measured faster than sgemm here (GemmCalibration).
  std::string gemmImpl;
  const bool nativeGemm = kernels::cpu::matmulBf16Native(&gemmImpl);
  json bf16 = capability(true);
  bf16["native_gemm"] = nativeGemm;
  bf16[nativeGemm ? "gemm_impl" : "gemm_why"] = gemmImpl;
  bf16["auto_gemm"] = autoPicksBf16Gemm(kernels::makeCpuBackend().get()) ? "bf16" : "fp32";
  bf16["gemm_calibration"] = toJson(gemmCalibration());
  // fp16 and fp8 on the CPU: stored and rounded in their format, multiplied in fp32.
  json fp16 = capability(true);
  fp16["gemm"] = kernels::cpu::hasF16cConversion()
                     ? "fp32 math on fp16-rounded values (F16C conversion, vectorised)"
                     : "fp32 math on fp16-rounded values (scalar conversion: this CPU has no F16C)";
  json fp8 = capability(true);
  fp8["gemm"] =
      "emulated: operands quantized to E4M3/E5M2 values with their scales, multiplied in fp32 "
      "(saves no time on a CPU)";
  // On cuda: bf16 GEMMs through cuBLAS (tensor cores, fp32 accumulation) where the GPU has
  // bf16 (sm_80+; precision.gemm auto picks them there); fp16 and fp8 as on the CPU (rounded
  // operands, fp32 GEMMs). The fp32 windows of the 16-bit policies give pages back through the
  // driver's virtual memory management.
  bf16["cuda_gemm"] = "cuBLAS bf16 tensor-core GEMMs with fp32 accumulation (sm_80 and newer)";
  fp16["cuda_gemm"] = "fp32 GEMMs on fp16-rounded values";
  fp8["cuda_gemm"] = "emulated: fp8-quantized operands with their scales, fp32 GEMMs";
  return {{"fp32", capability(true)},
          // 16-bit stored weights/grads; GEMMs per precision.gemm
          {"bf16", bf16},
          {"fp16", fp16},
          // GEMM operands quantized to real fp8 values (E4M3/E5M2, delayed or block
          // scaling), multiplied in fp32: emulated, not faster
          {"fp8", fp8},
          {"pure_bf16", bf16}};
}

// flash on cuda under the bf16-working policies: our bf16 tensor-core kernel (head dims 64 and
// 128, sm_80+); otherwise (and on the CPU) the fp32 flash kernels.
json flashAttentionJson() {
  json f = capability(true);
  f["cuda_bf16"] =
      "bf16 tensor-core kernel (mma.sync, fp32 accumulation) for head dims 64 and 128 on "
      "sm_80 and newer under bf16, fp8 and pure_bf16; fp32 kernels otherwise";
  f["cpu"] = "fp32 tiles on oneDNN GEMMs under every policy";
  return f;
}

// parallel.ranks > 1 under mpirun (MPI; NCCL where GPUs are), ZeRO stages 0-3. Stages 2 and 3
// give unowned pages back (on cuda through virtual memory management).
json zeroJson() {
  json z = capability(true);
  z["communicator"] = "mpi";
  z["stages"] = {0, 1, 2, 3};
  z["cuda_stages"] = {0, 1, 2, 3};
  z["limits"] =
      "a QLoRA base's NF4 "
      "weights stay whole on every rank";
  return z;
}

// parallel.offload_optimizer cpu | nvme (ZeRO >= 1): AdamW state on the host or in files;
// parallel.offload_params cpu | nvme (ZeRO-3): the parameter shard there between uses.
json offloadJson() {
  json o = capability(true);
  o["optimizer"] = {"cpu", "nvme"};
  o["params"] = {"cpu", "nvme"};
  return o;
}

json techniquesJson() {
  return {
      {"gradient_accumulation", capability(true)},
      {"flash_attention", flashAttentionJson()},
      {"lr_schedule", capability(true)},
      {"curriculum", capability(true)},
      {"profiling", capability(true)},
      {"checkpoint_resume", capability(true)},
      {"mixed_precision", capability(true)},
      {"activation_checkpointing", capability(true)},
      // int8 packs with backend ops (every backend); sparse packs on host pointers.
      {"activation_compression", capability(true)},
      {"activation_compression_sparse",
       onlyOn(capability(true), {"cpu"},
              "sparse packing runs on the host; int8 runs on every backend")},
      {"zero", zeroJson()},
      {"offload", offloadJson()},
      {"lora", capability(true)},  // finetune.lora on any policy; bases from trainscope checkpoints
      // finetune.base_quant nf4: frozen linears as NF4 (double quantization), bf16 GEMMs
      {"qlora", capability(true)},
      {"optimizer_8bit", capability(true)},  // optimizer.state_bits 8 with adamw
      // distill.*: a frozen forward-only teacher (fp32, bf16 or NF4), KL at temperature T
      {"distillation", capability(true)},
  };
}
}  // namespace

nlohmann::json capabilitiesJson() {
  json j;
  j["engine_version"] = TRAINSCOPE_VERSION;
  j["protocol_version"] = core::kProtocolVersion;
  const auto f = detectCpuFeatures();
  addBackendsAndDevices(j, f);
  j["cpu"] = cpuJson(f);
  j["precisions"] = precisionsJson();
  j["techniques"] = techniquesJson();
  j["architectures"] = core::modelFamilyNames();  // model.arch (core/model/ModelFamily.h)
  // Each family: what the GUI shows and the Hugging Face classes it reads (docs/models.md).
  j["families"] = json::array();
  for (const auto* f : core::modelFamilies())
    j["families"].push_back({{"name", f->name()},
                             {"display_name", f->displayName()},
                             {"description", f->description()},
                             {"hf_architectures", f->hfArchitectures()}});
  j["optimizers"] = {"adamw", "sgd"};
  j["attention"] = {"naive", "flash"};
  return j;
}

}  // namespace ts::engine
