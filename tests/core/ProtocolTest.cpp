// Event protocol: encoder stamps, round trips for every event type, the hand-written golden
// replay file, chunking, garbage and fuzz-ish input, and commands.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "trainscope/core/protocol/Protocol.h"

namespace ts::core {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kGolden = fs::path(TRAINSCOPE_TEST_DATA) / "protocol" / "golden.ndjson";

std::string readText(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

const std::vector<std::pair<EventType, const char*>> kAllTypes = {
    {EventType::Hello, "hello"},
    {EventType::Config, "config"},
    {EventType::MemoryPlan, "memory_plan"},
    {EventType::Step, "step"},
    {EventType::Memory, "memory"},
    {EventType::Eval, "eval"},
    {EventType::Kernels, "kernels"},
    {EventType::KernelSummary, "kernel_summary"},
    {EventType::Checkpoint, "checkpoint"},
    {EventType::Log, "log"},
    {EventType::Warning, "warning"},
    {EventType::Error, "error"},
    {EventType::Finished, "finished"}};

TEST(Protocol, TypeNames) {
  for (const auto& [t, name] : kAllTypes) {
    EXPECT_EQ(toString(t), name);
    EXPECT_EQ(eventTypeFromString(name), t);
  }
  EXPECT_EQ(eventTypeFromString("Step"), EventType::Unknown);
  EXPECT_EQ(eventTypeFromString(""), EventType::Unknown);
  EXPECT_EQ(eventTypeFromString("unknown"), EventType::Unknown);
}

TEST(Protocol, EncoderStampsTypeSeqTime) {
  EventEncoder enc;
  double before =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::vector<json> out;
  for (int i = 0; i < 5; ++i) {
    std::string line = enc.encode(EventType::Log, {{"message", "m" + std::to_string(i)}});
    ASSERT_EQ(line.back(), '\n');
    ASSERT_EQ(line.find('\n'), line.size() - 1) << "one event, one line";
    out.push_back(json::parse(line));
  }
  double after =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_EQ(enc.nextSeq(), 5);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(out[i]["type"], "log");
    EXPECT_EQ(out[i]["seq"].get<int64_t>(), i);
    EXPECT_TRUE(out[i]["time"].is_number_float());
    EXPECT_GE(out[i]["time"].get<double>(), before);
    EXPECT_LE(out[i]["time"].get<double>(), after);
    EXPECT_EQ(out[i]["message"], "m" + std::to_string(i));
  }
  // Caller fields named like the stamps cannot forge them.
  json forged = json::parse(enc.encode(EventType::Step, {{"type", "x"}, {"seq", 99}}));
  EXPECT_EQ(forged["type"], "step");
  EXPECT_EQ(forged["seq"], 5);
  // Invalid UTF-8 in a message does not throw and still yields valid JSON.
  std::string bad = enc.encode("log", {{"message", std::string("caf\xC3", 4)}});
  EXPECT_FALSE(json::parse(bad, nullptr, false).is_discarded());
}

// One representative payload per type, written from docs/protocol.md.
json samplePayload(EventType t) {
  switch (t) {
    case EventType::Hello:
      return {{"protocol_version", kProtocolVersion},
              {"engine_version", "0.1.0"},
              {"backend", "cpu"},
              {"ranks", 1},
              {"devices", json::array()}};
    case EventType::Config:
      return {{"config", {{"name", "x"}}}, {"run_id", 3}};
    case EventType::MemoryPlan:
    case EventType::Memory: {
      MemoryReport r;
      r.ranks.resize(2);
      r.ranks[1].rank = 1;
      r.ranks[1].at(MemoryTier::Host, MemoryCategory::OptimizerState) = {123, 456};
      return toJson(r);
    }
    case EventType::Step: {
      StepEvent s;
      s.step = 7;
      s.loss = 1.25;
      return toJson(s);
    }
    case EventType::Eval:
      return {{"step", 50}, {"val_loss", 1.5}, {"accuracy", 0.25}};
    case EventType::Kernels:
      return {{"rank", 0}, {"window", 0}, {"spans", json::array({{{"name", "matmul"}}})}};
    case EventType::KernelSummary:
      return {{"rank", 0}, {"window", 1}, {"ops", json::array({{{"name", "gelu"}}})}};
    case EventType::Checkpoint:
      return {{"step", 100}, {"path", "/r/step-100.safetensors"}, {"bytes", 4096}};
    case EventType::Log:
    case EventType::Warning:
    case EventType::Error:
      return {{"message", "text with \"quotes\"\nand a newline"}};
    case EventType::Finished:
      return toJson(FinishedEvent{"stopped", "stop command"});
    default:
      return json::object();
  }
}

TEST(Protocol, EveryEventTypeRoundTrips) {
  EventEncoder enc;
  EventDecoder dec;
  std::string stream;
  for (const auto& [t, name] : kAllTypes) stream += enc.encode(t, samplePayload(t));
  auto events = dec.feed(stream);
  ASSERT_EQ(events.size(), kAllTypes.size());
  EXPECT_EQ(dec.errorCount(), 0);
  for (size_t i = 0; i < events.size(); ++i) {
    const auto& [t, name] = kAllTypes[i];
    EXPECT_EQ(events[i].type, t);
    EXPECT_EQ(events[i].typeName, name);
    EXPECT_EQ(events[i].seq, static_cast<int64_t>(i));
    EXPECT_GT(events[i].time, 1.5e9);
    json body = events[i].body;
    body.erase("type");
    body.erase("seq");
    body.erase("time");
    EXPECT_EQ(body, samplePayload(t)) << name;
  }
}

TEST(Protocol, StepEventFieldsAndRoundTrip) {
  StepEvent s;
  s.step = 12;
  s.loss = 2.5;
  s.lr = 3e-4;
  s.grad_norm = 0.75;
  s.tokens = 123456789012LL;
  s.tokens_per_s = 1e5;
  s.step_ms = 12.5;
  s.loss_scale = 32768;
  s.skipped = true;
  json j = toJson(s);
  // The fixed field names, by hand.
  json expected = {{"step", 12},
                   {"loss", 2.5},
                   {"lr", 3e-4},
                   {"grad_norm", 0.75},
                   {"tokens", 123456789012LL},
                   {"tokens_per_s", 1e5},
                   {"step_ms", 12.5},
                   {"loss_scale", 32768.0},
                   {"skipped", true}};
  EXPECT_EQ(j, expected);
  StepEvent back = stepEventFromJson(json::parse(j.dump()));
  EXPECT_EQ(back.step, s.step);
  EXPECT_EQ(back.loss, s.loss);
  EXPECT_EQ(back.lr, s.lr);
  EXPECT_EQ(back.grad_norm, s.grad_norm);
  EXPECT_EQ(back.tokens, s.tokens);
  EXPECT_EQ(back.tokens_per_s, s.tokens_per_s);
  EXPECT_EQ(back.step_ms, s.step_ms);
  EXPECT_EQ(back.loss_scale, s.loss_scale);
  EXPECT_EQ(back.skipped, s.skipped);
}

TEST(Protocol, NanLossTravelsAsNull) {
  StepEvent s;
  s.step = 3;
  s.loss = std::nan("");
  EventEncoder enc;
  std::string line = enc.encode(EventType::Step, toJson(s));
  EXPECT_NE(line.find("\"loss\":null"), std::string::npos) << line;
  EventDecoder dec;
  auto e = dec.decodeLine(line);
  ASSERT_TRUE(e);
  EXPECT_TRUE(std::isnan(stepEventFromJson(e->body).loss));
}

TEST(Protocol, StepEventRejectsWrongTypes) {
  EXPECT_THROW(stepEventFromJson(json{{"loss", 1.0}}), std::invalid_argument);  // no step
  EXPECT_THROW(stepEventFromJson(json{{"step", "1"}, {"loss", 1.0}}), std::invalid_argument);
  EXPECT_THROW(stepEventFromJson(json{{"step", 1}, {"loss", "high"}}), std::invalid_argument);
  EXPECT_THROW(stepEventFromJson(json{{"step", 1}, {"loss", 1}, {"skipped", 1}}),
               std::invalid_argument);
  EXPECT_THROW(stepEventFromJson(json::array()), std::invalid_argument);
  // Optional fields default; integers are fine numbers.
  StepEvent e = stepEventFromJson(json{{"step", 1}, {"loss", 2}});
  EXPECT_EQ(e.loss, 2.0);
  EXPECT_EQ(e.loss_scale, 1.0);
  EXPECT_FALSE(e.skipped);
}

TEST(Protocol, FinishedEvent) {
  auto f = finishedEventFromJson(json{{"status", "failed"}, {"reason", "loss is NaN"}});
  EXPECT_EQ(f.status, "failed");
  EXPECT_EQ(f.reason, "loss is NaN");
  EXPECT_THROW(finishedEventFromJson(json{{"status", "done"}}), std::invalid_argument);
  EXPECT_THROW(finishedEventFromJson(json{{"reason", "x"}}), std::invalid_argument);
}

TEST(Protocol, GoldenReplay) {
  // The golden file was written by hand from docs/protocol.md: one event of every type.
  const std::vector<const char*> expected = {
      "hello",  "log",  "config",     "memory_plan", "step",
      "memory", "step", "warning",    "kernels",     "kernel_summary",
      "step",   "eval", "checkpoint", "error",       "finished"};
  std::string text = readText(kGolden);
  ASSERT_FALSE(text.empty());
  EventDecoder dec;
  std::vector<std::string> errors;
  dec.setErrorHandler([&](const std::string& m, const std::string&) { errors.push_back(m); });
  auto events = dec.feed(text);
  auto tail = dec.finish();
  events.insert(events.end(), tail.begin(), tail.end());
  ASSERT_EQ(events.size(), expected.size());
  EXPECT_EQ(dec.errorCount(), 0);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(dec.unknownCount(), 0);
  std::set<EventType> seen;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].typeName, expected[i]);
    EXPECT_NE(events[i].type, EventType::Unknown);
    EXPECT_EQ(events[i].seq, static_cast<int64_t>(i));
    EXPECT_GE(events[i].time, 1718000000.0);
    seen.insert(events[i].type);
  }
  EXPECT_EQ(seen.size(), kAllTypes.size()) << "golden file must cover every event type";
  EXPECT_EQ(events.front().type, EventType::Hello);
  EXPECT_EQ(events.back().type, EventType::Finished);
  EXPECT_EQ(events.front().body["protocol_version"], kProtocolVersion);

  // Typed payloads decode to the values written in the file.
  StepEvent s1 = stepEventFromJson(events[4].body);
  EXPECT_EQ(s1.step, 1);
  EXPECT_DOUBLE_EQ(s1.loss, 2.71);
  EXPECT_EQ(s1.tokens, 1024);
  StepEvent s2 = stepEventFromJson(events[6].body);
  EXPECT_TRUE(std::isnan(s2.loss));
  EXPECT_TRUE(s2.skipped);
  EXPECT_DOUBLE_EQ(s2.loss_scale, 32768.0);
  MemoryReport plan = memoryReportFromJson(events[3].body);
  ASSERT_EQ(plan.ranks.size(), 1u);
  EXPECT_EQ(plan.ranks[0].at(MemoryTier::Device, MemoryCategory::OptimizerState).peak, 2000);
  EXPECT_EQ(plan.ranks[0].totalPeak(MemoryTier::Device), 1000 + 1000 + 2000 + 500 + 64);
  MemoryReport mem = memoryReportFromJson(events[5].body);
  EXPECT_EQ(mem.ranks[0].at(MemoryTier::Device, MemoryCategory::Activations).current, 0);
  EXPECT_EQ(mem.ranks[0].at(MemoryTier::Device, MemoryCategory::Activations).peak, 480);
  EXPECT_EQ(mem.ranks[0].totalPeak(MemoryTier::Host), 0);  // tier absent in the file
  auto fin = finishedEventFromJson(events.back().body);
  EXPECT_EQ(fin.status, "completed");
}

