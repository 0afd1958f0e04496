// Engine-side readers of outside JSON refuse nesting built to exhaust the stack (10^6 levels)
// as malformed input naming the file, instead of crashing: a safetensors header, a
// tokenizer.json (core readers: tests/core/BoundedJsonTest.cpp).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

#include "../../support/DeepJson.h"
#include "trainscope/engine/io/Safetensors.h"
#include "trainscope/engine/tokenizer/HfTokenizer.h"

namespace fs = std::filesystem;

namespace {

using ts::testsupport::nestedObjects;
using ts::testsupport::ScratchDir;

template <class F>
std::string errorOf(F f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(nothing thrown)";
}

}  // namespace

TEST(DeepJson, ASafetensorsHeaderAMillionLevelsDeepIsCorrupt) {
  ScratchDir dir;
  const fs::path file = dir.path / "model.safetensors";
  const std::string header = nestedObjects(1000000, "w");
  {
    std::ofstream out(file, std::ios::binary);
    const uint64_t len = header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << header;
  }
  const std::string e = errorOf([&] { ts::engine::SafetensorsFile::load(file.string()); });
  EXPECT_NE(e.find(file.string()), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("nested deeper than 256 levels"), std::string::npos) << e.substr(0, 300);
}

TEST(DeepJson, ATokenizerJsonAMillionLevelsDeepIsNotValidJson) {
  ScratchDir dir;
  const fs::path file = dir.path / "tokenizer.json";
  std::ofstream(file) << nestedObjects(1000000, "model");
  const std::string e = errorOf([&] { ts::engine::HfTokenizer::load(file.string()); });
  EXPECT_NE(e.find("tokenizer.json"), std::string::npos) << e.substr(0, 300);
  EXPECT_NE(e.find("nested deeper than 256 levels"), std::string::npos) << e.substr(0, 300);
}
