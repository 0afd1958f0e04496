#pragma once
// What the llama-like families share: RMSNorm, rotary positions, a gated MLP, grouped-query
// attention, Hugging Face's "model.layers.N.self_attn.q_proj" names. Each family (its own
// folder) fills in a Traits (its projections' biases, q/k norms, where its norms sit, its
// activation, its names) and reads and writes its own config.json keys; nothing here names a
// family.
#include <string>
#include <utility>
#include <vector>

#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/model/HfFields.h"
#include "trainscope/core/model/ModelFamily.h"

namespace ts::core {

struct LlamaLikeTraits {
  std::string name, displayName, description;
  std::vector<std::string> architectures, modelTypes;
  // model.* keys read beyond the ones every llama-like family reads (LlamaLikeFamily::modelKeys).
  std::vector<std::string> extraKeys;
  bool qkvBias = false;
  ArchSpec::QkNorm qkNorm = ArchSpec::QkNorm::None;
  bool preNorm = true, postNorm = false;
  bool geglu = false, embedScale = false;
  float normOffset = 0.f;
  // q|k|v and gate|up stored as one tensor each (qkv_proj, gate_up_proj), as the family's
  // checkpoints and PEFT adapters have them.
  bool fusedProjections = false;
  bool tiedByDefault = false;  // config.json without tie_word_embeddings
  // Hugging Face names of the norms: before attention, before the MLP, after attention, after
  // the MLP ("" where the family has none).
  std::string norm1 = "input_layernorm", norm2 = "post_attention_layernorm";
  std::string postAttnNorm, postMlpNorm;
  // Where a multimodal folder keeps the language model's tensors ("" none): tried after the
  // plain names.
  std::vector<std::string> nestedPrefixes;
  std::string hiddenAct = "silu";  // config.json's hidden_act (hidden_activation)
  std::vector<std::pair<std::string, ModelConfig>> presets;
  std::vector<std::pair<std::string, std::string>> aliases;
};

class LlamaLikeFamily : public ModelFamily {
 public:
  explicit LlamaLikeFamily(LlamaLikeTraits t) : t_(std::move(t)) {}
  std::string name() const override { return t_.name; }
  std::string displayName() const override { return t_.displayName; }
  std::string description() const override { return t_.description; }
  std::vector<std::string> modelKeys() const override;
  void describe(const ModelConfig& m, ArchSpec& a) const override;
  std::vector<Projection> projections(const ArchSpec& a) const override;
  void tensors(TensorListBuilder& b) const override;
  void refusals(const RunConfig& c, const IssueSink& add) const override;
  std::vector<std::string> hfArchitectures() const override { return t_.architectures; }
  std::vector<std::string> hfModelTypes() const override { return t_.modelTypes; }
  void readHfConfig(const HfFields& f, HfModelInfo& hf) const override;
  nlohmann::json writeHfConfig(const ArchSpec& a, double dropout) const override;
  std::vector<std::string> hfNames(const TensorSpec& t, bool tiedHead) const override;
  bool hfTransposed(const TensorSpec&) const override { return false; }
  void hfShapeMismatches(const HfModelInfo& hf, const ModelConfig& run,
                         std::vector<std::string>& out) const override;
  std::string peftPrefix() const override { return "base_model.model."; }
  bool peftFanInFanOut() const override { return false; }
  std::vector<std::string> peftTargets(const RunConfig& c) const override;
  std::vector<std::pair<std::string, ModelConfig>> presets() const override { return t_.presets; }
  std::vector<std::pair<std::string, std::string>> presetAliases() const override {
    return t_.aliases;
  }

 protected:
  const LlamaLikeTraits& traits() const { return t_; }
  // The family's own config.json keys, after the shared ones are read / written.
  virtual void readExtra(const HfFields&, HfModelInfo&) const {}
  virtual void writeExtra(const ArchSpec&, nlohmann::json&) const {}
  // A preset of this family: sizes, with the family's fixed keys.
  ModelConfig shape(int layers, int heads, int kvHeads, int dModel, int dFf, int vocab,
                    int seqLen) const;

 private:
  LlamaLikeTraits t_;
};

// The shared readers, for the families' readExtra.
// rope_theta / rope_scaling / rope_parameters (transformers 4 and 5) into m.rope_theta and
// m.rope_scaling; `params` is the rope_parameters object to read ("" the top level's).
void readRope(const HfFields& f, const nlohmann::json& params, ModelConfig& m);
// sliding_window with the layer pattern: layer_types (transformers 5) or `patternKey`.
void readSlidingWindow(const HfFields& f, ModelConfig& m, const char* patternKey);
// model.rope_scaling as config.json's rope_scaling object (null for the default rotary).
nlohmann::json ropeScalingJson(const ModelConfig::RopeScaling& r);

}  // namespace ts::core