std::vector<Event> decodeChunked(const std::string& text, std::mt19937& rng, EventDecoder& dec,
                                 size_t maxChunk) {
  std::vector<Event> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t n = 1 + rng() % maxChunk;
    auto ev = dec.feed(std::string_view(text).substr(pos, n));
    out.insert(out.end(), ev.begin(), ev.end());
    pos += n;
  }
  auto tail = dec.finish();
  out.insert(out.end(), tail.begin(), tail.end());
  return out;
}

TEST(Protocol, ArbitraryChunkBoundaries) {
  std::string text = readText(kGolden);
  EventDecoder whole;
  auto reference = whole.feed(text);
  std::mt19937 rng(1);
  for (size_t maxChunk : {1, 2, 3, 7, 64, 4096}) {
    EventDecoder dec;
    auto events = decodeChunked(text, rng, dec, maxChunk);
    ASSERT_EQ(events.size(), reference.size()) << maxChunk;
    EXPECT_EQ(dec.errorCount(), 0);
    for (size_t i = 0; i < events.size(); ++i) EXPECT_EQ(events[i].body, reference[i].body);
  }
}

TEST(Protocol, CrLfAndBlankLinesAndMissingFinalNewline) {
  EventDecoder dec;
  auto ev = dec.feed(
      "\n\r\n{\"type\":\"log\",\"seq\":0,\"time\":1.5,\"message\":\"a\"}\r\n   \n"
      "{\"type\":\"log\",\"seq\":1,\"time\":2}");
  EXPECT_EQ(ev.size(), 1u);
  auto tail = dec.finish();
  ASSERT_EQ(tail.size(), 1u);
  EXPECT_EQ(tail[0].seq, 1);
  EXPECT_EQ(dec.errorCount(), 0);
}

