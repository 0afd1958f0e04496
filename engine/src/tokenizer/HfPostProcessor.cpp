// tokenizer.json's post_processor (Sequence, ByteLevel, TemplateProcessing): the special tokens
// encode(text, addSpecialTokens) puts around the sequence.
#include "HfTokenizerInternal.h"

namespace ts::engine {

void HfTokenizer::Impl::parsePostProcessor(const json& p, const std::string& field) {
  if (p.is_null()) return;
  const std::string type = hf::typeOf(p);
  if (type == "Sequence") {
    hf::eachChild(p, "processors", field,
                  [&](const json& c, const std::string& f) { parsePostProcessor(c, f); });
  } else if (type == "ByteLevel") {
    // Only trims offsets: no tokens added.
  } else if (type == "TemplateProcessing") {
    const json& single = p.value("single", json::array());
    const json& specials = p.value("special_tokens", json::object());
    bool seenSequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const json& item = single[i];
      const std::string where = field + ".single[" + std::to_string(i) + "]";
      if (item.contains("Sequence")) {
        if (seenSequence) fail(where + ": a second sequence in a single-sequence template");
        seenSequence = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item["SpecialToken"].value("id", "");
        if (!specials.contains(name) || !specials[name].contains("ids"))
          fail(where + ": special token '" + name + "' is not in " + field + ".special_tokens");
        for (const json& id : specials[name]["ids"]) {
          // Checked against the vocabulary once it is read (parse()): encode emits these ids.
          if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= INT32_MAX)
            fail(field + ".special_tokens['" + name + "'].ids: " + id.dump() +
                 " is not a token id");
          (seenSequence ? templateAfter : templateBefore).push_back(id.get<int32_t>());
        }
      } else {
        fail(where + " must be {\"Sequence\": ...} or {\"SpecialToken\": ...}");
      }
    }
  } else {
    fail(field + ".type '" + type +
         "' is not supported: allowed Sequence | ByteLevel | TemplateProcessing");
  }
}

}  // namespace ts::engine
