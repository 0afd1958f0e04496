#include "trainscope/core/ModelSpec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

namespace ts::core {
namespace {

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int64_t ceilDiv(int64_t a, int64_t b) {
  return b <= 0 ? 0 : (a + b - 1) / b;
}

// A block's projections as LoRA sees them: the short target name, the module, in and out.
struct Projection {
  std::string target, module;
  int64_t in = 0, out = 0;
  std::string parent = {};  // llama: "self_attn" | "mlp"
};

std::vector<Projection> projections(const ArchSpec& a) {
  const int64_t C = a.dModel, F = a.dFf, KV = a.kvDim();
  std::vector<Projection> p;
  if (a.arch == "llama") {
    p = {{"q", "q_proj", C, C, "self_attn"},  {"k", "k_proj", C, KV, "self_attn"},
         {"v", "v_proj", C, KV, "self_attn"}, {"o", "o_proj", C, C, "self_attn"},
         {"fc", "gate_proj", C, F, "mlp"},    {"fc", "up_proj", C, F, "mlp"},
         {"proj", "down_proj", F, C, "mlp"}};
  } else {
    // GPT-2 keeps q, k and v in one c_attn tensor; LoRA on q/k/v counts them one by one (as
    // Hu et al. count them) until the adapters land on the real modules.
    p = {{"q", "c_attn", C, C},
         {"k", "c_attn", C, KV},
         {"v", "c_attn", C, KV},
         {"o", "attn.c_proj", C, C}};
    if (a.swiglu) {
      p.push_back({"fc", "c_fc", C, F});
      p.push_back({"fc", "c_fc", C, F});
    } else {
      p.push_back({"fc", "c_fc", C, F});
    }
    p.push_back({"proj", "mlp.c_proj", F, C});
  }
  return p;
}

}  // namespace

ArchSpec archSpecOf(const ModelConfig& m, int64_t vocab) {
  ArchSpec a;
  a.arch = lower(m.arch) == "llama" ? "llama" : "gpt2";
  a.layers = std::max(0, m.layers);
  a.heads = std::max(1, m.heads);
  a.kvHeads = m.kv_heads > 0 ? m.kv_heads : a.heads;
  a.dModel = std::max(0, m.d_model);
  a.dFf = m.d_ff > 0 ? m.d_ff : 4 * a.dModel;
  a.seqLen = std::max(0, m.seq_len);
  a.vocab = std::max<int64_t>(0, vocab);
  const bool llama = a.arch == "llama";
  a.bias = !llama;
  a.learnedPos = !llama;
  a.tiedHead = !llama;
  a.fusedQkv = !llama;
  // The llama description is RMSNorm + SwiGLU; gpt2 takes mlp/norm from the config (the
  // estimator's what-if shapes).
  a.swiglu = llama || lower(m.mlp) == "swiglu";
  a.rmsNorm = llama || lower(m.norm) == "rmsnorm";
  a.ropeTheta = m.rope_theta;
  a.relu = lower(m.activation) == "relu";
  return a;
}

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool loraTargets(const std::vector<std::string>& targets, const ArchSpec& arch,
                 const std::string& module) {
  for (const auto& p : projections(arch))
    if (p.module == module &&
        std::find_if(targets.begin(), targets.end(), [&](const std::string& t) {
          return t == p.target || t == p.module;
        }) != targets.end())
      return true;
  return false;
}

std::vector<TensorSpec> modelTensors(const ArchSpec& a, const FinetuneConfig& ft) {
  const bool lora = ft.lora.r > 0;
  const int64_t C = a.dModel, F = a.dFf, V = a.vocab, T = a.seqLen;
  std::vector<TensorSpec> t;
  auto add = [&](std::string name, std::vector<int64_t> shape, TensorRole role, int block,
                 std::string module = {}, bool resid = false) {
    TensorSpec s;
    s.name = std::move(name);
    s.shape = std::move(shape);
    s.role = role;
    s.block = block;
    s.module = std::move(module);
    s.trainable = !lora;
    s.residualProjection = resid;
    static const std::map<std::string, BlockSlot> slots = {
        {"ln_1", BlockSlot::Norm1},          {"input_layernorm", BlockSlot::Norm1},
        {"c_attn", BlockSlot::Qkv},          {"q_proj", BlockSlot::Qkv},
        {"k_proj", BlockSlot::Qkv},          {"v_proj", BlockSlot::Qkv},
        {"attn.c_proj", BlockSlot::AttnOut}, {"o_proj", BlockSlot::AttnOut},
        {"ln_2", BlockSlot::Norm2},          {"post_attention_layernorm", BlockSlot::Norm2},
        {"c_fc", BlockSlot::MlpUp},          {"gate_proj", BlockSlot::MlpUp},
        {"up_proj", BlockSlot::MlpUp},       {"mlp.c_proj", BlockSlot::MlpDown},
        {"down_proj", BlockSlot::MlpDown},   {"ln_f", BlockSlot::FinalNorm},
        {"norm", BlockSlot::FinalNorm}};
    if (auto it = slots.find(s.module); it != slots.end()) s.slot = it->second;
    if (s.numel() > 0) t.push_back(std::move(s));
  };
  // LoRA adapters of one projection, when a target names it (short name or module name).
  auto adapters = [&](const std::string& prefix, int block, const Projection& p) {
    if (!lora) return;
    const auto& tg = ft.lora.targets;
    if (std::find(tg.begin(), tg.end(), p.target) == tg.end() &&
        std::find(tg.begin(), tg.end(), p.module) == tg.end())
      return;
    for (bool isA : {true, false}) {
      TensorSpec s;
      s.name = prefix + "." + p.target + (isA ? ".lora_A.weight" : ".lora_B.weight");
      s.shape =
          isA ? std::vector<int64_t>{ft.lora.r, p.in} : std::vector<int64_t>{p.out, ft.lora.r};
      s.role = isA ? TensorRole::LoraA : TensorRole::LoraB;
      s.block = block;
      s.module = p.module;
      t.push_back(std::move(s));
    }
  };
  using R = TensorRole;
  if (a.arch == "llama") {
    add("model.embed_tokens.weight", {V, C}, R::TokenEmbedding, -1);
    for (int l = 0; l < a.layers; ++l) {
      const std::string h = "model.layers." + std::to_string(l) + ".";
      add(h + "input_layernorm.weight", {C}, R::NormWeight, l, "input_layernorm");
      for (const auto& p : projections(a)) {
        if (p.module == "gate_proj")
          add(h + "post_attention_layernorm.weight", {C}, R::NormWeight, l,
              "post_attention_layernorm");
        const std::string path = h + p.parent + "." + p.module;
        add(path + ".weight", {p.out, p.in}, R::LinearWeight, l, p.module,
            p.module == "o_proj" || p.module == "down_proj");
        // q|k|v and gate|up are stored adjacent and multiplied as one GEMM each.
        const bool qkvPart = p.module == "q_proj" || p.module == "k_proj" || p.module == "v_proj";
        const bool upPart = p.module == "gate_proj" || p.module == "up_proj";
        if (qkvPart || upPart)
          t.back().fusedName =
              h + p.parent + (qkvPart ? ".qkv_proj.weight" : ".gate_up_proj.weight");
        adapters(path, l, p);
      }
    }
    add("model.norm.weight", {C}, R::NormWeight, -1, "norm");
    add("lm_head.weight", {V, C}, R::Head, -1);
    return t;
  }
  // GPT-2 (the engine's names and order, which its checkpoints carry).
  add("wte", {V, C}, R::TokenEmbedding, -1);
  if (a.learnedPos) add("wpe", {T, C}, R::PositionEmbedding, -1);
  const int64_t qkv = a.qkvDim();
  const int64_t fcOut = a.swiglu ? 2 * F : F;
  for (int l = 0; l < a.layers; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto norm = [&](const std::string& n) {
      add(h + n + ".weight", {C}, R::NormWeight, l, n);
      if (!a.rmsNorm) add(h + n + ".bias", {C}, R::NormBias, l, n);
    };
    // The module names are the LoRA target names of the issue/PEFT: c_attn, attn.c_proj, c_fc,
    // mlp.c_proj.
    auto linear = [&](const std::string& n, const std::string& module, int64_t out, int64_t in,
                      bool resid) {
      add(h + n + ".weight", {out, in}, R::LinearWeight, l, module, resid);
      if (a.bias) add(h + n + ".bias", {out}, R::LinearBias, l, module);
    };
    norm("ln_1");
    linear("attn.c_attn", "c_attn", qkv, C, false);
    const auto proj = projections(a);
    for (const auto& p : proj)
      if (p.module == "c_attn") adapters(h + "attn", l, p);
    linear("attn.c_proj", "attn.c_proj", C, C, true);
    for (const auto& p : proj)
      if (p.module == "attn.c_proj") adapters(h + "attn.c_proj", l, p);
    norm("ln_2");
    linear("mlp.c_fc", "c_fc", fcOut, C, false);
    for (const auto& p : proj)
      if (p.module == "c_fc") adapters(h + "mlp.c_fc", l, p);
    linear("mlp.c_proj", "mlp.c_proj", C, F, true);
    for (const auto& p : proj)
      if (p.module == "mlp.c_proj") adapters(h + "mlp.c_proj", l, p);
  }
  add("ln_f.weight", {C}, R::NormWeight, -1, "ln_f");
  if (!a.rmsNorm) add("ln_f.bias", {C}, R::NormBias, -1, "ln_f");
  if (!a.tiedHead) add("lm_head.weight", {V, C}, R::Head, -1);
  return t;
}

SavedStateOptions savedStateOptionsOf(const RunConfig& c, int64_t layers, bool bf16Gemm) {
  SavedStateOptions o;
  o.batch = std::max(1, c.train.micro_batch);
  o.flash = lower(c.attention.impl) == "flash";
  o.compression = lower(c.memory.activation_compression);
  const std::string ck = lower(c.memory.checkpointing);
  if (ck == "all") {
    o.checkpointEvery = 1;
  } else if (ck == "every_k") {
    int64_t k = c.memory.checkpoint_every > 0 ? c.memory.checkpoint_every
                                              : std::lround(std::sqrt(static_cast<double>(layers)));
    o.checkpointEvery = static_cast<int>(std::clamp<int64_t>(k, 1, std::max<int64_t>(1, layers)));
  }
  o.dropout = c.model.dropout > 0;
  const std::string policy = lower(c.precision.policy);
  o.bf16Gemm = bf16Gemm && (policy == "bf16" || policy == "pure_bf16");
  if (policy == "fp8")
    o.fp8 = lower(c.precision.fp8.recipe) == "blockwise" ? "blockwise" : "delayed";
  return o;
}

int elementBits(ElementType t) {
  switch (t) {
    case ElementType::I8:
      return 8;
    case ElementType::BF16:
      return 16;
    default:
      return 32;
  }
}

int64_t BufferSpec::numel() const {
  int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

double BufferSpec::bytes() const {
  const double full = static_cast<double>(numel()) * elementBits(type) / 8.0;
  return dataDependent ? 0.5 * full : full;
}

std::vector<BufferSpec> savedState(const ArchSpec& a, const SavedStateOptions& o) {
  const int64_t B = o.batch, T = a.seqLen, C = a.dModel, V = a.vocab, NH = a.heads;
  const int64_t N = B * T;
  const int64_t F = a.dFf, fcPre = a.swiglu ? 2 * F : F, qkv = a.qkvDim();
  const bool int8 = o.compression == "int8";
  const bool sparse = o.compression == "sparse";
  const int k = o.checkpointEvery;
  using Cat = MemoryCategory;
  std::vector<BufferSpec> v;
  using E = ElementType;
  auto add = [&](std::string name, std::vector<int64_t> shape, E type = E::F32,
                 Cat cat = Cat::Activations, int set = -1, int index = 0) {
    v.push_back({std::move(name), std::move(shape), type, cat, set, index, false});
  };
  add("tokens", {B, T}, E::I32);
  add("targets", {B, T}, E::I32);
  // Plain: every layer keeps a full set. Checkpointing: k scratch sets + one input per segment.
  const int sets = k > 0 ? k : static_cast<int>(a.layers);
  for (int s = 0; s < sets; ++s) {
    if (k == 0 || s > 0) add("input", {B, T, C}, E::F32, Cat::Activations, s);
    if (!a.rmsNorm) add("ln1Mean", {B, T}, E::F32, Cat::Activations, s);
    add("ln1Rstd", {B, T}, E::F32, Cat::Activations, s);
    add("qkv", {B, T, qkv}, E::F32, Cat::Activations, s);
    add("att", o.flash ? std::vector<int64_t>{B, NH, T} : std::vector<int64_t>{B, NH, T, T}, E::F32,
        Cat::Activations, s);
    add("resid2", {B, T, C}, E::F32, Cat::Activations, s);
    if (!a.rmsNorm) add("ln2Mean", {B, T}, E::F32, Cat::Activations, s);
    add("ln2Rstd", {B, T}, E::F32, Cat::Activations, s);
    add("fcPre", {B, T, fcPre}, E::F32, Cat::Activations, s);
    if (int8) {
      add("ln1Q", {B, T, C}, E::I8, Cat::Activations, s);
      add("ln1Scale", {B, T}, E::F32, Cat::Activations, s);
      add("attOutQ", {B, T, C}, E::I8, Cat::Activations, s);
      add("attOutScale", {B, T}, E::F32, Cat::Activations, s);
      add("ln2Q", {B, T, C}, E::I8, Cat::Activations, s);
      add("ln2Scale", {B, T}, E::F32, Cat::Activations, s);
      add("fcActQ", {B, T, F}, E::I8, Cat::Activations, s);
      add("fcActScale", {B, T}, E::F32, Cat::Activations, s);
    } else {
      add("ln1", {B, T, C}, E::F32, Cat::Activations, s);
      add("attOut", {B, T, C}, E::F32, Cat::Activations, s);
      add("ln2", {B, T, C}, E::F32, Cat::Activations, s);
      if (sparse) {
        // A bitmap of the ReLU output (1 bit per value) and its nonzeros, counted per forward.
        add("fcMask", {ceilDiv(N * F, 8)}, E::I8, Cat::Activations, s);
        v.push_back({"fcVals", {B, T, F}, E::F32, Cat::Activations, s, 0, true});
      } else {
        add("fcAct", {B, T, F}, E::F32, Cat::Activations, s);
      }
    }
  }
  if (k > 0)
    for (int64_t seg = 0; seg < ceilDiv(a.layers, k); ++seg)
      add("checkpoint", {B, T, C}, E::F32, Cat::Activations, -1, static_cast<int>(seg));
  add("residOut", {B, T, C});
  add("lnf", {B, T, C});
  if (!a.rmsNorm) add("lnfMean", {B, T});
  add("lnfRstd", {B, T});
  add("logits", {B, T, V});
  add("losses", {B, T});
  // Backward scratch, reused by every block.
  const Cat ws = Cat::Workspace;
  add("ones", {N}, E::F32, ws);
  add("dres", {B, T, C}, E::F32, ws);
  add("dtmp", {B, T, C}, E::F32, ws);
  add("dqkv", {B, T, qkv}, E::F32, ws);
  if (!o.flash) add("datt", {B, NH, T, T}, E::F32, ws);
  add("dfc", {B, T, fcPre}, E::F32, ws);
  add("dfc2", {B, T, fcPre}, E::F32, ws);
  if (o.dropout) add("ddrop", {B, T, C}, E::F32, ws);  // a branch's gradient through its mask
  const int64_t widest = std::max({fcPre, qkv, C});    // the widest GEMM operand row
  if (o.bf16Gemm) {  // bf16 inputs / output gradients of the block GEMMs
    add("x16", {N * widest}, E::BF16, ws);
    add("g16", {N * widest}, E::BF16, ws);
  }
  if (!o.fp8.empty()) {  // the emulated fp8 GEMM's dequantized operands
    add("fp8X", {N * widest}, E::F32, ws);
    add("fp8G", {N * widest}, E::F32, ws);
    add("fp8W", {std::max({qkv * C, fcPre * C, C * F})}, E::F32, ws);  // the largest weight
    if (o.fp8 == "blockwise")  // per-tile scales of the operand with the most tiles
      add("fp8TileScales", {std::max(N * ceilDiv(widest, 128), ceilDiv(N, 128) * widest)}, E::F32,
          ws);
  }
  return v;
}

}  // namespace ts::core
