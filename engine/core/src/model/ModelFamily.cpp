// The registry of model families: the one place that lists them. A new family is a folder
// under families/ and one line here.
#include "trainscope/core/model/ModelFamily.h"

#include <algorithm>
#include <cctype>
#include <stdexcept>

namespace ts::core {

const ModelFamily& gpt2Family();     // families/gpt2/Gpt2Family.cpp
const ModelFamily& llamaFamily();    // families/llama/LlamaFamily.cpp
const ModelFamily& mistralFamily();  // families/mistral/MistralFamily.cpp
const ModelFamily& qwen2Family();    // families/qwen2/Qwen2Family.cpp
const ModelFamily& qwen3Family();    // families/qwen3/Qwen3Family.cpp
const ModelFamily& gemma2Family();   // families/gemma/GemmaFamily.cpp
const ModelFamily& gemma3Family();   // families/gemma/GemmaFamily.cpp
const ModelFamily& phi3Family();     // families/phi3/Phi3Family.cpp
const ModelFamily& olmo2Family();    // families/olmo2/Olmo2Family.cpp

const std::vector<const ModelFamily*>& modelFamilies() {
  static const std::vector<const ModelFamily*> all = {
      &gpt2Family(),   &llamaFamily(),  &mistralFamily(), &qwen2Family(), &qwen3Family(),
      &gemma2Family(), &gemma3Family(), &phi3Family(),    &olmo2Family()};
  return all;
}

std::vector<std::string> modelFamilyNames() {
  std::vector<std::string> out;
  for (const auto* f : modelFamilies()) out.push_back(f->name());
  return out;
}

const ModelFamily* findModelFamily(std::string_view arch) {
  for (const auto* f : modelFamilies())
    if (f->name() == arch) return f;
  return nullptr;
}

const ModelFamily& modelFamily(std::string_view arch) {
  if (const auto* f = findModelFamily(arch)) return *f;
  std::string allowed;
  for (const auto& n : modelFamilyNames()) allowed += (allowed.empty() ? "" : " or ") + n;
  throw std::invalid_argument("unknown architecture '" + std::string(arch) + "' (" + allowed + ")");
}

const ModelFamily* familyForHf(std::string_view name) {
  for (const auto* f : modelFamilies()) {
    const auto archs = f->hfArchitectures();
    const auto types = f->hfModelTypes();
    if (std::find(archs.begin(), archs.end(), name) != archs.end() ||
        std::find(types.begin(), types.end(), name) != types.end())
      return f;
  }
  return nullptr;
}

std::string lowerAscii(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

void addUnique(std::vector<std::string>& names, const std::string& name) {
  if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
}

std::vector<std::string> allLoraModules() {
  std::vector<std::string> out;
  for (const auto* f : modelFamilies()) {
    ModelConfig m;
    m.arch = f->name();
    for (const auto& p : f->projections(archSpecOf(m, 2))) addUnique(out, p.module);
  }
  return out;
}

}  // namespace ts::core