TEST(Protocol, GarbageIsCountedAndSkipped) {
  // Each of these lines is one error; the valid events around them still decode.
  const std::vector<std::string> garbage = {
      "not json at all",
      "{\"type\":\"step\",\"seq\":1,\"time\":",  // truncated
      "[1,2,3]",
      "\"a string\"",
      "42",
      "{}",
      "{\"seq\":1,\"time\":1}",                        // no type
      "{\"type\":7,\"seq\":1,\"time\":1}",             // type not a string
      "{\"type\":\"step\",\"time\":1}",                // no seq
      "{\"type\":\"step\",\"seq\":\"1\",\"time\":1}",  // seq a string
      "{\"type\":\"step\",\"seq\":1.5,\"time\":1}",    // seq not an integer
      "{\"type\":\"step\",\"seq\":1}",                 // no time
      "{\"type\":\"step\",\"seq\":1,\"time\":\"now\"}",
      "{\"type\":\"step\",\"seq\":1,\"time\":1}}",  // trailing junk
      std::string("\x00\xff\xfe{", 4)};
  EventEncoder enc;
  std::string stream = enc.encode(EventType::Hello, {});
  for (const auto& g : garbage) stream += g + "\n";
  stream += enc.encode(EventType::Finished, toJson(FinishedEvent{"completed", ""}));
  EventDecoder dec;
  int handlerCalls = 0;
  dec.setErrorHandler([&](const std::string& msg, const std::string&) {
    ++handlerCalls;
    EXPECT_FALSE(msg.empty());
  });
  auto events = dec.feed(stream);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].type, EventType::Hello);
  EXPECT_EQ(events[1].type, EventType::Finished);
  EXPECT_EQ(dec.errorCount(), static_cast<int64_t>(garbage.size()));
  EXPECT_EQ(handlerCalls, static_cast<int>(garbage.size()));
}

