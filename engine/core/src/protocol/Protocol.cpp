#include "trainscope/core/protocol/Protocol.h"
#include "trainscope/core/protocol/BoundedJson.h"

#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <stdexcept>

namespace ts::core {
namespace {

using nlohmann::json;

constexpr std::array<std::string_view, 13> kEventNames = {
    "hello",          "config",     "memory_plan", "step",    "memory", "eval",    "kernels",
    "kernel_summary", "checkpoint", "log",         "warning", "error",  "finished"};

double nowSeconds() {
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

std::string dumpLine(const json& j) {
  // Invalid UTF-8 in a message must not kill the event stream: replace it.
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() &&
         (s.back() == ' ' || s.back() == '\t' || s.back() == '\r' || s.back() == '\n')) {
    s.remove_suffix(1);
  }
  return s;
}

// A whole line longer than this is garbage (a stream with no newlines must not eat memory).
constexpr size_t kMaxLineBytes = 64u << 20;

double numberField(const json& j, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  // Non-finite numbers are written as null (JSON has no NaN): a diverged loss reads back as NaN.
  if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!it->is_number()) {
    throw std::invalid_argument(std::string("step event: \"") + key + "\" must be a number, got " +
                                it->dump());
  }
  return it->get<double>();
}

int64_t intField(const json& j, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_number_float()) {
    double d = it->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e18) {
      return static_cast<int64_t>(d);
    }
  }
  throw std::invalid_argument(std::string("step event: \"") + key + "\" must be an integer, got " +
                              it->dump());
}

constexpr std::array<std::string_view, 5> kCommandNames = {"stop", "pause", "resume", "checkpoint",
                                                           "profile"};

}  // namespace

std::string_view toString(EventType t) {
  auto i = static_cast<size_t>(t);
  return i < kEventNames.size() ? kEventNames[i] : std::string_view("unknown");
}

EventType eventTypeFromString(std::string_view s) {
  for (size_t i = 0; i < kEventNames.size(); ++i) {
    if (kEventNames[i] == s) return static_cast<EventType>(i);
  }
  return EventType::Unknown;
}

nlohmann::json toJson(const StepEvent& e) {
  return {{"step", e.step},       {"loss", e.loss},
          {"lr", e.lr},           {"grad_norm", e.grad_norm},
          {"tokens", e.tokens},   {"tokens_per_s", e.tokens_per_s},
          {"step_ms", e.step_ms}, {"loss_scale", e.loss_scale},
          {"skipped", e.skipped}};
}

StepEvent stepEventFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("step event: expected an object");
  if (!j.contains("step")) throw std::invalid_argument("step event: \"step\" is missing");
  if (!j.contains("loss")) throw std::invalid_argument("step event: \"loss\" is missing");
  StepEvent e;
  e.step = intField(j, "step", 0);
  e.loss = numberField(j, "loss", 0);
  e.lr = numberField(j, "lr", 0);
  e.grad_norm = numberField(j, "grad_norm", 0);
  e.tokens = intField(j, "tokens", 0);
  e.tokens_per_s = numberField(j, "tokens_per_s", 0);
  e.step_ms = numberField(j, "step_ms", 0);
  e.loss_scale = numberField(j, "loss_scale", 1.0);
  if (auto it = j.find("skipped"); it != j.end()) {
    if (!it->is_boolean()) {
      throw std::invalid_argument("step event: \"skipped\" must be true or false, got " +
                                  it->dump());
    }
    e.skipped = it->get<bool>();
  }
  return e;
}

nlohmann::json toJson(const FinishedEvent& e) {
  return {{"status", e.status}, {"reason", e.reason}};
}

FinishedEvent finishedEventFromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw std::invalid_argument("finished event: expected an object");
  FinishedEvent e;
  auto status = j.find("status");
  if (status == j.end() || !status->is_string()) {
    throw std::invalid_argument("finished event: \"status\" must be a string");
  }
  e.status = status->get<std::string>();
  if (e.status != "completed" && e.status != "stopped" && e.status != "failed") {
    throw std::invalid_argument("finished event: \"status\" must be completed, stopped or failed");
  }
  if (auto r = j.find("reason"); r != j.end()) {
    if (!r->is_string()) throw std::invalid_argument("finished event: \"reason\" must be a string");
    e.reason = r->get<std::string>();
  }
  return e;
}

std::string EventEncoder::encode(EventType type, nlohmann::json fields) {
  return encode(toString(type), std::move(fields));
}

std::string EventEncoder::encode(std::string_view type, nlohmann::json fields) {
  json out = json::object();
  if (fields.is_object()) {
    out = std::move(fields);
  } else if (!fields.is_null()) {
    out["value"] = std::move(fields);  // a caller bug, but keep the data rather than throw
  }
  // The stamps always win over same-named fields.
  out["type"] = std::string(type);
  out["seq"] = seq_++;
  out["time"] = nowSeconds();
  return dumpLine(out);
}

