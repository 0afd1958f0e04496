// A Hugging Face model folder's config.json (core::readHfConfig, used by the engine's loader,
// the wizard and the planner): the input as <scratch>/config.json. Documented error:
// HfConfigError naming the file and field. A config that reads must describe a model the rest
// of the code can take: its shape compared with itself (no mismatches), the run config made
// from it (hfRunConfig) validated, and, when that validates, its tensor list built.
#include <cstdint>
#include <string>

#include "FuzzSupport.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/ModelSpec.h"

using namespace ts::core;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  const auto& dir = ts::fuzz::scratchDir("hf_config");
  ts::fuzz::writeFile(dir / "config.json",
                      std::string_view(reinterpret_cast<const char*>(data), size));
  HfModelInfo hf;
  try {
    hf = readHfConfig(dir.string());
  } catch (const HfConfigError&) {
    return 0;
  }
  TS_FUZZ_CHECK(hf.model.layers >= 1 && hf.model.heads >= 1 && hf.model.d_model >= 1 &&
                    hf.model.vocab >= 1 && hf.model.seq_len >= 1,
                "a config that reads has a positive shape");
  ModelConfig self = hf.model;
  if (self.arch == "llama" && self.kv_heads == self.heads) self.kv_heads = 0;
  const auto mismatches = hfShapeMismatches(hf, self, hf.model.vocab);
  for (const auto& m : mismatches) (void)m;
  const RunConfig rc = hfRunConfig(dir.string(), hf.model);
  const ConfigResult r = parseConfigJson(toJson(rc));
  if (r.ok()) {
    const auto tensors = modelTensors(archSpecOf(r.config->model, r.config->model.vocab));
    TS_FUZZ_CHECK(!tensors.empty(), "a model has tensors");
  }
  return 0;
}