TEST(Protocol, UnknownEventTypesAreKept) {
  EventDecoder dec;
  auto e = dec.decodeLine("{\"type\":\"gpu_temperature\",\"seq\":4,\"time\":10.5,\"celsius\":71}");
  ASSERT_TRUE(e);
  EXPECT_EQ(e->type, EventType::Unknown);
  EXPECT_EQ(e->typeName, "gpu_temperature");
  EXPECT_EQ(e->seq, 4);
  EXPECT_DOUBLE_EQ(e->time, 10.5);
  EXPECT_EQ(e->body["celsius"], 71);
  EXPECT_EQ(dec.errorCount(), 0);
  EXPECT_EQ(dec.unknownCount(), 1);
}

TEST(Protocol, ThrowingErrorHandlerDoesNotBreakDecoding) {
  EventDecoder dec;
  dec.setErrorHandler(
      [](const std::string&, const std::string&) { throw std::runtime_error("x"); });
  std::vector<Event> ev;
  EXPECT_NO_THROW(ev = dec.feed("junk\n{\"type\":\"log\",\"seq\":0,\"time\":1}\n"));
  EXPECT_EQ(ev.size(), 1u);
  EXPECT_EQ(dec.errorCount(), 1);
}

TEST(Protocol, FuzzRandomBytesTruncationsAndChunking) {
  std::string golden = readText(kGolden);
  auto goldenLines = lines(golden);
  std::mt19937 rng(12345);
  for (int round = 0; round < 200; ++round) {
    // Build a stream of intact lines, strictly truncated lines and random byte lines.
    std::string stream;
    int64_t expectErrors = 0, expectEvents = 0;
    int n = 5 + static_cast<int>(rng() % 20);
    for (int i = 0; i < n; ++i) {
      const std::string& l = goldenLines[rng() % goldenLines.size()];
      switch (rng() % 3) {
        case 0:
          stream += l + "\n";
          ++expectEvents;
          break;
        case 1: {
          // A strict, non-empty prefix of a JSON object line is never valid JSON.
          size_t cut = 1 + rng() % (l.size() - 1);
          stream += l.substr(0, cut) + "\n";
          ++expectErrors;
          break;
        }
        default: {
          std::string junk;
          size_t len = 1 + rng() % 60;
          for (size_t k = 0; k < len; ++k) {
            char ch = static_cast<char>(rng() % 256);
            if (ch == '\n') ch = 'x';
            junk += ch;
          }
          // Random bytes that start with 'x' are never a JSON object.
          stream += "x" + junk + "\n";
          ++expectErrors;
        }
      }
    }
    EventDecoder dec;
    std::vector<Event> events;
    ASSERT_NO_THROW(events = decodeChunked(stream, rng, dec, 1 + rng() % 97));
    EXPECT_EQ(static_cast<int64_t>(events.size()), expectEvents);
    EXPECT_EQ(dec.errorCount(), expectErrors);
  }
  // Pure noise, including newlines: must never crash; every event returned is well-formed.
  for (int round = 0; round < 200; ++round) {
    std::string noise;
    size_t len = rng() % 2000;
    for (size_t k = 0; k < len; ++k) noise += static_cast<char>(rng() % 256);
    EventDecoder dec;
    std::vector<Event> events;
    ASSERT_NO_THROW(events = decodeChunked(noise, rng, dec, 50));
    for (const auto& e : events) EXPECT_TRUE(e.body.is_object());
  }
}