std::optional<Event> EventDecoder::decodeLine(std::string_view raw) {
  auto fail = [&](const std::string& why) -> std::optional<Event> {
    ++errors_;
    if (onError_) {
      std::string line(raw.substr(0, 200));
      try {
        onError_(why, line);
      } catch (...) {
        // A throwing handler must not break decoding.
      }
    }
    return std::nullopt;
  };
  std::string_view line = trim(raw);
  if (line.empty()) return std::nullopt;  // blank lines are not events and not errors
  json j = parseBoundedJsonOrDiscarded(line.begin(), line.end());
  if (j.is_discarded()) return fail("invalid JSON");
  if (!j.is_object()) return fail("event is not a JSON object");
  auto type = j.find("type");
  if (type == j.end() || !type->is_string()) return fail("event has no string \"type\"");
  auto seq = j.find("seq");
  if (seq == j.end() || !seq->is_number_integer()) return fail("event has no integer \"seq\"");
  auto time = j.find("time");
  if (time == j.end() || !time->is_number()) return fail("event has no numeric \"time\"");
  Event e;
  e.typeName = type->get<std::string>();
  e.type = eventTypeFromString(e.typeName);
  e.seq = seq->is_number_unsigned() &&
                  seq->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
              ? std::numeric_limits<int64_t>::max()
              : seq->get<int64_t>();
  e.time = time->get<double>();
  if (e.type == EventType::Unknown) ++unknown_;
  e.body = std::move(j);
  return e;
}

std::vector<Event> EventDecoder::feed(std::string_view chunk) {
  std::vector<Event> out;
  size_t start = 0;
  while (true) {
    size_t nl = chunk.find('\n', start);
    if (nl == std::string_view::npos) break;
    std::string_view piece = chunk.substr(start, nl - start);
    if (!buffer_.empty()) {
      buffer_.append(piece);
      if (auto e = decodeLine(buffer_)) out.push_back(std::move(*e));
      buffer_.clear();
    } else if (!skipping_) {
      if (auto e = decodeLine(piece)) out.push_back(std::move(*e));
    }
    skipping_ = false;
    start = nl + 1;
  }
  if (start < chunk.size() && !skipping_) {
    buffer_.append(chunk.substr(start));
    if (buffer_.size() > kMaxLineBytes) {
      // Drop the oversized line up to its newline; count it once.
      std::string head = buffer_.substr(0, 200);
      buffer_.clear();
      skipping_ = true;
      ++errors_;
      if (onError_) {
        try {
          onError_("line longer than " + std::to_string(kMaxLineBytes) + " bytes", head);
        } catch (...) {
        }
      }
    }
  }
  return out;
}

std::vector<Event> EventDecoder::finish() {
  std::vector<Event> out;
  if (!buffer_.empty()) {
    // A trailing line without newline: often a truncated event from a killed process.
    if (auto e = decodeLine(buffer_)) out.push_back(std::move(*e));
    buffer_.clear();
  }
  skipping_ = false;
  return out;
}

std::string encodeCommand(const Command& c) {
  json j = json::object();
  auto i = static_cast<size_t>(c.type);
  if (i >= kCommandNames.size()) return "\n";  // Unknown: nothing meaningful to send
  j["cmd"] = std::string(kCommandNames[i]);
  if (c.type == CommandType::Profile) j["steps"] = c.steps;
  return dumpLine(j);
}

Command decodeCommand(std::string_view line) {
  Command c;
  c.raw = std::string(trim(line));
  std::string_view s = trim(line);
  if (s.empty()) return c;
  auto typeFrom = [](std::string_view name) {
    for (size_t i = 0; i < kCommandNames.size(); ++i) {
      if (kCommandNames[i] == name) return static_cast<CommandType>(i);
    }
    return CommandType::Unknown;
  };
  if (s.front() == '{') {
    json j = parseBoundedJsonOrDiscarded(s.begin(), s.end());
    if (j.is_discarded() || !j.is_object()) return c;
    auto cmd = j.find("cmd");
    if (cmd == j.end() || !cmd->is_string()) return c;
    c.type = typeFrom(cmd->get<std::string>());
    if (c.type == CommandType::Profile) {
      auto steps = j.find("steps");
      if (steps != j.end()) {
        if (!steps->is_number_integer() || steps->get<int64_t>() < 0 ||
            steps->get<int64_t>() > std::numeric_limits<int>::max()) {
          c.type = CommandType::Unknown;  // a bad step count is not silently turned into 0
          return c;
        }
        c.steps = static_cast<int>(steps->get<int64_t>());
      }
    }
    return c;
  }
  // Bare words: "stop", "profile", "profile 5".
  auto space = s.find(' ');
  std::string_view word = s.substr(0, space);
  c.type = typeFrom(word);
  if (space != std::string_view::npos) {
    std::string_view arg = trim(s.substr(space + 1));
    if (c.type != CommandType::Profile) {
      c.type = CommandType::Unknown;
      return c;
    }
    int64_t n = 0;
    for (char ch : arg) {
      if (ch < '0' || ch > '9' || n > std::numeric_limits<int>::max() / 10) {
        c.type = CommandType::Unknown;
        return c;
      }
      n = n * 10 + (ch - '0');
    }
    if (n > std::numeric_limits<int>::max()) {
      c.type = CommandType::Unknown;
      return c;
    }
    c.steps = static_cast<int>(n);
  }
  return c;
}

}  // namespace ts::core
