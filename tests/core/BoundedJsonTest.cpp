// JSON nested to exhaust the stack (10^6 levels) is refused while parsing, as malformed input
// naming the limit, by every core reader of outside JSON: the config file and `--set` values
// (validate, the real binary), protocol lines and commands, a Hugging Face config.json and
// safetensors header. 256 levels still parse; 257 do not.
#include "trainscope/core/protocol/BoundedJson.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "../support/DeepJson.h"
#include "trainscope/core/config/Config.h"
#include "trainscope/core/model/HfConfig.h"
#include "trainscope/core/protocol/Protocol.h"

namespace fs = std::filesystem;

namespace {

using ts::testsupport::nestedObjects;
using ts::testsupport::ScratchDir;

constexpr int kDeep = 1000000;

std::string nestedArrays(int depth) {
  return std::string(static_cast<size_t>(depth), '[') +
         std::string(static_cast<size_t>(depth), ']');
}
}  // namespace

TEST(BoundedJson, TheLimitIsADepthNotASize) {
  EXPECT_NO_THROW(ts::core::parseBoundedJson(nestedArrays(ts::core::kMaxJsonDepth)));
  EXPECT_THROW(ts::core::parseBoundedJson(nestedArrays(ts::core::kMaxJsonDepth + 1)),
               nlohmann::json::parse_error);
  // Wide is fine: a million siblings are not deep.
  std::string wide = "[";
  for (int i = 0; i < kDeep; ++i) wide += i ? ",[]" : "[]";
  wide += "]";
  EXPECT_EQ(ts::core::parseBoundedJson(wide).size(), static_cast<size_t>(kDeep));
  EXPECT_TRUE(ts::core::parseBoundedJsonOrDiscarded(nestedObjects(kDeep)).is_discarded());
}

TEST(BoundedJson, ValidateRefusesADeepConfigNamingTheFile) {
  ScratchDir dir;
  const fs::path cfg = dir.path / "deep.json";
  std::ofstream(cfg) << nestedObjects(kDeep, "model");
  const std::string cmd =
      std::string("'") + TRAINSCOPE_ENGINE_EXE + "' validate '" + cfg.string() + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  const int status = ::pclose(p);
  ASSERT_TRUE(WIFEXITED(status)) << "killed by a signal (the stack): " << out.substr(0, 300);
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(out.find(cfg.string()), std::string::npos) << out.substr(0, 500);
  EXPECT_NE(out.find("nested deeper than 256 levels"), std::string::npos) << out.substr(0, 500);
}

TEST(BoundedJson, ADeepSetValueIsNotACrash) {
  ScratchDir dir;
  const fs::path cfg = dir.path / "run.json";
  std::ofstream(cfg) << R"({"name": "deep-set"})";
  ts::core::ValidationContext ctx;
  const auto r =
      ts::core::loadConfigWithOverrides(cfg.string(), {"notes=" + nestedArrays(kDeep)}, ctx);
  // Not JSON within the bound, so the text itself: a (long) string of brackets for the notes.
  ASSERT_TRUE(r.ok()) << (r.issues.empty() ? "" : r.issues.front().toString());
  EXPECT_EQ(r.config->notes.size(), static_cast<size_t>(2 * kDeep));
}

TEST(BoundedJson, ProtocolLinesAndCommandsThatDeepAreMalformed) {
  ts::core::EventDecoder d;
  std::string message;
  d.setErrorHandler([&](const std::string& m, const std::string&) { message = m; });
  const auto events = d.feed("{\"type\":\"log\",\"x\":" + nestedArrays(kDeep) + "}\n");
  EXPECT_TRUE(events.empty());
  EXPECT_EQ(d.errorCount(), 1);
  EXPECT_FALSE(message.empty());
  EXPECT_EQ(ts::core::decodeCommand("{\"cmd\":" + nestedObjects(kDeep) + "}").type,
            ts::core::CommandType::Unknown);
}

TEST(BoundedJson, HuggingFaceFilesThatDeepNameTheFile) {
  ScratchDir dir;
  std::ofstream(dir.path / "config.json") << nestedObjects(kDeep, "architectures");
  try {
    ts::core::readHfConfig(dir.path.string());
    ADD_FAILURE() << "a config.json a million levels deep was read";
  } catch (const ts::core::HfConfigError& e) {
    EXPECT_NE(std::string(e.what()).find((dir.path / "config.json").string()), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
  // A safetensors file whose header is that deep.
  const std::string header = nestedObjects(kDeep, "w");
  std::ofstream st(dir.path / "model.safetensors", std::ios::binary);
  const uint64_t len = header.size();
  st.write(reinterpret_cast<const char*>(&len), 8);
  st << header;
  st.close();
  try {
    ts::core::readHfStoredWeights(dir.path.string());
    ADD_FAILURE() << "a safetensors header a million levels deep was read";
  } catch (const ts::core::HfConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nested deeper"), std::string::npos) << e.what();
  }
}