TEST(Protocol, OversizedLineIsDroppedOnce) {
  EventDecoder dec;
  std::string big(1 << 20, 'a');
  for (int i = 0; i < 70; ++i) dec.feed(big);  // > 64 MiB without a newline
  auto ev = dec.feed("tail of the long line\n{\"type\":\"log\",\"seq\":0,\"time\":1}\n");
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].type, EventType::Log);
  EXPECT_EQ(dec.errorCount(), 1);
}

TEST(Protocol, Commands) {
  struct Case {
    Command cmd;
    const char* line;
  };
  const std::vector<Case> cases = {
      {{CommandType::Stop, 0, ""}, "{\"cmd\":\"stop\"}\n"},
      {{CommandType::Pause, 0, ""}, "{\"cmd\":\"pause\"}\n"},
      {{CommandType::Resume, 0, ""}, "{\"cmd\":\"resume\"}\n"},
      {{CommandType::Checkpoint, 0, ""}, "{\"cmd\":\"checkpoint\"}\n"},
      {{CommandType::Profile, 5, ""}, "{\"cmd\":\"profile\",\"steps\":5}\n"}};
  for (const auto& c : cases) {
    EXPECT_EQ(json::parse(encodeCommand(c.cmd)), json::parse(c.line));
    EXPECT_EQ(encodeCommand(c.cmd).back(), '\n');
    Command d = decodeCommand(c.line);
    EXPECT_EQ(d.type, c.cmd.type) << c.line;
    EXPECT_EQ(d.steps, c.cmd.steps) << c.line;
  }
  EXPECT_EQ(decodeCommand("stop").type, CommandType::Stop);
  EXPECT_EQ(decodeCommand("  pause\r\n").type, CommandType::Pause);
  EXPECT_EQ(decodeCommand("resume").type, CommandType::Resume);
  EXPECT_EQ(decodeCommand("checkpoint").type, CommandType::Checkpoint);
  Command p = decodeCommand("profile 12");
  EXPECT_EQ(p.type, CommandType::Profile);
  EXPECT_EQ(p.steps, 12);
  p = decodeCommand("profile");
  EXPECT_EQ(p.type, CommandType::Profile);
  EXPECT_EQ(p.steps, 0);
  EXPECT_EQ(decodeCommand("stop").raw, "stop");
  for (const char* bad :
       {"", "halt", "STOP", "stop now", "profile x", "profile -1", "profile 99999999999",
        "{\"cmd\":\"explode\"}", "{\"cmd\":1}", "{\"command\":\"stop\"}",
        "{\"cmd\":\"profile\",\"steps\":-3}", "{\"cmd\":\"profile\",\"steps\":\"5\"}",
        "{\"cmd\":\"stop\"", "[\"stop\"]"}) {
    EXPECT_EQ(decodeCommand(bad).type, CommandType::Unknown) << bad;
  }
}

}  // namespace
}  // namespace ts::core
