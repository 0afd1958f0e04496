#pragma once
// The engine <-> GUI event protocol (docs/protocol.md): NDJSON events on the engine's stdout,
// NDJSON commands on its stdin. One encoder/decoder, used by the engine and the GUI.
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainscope/core/plan/MemoryTable.h"

namespace ts::core {

inline constexpr int kProtocolVersion = 1;

enum class EventType {
  Hello,
  Config,
  MemoryPlan,
  Step,
  Memory,
  Eval,
  Kernels,
  KernelSummary,
  Checkpoint,
  Log,
  Warning,
  Error,
  Finished,
  Unknown
};
std::string_view toString(EventType t);             // "hello", "memory_plan", "kernel_summary", ...
EventType eventTypeFromString(std::string_view s);  // Unknown for anything else

// A decoded event: type, seq and time are lifted out; body is the whole object.
struct Event {
  EventType type = EventType::Unknown;
  std::string typeName;  // as received (kept for unknown types)
  int64_t seq = 0;
  double time = 0.0;  // seconds since the Unix epoch
  nlohmann::json body;
};

struct StepEvent {
  int64_t step = 0;
  double loss = 0, lr = 0, grad_norm = 0;
  int64_t tokens = 0;  // tokens seen so far
  double tokens_per_s = 0, step_ms = 0, loss_scale = 1.0;
  bool skipped = false;
};
nlohmann::json toJson(const StepEvent& e);             // fields only (no type/seq/time)
StepEvent stepEventFromJson(const nlohmann::json& j);  // throws std::invalid_argument

struct FinishedEvent {
  std::string status;  // completed | stopped | failed
  std::string reason;
};
nlohmann::json toJson(const FinishedEvent& e);
FinishedEvent finishedEventFromJson(const nlohmann::json& j);  // throws std::invalid_argument

// Stamps type, seq (monotonic from 0) and time and serializes to one line ("...\n").
class EventEncoder {
 public:
  std::string encode(EventType type, nlohmann::json fields = nlohmann::json::object());
  std::string encode(std::string_view type, nlohmann::json fields);
  int64_t nextSeq() const { return seq_; }

 private:
  int64_t seq_ = 0;
};

// Incremental decoder: feed arbitrary chunks of bytes; complete lines are decoded.
// Garbage (bad JSON, non-object, missing/wrong-typed type/seq/time) is counted and reported
// through the error callback, then skipped; it never throws.
class EventDecoder {
 public:
  using ErrorHandler = std::function<void(const std::string& message, const std::string& line)>;
  void setErrorHandler(ErrorHandler h) { onError_ = std::move(h); }
  std::vector<Event> feed(std::string_view chunk);
  std::vector<Event> finish();  // decode a trailing line without newline
  std::optional<Event> decodeLine(std::string_view line);
  int64_t errorCount() const { return errors_; }
  // Well-formed events of a type this build does not know (returned as Unknown, not errors).
  int64_t unknownCount() const { return unknown_; }

 private:
  std::string buffer_;
  bool skipping_ = false;  // inside an oversized line, dropping bytes up to its newline
  int64_t errors_ = 0;
  int64_t unknown_ = 0;
  ErrorHandler onError_;
};

// Commands on the engine's stdin: {"cmd":"stop"} | pause | resume | checkpoint |
// {"cmd":"profile","steps":N}. A bare word line ("stop") is accepted too.
enum class CommandType { Stop, Pause, Resume, Checkpoint, Profile, Unknown };
struct Command {
  CommandType type = CommandType::Unknown;
  int steps = 0;  // profile
  std::string raw;
};
std::string encodeCommand(const Command& c);  // one line with "\n"
Command decodeCommand(std::string_view line);

}  // namespace ts::core
