#pragma once
// Inputs for the nesting-depth tests of the JSON readers (BoundedJsonTest, DeepJsonTest).
#include <unistd.h>

#include <filesystem>
#include <string>

namespace ts::testsupport {

// {"key":{"key":...1...}} nested `depth` deep.
inline std::string nestedObjects(int depth, const std::string& key = "a") {
  std::string s;
  s.reserve(static_cast<size_t>(depth) * (key.size() + 5) + 1);
  for (int i = 0; i < depth; ++i) s += "{\"" + key + "\":";
  s += "1";
  s.append(static_cast<size_t>(depth), '}');
  return s;
}

// A fresh folder under /tmp, removed at the end of the test.
struct ScratchDir {
  std::filesystem::path path;
  ScratchDir() {
    char tmpl[] = "/tmp/ts_deepjson_XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~ScratchDir() { std::filesystem::remove_all(path); }
};

}  // namespace ts::testsupport
