// HfTokenizer: reading tokenizer.json (its added tokens here, each other component in its own
// file: HfNormalizer, HfPreTokenizer, BpeModel, HfPostProcessor, HfDecoder) and the special
// tokens from tokenizer_config.json; encode is in HfTokenizerEncode.cpp.
#include <climits>
#include <filesystem>
#include <fstream>
#include "trainscope/core/protocol/BoundedJson.h"

#include "HfTokenizerInternal.h"

namespace ts::engine {

using hf::getOr;
using hf::json;

namespace hf {

void eachChild(const json& j, const char* key, const std::string& field,
               const std::function<void(const json&, const std::string&)>& parse) {
  const json& list = j.value(key, json::array());
  for (size_t i = 0; i < list.size(); ++i)
    parse(list[i], field + "." + key + "[" + std::to_string(i) + "]");
}

std::string metaspaceScheme(const json& j) {
  const std::string scheme = getOr<std::string>(j, "prepend_scheme", "");
  if (!scheme.empty()) return scheme;
  return getOr(j, "add_prefix_space", true) ? "always" : "never";
}

}  // namespace hf

void HfTokenizer::Impl::parse(const json& j) {
  if (!j.is_object()) fail("the file must hold a JSON object");
  if (!j.contains("model")) fail("it has no 'model'");
  parseModel(j["model"]);
  if (j.contains("added_tokens")) parseAddedTokens(j["added_tokens"]);
  parseNormalizer(j.value("normalizer", json()), "normalizer");
  parsePreTokenizer(j.value("pre_tokenizer", json()), "pre_tokenizer");
  parseDecoder(j.value("decoder", json()), "decoder");
  parsePostProcessor(j.value("post_processor", json()), "post_processor");
  for (const auto& [id, _] : idToToken) vocabSize = std::max(vocabSize, id + 1);
  for (const AddedToken& a : added) vocabSize = std::max(vocabSize, a.id + 1);
  // The template's tokens are emitted by encode(): each must be a token of the vocabulary.
  for (const auto* ids : {&templateBefore, &templateAfter})
    for (int32_t id : *ids)
      if (!idToToken.count(id) && !addedById.count(id))
        fail("post_processor: special token id " + std::to_string(id) +
             " is neither in model.vocab nor in added_tokens");
}

void HfTokenizer::Impl::parseAddedTokens(const json& list) {
  if (!list.is_array()) fail("added_tokens must be an array");
  for (size_t i = 0; i < list.size(); ++i) {
    const json& t = list[i];
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t["id"].is_number_integer() || !t["content"].is_string() ||
        t["content"].get<std::string>().empty())
      fail("added_tokens[" + std::to_string(i) +
           "] needs an integer 'id' and a non-empty "
           "'content'");
    if (t["id"].get<int64_t>() < 0 || t["id"].get<int64_t>() >= INT32_MAX)
      fail("added_tokens[" + std::to_string(i) + "].id " + t["id"].dump() +
           " must be a non-negative id (below " + std::to_string(INT32_MAX) + ")");
    AddedToken a{t["id"].get<int32_t>(),     t["content"].get<std::string>(),
                 getOr(t, "special", false), getOr(t, "lstrip", false),
                 getOr(t, "rstrip", false),  getOr(t, "single_word", false)};
    addedById[a.id] = added.size();
    addedByFirstByte[static_cast<unsigned char>(a.content[0])].push_back(added.size());
    added.push_back(std::move(a));
  }
}

// bos/eos: tokenizer_config.json's names; else the template's leading token and the usual
// end-of-text names.
void HfTokenizer::Impl::findSpecialTokens() {
  namespace fs = std::filesystem;
  auto idOfEntry = [&](const json& e) -> int32_t {
    std::string name;
    if (e.is_string()) name = e.get<std::string>();
    if (e.is_object() && e.contains("content") && e["content"].is_string())
      name = e["content"].get<std::string>();
    return name.empty() ? -1 : tokenId(name);
  };
  const fs::path cfgPath = fs::path(file).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::is_regular_file(cfgPath, ec)) {
    std::ifstream cin(cfgPath);
    const json cfg = core::parseBoundedJsonOrDiscarded(cin);
    if (cfg.is_object()) {
      if (cfg.contains("bos_token")) bos = idOfEntry(cfg["bos_token"]);
      if (cfg.contains("eos_token")) eos = idOfEntry(cfg["eos_token"]);
    }
  }
  if (bos < 0 && !templateBefore.empty()) bos = templateBefore.front();
  if (eos < 0)
    for (const char* name : {"</s>", "<|endoftext|>", "<|end_of_text|>", "<|im_end|>"})
      if ((eos = tokenId(name)) >= 0) break;
}

// ---- Public API ------------------------------------------------------------------------------

std::string HfTokenizer::findIn(const std::string& folder) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (folder.empty()) return "";
  if (fs::is_regular_file(folder, ec) && fs::path(folder).filename() == "tokenizer.json")
    return folder;
  const fs::path p = fs::path(folder) / "tokenizer.json";
  return fs::is_regular_file(p, ec) ? p.string() : "";
}

std::vector<std::string> HfTokenizer::filesOf(const std::string& tokenizerJson) {
  namespace fs = std::filesystem;
  if (tokenizerJson.empty()) return {};
  std::vector<std::string> out = {tokenizerJson};
  std::error_code ec;
  for (const char* name :
       {"tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja"}) {
    const fs::path p = fs::path(tokenizerJson).parent_path() / name;
    if (fs::is_regular_file(p, ec)) out.push_back(p.string());
  }
  return out;
}

HfTokenizer HfTokenizer::load(const std::string& path) {
  namespace fs = std::filesystem;
  std::string file = findIn(path);
  if (file.empty()) {
    std::error_code ec;
    if (fs::is_regular_file(path, ec))
      file = path;
    else
      throw TokenizerError("tokenizer: '" + path +
                           "' is neither a tokenizer.json nor a folder "
                           "holding one");
  }
  auto impl = std::make_shared<Impl>();
  impl->file = file;
  std::ifstream in(file, std::ios::binary);
  if (!in) impl->fail("cannot be opened");
  json j;
  try {
    j = core::parseBoundedJson(in);
  } catch (const json::exception& e) {
    impl->fail(std::string("is not valid JSON: ") + e.what());
  }
  try {
    impl->parse(j);
  } catch (const json::exception& e) {
    impl->fail(std::string("unexpected value: ") + e.what());
  }
  impl->findSpecialTokens();
  HfTokenizer t;
  t.impl_ = impl;
  return t;
}

int32_t HfTokenizer::vocabSize() const {
  return impl_->vocabSize;
}

int32_t HfTokenizer::tokenId(std::string_view token) const {
  return impl_->tokenId(token);
}

int32_t HfTokenizer::bosId() const {
  return impl_->bos;
}
int32_t HfTokenizer::eosId() const {
  return impl_->eos;
}
const std::string& HfTokenizer::path() const {
  return impl_->file;
}

std::string HfTokenizer::describe() const {
  const std::string kind = impl_->byteLevel      ? "byte-level BPE"
                           : impl_->byteFallback ? "BPE with byte fallback"
                                                 : "BPE";
  return kind + ", " + std::to_string(impl_->vocabSize) + " tokens";
}

}  // namespace ts::engine
