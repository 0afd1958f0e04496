// The engine <-> GUI protocol (core/Protocol.h): the input is an NDJSON event stream fed to
// EventDecoder in chunks whose sizes come from the first byte (lines split across feeds), then
// finish(). The decoder never throws (garbage is counted); stepEventFromJson and
// finishedEventFromJson throw std::invalid_argument on bad bodies. Every event decoded must
// re-encode into a line that decodes to the same type and body; every line is also read as a
// stdin command, and a recognized command must round-trip through encodeCommand.
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

#include "FuzzSupport.h"
#include "trainscope/core/protocol/Protocol.h"

using namespace ts::core;

namespace {
void check(const Event& e) {
  if (e.type == EventType::Step) {
    try {
      const StepEvent s = stepEventFromJson(e.body);
      (void)toJson(s).dump();
    } catch (const std::invalid_argument&) {
    }
  } else if (e.type == EventType::Finished) {
    try {
      const FinishedEvent f = finishedEventFromJson(e.body);
      const FinishedEvent back = finishedEventFromJson(toJson(f));
      TS_FUZZ_CHECK(back.status == f.status && back.reason == f.reason, "finished round trip");
    } catch (const std::invalid_argument&) {
    }
  }
  // Re-encoded (the stamps replaced) and decoded again: still an event of the same type.
  EventEncoder enc;
  const std::string line = enc.encode(e.typeName, e.body);
  TS_FUZZ_CHECK(!line.empty() && line.back() == '\n' &&
                    line.find('\n') == line.size() - 1,
                "an encoded event is one line");
  EventDecoder dec;
  const auto again = dec.decodeLine(line);
  TS_FUZZ_CHECK(again.has_value(), "a re-encoded event decodes: " + line.substr(0, 200));
  TS_FUZZ_CHECK(again->typeName == e.typeName && again->type == e.type, "type survives");
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > ts::fuzz::kMaxInput) return 0;
  ts::fuzz::Bytes in(data, size);
  const size_t chunk = 1 + in.byte() % 64;
  const std::string_view stream = in.rest();
  EventDecoder dec;
  int64_t handlerCalls = 0;
  dec.setErrorHandler([&](const std::string&, const std::string&) { ++handlerCalls; });
  for (size_t pos = 0; pos < stream.size(); pos += chunk)
    for (const Event& e : dec.feed(stream.substr(pos, chunk))) check(e);
  for (const Event& e : dec.finish()) check(e);
  TS_FUZZ_CHECK(handlerCalls == dec.errorCount(), "every error reaches the handler");

  // Each line as a command on the engine's stdin.
  for (std::string_view rest = stream; !rest.empty();) {
    const size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    const Command c = decodeCommand(line);
    if (c.type == CommandType::Unknown) continue;
    const Command back = decodeCommand(encodeCommand(c));
    TS_FUZZ_CHECK(back.type == c.type && back.steps == c.steps, "command round trip");
  }
  return 0;
}
