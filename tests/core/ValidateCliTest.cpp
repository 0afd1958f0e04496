// Runs the real `trainscope-engine validate` executable: exit codes, stdout/stderr contents.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;
  std::string err;
};

// Runs the engine with args (already shell-quoted), capturing stdout and stderr.
Result runEngine(const std::string& args) {
  fs::path errFile =
      fs::temp_directory_path() / ("core_tests_stderr_" + std::to_string(::getpid()) + ".txt");
  std::string cmd =
      std::string("'") + TRAINSCOPE_ENGINE_EXE + "' " + args + " 2>'" + errFile.string() + "'";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (FILE* e = std::fopen(errFile.c_str(), "rb")) {
    while ((n = std::fread(buf.data(), 1, buf.size(), e)) > 0) r.err.append(buf.data(), n);
    std::fclose(e);
  }
  fs::remove(errFile);
  return r;
}

std::string q(const fs::path& p) {
  return "'" + p.string() + "'";
}

const fs::path kPresets = fs::path(TRAINSCOPE_SOURCE_DIR) / "resources" / "presets";
const fs::path kConfigs = fs::path(TRAINSCOPE_TEST_DATA) / "configs";

TEST(ValidateCli, PresetExitsZeroAndPrintsResolvedConfig) {
  Result r = runEngine("validate " + q(kPresets / "default.json"));
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << r.out;
  EXPECT_EQ(j["name"], "default");
  // Defaults filled: keys the preset does not write are present.
  EXPECT_TRUE(j.contains(nlohmann::json::json_pointer("/finetune/lora/targets")));
  EXPECT_TRUE(j.contains(nlohmann::json::json_pointer("/precision/loss_scale/growth_interval")));
}

TEST(ValidateCli, SetOverridesAreApplied) {
  Result r = runEngine("validate " + q(kPresets / "default.json") +
                       " --set precision.policy=bf16 --set model.layers=3");
  ASSERT_EQ(r.code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["precision"]["policy"], "bf16");
  EXPECT_EQ(j["model"]["layers"], 3);

  r = runEngine("validate " + q(kPresets / "default.json") + " --set precision.policy=fp64");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("precision.policy"), std::string::npos) << r.err;
}

TEST(ValidateCli, BrokenFileExitsTwoAndListsEveryProblem) {
  Result r = runEngine("validate " + q(kConfigs / "three-mistakes.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(r.out.empty()) << r.out;
  for (const char* path : {"model.layers", "optimizer.lr", "precision.polcy"}) {
    EXPECT_NE(r.err.find(path), std::string::npos) << path << "\n" << r.err;
  }
  EXPECT_NE(r.err.find("3 problems"), std::string::npos) << r.err;
}

TEST(ValidateCli, MalformedAndMissingFiles) {
  Result r = runEngine("validate " + q(kConfigs / "malformed.json"));
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("line 7, column 3"), std::string::npos) << r.err;
  r = runEngine("validate /nonexistent/config.json");
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("/nonexistent/config.json"), std::string::npos) << r.err;
}

TEST(ValidateCli, HelpAndUsageErrors) {
  Result r = runEngine("validate --help");
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--set"), std::string::npos) << r.out;
  r = runEngine("validate");  // CONFIG is required
  EXPECT_EQ(r.code, 2);
}

}  // namespace
