#pragma once
// JSON from outside (configs, --set values, protocol lines, Hugging Face files) is parsed through
// here. nlohmann's parser keeps its own stack, but printing or walking the tree recurses: a
// config nested 200,000 levels deep crashed `validate` (exit 139). Nesting beyond any real
// file is refused while parsing, as a parse error naming the limit, before a tree exists.
#include <nlohmann/json.hpp>

namespace ts::core {

// Deeper than any config, tokenizer.json or safetensors header; shallow enough for every
// recursive walk of the tree on a thread's default stack.
inline constexpr int kMaxJsonDepth = 256;

// json::parse with the depth bound. Throws nlohmann's parse_error (id 101) past the bound, so
// callers' existing parse-error handling reports it like any other malformed input.
template <class Json = nlohmann::json, class... Input>
Json parseBoundedJson(Input&&... input) {
  // The callback sees a container start at the depth of its parent: the top level is 0.
  typename Json::parser_callback_t bound = [](int depth, nlohmann::json::parse_event_t event,
                                              Json&) {
    if (depth >= kMaxJsonDepth && (event == nlohmann::json::parse_event_t::object_start ||
                                   event == nlohmann::json::parse_event_t::array_start))
      throw nlohmann::json::parse_error::create(
          101, 0,
          "nested deeper than " + std::to_string(kMaxJsonDepth) +
              " levels (objects and arrays inside each other); no valid input is that deep",
          nullptr);
    return true;
  };
  return Json::parse(std::forward<Input>(input)..., bound);
}

// The same without exceptions: a discarded value for malformed or too deeply nested input.
template <class Json = nlohmann::json, class... Input>
Json parseBoundedJsonOrDiscarded(Input&&... input) {
  try {
    return parseBoundedJson<Json>(std::forward<Input>(input)...);
  } catch (const nlohmann::json::exception&) {
    return Json(nlohmann::json::value_t::discarded);
  }
}

}  // namespace ts::core
